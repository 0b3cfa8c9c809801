"""PyTorch's own tests of tensor creation and of the memory-holding tensor methods
(``test/test_tensor_creation_ops.py``: ``TestTensorCreation``, ``TestRandomTensorCreation``,
``TestAsArray``; ``test/test_torch.py``: ``copy_``, ``to``, ``copy.copy``, size parsing,
scalar conversions), checked on :class:`accelrt.Array` and its factories.

Each test names the PyTorch test whose behaviour it checks; the expected values, dtypes,
exception classes and messages were observed on torch 2.15.0 (CPU build) with the same
inputs. Tensors become arrays of a two-device cpu backend (their values can be read); what
does not read values (metadata, data pointers, sharing, argument errors) also runs on a
two-device :class:`~accelrt.testing.SimulatedBackend`, whose devices hold no data. What the
session-25/35 files check already (DLPack, ``fill_``'s overflow rule, ``copy_`` broadcasting
errors, size forms) is not repeated.
"""

from __future__ import annotations

import copy
import operator
import warnings
from collections import UserList
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt.backends.cpu import CpuBackend
from accelrt.testing import SimulatedBackend

CPU, SIM = "s36arcpu", "s36arsim"

_backends = module_backends({
    CPU: lambda: CpuBackend(num_devices=2, async_streams=False, name=CPU),
    SIM: lambda: SimulatedBackend(device_count=2, name=SIM),
})

C0, C1 = f"{CPU}:0", f"{CPU}:1"


@pytest.fixture(params=[CPU, SIM])
def bk(request: pytest.FixtureRequest) -> str:
    """Each backend's name (device 0 current; conftest puts devices and streams back)."""
    name: str = request.param
    acc.backends.device_module(name).set_device(0)
    return name


def _mod() -> Any:
    """The cpu backend's device module (``torch.cuda`` here)."""
    return acc.backends.device_module(CPU)


@pytest.fixture
def _rng() -> Any:
    """Put the cpu backend's generators back after a test that seeds them."""
    states = _mod().get_rng_state_all()
    yield
    _mod().set_rng_state_all(states)


class _Seq:
    """A sequence by the protocol only (``__len__`` and ``__getitem__``), not a list."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Any:
        return self.items[i]


class _BrokenSeq(_Seq):
    def __getitem__(self, i: int) -> Any:
        raise TypeError


# ------------------------------------------------------------------ asarray: Python data

def test_asarray_reads_an_object_with_the_sequence_protocol() -> None:
    """mirrors test_tensor_creation_ops.py test_tensor_from_sequence: data need not be a
    list: an object with ``__len__`` and ``__getitem__`` is read item by item (torch 2.15:
    ``[1.0, 2.0, 3.0]``, float32), nested too; one whose ``__getitem__`` fails raises
    ``ValueError`` "could not determine the shape of object type 'M'"."""
    a = acc.asarray(_Seq([1.0, 2.0, 3.0]), device=C0)
    assert a.dtype == np.float32 and a.tolist() == [1.0, 2.0, 3.0]
    b = acc.asarray([_Seq([1, 2]), (3, 4)], device=C0)
    assert b.dtype == np.int64 and b.tolist() == [[1, 2], [3, 4]]
    assert acc.asarray(UserList([1, 2.5]), device=C0).tolist() == [1.0, 2.5]
    assert acc.asarray(_Seq([1, 2]), dtype="int8", device=C0).dtype == np.int8
    with pytest.raises(ValueError, match=r"^could not determine the shape of object type "
                                         r"'_BrokenSeq'"):
        acc.asarray(_BrokenSeq([1.0, 2.0, 3.0]), device=C0)
    with pytest.raises(TypeError, match="Could not infer dtype of dict"):
        acc.asarray({0: 1}, device=C0)


def test_asarray_refuses_self_referential_lists_with_torchs_words() -> None:
    """mirrors test_tensor_creation_ops.py test_as_tensor (its self-referential lists): a
    list that holds itself, alone or inside other data, raises ``TypeError`` "new():
    self-referential lists are incompatible"; ``x = [x]`` (its own first item, so its shape
    never ends) is torch's ``ValueError`` "too many dimensions 'list'"; a list held twice
    is no cycle."""
    z: list[Any] = [0]
    z.append(z)
    for data in (z, [[1, 2], z]):
        with pytest.raises(TypeError, match=r"^new\(\): self-referential lists are "
                                            r"incompatible"):
            acc.asarray(data, device=C0)
    y: list[Any] = []
    y.append(y)
    with pytest.raises(ValueError, match=r"^too many dimensions 'list'"):
        acc.asarray(y, device=C0)
    twice = [1, 2]
    assert acc.asarray([twice, twice], device=C0).tolist() == [[1, 2], [1, 2]]
    with pytest.raises(TypeError, match="invalid data type 'str'"):
        acc.asarray([0, "torch"], device=C0)


@pytest.mark.parametrize("data, dtype", [
    ((), np.float32), (5.0, np.float32), (5, np.int64), (True, np.bool_),
    (((7, 5), (9, 5.0)), np.float32), (((5.0, 5), (3, 5)), np.float32),
    (((5, 3), (3, 5)), np.int64), (((5, 3 + 2j), (3, 5 + 4j)), np.complex64),
    (np.array(()), np.float64), (np.array(5.0), np.float64), (np.array(5), np.int64),
    (np.array(3, dtype=np.uint8), np.uint8), (((7, np.array(5)), (np.array(9), 5.0)), np.float32),
    (((7, 5), (9, np.array(5.0))), np.float64), (((5, np.array(3)), (np.array(3), 5)), np.int64),
    ([True, False, 0], np.int64), ([0.0, True, False], np.float32), ([0, 1.0, 42], np.float32),
    ([0.0, True, False, 42, 5j], np.complex64), (range(5), np.int64), (np.float64(0.5), np.float64),
], ids=repr)
def test_asarray_infers_torchs_dtype(data: Any, dtype: Any) -> None:
    """mirrors test_tensor_creation_ops.py test_tensor_factory_type_inference and
    test_astensor_consistency (default dtype float32): each dtype is torch 2.15's
    ``torch.asarray(data).dtype``."""
    assert acc.asarray(data, device=C0).dtype == np.dtype(dtype)


def test_asarray_into_bool_takes_each_numbers_truth_value() -> None:
    """mirrors test_tensor_creation_ops.py test_tensor_factory (its bool tensors): any
    number, NaN, infinities, ints beyond 64 bits, subnormals and complex numbers, goes into
    a bool array by its truth value (torch 2.15, the same lists)."""
    cases = [
        ([-1, -1.1, 0, 1, 1.1], [True, True, False, True, True]),
        ((-0.3, 0, 0.3, 1, 3 / 7), [True, False, True, True, True]),
        ((float("nan"), 0, -2**63, 2**63 - 1, -2**63 - 1), [True, False, True, True, True]),
        ((2**63, 0, 2**64, 2**64 + 1, -1.7976931348623157e308),
         [True, False, True, True, True]),
        ([1e-323, 1e-324, 0j, 1e-323j, 1e-324j, 1 + 2j, -1j],
         [True, False, False, True, False, True, True]),
        ((1e323, -1e323, float("inf"), -float("inf")), [True] * 4),
    ]
    for data, want in cases:
        assert acc.asarray(data, dtype="bool", device=C0).tolist() == want, data


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_asarray_unpacks_large_numbers_into_floats(dtype: str) -> None:
    """mirrors test_tensor_creation_ops.py test_unpack_double: ints beyond float precision,
    beyond int64 and uint64, and floats beyond the range become the float numpy gives."""
    for value in (2**24 + 1, 2**53 + 1, 2**63 - 1, 2**64 - 1, 2**64, -1e500, 1e500):
        got = acc.asarray(value, dtype=dtype, device=C0).tolist()
        assert got == np.array(value, dtype=dtype).item(), value


def test_asarray_of_a_non_writable_numpy_array_copies_without_warning() -> None:
    """mirrors test_tensor_creation_ops.py test_tensor_from_non_writable_numpy: a copy of a
    read-only numpy array warns nothing (torch's copying ``torch.tensor``; accelrt copies
    it in every mode, docs/differences.md)."""
    host = np.arange(5.0)
    host.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = acc.asarray(host, device=C0)
        b = acc.asarray(host, copy=True, device=C0)
    assert a.tolist() == b.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert a.data_ptr() != host.ctypes.data


# ------------------------------------------------------------------ asarray: aliasing

def test_asarray_aliases_numpy_memory_unless_a_copy_is_asked() -> None:
    """mirrors test_tensor_creation_ops.py TestAsArray test_alias_from_numpy and
    test_copy_from_numpy (and test_as_tensor's "doesn't copy" / "changing dtype causes
    copy"): on a device that reads host memory, a C-contiguous writable numpy array of the
    wanted dtype is shared (``copy=None`` or ``False``: writes show through), copied with
    ``copy=True`` or another dtype."""
    for dt in (np.float64, np.int64, np.int8, np.uint8, np.bool_, np.complex64):
        host = np.ones((5, 6), dtype=dt)
        for kw in ({}, {"copy": False}, {"dtype": dt}, {"dtype": dt, "copy": False},
                   {"device": C0}, {"device": C0, "dtype": dt, "copy": False}):
            a = acc.asarray(host, **({"device": C0} | kw))
            assert a.data_ptr() == host.ctypes.data and a.dtype == dt, (dt, kw)
        for kw in ({"copy": True}, {"dtype": dt, "copy": True}):
            a = acc.asarray(host, device=C0, **kw)
            assert a.data_ptr() != host.ctypes.data and a.tolist() == host.tolist()
    host = np.random.rand(5, 6).astype(np.float32)
    a = acc.asarray(host, dtype="float64", device=C0)
    assert a.dtype == np.float64 and a.data_ptr() != host.ctypes.data
    a.fill_(250.8)
    assert not (host == 250.8).any()


def test_asarray_aliases_an_array_on_its_device(bk: str) -> None:
    """mirrors test_tensor_creation_ops.py TestAsArray test_alias_from_tensor,
    test_copy_tensor and test_copy_from_tensor_mult_devices (and test_as_tensor's
    ``as_tensor(y) is y``): an array asked for on its own device and dtype is returned itself;
    ``copy=True``, another dtype or another device copy it."""
    a = acc.full((5, 5), 3, dtype="int16", device=f"{bk}:0")
    for kw in ({}, {"copy": False}, {"device": f"{bk}:0"}, {"dtype": "int16", "copy": False},
               {"device": f"{bk}:0", "dtype": np.int16, "copy": False}):
        assert acc.asarray(a, **kw) is a, kw
    for kw in ({"copy": True}, {"dtype": "int16", "copy": True}, {"dtype": "float32"},
               {"device": f"{bk}:1"}, {"device": f"{bk}:1", "copy": True}):
        b = acc.asarray(a, **kw)
        assert b is not a and b.data_ptr() != a.data_ptr() and b.shape == (5, 5), kw
        assert b.device == acc.device(kw.get("device", f"{bk}:0"))


def test_asarray_copy_false_refusals_say_torchs_words(bk: str) -> None:
    """mirrors test_tensor_creation_ops.py TestAsArray test_unsupported_alias,
    test_unsupported_alias_mult_devices and test_numpy_scalars: ``copy=False`` where a copy
    is needed raises ``ValueError`` starting with torch 2.15's message ("can't alias tensor
    with dtype 'Float' into dtype 'Double'.", "... from device 'X' to 'Y'.", "can't alias
    arbitrary sequence into a tensor."), and of a numpy scalar a ``RuntimeError`` "can't
    alias NumPy scalars. ..." (accelrt's is a ``ValueError`` too)."""
    a = acc.ones((5, 5), device=f"{bk}:0")
    with pytest.raises(ValueError, match=r"^can't alias tensor with dtype 'Float' into dtype "
                                         r"'Double'\."):
        acc.asarray(a, dtype="float64", copy=False)
    with pytest.raises(ValueError, match=rf"^can't alias tensor from device '{bk}:0' to "
                                         rf"'{bk}:1'\."):
        acc.asarray(a, device=f"{bk}:1", copy=False)
    with pytest.raises(ValueError, match=r"^can't alias tensor with dtype 'Short' into dtype "
                                         r"'Byte'\."):
        acc.asarray(np.ones(3, dtype=np.int16), dtype="uint8", copy=False, device=f"{bk}:0")
    for data in ([[1.0, 2.0]], 3, a.tolist()):
        with pytest.raises(ValueError, match=r"^can't alias arbitrary sequence into a tensor"):
            acc.asarray(data, copy=False, device=f"{bk}:0")
    with pytest.raises(RuntimeError, match=r"^can't alias NumPy scalars\. Either remove "
                                           r"copy=False or transform it in a ndarray\."):
        acc.asarray(np.float64(0.5), copy=False, device=f"{bk}:0")
    scalar = acc.asarray(np.float64(0.5), device=f"{bk}:0")
    assert scalar.shape == () and scalar.dtype == np.float64


def test_asarray_copy_false_onto_a_device_without_host_access_names_the_devices() -> None:
    """mirrors test_tensor_creation_ops.py TestAsArray test_unsupported_alias (host memory
    to another device): numpy memory cannot be shared with a device that cannot read it."""
    with pytest.raises(ValueError, match=rf"^can't alias tensor from device 'cpu' to "
                                         rf"'{SIM}:0'\."):
        acc.asarray(np.ones(3, dtype=np.float32), device=f"{SIM}:0", copy=False)


def test_asarray_of_a_zero_dim_numpy_array_into_int32() -> None:
    """mirrors test_tensor_creation_ops.py test_numpy_scalars (its pytorch#97021 part): a
    0-d float array into int32 stays 0-d."""
    a = acc.asarray(np.array(1.0), dtype="int32", device=C0)
    assert a.shape == () and a.dtype == np.int32 and a.tolist() == 1


# ------------------------------------------------------------------ factories

@pytest.mark.parametrize("shape", [(5, 0, 1), (0,), (0, 0, 1, 0, 2, 0, 0)])
def test_every_factory_makes_empty_arrays(bk: str, shape: tuple[int, ...]) -> None:
    """mirrors test_tensor_creation_ops.py test_tensor_factories_empty (and
    test_empty_tensor_props): every factory, every dtype, makes an array of a shape with a
    zero; randint of a complex dtype and rand of a non-floating one raise ``RuntimeError``."""
    d = f"{bk}:0"
    for dt in ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
               "float64", "complex64", "complex128"):
        for arr in (acc.zeros(shape, dtype=dt, device=d), acc.ones(shape, dtype=dt, device=d),
                    acc.empty(shape, dtype=dt, device=d),
                    acc.full(shape, 3, dtype=dt, device=d)):
            assert arr.shape == shape and arr.dtype == dt and arr.nbytes == 0
        kind = np.dtype(dt).kind
        if kind == "c":
            with pytest.raises(RuntimeError, match="^check_random_bounds handles only "
                                                   "integral, floating-point and boolean"):
                acc.randint(6, shape, dtype=dt, device=d)
        else:
            assert acc.randint(2 if kind == "b" else 6, shape, dtype=dt, device=d).shape == shape
        if kind in "fc":
            assert acc.rand(shape, dtype=dt, device=d).shape == shape
            assert acc.randn(shape, dtype=dt, device=d).shape == shape
        else:
            with pytest.raises(RuntimeError):
                acc.rand(shape, dtype=dt, device=d)
    assert acc.asarray([[[]]], device=d).shape == (1, 1, 0)


def test_zeros_refuses_a_negative_size_with_its_own_words(bk: str) -> None:
    """mirrors torch 2.15's ``torch.zeros`` (test_tensor_creation_ops.py's negative sizes):
    ``zeros`` raises ``RuntimeError`` "zeros: Dimension size must be non-negative." where
    the other factories say "Trying to create tensor with negative dimension -1: [-1]"."""
    for size in ((-1,), (2, -3), ([-1],)):
        with pytest.raises(RuntimeError, match=r"^zeros: Dimension size must be non-negative\."):
            acc.zeros(*size, device=f"{bk}:0")
    with pytest.raises(RuntimeError, match=r"^zeros: Dimension size must be non-negative\."):
        acc.zeros(size=(-1,), dtype="int8", device=f"{bk}:0")
    for f in (acc.empty, acc.ones, acc.rand, acc.randn):
        with pytest.raises(RuntimeError, match=r"^Trying to create tensor with negative "
                                               r"dimension -1: \[-1\]"):
            f(-1, device=f"{bk}:0")


def test_empty_overflow_says_storage_size_calculation_overflowed(bk: str) -> None:
    """mirrors test_tensor_creation_ops.py test_empty_overflow."""
    for size in ([2, 4, 2**29, 2**29], [8, 8, 2**29, 2**29]):
        with pytest.raises(RuntimeError, match="^Storage size calculation overflowed"):
            acc.empty(size, dtype="float64", device=f"{bk}:0")


def test_full_infers_the_dtype_of_its_fill_value(bk: str) -> None:
    """mirrors test_tensor_creation_ops.py test_full_inference and test_empty_full (default
    dtype float32): bool, int64, float32, complex64; an explicit dtype wins."""
    d = f"{bk}:0"
    assert acc.full((2, 2), True, device=d).dtype == np.bool_
    assert acc.full((2, 2), 1, device=d).dtype == np.int64
    assert acc.full((2, 2), 1.0, device=d).dtype == np.float32
    assert acc.full((2, 2), 1 + 1j, device=d).dtype == np.complex64
    assert acc.full((2, 3), -5.0, device=d).dtype == np.float32
    assert acc.full((2,), 3, dtype="bool", device=d).dtype == np.bool_
    assert acc.zeros((2, 3), dtype="int16", device=d).device == acc.device(d)


def test_full_and_zeros_values() -> None:
    """mirrors test_tensor_creation_ops.py test_empty_full, test_zeros and test_ones: the
    values of each dtype (torch 2.15)."""
    assert acc.full((2,), 3, dtype="bool", device=C0).tolist() == [True, True]
    assert acc.full((2, 3), -5.0, device=C0).tolist() == [[-5.0] * 3] * 2
    assert acc.zeros(2, 2, dtype="bool", device=C0).tolist() == [[False, False]] * 2
    assert acc.zeros(1, 1, dtype="float16", device=C0).tolist() == [[0.0]]
    assert acc.zeros(2, 2, dtype="complex64", device=C0).tolist() == [[0j, 0j]] * 2
    assert acc.ones(1, 2, dtype="bool", device=C0).tolist() == [[True, True]]


def test_sizes_take_one_element_integer_arrays(bk: str) -> None:
    """mirrors test_torch.py test_parsing_intlist: a size entry may be a 0-d or one-element
    integer tensor (here an array, read from its device) or numpy array, or a numpy integer;
    a float, a float array or a bool array is a ``TypeError`` (torch: ``RuntimeError`` for a
    bool tensor)."""
    d = f"{bk}:0"
    three = acc.asarray(3, device=C0)
    four = acc.asarray([4], dtype="uint8", device=C0)
    assert acc.ones(three, four, device=d).shape == (3, 4)
    assert acc.ones((three, four), device=d).shape == (3, 4)
    assert acc.ones(np.array(3), np.int64(4), device=d).shape == (3, 4)
    assert acc.ones((np.int64(3), np.array(4)), device=d).shape == (3, 4)
    assert acc.randint(5, (three,), device=d).shape == (3,)
    assert acc.full((three,), 1.0, device=d).shape == (3,)
    for bad in ((acc.asarray(3.0, device=C0), 4), (3.0, four), (np.array(3.0), four),
                (acc.asarray(True, device=C0),), (acc.asarray([3, 3], device=C0),)):
        with pytest.raises(TypeError):
            acc.ones(bad, device=d)
    with pytest.raises(RuntimeError, match="negative dimension -1"):
        acc.ones(acc.asarray(-1, device=C0), device=d)


# ------------------------------------------------------------------ random factories

@pytest.mark.usefixtures("_rng")
def test_randint_dtype_and_seeded_forms_agree(bk: str) -> None:
    """mirrors test_tensor_creation_ops.py test_randint_inference and test_randint: int64
    unless a dtype is given; ``randint(0, 6, size)`` and ``randint(6, size)`` draw the same
    numbers after the same seed, with the default generator or one's own."""
    d = f"{bk}:0"
    for args in ((3,), (1, 3)):
        assert acc.randint(*args, size=(2, 1), device=d).dtype == np.int64
        assert acc.randint(*args, size=(2, 1), dtype="float32", device=d).dtype == np.float32
    if bk == SIM:
        return      # (a simulated device holds no numbers)
    _mod().manual_seed(123456)
    a = acc.randint(0, 6, (10, 10), device=d).tolist()
    _mod().manual_seed(123456)
    assert acc.randint(6, (10, 10), device=d).tolist() == a
    assert all(0 <= v < 6 for row in a for v in row)
    g = acc.random.Generator(d)
    g.manual_seed(123456)
    b = acc.randint(0, 6, (10, 10), generator=g, device=d).tolist()
    g.manual_seed(123456)
    assert acc.randint(6, (10, 10), generator=g, device=d).tolist() == b


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "complex64", "complex128"])
@pytest.mark.usefixtures("_rng")
def test_rand_and_randn_repeat_after_the_same_seed(dtype: str) -> None:
    """mirrors test_tensor_creation_ops.py test_rand and test_randn: the same seed gives the
    same numbers, for an empty size too."""
    for f in (acc.rand, acc.randn):
        for n in (0, 100):
            _mod().manual_seed(123456)
            a = f(n, n, dtype=dtype, device=C0).tolist()
            _mod().manual_seed(123456)
            assert f(n, n, dtype=dtype, device=C0).tolist() == a


@pytest.mark.parametrize("dtype, low, high, words", [
    ("int8", -200, 0, "from is out of bounds for signed char"),
    ("int8", 0, 200, "to - 1 is out of bounds for signed char"),
    ("uint8", -1, 3, "from is out of bounds for unsigned char"),
    ("int16", 0, 2**16, "to - 1 is out of bounds for short int"),
    ("int32", 0, 2**32, "to - 1 is out of bounds for int"),
    ("bool", 0, 3, "to - 1 is out of bounds for bool"),
    ("float16", 0, 70000, "to - 1 is out of bounds for c10::Half"),
    ("float16", -70000, 0, "from is out of bounds for c10::Half"),
    ("uint16", -1, 2, "from is out of bounds for short unsigned int"),
])
def test_randint_bounds_beyond_the_dtype_say_torchs_words(bk: str, dtype: str, low: int,
                                                          high: int, words: str) -> None:
    """mirrors test_tensor_creation_ops.py test_random_from_to / test_random_to (the bounds
    check ``randint`` shares with ``random_``): a ``RuntimeError`` with torch 2.15's words,
    its C++ type names included."""
    with pytest.raises(RuntimeError, match="^" + words.replace("(", r"\(")):
        acc.randint(low, high, (2,), dtype=dtype, device=f"{bk}:0")
    with pytest.raises(RuntimeError, match=r"^random_ expects 'from' to be less than 'to', "
                                           r"but got from=3 >= to=3"):
        acc.randint(3, 3, (2,), device=f"{bk}:0")


# ------------------------------------------------------------------ fill_, copy_, to

@pytest.mark.parametrize("dtype", ["bool", "uint8", "int8", "int16", "int32", "int64",
                                   "float16", "float32", "float64", "complex64",
                                   "complex128"])
def test_fill_takes_every_small_int_in_every_dtype(dtype: str) -> None:
    """mirrors test_tensor_creation_ops.py test_fill_all_dtypes_and_devices: ints from
    -bound to bound (100 for the 8-bit dtypes, else 2000) fill a small and a large array
    as torch 2.15 converts them (negative ints wrap into uint8), the dtype unchanged."""
    bound = 100 if dtype in ("uint8", "int8") else 2000
    for x in (acc.empty(2, dtype=dtype, device=C0), acc.empty(10000, dtype=dtype, device=C0)):
        for n in range(-bound, bound, bound // 10):
            assert x.fill_(n) is x and x.dtype == dtype
            assert (x.numpy() == np.array(n).astype(dtype)).all(), n


_FLOATS = [-3.4028234663852886e38, -2, -1.5, -0.5, 0, 0.5, 1.5, 2, 3.4028234663852886e38]

#: torch 2.15 (CPU): ``torch.tensor(_FLOATS).to(dtype)`` and of (-inf, inf, nan)
_TO_INT = {
    "bool": ([True, True, True, True, False, True, True, True, True], [True] * 3),
    "uint8": ([0, 254, 255, 0, 0, 0, 1, 2, 0], [0, 0, 0]),
    "int8": ([0, -2, -1, 0, 0, 0, 1, 2, 0], [0, 0, 0]),
    "int16": ([0, -2, -1, 0, 0, 0, 1, 2, 0], [0, 0, 0]),
    "int32": ([-2**31, -2, -1, 0, 0, 0, 1, 2, -2**31], [-2**31] * 3),
    "int64": ([-2**63, -2, -1, 0, 0, 0, 1, 2, -2**63], [-2**63] * 3),
}


@pytest.mark.parametrize("dtype", sorted(_TO_INT))
def test_float_to_int_conversion_as_torch(dtype: str) -> None:
    """mirrors test_tensor_creation_ops.py test_float_to_int_conversion_finite and
    test_float_to_int_conversion_nonfinite: ``to(dtype)`` and ``copy_`` of float32 values,
    finite, beyond the range and non-finite, give torch 2.15's numbers on CPU (numpy's), and
    warn nothing (numpy's cast warns "invalid value encountered in cast")."""
    finite, nonfinite = _TO_INT[dtype]
    src = acc.asarray(np.array(_FLOATS, dtype=np.float32), device=C0)
    odd = acc.asarray(np.array([-np.inf, np.inf, np.nan], dtype=np.float32), device=C0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert src.to(np.dtype(dtype)).tolist() == finite
        assert odd.to(dtype=np.dtype(dtype)).tolist() == nonfinite
        assert acc.empty(9, dtype=dtype, device=C0).copy_(src).tolist() == finite


def test_to_returns_self_when_nothing_changes(bk: str) -> None:
    """mirrors test_torch.py test_to (its ``test_copy_behavior``) and test_to_with_tensor:
    ``to`` of the array's own dtype, device (with or without the index, when it is the
    current device), or of an array like it returns the array itself, blocking or not;
    ``copy=True`` a new one; ``to(other)`` takes other's dtype and device."""
    d = f"{bk}:0"
    t = acc.full((), 5, device=d)
    like = acc.empty((), dtype=t.dtype, device=d)
    for nb in (False, True):
        for target in (t, t.dtype, like, d, bk, acc.device(d)):
            assert t.to(target, non_blocking=nb) is t, target
            assert t.to(target, non_blocking=nb, copy=True) is not t, target
        assert t.to(d, dtype=t.dtype, non_blocking=nb) is t
        assert t.to(d, dtype=t.dtype, non_blocking=nb, copy=True) is not t
    assert t.to(dtype=t.dtype, device=t.device, copy=False).data_ptr() == t.data_ptr()
    assert t.to(d, copy=True).data_ptr() != t.data_ptr()
    assert t.to(d, dtype=np.float32).dtype == np.float32
    other = acc.zeros(1, dtype="float64", device=f"{bk}:1")
    moved = t.to(other)
    assert moved.dtype == np.float64 and moved.device == other.device
    assert other.to(t).device == t.device and other.to(t).dtype == np.int64
    # a device without an index is the current device: another device's array moves there
    assert other.to(bk).device == acc.device(d)


def test_copy_copy_shares_memory_and_deepcopy_does_not(bk: str) -> None:
    """mirrors test_torch.py test_copy_all_dtypes_and_devices (``copy.copy`` is a shallow
    copy: the same data) and test_deepcopy (a new storage with the same values): closing
    the shallow copy leaves the original usable."""
    for dt in ("bool", "uint8", "int16", "int64", "float16", "float64", "complex64"):
        x = acc.full((4,), 1, dtype=dt, device=f"{bk}:0")
        y = copy.copy(x)
        assert y is not x and y.data_ptr() == x.data_ptr()
        assert (y.shape, y.dtype, y.device) == (x.shape, x.dtype, x.device)
        z = copy.deepcopy(x)
        assert z.data_ptr() != x.data_ptr() and z.device == x.device and z.dtype == x.dtype
        y.close()
        assert y.is_closed and not x.is_closed and x.data_ptr() != 0
    x = acc.asarray([1, 2, 3, 4], device=C0)
    copy.copy(x).fill_(1)
    assert x.tolist() == [1, 1, 1, 1]
    copy.deepcopy(x).fill_(7)
    assert x.tolist() == [1, 1, 1, 1]


def test_copy_broadcasts_converts_and_returns_self() -> None:
    """mirrors test_torch.py test_copy_broadcast and test_copy_ (dtype conversion,
    ``non_blocking``): torch 2.15's values and errors."""
    dst = acc.zeros(5, 6, device=C0)
    assert dst.copy_(acc.ones(6, device=C0)) is dst and dst.tolist() == [[1.0] * 6] * 5
    with pytest.raises(RuntimeError, match=r"^The size of tensor a \(6\) must match the size "
                                           r"of tensor b \(30\) at non-singleton dimension 1"):
        dst.copy_(acc.zeros(30, device=C0))
    ints = acc.zeros(3, dtype="int32", device=C0)
    assert ints.copy_(acc.asarray([1.7, -2.2, 3.9], device=C0), non_blocking=True).tolist() \
        == [1, -2, 3]
    flags = acc.zeros(3, dtype="bool", device=C0)
    assert flags.copy_(acc.asarray([0.0, -0.0, 0.1], device=C0), True).tolist() \
        == [False, False, True]
    with pytest.warns(UserWarning, match="Casting complex values to real discards the "
                                         "imaginary part"):
        assert acc.zeros(2, device=C0).copy_(acc.asarray([1 + 2j, 3j], device=C0)).tolist() \
            == [1.0, 0.0]
    assert acc.zeros(2, 2, device=C0).copy_(acc.asarray(3.0, device=C0)).tolist() \
        == [[3.0, 3.0]] * 2
    across = acc.zeros(3, device=C1).copy_(acc.full((3,), 2.5, device=C0))
    assert across.device == acc.device(C1) and across.tolist() == [2.5] * 3
    with pytest.raises(TypeError, match="non_blocking"):
        acc.zeros(3, device=C0).copy_(acc.ones(3, device=C0), non_blocking=1)


# ------------------------------------------------------------------ scalar conversions

def test_int_float_complex_of_a_one_element_array() -> None:
    """mirrors test_tensor_creation_ops.py test_simple_scalar_cast (and test_offset_scalar_cast):
    ``int()``, ``float()`` and ``complex()`` of a one-element array of any shape read its
    value (torch 2.15's results); of no or several elements they raise ``ValueError``
    "only one element tensors can be converted to Python scalars"; of a complex value
    ``int``/``float`` raise ``RuntimeError``."""
    for arr, value in ((acc.asarray([1.5], device=C0), 1.5),
                       (acc.zeros(1, 1, 1, 1, device=C0), 0)):
        assert int(arr) == int(value) and isinstance(int(arr), int)
        assert float(arr) == float(value) and complex(arr) == complex(value)
    assert complex(acc.asarray(1.5j, device=C0)) == 1.5j
    assert int(acc.asarray(-2.7, device=C0)) == -2 and int(acc.asarray(True, device=C0)) == 1
    assert float(acc.asarray(1.1, dtype="float16", device=C0)) == 1.099609375
    assert int(acc.asarray(2**63 - 1, device=C0)) == 2**63 - 1
    for bad in (acc.asarray([], device=C0), acc.asarray([1, 2], device=C0),
                acc.zeros(2, 2, device=C0)):
        for conv in (int, float, complex):
            with pytest.raises(ValueError, match="^only one element tensors can be converted "
                                                 "to Python scalars"):
                conv(bad)
    for conv, ctype in ((int, "int64_t"), (float, "double")):
        with pytest.raises(RuntimeError, match=f"value cannot be converted to type {ctype} "
                                               "without overflow"):
            conv(acc.asarray(1.5j, device=C0))
    with pytest.raises(ValueError, match="cannot convert float NaN to integer"):
        int(acc.asarray(float("nan"), device=C0))
    with pytest.raises(OverflowError):
        int(acc.asarray(float("inf"), device=C0))


def test_index_of_a_one_element_integer_array(bk: str) -> None:
    """mirrors torch 2.15's ``Tensor.__index__`` (test_torch.py's indexing by a 0-d
    tensor): a one-element integer or bool array is an index; a float array or several
    elements raise ``TypeError`` "only integer tensors of a single element can be converted
    to an index"."""
    assert [10, 20, 30][acc.asarray(1, device=C0)] == 20
    assert [10, 20, 30][acc.asarray([[2]], dtype="uint8", device=C0)] == 30
    assert operator.index(acc.asarray(True, device=C0)) == 1
    assert list(range(acc.asarray(3, device=C0))) == [0, 1, 2]
    assert hex(acc.asarray(255, device=C0)) == "0xff"
    for bad in (acc.zeros((), device=f"{bk}:0"), acc.zeros(2, dtype="int64", device=f"{bk}:0"),
                acc.zeros((), dtype="complex64", device=f"{bk}:0")):
        with pytest.raises(TypeError, match="^only integer tensors of a single element can "
                                            "be converted to an index"):
            operator.index(bad)
    for conv in (int, float, complex):
        with pytest.raises(ValueError, match="^only one element tensors"):
            conv(acc.zeros(3, device=f"{bk}:0"))


# ------------------------------------------------------------------ memory and metadata

def test_numpy_shares_host_readable_memory_and_metadata_counts_bytes(bk: str) -> None:
    """mirrors test_torch.py test_element_size / test_numpy (``numpy()`` shares a CPU
    tensor's memory): ``itemsize``, ``nbytes``, ``size`` and ``data_ptr`` as torch's
    ``element_size()``, ``nbytes``, ``numel()`` and ``data_ptr()`` (0 for an empty array);
    ``numpy()`` is a view of memory the host reads (the cpu backend), and ``numpy()`` takes
    no positional argument (torch: ``TypeError``)."""
    d = f"{bk}:0"
    a = acc.empty(3, 2, dtype="complex128", device=d)
    assert (a.itemsize, a.nbytes, a.size, a.ndim) == (16, 96, 6, 2)
    assert acc.empty(3, dtype="float16", device=d).itemsize == 2
    assert acc.empty(0, dtype="int64", device=d).nbytes == 0
    assert acc.empty(0, device=d).data_ptr() == 0
    with pytest.raises(TypeError):
        a.numpy(True)     # type: ignore[misc]
    if bk == CPU:
        z = acc.zeros(2, device=d)
        view = z.numpy()
        assert view.ctypes.data == z.data_ptr() == z.numpy(force=True).ctypes.data
        view[0] = 7
        assert z.tolist() == [7.0, 0.0]
        assert acc.asarray(3.5, device=d).numpy().shape == ()
