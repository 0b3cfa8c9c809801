"""Hostile review of session 32's changes: regression tests for what the review found.

Expectations were observed by running torch 2.15.0 (CPU build, numpy 2.4) beside accelrt
and are written here as literals (no torch in the test environment). The MPI engine's
signed-zero fix is tested in tests/distributed/test_review_s32_mpi.py and the ``signed zeros``
case of tests/distributed/cases.py.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import weakref
from collections.abc import Iterator

import numpy as np
import pytest

from helpers.registry import malloc_async_backend

import accelrt as acc
import accelrt.distributed as dist
from accelrt import _dlpack, backends
from accelrt.backends import Capabilities
from accelrt.backends.cpu import CpuBackend

_names = itertools.count()


def _lightning_says_oom(exc: BaseException, name: str) -> bool:
    """PyTorch Lightning's ``is_cuda_out_of_memory`` (utilities/memory.py), for backend
    ``name``: one argument that names the device kind and says ``out of memory``."""
    return (isinstance(exc, RuntimeError) and len(exc.args) == 1
            and name.upper() in exc.args[0] and "out of memory" in exc.args[0])


# ---------------------------------------------------------------------- out-of-memory messages

def test_pinned_host_oom_starts_with_the_backend_name_as_every_oom_message() -> None:
    # it read "cpu: out of pinned host memory: tried to allocate ... bytes", which neither
    # Lightning's nor accelerate's check recognises (torch's pinned OOM is the CUDA error
    # "CUDA error: out of memory")
    with pytest.raises(acc.OutOfMemoryError) as info:
        acc.empty(1 << 50, dtype="uint8", pin_memory=True)
    msg = str(info.value)
    assert msg.startswith("CPU out of memory. Tried to allocate 1048576.00 GiB of pinned host "
                          "memory with "), msg
    assert msg.endswith("already pinned; free pinned buffers or call empty_host_cache()")
    assert _lightning_says_oom(info.value, "cpu")


@pytest.fixture
def malloc_async() -> Iterator[str]:
    """A fresh cpu backend of 64 MiB under ``backend:cudaMallocAsync``."""
    name = f"rev32async{next(_names)}"
    with malloc_async_backend(name, lambda: CpuBackend(num_devices=1, async_streams=True,
                                                      memory_limit="64MiB", name=name)):
        yield name


def test_malloc_async_oom_names_the_backend_in_capitals_as_torch(malloc_async: str) -> None:
    # torch's CUDAMallocAsyncAllocator: "Free (according to CUDA): ..." (Lightning finds
    # "CUDA" there); accelrt wrote the backend's name as it is ("according to cuda")
    with pytest.raises(acc.OutOfMemoryError) as info:
        acc.empty(65 << 20, dtype="uint8", device=f"{malloc_async}:0")
    msg = str(info.value)
    assert msg.startswith("Allocation on device 0 would exceed allowed memory. (out of memory)")
    assert f"\nFree (according to {malloc_async.upper()}): 64.00 MiB\n" in msg
    assert _lightning_says_oom(info.value, malloc_async)
    # no fraction set: torch formats its UINT64_MAX limit as every size (it said "unlimited")
    assert msg.endswith("memory fraction)\n                        : 17179869184.00 GiB")


def test_malloc_async_oom_prints_the_fraction_limit(malloc_async: str) -> None:
    dev = f"{malloc_async}:0"
    acc.memory.set_per_process_memory_fraction(0.25, dev)        # 16 MiB of 64 MiB
    with pytest.raises(acc.OutOfMemoryError) as info:
        acc.empty(17 << 20, dtype="uint8", device=dev)
    assert str(info.value).endswith("\n                        : 16.00 MiB")


# ---------------------------------------------------------------------- numpy bools

def test_store_add_takes_a_numpy_bool_as_it_takes_a_bool() -> None:
    # torch 2.15 (numpy 2.4): HashStore().add("k", True) == 1, add("k", numpy.True_) == 2
    # (its int64_t argument converts through __int__). accelrt took True but refused
    # numpy.True_ ("amount must be an int, got bool") on numpy 2.4, and took it with numpy's
    # DeprecationWarning on 2.1-2.3 (an error under this suite's filterwarnings)
    store = dist.HashStore()
    assert store.add("k", True) == 1
    assert store.add("k", np.True_) == 2
    assert store.add("k", np.False_) == 2
    prefixed = dist.PrefixStore("p", store)
    assert prefixed.add("k", np.True_) == 1
    with pytest.raises(TypeError, match="amount must be an int, got float"):
        store.add("k", 1.0)



# ---------------------------------------------------------------------- DLPack flags

def test_a_copy_made_for_the_consumer_says_so_where_torch_does_not() -> None:
    # docs/differences.md: numpy's is-copied flag on copy=True (torch 2.15 leaves flags 0)
    a = acc.asarray(np.arange(3.0), device="cpu:0")
    for kw, flags in (({"copy": True}, 2), ({"copy": None}, 0), ({"copy": False}, 0),
                      ({"copy": True, "read_only": True}, 3)):
        capsule = a.__dlpack__(max_version=(1, 0), **kw)   # alive while its struct is read
        name, managed = _dlpack.unused_capsule(capsule, "t")
        assert (name, managed.flags) == (b"dltensor_versioned", flags), kw
        del managed, capsule


class _DeviceMemoryCpu(CpuBackend):
    """cpu devices whose memory the host may not read (exported as device capsules)."""

    def capabilities(self, index: int) -> Capabilities:
        return dataclasses.replace(super().capabilities(index), host_accessible=False)


def test_a_device_array_of_more_dimensions_than_numpy_has_exports() -> None:
    # s32 made device capsules over a numpy carrier array of the same dimensions, which numpy
    # caps at 64: a 65-dimension device array (accelrt makes them, torch 2.15 exports and
    # imports them) raised numpy's "maximum supported dimension for an ndarray is currently
    # 64"; the ctypes capsule before it had no limit
    name = f"rev32dev{next(_names)}"
    backends.register(name, lambda: _DeviceMemoryCpu(num_devices=1, name=name))
    try:
        shape = (1,) * 63 + (2, 3)
        a = acc.full(shape, 5, dtype="int32", device=f"{name}:0")
        owner = weakref.ref(a._mem)
        for max_version in (None, (1, 0)):
            capsule = a.__dlpack__(max_version=max_version)
            _name, managed = _dlpack.unused_capsule(capsule, "t")
            t = managed.dl_tensor
            assert t.ndim == 65 and t.data == a.data_ptr()
            assert tuple(t.shape[i] for i in range(65)) == shape
            assert tuple(t.strides[i] for i in range(65)) == (6,) * 63 + (3, 1)
            del t, managed, capsule
        del a
        gc.collect()
        assert owner() is None                   # the dropped capsules released the memory
    finally:
        backends.unregister(name)
