"""Review by tests (issue 24): arrays and single-process collectives against PyTorch's
argument rules and hostile inputs.

Factories' sizes (every form, 0-d, empty, negative, overflowing int64), dtypes and devices;
``Array.fill_`` against PyTorch's overflow rule (``c10::overflows``), ``copy_``, ``to``,
``record_stream``, use after ``close()``, ``numpy()`` of memory the host cannot read, arrays
dropped while copies are queued on asynchronous streams (in a subprocess with a timeout), and
``acc.comm``'s argument rules (``torch/csrc/cuda/comm.cpp``, ``torch/nn/parallel/comm.py``).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from collections import UserList

import numpy as np
import pytest
from helpers.ids import shown
from helpers.registry import DeviceLater, module_backends, resolve
from helpers.staging import RecordingNoHostCpu

import accelrt as acc
from accelrt import backends, comm
from accelrt._errors import AcceleratorTypeError, AcceleratorValueError
from accelrt.backends.cpu import CpuBackend

# closed and unregistered after the module
_backends = module_backends({
    "s24arr": lambda: CpuBackend(num_devices=3, name="s24arr"),
    "s24nohost": lambda: RecordingNoHostCpu(num_devices=2, name="s24nohost"),
})
D0, D1, D2 = "s24arr:0", "s24arr:1", "s24arr:2"
H0, H1 = "s24nohost:0", "s24nohost:1"


class Size(tuple):  # type: ignore[type-arg]
    """A ``torch.Size``-like tuple subclass."""


def put(data: object, dev: str = D0, dtype: str | None = None) -> acc.Array:
    return acc.asarray(np.array(data, dtype=dtype), device=dev, copy=True)


# ---------------------------------------------------------------------- sizes

SIZE_FORMS = [
    ((2, 3), {}, (2, 3)),
    (((2, 3),), {}, (2, 3)),
    (([2, 3],), {}, (2, 3)),
    ((np.int64(2), np.int8(3)), {}, (2, 3)),
    ((np.array([2, 3]),), {}, (2, 3)),
    ((np.array(4),), {}, (4,)),
    ((Size((2, 3)),), {}, (2, 3)),
    ((UserList([2, 3]),), {}, (2, 3)),
    ((range(2, 4),), {}, (2, 3)),
    ((), {"size": (2, 3)}, (2, 3)),
    ((), {"size": [4]}, (4,)),
    # size=5 (an int keyword) is refused as torch 2.14.1 refuses it (session 26:
    # test_review_torch_differences_s26.py)
    ((), {"size": Size((1, 2))}, (1, 2)),
    (((),), {}, ()),
    (([],), {}, ()),
    ((0,), {}, (0,)),
    ((3, 0), {}, (3, 0)),
    (((0, 2**40, 2**20),), {}, (0, 2**40, 2**20)),
]


@pytest.mark.parametrize("args, kw, shape", SIZE_FORMS)
@pytest.mark.parametrize("fname", ["empty", "zeros", "ones", "rand", "randn", "Array"])
def test_every_size_form_of_every_factory(fname: str, args: tuple[object, ...],
                                          kw: dict[str, object], shape: tuple[int, ...]) -> None:
    a = getattr(acc, fname)(*args, device=D0, **kw)
    assert a.shape == shape and type(a.shape) is tuple
    assert all(type(d) is int for d in a.shape)
    assert a.size == int(np.prod(shape, dtype=object)) and a.ndim == len(shape)
    assert a.nbytes == a.size * a.itemsize
    if a.size == 0:
        assert a.nbytes == 0 and a.data_ptr() == 0 and a.numpy().shape == shape


@pytest.mark.parametrize("size, shape", [((2, 3), (2, 3)), ([4], (4,)), (Size((2,)), (2,)),
                                         (3, (3,)), ((), ()), ((0, 5), (0, 5))])
def test_one_argument_size_of_full_and_randint(size: object, shape: tuple[int, ...]) -> None:
    assert acc.full(size, 1.5, device=D0).shape == shape  # type: ignore[arg-type]
    if isinstance(size, int):   # randint refuses a bare int since s25, as torch.randint
        with pytest.raises(TypeError, match="must be tuple of ints"):
            acc.randint(5, size, device=D0)  # type: ignore[arg-type]
    else:
        assert acc.randint(5, size, device=D0).shape == shape  # type: ignore[arg-type]


def test_zero_d_and_empty_arrays_hold_what_they_should() -> None:
    z = acc.full((), 7, dtype="int16", device=D0)
    assert z.tolist() == 7 and z.size == 1 and z.nbytes == 2 and z.ndim == 0
    assert repr(z) == "accelrt.Array(shape=(), dtype=int16, device='s24arr:0')"
    e = acc.zeros((0, 4), device=D0)
    assert e.tolist() == [] and e.nbytes == 0 and e.fill_(3.0) is e
    assert e.copy_(np.zeros((0, 4))) is e and e.to(D1).shape == (0, 4)


# (0, 2**62, 2**62) is an empty tensor in PyTorch, but numpy cannot make its numpy(): accelrt
# counts an empty shape's non-zero dimensions, as numpy does
HUGE = [(2**63,), (2**64,), (2**40, 2**40), (2**32, 2**31), (2**61,), (2**62, 2**62, 0),
        (0, 2**62, 2**62), (0, 2**61, 4), (np.uint64(2**64 - 1),)]


@pytest.mark.parametrize("shape", HUGE, ids=str)
@pytest.mark.parametrize("fname", ["empty", "zeros", "ones", "rand", "Array"])
def test_a_size_whose_product_overflows_int64_is_a_value_error(fname: str,
                                                                shape: tuple[int, ...]) -> None:
    # PyTorch: RuntimeError "Storage size calculation overflowed with sizes=[...]"; before the
    # fix accelrt asked the allocator for it and raised OutOfMemoryError (or made an "empty"
    # array of an impossible shape)
    with pytest.raises(AcceleratorValueError, match="overflowed") as ei:
        getattr(acc, fname)(*shape, device=D0)
    assert isinstance(ei.value, RuntimeError) and isinstance(ei.value, ValueError)
    with pytest.raises(ValueError, match="overflowed"):
        acc.full(shape, 1.0, device=D0)
    with pytest.raises(ValueError, match="overflowed"):
        acc.randint(3, shape, device=D0)
    with pytest.raises(ValueError, match="overflowed"):
        acc.empty(shape, pin_memory=True)


def test_the_largest_sizes_that_fit_int64_are_an_out_of_memory() -> None:
    with pytest.raises(acc.OutOfMemoryError):
        acc.empty(2**63 - 1, dtype="uint8", device=D0)
    with pytest.raises(acc.OutOfMemoryError):
        acc.empty(2**30, 2**30, device=D0)
    with pytest.raises(acc.OutOfMemoryError):
        acc.rand(2**60, dtype="float32", device=D0)
    with pytest.raises(AcceleratorValueError, match="overflowed"):
        acc.empty(2**60, dtype="float64", device=D0)        # 2**63 bytes


@pytest.mark.parametrize("args, kw, exc, match", [
    ((-1,), {}, AcceleratorValueError, "negative dimension -1"),
    ((2, -3), {}, AcceleratorValueError, "negative dimension -3"),
    (([2, -3],), {}, AcceleratorValueError, "negative dimension -3"),
    ((np.int64(-2),), {}, AcceleratorValueError, "negative dimension -2"),
    ((2.0,), {}, TypeError, "must be ints, got float"),
    (((2, 3.0),), {}, TypeError, "must be ints, got float"),
    ((np.float64(2),), {}, TypeError, "must be ints, got numpy.float64"),
    ((np.array([2.0, 3.0]),), {}, TypeError, "must be ints, got float"),
    ((np.array(2.0),), {}, TypeError, "must be ints, got numpy.ndarray"),
    ((True,), {}, TypeError, "bool"),
    ((2, np.True_), {}, TypeError, "bool"),
    ((np.array([True]),), {}, TypeError, "bool"),
    (((2, 3), 4), {}, TypeError, "mixes ints and sequences"),
    ((((2, 3),),), {}, TypeError, "mixes ints and sequences"),
    ((None,), {}, TypeError, "must be ints, got NoneType"),
    (("3",), {}, TypeError, "must be ints, got str"),
    ((np.zeros((2, 2), int),), {}, TypeError, "1-D"),
    ((), {}, TypeError, "missing the size"),
    ((), {"size": None}, TypeError, "missing the size"),
    ((2,), {"size": 3}, TypeError, "both positionally"),
    ((2,), {"shape": 3}, TypeError, "unexpected keyword"),
])
@pytest.mark.parametrize("fname", ["empty", "zeros", "ones", "rand", "randn", "Array"])
def test_bad_sizes(fname: str, args: tuple[object, ...], kw: dict[str, object],
                   exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        getattr(acc, fname)(*args, device=D0, **kw)


def test_a_negative_dimension_is_also_a_runtime_error_as_in_pytorch() -> None:
    with pytest.raises(RuntimeError, match="negative dimension"):
        acc.empty(-1, device=D0)


def test_full_and_randint_take_the_size_as_one_argument() -> None:
    with pytest.raises(TypeError):
        acc.full(2, 3, 1.5)  # type: ignore[call-overload,misc]
    with pytest.raises(TypeError, match="must be ints, got float"):
        acc.full(2.0, 1, device=D0)  # type: ignore[call-overload]
    with pytest.raises(AcceleratorValueError, match="negative dimension"):
        acc.full((2, -1), 1, device=D0)


# ---------------------------------------------------------------------- dtypes

DTYPES = [("float32", "float32"), ("float64", "float64"), ("float16", "float16"),
          ("int8", "int8"), ("int16", "int16"), ("int32", "int32"), ("int64", "int64"),
          ("uint8", "uint8"), ("uint16", "uint16"), ("uint32", "uint32"),
          ("uint64", "uint64"), ("bool", "bool"), ("complex64", "complex64"),
          ("complex128", "complex128"), (np.float32, "float32"), (np.dtype("int8"), "int8"),
          (float, "float64"), (int, "int64"), (bool, "bool"), (complex, "complex128"),
          ("f4", "float32"), ("<f8", "float64"), ("=i2", "int16"), (np.uint16, "uint16")]


@pytest.mark.parametrize("dtype, name", DTYPES, ids=str)
def test_every_dtype_form(dtype: object, name: str) -> None:
    for make in (lambda: acc.empty(2, dtype=dtype, device=D0),
                 lambda: acc.zeros(2, dtype=dtype, device=D0),
                 lambda: acc.ones(2, dtype=dtype, device=D0),
                 lambda: acc.full((2,), 1, dtype=dtype, device=D0),
                 lambda: acc.asarray([1, 0], dtype=dtype, device=D0)):
        a = make()
        assert a.dtype == np.dtype(name) and a.nbytes == 2 * np.dtype(name).itemsize
    assert acc.ones(2, dtype=dtype, device=D0).tolist() == np.ones(2, name).tolist()


@pytest.mark.parametrize("dtype, exc, match", [
    ("bogus", TypeError, "unknown dtype"), ("bfloat16", TypeError, "unknown dtype"),
    # None is the default dtype, as in PyTorch; a number is no dtype (torch: "argument
    # 'dtype' must be torch.dtype, not int")
    (5, TypeError, "argument 'dtype' must be a numpy dtype"),
    ("object", TypeError, "not supported"), (object, TypeError, "not supported"),
    (str, TypeError, "not supported"), ("U3", TypeError, "not supported"),
    ("S3", TypeError, "not supported"), ("V4", TypeError, "not supported"),
    ("datetime64", TypeError, "not supported"), ("i4,i4", TypeError, "not supported"),
    ("(2,)i4", TypeError, "not supported"),
    ([("a", "i4")], TypeError, "argument 'dtype' must be a numpy dtype"),
    ("float128", TypeError, "not supported on s24arr:0"), (">f4", ValueError, "byte order"),
    ({"x": 1}, TypeError, "dtype"),
])
def test_bogus_dtypes(dtype: object, exc: type[Exception], match: str) -> None:
    makers = [lambda: acc.empty(2, dtype=dtype, device=D0),
              lambda: acc.Array(2, dtype=dtype, device=D0),
              lambda: acc.asarray([1], dtype=dtype, device=D0),
              lambda: acc.full((2,), 1, dtype=dtype, device=D0)]
    for make in makers:
        with pytest.raises(exc, match=match):
            make()


def test_random_factories_check_their_dtypes() -> None:
    with pytest.raises(TypeError, match="floating"):
        acc.rand(2, dtype="int32", device=D0)
    with pytest.raises(TypeError, match="floating"):
        acc.randn(2, dtype="bool", device=D0)
    assert acc.rand(2, dtype=np.float64, device=D0).dtype == np.float64
    with pytest.raises(ValueError, match="do not fit dtype uint8"):
        acc.randint(300, (2,), dtype="uint8", device=D0)
    assert acc.randint(2, (4,), dtype="bool", device=D0).dtype == np.bool_


# ---------------------------------------------------------------------- devices

@pytest.mark.parametrize("device, where", [
    (0, None), ("s24arr", "s24arr:0"), ("s24arr:1", "s24arr:1"), (DeviceLater("s24arr", 2),
                                                                  "s24arr:2"),
    (DeviceLater("s24arr"), "s24arr:0"), ("cpu", "cpu:0"), (acc.device("cpu", 0), "cpu:0"),
])
def test_every_device_form(device: object, where: str | None) -> None:
    device = resolve(device)
    a = acc.zeros(2, device=device)  # type: ignore[arg-type]
    if where is not None:
        assert str(a.device) == where
    assert a.device.index is not None
    b = acc.full((2,), 1.0, device=D0).to(device)  # type: ignore[arg-type]
    assert b.device == a.device and b.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("device, exc, match", [
    ("s24arr:3", IndexError, "out of index range"), ("s24arr:99", IndexError, "out of index"),
    (DeviceLater("s24arr", 7), IndexError, "out of index"),
    ("s24arr:-1", ValueError, "Invalid device string"), ("s24arr:x", ValueError, "Invalid"),
    ("", ValueError, "Device string must not be empty"), ("nosuchbackend:0", acc.BackendUnavailableError,
                                                "Unknown backend"),
    (1.0, TypeError, "float"), (True, TypeError, "bool"),
    # bytes and numpy integers are devices as torch's parser reads them (session 26w):
    # torch.device(b"cpu:x") and np.int64(-1) raise its RuntimeError (observed, torch 2.14.1)
    (b"cpu:x", ValueError, "Invalid device string"), (np.int64(-1), ValueError, "negative"),
    (-1, ValueError, "negative"),
])
def test_bad_devices(device: object, exc: type[Exception], match: str) -> None:
    device = resolve(device)
    a = acc.full((2,), 1.0, device=D0)
    for make in (lambda: acc.empty(2, device=device), lambda: acc.full((2,), 1, device=device),
                 lambda: acc.asarray([1.0], device=device), lambda: a.to(device)):
        with pytest.raises(exc, match=match):
            make()  # type: ignore[no-untyped-call]


@pytest.mark.skipif(backends.unavailable_reason("cuda") is None, reason="cuda is usable here")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:1"])
def test_cuda_without_a_gpu_is_a_clear_backend_unavailable_error(device: str) -> None:
    a = acc.full((2,), 1.0, device=D0)
    for make in (lambda: acc.empty(2, device=device), lambda: a.to(device),
                 lambda: acc.asarray([1.0], device=device), lambda: (a.copy_(a), a.to(device)),
                 lambda: comm.broadcast(a, [device]), lambda: comm.gather([a], destination=device)):
        with pytest.raises(acc.BackendUnavailableError, match="cuda"):
            make()


# ---------------------------------------------------------------------- fill_ / full

# c10::overflows: an int outside the integer range, a float outside it (before truncation),
# a finite float beyond the floating type's largest, a NaN or inf into an integer, a complex
# with a non-zero imaginary part into a real type: "value cannot be converted to type ...
# without overflow" (RuntimeError). accelrt: AcceleratorValueError / AcceleratorTypeError.
REFUSED = [
    ("uint8", 300, AcceleratorValueError), ("uint8", 256, AcceleratorValueError),
    ("int8", 128, AcceleratorValueError), ("int8", -129, AcceleratorValueError),
    ("int8", 128.0, AcceleratorValueError), ("int8", -128.5, AcceleratorValueError),
    ("uint8", -256, AcceleratorValueError), ("uint8", -0.5, AcceleratorValueError),
    ("int64", 2**63, AcceleratorValueError), ("uint64", 2**64, AcceleratorValueError),
    ("int64", 1e19, AcceleratorValueError), ("int32", float("nan"), AcceleratorValueError),
    ("int32", float("inf"), AcceleratorValueError),
    ("float16", 65519.0, AcceleratorValueError), ("float16", 1e10, AcceleratorValueError),
    ("float32", 1e39, AcceleratorValueError), ("float32", -1e39, AcceleratorValueError),
    ("float32", 10**40, AcceleratorValueError), ("float64", 10**400, AcceleratorValueError),
    ("complex64", complex(1e39, 0), AcceleratorValueError),
    ("complex64", complex(0, -1e39), AcceleratorValueError),
    ("float32", 1 + 2j, AcceleratorTypeError), ("float32", 1j, AcceleratorTypeError),
    ("int32", 3 + 1j, AcceleratorTypeError),
    ("float32", complex(1, float("nan")), AcceleratorTypeError),
    ("uint8", np.uint64(300), AcceleratorValueError), ("int8", np.float64(200.5),
                                                       AcceleratorValueError),
]


@pytest.mark.parametrize("dtype, value, exc", REFUSED, ids=str)
def test_fill_values_that_do_not_fit_are_refused_as_pytorch(dtype: str, value: object,
                                                            exc: type[Exception]) -> None:
    a = acc.zeros(3, dtype=dtype, device=D0)
    with pytest.raises(exc) as ei:
        a.fill_(value)
    assert isinstance(ei.value, RuntimeError)       # as PyTorch's
    assert not a.numpy().any()                      # nothing written
    with pytest.raises(exc):
        acc.full((3,), value, dtype=dtype, device=D0)  # type: ignore[arg-type]
    with pytest.raises(exc):
        acc.full((3,), value, dtype=dtype, pin_memory=True)  # type: ignore[arg-type]
    with pytest.raises(exc):
        acc.zeros(3, dtype=dtype, device=H0).fill_(value)


ACCEPTED = [
    ("uint8", 255, 255), ("int8", -128, -128), ("int8", 127.0, 127), ("int32", 2.9, 2),
    ("int32", -2.9, -2), ("int64", 2**63 - 1, 2**63 - 1), ("uint64", 2**64 - 1, 2**64 - 1),
    ("float16", 65504.0, 65504.0), ("float16", float("inf"), float("inf")),
    ("float32", float("-inf"), float("-inf")), ("float32", 2**63, float(2**63)),
    ("float32", 1 + 0j, 1.0), ("int16", 3 - 0j, 3), ("float64", np.float32(0.5), 0.5),
    ("bool", 5, True), ("bool", 0.0, False), ("bool", 0.5, True), ("bool", 2 + 0j, True),
    ("float32", True, 1.0), ("int8", np.True_, 1), ("complex64", 1 + 2j, 1 + 2j),
    ("complex128", 3, 3 + 0j), ("int32", np.array(7), 7), ("float32", np.float16(1.5), 1.5),
    # torch >= 2.14: a float below max + 1 fits (127.9 -> 127), a negative int wraps into an
    # unsigned dtype when its magnitude fits, and bool takes any number's truth value
    ("int8", 127.9, 127), ("uint8", -1, 255), ("bool", 1j, True),
]


@pytest.mark.parametrize("dtype, value, want", ACCEPTED, ids=str)
def test_fill_values_that_fit(dtype: str, value: object, want: object) -> None:
    for dev in (D0, H0):
        a = acc.zeros(3, dtype=dtype, device=dev)
        assert a.fill_(value) is a
        assert a.tolist() == [want] * 3
    assert acc.full((3,), value, dtype=dtype, device=D0).tolist() == [want] * 3  # type: ignore[arg-type]


def test_fill_nan_into_floating_and_complex_arrays() -> None:
    assert np.isnan(acc.zeros(2, dtype="float16", device=D0).fill_(float("nan")).numpy()).all()
    v = acc.zeros(2, dtype="complex64", device=D0).fill_(complex(float("nan"), 1)).numpy()
    assert np.isnan(v.real).all() and (v.imag == 1).all()


@pytest.mark.parametrize("value", [None, "1", [1.0], np.array([1.0]), b"1", object()],
                         ids=shown)
def test_fill_with_a_non_number_is_a_type_error(value: object) -> None:
    a = acc.zeros(2, device=D0)
    with pytest.raises(TypeError, match="fill value"):
        a.fill_(value)
    with pytest.raises(TypeError, match="fill value"):
        acc.full((2,), value, device=D0)  # type: ignore[arg-type]


def test_fill_with_an_array_takes_a_0d_array_only() -> None:
    # PyTorch's fill_(Tensor): a 0-d value fills (copy_ on its device, item() elsewhere)
    a = acc.zeros(2, device=D0)
    assert a.fill_(acc.full((), 3.0, device=D0)).tolist() == [3.0, 3.0]
    with pytest.raises(AcceleratorValueError, match="only supports 0-dimension value tensor"):
        a.fill_(acc.zeros((1,), device=D0))


@pytest.mark.parametrize("value, dtype", [(True, "bool"), (7, "int64"), (1.5, "float32"),
                                          (1 + 1j, "complex64"), (np.int8(1), "int64"),
                                          (np.float64(1.0), "float32"), (np.bool_(False), "bool")])
def test_full_infers_the_dtype_as_pytorch(value: object, dtype: str) -> None:
    assert acc.full((2,), value, device=D0).dtype == np.dtype(dtype)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- copy_

def test_copy_between_devices_dtypes_and_from_host() -> None:
    src = put([[1.5, -2.5], [3.0, 4.0]])
    assert acc.zeros((2, 2), dtype="float64", device=D1).copy_(src).tolist() == \
        [[1.5, -2.5], [3.0, 4.0]]
    assert acc.zeros((2, 2), dtype="int32", device=D2).copy_(src).tolist() == [[1, -2], [3, 4]]
    assert acc.zeros((2, 2), dtype="float32", device=H0).copy_(src).tolist() == \
        [[1.5, -2.5], [3.0, 4.0]]
    assert acc.zeros((2, 2), dtype="int8", device=H1).copy_(
        acc.zeros((2, 2), device=H0).copy_(src)).tolist() == [[1, -2], [3, 4]]
    assert acc.zeros((2, 2), device=D0).copy_([[1, 2], [3, 4]], non_blocking=True).tolist() == \
        [[1, 2], [3, 4]]
    assert acc.zeros((), dtype="int8", device=D0).copy_(5).tolist() == 5


@pytest.mark.parametrize("src_shape", [(3, 2), (2,), (3, 1), (1, 2, 3), (2, 3, 1), (6,)])
def test_copy_from_another_shape_is_refused_and_writes_nothing(src_shape: tuple[int, ...]
                                                                ) -> None:
    dst = acc.zeros((2, 3), device=D0)
    for src in (acc.ones(src_shape, device=D0), acc.ones(src_shape, device=D1),
                np.ones(src_shape), acc.ones(src_shape, device=H0)):
        with pytest.raises(AcceleratorValueError, match="shape mismatch") as ei:
            dst.copy_(src)
        assert isinstance(ei.value, RuntimeError)   # PyTorch raises RuntimeError
    assert not dst.numpy().any()


def test_copy_from_itself_and_from_its_own_numpy_view() -> None:
    a = put(np.arange(6.0))
    assert a.copy_(a) is a and a.tolist() == [0, 1, 2, 3, 4, 5]
    assert a.copy_(a, non_blocking=True).tolist() == [0, 1, 2, 3, 4, 5]
    assert a.copy_(a.numpy()).tolist() == [0, 1, 2, 3, 4, 5]
    assert a.copy_(a.numpy()[::-1]).tolist() == [5, 4, 3, 2, 1, 0]
    assert a.copy_(a.numpy()[::-1], non_blocking=True).tolist() == [0, 1, 2, 3, 4, 5]
    b = put(np.arange(4), dtype="int32")
    assert b.copy_(b.numpy().astype(np.float32) * 2).tolist() == [0, 2, 4, 6]


@pytest.mark.parametrize("non_blocking", [False, True])
def test_copy_between_overlapping_borrowed_views_is_a_memmove(non_blocking: bool) -> None:
    host = np.arange(10.0)
    lo, hi = acc.asarray(host[0:6], device=D0), acc.asarray(host[2:8], device=D0)
    hi.copy_(lo, non_blocking=non_blocking)
    acc.synchronize(D0)
    assert host.tolist() == [0, 1, 0, 1, 2, 3, 4, 5, 8, 9]
    host[:] = np.arange(10.0)
    lo.copy_(hi, non_blocking=non_blocking)
    acc.synchronize(D0)
    assert host.tolist() == [2, 3, 4, 5, 6, 7, 6, 7, 8, 9]
    host[:] = np.arange(10.0)
    lo.copy_(host[2:8], non_blocking=non_blocking)     # from numpy memory it overlaps
    acc.synchronize(D0)
    assert host.tolist() == [2, 3, 4, 5, 6, 7, 6, 7, 8, 9]


@pytest.mark.parametrize("src, match", [("abc", "numeric"), (None, "numeric"),
                                        ([[1, 2], [3]], "numpy can convert"),
                                        (np.array([[None] * 3] * 2), "numeric"),
                                        (object(), "numeric")], ids=shown)
def test_copy_from_non_numeric_data_is_a_type_error(src: object, match: str) -> None:
    a = acc.zeros((2, 3), device=D0)
    with pytest.raises(TypeError, match=match):
        a.copy_(src)


@pytest.mark.parametrize("flag", [None, 1, 0, "yes", np.True_])
def test_non_blocking_must_be_a_bool(flag: object) -> None:
    a = acc.zeros(2, device=D0)
    with pytest.raises(TypeError, match="non_blocking must be a bool"):
        a.copy_(np.zeros(2), non_blocking=flag)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="non_blocking must be a bool"):
        a.to(D1, non_blocking=flag)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- to()

@pytest.mark.parametrize("non_blocking", [False, True])
def test_to_every_device_form(non_blocking: bool) -> None:
    a = put([[1, 2], [3, 4]], dtype="int16")
    assert a.to(D0, non_blocking=non_blocking) is a
    assert a.to(acc.device("s24arr", 0)) is a
    for dev in (D1, acc.device("s24arr", 2), "cpu", "cpu:0", acc.device("cpu", 0), H0, H1):
        b = a.to(dev, non_blocking=non_blocking)
        c = b.to(D2, non_blocking=non_blocking)
        assert b is not a and b.dtype == a.dtype and b.shape == a.shape
        assert c.tolist() == b.tolist() == [[1, 2], [3, 4]]
    assert a.to() is a              # as torch 2.14.1's t.to() (test_review_torch_array_s25.py)
    with pytest.raises(acc.BackendUnavailableError, match="Unknown backend 'float64'"):
        a.to("float64")             # a string names a device, as in PyTorch


# ---------------------------------------------------------------------- record_stream

def test_record_stream_checks_its_stream() -> None:
    a = acc.zeros(4, device=D0)
    a.record_stream(acc.Stream(D0))
    a.record_stream(acc.current_stream(D0))
    a.record_stream(acc.Stream(D1))     # another device of the backend: torch records it too
    for other in (acc.Stream(H0), acc.Stream("cpu:0")):
        with pytest.raises(ValueError, match="stream is on"):
            a.record_stream(other)
    for bad in (None, 0, "s24arr:0", acc.Event(D0)):
        with pytest.raises(TypeError, match="accelrt.Stream"):
            a.record_stream(bad)  # type: ignore[arg-type]
    s = acc.Stream(D0)
    s.close()
    with pytest.raises(acc.ClosedError):
        a.record_stream(s)
    with pytest.raises(acc.ClosedError):
        a.close(s)
    assert not a.is_closed          # the failed close left the array open
    a.close()
    with pytest.raises(acc.ClosedError):
        a.record_stream(acc.Stream(D0))
    e = acc.zeros(0, device=D0)
    e.record_stream(acc.Stream(D0))     # no memory to mark


# ---------------------------------------------------------------------- close()

def _uses(a: acc.Array) -> list[tuple[str, object]]:
    other = acc.zeros(3, device=D0)
    return [
        ("nbytes", lambda: a.nbytes), ("data_ptr", a.data_ptr), ("numpy", a.numpy),
        ("tolist", a.tolist), ("to same", lambda: a.to(a.device)), ("to other", lambda: a.to(D1)),
        ("to other backend", lambda: a.to(H0)), ("copy_ into", lambda: a.copy_(np.ones(3))),
        ("copy_ from", lambda: other.copy_(a)), ("fill_", lambda: a.fill_(1)),
        ("record_stream", lambda: a.record_stream(acc.current_stream(a.device))),
        ("__dlpack__", lambda: np.from_dlpack(a)), ("np.asarray", lambda: np.asarray(a)),
        ("pickle", lambda: __import__("pickle").dumps(a)),
        ("asarray copy", lambda: acc.asarray(a, copy=True)),
        ("asarray elsewhere", lambda: acc.asarray(a, device=D1)), ("with", a.__enter__),
        ("broadcast", lambda: comm.broadcast(a, [D1])),
        ("broadcast out", lambda: comm.broadcast(other, out=[a])),
        ("scatter", lambda: comm.scatter(a, [D0, D1])),
        ("gather", lambda: comm.gather([other, a])),
        ("gather out", lambda: comm.gather([other], out=a)),
        ("reduce_add", lambda: comm.reduce_add([other, a], destination=D0)),
    ]


@pytest.mark.parametrize("dev", [D0, H0])
def test_every_use_of_a_closed_array_is_a_closed_error(dev: str) -> None:
    a = acc.full(3, 2.0, device=dev)
    a.close()
    a.close()                                       # idempotent
    for name, use in _uses(a):
        with pytest.raises(acc.ClosedError):
            use()  # type: ignore[operator]
            pytest.fail(f"{name} of a closed array did not raise")
    # what does not touch the memory still answers
    assert a.shape == (3,) and a.dtype == np.float32 and str(a.device) == dev
    assert a.size == 3 and a.ndim == 1 and a.is_closed and repr(a).endswith(", closed)")
    assert a == a and hash(a) == hash(a)


def test_close_frees_at_once_and_a_numpy_view_keeps_the_memory() -> None:
    before = acc.memory.memory_allocated(D0)
    a = acc.full(1024, 1.0, device=D0)
    v = a.numpy()
    a.close()
    assert acc.memory.memory_allocated(D0) > before     # the view still shares it
    assert v.sum() == 1024.0
    del v
    gc.collect()
    assert acc.memory.memory_allocated(D0) == before
    b = acc.full(1024, 1.0, device=D0)
    b.close()
    assert acc.memory.memory_allocated(D0) == before


# ---------------------------------------------------------------------- memory the host cannot read

def test_numpy_of_memory_the_host_cannot_read_is_a_copy() -> None:
    a = acc.full((2, 3), 2.5, device=H0)
    v = a.numpy()
    assert v.tolist() == [[2.5] * 3] * 2 and v.flags.writeable and v.flags.owndata
    v[:] = 0                                         # a copy: the array keeps its values
    assert a.tolist() == [[2.5] * 3] * 2
    assert np.asarray(a, dtype=np.int8).tolist() == [[2] * 3] * 2
    with pytest.raises(ValueError, match="not host-accessible"):
        np.asarray(a, copy=False)
    assert acc.full((), 4.0, device=H0).numpy().tolist() == 4.0
    assert acc.zeros((0, 2), device=H0).numpy().shape == (0, 2)
    assert __import__("pickle").loads(__import__("pickle").dumps(a)).tolist() == a.tolist()


# ---------------------------------------------------------------------- arrays dropped while copies are queued

_QUEUED = textwrap.dedent("""
    import gc, os, sys, threading
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    import accelrt as acc
    from accelrt import comm
    assert acc.cpu.device_count() == 2

    for rounds in range(3):
        gate = threading.Event()
        s = acc.Stream("cpu:0")
        s._b.launch_host_func(0, gate.wait, s.stream_id)     # hold the stream back
        with s:
            src = acc.full((4096,), 7.0, device="cpu:0")
            borrowed = acc.asarray(np.full(4096, 3.0, np.float32), device="cpu:0")
            # (borrowed memory stays out of comm, which first finishes a stream's work on it)
            outs = [src.to("cpu:1", non_blocking=True),
                    acc.empty(4096, device="cpu:1").copy_(src, non_blocking=True),
                    acc.empty(4096, device="cpu:1").copy_(borrowed, non_blocking=True),
                    borrowed.to("cpu:1", non_blocking=True),
                    *comm.broadcast(src, ["cpu:1"]),
                    *comm.scatter(src, ["cpu:1", "cpu:0"]),
                    comm.gather([src, outs_1 := src.to("cpu:1", non_blocking=True)],
                                destination="cpu:0"),
                    comm.reduce_add([src, outs_1], destination="cpu:1")]
            want = [7.0, 7.0, 3.0, 3.0, 7.0, 7.0, 7.0, 7.0, 14.0]
            del outs_1
            src.close()                     # and drop the other source while all is queued
            del borrowed, src
            gc.collect()
            junk = [acc.full((4096,), -1.0, device="cpu:0") for _ in range(4)]
        assert not s.query()                # all of it is still queued
        gate.set()
        acc.synchronize("cpu:0"); acc.synchronize("cpu:1")
        for o, w in zip(outs, want):
            v = o.numpy()
            assert (v == w).all(), (w, v[:4])
        del outs, junk, s
        gc.collect()
    print("ok")
""")


def test_arrays_dropped_while_their_copies_are_queued_on_async_streams() -> None:
    env = dict(os.environ, ACCELRT_CPU_STREAMS="async", ACCELRT_CPU_DEVICES="2",
               ACCELRT_ACCELERATOR="cpu")
    src = os.path.join(os.path.dirname(acc.__file__), os.pardir)
    r = subprocess.run([sys.executable, "-c", _QUEUED, os.path.abspath(src)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


# ---------------------------------------------------------------------- comm: devices

def test_broadcast_to_duplicated_devices() -> None:
    a = put([[1.0, 2.0], [3.0, 4.0]])
    outs = comm.broadcast(a, [1, 1, 0, D0, D2])
    assert [str(o.device) for o in outs] == [D1, D1, D0, D0, D2]
    assert outs[2] is a and outs[3] is a and outs[0] is not outs[1]
    assert all(o.tolist() == a.tolist() for o in outs)
    rows = comm.broadcast_coalesced([a, a], [D0, D1, D1])
    assert rows[0] == [a, a] and all(x.tolist() == a.tolist() for r in rows for x in r)
    assert rows[1][0] is not rows[2][0]


def test_scatter_and_gather_with_duplicated_devices() -> None:
    a = put(np.arange(12.0).reshape(4, 3))
    parts = comm.scatter(a, [1, 1, 1])
    assert [p.shape for p in parts] == [(2, 3), (2, 3)]         # torch.chunk: 2 pieces
    assert all(str(p.device) == D1 for p in parts)
    assert comm.gather([a, a], destination=D1).tolist() == np.vstack([a.numpy()] * 2).tolist()
    assert comm.reduce_add([a, a], destination=0).tolist() == (2 * a.numpy()).tolist()


@pytest.mark.parametrize("call, match", [
    (lambda a: comm.broadcast_coalesced([a], []), "at least one device"),
    (lambda a: comm.scatter(a, []), "at least one device"),
    (lambda a: comm.scatter(a, out=[]), "at least one output"),
    (lambda a: comm.reduce_add([]), "at least one input"),
    (lambda a: comm.gather([]), "at least one array"),
])
def test_empty_lists(call: object, match: str) -> None:
    a = put([1.0, 2.0])
    with pytest.raises(AcceleratorValueError, match=match) as ei:
        call(a)  # type: ignore[operator]
    assert isinstance(ei.value, RuntimeError)


def test_empty_input_lists_that_pytorch_accepts() -> None:
    assert comm.broadcast_coalesced([], [D0, D1]) == [[], []]
    assert comm.reduce_add_coalesced([[], []]) == ()
    assert comm.reduce_add_coalesced([]) == ()
    a = put([1.0, 2.0])
    assert comm.broadcast(a, []) == ()
    assert comm.broadcast(a, out=[]) == ()


def test_mixed_backends() -> None:
    a = put([[1.0, 2.0], [3.0, 4.0]])
    assert [o.tolist() for o in comm.broadcast(a, [H0, D1, "cpu:0"])] == [a.tolist()] * 3
    parts = comm.scatter(a, [H1, D2], dim=1)
    assert [p.tolist() for p in parts] == [[[1.0], [3.0]], [[2.0], [4.0]]]
    assert comm.gather(parts, dim=1, destination=D0).tolist() == a.tolist()
    assert comm.gather(parts, dim=1, destination=-1).tolist() == a.tolist()
    assert comm.gather(parts, dim=1, destination=H0).tolist() == a.tolist()
    b = comm.broadcast_coalesced([a], [D0, H0])
    assert b[1][0].tolist() == a.tolist() and str(b[1][0].device) == H0
    with pytest.raises(AcceleratorValueError, match="one backend"):
        comm.reduce_add([a, a.to(H0)], destination=D0)
    with pytest.raises(AcceleratorValueError, match="one backend"):
        comm.reduce_add_coalesced([[a], [a.to(H0)]], destination=D0)


@pytest.mark.parametrize("devices, exc, match", [
    ([-1], ValueError, "non-negative"), ([3], IndexError, "out of index range"),
    (["s24arr:9"], IndexError, "out of index range"), ([None], TypeError, "got None"),
    ([1.0], TypeError, "got float"), ([True], TypeError, "got bool"),
    (["s24arr"], ValueError, "specified index"), (["nosuchbackend:0"],
                                                  acc.BackendUnavailableError, "Unknown"),
    (1, TypeError, "iterable of devices"), ("s24arr:1", TypeError, "iterable of devices"),
    (DeviceLater("s24arr", 1), TypeError, "iterable of devices"),
])
def test_bad_device_lists(devices: object, exc: type[Exception], match: str) -> None:
    devices = resolve(devices)
    a = put([[1.0, 2.0]])
    for call in (lambda: comm.broadcast(a, devices), lambda: comm.scatter(a, devices),
                 lambda: comm.broadcast_coalesced([a], devices)):
        with pytest.raises(exc, match=match):
            call()  # type: ignore[no-untyped-call]


# ---------------------------------------------------------------------- comm: scatter

@pytest.mark.parametrize("chunk_sizes, exc, match", [
    ([1, 2], AcceleratorValueError, "to sum exactly to"),
    ([5, -1], AcceleratorValueError, "non-negative"),
    ([-1, 5], AcceleratorValueError, "non-negative"),
    ([4], AcceleratorValueError, "same length"),
    ([1, 1, 2], AcceleratorValueError, "same length"),
    ([2.0, 2.0], TypeError, "only ints"),
    ([True, 3], TypeError, "only ints"),
    ([np.True_, 3], TypeError, "only ints"),
    (4, TypeError, "sequence of ints"),
    ("22", TypeError, "sequence of ints"),
])
def test_scatter_chunk_sizes(chunk_sizes: object, exc: type[Exception], match: str) -> None:
    a = put(np.arange(8.0).reshape(4, 2))
    with pytest.raises(exc, match=match):
        comm.scatter(a, [D0, D1], chunk_sizes=chunk_sizes)  # type: ignore[arg-type]


@pytest.mark.parametrize("chunk_sizes", [[1, 3], (0, 4), np.array([3, 1]),
                                         [np.int64(2), np.int32(2)]], ids=str)
def test_scatter_chunk_size_forms(chunk_sizes: object) -> None:
    a = put(np.arange(8.0).reshape(4, 2))
    sizes = [int(s) for s in chunk_sizes]  # type: ignore[attr-defined]
    parts = comm.scatter(a, [D0, D1], chunk_sizes=chunk_sizes)  # type: ignore[arg-type]
    assert [p.shape[0] for p in parts] == sizes
    assert np.vstack([p.numpy() for p in parts]).tolist() == a.tolist()


@pytest.mark.parametrize("dim, ok", [(0, True), (1, True), (-1, True), (-2, True),
                                     (2, False), (-3, False), (np.int64(1), True),
                                     (np.int8(-1), True)], ids=str)
def test_dim_range_and_numpy_int_dims(dim: object, ok: bool) -> None:
    # PyTorch's argument parser takes numpy integers for dim (accelrt refused them)
    a = put(np.arange(8.0).reshape(4, 2))
    calls = [lambda: comm.scatter(a, [D0, D1], dim=dim),  # type: ignore[arg-type]
             lambda: comm.gather([a, a], dim=dim, destination=D1)]  # type: ignore[arg-type]
    for call in calls:
        if ok:
            call()
        else:
            with pytest.raises(IndexError, match="Dimension out of range"):
                call()


@pytest.mark.parametrize("dim", [1.0, True, np.False_, "0", None])
def test_dim_must_be_an_int(dim: object) -> None:
    a = put(np.arange(8.0).reshape(4, 2))
    with pytest.raises(TypeError, match="dim must be an int"):
        comm.scatter(a, [D0, D1], dim=dim)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dim must be an int"):
        comm.gather([a], dim=dim)  # type: ignore[arg-type]


def test_scatter_out_arguments() -> None:
    a = put(np.arange(8.0).reshape(4, 2))
    z = lambda shape, dev=D1, dtype="float64": acc.zeros(shape, dtype=dtype, device=dev)  # noqa: E731
    outs = comm.scatter(a, out=[z((1, 2)), z((3, 2), H0)])
    assert np.vstack([o.numpy() for o in outs]).tolist() == a.tolist()
    for out, match in [([z((2, 2)), z((1, 2))], "Total size"),
                       ([z((2, 2)), z((3, 2))], "Total size"),
                       ([z((4, 3))], "incorrect shape"), ([z((4,))], "incorrect shape"),
                       ([z((4, 2), dtype="float32")], "dtype"),
                       ([np.zeros((4, 2))], "accelrt arrays")]:
        with pytest.raises(AcceleratorValueError if match != "accelrt arrays"
                           else AcceleratorTypeError, match=match):
            comm.scatter(a, out=out)
    with pytest.raises(AcceleratorValueError, match="'devices' must not be specified"):
        comm.scatter(a, [D0], out=[z((4, 2))])
    with pytest.raises(AcceleratorValueError, match="'chunk_sizes' must not be specified"):
        comm.scatter(a, chunk_sizes=[4], out=[z((4, 2))])
    with pytest.raises(AcceleratorValueError, match="Exactly one"):
        comm.scatter(a)
    with pytest.raises(TypeError, match="sequence of arrays"):
        comm.scatter(a, out=z((4, 2)))  # type: ignore[arg-type]


def test_scatter_streams_lists_of_any_length_as_pytorch() -> None:
    # comm.cpp: a stream is used for piece i only when i < len(streams); extra entries and
    # missing ones are ignored, a stream of another device is an error
    a = put(np.arange(8.0).reshape(4, 2))
    s0, s1 = acc.Stream(D0), acc.Stream(D1)
    for streams in ([s0], [], [s0, s1, None, s1], [None, s1], (s for s in [s0, s1])):
        parts = comm.scatter(a, [D0, D1], streams=streams)  # type: ignore[arg-type]
        acc.synchronize(D0), acc.synchronize(D1)
        assert np.vstack([p.numpy() for p in parts]).tolist() == a.tolist()
    out = [acc.zeros((2, 2), dtype="float64", device=D1) for _ in range(2)]
    comm.scatter(a, streams=[s1], out=out)
    acc.synchronize(D1)
    assert np.vstack([o.numpy() for o in out]).tolist() == a.tolist()
    with pytest.raises(AcceleratorValueError, match="stream at index 1"):
        comm.scatter(a, [D0, D1], streams=[s0, s0])
    with pytest.raises(AcceleratorValueError, match="stream at index 0"):
        comm.scatter(a, out=out, streams=[s0])
    with pytest.raises(TypeError, match=r"streams\[0\]"):
        comm.scatter(a, [D0, D1], streams=[0, 1])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="sequence of accelrt.Stream"):
        comm.scatter(a, [D0, D1], streams=s0)  # type: ignore[arg-type]
    s1.close()
    with pytest.raises(acc.ClosedError):
        comm.scatter(a, [D0, D1], streams=[None, s1])


# ---------------------------------------------------------------------- comm: broadcast out=

def test_broadcast_out_arguments() -> None:
    a = put([[1.0, 2.0]])
    outs = [acc.zeros((1, 2), dtype="float64", device=d) for d in (D1, H0, D0)]
    assert comm.broadcast(a, out=outs) == tuple(outs)
    assert all(o.tolist() == [[1.0, 2.0]] for o in outs)
    assert comm.broadcast(a, out=[a])[0] is a
    for out, exc, match in [
            ([acc.zeros((2, 1), dtype="float64", device=D1)], AcceleratorValueError, "shape"),
            ([acc.zeros((2,), dtype="float64", device=D1)], AcceleratorValueError, "shape"),
            ([acc.zeros((1, 2), device=D1)], AcceleratorValueError, "dtype"),
            ([np.zeros((1, 2))], AcceleratorTypeError, "accelrt arrays"),
            ([None], AcceleratorTypeError, "accelrt arrays")]:
        with pytest.raises(exc, match=match):
            comm.broadcast(a, out=out)
    with pytest.raises(AcceleratorValueError, match="Exactly one"):
        comm.broadcast(a, [D1], out=outs)
    with pytest.raises(AcceleratorValueError, match="Exactly one"):
        comm.broadcast(a)


# ---------------------------------------------------------------------- comm: reduce / gather

def test_reduce_add_inputs_of_different_shapes_and_dtypes() -> None:
    a = put([[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match="input 1 has invalid size: got 3x1, but expected 1x3"):
        comm.reduce_add([a, acc.zeros((3, 1), dtype="float64", device=D1)], destination=0)
    with pytest.raises(ValueError, match="invalid size"):
        comm.reduce_add([a, acc.zeros((3,), dtype="float64", device=D1)], destination=0)
    with pytest.raises(AcceleratorValueError, match="dtype float64, but input at index 1"):
        comm.reduce_add([a, acc.zeros((1, 3), device=D1)], destination=0)
    with pytest.raises(AcceleratorValueError, match="same device with one of the arrays"):
        comm.reduce_add([a, a.to(D1)], destination=D2)
    with pytest.raises(TypeError, match="accelrt.Array"):
        comm.reduce_add([a.numpy(), a.numpy()])
    with pytest.raises(TypeError, match="sequence of arrays"):
        comm.reduce_add(a)  # type: ignore[arg-type]
    with pytest.raises(AcceleratorValueError, match="same number of arrays"):
        comm.reduce_add_coalesced([[a], [a, a]])
    with pytest.raises(AcceleratorValueError, match=r"inputs\[1\]\[0\] has shape"):
        comm.reduce_add_coalesced([[a], [acc.zeros(3, dtype="float64", device=D1)]])


def test_reduce_add_wraps_integers_as_pytorch() -> None:
    x = acc.full((2,), 200, dtype="uint8", device=D0)
    y = acc.full((2,), 100, dtype="uint8", device=D1)
    assert comm.reduce_add([x, y], destination=D0).tolist() == [44, 44]
    t = acc.ones(2, dtype="bool", device=D1)
    assert comm.reduce_add([acc.ones(2, dtype="bool", device=D0), t], destination=1).tolist() \
        == [True, True]


def test_gather_inputs_and_out() -> None:
    a, b = put(np.arange(6.0).reshape(2, 3)), put(np.ones((1, 3)), D1)
    want = np.vstack([a.numpy(), b.numpy()])
    for bad, exc, match in [
            ([a, acc.zeros((1, 3), device=D1)], AcceleratorValueError, "dtype"),
            ([a, acc.zeros((1, 4), dtype="float64", device=D1)], AcceleratorValueError,
             "invalid shape"),
            ([a, acc.zeros((3,), dtype="float64", device=D1)], AcceleratorValueError,
             "number of dimensions"),
            ([a, np.ones((1, 3))], AcceleratorTypeError, "accelrt arrays"),
            ([acc.zeros((), device=D0)], AcceleratorValueError, "at least one dimension")]:
        with pytest.raises(exc, match=match):
            comm.gather(bad)
    for out in (acc.zeros((3, 3), dtype="float64", device=D2), np.zeros((3, 3)),
                acc.zeros((3, 3), dtype="float64", device=H0)):
        assert comm.gather([a, b], out=out) is out
        assert np.asarray(out).tolist() == want.tolist()
    for out, match in [(acc.zeros((3, 4), dtype="float64", device=D2), "shape"),
                       (acc.zeros((4, 3), dtype="float64", device=D2), "shape"),
                       (acc.zeros((3, 3), device=D2), "dtype"),
                       (np.zeros((3, 3)).T, "C-contiguous"),
                       (np.zeros((3, 3), np.float32), "dtype")]:
        with pytest.raises(AcceleratorValueError, match=match):
            comm.gather([a, b], out=out)
    ro = np.zeros((3, 3))
    ro.setflags(write=False)
    with pytest.raises(AcceleratorValueError, match="writable"):
        comm.gather([a, b], out=ro)
    with pytest.raises(AcceleratorValueError, match="'destination' must not be specified"):
        comm.gather([a, b], destination=0, out=np.zeros((3, 3)))  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="out"):
        comm.gather([a, b], out=[0])  # type: ignore[call-overload]
    for dest, exc in [(-2, ValueError), (9, IndexError), (1.0, TypeError)]:
        with pytest.raises(exc):
            comm.gather([a, b], destination=dest)  # type: ignore[call-overload]


@pytest.mark.parametrize("size", [np.int64(1024), np.int32(1), 64])
def test_buffer_size_takes_numpy_integers(size: object) -> None:
    # PyTorch parses buffer_size as an integer (numpy integers included)
    a, b = put([1.0, 2.0]), put([3, 4], dtype="int8")
    rows = comm.broadcast_coalesced([a, b], [D0, D1], buffer_size=size)  # type: ignore[arg-type]
    assert [x.tolist() for x in rows[1]] == [[1.0, 2.0], [3, 4]]
    sums = comm.reduce_add_coalesced([[a, b], rows[1]], destination=0,
                                     buffer_size=size)  # type: ignore[arg-type]
    assert [x.tolist() for x in sums] == [[2.0, 4.0], [6, 8]]


@pytest.mark.parametrize("size, exc", [(0, ValueError), (-1, ValueError), (1.5, TypeError),
                                       (True, TypeError), ("10", TypeError), (None, TypeError)])
def test_bad_buffer_sizes(size: object, exc: type[Exception]) -> None:
    a = put([1.0])
    with pytest.raises(exc, match="buffer_size"):
        comm.broadcast_coalesced([a], [D0, D1], buffer_size=size)  # type: ignore[arg-type]
    with pytest.raises(exc, match="buffer_size"):
        comm.reduce_add_coalesced([[a]], buffer_size=size)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- pinned memory

def test_arrays_are_device_memory_never_pinned_host_arrays() -> None:
    a = acc.zeros(4, device=D0)
    assert acc.is_pinned(a) is False
    with pytest.raises(TypeError, match="only host"):
        acc.pin_memory(a)  # type: ignore[arg-type]
    for make in (lambda: acc.empty(4, pin_memory=True), lambda: acc.zeros(4, pin_memory=True),
                 lambda: acc.ones(4, pin_memory=True), lambda: acc.full((4,), 2, pin_memory=True)):
        h = make()
        assert isinstance(h, np.ndarray) and acc.is_pinned(h) and h.shape == (4,)
        assert a.copy_(h, non_blocking=True) is a
    acc.synchronize(D0)
    assert a.tolist() == [2, 2, 2, 2]
    with pytest.raises(AcceleratorValueError, match="device="):
        acc.empty(4, pin_memory=True, device=D0)
    for flag in (1, "yes", np.True_):
        with pytest.raises(TypeError, match="pin_memory must be a bool"):
            acc.zeros(4, pin_memory=flag)  # type: ignore[call-overload]
