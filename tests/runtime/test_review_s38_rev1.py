"""Session-38 review of the day's merges (ReduceOp no longer an int, the device(type, index)
form in _device_form.py, ...): what they broke or got wrong. Each test failed before its fix.
The expected behaviour is torch 2.15.0's, observed on its CPU build with the same inputs, and
is written here as literals. (The checks that need two ranks are in
tests/distributed/test_review_s38_rev1_dist.py.)
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from unittest import mock

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
import accelrt.distributed as dist
from accelrt._errors import BackendUnavailableError
from accelrt.backends.cpu import CpuBackend

R = dist.ReduceOp
# closed and unregistered after the module
_backends = module_backends({"s38rev1": lambda: CpuBackend(num_devices=2, name="s38rev1")})

# ---------------------------------------------------------------- 1. ReduceOp


def test_reduce_op_is_unequal_to_what_is_not_an_int_from_its_own_side() -> None:
    # torch 2.15: a member's __eq__ compares with an int (a subclass too) and answers False
    # for anything else, never NotImplemented: ReduceOp.SUM == np.int64(0), np.int32(0),
    # np.bool_(False), np.array(0), mock.ANY are False (!= True); so np.int64(0) in {SUM}
    # and [MAX].count(np.int64(4)) find nothing. numpy's own side (np.int64(0) == SUM) is
    # True there too. accelrt returned NotImplemented, so numpy's reflected answer won.
    for other in (np.int64(0), np.int32(0), np.uint8(0), np.bool_(False), np.array(0),
                  mock.ANY):
        assert (R.SUM == other) is False and (R.SUM != other) is True, other
        assert R.SUM.__eq__(other) is False and R.SUM.__ne__(other) is True
    assert np.int64(0) not in {R.SUM} and [R.MAX].count(np.int64(4)) == 0  # noqa: FURB171
    assert np.int64(0) == R.SUM     # numpy's side, as in torch
    with pytest.raises(KeyError):
        {R.SUM: 1}[np.int64(0)]
    # kept: an int (and its subclasses) from either side
    class MyInt(int):
        pass
    assert R.SUM == MyInt(0) and MyInt(0) == R.SUM and R.SUM == 0 and 0 in {R.SUM}  # noqa: FURB171
    # a PREMUL_SUM with its factor: unequal to anything but itself and PREMUL_SUM
    p = R.PREMUL_SUM(0.5)
    assert (p == mock.ANY) is False and p.__eq__(object()) is False and p != mock.ANY
    assert p == R.PREMUL_SUM and p == R.PREMUL_SUM(2.0) and not (p != R.PREMUL_SUM(2.0))  # noqa: SIM202


def test_premul_sum_with_factor_is_no_red_op_type() -> None:
    # torch 2.15: isinstance(ReduceOp.PREMUL_SUM(0.5), ReduceOp.RedOpType) is False (it is a
    # ReduceOp holding the factor), while every member is a RedOpType. accelrt's RedOpType
    # was ReduceOp itself, whose instance check takes a PremulSum: True.
    T = R.RedOpType
    assert not isinstance(R.PREMUL_SUM(0.5), T)
    assert not isinstance(dist._make_nccl_premul_sum(2.0), T)
    assert isinstance(R.PREMUL_SUM(0.5), R)
    assert all(isinstance(op, T) and isinstance(op, R | T) for op in R)
    assert not isinstance(0, T) and not isinstance("SUM", T)
    # what held before still holds
    assert T.MAX is R.MAX and T(4) is R.MAX and T(R.MAX) is R.MAX
    assert list(T.__members__) == [op.name for op in R]
    assert T.__name__ == "RedOpType" and T.__qualname__ == "ReduceOp.RedOpType"
    with pytest.raises(TypeError, match="not a valid ReduceOp"):
        T(4.0)


def test_reduce_op_takes_no_format_spec() -> None:
    # torch 2.15: f"{ReduceOp.MAX:d}" and f"{ReduceOp.MAX:>10}" raise TypeError
    # "unsupported format string passed to ...RedOpType.__format__" (object's __format__);
    # an empty spec is str(). accelrt formatted str(op) with the spec (a ValueError for
    # 'd', a padded name for '>10').
    for spec in ("d", ">10", "s", "x"):
        with pytest.raises(TypeError, match="unsupported format string passed to ReduceOp"):
            format(R.MAX, spec)
    assert f"{R.MAX}" == "ReduceOp.MAX" == format(R.MAX, "") and "%d" % R.MAX == "4"  # noqa: UP031


@pytest.mark.parametrize("call, sym, left, right", [
    (lambda: 1 < R.SUM, "<", "int", "ReduceOp"),
    (lambda: R.SUM < 1, "<", "ReduceOp", "int"),
    (lambda: 0.5 >= R.MAX, ">=", "float", "ReduceOp"),
    (lambda: R.SUM > R.MAX, ">", "ReduceOp", "ReduceOp"),
])
def test_reduce_op_order_errors_name_the_operator_used(call: Callable[[], object], sym: str,
                                                       left: str, right: str) -> None:
    # torch 2.15: 1 < ReduceOp.SUM raises "'<' not supported between instances of 'int' and
    # '...RedOpType'" (Python's own message: the members define no order). accelrt raised
    # from the reflected __gt__: "'>' not supported between instances of 'ReduceOp' and
    # 'int'", the other operator and the operands swapped.
    with pytest.raises(TypeError, match=f"^'{sym}' not supported between instances of "
                                        f"'{left}' and '{right}'$"):
        call()


# ---------------------------------------------------------------- 2. device(type, index)


def test_device_two_argument_form_checks_the_index_kind_first() -> None:
    # torch 2.15: device("cpu:0", True), device("cpu:0", 1.5) and device(type="cpu:0",
    # index=True) raise TypeError "device(): argument 'index' (position 2) must be int, not
    # bool" (the parser checks the argument before the body reads the type string); accelrt
    # raised the RuntimeError/ValueError "type (string) must not include an index".
    for call in (lambda: acc.device("cpu:0", True), lambda: acc.device("cpu:0", 1.5),
                 lambda: acc.device(type="cpu:0", index=True),
                 lambda: acc.device("cpu:0", np.bool_(True)), lambda: acc.device("cpu", "0")):
        with pytest.raises(TypeError, match="device index must be an int or None"):
            call()


def test_device_two_argument_form_checks_the_type_before_its_index() -> None:
    # torch 2.15: device("foo:0", 0) raises RuntimeError "Expected one of cpu, cuda, ...
    # device type at start of device string: foo" as device("foo:0") does: the type is read
    # first. accelrt said "type (string) must not include an index" about an unknown type.
    for call in (lambda: acc.device("nosuchdev:0", 0), lambda: acc.device(type="nosuchdev:0")):
        with pytest.raises(BackendUnavailableError, match="Unknown backend 'nosuchdev'"):
            call()
    assert issubclass(BackendUnavailableError, RuntimeError)


def _python_calls(fn: Callable[[], object]) -> list[str]:
    """The Python functions one ``fn()`` runs (``fn`` itself left out)."""
    names: list[str] = []

    def prof(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "call":
            names.append(frame.f_code.co_name)

    fn()    # warm: the parse cache holds the string
    # no collection inside: one would run the gc.callbacks of other libraries (hypothesis's
    # gc_callback: seen in CI) as Python calls of fn's
    enabled = gc.isenabled()
    gc.disable()
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
        if enabled:
            gc.enable()
    return names[1:]    # (names[0] is fn)


@pytest.mark.parametrize("call", [
    lambda: acc.device("cpu:0"), lambda: acc.device("cpu", 0), lambda: acc.device("cpu", None),
    lambda: acc.device(type="cpu", index=0), lambda: acc.device(type="cpu"),
    lambda: acc.device(acc.device("cpu", 1)),
], ids=["str", "type-index", "type-None", "keywords", "type-keyword", "device"])
def test_device_common_forms_run_no_extra_python_calls(call: Callable[[], object]) -> None:
    # The (type, index) form's move to _device_form.py made device("cpu", 0) 3.4x slower
    # (20 -> 68 empty calls: *args/**kwargs, _type_and_index, _parse twice, _init),
    # device("cpu:0") and device(d) 20% (bench: thread time in empty calls, as
    # bench/bench_runtime_calls.py, against 1b3aee9). The common forms now run
    # device.__init__ and at most _parse (a cache hit) in Python, as before the move.
    names = _python_calls(call)
    extra = [n for n in names if n not in ("__init__", "_parse")]
    assert not extra and names.count("__init__") <= 2, names


# ---------------------------------------------------------------- 3. wrong kinds of argument


def test_register_backend_reads_the_name_before_the_factory() -> None:
    # torch 2.15: Backend.register_backend(None, None) raises AttributeError "'NoneType'
    # object has no attribute 'lower'" (its first line is name.lower()); accelrt checked the
    # factory first and raised a plain TypeError, which `except AttributeError` misses.
    for reg in (dist.register_backend, dist.Backend.register_backend):
        for func in (None, 3):
            with pytest.raises(AttributeError, match="name must be a str"):
                reg(None, func)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="name must be a str"):
                reg(b"x", func)  # type: ignore[arg-type]


# ---------------------------------------------------------------- 4. device modules' _initialized


def test_initialized_flag_survives_mock_patch_and_del() -> None:
    # unittest.mock.patch.object(module, "_initialized", True) (tests that pretend CUDA is
    # up, as with torch.cuda's plain module flag) deletes the attribute on exit, the module
    # having no "_initialized" in its __dict__; `del torch.cuda._initialized` works in torch.
    # accelrt's property had no deleter: AttributeError "property '_initialized' of
    # 'LiveModule' object has no deleter" at the end of the with block.
    from accelrt.backends import device_module
    m = device_module("s38rev1")
    assert m._initialized is False
    with mock.patch.object(m, "_initialized", False):
        assert m._initialized is False
    assert m._initialized is False
    with mock.patch.object(m, "_initialized", True):   # initialises, as an assignment does
        assert m._initialized is True
    assert m._initialized is True
    del m._initialized          # the flag stays the backend's state
    assert m._initialized is True and hasattr(m, "_initialized")
    m._initialized = False      # no error (a monkeypatch undo sets it): still initialised
    assert m._initialized is True
