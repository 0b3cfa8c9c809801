"""Session 34's argument-handling parity fixes of the factories, ``randint``, the device
index arguments and ``Stream``, each checked against torch 2.15.0 by running it (CPU build,
``/tmp/t215``) on the same inputs; torch's answers are written here as literals (CI has no
torch). Each test failed before its change unless it says it pins behaviour that already
matched.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from helpers.hostile import IndexRaises

import accelrt as acc
from accelrt.random import Generator

D = "cpu:0"


class Boom(Exception):
    """An exception class of the caller's own."""


class IndexFloat:
    """``__index__`` returns a float (Python's ``operator.index`` refuses it)."""

    def __index__(self) -> float:
        return 1.5  # noqa: PLE0305 - the point: Python's operator.index refuses it


BROKEN = [IndexRaises(ValueError("bad index")), IndexRaises(Boom("custom")),
          IndexRaises(ArithmeticError("arith"))]


# ---------------------------------------------------------------------- (1) dtype arguments

# torch 2.15: torch.empty(2, dtype=np.float32(1.0)) raises TypeError "empty(): argument
# 'dtype' must be torch.dtype, not numpy.float32" (np.int64(3): "not numpy.int64", a numpy
# array "not numpy.ndarray", a tensor "not Tensor", bytes "not bytes"); so do asarray, rand,
# randn, randint (its "invalid combination of arguments") and Tensor.to(dtype=...). accelrt
# read a dtype from any object numpy reads one from (its .dtype attribute).
_DTYPE_CALLS: dict[str, Callable[[Any], object]] = {
    "empty": lambda dt: acc.empty(2, dtype=dt, device=D),
    "zeros": lambda dt: acc.zeros(2, dtype=dt, device=D),
    "ones": lambda dt: acc.ones(2, dtype=dt, device=D),
    "full": lambda dt: acc.full((2,), 1, dtype=dt, device=D),
    "asarray": lambda dt: acc.asarray([1], dtype=dt, device=D),
    "Array": lambda dt: acc.Array(2, dtype=dt, device=D),
    "rand": lambda dt: acc.rand(2, dtype=dt, device=D),
    "randn": lambda dt: acc.randn(2, dtype=dt, device=D),
    "randint": lambda dt: acc.randint(0, 2, (2,), dtype=dt, device=D),
    "to(dtype=)": lambda dt: acc.zeros(2, device=D).to(dtype=dt),
    "pinned empty": lambda dt: acc.empty(2, dtype=dt, pin_memory=True),
}

_SCALARS = [(np.float32(1.0), "numpy.float32"), (np.int64(3), "numpy.int64"),
            (np.bool_(True), "numpy.bool"), (np.float64(0.5), "numpy.float64")]


@pytest.mark.parametrize("name", list(_DTYPE_CALLS))
@pytest.mark.parametrize("scalar, shown", _SCALARS, ids=[s for _, s in _SCALARS])
def test_a_numpy_scalar_is_no_dtype(name: str, scalar: object, shown: str) -> None:
    with pytest.raises(TypeError, match=rf"argument 'dtype' must be a numpy dtype.*, not "
                                        rf"{shown}; .*pass x\.dtype"):
        _DTYPE_CALLS[name](scalar)


@pytest.mark.parametrize("name", list(_DTYPE_CALLS))
def test_an_array_or_bytes_is_no_dtype(name: str) -> None:
    for value, shown in ((np.zeros(2, np.int8), "numpy.ndarray"),
                         (acc.zeros(2, dtype="int8", device=D), "Array"), (b"f4", "bytes")):
        with pytest.raises(TypeError, match=rf"argument 'dtype' must be a numpy dtype.*, not "
                                            rf"{shown}"):
            _DTYPE_CALLS[name](value)


@pytest.mark.parametrize("name", list(_DTYPE_CALLS))
def test_the_dtype_forms_by_design_still_work(name: str) -> None:
    # pins what stays accepted (docs/differences.md section 3): a numpy dtype, its name, a
    # numpy scalar type, a Python type, None (the default); the scalar's own .dtype too
    kind = "f" if name in ("rand", "randn") else None
    for dt in (np.dtype("float32"), "float32", np.float32, float, np.float32(1.0).dtype, None):
        out = _DTYPE_CALLS[name](dt)
        got = np.dtype(out.dtype)   # type: ignore[attr-defined]
        assert kind is None or got.kind == kind


def test_a_number_given_as_dtype_shows_its_value() -> None:
    # (torch: "argument 'dtype' must be torch.dtype, not int"); the value helps find the slip
    with pytest.raises(TypeError, match=r"not int \(5\)$"):
        acc.empty(2, dtype=5, device=D)


# ---------------------------------------------------------------------- (2) randint bounds

# Each row ran on torch.randint with the same arguments (device omitted): the class torch
# raised, or None where it drew. accelrt raises the same class (AcceleratorValueError and
# AcceleratorTypeError are also ValueError/TypeError and RuntimeError, torch's classes for
# its kernel checks). Every row matched before s34 (by class): the table pins them.
_RANDINT = [
    ((0.0, 3, (3,)), {}, TypeError),                      # pins: "invalid combination"
    ((0, 3.0, (3,)), {}, TypeError),                      # pins
    ((3.0, (3,)), {}, TypeError),                         # pins: "must be int, not float"
    ((np.float64(3), (3,)), {}, TypeError),               # pins: "not numpy.float64"
    ((np.int64(0), np.int64(3), (3,)), {}, None),         # pins
    ((np.uint64(3), (3,)), {}, None),                     # pins
    ((np.int8(3), (3,)), {}, None),                       # pins
    ((np.array(3), (3,)), {}, None),                      # pins: a 0-d array is an index
    ((True, (3,)), {}, TypeError),                        # pins: "must be int, not bool"
    ((False, 3, (3,)), {}, TypeError),                    # pins
    ((np.True_, (3,)), {}, TypeError),                    # pins: "not numpy.bool"
    ((3, 3, (3,)), {}, RuntimeError),                     # pins: "random_ expects 'from' ..."
    ((4, 3, (0,)), {}, RuntimeError),                     # pins: checked for an empty size too
    ((-1, (3,)), {}, RuntimeError),                       # pins: from=0 >= to=-1
    ((-2**63, 2**63 - 1, (3,)), {}, None),                # pins: the widest int64 bounds
    # pins the class; torch says "Overflow when unpacking long long" (the next test)
    ((-2**63 - 1, 0, (3,)), {}, ValueError),
    ((0, 2**64, (3,)), {}, ValueError),
    ((0, 2**70, (3,)), {}, ValueError),
    ((0, 300, (3,)), {"dtype": "int8"}, RuntimeError),    # pins: "to - 1 is out of bounds"
    ((-1, 3, (3,)), {"dtype": "uint64"}, RuntimeError),   # pins: "from is out of bounds"
    ((0, 65505, (3,)), {"dtype": "float16"}, None),       # pins: to - 1 = 65504 fits
    ((0, 3 + 0j, (3,)), {}, TypeError),                   # pins
    ((0, "3", (3,)), {}, TypeError),                      # pins
    ((None, (3,)), {}, TypeError),                        # pins: "not NoneType"
]


@pytest.mark.parametrize("args, kw, exc", _RANDINT, ids=[repr(r[:2]) for r in _RANDINT])
def test_randint_bounds_raise_torchs_classes(args: tuple[Any, ...], kw: dict[str, Any],
                                             exc: type[Exception] | None) -> None:
    if exc is None:
        with warnings.catch_warnings():     # (float16 beyond 2**11: the precision warning,
            warnings.simplefilter("ignore", UserWarning)   # tested below)
            assert acc.randint(*args, device=D, **kw).shape == args[-1]
    else:
        with pytest.raises(exc):
            acc.randint(*args, device=D, **kw)


@pytest.mark.parametrize("low, high", [(-2**63 - 1, 0), (0, 2**64), (0, 2**70), (-2**65, 2)])
def test_randint_bounds_beyond_int64_say_torchs_words(low: int, high: int) -> None:
    with pytest.raises(ValueError, match=r"^Overflow when unpacking long long: randint\(\) "
                                         r"bounds .* do not fit dtype int64"):
        acc.randint(low, high, (3,), device=D)


def test_randint_out_of_range_bounds_inside_int64_keep_the_kernel_message() -> None:
    # (no "Overflow when unpacking" here; torch 2.15's kernel words come first, session 36)
    with pytest.raises(ValueError, match=r"^to - 1 is out of bounds for signed char: "
                                         r"randint\(\) bounds \[0, 300\) do not fit dtype int8"):
        acc.randint(0, 300, (3,), dtype="int8", device=D)


def test_randint_high_one_past_a_64_bit_dtype_still_draws_its_every_value() -> None:
    # the documented difference (docs/differences.md): torch 2.15's parser refuses these
    # bounds ("Overflow when unpacking long long"); accelrt keeps them, as they are the only
    # way to draw the top of int64 and uint64 (torch has random_(), accelrt does not)
    assert acc.randint(0, 2**63, (4,), device=D).dtype == np.int64
    assert acc.randint(0, 2**64, (4,), dtype="uint64", device=D).dtype == np.uint64
    assert acc.randint(0, 2**63, (0,), device=D).shape == (0,)


def test_randint_high_passed_as_none_is_named() -> None:
    # torch 2.15: torch.randint(None, (3,)) raises TypeError "argument 'high' (position 1)
    # must be int, not NoneType"; accelrt said "missing the upper bound 'high'"
    with pytest.raises(TypeError, match="^randint\\(\\) high must be an int, got None$"):
        acc.randint(None, (3,), device=D)
    with pytest.raises(TypeError, match="high must be an int, got None"):
        acc.randint(0, None, (3,), device=D)


# ---------------------------------------------------------------------- (3) __index__ raising

# torch 2.15's argument parser (torch.empty/full/rand/randint sizes and bounds) and its
# pybind11 bindings (torch.accelerator.device_index) clear what an argument's __index__
# raised and refuse the argument with TypeError ("must be tuple of ints, not X", "argument
# 'high' (position 1) must be int, not X", "incompatible function arguments"), whatever
# __index__ raised. accelrt let a ValueError or the caller's own exception out.
_SIZE_CALLS: dict[str, Callable[[Any], object]] = {
    "empty(v)": lambda v: acc.empty(v, device=D),
    "empty(2, v)": lambda v: acc.empty(2, v, device=D),
    "empty((v,))": lambda v: acc.empty((v,), device=D),
    "empty(size=(v,))": lambda v: acc.empty(size=(v,), device=D),
    "zeros(v)": lambda v: acc.zeros(v, device=D),
    "full((v,), 1)": lambda v: acc.full((v,), 1, device=D),
    "rand(v)": lambda v: acc.rand(v, device=D),
    "randn(2, v)": lambda v: acc.randn(2, v, device=D),
    "randint(0, 3, (v,))": lambda v: acc.randint(0, 3, (v,), device=D),
    "Array(v)": lambda v: acc.Array(v, device=D),
}


@pytest.mark.parametrize("name", list(_SIZE_CALLS))
@pytest.mark.parametrize("value", BROKEN, ids=repr)
def test_a_size_whose_index_raises_is_no_size(name: str, value: IndexRaises) -> None:
    with pytest.raises(TypeError, match=rf"size entries must be ints, got IndexRaises "
                                        rf".*\(its __index__ raised {type(value.exc).__name__}"):
        _SIZE_CALLS[name](value)


@pytest.mark.parametrize("value", BROKEN, ids=repr)
def test_a_randint_bound_whose_index_raises_is_no_int(value: IndexRaises) -> None:
    name = type(value.exc).__name__
    with pytest.raises(TypeError, match=rf"^randint\(\) high must be an int, got IndexRaises "
                                        rf"\(its __index__ raised {name}: "):
        acc.randint(value, (2,), device=D)
    with pytest.raises(TypeError, match=r"^randint\(\) low must be an int, got IndexRaises"):
        acc.randint(value, 3, (2,), device=D)


@pytest.mark.parametrize("value", BROKEN, ids=repr)
def test_device_index_whose_index_raises_is_a_type_error(value: IndexRaises) -> None:
    name = type(value.exc).__name__
    with pytest.raises(TypeError, match=rf"^device_index\(\) takes an int or None, got "
                                        rf"IndexRaises \(its __index__ raised {name}: "):
        acc.device_index(value)
    ctx = acc.device_index(0)
    ctx.idx = value     # read on entry, as torch reads the attribute on entry
    with pytest.raises(TypeError, match=rf"device_index\.idx takes an int or None, got "
                                        rf"IndexRaises \(its __index__ raised {name}"):
        with ctx:
            pass


@pytest.mark.parametrize("value", BROKEN, ids=repr)
def test_stream_priority_whose_index_raises_is_a_type_error(value: IndexRaises) -> None:
    # torch 2.15: torch.Stream(priority=obj) raises "Stream(): argument 'priority' must be
    # int, not X": the parser never calls __index__ of an object that is no int
    with pytest.raises(TypeError, match=r"^priority must be an int, got IndexRaises$"):
        acc.cpu.Stream(priority=value)


@pytest.mark.parametrize("value", BROKEN, ids=repr)
def test_plain_python_calls_let_what_index_raised_out(value: IndexRaises) -> None:
    # pins: torch.manual_seed and torch.cuda.manual_seed(_all) read int(seed) in Python,
    # which lets the exception of __index__ (int() falls back on it) out as it is
    with pytest.raises(type(value.exc)):
        acc.manual_seed(value)
    with pytest.raises(type(value.exc)):
        acc.cpu.manual_seed_all(value)


@pytest.mark.parametrize("call", [
    lambda v: acc.set_device_index(v), lambda v: acc.cpu.set_device(v),
    lambda v: acc.Stream(device=v), lambda v: acc.Event(device=v),
], ids=["set_device_index", "cpu.set_device", "Stream(device=)", "Event(device=)"])
@pytest.mark.parametrize("value", BROKEN, ids=repr)
def test_device_arguments_whose_index_raises(call: Callable[[Any], object],
                                             value: IndexRaises) -> None:
    # pins: torch 2.15's set_device_index/torch.cuda.set_device raise ValueError ("Expected a
    # torch.device with a specified index or an integer"), torch.Stream/torch.Event(device=)
    # TypeError ("must be torch.device"); accelrt's error is both, with no index hint
    with pytest.raises(TypeError) as info:
        call(value)
    assert isinstance(info.value, ValueError)
    assert "pass the index" not in str(info.value)


def test_the_wrong_device_hint_reads_the_index_as_python_does() -> None:
    # an __index__ returning a float is no index (operator.index refuses it); the hint said
    # "pass the index as an int (1.5)"
    with pytest.raises(TypeError) as info:
        acc.set_device_index(IndexFloat())
    assert "pass the index" not in str(info.value)
    with pytest.raises(TypeError, match=r"pass the index as an int \(1\)$"):
        acc.set_device_index(np.int64(1))


def test_a_generator_seed_whose_index_raises_says_torchs_words() -> None:
    # pins: torch 2.15's Generator.manual_seed(obj) is RuntimeError "manual_seed expected a
    # long, but got X" for anything but an int
    for value in BROKEN:
        with pytest.raises(RuntimeError, match="manual_seed expected a long"):
            Generator(D).manual_seed(value)


@pytest.mark.parametrize(("low", "high", "dtype", "warned"), [
    (0, 2**25, "float32", "to - 1 is out of bounds [-(2^24), 2^24]"),
    (-2**25, 0, "float32", "from is out of bounds [-(2^24), 2^24]"),
    (0, 2**12, "float16", "to - 1 is out of bounds [-(2^11), 2^11]"),
    (0, 2**54, "float64", "to - 1 is out of bounds [-(2^53), 2^53]"),
    (0, 2**24 + 1, "float32", None),           # to - 1 == 2**24: within, as torch's test
    (-2**24, 10, "float32", None),
    (0, 2**54, "int64", None),                 # integer dtypes hold every value
])
def test_randint_warns_where_a_float_dtype_cannot_draw_uniformly(
        low: int, high: int, dtype: str, warned: str | None) -> None:
    # torch 2.15: UserWarning "to - 1 is out of bounds [-(2^24), 2^24]. Due to precision
    # limitations float can support discrete uniform distribution only within this range."
    # accelrt drew silently
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acc.randint(low, high, (4,), dtype=dtype, device="cpu")
    messages = [str(w.message) for w in caught if w.category is UserWarning]
    if warned is None:
        assert messages == []
    else:
        assert len(messages) == 1 and messages[0].startswith(warned), messages
        assert caught[0].filename == __file__          # points at the caller
