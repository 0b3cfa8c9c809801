"""Review of the session-36 runtime changes (one-element ``Array`` conversions and
``__index__``, ``asarray`` of sequence-protocol objects): each test failed before its fix.

The expected behaviour is torch 2.15.0's, observed on its CPU build with the same inputs
(``torch.asarray`` of a ``UserList`` that holds itself, ``int``/``operator.index`` of a uint64
tensor beyond int64, ``torch._C._cuda_set_sync_debug_mode`` of a tensor, ``torch.randint`` with
a bool tensor bound).
"""

from __future__ import annotations

import operator
from collections import UserList
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import accelrt as acc

DEV = "cpu:0"


def _self_after_first() -> Any:
    u: Any = UserList([1.0])
    u.append(u)
    return u


def _self_first() -> Any:
    u: Any = UserList()
    u.append(u)
    return u


def _self_replacing_a_row() -> Any:
    u: Any = UserList([[1.0], [2.0]])
    u[1] = u
    return u


def _self_inside_a_list() -> Any:
    inner: Any = UserList([1.0])
    inner.append(inner)
    return [inner]


@pytest.mark.parametrize(("make", "error", "words"), [
    (_self_after_first, TypeError, "new(): self-referential lists are incompatible"),
    (_self_replacing_a_row, TypeError, "new(): self-referential lists are incompatible"),
    (_self_inside_a_list, TypeError, "new(): self-referential lists are incompatible"),
    (_self_first, ValueError, "too many dimensions 'UserList'"),
])
def test_asarray_of_a_sequence_object_that_holds_itself(make: Callable[[], Any], error: type,
                                                         words: str) -> None:
    """torch 2.15: ``torch.asarray(u)`` of a ``UserList`` that holds itself raises what it
    raises for a list (TypeError "new(): self-referential lists are incompatible", or, as its
    own first item, ValueError "too many dimensions 'UserList'"); accelrt's reading of
    sequence-protocol objects recursed into it until RecursionError."""
    with pytest.raises(error) as info:
        acc.asarray(make(), device=DEV)
    assert str(info.value).startswith(words), str(info.value)


@pytest.mark.parametrize("convert", [int, operator.index], ids=["int", "index"])
def test_int_and_index_of_a_uint64_value_beyond_int64(convert: Callable[[Any], int]) -> None:
    """torch 2.15: ``int()`` and ``operator.index()`` of a uint64 tensor holding 2**63 + 5
    raise RuntimeError "value cannot be converted to type int64_t without overflow" (its
    ``item()`` and ``float()`` still read it); accelrt returned 2**63 + 5."""
    big = acc.asarray(2**63 + 5, dtype="uint64", device=DEV)
    with pytest.raises(RuntimeError, match="value cannot be converted to type int64_t "
                                           "without overflow"):
        convert(big)
    assert float(big) == float(2**63 + 5)
    assert convert(acc.asarray(2**63 - 1, dtype="uint64", device=DEV)) == 2**63 - 1
    assert int(acc.asarray(1e30, device=DEV)) == int(np.float32(1e30))   # floats: unbounded


@pytest.fixture
def cpu_sync_debug() -> Iterator[None]:
    yield
    acc.set_sync_debug_mode(0, "cpu")


@pytest.mark.parametrize("value", [
    pytest.param(lambda: acc.asarray(1, device=DEV), id="Array"),
    pytest.param(lambda: np.array(1), id="0-d ndarray"),
])
def test_set_sync_debug_mode_refuses_an_array(cpu_sync_debug: None,
                                              value: Callable[[], Any]) -> None:
    """torch 2.15's ``_cuda_set_sync_debug_mode`` takes an int or a numpy integer only
    (``THPUtils_checkLong``): a tensor or a 0-d numpy array raises RuntimeError "invalid
    argument to set_sync_debug_mode" (checked on its CPU build). accelrt read a one-element
    Array through ``__index__`` (a synchronizing read: under "error" it raised the sync error
    instead)."""
    v = value()
    acc.set_sync_debug_mode("error", "cpu")
    with pytest.raises(RuntimeError) as info:
        acc.set_sync_debug_mode(v, "cpu")
    assert str(info.value) == "invalid argument to set_sync_debug_mode"
    assert isinstance(info.value, TypeError)
    assert acc.get_sync_debug_mode("cpu") == 2   # unchanged
    acc.set_sync_debug_mode(np.int64(1), "cpu")   # a numpy integer is still taken
    assert acc.get_sync_debug_mode("cpu") == 1


@pytest.mark.parametrize("args", [
    pytest.param(lambda t: (0, t, (2,)), id="high"),
    pytest.param(lambda t: (t, 5, (2,)), id="low"),
])
def test_randint_refuses_a_bool_array_bound(args: Callable[[Any], tuple[Any, ...]]) -> None:
    """torch 2.15: ``torch.randint(0, torch.tensor(True), (2,))`` raises (RuntimeError
    "scalar.isIntegral(false)"), as a bool bound is refused; accelrt read the one-element bool
    Array through ``__index__`` as 1 (and drew from [0, 1)). A one-element integer Array
    stays a bound, as a one-element integer tensor is in torch."""
    with pytest.raises(TypeError, match="must be an int, got bool"):
        acc.randint(*args(acc.asarray(True, device=DEV)), device=DEV)
    assert acc.randint(0, acc.asarray(3, device=DEV), (2,), device=DEV).shape == (2,)
