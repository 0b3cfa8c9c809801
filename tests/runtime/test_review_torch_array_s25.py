"""``accelrt.Array`` and its factories against ``torch.Tensor`` and torch's factories on the
CPU, by running both (a differential harness, run by hand with torch 2.14.1; CI has no
torch, so what torch did is written here as literal values and messages, each marked
"observed on torch 2.14.1"). Each test failed before the change it names; the differences
that stay are deliberate and listed in docs/differences.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers.ids import shown
from helpers.registry import module_backends

import accelrt as acc
from accelrt._errors import AcceleratorTypeError
from accelrt.backends.cpu import CpuBackend

_backends = module_backends({"s25k": lambda: CpuBackend(num_devices=2, name="s25k")})
D0, D1 = "s25k:0", "s25k:1"

RT_TYPE = (TypeError, RuntimeError)       # PyTorch's RuntimeError, accelrt's TypeError too


def _raises(exc: tuple[type[BaseException], ...], match: str, fn: Callable[[], Any]) -> None:
    with pytest.raises(exc[0], match=match) as info:
        fn()
    for cls in exc[1:]:
        assert isinstance(info.value, cls), (type(info.value), cls)


# ---------------------------------------------------------------------- dtype=None

# observed on torch 2.14.1: dtype=None is the default dtype (float32; randint's int64), in
# every factory: torch.empty(2, dtype=None).dtype == torch.float32. accelrt refused None in
# empty/zeros/ones/Array ("dtype must not be None"), and rand/randn/randint read it as
# numpy's np.dtype(None), float64 (so randint(3, (2,), dtype=None) made floats).
NONE_DEFAULTS: list[tuple[str, Callable[..., Any], str]] = [
    ("empty", lambda **kw: acc.empty(2, 3, **kw), "float32"),
    ("zeros", lambda **kw: acc.zeros(2, 3, **kw), "float32"),
    ("ones", lambda **kw: acc.ones((2, 3), **kw), "float32"),
    ("Array", lambda **kw: acc.Array(2, 3, **kw), "float32"),
    ("rand", lambda **kw: acc.rand(2, 3, **kw), "float32"),
    ("randn", lambda **kw: acc.randn(2, 3, **kw), "float32"),
    ("randint", lambda **kw: acc.randint(3, (2, 3), **kw), "int64"),
]


@pytest.mark.parametrize("name, make, want", NONE_DEFAULTS, ids=[n for n, _, _ in NONE_DEFAULTS])
def test_dtype_none_is_the_default_dtype(name: str, make: Callable[..., Any], want: str) -> None:
    a = make(dtype=None, device=D0)
    assert a.dtype == np.dtype(want) and a.shape == (2, 3)
    assert make(device=D0).dtype == a.dtype
    if name == "ones":
        assert a.tolist() == [[1.0] * 3] * 2
    if name in ("empty", "zeros", "ones", "rand", "randn"):
        host = make(dtype=None, pin_memory=True)
        assert isinstance(host, np.ndarray) and host.dtype == np.dtype(want)


def test_dtype_none_with_the_legacy_positional_dtype_is_not_a_second_dtype() -> None:
    with pytest.warns(FutureWarning, match="positional dtype"):
        a = acc.empty((2,), "int8", dtype=None, device=D0)  # type: ignore[call-overload]
    assert a.dtype == np.int8


# ---------------------------------------------------------------------- complex rand/randn

# observed on torch 2.14.1: rand/randn take complex64/complex128 and draw the interleaved real
# and imaginary parts as floats: torch.randn(3, dtype=torch.complex64, generator=g) is
# torch.randn(6, generator=g) (same seed) times sqrt(1/2), pairwise; rand's parts are uniform
# in [0, 1). accelrt raised TypeError ("makes floating numbers").
@pytest.mark.parametrize("dtype, part", [("complex64", "float32"), ("complex128", "float64")])
def test_complex_rand_and_randn_draw_each_part_as_a_float(dtype: str, part: str) -> None:
    g = acc.random.Generator(D0).manual_seed(11)
    z = acc.randn(3, 2, dtype=dtype, generator=g).numpy()
    g.manual_seed(11)
    x = acc.randn(12, dtype=part, generator=g).numpy()
    assert z.dtype == np.dtype(dtype) and z.shape == (3, 2)
    np.testing.assert_allclose(z.view(part).ravel(), x * math.sqrt(0.5), rtol=1e-6)
    g.manual_seed(11)
    u = acc.rand(4, dtype=dtype, generator=g).numpy()
    g.manual_seed(11)
    assert u.view(part).tolist() == acc.rand(8, dtype=part, generator=g).tolist()
    big = acc.randn(100_000, dtype=dtype, device=D0).numpy()
    assert abs(float(big.real.std()) - math.sqrt(0.5)) < 0.01
    assert abs(float(big.imag.std()) - math.sqrt(0.5)) < 0.01
    assert abs(float(np.mean(np.abs(big) ** 2)) - 1.0) < 0.02
    pinned = acc.rand(2, dtype=dtype, pin_memory=True)
    assert pinned.dtype == np.dtype(dtype) and ((pinned.real >= 0) & (pinned.real < 1)).all()
    assert acc.rand(0, dtype=dtype, device=D0).shape == (0,)


# observed on torch 2.14.1: torch.rand(2, dtype=torch.int64) raises NotImplementedError
# '"check_uniform_bounds" not implemented for 'Long'' and torch.randint(2, (2,),
# dtype=torch.complex64) RuntimeError "check_random_bounds handles only integral,
# floating-point and boolean types": RuntimeErrors both; accelrt raised a plain TypeError
@pytest.mark.parametrize("make", [
    lambda: acc.rand(2, dtype="int64", device=D0),
    lambda: acc.randn(2, dtype=bool, device=D0),
    lambda: acc.rand(2, dtype="uint8", pin_memory=True),
    lambda: acc.randint(2, (2,), dtype="complex64", device=D0),
])
def test_random_factories_refuse_a_dtype_of_another_kind_with_a_runtime_error(
        make: Callable[[], Any]) -> None:
    _raises((AcceleratorTypeError, TypeError, RuntimeError), "dtype must be", make)


# ---------------------------------------------------------------------- asarray: inference

# observed on torch 2.14.1 (torch.asarray(data).dtype): a numpy scalar keeps its dtype, also
# inside a list, where the items promote by PyTorch's promoteTypes (an integer with a float
# is the float type: float16 with a Python int stays float16). accelrt read the data with
# numpy and narrowed every float64 of Python data to float32, numpy scalars included.
INFERRED = [
    (np.float64(1.5), "float64", ()), ([np.float64(1), 2.5], "float64", (2,)),
    ([np.float16(1), 2], "float16", (2,)), ([np.float16(1), 2.5], "float32", (2,)),
    ([np.float32(1), 1j], "complex64", (2,)), ([np.float64(1), 1j], "complex128", (2,)),
    ([np.int8(1), True], "int8", (2,)), ([[np.int8(1)], [2.5]], "float32", (2, 1)),
    ((np.array([1.5]), np.array([2.0])), "float64", (2, 1)),
    ([np.array([1], np.int8), np.array([2], np.int16)], "int16", (2, 1)),
    ([np.uint8(1), np.int8(2)], "int16", (2,)),
    ([np.float16(1), np.complex64(1j)], "complex64", (2,)),
    ([1, 2.5], "float32", (2,)), ([True, 1], "int64", (2,)), ([[], []], "float32", (2, 0)),
    (range(3), "int64", (3,)), ([range(2), range(2)], "int64", (2, 2)), (np.int32(3), "int32", ()),
    (3, "int64", ()), (True, "bool", ()), (1.5, "float32", ()), (1j, "complex64", ()),
    ([1.5, 2**63], "float32", (2,)),
]


@pytest.mark.parametrize("data, want, shape", INFERRED, ids=repr)
def test_asarray_infers_pytorchs_dtype(data: object, want: str, shape: tuple[int, ...]) -> None:
    a = acc.asarray(data, device=D0)
    assert (a.dtype.name, a.shape) == (want, shape)
    assert a.tolist() == np.asarray(data).astype(want).tolist()


def test_asarray_refuses_to_promote_the_wide_unsigned_types_as_pytorch() -> None:
    # observed on torch 2.14.1: RuntimeError "Promotion for uint16, uint32, uint64 types is not
    # supported, attempted to promote UInt16 and Long" (accelrt made int64 / float64)
    for data in ([np.uint16(1), 2], [np.uint64(1), True], [np.uint32(1), np.int8(2)]):
        _raises((TypeError, RuntimeError), "Promotion for uint16, uint32, uint64 types is not "
                "supported", lambda data=data: acc.asarray(data, device=D0))
    assert acc.asarray([np.uint16(1), 2.5], device=D0).dtype == np.float32
    assert acc.asarray([np.uint64(1), np.uint64(2)], device=D0).dtype == np.uint64


# observed on torch 2.14.1: ValueError "Overflow when unpacking long long" for a Python int
# beyond int64 that becomes an integer (accelrt made uint64, float32 or raised TypeError)
@pytest.mark.parametrize("data", [2**63, [2**63], [1, 2**63], [-1, 2**63], [2**64],
                                  [True, 2**63], -(2**63) - 1, [[1], [2**70]]], ids=repr)
def test_asarray_refuses_ints_beyond_int64(data: object) -> None:
    _raises((ValueError, RuntimeError), "Overflow when unpacking long long",
            lambda: acc.asarray(data, device=D0))
    _raises((ValueError, RuntimeError), "Overflow|does not fit",
            lambda: acc.asarray(data, dtype="int64", device=D0))


def test_asarray_converts_big_ints_where_the_dtype_holds_them() -> None:
    # observed on torch 2.14.1
    assert acc.asarray([2**63], dtype="uint64", device=D0).tolist() == [2**63]
    assert acc.asarray([2**64 - 1], dtype="uint64", device=D0).tolist() == [2**64 - 1]
    assert acc.asarray([2**70], dtype="bool", device=D0).tolist() == [True]
    assert acc.asarray([2**70], dtype="complex64", device=D0).tolist() == [
        complex(np.complex64(2**70))]
    assert acc.asarray([2**63, 1.5], dtype="float64", device=D0).tolist() == [2.0**63, 1.5]
    # ints numpy reads as objects (a bool with a big int), kept exact
    assert acc.asarray((292, False, 2**63), dtype="uint64", device=D0).tolist() == [
        292, 0, 2**63]
    assert acc.asarray([[True, 2**64 - 1]], dtype="uint64", device=D0).tolist() == [
        [1, 2**64 - 1]]
    _raises((ValueError, RuntimeError), "Overflow when unpacking long long",
            lambda: acc.asarray([2**64], dtype="uint64", device=D0))


# ---------------------------------------------------------------------- asarray: conversion

# observed on torch 2.14.1: torch.asarray(python data, dtype=...) converts each number with
# c10::checked_convert into an integer dtype (fill_'s rule: negative ints wrap into an
# unsigned dtype while their magnitude fits, floats truncate within [min, max + 1)), raising
# RuntimeError "value cannot be converted to type uint8 without overflow"; accelrt cast with
# numpy, which wrapped 300 to 44 and -1.5 to 255 in silence.
CHECKED = [
    ([-1], "uint8", [255]), ([-255], "uint8", [1]), ([255.9], "uint8", [255]),
    ([127.9], "int8", [127]), ([-1], "uint16", [65535]), ([True, 2.5], "int32", [1, 2]),
    ([1, 2.5], "int64", [1, 2]), ([-0.0], "uint8", [0]), ([1e40], "float32", [math.inf]),
    ([10**40], "float16", [math.inf]), ([70000.0], "float16", [math.inf]),
    ([1j, 0j], "bool", [True, False]), ([math.nan], "bool", [True]), ([-1], "bool", [True]),
]
OVERFLOW = [([-256], "uint8"), ([256], "uint8"), ([-1.0], "uint8"), ([-0.5], "uint8"),
            ([256.0], "uint8"), ([-128.9], "int8"), ([128], "int8"), ([70000], "int16"),
            ([2**40], "int32"), ([2**40], "uint32"), ([70000], "uint16"),
            ([math.inf], "int32"), ([math.nan], "int64"), ([1e40], "int64"),
            ([[1, 2], [3, 300]], "uint8"), ([np.float64(300)], "uint8"), ([np.int64(300)], "uint8")]


@pytest.mark.parametrize("data, dtype, want", CHECKED, ids=repr)
def test_asarray_converts_python_numbers_as_pytorch(data: list[Any], dtype: str,
                                                    want: list[Any]) -> None:
    assert acc.asarray(data, dtype=dtype, device=D0).tolist() == want


@pytest.mark.parametrize("data, dtype", OVERFLOW, ids=repr)
def test_asarray_refuses_python_numbers_the_dtype_cannot_hold(data: list[Any], dtype: str) -> None:
    _raises((ValueError, RuntimeError),
            f"value cannot be converted to type {dtype} without overflow",
            lambda: acc.asarray(data, dtype=dtype, device=D0))


@pytest.mark.parametrize("dtype", ["uint8", "int64", "float16", "float32", "int8"])
@pytest.mark.parametrize("data", [[1j], [1 + 0j], [1.5, 2j]], ids=repr)
def test_asarray_refuses_complex_numbers_into_a_real_dtype(data: list[Any], dtype: str) -> None:
    # observed on torch 2.14.1: TypeError "'complex' object cannot be interpreted as an
    # integer" / "must be real number, not complex" (accelrt warned and dropped the imaginary
    # part, numpy's ComplexWarning)
    with pytest.raises(TypeError, match="must be real number, not complex"):
        acc.asarray(data, dtype=dtype, device=D0)


# observed on torch 2.14.1: what cannot be read as numbers raises RuntimeError "Could not
# infer dtype of NoneType" (accelrt: a plain TypeError), ragged sequences ValueError "expected
# sequence of length 1 at dim 1 (got 2)" (accelrt: TypeError), numbers mixed with sequences
# TypeError "not a sequence"
@pytest.mark.parametrize("data, name", [(None, "NoneType"), ([1, None], "NoneType"),
                                        ({1, 2}, "set"), ({1: 2}, "dict"),
                                        ((i for i in range(2)), "generator"),
                                        (object(), "object")], ids=shown)
def test_asarray_of_what_has_no_dtype_is_pytorchs_runtime_error(data: object, name: str) -> None:
    _raises((AcceleratorTypeError, TypeError, RuntimeError),
            f"Could not infer dtype of {name}: asarray\\(\\) takes numeric data",
            lambda: acc.asarray(data, device=D0))


def test_asarray_of_ragged_or_mixed_sequences() -> None:
    for ragged in ([[1], [1, 2]], [[1, 2], [3]], [[[1], [2]], [[3], [4, 5]]]):
        with pytest.raises(ValueError, match="different lengths"):
            acc.asarray(ragged, device=D0)
    for mixed in ([[1, 2], 3], [1, [2]], [[[1], [2]], [[3], 4]]):
        with pytest.raises(TypeError, match="mixes numbers and sequences"):
            acc.asarray(mixed, device=D0)
    with pytest.raises(TypeError, match="invalid data type 'str'"):
        acc.asarray("1", device=D0)


# ---------------------------------------------------------------------- casts of arrays

def test_casting_arrays_is_unchecked_and_silent_as_pytorch() -> None:
    # observed on torch 2.14.1: torch.asarray(np.array([1e40]), dtype=torch.float16) is inf,
    # torch.zeros(2, dtype=torch.int32).copy_(torch.tensor([nan, inf])) casts as C does, and
    # neither warns; accelrt's numpy casts raised RuntimeWarning ("overflow encountered in
    # cast", "invalid value encountered in cast"), errors under -W error
    assert acc.asarray(np.array([1e40]), dtype="float16", device=D0).tolist() == [math.inf]
    assert acc.asarray(np.array([math.nan, math.inf]), dtype="int32", device=D0).shape == (2,)
    a = acc.zeros(2, dtype="float32", device=D0)
    assert a.copy_(np.array([1e300, -1e300])).tolist() == [math.inf, -math.inf]
    assert acc.zeros(2, dtype="uint8", device=D0).copy_(np.array([math.nan, 1.0])).shape == (2,)
    assert acc.zeros(2, dtype="uint8", device=D0).copy_(300).tolist() == [44, 44]


def test_complex_to_real_casts_warn_as_pytorch() -> None:
    # observed on torch 2.14.1: UserWarning "Casting complex values to real discards the
    # imaginary part" (numpy's is a ComplexWarning, which user filters for PyTorch's miss);
    # into bool no warning: nonzero is True
    src = acc.asarray(np.array([1 + 2j, 3j], np.complex64), device=D0)
    for make in (lambda: acc.zeros(2, device=D0).copy_(src),
                 lambda: acc.zeros(2, dtype="int64", device=D0).copy_(np.array([1 + 2j, 3j])),
                 lambda: acc.asarray(np.array([1 + 2j, 3j]), dtype="float64", device=D0)):
        with pytest.warns(UserWarning, match="^Casting complex values to real discards the "
                          "imaginary part$") as record:
            out = make()
        assert out.tolist() == [1, 0]
        assert all(w.category is UserWarning for w in record)
    assert acc.zeros(2, dtype=bool, device=D0).copy_(src).tolist() == [True, True]


# ---------------------------------------------------------------------- fill values

def test_numpy_floats_wider_than_python_fill_as_their_value() -> None:
    # observed on torch 2.14.1: torch.full((2,), np.longdouble(1.5)) is float32 [1.5, 1.5] and
    # torch.empty(2, dtype=torch.uint8).fill_(np.longdouble(1.5)) [1, 1] (accelrt: TypeError)
    a = acc.full((2,), np.longdouble(1.5), device=D0)
    assert a.dtype == np.float32 and a.tolist() == [1.5, 1.5]
    assert acc.empty(2, dtype="uint8", device=D0).fill_(np.longdouble(1.5)).tolist() == [1, 1]
    z = acc.full((1,), np.clongdouble(1 + 2j), device=D0)
    assert z.dtype == np.complex64 and z.tolist() == [1 + 2j]


# ---------------------------------------------------------------------- to() and numpy()

def test_to_takes_pytorchs_dtype_and_copy_forms() -> None:
    # observed on torch 2.14.1 (t a float32 cpu tensor): t.to() is t, t.to(None) is t,
    # t.to(torch.float32) is t, t.to('cpu', copy=True) is not t, t.to(float).dtype float64,
    # t.to(int) int64, t.to(bool) bool, t.to(complex) complex128, t.to(dtype=torch.float64),
    # t.to(device='cpu', dtype=torch.int32), t.to(other) takes other's dtype and device;
    # accelrt's to() needed a device and took neither dtype= nor copy=
    a = acc.full((2, 2), 2.5, device=D0)
    assert a.to() is a and a.to(None) is a and a.to(np.float32) is a
    assert a.to(D0, non_blocking=True, dtype="float32") is a
    assert a.to(np.dtype("float32"), True) is a
    for form, want in ((float, "float64"), (int, "int64"), (bool, "bool"),
                       (complex, "complex128"), (np.float16, "float16"),
                       (np.dtype("uint8"), "uint8")):
        b = a.to(form)
        assert b.dtype == np.dtype(want) and b.device == a.device
        assert b.tolist() == np.full((2, 2), 2.5).astype(want).tolist()
    c = a.to(D0, copy=True)
    assert c is not a and c.data_ptr() != a.data_ptr() and c.tolist() == a.tolist()
    d = a.to(device=D1, dtype="int32")
    assert (d.device, d.dtype, d.tolist()) == (acc.device("s25k", 1), np.int32, [[2, 2]] * 2)
    e = a.to(d)
    assert (e.device, e.dtype) == (d.device, d.dtype)
    assert a.to(dtype=None, copy=False) is a


def test_to_none_keeps_the_arrays_device() -> None:
    # observed on torch 2.14.1: to(None) (and to()) is the tensor itself; accelrt read None
    # as the current device and moved an array of another device there
    with acc.device(D0):
        b = acc.zeros(3, device=D1)
        assert b.to(None) is b and b.to() is b and b.to(dtype="int8").device == b.device


@pytest.mark.parametrize("kw", [{"copy": 1}, {"copy": None}, {"copy": "yes"},
                                {"non_blocking": 1}])
def test_to_flags_must_be_bools(kw: dict[str, Any]) -> None:
    # observed on torch 2.14.1: t.to('cpu', copy=1) and copy=None raise TypeError ("to()
    # received an invalid combination of arguments")
    with pytest.raises(TypeError, match="must be a bool"):
        acc.zeros(2, device=D0).to(D0, **kw)


def test_to_refuses_the_dtype_twice() -> None:
    a = acc.zeros(2, device=D0)
    with pytest.raises(TypeError, match="dtype twice"):
        a.to(np.float64, dtype="float32")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="dtype twice"):
        a.to(a, dtype="float32")
    with pytest.raises(TypeError, match="non_blocking must be a bool"):
        a.to(D0, np.float64)  # type: ignore[call-overload]   # PyTorch's to(device, dtype)


def test_numpy_takes_pytorchs_force() -> None:
    # observed on torch 2.14.1: t.numpy(force=True) is the numpy array (accelrt: TypeError)
    a = acc.full(3, 4, dtype="int16", device=D0)
    assert a.numpy(force=True).tolist() == [4, 4, 4] and a.numpy(force=False).dtype == np.int16
    with pytest.raises(TypeError, match="force must be a bool"):
        a.numpy(force=1)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- deliberate differences

def test_the_deliberate_differences_the_harness_explains() -> None:
    """What scripts/torch_array_diff.py still finds, each listed in docs/differences.md,
    pinned here so that a change to one is a decision (torch 2.14.1's answer in comments)."""
    # torch.empty(2, True) is (2, 1): a bool is a size entry after the first; accelrt: never
    with pytest.raises(TypeError, match="the bool True"):
        acc.empty(2, True, device=D0)  # type: ignore[call-overload]
    # torch.empty(np.array([2, 3])) and torch.full(3, 1.5) raise TypeError ("must be tuple of
    # ints"); accelrt takes more size forms
    assert acc.empty(np.array([2, 3]), device=D0).shape == (2, 3)
    assert acc.full(3, 1.5, device=D0).shape == (3,)
    assert acc.empty(range(2, 4), device=D0).shape == (2, 3)
    # torch.full((2,), np.bool_(True)) is float32; accelrt: bool. torch.full((2,),
    # np.complex64(1j)) drops the imaginary part (numpy's ComplexWarning); accelrt: complex64
    assert acc.full((2,), np.bool_(True), device=D0).dtype == np.bool_
    assert acc.full((2,), np.complex64(1j), device=D0).tolist() == [1j, 1j]
    # torch.full((2,), np.array(3)) raises TypeError ("must be Number"); accelrt reads it
    assert acc.full((2,), np.array(3), device=D0).tolist() == [3, 3]
    # torch.asarray(bytearray(b"ab")) reinterprets the bytes as float32 (ValueError: 2 bytes);
    # accelrt reads a buffer through numpy, with its format
    assert acc.asarray(bytearray(b"ab"), device=D0).tolist() == [97, 98]
    # torch.asarray([-1, 1.5], dtype=torch.uint8) wraps -1 (an int) to 255; accelrt reads the
    # list as floats, and -1.0 does not fit uint8
    with pytest.raises(ValueError, match="cannot be converted to type uint8"):
        acc.asarray([-1, 1.5], dtype="uint8", device=D0)
    # torch.asarray([-1], dtype=torch.uint64) raises OverflowError; accelrt wraps, as uint8
    assert acc.asarray([-1], dtype="uint64", device=D0).tolist() == [2**64 - 1]
