"""Differential review of accelrt's DLPack interchange against torch 2.15 and numpy (s32): the
protocol's keyword forms, imports of hostile producers, lifetimes and stream order, each checked
by running torch 2.15 (and numpy's own DLPack) on the same inputs; the comment above each test
says what was observed. Earlier reviews: test_review_interop_s24.py, test_review_torch_interop_s26.py.

PyTorch is an optional extra: the tests that need it skip without it. Ordering is checked with
gates (host functions that block a stream) and stream queries, never sleeps."""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import importlib.util
import re
import sys
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt import _dlpack
from accelrt.backends.cpu import CpuBackend
from accelrt.interop._dlpack_in import from_dlpack
from accelrt.testing import leak_check

HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH,
                                 reason="torch is not installed (an optional extra)")
NUMPY_VERSIONED = np.lib.NumpyVersion(np.__version__) >= "2.1.0"
needs_versioned = pytest.mark.skipif(not NUMPY_VERSIONED,
                                     reason="numpy < 2.1 has no DLPack 1.0 (versioned) capsules")


class _Hidden(CpuBackend):
    """cpu devices whose memory counts as device memory (DLPack device kDLExtDev: capsules
    built by accelrt._dlpack, streams that run asynchronously)."""

    def capabilities(self, index: int) -> Any:
        return dataclasses.replace(super().capabilities(index), host_accessible=False)


DEV = "s32dev:0"
# closed (worker thread stopped) and unregistered after the module
_backends = module_backends(
    {"s32dev": lambda: _Hidden(num_devices=1, async_streams=True, name="s32dev")})

_name = ctypes.pythonapi.PyCapsule_GetName
_name.restype, _name.argtypes = ctypes.c_char_p, [ctypes.py_object]


class _Returns:
    """A producer handing out ``capsule`` from ``__dlpack__`` (any keywords) and ``device``
    from ``__dlpack_device__``."""

    def __init__(self, capsule: object, device: Any = (_dlpack.kDLCPU, 0)) -> None:
        self.capsule, self.device = capsule, device

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> Any:
        return self.device


@contextmanager
def _no_gc() -> Iterator[None]:
    """No automatic garbage collection within: what is released, is released by refcounts."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextmanager
def _unraisable() -> Iterator[list[str]]:
    """The unraisable exceptions (``Exception ignored ...``) reported within, as text."""
    seen: list[str] = []
    old = sys.unraisablehook
    sys.unraisablehook = lambda u: seen.append(f"{u.err_msg}: {u.exc_type.__name__}: "
                                               f"{u.exc_value}")
    try:
        yield seen
    finally:
        sys.unraisablehook = old


# ---------------------------------------------------------------------- device capsules' deleter

@needs_torch
def test_a_consumer_refusing_a_device_capsule_keeps_its_own_error() -> None:
    # observed with torch 2.15: torch.from_dlpack of a device array torch cannot take (here
    # kDLExtDev; a CUDA array on a CPU-only build, an OpenCL array) calls the capsule's deleter
    # with its error already set; accelrt's deleter was a ctypes callback, which cannot run
    # with an exception pending: "Exception ignored on calling ctypes callback function ...
    # SystemError: <method 'pop' of 'dict' objects> returned a result with an exception set",
    # and torch's own error became "SystemError: <built-in function _from_dlpack> returned
    # NULL without setting an exception"
    import torch
    for kw in ({}, {"copy": True}):
        a = acc.full(4, 2.0, device=DEV)
        owner = weakref.ref(a._mem)
        with _unraisable() as seen:
            with pytest.raises(Exception) as info:
                torch.from_dlpack(_Returns(a.__dlpack__(**kw), a.__dlpack_device__()))
        assert seen == []
        assert not isinstance(info.value, SystemError), info.value
        del a
        gc.collect()
        assert owner() is None                  # torch called the deleter: nothing held


def test_an_unconsumed_device_capsule_releases_its_owner_when_dropped() -> None:
    # a capsule nobody consumed kept its array's memory until the next garbage collection (or
    # the next capsule made): DLPack's capsule destructor calls the deleter when it is dropped
    for kw in ({}, {"max_version": (1, 0)}, {"max_version": (1, 0), "copy": True}):
        with _no_gc():
            a = acc.full(1000, 1.0, device=DEV)
            owner = weakref.ref(a._mem)
            cap = a.__dlpack__(**kw)
            before = _dlpack.live_capsules()
            del a
            assert owner() is not None or kw.get("copy")   # the capsule holds the memory
            del cap
            assert owner() is None and _dlpack.live_capsules() == before - 1


def test_a_device_export_copied_to_the_host_says_it_was_copied() -> None:
    # DLPack's is-copied flag: a device array exported to the host (dl_device=(kDLCPU, 0)) is a
    # copy made for the consumer; the versioned capsule said nothing of it (numpy made it
    # from the downloaded copy without knowing), unlike a copy=True export of the device
    a = acc.full(3, 2.5, device=DEV)
    for kw in ({}, {"copy": True}):
        cap = a.__dlpack__(max_version=(1, 0), dl_device=(_dlpack.kDLCPU, 0), **kw)
        name, managed = _dlpack.unused_capsule(cap, "test")
        assert name == b"dltensor_versioned"
        assert managed.flags & _dlpack.DLPACK_FLAG_BITMASK_IS_COPIED
        assert np.from_dlpack(_Returns(cap)).tolist() == [2.5] * 3
    legacy = a.__dlpack__(dl_device=(_dlpack.kDLCPU, 0))      # no flags to set: still works
    assert np.from_dlpack(_Returns(legacy)).tolist() == [2.5] * 3


def test_a_carrier_without_strides_gets_strides_of_its_own() -> None:
    # numpy <= 2.2 leaves a C-contiguous array's DLPack strides NULL (compact, row-major); the
    # rewrite of its capsule wrote through the NULL pointer (ctypes' "NULL pointer access":
    # every device export failed with numpy 1.x to 2.2); now the capsule carries strides
    # of its own, kept alive by the caller with the capsule
    shape = (ctypes.c_int64 * 2)(1, 1)
    t = _dlpack._DLTensor()
    t.ndim, t.shape, t.strides = 2, ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)), None
    made = _dlpack._describe(t, 4096, (3, 5), (2, 1), (2, 32, 1))
    assert made is not None and list(made) == [5, 1] and [t.strides[0], t.strides[1]] == [5, 1]
    assert list(shape) == [3, 5]
    assert (t.data, t.device.device_type, t.device.device_id, t.dtype.bits) == (4096, 2, 1, 32)
    strides = (ctypes.c_int64 * 2)(9, 9)
    t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    assert _dlpack._describe(t, 4096, (3, 5), (2, 1), (2, 32, 1)) is None
    assert list(strides) == [5, 1]
    t0 = _dlpack._DLTensor()     # 0-d: no shape, no strides
    assert _dlpack._describe(t0, 8, (), (2, 0), (2, 32, 1)) is None and not t0.strides


# ---------------------------------------------------------------------- read-only exports

@needs_torch
@needs_versioned
def test_torch_read_only_exports_are_copied_or_refused_never_shared_writable() -> None:
    # torch 2.15 exports read-only: Tensor.__dlpack__(read_only=True) (a versioned capsule
    # with DLPack's read-only flag) and torch.utils.dlpack.ReadOnlyTensorWrapper, a tensor
    # subclass whose every torch operation but the DLPack export raises RuntimeError;
    # np.from_dlpack of either gives a read-only view. accelrt's from_torch and acc.asarray
    # raised the wrapper's "RuntimeError: ReadOnlyTensorWrapper only supports DLPack export;
    # '__get__' is not allowed" (they read requires_grad, is_neg and detach() of it)
    import torch
    from torch.utils.dlpack import ReadOnlyTensorWrapper

    from accelrt.interop.torch import from_torch
    t = torch.arange(4.0)
    flagged = _Returns(None)
    flagged.__dlpack__ = lambda **kw: t.__dlpack__(max_version=(1, 0),  # type: ignore[method-assign]
                                                   read_only=True)
    wrapper = ReadOnlyTensorWrapper(t)
    assert not np.from_dlpack(wrapper).flags.writeable
    for producer in (flagged, wrapper):
        with pytest.raises(BufferError, match="read-only memory"):
            from_dlpack(producer)
        a = acc.asarray(producer, device="cpu:0")             # a copy: the values, not the memory
        assert a.data_ptr() != t.data_ptr() and a.numpy().tolist() == [0, 1, 2, 3]
        with pytest.raises(ValueError, match="copy=False"):
            acc.asarray(producer, device="cpu:0", copy=False)
    with pytest.raises(BufferError, match="read-only memory"):
        from_torch(wrapper)
    assert t.tolist() == [0, 1, 2, 3]


@needs_versioned
@pytest.mark.parametrize("device", ["cpu:0", DEV])
def test_array_exports_read_only_as_torch_2_15_does(device: str) -> None:
    # torch 2.15: Tensor.__dlpack__(read_only=True) exports the memory (no copy) in a versioned
    # capsule with DLPack's read-only flag; with a legacy capsule (max_version None or < (1, 0))
    # it is BufferError("read_only export requires the versioned DLPack protocol; pass
    # max_version=(1, 0) or higher"); a read_only that is not a bool is a TypeError. accelrt's
    # Array.__dlpack__ had no read_only keyword (TypeError: unexpected keyword argument)
    a = acc.full(3, 1.5, device=device)
    for kw in ({}, {"copy": True}, {"copy": False}):
        cap = a.__dlpack__(max_version=(1, 0), read_only=True, **kw)
        assert _name(cap) == b"dltensor_versioned"
        mv = _dlpack.unused_capsule(cap, "test")[1]
        assert mv.flags & _dlpack.DLPACK_FLAG_BITMASK_READ_ONLY
        assert (mv.dl_tensor.data == a.data_ptr()) is (not kw.get("copy"))
        if device == "cpu:0":
            view = np.from_dlpack(_Returns(cap))
            assert not view.flags.writeable and view.tolist() == [1.5] * 3
    plain = _dlpack.unused_capsule(a.__dlpack__(max_version=(1, 0), read_only=False), "test")
    assert not plain[1].flags & _dlpack.DLPACK_FLAG_BITMASK_READ_ONLY
    del plain
    for max_version in (None, (0, 8)):
        with pytest.raises(BufferError, match=re.escape(
                "read_only export requires the versioned DLPack protocol; pass "
                "max_version=(1, 0) or higher")):
            a.__dlpack__(max_version=max_version, read_only=True)
    for bad, shown_as in ((1, "int"), (None, "NoneType"), ("x", "str"),
                          (np.True_, "numpy.bool")):
        with pytest.raises(TypeError, match=re.escape(
                f"read_only must be a bool, got {shown_as}")):
            a.__dlpack__(max_version=(1, 0), read_only=bad)
    with pytest.raises(BufferError, match="read-only memory"):
        from_dlpack(_Returns(a.__dlpack__(max_version=(1, 0), read_only=True),
                             a.__dlpack_device__()), device=device)


def test_argument_type_errors_name_numpy_types_as_numpy_types() -> None:
    # torch 2.15: t.__dlpack__(copy=np.True_) is "TypeError: _to_dlpack(): argument 'copy'
    # must be bool, not numpy.bool"; accelrt said "copy must be a bool or None, got bool"
    a = acc.full(2, 1.0, device="cpu:0")
    with pytest.raises(TypeError, match=re.escape("copy must be a bool or None, got numpy.bool")):
        a.__dlpack__(copy=np.True_)
    with pytest.raises(TypeError, match=re.escape("stream must be an int or None, got numpy.int64")):
        a.__dlpack__(stream=np.int64(1))


# ---------------------------------------------------------------------- hostile producers

def test_a_producer_whose_dlpack_device_lies_is_a_buffer_error_on_both_paths() -> None:
    # a producer claiming host memory whose capsule describes device memory: the host path
    # let numpy's "RuntimeError: Unsupported device in DLTensor." through (the device path
    # said BufferError "the capsule describes device ..., the producer said ..."); torch 2.15
    # reads the capsule's device and fails on it. Now both paths say so, and the capsule
    # is released (never consumed)
    with leak_check():
        d = acc.full(2, 1.0, device=DEV)
        for call, who in ((from_dlpack, "from_dlpack()"),
                          (lambda p: acc.asarray(p, device="cpu:0"), "asarray()")):
            with pytest.raises(BufferError, match=re.escape(
                    f"{who}: the capsule describes device (12, 0), the producer said (1, 0)")):
                call(_Returns(d.__dlpack__(max_version=(1, 0)), (1, 0)))
        host = np.arange(3.0)                  # says kDLCUDAHost, is kDLCPU: both host memory
        assert from_dlpack(_Returns(host.__dlpack__(), (_dlpack.kDLCUDAHost, 0))).data_ptr() \
            == host.ctypes.data
        del d
        gc.collect()


def test_producers_without_the_newer_keywords_are_called_as_torch_calls_them() -> None:
    # torch 2.15's from_dlpack retries __dlpack__ without the keywords a producer refuses with
    # TypeError (max_version, copy, dl_device), keeping stream; a host-memory producer with no
    # keywords at all, or only stream=, is taken. So does accelrt, the memory shared
    class Legacy:
        def __init__(self, host: np.ndarray) -> None:
            self.host = host

        def __dlpack__(self) -> Any:
            return self.host.__dlpack__()

        def __dlpack_device__(self) -> tuple[int, int]:
            return (_dlpack.kDLCPU, 0)

    class OnlyStream(Legacy):
        def __dlpack__(self, stream: Any = None) -> Any:   # type: ignore[override]
            assert stream is None
            return self.host.__dlpack__()

    host = np.arange(4, dtype=np.int32)
    for producer in (Legacy(host), OnlyStream(host)):
        for call in (from_dlpack, lambda p: acc.asarray(p, device="cpu:0")):
            b = call(producer)
            assert b.data_ptr() == host.ctypes.data and b.numpy().tolist() == [0, 1, 2, 3]
    if HAVE_TORCH:
        import torch
        assert torch.from_dlpack(Legacy(host)).data_ptr() == host.ctypes.data


@needs_torch
def test_from_torch_refuses_a_tensor_that_requires_grad_with_torchs_own_error() -> None:
    # torch 2.15: BufferError("Can't export tensors that require gradient, use
    # tensor.detach()"), as acc.asarray already said; from_torch said "from_torch(): the
    # tensor requires grad; pass tensor.detach()"
    import torch

    from accelrt.interop.torch import from_torch
    for t in (torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True) * 2):
        for call in (from_torch, torch.from_dlpack):
            with pytest.raises(BufferError, match=re.escape(
                    "Can't export tensors that require gradient, use tensor.detach()")):
                call(t)


# ---------------------------------------------------------------------- lifetimes

@needs_torch
def test_a_tensors_memory_lives_while_the_array_does_and_goes_with_it() -> None:
    # the producer's memory (a numpy buffer under a torch tensor) stays while an accelrt array
    # imported from it lives, goes when both are gone; refused imports hold nothing
    import torch

    from accelrt.interop.torch import from_torch
    with _no_gc():
        host = np.full(64, 3.0)
        buf = weakref.ref(host)
        t = torch.from_numpy(host)
        a = from_torch(t[8:16])
        del host, t
        assert buf() is not None and a.numpy().tolist() == [3.0] * 8
        a.fill_(5.0)
        b = acc.asarray(torch.from_dlpack(a), device="cpu:0")   # and round the loop again
        del a
        assert buf() is not None and b.numpy().sum() == 40.0
        del b
        assert buf() is None
        host = np.zeros((4, 4))
        buf = weakref.ref(host)
        t = torch.from_numpy(host)
        for refused in (t.T, t[:, ::2], t.expand(2, 4, 4)):
            with pytest.raises(BufferError, match="contiguous"):
                from_torch(refused)
        with pytest.raises(BufferError, match="read-only"):
            from_dlpack(_Returns(t.__dlpack__(max_version=(1, 0), read_only=True)))
        del host, t, refused
        assert buf() is None


@needs_torch
def test_an_arrays_memory_lives_while_the_tensor_does_and_goes_with_it() -> None:
    import torch
    dev = "cpu:0"
    with leak_check(), _no_gc():
        base = acc.memory.memory_allocated(dev)
        a = acc.full(256, 2.0, device=dev)
        t = torch.from_dlpack(a)
        unconsumed = a.__dlpack__(max_version=(1, 0))
        del a
        assert acc.memory.memory_allocated(dev) > base and t.sum().item() == 512.0
        del t
        assert acc.memory.memory_allocated(dev) > base      # the capsule still holds it
        del unconsumed
        assert acc.memory.memory_allocated(dev) == base


# ---------------------------------------------------------------------- stream order

def _gated(stream: acc.Stream) -> threading.Event:
    """A gate blocking ``stream`` until the returned event is set."""
    gate = threading.Event()
    stream._b.launch_host_func(stream.device_index, gate.wait, stream.stream_id)
    return gate


@pytest.mark.parametrize("stream", ["consumer", None, -1])
def test_an_export_orders_the_consumers_stream_after_the_producers(stream: Any) -> None:
    # torch 2.15 (CUDA): __dlpack__(stream=s) makes s wait for the current stream (an event),
    # None means the default stream, -1 no synchronization; accelrt on an asynchronous device
    producer, consumer = acc.Stream(DEV), acc.Stream(DEV)
    default = acc.current_stream(DEV)
    with producer:
        a = acc.full(4, 2.0, device=DEV)
        gate = _gated(producer)
        try:
            handle = consumer.stream_id if stream == "consumer" else stream
            cap = a.__dlpack__(stream=handle)
            waiting = {"consumer": consumer, None: default}.get(stream)
            for s in (consumer, default):
                assert s.query() is (s is not waiting)
        finally:
            gate.set()
    consumer.synchronize()
    default.synchronize()
    assert consumer.query() and default.query()
    del cap


def test_an_import_hands_the_producer_the_current_stream() -> None:
    # torch 2.15's from_dlpack passes its current stream (1 for CUDA's legacy default); accelrt's
    # from_dlpack passes its current stream of the device, so a producer working on another
    # stream orders it: work queued on the current stream after the import waits
    producer, consumer = acc.Stream(DEV), acc.Stream(DEV)
    a = acc.full(4, 2.0, device=DEV)
    seen: list[Any] = []

    class OnProducerStream:
        def __dlpack__(self, **kw: Any) -> Any:
            seen.append(kw["stream"])
            with producer:
                return a.__dlpack__(**kw)

        def __dlpack_device__(self) -> tuple[int, int]:
            return a.__dlpack_device__()

    with producer:
        gate = _gated(producer)
    try:
        with consumer:
            b = from_dlpack(OnProducerStream(), device=DEV)
        assert seen == [consumer.stream_id] and b.data_ptr() == a.data_ptr()
        assert not consumer.query()                 # behind the producer's gated work
    finally:
        gate.set()
    consumer.synchronize()
    assert b.numpy().tolist() == [2.0] * 4


def _patched_capsule(device: str, size: int) -> _Returns:
    """A producer of a versioned capsule over a 4-element array whose shape says ``size``."""
    a = acc.full(4, 2.0, device=device)
    cap = a.__dlpack__(max_version=(1, 0))
    managed = _dlpack.unused_capsule(cap, "test")[1]
    managed.dl_tensor.shape[0] = size
    return _Returns(cap, a.__dlpack_device__())


@pytest.mark.parametrize("device", ["cpu:0", DEV])
def test_a_capsule_with_a_negative_or_overflowing_shape_is_refused(device: str) -> None:
    # torch 2.15: RuntimeError("Trying to create tensor with negative dimension -3: [-3]") and
    # ("Storage size calculation overflowed with sizes=[4611686018427387904] ..."); numpy:
    # ValueError("negative dimensions are not allowed", "array is too big; ..."). accelrt's
    # device path made an Array of shape (-3,) (negative nbytes) or of 2**64 bytes over the
    # 16-byte buffer; now a BufferError on both paths, as for any broken capsule
    for size, problem in ((-3, "has a negative dimension"),
                          (2**62, "holds more bytes than an address can reach")):
        with leak_check():
            for call, who in ((lambda p: from_dlpack(p, device=device), "from_dlpack()"),
                              (lambda p: acc.asarray(p, device="cpu:0"), "asarray()")):
                if who == "asarray()" and device == DEV:
                    continue                    # asarray copies device memory via numpy
                with pytest.raises(BufferError, match=re.escape(
                        f"{who}: the capsule's shape ({size},) {problem}")):
                    call(_patched_capsule(device, size))
            gc.collect()
