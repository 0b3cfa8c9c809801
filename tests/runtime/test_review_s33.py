"""Session 33's parity fixes found by comparing with torch 2.15 (each failed before its fix)."""

from __future__ import annotations

from typing import Any

import pytest

import accelrt as acc


@pytest.mark.parametrize("args, kwargs", [
    ((None, 10, (3,)), {}),
    ((None, 10), {"size": (3,)}),
    ((None,), {"high": 10, "size": (3,)}),
])
def test_randint_refuses_a_none_passed_for_low(args: tuple[Any, ...],
                                               kwargs: dict[str, Any]) -> None:
    # torch.randint(None, 10, (3,)) is a TypeError (its parser takes no None for low); accelrt
    # read it as low=0
    with pytest.raises(TypeError, match="low must be an int, got None"):
        acc.randint(*args, device="cpu", **kwargs)


def test_randint_without_low_still_starts_at_zero() -> None:
    acc.manual_seed(0)
    a = acc.randint(10, (64,), device="cpu").tolist()
    acc.manual_seed(0)
    assert acc.randint(0, 10, (64,), device="cpu").tolist() == a
    assert acc.randint(high=10, size=(4,), device="cpu").shape == (4,)
    # a None passed for high: torch 2.15's "argument 'high' (position 1) must be int, not
    # NoneType" (s34; it said "missing the upper bound")
    with pytest.raises(TypeError, match="high must be an int, got None"):
        acc.randint(None, (3,), device="cpu")
    with pytest.raises(TypeError, match="missing the upper bound 'high'"):
        acc.randint(size=(3,), device="cpu")


# ---------------------------------------------------------------------- asarray of a buffer
# expectations run on torch 2.15.0 (CPU): torch.asarray(obj, dtype=...)

def test_asarray_reads_bytes_as_uint8() -> None:
    a = acc.asarray(b"12", device="cpu")
    assert a.dtype == "uint8" and a.tolist() == [49, 50]    # torch: tensor([49, 50], uint8)


def test_asarray_reinterprets_a_buffer_in_the_dtype_asked_for() -> None:
    import array
    assert acc.asarray(bytearray(b"1234"), dtype="int16",
                       device="cpu").tolist() == [12849, 13363]
    assert acc.asarray(array.array("d", [1.0]), dtype="float32",
                       device="cpu").tolist() == [0.0, 1.875]
    f = acc.asarray(array.array("f", [1.0, 2.0]), device="cpu")     # its own format
    assert f.dtype == "float32" and f.tolist() == [1.0, 2.0]


def test_asarray_flattens_a_buffer_and_shares_a_writable_one() -> None:
    import numpy as np
    m = acc.asarray(memoryview(np.arange(4, dtype=np.int32).reshape(2, 2)), device="cpu")
    assert m.shape == (4,) and m.tolist() == [0, 1, 2, 3]
    ba = bytearray(b"\x01\x00\x02\x00")
    a = acc.asarray(ba, dtype="int16", device="cpu", copy=False)
    a.fill_(7)
    acc.synchronize("cpu")
    assert ba == bytearray(b"\x07\x00\x07\x00")
    with pytest.raises(ValueError, match="copy=False"):     # read-only: accelrt copies
        acc.asarray(b"12", device="cpu", copy=False)


@pytest.mark.parametrize("obj, dtype, message", [
    (bytearray(b"123"), "int16", (r"buffer length \(3 bytes\) after offset \(0 bytes\) must "
                                  r"be a multiple of element size \(2\)")),
    (b"", None, r"both buffer length \(0\) and count \(-1\) must not be 0"),
])
def test_asarray_refuses_buffers_as_torch(obj: Any, dtype: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        acc.asarray(obj, dtype=dtype, device="cpu")
    assert isinstance(info.value, RuntimeError)


def test_asarray_refuses_a_non_contiguous_buffer_as_torch() -> None:
    import numpy as np
    with pytest.raises(RuntimeError, match="non-contiguous buffers are not supported"):
        acc.asarray(memoryview(np.arange(6, dtype=np.int16))[::2], device="cpu")
