"""Findings of a hostile-input sweep of the public API (session 27): every public callable of
``accelrt``, ``accelrt.cpu``, ``accelrt.memory``, ``accelrt.random``, ``accelrt.comm`` and the
methods of its classes, called with a palette of hostile arguments, each call in a forked
child. Each test failed before its fix. The torch expectations were observed by running torch
2.14.1 (a CUDA build on a machine without a GPU, so the CPU side and the argument parser run)
and are written here as literals (CI has no torch).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import accelrt as acc


def _nested(depth: int) -> list[Any]:
    data: Any = 1.0
    for _ in range(depth):
        data = [data]
    return data


def _self_containing() -> list[Any]:
    data: list[Any] = []
    data.append(data)
    return data


def _cycle_after_first() -> list[Any]:
    data: list[Any] = [[1.0]]
    data.append(data)
    return data


# ---------------------------------------------------------------------- asarray's nesting

@pytest.mark.parametrize("make", [_self_containing, _cycle_after_first, lambda: _nested(65),
                                  lambda: _nested(5000)],
                         ids=["self", "cycle", "65-deep", "5000-deep"])
def test_asarray_refuses_endless_or_too_deep_data(make: Any) -> None:
    # observed on torch 2.14.1: torch.asarray(x) with x = [x], or a list nested 2000 deep,
    # raises ValueError "too many dimensions 'list'" (a list nested 100 deep is a 100-d
    # tensor: accelrt reads data with numpy, whose limit is 64 dimensions). Before: a
    # RecursionError, or for 65 levels a ValueError about "different lengths".
    with pytest.raises(ValueError, match=r"^too many dimensions 'list'"):
        acc.asarray(make(), device="cpu:0")


def test_asarray_takes_data_nested_64_deep() -> None:
    assert acc.asarray(_nested(64), device="cpu:0").shape == (1,) * 64


# ---------------------------------------------------------------------- device indices

_INDEX_CALLS = {
    "device(type, index)": lambda i: acc.device("cpu", i),
    "device(index)": lambda i: acc.device(i),
    "set_default_device": lambda i: acc.set_default_device(i),
    "Stream(device_index=)": lambda i: acc.Stream(stream_id=1, device_index=i, device_type="cpu"),
}


@pytest.mark.parametrize("name", list(_INDEX_CALLS))
@pytest.mark.parametrize("index", [2**63, np.uint64(2**64 - 1), 10**400],
                         ids=["2**63", "uint64-max", "10**400"])
def test_a_device_index_beyond_int64_is_refused(name: str, index: Any) -> None:
    # observed on torch 2.14.1: torch.device("cpu", 2**63), torch.device(2**63),
    # torch.device(np.uint64(2**64 - 1)) and torch.set_default_device(2**63) raise ValueError
    # "Overflow when unpacking long long" (2**63 - 1 is taken). Before: accelrt made
    # device(type='cpu', index=9223372036854775808).
    if name.startswith("Stream") and not isinstance(index, int):
        return          # the stream triple takes Python ints only (a TypeError)
    before = acc.get_default_device()
    with pytest.raises(ValueError, match=r"Overflow when unpacking long long"):
        _INDEX_CALLS[name](index)
    assert acc.get_default_device() == before


def test_the_largest_int64_is_still_a_device_index() -> None:
    assert acc.device("cpu", 2**63 - 1).index == 2**63 - 1
