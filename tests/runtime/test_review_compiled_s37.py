"""Review s37: hostile inputs on the compiled build (scripts/fuzz_compiled.py ran the specs of
``tests/helpers/builds_probe*.py`` with values they do not try, under both builds).

What differed, or raised no clear message, and is checked here in whichever build is loaded:

* an ``int`` subclass whose ``__index__``/``__int__`` lie, as the value of a raw backend
  ``memset``: the compiled ``check_int`` (mypyc) read it by its value, the pure build passed
  the instance on and OpenCL's numpy conversion called ``__index__`` (``OverflowError``);
* the single-array collectives (``all_gather_into_tensor``/``all_gather_single``,
  ``reduce_scatter_tensor``/``reduce_scatter_single``, ``all_to_all_single``,
  ``gather_single``/``gather_into_tensor``) given a non-array: ``AttributeError: 'int' object
  has no attribute 'dtype'`` in both builds, where torch 2.15's ``_check_single_tensor``
  raises ``TypeError`` naming the parameter (checked with torch 2.15 and gloo in a one-rank
  world).
"""

from __future__ import annotations


import numpy as np
import pytest

import accelrt as acc
from accelrt._errors import AcceleratorValueError
from accelrt.backends._common import check_byte, check_index, check_int


class LyingInt(int):
    """An int whose ``__index__`` and ``__int__`` answer 2**64."""

    def __index__(self) -> int:
        return 2 ** 64

    def __int__(self) -> int:
        return 2 ** 64


def test_check_int_reads_an_int_subclass_by_its_value() -> None:
    for got in (check_int(LyingInt(7), "x"), check_byte(LyingInt(7)),
                check_index(LyingInt(1), 2, "cpu", "2 devices")):
        assert type(got) is int
    assert check_byte(LyingInt(7)) == 7
    assert check_index(LyingInt(1), 2, "cpu", "2 devices") == 1
    with pytest.raises(ValueError, match=r"memset value=300 must be a byte value"):
        check_byte(LyingInt(300))
    with pytest.raises(TypeError, match="memset value must be an int, got bool"):
        check_byte(True)


def _opencl() -> object:
    from accelrt import backends
    try:
        return backends.get_backend("opencl")
    except Exception:   # noqa: BLE001  (no OpenCL runtime here)
        pytest.skip("no OpenCL runtime (PoCL) here")


def test_opencl_memset_takes_an_int_subclass_by_its_value() -> None:
    b: object = _opencl()
    ptr = b.malloc(0, 64)  # type: ignore[attr-defined]
    s = b.default_stream(0)  # type: ignore[attr-defined]
    host = np.zeros(64, np.uint8)
    try:
        # (the pure build raised OverflowError: numpy converted the value by __index__)
        b.memset(0, ptr, LyingInt(7), 64, s)  # type: ignore[attr-defined]
        b.memcpy(0, host.ctypes.data, ptr, 64, "d2h", s)  # type: ignore[attr-defined]
        b.stream_synchronize(0, s)  # type: ignore[attr-defined]
    finally:
        b.free(0, ptr)  # type: ignore[attr-defined]
    assert host.tolist() == [7] * 64


# ---------------------------------------------------------------------- distributed

BAD = [1, 2.5, None, "x", [1.0, 2.0], (1.0,), np.float32(1), LyingInt(1)]


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_single_array_collectives_refuse_a_non_array_with_type_error(one_rank_world: None,
                                                                    bad: object) -> None:
    import accelrt.distributed as dist
    a = acc.zeros(2, device="cpu")
    out = acc.zeros(2, device="cpu")
    name = type(bad).__name__
    cases = [
        ("all_gather_into_tensor", "output_tensor",
         lambda: dist.all_gather_into_tensor(bad, a)),
        ("all_gather_into_tensor", "input_tensor",
         lambda: dist.all_gather_into_tensor(out, bad)),
        ("all_gather_into_tensor", "input_tensor", lambda: dist.all_gather_single(out, bad)),
        ("reduce_scatter_tensor", "output", lambda: dist.reduce_scatter_tensor(bad, a)),
        ("reduce_scatter_tensor", "input", lambda: dist.reduce_scatter_tensor(out, bad)),
        ("reduce_scatter_tensor", "input", lambda: dist.reduce_scatter_single(out, bad)),
        ("all_to_all_single", "output", lambda: dist.all_to_all_single(bad, a)),
        ("all_to_all_single", "input", lambda: dist.all_to_all_single(out, bad)),
        ("gather_single", "tensor", lambda: dist.gather_single(bad, out)),
        ("gather_single", "tensor", lambda: dist.gather_into_tensor(bad, out)),
        ("gather_single", "gather_tensor", lambda: dist.gather_single(a, bad)),
    ]
    for what, param, call in cases:
        if bad is None and param == "gather_tensor":
            continue   # None there: torch's ValueError, "must be specified on the destination"
        with pytest.raises(TypeError) as info:
            call()
        assert str(info.value) == (f"{what}: expected an accelrt.Array or numpy.ndarray, got "
                                   f"{name if name != 'float32' else 'numpy.float32'} "
                                   f"(parameter `{param}`)"), (what, param)
    # the group is still usable: nothing was enqueued
    dist.all_gather_into_tensor(out, acc.full((2,), 3.0, device="cpu"))
    assert out.tolist() == [3.0, 3.0]


def test_gather_single_without_gather_tensor_keeps_torchs_value_error(one_rank_world: None) -> None:
    import accelrt.distributed as dist
    with pytest.raises(ValueError, match="gather_tensor must be specified on the destination"):
        dist.gather_single(acc.zeros(2, device="cpu"), None)


def test_the_array_check_comes_before_the_membership_test_as_torchs(one_rank_world: None) -> None:
    # torch 2.15: _check_single_tensor runs before _rank_not_in_group, except in
    # all_to_all_single, which returns None (with a warning) on a non-member first
    import accelrt.distributed as dist
    a = acc.zeros(2, device="cpu")
    nm = dist.GroupMember.NON_GROUP_MEMBER
    for call in (lambda: dist.all_gather_into_tensor(1, a, group=nm),
                 lambda: dist.reduce_scatter_tensor(a, None, group=nm),
                 lambda: dist.gather_single(1, a, group=nm)):
        with pytest.raises(TypeError, match="expected an accelrt.Array or numpy.ndarray"):
            call()
    with pytest.warns(UserWarning, match="does not belong to the given group"):
        assert dist.all_to_all_single(1, a, group=nm) is None  # type: ignore[arg-type]


# ---------------------------------------------------------------------- fill values

class IntFloat(int):
    """An int whose ``__float__`` answers nan and whose ``__index__``/``__int__`` lie."""

    def __float__(self) -> float:
        return float("nan")

    def __index__(self) -> int:
        return 5

    def __int__(self) -> int:
        return 6


class FloatLie(float):
    """A float whose ``__float__`` answers 99.0."""

    def __float__(self) -> float:
        return 99.0


class ComplexLie(complex):
    """A complex whose ``__complex__`` answers 99j."""

    def __complex__(self) -> complex:
        return 99j


def test_a_fill_value_of_a_number_subclass_is_read_by_its_value() -> None:
    # torch 2.15 (checked): torch.zeros(2).fill_(IntFloat(1)) -> [1.0, 1.0];
    # torch.full((2,), IntFloat(1)) -> int64 [1, 1]; torch.full((2,), FloatLie(1.5)) -> [1.5]*2
    assert acc.zeros(2, device="cpu").fill_(IntFloat(1)).tolist() == [1.0, 1.0]
    assert acc.zeros(2, dtype="int64", device="cpu").fill_(IntFloat(1)).tolist() == [1, 1]
    assert acc.zeros(2, device="cpu").fill_(FloatLie(1.5)).tolist() == [1.5, 1.5]
    a = acc.full((2,), IntFloat(1), device="cpu")
    assert (a.dtype, a.tolist()) == (np.dtype("int64"), [1, 1])
    assert acc.full((2,), FloatLie(1.5), device="cpu").tolist() == [1.5, 1.5]
    assert acc.full((2,), IntFloat(1), dtype="float32", device="cpu").tolist() == [1.0, 1.0]
    assert acc.full((1,), ComplexLie(2 + 1j), dtype="complex64",
                    device="cpu").tolist() == [2 + 1j]
    with pytest.raises(AcceleratorValueError, match="does not fit in uint8"):
        acc.zeros(1, dtype="uint8", device="cpu").fill_(IntFloat(300))
