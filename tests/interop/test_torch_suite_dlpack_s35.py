"""PyTorch's own DLPack tests (``test/test_dlpack.py``) and ``torch.utils.dlpack``'s behaviour
in torch 2.15, re-checked on accelrt (session 35).

Each test says which PyTorch test it mirrors. The import is changed as the porting guide says:
``torch.from_dlpack`` -> ``accelrt.interop._dlpack_in.from_dlpack`` (the consumer behind
``from_torch``) or ``acc.asarray`` (``torch.asarray``), tensors -> ``accelrt`` arrays on a
two-device cpu backend (host memory, values readable) and on a two-device
:class:`~accelrt.testing.SimulatedBackend` (device memory, DLPack device ``kDLExtDev``: capsules
built by :mod:`accelrt._dlpack`, nothing readable, so only addresses, shapes and dtypes are
compared there). Where accelrt differs on purpose (docs/differences.md) the test checks
accelrt's documented answer and says so. Earlier DLPack reviews (not repeated here):
tests/runtime/test_dlpack.py, tests/interop/test_review_interop_s24.py, ..._s32.py and
test_review_torch_interop_s26.py.

PyTorch is an optional extra: the few tests that run torch beside accelrt skip without it."""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt import _dlpack, backends
from accelrt.backends.cpu import CpuBackend
from accelrt.interop._dlpack_in import from_dlpack
from accelrt.testing import SimulatedBackend

HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH,
                                 reason="torch is not installed (an optional extra)")

CPU = "s35dlcpu"   # two cpu devices: host memory, exported through numpy
SIM = "s35dlsim"   # two simulated devices: device memory (kDLExtDev)
CUDAISH = "s35dlcu"  # one simulated device whose DLPack device type is kDLCUDA


class _CudaTyped(SimulatedBackend):
    """A simulated device whose memory DLPack calls CUDA memory (``dlpack_device_type`` 2),
    to see the stream a consumer hands a CUDA producer."""

    def capabilities(self, index: int) -> Any:
        return dataclasses.replace(super().capabilities(index),
                                   dlpack_device_type=_dlpack.kDLCUDA)


_backends = module_backends({
    CPU: lambda: CpuBackend(num_devices=2, async_streams=False, name=CPU),
    SIM: lambda: SimulatedBackend(device_count=2, name=SIM),
    CUDAISH: lambda: _CudaTyped(device_count=1, name=CUDAISH),
})

_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
           "float16", "float32", "float64", "complex64", "complex128"]


@pytest.fixture(autouse=True)
def _collected() -> Iterator[None]:
    """Release what a test imported or exported before the next one (capsule owners)."""
    yield
    for name in (CPU, SIM):
        acc.synchronize(f"{name}:0")
    gc.collect()


class _OnlyDLPack:
    """Exposes an object through ``__dlpack__``/``__dlpack_device__`` and nothing else (no
    buffer protocol, no array interface): the consumer must take the DLPack path."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._obj.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> Any:
        return self._obj.__dlpack_device__()


class _SeesStream(_OnlyDLPack):
    """:class:`_OnlyDLPack` that appends the ``stream`` keyword of every ``__dlpack__`` call
    (``None`` where none is given) to ``seen``."""

    def __init__(self, obj: Any, seen: list[Any]) -> None:
        super().__init__(obj)
        self._seen = seen

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        self._seen.append(kwargs.get("stream"))
        return super().__dlpack__(*args, **kwargs)


class _Returns:
    """A producer handing out one prepared ``capsule`` (any keywords) on ``device``."""

    def __init__(self, capsule: object, device: tuple[int, int]) -> None:
        self.capsule, self.device = capsule, device

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


def _array(backend: str, dtype: str, shape: tuple[int, ...] = (5,), index: int = 0) -> Any:
    """An array of ``shape`` and ``dtype`` on ``backend:index`` (values 0, 1, 2, 0, ... where
    they can be written: the simulated device keeps none)."""
    host = (np.arange(int(np.prod(shape))) % 3).astype(dtype).reshape(shape)
    return acc.asarray(host, device=f"{backend}:{index}", copy=True)


def _same(z: Any, x: Any) -> None:
    """``z`` is ``x``'s memory seen again: same address, shape, dtype (and values on the host)."""
    assert (z.data_ptr(), z.shape, z.dtype) == (x.data_ptr(), x.shape, x.dtype)
    if x.device.type == CPU:
        np.testing.assert_array_equal(z.numpy(), x.numpy())


# ------------------------------------------------------------------ conversions, every dtype

@pytest.mark.parametrize("backend", [CPU, SIM])
@pytest.mark.parametrize("dtype", _DTYPES)
def test_capsule_conversion_every_dtype(backend: str, dtype: str) -> None:
    """mirrors test_dlpack.py test_dlpack_capsule_conversion and test_from_dlpack_dtype: an
    array exported as a capsule (``to_dlpack``) and imported from it is the same memory, of the
    same dtype (bool, unsigned and complex included); the protocol form
    (test_dlpack_protocol_conversion, test_from_dlpack) the same."""
    x = _array(backend, dtype)
    dev = f"{backend}:0"
    _same(from_dlpack(x.__dlpack__(), device=dev), x)
    _same(from_dlpack(x, device=dev), x)
    _same(from_dlpack(_OnlyDLPack(x), device=dev), x)
    if backend == CPU:   # acc.asarray (torch.asarray) of a capsule shares host memory too
        _same(acc.asarray(x.__dlpack__(), device=dev), x)


@pytest.mark.parametrize("dtype", ["float64", "bool", "uint64", "complex64"])
def test_shared_storage(dtype: str) -> None:
    """mirrors test_dlpack.py test_dlpack_shared_storage: a write through the imported array
    is seen by the exporter (and by a capsule's import, the same)."""
    x = _array(CPU, dtype)
    z = from_dlpack(x.__dlpack__(), device=f"{CPU}:0")
    z.fill_(1)
    assert x.numpy().tolist() == [1] * 5
    w = from_dlpack(x, device=f"{CPU}:0")
    w.fill_(0)
    assert z.numpy().tolist() == [0] * 5


@pytest.mark.parametrize("dtype", ["bool", "uint16", "uint64", "float16", "complex128"])
def test_numpy_dlpack_protocol_conversion(dtype: str) -> None:
    """mirrors test_dlpack.py test_numpy_dlpack_protocol_conversion: numpy imports the array
    through ``__dlpack__`` (same values, same memory, writable as the producer did not flag it
    read-only), and the array's numpy view imported back is the array's own memory."""
    x = _array(CPU, dtype)
    arr = np.from_dlpack(x)
    np.testing.assert_array_equal(arr, x.numpy())
    # writable as numpy's own import of a writable array (numpy 2.1 imports every capsule
    # read-only, numpy 2.4 takes the producer's flag)
    assert arr.ctypes.data == x.data_ptr()
    assert arr.flags.writeable == np.from_dlpack(np.zeros(1)).flags.writeable
    back = from_dlpack(x.numpy(), device=f"{CPU}:0")
    assert back.data_ptr() == x.data_ptr() and back.dtype == x.dtype
    assert acc.asarray(x.numpy(), device=f"{CPU}:0").data_ptr() == x.data_ptr()


def test_automatically_select_in_creation() -> None:
    """mirrors test_dlpack.py test_automatically_select_in_creation: ``acc.asarray``
    (``torch.tensor``/``torch.asarray``) of an object that offers only the DLPack methods goes
    through them (here: it shares the memory, as ``torch.asarray`` does)."""
    host = np.random.default_rng(0).random(10)
    made = acc.asarray(_OnlyDLPack(host), device=f"{CPU}:0")
    np.testing.assert_array_equal(made.numpy(), host)
    assert made.data_ptr() == host.ctypes.data


# ------------------------------------------------------------------ the protocol's keywords

@pytest.mark.parametrize("backend", [CPU, SIM])
def test_max_version_capsule_names(backend: str) -> None:
    """mirrors test_dlpack.py test_max_version: no ``max_version`` and ``(0, 8)`` give a
    legacy ``"dltensor"`` capsule, ``(1, 0)`` and a newer ``(2, 0)`` a versioned
    ``"dltensor_versioned"`` one; each imports to the same memory."""
    x = _array(backend, "float32")
    for kwargs, name in (({}, "dltensor"), ({"max_version": (0, 8)}, "dltensor"),
                         ({"max_version": (1, 0)}, "dltensor_versioned"),
                         ({"max_version": (2, 0)}, "dltensor_versioned")):
        capsule = x.__dlpack__(**kwargs)
        assert re.search(f'capsule object "{name}" at', str(capsule)), (kwargs, str(capsule))
        _same(from_dlpack(capsule, device=f"{backend}:0"), x)


@pytest.mark.parametrize("backend", [CPU, SIM])
def test_invalid_stream_type_is_a_type_error(backend: str) -> None:
    """mirrors test_dlpack.py test_dlpack_tensor_invalid_stream: a stream that is no int (nor
    None) is a ``TypeError``."""
    x = _array(backend, "float32")
    with pytest.raises(TypeError, match="stream must be an int or None"):
        x.__dlpack__(stream=object())


def test_invalid_cpu_stream_documented_difference() -> None:
    """mirrors test_dlpack.py test_dlpack_invalid_cpu_stream: host memory has no stream.
    torch 2.15 raises ``AssertionError("stream should be None on cpu.")`` for ``stream=0``;
    accelrt raises ``BufferError`` (docs/differences.md, "DLPack export"); ``-1`` is taken as
    torch takes it."""
    x = _array(CPU, "float32")
    with pytest.raises(BufferError, match=r"stream must be None \(or -1\) for host memory"):
        x.__dlpack__(stream=0)
    assert np.from_dlpack(_Returns(x.__dlpack__(stream=-1), (1, 0))).tolist() == [0, 1, 2, 0, 1]


@pytest.mark.parametrize("backend", [CPU, SIM])
def test_unsupported_device_error(backend: str) -> None:
    """mirrors test_dlpack.py test_unsupported_device_error: ``dl_device`` of a device type
    the array cannot go to (``kDLHexagon``) is a ``BufferError`` saying "Unsupported
    device_type: 16", torch 2.15's words (accelrt said only "cannot export ..."). A device of
    the right type but another index keeps accelrt's own message."""
    x = _array(backend, "float32")
    with pytest.raises(BufferError, match=r"^Unsupported device_type: 16\b"):
        x.__dlpack__(max_version=(1, 0), dl_device=(_dlpack.kDLHexagon, 0))
    own_type = x.__dlpack_device__()[0]
    with pytest.raises(BufferError, match=r"^cannot export .* to DLPack device \((\d+), 1\)"):
        x.__dlpack__(max_version=(1, 0), dl_device=(own_type, 1))


def test_needs_copy_error() -> None:
    """mirrors test_dlpack.py test_needs_copy_error: importing device memory to the host with
    ``copy=False`` is refused: ``acc.asarray`` raises ``ValueError`` as ``torch.from_dlpack``
    does ("cannot move ... without copying"), and the producer itself raises ``BufferError``
    (the array API's answer to ``__dlpack__(dl_device=host, copy=False)``)."""
    x = _array(SIM, "float32")
    with pytest.raises(ValueError, match=r"copy=False.*pass copy=None"):
        acc.asarray(_OnlyDLPack(x), device=f"{CPU}:0", copy=False)
    with pytest.raises(BufferError, match="needs a copy"):
        x.__dlpack__(dl_device=(_dlpack.kDLCPU, 0), copy=False)


def test_dlpack_device_values() -> None:
    """``__dlpack_device__`` as torch's ``Tensor.__dlpack_device__``: ``(kDLCPU, 0)`` for host
    memory (whatever the cpu device's index), the backend's device type and the device index
    for device memory; plain ints equal to torch's ``DLDeviceType`` members."""
    assert _array(CPU, "int8", index=1).__dlpack_device__() == (_dlpack.kDLCPU, 0)
    assert _array(SIM, "int8", index=1).__dlpack_device__() == (_dlpack.kDLExtDev, 1)
    assert (_dlpack.kDLCPU, _dlpack.kDLCUDA, _dlpack.kDLExtDev, _dlpack.kDLHexagon) == (
        1, 2, 12, 16)


# ------------------------------------------------------------------ streams on import

def test_default_stream_passed_to_a_cuda_producer() -> None:
    """mirrors test_dlpack.py test_dlpack_default_stream: importing CUDA memory on the
    (legacy, NULL) default stream hands the producer ``stream=1`` (DLPack reserves 0), and on
    another stream that stream's handle, as torch 2.15's ``from_dlpack`` does."""
    dev = f"{CUDAISH}:0"
    x = acc.empty(5, device=dev)
    seen: list[Any] = []
    with backends.device_module(CUDAISH).default_stream(0):
        assert acc.current_stream(dev).stream_id == 0
        _same(from_dlpack(_SeesStream(x, seen), device=dev), x)
    side = acc.Stream(dev)
    with side:
        _same(from_dlpack(_SeesStream(x, seen), device=dev), x)
    assert seen == [1, side.stream_id]


def test_default_stream_passed_to_a_non_cuda_producer_is_its_handle() -> None:
    """torch 2.15's ``from_dlpack`` maps only CUDA's NULL stream to 1 (ROCm's stays 0); a
    device of another DLPack type gets the current stream's own handle."""
    dev = f"{SIM}:0"
    x = acc.empty(5, device=dev)
    seen: list[Any] = []
    default = backends.device_module(SIM).default_stream(0)
    with default:
        from_dlpack(_SeesStream(x, seen), device=dev)
    assert seen == [default.stream_id]


# ------------------------------------------------------------------ layouts

@pytest.mark.parametrize("backend", [CPU, SIM])
@pytest.mark.parametrize("shape", [(), (0,), (2, 0), (0, 3)])
def test_zero_dim_and_zero_size_import(backend: str, shape: tuple[int, ...]) -> None:
    """0-d and empty arrays round trip with their shape (make_tensor's shapes in
    test_dlpack.py; torch 2.15 takes an empty tensor's strides as they are). accelrt's device
    path refused a (2, 0) capsule whose strides (1, 1) were torch's own for such a tensor, as
    "not C-contiguous"; an empty array's strides say nothing."""
    x = _array(backend, "float32", shape)
    for kwargs in ({}, {"max_version": (1, 0)}):
        z = from_dlpack(x.__dlpack__(**kwargs), device=f"{backend}:0")
        assert z.shape == shape and z.dtype == x.dtype


@pytest.mark.parametrize("backend", [CPU, SIM])
def test_empty_capsule_with_any_strides_is_taken(backend: str) -> None:
    """An empty (2, 0) capsule with odd strides (7, 3): torch's ``from_dlpack`` takes it, and
    so does accelrt (nothing to read, whatever the strides)."""
    x = _array(backend, "int32", (2, 0))
    capsule = x.__dlpack__(max_version=(1, 0))
    t = _dlpack.unused_capsule(capsule, "test")[1].dl_tensor
    if t.strides:   # (numpy 2.1's export of host memory writes none)
        t.strides[0], t.strides[1] = 7, 3
    z = from_dlpack(_Returns(capsule, x.__dlpack_device__()), device=f"{backend}:0")
    assert z.shape == (2, 0)


@pytest.mark.parametrize("backend", [CPU, SIM])
def test_normalize_strides_of_a_length_one_dimension(backend: str) -> None:
    """mirrors test_dlpack.py test_dlpack_normalize_strides: a (1,) view with stride 3
    (``x[::3][:1]``) is shared, not refused as strided: a dimension of length one has no
    stride to honour. (torch keeps the stride 3; an accelrt array is always C-contiguous, so
    its stride is 1: docs/differences.md, "DLPack import".)"""
    if backend == CPU:
        host = np.random.default_rng(1).random(16)
        view = host[::3][:1]
        assert view.strides == (24,)
        z = from_dlpack(view, device=f"{CPU}:0")
        assert z.data_ptr() == view.ctypes.data and z.numpy().tolist() == view.tolist()
        return
    x = _array(SIM, "float64", (1,))
    capsule = x.__dlpack__()
    _dlpack.unused_capsule(capsule, "test")[1].dl_tensor.strides[0] = 3
    _same(from_dlpack(_Returns(capsule, x.__dlpack_device__()), device=f"{SIM}:0"), x)


def test_from_dlpack_noncontiguous_documented_difference() -> None:
    """mirrors test_dlpack.py test_from_dlpack_noncontinguous: rows of a (5, 5) array (a
    storage offset, contiguous) are shared; a column and the transpose are strided, which
    ``from_dlpack`` refuses and ``acc.asarray`` copies (docs/differences.md, "DLPack import":
    an accelrt array is always C-contiguous; torch shares them as strided tensors)."""
    host = np.arange(25.0).reshape(5, 5)
    for row in (host[0], host[1, :], host[1]):
        z = from_dlpack(row, device=f"{CPU}:0")
        assert z.data_ptr() == row.ctypes.data and z.numpy().tolist() == row.tolist()
    for strided in (host[:, 0], host.T):
        with pytest.raises(BufferError, match=r"not C-contiguous.*\.contiguous\(\)"):
            from_dlpack(strided, device=f"{CPU}:0")
        copied = acc.asarray(_OnlyDLPack(strided), device=f"{CPU}:0")
        np.testing.assert_array_equal(copied.numpy(), strided)


@pytest.mark.parametrize("versioned", [False, True])
def test_byte_offset_is_honoured(versioned: bool) -> None:
    """A producer that points ``data`` before the first element and says ``byte_offset``
    (DLPack allows either form; torch's importer adds the offset): accelrt reads from the
    offset on the host path (``from_dlpack`` and ``acc.asarray``) and on the device path."""
    kwargs: dict[str, Any] = {"max_version": (1, 0)} if versioned else {}
    host = np.arange(8, dtype=np.float32)
    for consume in (lambda p: from_dlpack(p, device=f"{CPU}:0"),
                    lambda p: acc.asarray(p, device=f"{CPU}:0")):
        capsule = host[2:].__dlpack__(**kwargs)
        t = _dlpack.unused_capsule(capsule, "test")[1].dl_tensor
        t.data, t.byte_offset = t.data - 8, 8
        z = consume(_Returns(capsule, (_dlpack.kDLCPU, 0)))
        assert z.data_ptr() == host[2:].ctypes.data and z.numpy().tolist() == host[2:].tolist()
    x = _array(SIM, "float32", (8,))
    capsule = x.__dlpack__(**kwargs)
    t = _dlpack.unused_capsule(capsule, "test")[1].dl_tensor
    t.data, t.byte_offset = t.data - 256, 256
    _same(from_dlpack(_Returns(capsule, x.__dlpack_device__()), device=f"{SIM}:0"), x)


# ------------------------------------------------------------------ torch 2.15 beside accelrt

@needs_torch
def test_torch_capsules_of_every_version_import() -> None:
    """mirrors test_dlpack.py test_max_version from the other side: torch's legacy and
    versioned capsules (``max_version`` None, (0, 8), (1, 0), (2, 0)) import into accelrt as
    the tensor's memory; torch imports accelrt's of each version the same way."""
    import torch
    t = torch.rand(5)
    x = _array(CPU, "float32")
    for kwargs in ({}, {"max_version": (0, 8)}, {"max_version": (1, 0)},
                   {"max_version": (2, 0)}):
        assert acc.asarray(t.__dlpack__(**kwargs), device=f"{CPU}:0").data_ptr() == t.data_ptr()
        assert torch.from_dlpack(x.__dlpack__(**kwargs)).data_ptr() == x.data_ptr()


@needs_torch
def test_torch_unsupported_device_words_match() -> None:
    """test_unsupported_device_error run on torch 2.15 and accelrt on the same request: both
    raise ``BufferError`` starting "Unsupported device_type: 16"."""
    import torch
    for producer in (torch.zeros(5), _array(CPU, "float32")):
        with pytest.raises(BufferError, match=r"^Unsupported device_type: 16"):
            producer.__dlpack__(max_version=(1, 0), dl_device=(_dlpack.kDLHexagon, 0))


@needs_torch
def test_torch_tensor_of_an_only_dlpack_wrapper() -> None:
    """test_automatically_select_in_creation with an accelrt array inside the wrapper:
    ``torch.tensor`` copies it through DLPack, ``torch.asarray`` shares it; and a length-one
    strided torch view (test_dlpack_normalize_strides) is shared by ``acc.asarray``."""
    import torch
    x = acc.asarray(np.random.default_rng(2).random(10), device=f"{CPU}:0")
    assert torch.tensor(_OnlyDLPack(x)).tolist() == x.numpy().tolist()
    assert torch.asarray(_OnlyDLPack(x)).data_ptr() == x.data_ptr()
    view = torch.rand(16)[::3][:1]
    assert view.stride() == (3,)
    assert acc.asarray(view, device=f"{CPU}:0").data_ptr() == view.data_ptr()
