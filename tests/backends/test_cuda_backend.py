"""The CUDA backend.

Three parts:

* error mapping and argument checking, without a GPU: the backend runs over a driver stand-in
  that answers from a table and fails the call a test names, so every driver error path is
  shown to raise :class:`CudaError` (a :class:`accelrt.DeviceError`) naming the call and the
  CUDA error, and bad arguments are refused before the driver sees them;
* kernels: committed PTX matches the ``.cu`` sources, and every source compiles with NVRTC;
* GPU tests (skipped with the reason where CUDA is unavailable): real devices, streams,
  events, IPC, graphs, expandable segments, OOM, fork, interop.
"""

from __future__ import annotations

import ctypes
import inspect
import itertools
import os
import pickle
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt import _backend as registry
from accelrt.backends.cuda import CudaError, _cu, _discovery, _kernels, _streams
from accelrt.backends.cuda._cu import check

ROOT = Path(__file__).resolve().parents[2]
CUDA_REASON = registry.unavailable_reason("cuda")
gpu = pytest.mark.skipif(CUDA_REASON is not None, reason=f"needs a CUDA GPU: {CUDA_REASON}")


# ====================================================================== the CUresult check

def test_check_returns_values() -> None:
    assert check((0,), "cuA") is None
    assert check((0, 5), "cuA") == 5
    assert check((0, 5, 6), "cuA") == (5, 6)


def test_check_raises_cuda_error_with_name_and_call() -> None:
    with pytest.raises(CudaError) as info:
        check((2, None), "cuMemAlloc")
    e = info.value
    assert isinstance(e, acc.DeviceError) and isinstance(e, RuntimeError)
    assert (e.code, e.call) == (2, "cuMemAlloc")
    assert "cuMemAlloc failed" in str(e)
    if _cu.load_driver() is not None:
        assert e.error_name == "CUDA_ERROR_OUT_OF_MEMORY" and e.error_name in str(e)
    copy = pickle.loads(pickle.dumps(e))
    assert (type(copy), copy.code, copy.error_name, copy.call, str(copy)) == \
        (CudaError, e.code, e.error_name, e.call, str(e))


def test_error_text_of_unknown_code() -> None:
    assert _cu.error_text(123456) == ("CUresult(123456)", "")


@pytest.mark.parametrize(("fn", "value", "exc"), [
    (_cu.as_ptr, 0, ValueError), (_cu.as_ptr, -1, ValueError), (_cu.as_ptr, 1 << 64, ValueError),
    (_cu.as_ptr, "0x10", TypeError), (_cu.as_ptr, True, TypeError), (_cu.as_ptr, 1.0, TypeError),
    (_cu.as_size, -1, ValueError), (_cu.as_size, 1 << 63, ValueError),
    (_cu.as_size, None, TypeError), (_cu.as_handle, -1, ValueError),
    (_cu.as_handle, "s", TypeError),
])
def test_argument_checks(fn: Callable[[Any, str], int], value: Any, exc: type) -> None:
    with pytest.raises(exc):
        fn(value, "arg")


# ====================================================================== driver stand-in

OUTPUTS = {  # number of values each driver function returns after its CUresult
    "cuInit": 0, "cuDeviceGet": 1, "cuDeviceGetAttribute": 1, "cuDevicePrimaryCtxRetain": 1,
    "cuCtxSetCurrent": 0, "cuDeviceGetName": 1, "cuDeviceTotalMem": 1, "cuDeviceGetUuid": 1,
    "cuMemGetInfo": 2, "cuDeviceCanAccessPeer": 1, "cuCtxEnablePeerAccess": 0,
    "cuModuleLoadData": 1, "cuModuleGetFunction": 1, "cuLaunchKernel": 0, "cuMemAlloc": 1,
    "cuMemFree": 0, "cuMemHostAlloc": 1, "cuMemFreeHost": 0, "cuMemGetAllocationGranularity": 1,
    "cuMemAddressReserve": 1, "cuMemAddressFree": 0, "cuMemCreate": 1, "cuMemMap": 0,
    "cuMemRelease": 0, "cuMemSetAccess": 0, "cuMemUnmap": 0, "cuCtxSynchronize": 0,
    "cuMemcpyHtoDAsync": 0, "cuMemcpyDtoHAsync": 0, "cuMemcpyDtoDAsync": 0,
    "cuMemcpyAsync": 0, "cuMemcpyPeerAsync": 0, "cuMemsetD8Async": 0, "cuMemsetD16Async": 0,
    "cuMemsetD32Async": 0, "cuCtxGetStreamPriorityRange": 2, "cuStreamCreateWithPriority": 1,
    "cuStreamDestroy": 0, "cuStreamQuery": 0, "cuStreamSynchronize": 0, "cuStreamWaitEvent": 0,
    "cuStreamGetCtx": 1, "cuLaunchHostFunc": 0, "cuEventCreate": 1, "cuEventDestroy": 0,
    "cuEventRecord": 0, "cuEventRecordWithFlags": 0, "cuEventQuery": 0, "cuEventSynchronize": 0, "cuEventElapsedTime": 1,
    "cuIpcGetEventHandle": 1, "cuIpcOpenEventHandle": 1, "cuStreamBeginCapture": 0,
    "cuStreamEndCapture": 1, "cuGraphInstantiate": 1, "cuGraphLaunch": 0,
    "cuGraphExecDestroy": 0, "cuGraphDestroy": 0, "cuStreamIsCapturing": 1,
    "cuGraphGetNodes": 2, "cuGraphExecGetId": 1, "cuGraphDebugDotPrint": 0,
    "cuPointerGetAttribute": 1, "cuGetErrorString": 1, "cuThreadExchangeStreamCaptureMode": 1,
    "cuCtxGetCurrent": 1, "cuIpcGetMemHandle": 1, "cuIpcOpenMemHandle": 1,
    "cuIpcCloseMemHandle": 0, "cuMemGetAddressRange": 2,
    "cuDeviceGetDefaultMemPool": 1, "cuMemAllocFromPoolAsync": 1, "cuMemFreeAsync": 0,
    "cuMemPoolTrimTo": 0, "cuMemPoolGetAttribute": 1, "cuMemPoolSetAttribute": 0,
    "cuDevicePrimaryCtxGetState": 2,
}
CTX = 0xC0DE000
GRAN = 2 << 20


def _libcuda_loadable(real: Any) -> bool:
    try:
        real.cuInit(0)
    except Exception:  # noqa: BLE001 - libcuda could not be loaded (the type varies)
        return False
    return True


def _typecheck(real: Any, name: str, args: tuple[Any, ...]) -> None:
    """Call the real ``cuda.bindings`` function with the backend's arguments, on a machine
    without libcuda: argument conversion (CUdeviceptr/CUstream/int/enum/struct types, value
    ranges) runs first, then loading the library fails. Any other error is the backend
    building arguments the real binding would refuse on a GPU."""
    try:
        getattr(real, name)(*args)
    except Exception as exc:   # classified below
        if type(exc).__name__ == "DynamicLibNotFoundError" or "libcuda" in str(exc):
            return
        raise AssertionError(f"the real {name} refuses the backend's arguments {args!r}: "
                             f"{type(exc).__name__}: {exc}") from exc


class FakeDriver:
    """Answers driver calls from a table (enums and structs come from the real bindings);
    ``fail[name] = code`` makes ``name`` return that CUresult. Calls are recorded."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.fail: dict[str, int] = {}
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.handles = itertools.count(0x7F0000010000, 0x1000)
        self.reserve = itertools.count(0x7E0000000000, 1 << 32)
        #: also hand each call to the real binding, which converts the arguments before it
        #: finds that libcuda is missing (only where it is missing: never on a GPU machine)
        self.typecheck = not _libcuda_loadable(real)

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]

    def _value(self, name: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
        r = self.real
        if name == "cuDeviceGet":
            return (args[0],)
        if name == "cuDeviceGetAttribute":
            return (8,)
        if name == "cuDevicePrimaryCtxRetain":
            return (CTX + args[0],)          # one primary context per device
        if name == "cuDevicePrimaryCtxGetState":   # (flags, active): none made elsewhere
            return (0, 0)
        if name == "cuStreamGetCtx":
            return (CTX,)
        if name == "cuCtxSetCurrent":
            self.current = int(args[0])
            return ()
        if name == "cuCtxGetCurrent":
            return (getattr(self, "current", 0),)
        if name == "cuDeviceGetName":
            return (b"Fake GPU\0\0",)
        if name == "cuDeviceTotalMem":
            return (80 << 30,)
        if name == "cuDeviceGetUuid":
            u = r.CUuuid()
            ctypes.memmove(u.getPtr(), bytes(range(16)), 16)
            return (u,)
        if name == "cuMemGetInfo":
            return (1 << 30, 2 << 30)
        if name == "cuCtxGetStreamPriorityRange":
            return (0, -5)
        if name == "cuMemGetAllocationGranularity":
            return (GRAN,)
        if name == "cuMemAddressReserve":
            return (next(self.reserve),)
        if name == "cuEventElapsedTime":
            return (1.5,)
        if name == "cuStreamIsCapturing":
            return (r.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE,)
        if name == "cuIpcGetEventHandle":
            h = r.CUipcEventHandle()
            ctypes.memmove(h.getPtr(), bytes(range(64)), 64)
            return (h,)
        if name == "cuIpcGetMemHandle":
            m = r.CUipcMemHandle()
            ctypes.memmove(m.getPtr(), bytes(range(64, 128)), 64)
            return (m,)
        if name == "cuMemGetAddressRange":   # the opened pointer starts a 1 MiB allocation
            return (int(args[0]), 1 << 20)
        if name == "cuDeviceCanAccessPeer":
            return (1,)
        if name == "cuGraphGetNodes":   # (nodes, count): the fake captures nothing
            return (None, 0)
        if name == "cuGetErrorString":
            return (b"fake description",)
        if name == "cuThreadExchangeStreamCaptureMode":
            return (r.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL,)
        return tuple(next(self.handles) for _ in range(OUTPUTS[name]))

    def __getattr__(self, name: str) -> Any:
        # a function the installed bindings lack (cuGraphExecGetId before cuda-bindings 13)
        # is missing here too: AttributeError, as the real module's
        if not name.startswith("cu") or name not in OUTPUTS or not hasattr(self.real, name):
            return getattr(self.real, name)

        def call(*args: Any) -> tuple[Any, ...]:
            if self.typecheck:
                _typecheck(self.real, name, args)
            self.calls.append((name, args))
            if name in self.fail:
                return (self.real.CUresult(self.fail[name]), *(None,) * OUTPUTS[name])
            if name == "cuPointerGetAttribute":   # only memory allocated here is known
                return (self.real.CUresult.CUDA_ERROR_INVALID_VALUE, None)
            return (self.real.CUresult.CUDA_SUCCESS, *self._value(name, args))
        return call


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, FakeDriver]]:
    """A CudaBackend over the driver stand-in, with two visible devices."""
    real = pytest.importorskip("cuda.bindings.driver")
    drv = FakeDriver(real)
    monkeypatch.setattr(_cu, "driver", lambda: drv)
    monkeypatch.setattr(_discovery, "probe",
                        lambda: _discovery.Probe(2, None, "nvml", 12040, (0, 1)))
    from accelrt.backends.cuda import CudaBackend
    yield CudaBackend(), drv
    _discovery.reset()   # forget that the stand-in driver was initialised


INVALID = 1        # CUDA_ERROR_INVALID_VALUE
UNKNOWN = 999      # CUDA_ERROR_UNKNOWN
OOM = 2            # CUDA_ERROR_OUT_OF_MEMORY
NOT_READY = 600    # CUDA_ERROR_NOT_READY


def _objs(b: Any) -> dict[str, int]:
    """Live objects made through the backend for the error-path cases."""
    s = b.stream_create(0, 0)
    ev = b.event_create(0, True, False, False)
    ev2 = b.event_create(0, True, False, False)
    ipc = b.event_create(0, False, False, True)
    ptr = b.malloc(0, 4096)
    hp = b.host_malloc(4096)
    base = b.vm_reserve(0, 2 * GRAN)
    return {"s": s, "ev": ev, "ev2": ev2, "ipc": ipc, "ptr": ptr, "hp": hp, "base": base}


def _graph(b: Any, o: dict[str, int]) -> int:
    b.graph_capture_begin(0, o["s"])
    return b.graph_capture_end(0, o["s"])


def _instantiated(b: Any, o: dict[str, int]) -> int:
    g = _graph(b, o)
    b.graph_instantiate(0, g)
    return g


def _mapped(b: Any, o: dict[str, int]) -> int:
    assert b.vm_map(0, o["base"], GRAN)
    return o["base"]


ERROR_PATHS: list[tuple[str, str, Callable[[Any, dict[str, int]], Any]]] = [
    ("init_device", "cuDevicePrimaryCtxRetain", lambda b, o: b.init_device(1)),
    ("set_current_device", "cuCtxSetCurrent", lambda b, o: b.set_current_device(1, True)),
    ("set_current_device", "cuDevicePrimaryCtxGetState",
     lambda b, o: b.set_current_device(1, False)),
    ("get_device_properties", "cuDeviceGetName", lambda b, o: b.get_device_properties(1)),
    ("capabilities", "cuDeviceGetName", lambda b, o: b.capabilities(1)),
    ("get_memory_info", "cuMemGetInfo", lambda b, o: b.get_memory_info(0)),
    ("can_access_peer", "cuDeviceCanAccessPeer", lambda b, o: b.can_access_peer(0, 1)),
    ("enable_peer_access", "cuCtxEnablePeerAccess", lambda b, o: b.enable_peer_access(0, 1)),
    ("malloc", "cuMemAlloc", lambda b, o: b.malloc(0, 64)),
    ("free", "cuMemFree", lambda b, o: b.free(0, o["ptr"])),
    ("host_malloc", "cuMemHostAlloc", lambda b, o: b.host_malloc(64)),
    ("host_free", "cuMemFreeHost", lambda b, o: b.host_free(o["hp"])),
    ("vm_reserve", "cuMemAddressReserve", lambda b, o: b.vm_reserve(0, GRAN)),
    ("vm_release", "cuMemAddressFree", lambda b, o: b.vm_release(0, o["base"], 2 * GRAN)),
    ("vm_map", "cuMemCreate", lambda b, o: b.vm_map(0, o["base"], GRAN)),
    ("vm_map", "cuMemMap", lambda b, o: b.vm_map(0, o["base"], GRAN)),
    ("vm_map", "cuMemSetAccess", lambda b, o: b.vm_map(0, o["base"], GRAN)),
    ("vm_unmap", "cuMemUnmap", lambda b, o: b.vm_unmap(0, _mapped(b, o), GRAN)),
    ("memcpy", "cuMemcpyHtoDAsync", lambda b, o: b.memcpy(0, o["ptr"], o["hp"], 64, "h2d", 0)),
    ("memcpy", "cuMemcpyDtoHAsync", lambda b, o: b.memcpy(0, o["hp"], o["ptr"], 64, "d2h", 0)),
    ("memcpy", "cuMemcpyDtoDAsync",
     lambda b, o: b.memcpy(0, o["ptr"], o["ptr"] + 64, 64, "d2d", o["s"])),
    ("memcpy", "cuMemcpyAsync", lambda b, o: b.memcpy(0, o["hp"], o["hp"] + 64, 64, "h2h", 0)),
    ("memcpy_peer", "cuMemcpyPeerAsync",
     lambda b, o: b.memcpy_peer(0, o["ptr"], 0, o["ptr"] + 64, 64, 0)),
    ("memset", "cuMemsetD8Async", lambda b, o: b.memset(0, o["ptr"], 7, 64, 0)),
    ("fill", "cuMemsetD16Async", lambda b, o: b.fill(0, o["ptr"], b"ab", 8, 0)),
    ("fill", "cuMemsetD32Async", lambda b, o: b.fill(0, o["ptr"], b"abcd", 8, 0)),
    ("fill", "cuLaunchKernel", lambda b, o: b.fill(0, o["ptr"], b"abcdefgh", 8, 0)),
    ("fill", "cuModuleLoadData", lambda b, o: b.fill(0, o["ptr"] + 1, b"abcd", 8, 0)),
    ("stream_priority_range", "cuCtxGetStreamPriorityRange",
     lambda b, o: b.stream_priority_range(1)),
    ("stream_create", "cuStreamCreateWithPriority", lambda b, o: b.stream_create(0, -3)),
    ("stream_destroy", "cuStreamDestroy", lambda b, o: b.stream_destroy(0, o["s"])),
    ("stream_query", "cuStreamQuery", lambda b, o: b.stream_query(0, o["s"])),
    ("stream_synchronize", "cuStreamSynchronize", lambda b, o: b.stream_synchronize(0, o["s"])),
    ("stream_wait_event", "cuStreamWaitEvent",
     lambda b, o: b.stream_wait_event(0, o["s"], o["ev"])),
    ("synchronize", "cuCtxSynchronize", lambda b, o: b.synchronize(0)),
    ("close", "cuCtxSynchronize", lambda b, o: b.close()),
    ("launch_host_func", "cuLaunchHostFunc",
     lambda b, o: b.launch_host_func(0, lambda: None, o["s"])),
    ("event_create", "cuEventCreate", lambda b, o: b.event_create(0, False, True, False)),
    ("event_destroy", "cuEventDestroy", lambda b, o: b.event_destroy(0, o["ev"])),
    ("event_record", "cuEventRecord", lambda b, o: b.event_record(0, o["ev"], o["s"])),
    ("event_record_external", "cuEventRecordWithFlags",
     lambda b, o: (b.graph_capture_begin(0, o["s"]),
                   b.event_record_external(0, o["ev"], o["s"]))),
    ("stream_wait_event_external", "cuStreamWaitEvent",
     lambda b, o: (b.graph_capture_begin(0, o["s"]),
                   b.stream_wait_event_external(0, o["s"], o["ev"]))),
    ("event_query", "cuEventQuery", lambda b, o: b.event_query(0, o["ev"])),
    ("event_synchronize", "cuEventSynchronize", lambda b, o: b.event_synchronize(0, o["ev"])),
    ("event_elapsed_time", "cuEventElapsedTime",
     lambda b, o: b.event_elapsed_time(0, o["ev"], o["ev2"])),
    ("event_ipc_handle", "cuIpcGetEventHandle", lambda b, o: b.event_ipc_handle(0, o["ipc"])),
    ("event_from_ipc_handle", "cuIpcOpenEventHandle",
     lambda b, o: b.event_from_ipc_handle(0, bytes(64))),
    ("ipc_mem_handle", "cuIpcGetMemHandle", lambda b, o: b.ipc_mem_handle(0, o["ptr"])),
    ("ipc_open_mem_handle", "cuIpcOpenMemHandle",
     lambda b, o: b.ipc_open_mem_handle(0, bytes(64))),
    ("ipc_open_mem_handle", "cuMemGetAddressRange",
     lambda b, o: b.ipc_open_mem_handle(0, bytes(64))),
    ("ipc_close_mem_handle", "cuIpcCloseMemHandle",
     lambda b, o: b.ipc_close_mem_handle(0, b.ipc_open_mem_handle(0, bytes(64))[0])),
    ("graph_capture_begin", "cuStreamBeginCapture",
     lambda b, o: b.graph_capture_begin(0, o["s"])),
    ("graph_capture_begin_mode", "cuStreamBeginCapture",
     lambda b, o: b.graph_capture_begin_mode(0, o["s"], "relaxed")),
    ("graph_capture_end", "cuStreamEndCapture", lambda b, o: _graph(b, o)),
    ("graph_instantiate", "cuGraphInstantiate", lambda b, o: _instantiated(b, o)),
    ("graph_instantiate", "cuGraphExecGetId", lambda b, o: _instantiated(b, o)),
    ("graph_instantiate", "cuGraphExecDestroy",     # of the previous executable graph
     lambda b, o: b.graph_instantiate(0, _instantiated(b, o))),
    ("graph_replay", "cuGraphLaunch", lambda b, o: b.graph_replay(0, _graph(b, o), o["s"])),
    ("graph_replay", "cuGraphInstantiate",          # a graph never instantiated
     lambda b, o: b.graph_replay(0, _graph(b, o), o["s"])),
    ("graph_destroy", "cuGraphExecDestroy",
     lambda b, o: b.graph_destroy(0, _instantiated(b, o))),
    ("graph_destroy", "cuGraphDestroy", lambda b, o: b.graph_destroy(0, _graph(b, o))),
    ("graph_debug_dot", "cuGraphDebugDotPrint",
     lambda b, o: b.graph_debug_dot(0, _graph(b, o), "graph.dot", True)),
    ("graph_node_count", "cuGraphGetNodes", lambda b, o: b.graph_node_count(0, _graph(b, o))),
    ("stream_is_capturing", "cuStreamIsCapturing",
     lambda b, o: b.stream_is_capturing(0, o["s"])),
    ("philox_fill", "cuLaunchKernel",
     lambda b, o: b.philox_fill(0, o["ptr"], 64, "float32", "uniform", 1, 0, (0.0, 1.0), 0)),
    ("philox_fill", "cuModuleLoadData",
     lambda b, o: b.philox_fill(0, o["ptr"], 64, "int64", "randint", 1, 0, (0, 9), o["s"])),
    ("elementwise_add", "cuLaunchKernel",
     lambda b, o: b.elementwise_add(0, o["ptr"], o["ptr"], o["ptr"] + 512, 64, "float64", 0)),
    ("elementwise_add", "cuModuleLoadData",
     lambda b, o: b.elementwise_add(0, o["ptr"], o["ptr"], o["ptr"], 9, "int8", o["s"])),
    ("mempool_alloc_async", "cuDeviceGetDefaultMemPool",
     lambda b, o: b.mempool_alloc_async(1, 64, 0)),
    ("mempool_alloc_async", "cuMemAllocFromPoolAsync",
     lambda b, o: b.mempool_alloc_async(0, 64, o["s"])),
    ("mempool_free_async", "cuMemFreeAsync",
     lambda b, o: b.mempool_free_async(0, b.mempool_alloc_async(0, 64, 0), o["s"])),
    ("mempool_trim_to", "cuMemPoolTrimTo", lambda b, o: b.mempool_trim_to(0, 0)),
    ("mempool_get_attribute", "cuMemPoolGetAttribute",
     lambda b, o: b.mempool_get_attribute(0, "used_mem_high")),
    ("mempool_set_attribute", "cuMemPoolSetAttribute",
     lambda b, o: b.mempool_set_attribute(0, "release_threshold", 2**64 - 1)),
]


@pytest.mark.parametrize(("method", "call", "case"),
                         [pytest.param(m, c, f, id=f"{m}-{c}") for m, c, f in ERROR_PATHS])
def test_every_driver_error_maps_to_cuda_error(fake: Any, method: str, call: str,
                                               case: Callable[..., Any]) -> None:
    b, drv = fake
    if not hasattr(drv.real, call):
        pytest.skip(f"the installed cuda-bindings have no {call}")
    objs = _objs(b)
    drv.fail[call] = UNKNOWN
    with pytest.raises(CudaError) as info:
        case(b, objs)
    assert info.value.call.startswith(call)
    assert info.value.error_name == "CUDA_ERROR_UNKNOWN"
    assert "CUDA_ERROR_UNKNOWN" in str(info.value) and "fake description" in str(info.value)


def test_error_paths_cover_the_backend_methods() -> None:
    """Every raw operation that calls the driver has an error-path case above."""
    from accelrt._backend import Backend
    from accelrt.backends.cuda import CudaBackend
    covered = {m for m, _, _ in ERROR_PATHS}
    no_driver = {"device_count", "unavailable_reason", "default_stream", "host_accessible",
                 "graph_supported", "stream_is_valid", "vm_supported", "vm_granularity",
                 "get_device_capability", "supports_interprocess_events",
                 # driver errors mean "not device memory" (None); arch_list asks NVRTC and
                 # get_device_properties, whose error path is above
                 "pointer_device", "arch_list",
                 # the handles the backend keeps for a graph (no driver call)
                 "graph_native_handles"}
    methods = {n for n in vars(Backend) if not n.startswith("_") and callable(getattr(Backend, n))
               and getattr(CudaBackend, n) is not getattr(Backend, n)}
    assert not methods - covered - no_driver, sorted(methods - covered - no_driver)


@pytest.mark.parametrize("nvrtc", [None, (12, 4)])
def test_arch_list_names_what_the_kernels_are_built_for(fake: Any, nvrtc: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from accelrt.backends.cuda import _kernels
    b, _ = fake
    monkeypatch.setattr(_kernels, "nvrtc_version", lambda: nvrtc)
    # the fake reports compute capability 8.8 for both devices: one NVRTC target, then the PTX
    assert b.arch_list() == (["sm_88"] if nvrtc else []) + ["compute_70"]


def test_graph_node_count_asks_the_driver(fake: Any) -> None:
    b, drv = fake
    s = b.stream_create(0, 0)
    g = _graph(b, {"s": s})
    assert b.graph_node_count(0, g) == 0       # the fake captures nothing
    assert "cuGraphGetNodes" in drv.names()
    assert b.graph_node_count(1, g) is None    # not a graph of that device
    assert b.graph_node_count(0, 987654) is None


def test_graph_instantiate_dot_and_native_handles_call_the_driver(fake: Any,
                                                                  tmp_path: Path) -> None:
    """keep_graph's split: capture_end gives the CUgraph, instantiate makes (and remakes)
    the CUgraphExec, the DOT file comes from cuGraphDebugDotPrint with the real binding's
    argument types (checked where libcuda is missing)."""
    b, drv = fake
    s = b.stream_create(0, 0)
    g = _graph(b, {"s": s})
    assert "cuGraphInstantiate" not in drv.names()
    raw, exe = b.graph_native_handles(0, g)
    assert raw == g and exe is None
    first = b.graph_instantiate(0, g)
    _, exe1 = b.graph_native_handles(0, g)
    assert isinstance(first, int) and exe1 is not None
    b.graph_instantiate(0, g)                   # again: the first executable is destroyed
    _, exe2 = b.graph_native_handles(0, g)
    assert exe2 != exe1 and ("cuGraphExecDestroy", (exe1,)) in [
        (n, tuple(int(a) for a in args)) for n, args in drv.calls if n == "cuGraphExecDestroy"]
    for verbose in (True, False):
        b.graph_debug_dot(0, g, str(tmp_path / "g.dot"), verbose)
    dots = [args for n, args in drv.calls if n == "cuGraphDebugDotPrint"]
    assert [int(a[0]) for a in dots] == [g, g]
    assert dots[0][1] == os.fsencode(str(tmp_path / "g.dot")) and dots[1][2] == 0
    assert dots[0][2] == int(drv.real.CUgraphDebugDot_flags.CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE)
    b.graph_replay(0, g, s)
    launched = [args for n, args in drv.calls if n == "cuGraphLaunch"]
    assert int(launched[-1][0]) == exe2          # the newest executable graph runs
    with pytest.raises(ValueError, match="not a live graph"):
        b.graph_native_handles(1, g)
    b.graph_destroy(0, g)
    with pytest.raises(ValueError, match="not a live graph"):
        b.graph_debug_dot(0, g, "x.dot", True)


def test_out_of_memory_is_a_zero_not_an_error(fake: Any) -> None:
    b, drv = fake
    drv.fail["cuMemAlloc"] = OOM
    assert b.malloc(0, 1 << 40) == 0
    drv.fail["cuMemHostAlloc"] = OOM
    assert b.host_malloc(1 << 40) == 0


def test_stream_ordered_pool_calls_the_driver(fake: Any) -> None:
    """backend:cudaMallocAsync's raw operations: the default pool, allocations known to the
    range checks, a NULL pool allocation is out of memory, attribute names checked first."""
    b, drv = fake
    assert b.capabilities(0).stream_ordered_memory      # memory_pools_supported
    s = b.stream_create(0, 0)
    p = b.mempool_alloc_async(0, 4096, s)
    b.memset(0, p, 0, 4096, s)                          # pool memory passes the range check
    with pytest.raises(ValueError, match="overruns"):
        b.memset(0, p, 0, 4097, s)
    b.mempool_free_async(0, p, s)
    with pytest.raises(ValueError, match="already freed"):
        b.mempool_free_async(0, p, s)
    assert drv.names().count("cuDeviceGetDefaultMemPool") == 1   # cached per device
    drv.fail["cuMemAllocFromPoolAsync"] = OOM
    assert b.mempool_alloc_async(0, 1 << 40, s) == 0
    b.mempool_set_attribute(0, "release_threshold", 2**64 - 1)
    b.mempool_set_attribute(0, "used_mem_high", 0)
    assert isinstance(b.mempool_get_attribute(0, "reserved_mem_current"), int)
    b.mempool_trim_to(0, 0)
    before = len(drv.calls)
    for bad in (lambda: b.mempool_get_attribute(0, "size"),
                lambda: b.mempool_set_attribute(0, "used_mem_current", 0),
                lambda: b.mempool_set_attribute(0, "reserved_mem_high", 5),
                lambda: b.mempool_set_attribute(0, "release_threshold", 2**64)):
        with pytest.raises(ValueError):
            bad()
    assert len(drv.calls) == before                     # refused before the driver
    b.stream_destroy(0, s)


def test_vm_map_out_of_memory_is_false_and_leaves_nothing_mapped(fake: Any) -> None:
    b, drv = fake
    base = b.vm_reserve(0, 4 * GRAN)
    drv.fail["cuMemCreate"] = OOM
    assert b.vm_map(0, base, 2 * GRAN) is False
    assert "cuMemMap" not in drv.names()
    del drv.fail["cuMemCreate"]
    drv.fail["cuMemSetAccess"] = UNKNOWN
    with pytest.raises(CudaError):
        b.vm_map(0, base, 2 * GRAN)
    assert drv.names()[-2:] == ["cuMemUnmap", "cuMemRelease"]   # undone
    del drv.fail["cuMemSetAccess"]
    assert b.vm_map(0, base, 2 * GRAN) is True                  # nothing stayed mapped
    b.vm_unmap(0, base, 2 * GRAN)
    b.vm_release(0, base, 4 * GRAN)


def test_vm_mappings_are_unmapped_whole(fake: Any) -> None:
    b, drv = fake
    base = b.vm_reserve(0, 4 * GRAN)
    assert b.vm_map(0, base, 2 * GRAN) and b.vm_map(0, base + 2 * GRAN, GRAN)
    assert drv.names().count("cuMemCreate") == 2                # one handle per call
    with pytest.raises(ValueError, match="overlaps"):
        b.vm_map(0, base + GRAN, GRAN)
    with pytest.raises(ValueError, match="cuts"):
        b.vm_unmap(0, base, GRAN)
    with pytest.raises(ValueError, match="cuts"):
        b.vm_unmap(0, base + GRAN, GRAN)
    with pytest.raises(ValueError, match="not mapped"):
        b.vm_unmap(0, base + 3 * GRAN, GRAN)
    with pytest.raises(ValueError, match="still mapped"):
        b.vm_release(0, base, 4 * GRAN)
    b.memset(0, base + GRAN, 0, 2 * GRAN, 0)                    # spans both mappings
    with pytest.raises(ValueError, match="unmapped"):
        b.memset(0, base + GRAN, 0, 3 * GRAN, 0)                # runs past them
    b.vm_unmap(0, base, 3 * GRAN)                               # two mappings at once
    assert drv.names().count("cuMemRelease") == 2
    b.vm_release(0, base, 4 * GRAN)


def test_not_ready_means_false(fake: Any) -> None:
    b, drv = fake
    s = b.stream_create(0, 0)
    ev = b.event_create(0, False, False, False)
    drv.fail["cuStreamQuery"] = NOT_READY
    drv.fail["cuEventQuery"] = NOT_READY
    assert b.stream_query(0, s) is False and b.event_query(0, ev) is False
    del drv.fail["cuStreamQuery"], drv.fail["cuEventQuery"]
    assert b.stream_query(0, s) is True and b.event_query(0, ev) is True


BAD_CALLS: list[tuple[str, type, Callable[[Any, dict[str, int]], Any]]] = [
    ("malloc-zero", ValueError, lambda b, o: b.malloc(0, 0)),
    ("malloc-str", TypeError, lambda b, o: b.malloc(0, "1")),
    ("index-str", TypeError, lambda b, o: b.malloc("0", 16)),
    ("index-range", IndexError, lambda b, o: b.malloc(2, 16)),
    ("index-huge", IndexError, lambda b, o: b.get_device_properties(1 << 64)),
    ("free-interior", ValueError, lambda b, o: b.free(0, o["ptr"] + 16)),
    ("free-other-device", ValueError, lambda b, o: b.free(1, o["ptr"])),
    ("free-host", ValueError, lambda b, o: b.free(0, o["hp"])),
    ("host-free-device", ValueError, lambda b, o: b.host_free(o["ptr"])),
    ("memset-overrun", ValueError, lambda b, o: b.memset(0, o["ptr"], 0, 4097, 0)),
    ("memset-unknown", ValueError, lambda b, o: b.memset(0, 0x1234000, 0, 16, 0)),
    ("memset-value", ValueError, lambda b, o: b.memset(0, o["ptr"], 256, 16, 0)),
    ("memset-stream", ValueError, lambda b, o: b.memset(0, o["ptr"], 0, 16, 987654)),
    ("memset-stream-neg", ValueError, lambda b, o: b.memset(0, o["ptr"], 0, 16, -1)),
    ("memcpy-kind", ValueError, lambda b, o: b.memcpy(0, o["ptr"], o["hp"], 16, "x", 0)),
    ("memcpy-d2h-overrun", ValueError,
     lambda b, o: b.memcpy(0, o["hp"], o["ptr"], 8192, "d2h", 0)),
    ("memcpy-pinned-overrun", ValueError,
     lambda b, o: b.memcpy(0, o["ptr"], o["hp"] + 4000, 200, "h2d", 0)),
    ("memcpy-h2d-dst-host", ValueError, lambda b, o: b.memcpy(0, o["hp"], o["hp"], 16, "h2d", 0)),
    ("memcpy-ptr-huge", ValueError, lambda b, o: b.memcpy(0, 1 << 64, o["hp"], 16, "h2d", 0)),
    ("fill-width", ValueError, lambda b, o: b.fill(0, o["ptr"], b"abc", 4, 0)),
    ("fill-type", TypeError, lambda b, o: b.fill(0, o["ptr"], "ab", 4, 0)),
    ("fill-overrun", ValueError, lambda b, o: b.fill(0, o["ptr"], b"abcdefgh", 513, 0)),
    ("vm-unaligned", ValueError, lambda b, o: b.vm_reserve(0, 12345)),
    ("vm-map-outside", ValueError, lambda b, o: b.vm_map(0, 2 * GRAN, GRAN)),
    ("vm-unmap-unmapped", ValueError, lambda b, o: b.vm_unmap(0, o["base"], GRAN)),
    ("vm-release-unknown", ValueError, lambda b, o: b.vm_release(0, o["base"] + GRAN, GRAN)),
    ("stream-destroy-default", ValueError, lambda b, o: b.stream_destroy(0, 0)),
    ("stream-destroy-unknown", ValueError, lambda b, o: b.stream_destroy(0, 987654)),
    ("stream-query-unknown", ValueError, lambda b, o: b.stream_query(0, 987654)),
    ("stream-query-other-device", ValueError, lambda b, o: b.stream_query(1, o["s"])),
    ("event-unknown", ValueError, lambda b, o: b.event_query(0, 987654)),
    ("event-float", TypeError, lambda b, o: b.event_query(0, 1.5)),
    ("event-record-stream", ValueError, lambda b, o: b.event_record(0, o["ev"], 987654)),
    ("elapsed-non-timing", ValueError, lambda b, o: b.event_elapsed_time(0, o["ev"], o["ipc"])),
    ("ipc-and-timing", ValueError, lambda b, o: b.event_create(0, True, False, True)),
    ("ipc-handle-size", ValueError, lambda b, o: b.event_from_ipc_handle(0, b"\0garbage")),
    ("capture-default", acc.DeviceError, lambda b, o: b.graph_capture_begin(0, 0)),
    ("capture-end-idle", acc.DeviceError, lambda b, o: b.graph_capture_end(0, o["s"])),
    ("graph-unknown", ValueError, lambda b, o: b.graph_replay(0, 987654, o["s"])),
    ("graph-destroy-unknown", ValueError, lambda b, o: b.graph_destroy(0, 987654)),
    ("host-func-not-callable", TypeError, lambda b, o: b.launch_host_func(0, 42, 0)),
    ("philox-overrun", ValueError,
     lambda b, o: b.philox_fill(0, o["ptr"], 1025, "float32", "uniform", 1, 0, (0, 1), 0)),
    ("philox-host-pointer", ValueError,
     lambda b, o: b.philox_fill(0, o["hp"], 4, "float32", "uniform", 1, 0, (0, 1), 0)),
    ("philox-bad-stream", ValueError,
     lambda b, o: b.philox_fill(0, o["ptr"], 4, "float32", "uniform", 1, 0, (0, 1), 12345)),
    ("philox-bad-dtype", ValueError,
     lambda b, o: b.philox_fill(0, o["ptr"], 4, "int32", "normal", 1, 0, (0, 1), 0)),
    ("philox-bad-seed", TypeError,
     lambda b, o: b.philox_fill(0, o["ptr"], 4, "float32", "normal", 1.5, 0, (0, 1), 0)),
    ("add-overrun", ValueError,
     lambda b, o: b.elementwise_add(0, o["ptr"], o["ptr"], o["ptr"] + 8, 512, "float64", 0)),
    ("add-bad-dtype", ValueError,
     lambda b, o: b.elementwise_add(0, o["ptr"], o["ptr"], o["ptr"], 4, "object", 0)),
    ("add-dtype-type", TypeError,
     lambda b, o: b.elementwise_add(0, o["ptr"], o["ptr"], o["ptr"], 4, np.float32, 0)),
    ("add-bad-count", ValueError,
     lambda b, o: b.elementwise_add(0, o["ptr"], o["ptr"], o["ptr"], -1, "int32", 0)),
    ("add-bad-stream", ValueError,
     lambda b, o: b.elementwise_add(0, o["ptr"], o["ptr"], o["ptr"], 4, "int32", 777)),
    ("pointer-device-null", ValueError, lambda b, o: b.pointer_device(0)),
]


@pytest.mark.parametrize(("cid", "exc", "case"),
                         [pytest.param(c, e, f, id=c) for c, e, f in BAD_CALLS])
def test_bad_arguments_never_reach_the_driver(fake: Any, cid: str, exc: type,
                                              case: Callable[..., Any]) -> None:
    b, drv = fake
    objs = _objs(b)
    before = len(drv.calls)
    with pytest.raises(exc):
        case(b, objs)
    touched = {n for n, _ in drv.calls[before:]} - {
        "cuDeviceGet", "cuDeviceGetAttribute", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent",
        "cuInit", "cuPointerGetAttribute", "cuMemGetAllocationGranularity", "cuDeviceGetName",
        "cuDeviceTotalMem", "cuDeviceGetUuid", "cuCtxGetStreamPriorityRange", "cuCtxGetCurrent"}
    assert not touched, f"{cid}: the driver was called: {touched}"


ALLOWED = (TypeError, ValueError, IndexError, acc.AcceleratorError)
FUZZ = {
    "malloc": ("index", "size"), "free": ("index", "dptr"),
    "memset": ("index", "dptr", "byte", "size", "stream"),
    "fill": ("index", "dptr", "pattern", "size", "stream"),
    "memcpy": ("index", "dptr", "dptr", "size", "kind", "stream"),
    "memcpy_peer": ("index", "dptr", "index", "dptr", "size", "stream"),
    "stream_query": ("index", "stream"), "stream_synchronize": ("index", "stream"),
    "stream_wait_event": ("index", "stream", "event"), "stream_is_valid": ("index", "stream"),
    "event_record": ("index", "event", "stream"), "event_query": ("index", "event"),
    "event_elapsed_time": ("index", "event", "event"), "vm_map": ("index", "dptr", "size"),
    "vm_unmap": ("index", "dptr", "size"), "graph_replay": ("index", "graph", "stream"),
    "get_device_properties": ("index",), "stream_create": ("index", "index"),
}


def test_fuzzed_arguments_raise_only_mapped_errors(fake: Any) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    b, _ = fake
    o = _objs(b)
    pools: dict[str, list[Any]] = {
        "index": [0, 1, -1, 2, 2**64, "0", None, 1.0, True],
        "size": [1, 256, 4096, 4097, 0, -1, 2**64, "8", None, 1.5],
        "dptr": [o["ptr"], o["ptr"] + 256, o["ptr"] + 4096, o["hp"], o["base"], 256, 0, -1,
                 2**64, "p", None],
        "stream": [0, o["s"], 987654, -1, 2**64, "s", None, 1.0],
        "event": [o["ev"], o["ipc"], 0, 987654, -1, "e", None],
        "byte": [0, 255, 256, -1, "x", None],
        "pattern": [b"a", b"ab", b"abcd", b"abcdefgh", b"", b"abc", "ab", None, 3],
        "kind": ["h2d", "d2h", "d2d", "h2h", "x", 1, None],
        "graph": [0, 987654, -1, "g", None],
    }

    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.data())
    def run(data: Any) -> None:
        method = data.draw(st.sampled_from(sorted(FUZZ)))
        args = [data.draw(st.sampled_from(pools[k])) for k in FUZZ[method]]
        try:
            getattr(b, method)(*args)
        except ALLOWED:
            pass

    run()


def test_capture_state_is_checked_before_the_driver(fake: Any) -> None:
    b, drv = fake
    s = b.stream_create(0, 0)
    ev = b.event_create(0, False, False, False)
    b.graph_capture_begin(0, s)
    assert b.stream_is_capturing(0, s)
    with pytest.raises(acc.DeviceError, match="already capturing"):
        b.graph_capture_begin(0, s)
    for call in (lambda: b.stream_synchronize(0, s), lambda: b.stream_query(0, s),
                 lambda: b.synchronize(0), lambda: b.stream_destroy(0, s)):
        with pytest.raises(acc.DeviceError, match="captur"):
            call()
    b.event_record(0, ev, s)
    with pytest.raises(acc.DeviceError, match="inside a graph capture"):
        b.event_query(0, ev)
    assert "cuStreamSynchronize" not in drv.names() and "cuEventQuery" not in drv.names()
    g = b.graph_capture_end(0, s)
    b.graph_replay(0, g, 0)
    b.event_record(0, ev, s)
    assert b.event_query(0, ev) is True
    b.graph_destroy(0, g)
    with pytest.raises(ValueError):
        b.graph_destroy(0, g)


def test_allocation_during_capture_uses_relaxed_mode(fake: Any) -> None:
    b, drv = fake
    s = b.stream_create(0, 0)
    b.malloc(0, 64)
    assert "cuThreadExchangeStreamCaptureMode" not in drv.names()
    b.graph_capture_begin(0, s)
    before = len(drv.calls)
    ptr = b.malloc(0, 64)
    b.free(0, ptr)
    names = [n for n, _ in drv.calls[before:]]
    modes = [a[0] for n, a in drv.calls[before:] if n == "cuThreadExchangeStreamCaptureMode"]
    assert names.count("cuThreadExchangeStreamCaptureMode") == 4   # relax + restore, twice
    relaxed = drv.real.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    assert modes[0] == relaxed and modes[1] != relaxed
    b.graph_destroy(0, b.graph_capture_end(0, s))


@pytest.mark.parametrize(("mode", "cu"), [
    (None, "GLOBAL"), ("global", "GLOBAL"), ("thread_local", "THREAD_LOCAL"),
    ("relaxed", "RELAXED")])
def test_a_capture_begins_in_the_mode_asked(fake: Any, mode: str | None, cu: str) -> None:
    """``capture_error_mode`` reaches ``cuStreamBeginCapture``; ``graph_capture_begin``
    ("default") is global, as ``CUDAGraph.capture_begin``'s default (s41: every capture was
    thread-local)."""
    b, drv = fake
    s = b.stream_create(0, 0)
    assert b.capabilities(0).graph_capture_modes
    if mode is None:
        b.graph_capture_begin(0, s)
    else:
        b.graph_capture_begin_mode(0, s, mode)
    args = [a for n, a in drv.calls if n == "cuStreamBeginCapture"][-1]
    assert args[1] == getattr(drv.real.CUstreamCaptureMode, f"CU_STREAM_CAPTURE_MODE_{cu}")
    b.graph_destroy(0, b.graph_capture_end(0, s))


def test_an_unknown_capture_mode_is_refused_before_the_driver(fake: Any) -> None:
    b, drv = fake
    s = b.stream_create(0, 0)
    with pytest.raises(ValueError, match="capture mode must be one of"):
        b.graph_capture_begin_mode(0, s, "default")
    assert "cuStreamBeginCapture" not in drv.names()
    assert not b.stream_is_capturing(0, s)


@pytest.mark.parametrize(("mode", "here", "there"), [
    ("global", True, True), ("thread_local", True, False), ("relaxed", False, False)])
def test_a_synchronize_is_refused_by_the_captures_mode_and_thread(
        fake: Any, mode: str, here: bool, there: bool) -> None:
    """The generic rule (docs/graphs.md, the ``graph_capture_modes`` conformance check): a
    ``"global"`` capture refuses a synchronize of its device in every thread, a
    ``"thread_local"`` one in its own thread, a ``"relaxed"`` one nowhere (s41: every
    thread was refused while any stream of the device captured)."""
    b, drv = fake
    s = b.stream_create(0, 0)
    b.graph_capture_begin_mode(0, s, mode)

    def refused() -> bool:
        try:
            b.synchronize(0)
        except acc.DeviceError as exc:
            assert "is capturing a graph" in str(exc)
            return True
        return False

    seen: list[bool] = []
    t = threading.Thread(target=lambda: seen.append(refused()))
    t.start()
    t.join()
    assert (refused(), seen) == (here, [there])
    b.synchronize(1)                      # another device's synchronize is not refused
    b.graph_destroy(0, b.graph_capture_end(0, s))
    b.synchronize(0)


def test_the_capture_mode_is_restored_when_an_allocation_call_fails(fake: Any) -> None:
    """``cuMemAlloc`` failing during a capture: the error is raised and the thread's mode is
    exchanged back (PyTorch's ``CUDAStreamCaptureModeGuard`` restores in its destructor)."""
    b, drv = fake
    s = b.stream_create(0, 0)
    b.graph_capture_begin_mode(0, s, "global")
    before = len(drv.calls)
    drv.fail["cuMemAlloc"] = UNKNOWN
    with pytest.raises(CudaError):
        b.malloc(0, 64)
    del drv.fail["cuMemAlloc"]
    names = [n for n, _ in drv.calls[before:] if n.startswith(("cuThread", "cuMem"))]
    assert names == ["cuThreadExchangeStreamCaptureMode", "cuMemAlloc",
                     "cuThreadExchangeStreamCaptureMode"]
    modes = [a[0] for n, a in drv.calls[before:] if n == "cuThreadExchangeStreamCaptureMode"]
    assert modes[0] == drv.real.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    assert modes[1] != modes[0]                  # the previous mode, put back
    b.graph_destroy(0, b.graph_capture_end(0, s))


class _ExchangeFailsOnRestore:
    """Driver calls for ``_RelaxedCapture``: the first exchange succeeds, the next fails."""

    class CUstreamCaptureMode:
        CU_STREAM_CAPTURE_MODE_RELAXED = 2

    def __init__(self) -> None:
        self.exchanges = 0

    def cuThreadExchangeStreamCaptureMode(self, mode: int) -> tuple[int, int]:
        self.exchanges += 1
        return (0, 0) if self.exchanges == 1 else (UNKNOWN, 0)


def test_a_failed_restore_after_a_failed_call_warns_and_keeps_the_calls_error() -> None:
    """The restore of the thread's capture mode fails while the allocation call's own error
    propagates: that error reaches the caller and the failed restore is a warning (PyTorch's
    guard warns in its destructor, ``C10_CUDA_CHECK_WARN``); after a call that succeeded the
    failed restore raises (s41: it replaced the call's error)."""
    drv = _ExchangeFailsOnRestore()
    with pytest.warns(RuntimeWarning, match="capture mode was not restored"):
        with pytest.raises(KeyError, match="the call's"):
            with _streams._RelaxedCapture(drv):
                raise KeyError("the call's own error")
    drv = _ExchangeFailsOnRestore()
    with pytest.raises(CudaError, match="cuThreadExchangeStreamCaptureMode"):
        with _streams._RelaxedCapture(drv):
            pass
    assert drv.exchanges == 2


@pytest.mark.parametrize(("pattern", "offset", "call"), [
    (b"\x07", 0, "cuMemsetD8Async"),
    (b"\x01\x02", 0, "cuMemsetD16Async"),
    (b"\x01\x02\x03\x04", 0, "cuMemsetD32Async"),
    (b"\x01\x02\x03\x04\x05\x06\x07\x08", 0, "cuLaunchKernel"),
    (b"\x01\x02", 1, "cuLaunchKernel"),
    (b"\x01\x02\x03\x04", 2, "cuLaunchKernel"),
    (b"\x01\x02\x03\x04\x05\x06\x07\x08", 4, "cuLaunchKernel"),
])
def test_fill_dispatch(fake: Any, pattern: bytes, offset: int, call: str) -> None:
    b, drv = fake
    ptr = b.malloc(0, 4096)
    b.fill(0, ptr + offset, pattern, 16, 0)
    name, args = drv.calls[-1]
    assert name == call
    if call != "cuLaunchKernel":
        assert args[:3] == (ptr + offset, int.from_bytes(pattern, "little"), 16)


def test_compute_hooks_launch_their_kernels(fake: Any) -> None:
    b, drv = fake
    ptr = b.malloc(0, 4096)
    s = b.stream_create(0, 0)
    b.philox_fill(0, ptr, 100, "float64", "normal", 3, 4, (0.0, 1.0), s)
    b.elementwise_add(0, ptr, ptr, ptr + 2048, 256, "complex64", s)
    launches = [args for name, args in drv.calls if name == "cuLaunchKernel"]
    assert len(launches) == 2
    # (function, grid xyz, block xyz, shared memory, stream, params, extra)
    # 100 normals = 50 Philox blocks: 1 CUDA block; 256 complex64 = 512 floats: 2 blocks
    assert [tuple(a[1:9]) for a in launches] == [(1, 1, 1, 256, 1, 1, 0, s),
                                                 (2, 1, 1, 256, 1, 1, 0, s)]
    functions = [args[1] for name, args in drv.calls if name == "cuModuleGetFunction"]
    assert functions[-2:] == [b"accelrt_philox_normal_f64", b"accelrt_add_f32"]
    before = len(drv.calls)
    b.philox_fill(0, ptr, 0, "float32", "uniform", 3, 4, (0.0, 1.0), s)   # nothing to do
    b.elementwise_add(0, ptr, ptr, ptr, 0, "int32", s)
    assert "cuLaunchKernel" not in [n for n, _ in drv.calls[before:]]


def test_pointer_device_of_unknown_memory_is_none(fake: Any) -> None:
    b, _ = fake
    assert b.pointer_device(0x1234_5000) is None   # the stand-in knows no pointer attributes


def test_stream_create_makes_one_stream_and_clamps(fake: Any) -> None:
    # the one stream pool is the core's (accelrt.Stream): the backend makes one per call
    b, drv = fake
    first = b.stream_create(0, 0)
    assert drv.names().count("cuStreamCreateWithPriority") == 1
    others = [b.stream_create(0, 0) for _ in range(3)]
    assert drv.names().count("cuStreamCreateWithPriority") == 4
    assert len({first, *others}) == 4
    b.stream_create(0, -100)   # clamped to the greatest priority, -5
    assert drv.calls[-1] == ("cuStreamCreateWithPriority",
                             (drv.real.CUstream_flags.CU_STREAM_NON_BLOCKING, -5))
    assert b.stream_priority_range(0) == (0, -5)
    b.stream_destroy(0, first)
    assert b.stream_is_valid(0, first) is False
    assert b.stream_is_valid(0, others[0]) and b.stream_is_valid(0, 0)


def test_foreign_streams_are_validated_once(fake: Any) -> None:
    b, drv = fake
    backing = ctypes.create_string_buffer(64)          # mapped memory plays the driver's object
    foreign = (ctypes.addressof(backing) + 7) & ~7
    assert b.stream_is_valid(0, foreign) is True       # the driver knows it (cuStreamGetCtx)
    b.stream_query(0, foreign)                         # now accepted
    assert b.stream_is_valid(0, 987654) is False       # not a pointer: never asked
    assert ("cuStreamGetCtx", (987654,)) not in drv.calls


def test_host_function_is_kept_alive_until_it_runs(fake: Any) -> None:
    b, drv = fake
    ran: list[int] = []
    b.launch_host_func(0, lambda: ran.append(1), 0)
    name, args = drv.calls[-1]
    assert name == "cuLaunchHostFunc"
    key = args[2]
    assert key in _streams._host_funcs
    _streams._HOST_TRAMPOLINE(key)      # what the driver thread does
    assert ran == [1] and key not in _streams._host_funcs
    _streams._HOST_TRAMPOLINE(key)      # a second call finds nothing to run
    assert ran == [1]


def test_host_function_errors_surface_at_the_next_sync(fake: Any) -> None:
    b, drv = fake
    s = b.stream_create(0, 0)
    boom = KeyError("boom")

    def fail() -> None:
        raise boom
    b.launch_host_func(0, fail, s)
    _streams._HOST_TRAMPOLINE(drv.calls[-1][1][2])   # the driver thread runs it
    b.stream_synchronize(0, 0)                        # another stream: nothing to report
    with pytest.raises(acc.DeviceError, match="KeyError") as info:
        b.stream_synchronize(0, s)
    assert info.value.__cause__ is boom
    b.stream_synchronize(0, s)                        # reported once
    b.launch_host_func(0, fail, 0)
    _streams._HOST_TRAMPOLINE(drv.calls[-1][1][2])
    with pytest.raises(acc.DeviceError):
        b.synchronize(0)
    b.synchronize(0)


def test_host_function_errors_surface_at_query_and_event_synchronize(fake: Any) -> None:
    """The contract's rule (backends/_common.py, as the cpu backend does): a stream_query that
    finds the work done and an event_synchronize of an event recorded after the host function
    raise its exception, once."""
    b, drv = fake
    s = b.stream_create(0, 0)
    boom = OSError("boom")

    def fail() -> None:
        raise boom
    b.launch_host_func(0, fail, s)
    _streams._HOST_TRAMPOLINE(drv.calls[-1][1][2])   # the driver thread runs it
    assert b.stream_query(0, 0) is True               # another stream: nothing to report
    with pytest.raises(acc.DeviceError, match="OSError") as info:
        b.stream_query(0, s)
    assert info.value.__cause__ is boom
    assert b.stream_query(0, s) is True               # reported once
    ev = b.event_create(0, False, False, False)
    b.event_synchronize(0, ev)                        # never recorded: nothing to report
    b.launch_host_func(0, fail, s)
    _streams._HOST_TRAMPOLINE(drv.calls[-1][1][2])
    b.event_record(0, ev, s)
    with pytest.raises(acc.DeviceError, match="OSError"):
        b.event_synchronize(0, ev)
    b.event_synchronize(0, ev)
    b.stream_synchronize(0, s)                        # taken already
    b.event_destroy(0, ev)
    b.stream_destroy(0, s)


def test_ipc_handle_bytes(fake: Any) -> None:
    b, _ = fake
    ev = b.event_create(0, False, False, True)
    h = b.event_ipc_handle(0, ev)
    assert h == bytes(range(64))
    opened = b.event_from_ipc_handle(0, h)
    assert b.event_query(0, opened) is True


def test_ipc_mem_handle_calls(fake: Any) -> None:
    """Memory IPC goes through cuIpcGetMemHandle / cuIpcOpenMemHandle (lazy peer access) /
    cuIpcCloseMemHandle with the real bindings' argument types (checked where libcuda is
    missing); only segment bases can be shared and only opened memory closed."""
    b, drv = fake
    ptr = b.malloc(0, 4096)
    h = b.ipc_mem_handle(0, ptr)
    assert h == bytes(range(64, 128)) and drv.calls[-1] == ("cuIpcGetMemHandle", (ptr,))
    with pytest.raises(ValueError, match="does not start a cuMemAlloc allocation"):
        b.ipc_mem_handle(0, ptr + 256)
    base = b.vm_reserve(0, GRAN)
    with pytest.raises(ValueError, match="expandable segment"):
        b.ipc_mem_handle(0, base)
    with pytest.raises(ValueError, match="64 bytes"):
        b.ipc_open_mem_handle(0, b"short")
    with pytest.raises(TypeError):
        b.ipc_open_mem_handle(0, "handle")
    opened, size = b.ipc_open_mem_handle(0, h)
    name, args = next(c for c in drv.calls if c[0] == "cuIpcOpenMemHandle")
    assert ctypes.string_at(args[0].getPtr(), 64) == h and int(args[1]) == 1  # lazy peer
    assert size == 1 << 20
    with pytest.raises(ValueError, match="not memory opened"):
        b.ipc_close_mem_handle(0, ptr)
    b.ipc_close_mem_handle(0, opened)
    assert drv.calls[-1] == ("cuIpcCloseMemHandle", (opened,))
    with pytest.raises(ValueError, match="not memory opened"):
        b.ipc_close_mem_handle(0, opened)


def test_properties_and_capability(fake: Any) -> None:
    b, _ = fake
    p = b.get_device_properties(0)
    assert p["name"] == "Fake GPU" and p["total_memory"] == 80 << 30
    assert (p["major"], p["minor"], p["multi_processor_count"]) == (8, 8, 8)
    assert p["uuid"] == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert len(p["attributes"]) > 100 and p["attributes"]["warp_size"] == 8
    for key in ("L2_cache_size", "clock_rate", "pci_bus_id", "pci_device_id", "pci_domain_id"):
        assert key in p
    cap = b.get_device_capability(0)
    assert "bfloat16" in cap["supported_dtypes"] and cap["compute_capability"] == (8, 8)


def test_context_follows_the_device_across_libraries(fake: Any) -> None:
    b, drv = fake
    b.malloc(0, 64)
    assert drv.current == CTX + 0
    drv.current = CTX + 1                # another library made device 1 current here
    b.malloc(0, 64)
    assert drv.current == CTX + 0        # switched back before allocating on device 0
    b.malloc(1, 64)
    assert drv.current == CTX + 0        # device 1's context only while the call ran
    b.set_current_device(1, True)        # the thread's current device is 1 now
    assert drv.current == CTX + 1
    b.malloc(0, 64)
    assert drv.current == CTX + 1


def test_forked_child_refuses_cuda_after_a_context(fake: Any) -> None:
    b, _ = fake
    b._after_fork()                    # no context yet: the child may use CUDA
    b.malloc(0, 64)
    b._after_fork()                    # a context existed in the "parent"
    with pytest.raises(RuntimeError, match="spawn"):
        b.malloc(0, 64)


def test_forked_child_gets_pytorchs_error_for_every_operation(fake: Any) -> None:
    b, _ = fake
    p = b.malloc(0, 64)
    s = b.stream_create(0, 0)
    b._after_fork()                    # what the at-fork handler runs in a child
    msg = re.escape("Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
                    "multiprocessing, you must use the 'spawn' start method")
    for op in (lambda: b.malloc(0, 64), lambda: b.free(0, p), lambda: b.stream_create(0, 0),
               lambda: b.stream_synchronize(0, s), lambda: b.event_create(0, False, False, False),
               lambda: b.synchronize(0), lambda: b.init_device(1)):
        with pytest.raises(acc.BackendUnavailableError, match=msg):
            op()


def test_forked_child_refuses_cuda_after_cuinit_alone(fake: Any) -> None:
    b, drv = fake
    b.get_device_properties(1)           # cuInit, but no context
    assert "cuDevicePrimaryCtxRetain" not in drv.names()
    b._after_fork()
    with pytest.raises(RuntimeError, match="spawn"):
        b.malloc(0, 64)
    assert b.get_device_properties(1)["name"] == "Fake GPU"   # cached: no driver call


# ====================================================================== kernels

def test_committed_ptx_matches_the_sources() -> None:
    sources = _kernels.sources()
    assert "fill" in sources
    for src in sources.values():
        ptx = src.with_suffix(".ptx")
        assert ptx.exists(), f"{ptx.name} is missing: run python scripts/gen_ptx.py"
        text = ptx.read_text()
        assert _kernels.ptx_source_sha256(text) == _kernels.source_sha256(src), (
            f"{ptx.name} is stale: run python scripts/gen_ptx.py")
        assert f".target sm_{_kernels.PTX_ARCH.split('_')[1]}" in text
        for kernel in _kernel_names(src):
            assert f".entry {kernel}(" in text


def _kernel_names(src: Path) -> list[str]:
    import re
    return re.findall(r'extern\s+"C"\s+__global__\s+void\s+(\w+)', src.read_text())


def test_gen_ptx_check_passes() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_ptx.py"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_stale_ptx_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k() {}\n')
    (tmp_path / "k.ptx").write_text(_kernels.ptx_header("k", "0" * 64, "12.4", "compute_70"))
    monkeypatch.setattr(_kernels, "KERNEL_DIR", tmp_path)
    with pytest.raises(RuntimeError, match="regenerate"):
        _kernels.load_ptx("k")
    with pytest.raises(FileNotFoundError, match="gen_ptx"):
        _kernels.load_ptx("missing")


def test_a_changed_header_makes_its_modules_stale(tmp_path: Path) -> None:
    (tmp_path / "a.cuh").write_text('#include "b.cuh"\n__device__ int one() { return 1; }\n')
    (tmp_path / "b.cuh").write_text("__device__ int two() { return 2; }\n")
    (tmp_path / "k.cu").write_text('#include "a.cuh"\nextern "C" __global__ void k() {}\n')
    (tmp_path / "plain.cu").write_text('extern "C" __global__ void p() {}\n')
    k, plain = tmp_path / "k.cu", tmp_path / "plain.cu"
    assert sorted(_kernels.headers(k.read_bytes(), tmp_path)) == ["a.cuh", "b.cuh"]
    before = _kernels.source_sha256(k), _kernels.source_sha256(plain)
    (tmp_path / "b.cuh").write_text("__device__ int two() { return 3; }\n")  # nested header
    assert _kernels.source_sha256(k) != before[0]
    assert _kernels.source_sha256(plain) == before[1]
    (tmp_path / "a.cuh").unlink()
    with pytest.raises(FileNotFoundError):
        _kernels.source_sha256(k)


def test_the_kernel_modules_share_the_binary16_conversion() -> None:
    uses = {name for name, src in _kernels.sources().items()
            if "half.cuh" in _kernels.headers(src.read_bytes())}
    assert uses == {"philox", "reduce"}
    for src in _kernels.sources().values():   # written once, in the header
        assert "unsigned short accelrt_double_to_half(double d)\n{" not in src.read_text()


def test_pack_args_needs_numpy_scalars() -> None:
    args = [np.uint64(7), np.float32(1.5), np.uint32(3), np.int8(-2), np.float64(0.25)]
    ptrs, keep = _kernels.pack_args(args)
    # each pointer addresses its value, in the parameter's own C type, in a live holder
    assert len(ptrs) == len(args) and all(int(p) % 8 == 0 for p in ptrs)
    for p, a in zip(ptrs, args):
        assert ctypes.string_at(int(p), a.itemsize) == a.tobytes()
    lo, hi = keep[0].ctypes.data, keep[0].ctypes.data + keep[0].nbytes
    assert all(lo <= int(p) < hi for p in ptrs)
    with pytest.raises(TypeError, match="numpy scalars"):
        _kernels.pack_args([np.complex128(1)])   # wider than a kernel parameter slot
    with pytest.raises(TypeError, match="numpy scalars"):
        _kernels.pack_args([7])


NVRTC = _kernels.nvrtc_version()
needs_nvrtc = pytest.mark.skipif(NVRTC is None, reason="NVRTC is not installed "
                                 "(pip install nvidia-cuda-nvrtc)")


@needs_nvrtc
@pytest.mark.parametrize("name", sorted(_kernels.sources()))
def test_every_source_compiles_with_nvrtc(name: str) -> None:
    src = _kernels.sources()[name]
    ptx = _kernels.compile_source(src.read_bytes(), src.name, "compute_75").decode()
    for kernel in _kernel_names(src):
        assert f".entry {kernel}(" in ptx
    cubin = _kernels.compile_source(src.read_bytes(), src.name, "sm_90", cubin=True)
    assert cubin[:4] == b"\x7fELF"


@needs_nvrtc
def test_nvrtc_errors_carry_the_log() -> None:
    with pytest.raises(CudaError, match="nvrtcCompileProgram") as info:
        _kernels.compile_source(b'extern "C" __global__ void k() { oops; }', "bad.cu",
                                "compute_75")
    assert "oops" in str(info.value)


# ====================================================================== on a GPU

@pytest.fixture
def cuda() -> Any:
    return registry.get_backend("cuda")


def _host(n: int, fill: int = 0) -> np.ndarray:
    return np.full(n, fill, dtype=np.uint8)


@gpu
def test_gpu_properties(cuda: Any) -> None:
    p = acc.get_device_properties("cuda:0")
    assert p["name"] and p["total_memory"] > 1 << 30 and p["multi_processor_count"] > 0
    assert (p["major"], p["minor"]) == acc.cuda.get_device_capability(0)
    free, total = cuda.get_memory_info(0)
    assert 0 < free <= total and abs(total - p["total_memory"]) <= p["total_memory"] // 100
    assert acc.cuda.get_device_name(0) == p["name"]
    assert 0 <= acc.cuda.utilization(0) <= 100 and acc.cuda.temperature(0) > 0
    assert acc.cuda.list_gpu_processes(0).startswith("GPU:0")


@gpu
def test_gpu_memcpy_memset_fill_roundtrip(cuda: Any) -> None:
    n = 1 << 16
    ptr = cuda.malloc(0, n)
    s = cuda.stream_create(0, 0)
    try:
        src = np.arange(n, dtype=np.uint32).view(np.uint8)[:n].copy()
        out = _host(n)
        cuda.memcpy(0, ptr, src.ctypes.data, n, "h2d", s)
        cuda.memcpy(0, out.ctypes.data, ptr, n, "d2h", s)
        cuda.stream_synchronize(0, s)
        assert np.array_equal(out, src)
        for width, offset in [(1, 0), (2, 0), (4, 0), (8, 0), (2, 1), (4, 2), (8, 4), (8, 3)]:
            pattern = bytes(range(1, width + 1))
            cuda.memset(0, ptr, 0, n, s)
            cuda.fill(0, ptr + offset, pattern, 100, s)
            cuda.memcpy(0, out.ctypes.data, ptr, n, "d2h", s)
            cuda.stream_synchronize(0, s)
            want = np.zeros(n, np.uint8)
            want[offset:offset + 100 * width] = np.frombuffer(pattern * 100, np.uint8)
            assert np.array_equal(out, want), (width, offset)
    finally:
        cuda.free(0, ptr)
        cuda.stream_destroy(0, s)


@gpu
def test_gpu_streams_events_timing(cuda: Any) -> None:
    least, greatest = cuda.stream_priority_range(0)
    assert greatest <= least
    s1 = acc.Stream("cuda:0", priority=greatest)
    start = acc.Event("cuda:0", enable_timing=True)
    end = acc.Event("cuda:0", enable_timing=True)
    ptr = acc.memory.caching_allocator_alloc(64 << 20, "cuda:0", s1)
    start.record(s1)
    for _ in range(10):
        cuda.memset(0, ptr, 1, 64 << 20, s1.stream_id)
    end.record(s1)
    s2 = acc.Stream("cuda:0")
    s2.wait_event(end)
    end.synchronize()
    assert end.query() and s1.query()
    assert start.elapsed_time(end) > 0
    ran = []
    cuda.launch_host_func(0, lambda: ran.append(True), s2.stream_id)
    s2.synchronize()
    assert ran == [True]
    acc.memory.caching_allocator_delete(ptr)


@gpu
def test_gpu_ipc_event_roundtrip_in_child(cuda: Any, tmp_path: Path) -> None:
    ev = cuda.event_create(0, False, False, True)
    s = cuda.stream_create(0, 0)
    cuda.event_record(0, ev, s)
    handle = cuda.event_ipc_handle(0, ev)
    code = textwrap.dedent(f"""
        from accelrt import backends
        b = backends.get_backend("cuda")
        e = b.event_from_ipc_handle(0, bytes.fromhex({handle.hex()!r}))
        b.event_synchronize(0, e)
        print("ok", b.event_query(0, e))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "ok True" in out.stdout, out.stderr


@gpu
def test_gpu_graph_capture_and_replay(cuda: Any) -> None:
    n = 4096
    out = _host(n)
    acc.set_current_accelerator("cuda")
    acc.set_device_index(0)
    g = acc.Graph()
    s = acc.Stream("cuda:0")
    ptr = acc.memory.caching_allocator_alloc(n, "cuda:0", s)
    with acc.graph(g, stream=s):
        cuda.memset(0, ptr, 5, n, s.stream_id)
        inside = acc.memory.caching_allocator_alloc(1 << 20, "cuda:0", s)   # private pool
    assert {tuple(x["segment_pool_id"]) for x in acc.memory.memory_snapshot()
            if any(b["address"] == inside for b in x["blocks"])} == {g.pool()}
    cuda.memset(0, ptr, 0, n, s.stream_id)
    s.synchronize()
    for _ in range(3):
        g.replay()                               # on the current (default) stream
    acc.synchronize("cuda:0")
    cuda.memcpy(0, out.ctypes.data, ptr, n, "d2h", 0)
    cuda.stream_synchronize(0, 0)
    assert (out == 5).all()
    g.reset()
    acc.memory.caching_allocator_delete(inside)
    acc.memory.caching_allocator_delete(ptr)


def _run_child(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, env=full)


@gpu
def test_gpu_expandable_segments_grow_in_place() -> None:
    out = _run_child("""
        import accelrt as acc
        acc.set_current_accelerator("cuda")
        ptrs = [acc.memory.caching_allocator_alloc(64 << 20, "cuda:0") for _ in range(4)]
        segs = [s for s in acc.memory.memory_snapshot() if s["device"] == 0
                and s["segment_type"] == "large"]
        print("segments", len(segs), all(s.get("is_expandable") for s in segs))
        for p in ptrs:
            acc.memory.caching_allocator_delete(p)
    """, {"ACCELRT_ALLOC_CONF": "expandable_segments:True"})
    assert out.returncode == 0, out.stderr
    assert "segments 1 True" in out.stdout, out.stdout


@gpu
def test_gpu_oom_on_fraction_limit() -> None:
    acc.set_current_accelerator("cuda")
    acc.memory.set_per_process_memory_fraction(0.01, "cuda:0")
    try:
        total = acc.get_device_properties("cuda:0")["total_memory"]
        with pytest.raises(acc.OutOfMemoryError):
            acc.memory.caching_allocator_alloc(total // 50, "cuda:0")
    finally:
        acc.memory.set_per_process_memory_fraction(1.0, "cuda:0")


@gpu
def test_gpu_fork_after_is_available_still_works() -> None:
    out = _run_child("""
        import os, accelrt as acc
        assert acc.cuda.is_available() and acc.cuda.device_count() > 0
        pid = os.fork()
        if pid == 0:
            from accelrt import backends
            b = backends.get_backend("cuda")
            p = b.malloc(0, 1024)
            b.free(0, p)
            os._exit(0 if p else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """)
    assert out.returncode == 0 and "child 0" in out.stdout, out.stderr


@gpu
def test_gpu_interop_with_cupy_and_torch_streams(cuda: Any) -> None:
    tested = 0
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        cs = cupy.cuda.Stream(non_blocking=True)
        es = acc.cuda.ExternalStream(acc.cuda.stream_handle(cs), 0)
        assert es.stream_id == cs.ptr and es.query()
        tested += 1
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        ts = torch.cuda.Stream()
        es = acc.cuda.as_stream(ts, 0)
        assert es.stream_id == ts.cuda_stream
        es.synchronize()
        tested += 1
    if not tested:
        pytest.skip("neither CuPy nor PyTorch with CUDA is importable")


@gpu
def test_gpu_virtual_memory_map_write_unmap(cuda: Any) -> None:
    if not cuda.vm_supported(0):
        pytest.skip("this GPU has no virtual memory management")
    g = cuda.vm_granularity(0)
    base = cuda.vm_reserve(0, 4 * g)
    try:
        assert cuda.vm_map(0, base, g) and cuda.vm_map(0, base + g, g)
        out = _host(2 * g)
        cuda.memset(0, base, 9, 2 * g, 0)               # one write across both mappings
        cuda.memcpy(0, out.ctypes.data, base, 2 * g, "d2h", 0)
        cuda.stream_synchronize(0, 0)
        assert (out == 9).all()
        cuda.vm_unmap(0, base + g, g)
        with pytest.raises(ValueError):
            cuda.memset(0, base, 0, 2 * g, 0)           # runs into the unmapped page
        cuda.vm_unmap(0, base, g)
    finally:
        cuda.vm_release(0, base, 4 * g)


@gpu
def test_gpu_out_of_memory_and_pinned_memory(cuda: Any) -> None:
    _free, total = cuda.get_memory_info(0)
    assert cuda.malloc(0, total * 4) == 0
    hp = cuda.host_malloc(1 << 20)
    try:
        ptr = cuda.malloc(0, 1 << 20)
        host = np.ctypeslib.as_array((ctypes.c_uint8 * (1 << 20)).from_address(hp))
        host[:] = 3
        cuda.memcpy(0, ptr, hp, 1 << 20, "h2d", 0)
        host[:] = 0
        cuda.memcpy(0, hp, ptr, 1 << 20, "d2h", 0)
        cuda.stream_synchronize(0, 0)
        assert (host == 3).all()
        cuda.free(0, ptr)
    finally:
        cuda.host_free(hp)


@gpu
def test_gpu_committed_ptx_loads_without_nvrtc(cuda: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from accelrt.backends.cuda._kernels import KernelCache
    monkeypatch.setattr(_kernels, "nvrtc_version", lambda: None)
    monkeypatch.setattr(cuda, "kernels", KernelCache())
    ptr = cuda.malloc(0, 64)
    try:
        cuda.fill(0, ptr, b"\x01\x02\x03\x04\x05\x06\x07\x08", 8, 0)
        out = _host(64)
        cuda.memcpy(0, out.ctypes.data, ptr, 64, "d2h", 0)
        cuda.stream_synchronize(0, 0)
        assert out.tolist() == list(range(1, 9)) * 8
        assert cuda.kernels.origin[(0, "fill")] == "ptx"
    finally:
        cuda.free(0, ptr)


@gpu
def test_gpu_host_function_error_is_reported(cuda: Any) -> None:
    s = cuda.stream_create(0, 0)

    def fail() -> None:
        raise OSError("in a host function")
    cuda.launch_host_func(0, fail, s)
    with pytest.raises(acc.DeviceError, match="OSError"):
        cuda.stream_synchronize(0, s)
    cuda.stream_synchronize(0, s)
    cuda.stream_destroy(0, s)


class _CaiOnly:
    """A producer with only ``__cuda_array_interface__`` (like Numba's device arrays)."""

    def __init__(self, desc: dict[str, Any], keep: Any = None) -> None:
        self.__cuda_array_interface__ = desc
        self.keep = keep


@gpu
def test_gpu_asarray_of_a_cuda_array_interface_producer(cuda: Any) -> None:
    src = acc.asarray(np.arange(10, dtype=np.float32), device="cuda:0")
    desc = src.__cuda_array_interface__
    assert desc["stream"] == (acc.current_stream("cuda:0").stream_id or 1)
    assert desc["data"] == (src.data_ptr(), False) and desc["typestr"] == "<f4"
    s = acc.Stream("cuda:0")
    p = _CaiOnly(dict(desc, stream=s.stream_id), keep=src)
    a = acc.asarray(p)                                  # the producer's device, no copy
    assert a.device == acc.device("cuda:0") and a.data_ptr() == src.data_ptr()
    assert acc.asarray(p, dtype="float64").numpy().tolist() == list(range(10))
    assert acc.asarray(p, device="cpu:0").numpy().tolist() == list(range(10))
    c = acc.asarray(p, copy=True)
    assert c.data_ptr() != src.data_ptr() and c.numpy().tolist() == list(range(10))
    strided = _CaiOnly(dict(desc, shape=(5,), strides=(8,)), keep=src)
    assert acc.asarray(strided).numpy().tolist() == list(range(0, 10, 2))
    host = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="not device memory of cuda"):
        acc.asarray(_CaiOnly(dict(desc, shape=(4,), data=(host.ctypes.data, False)), host))


@gpu
def test_gpu_peer_copy(cuda: Any) -> None:
    if cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    a, b2 = cuda.malloc(0, 4096), cuda.malloc(1, 4096)
    cuda.memset(0, a, 6, 4096, 0)
    cuda.memcpy_peer(1, b2, 0, a, 4096, 0)
    out = _host(4096)
    cuda.stream_synchronize(0, 0)
    cuda.memcpy(1, out.ctypes.data, b2, 4096, "d2h", 0)
    cuda.stream_synchronize(1, 0)
    assert (out == 6).all()
    cuda.free(0, a)
    cuda.free(1, b2)


# ====================================================================== acc.cuda extras

def test_nvtx_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("nvtx")
    nvtx = acc.cuda.nvtx
    # the depths NVTX answers with a tool attached (without one: -2, as torch's; s37)
    monkeypatch.setattr("accelrt.backends.cuda._nvtx._tool_attached", lambda: True)
    assert nvtx.range_push("outer") == 0 and nvtx.range_push("inner") == 1
    assert nvtx.range_pop() == 1 and nvtx.range_pop() == 0 and nvtx.range_pop() == -1
    nvtx.mark("here")
    with nvtx.range("step {}", 3):
        assert nvtx.range_push("x") == 1
        nvtx.range_pop()

    @nvtx.range("decorated")
    def f() -> int:
        return 5
    assert f() == 5
    with pytest.raises(TypeError):
        nvtx.range_push(3)          # type: ignore[arg-type]


def test_nvtx_missing_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nvtx", None)
    assert acc.cuda.nvtx.available() is False
    with pytest.raises(acc.BackendUnavailableError, match=r"accelrt\[cuda\]"):
        acc.cuda.nvtx.range_push("x")


class _ForeignStream:
    def __init__(self, value: Any) -> None:
        self.value = value

    def __cuda_stream__(self) -> Any:
        return self.value


def test_stream_handle_protocol() -> None:
    assert acc.cuda.stream_handle(_ForeignStream((0, 0xABC0))) == 0xABC0
    with pytest.raises(TypeError, match="version, handle"):
        acc.cuda.stream_handle(_ForeignStream(0xABC0))
    with pytest.raises(TypeError, match="__cuda_stream__"):
        acc.cuda.stream_handle(object())
    with pytest.raises(ValueError, match="cpu stream"):
        acc.cuda.stream_handle(acc.Stream("cpu"))
    legacy = type("TorchLike", (), {"cuda_stream": 0x77})()
    assert acc.cuda.stream_handle(legacy) == 0x77
    s = acc.Stream("cpu")
    assert acc.cuda.as_stream(s) is s


@pytest.mark.skipif(CUDA_REASON is None, reason="checks the behaviour without CUDA")
def test_extras_without_cuda_raise_the_reason() -> None:
    for fn in (acc.cuda.get_device_name, acc.cuda.get_device_capability, acc.cuda.utilization,
               acc.cuda.temperature, acc.cuda.power_draw, acc.cuda.clock_rate,
               acc.cuda.memory_usage):
        with pytest.raises(acc.BackendUnavailableError, match="not available"):
            fn()
    # torch 2.15's list_gpu_processes answers with a message, not an error (session 41)
    assert acc.cuda.list_gpu_processes() == "cuda driver can't be loaded, is cuda enabled?"
    with pytest.raises(acc.BackendUnavailableError):
        acc.cuda.ExternalStream(0x1000)
    with pytest.raises(TypeError):
        acc.cuda.ExternalStream("0x1000")       # type: ignore[arg-type]
    assert acc.cuda.is_available() is False and acc.cuda.device_count() == 0
    assert acc.cuda.is_current_stream_capturing() is False
    with pytest.raises(acc.BackendUnavailableError):
        acc.cuda.CUDAGraph().capture_begin()
    assert issubclass(acc.cuda.CUDAGraph, acc.Graph) and acc.cuda.graph_pool_handle()[0] == 0


def test_nvml_monitoring_over_a_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from accelrt.backends.cuda import _nvml

    class NVMLError(Exception):
        pass

    handles: list[int] = []

    def by_index(i: int) -> int:
        handles.append(i)
        return 100 + i

    fake_nvml = SimpleNamespace(
        NVMLError=NVMLError, NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1,
        nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=by_index,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=h - 60, memory=7),
        nvmlDeviceGetTemperature=lambda h, kind: 55, nvmlDeviceGetPowerUsage=lambda h: 250000,
        nvmlDeviceGetClockInfo=lambda h, kind: 1980,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [SimpleNamespace(pid=42,
                                                                        usedGpuMemory=2 << 20)])
    monkeypatch.setattr(_cu, "load_nvml", lambda: fake_nvml)
    monkeypatch.setattr(_nvml, "_inited", False)
    monkeypatch.setattr(_discovery, "probe",
                        lambda: _discovery.Probe(2, None, "nvml", 12040, (3, 1)))
    h = _nvml.handle(0)
    assert h == 103 and handles == [3]           # CUDA 0 is NVML 3 (CUDA_VISIBLE_DEVICES)
    assert (_nvml.utilization(h), _nvml.memory_usage(h), _nvml.temperature(h),
            _nvml.power_draw(h), _nvml.clock_rate(h)) == (43, 7, 55, 250000, 1980)
    assert _nvml.list_gpu_processes(0, h) == \
        "GPU:0\nprocess         42 uses        2.000 MB GPU memory"
    with pytest.raises(IndexError):
        _nvml.handle(2)

    def broken(h: int) -> None:
        raise NVMLError("GPU is lost")
    fake_nvml.nvmlDeviceGetPowerUsage = broken
    with pytest.raises(acc.DeviceError, match="GPU is lost"):
        _nvml.power_draw(h)
    assert _nvml.format_processes(1, []) == "GPU:1\nno processes are running"


@gpu
def test_gpu_cuda_graph_while_cpu_is_the_accelerator(cuda: Any) -> None:
    acc.set_current_accelerator("cpu")
    ptr = cuda.malloc(0, 4096)
    try:
        g = acc.cuda.CUDAGraph()
        assert not acc.cuda.is_current_stream_capturing()
        with acc.cuda.graph(g):
            assert acc.cuda.is_current_stream_capturing()
            cuda.memset(0, ptr, 3, 4096, acc.cuda.current_stream().stream_id)
        g.replay()
        acc.cuda.synchronize()
        out = _host(4096)
        cuda.memcpy(0, out.ctypes.data, ptr, 4096, "d2h", 0)
        cuda.stream_synchronize(0, 0)
        assert (out == 3).all()
        g.reset()
    finally:
        cuda.free(0, ptr)


@pytest.mark.skipif(CUDA_REASON is None, reason="checks the behaviour without CUDA")
def test_bench_says_no_gpu() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_cuda.py")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("no GPU: "), out.stdout + out.stderr


def test_stand_in_checks_arguments_against_the_real_binding(fake: Any) -> None:
    """Without libcuda every call above also went through the real binding's argument
    conversion; this shows that check can fail."""
    _, drv = fake
    if not drv.typecheck:
        pytest.skip("libcuda is loadable here: the real binding must not see fake handles")
    with pytest.raises(AssertionError, match="cuStreamQuery"):
        drv.cuStreamQuery("not a stream")
    with pytest.raises(AssertionError, match="OverflowError"):
        drv.cuMemsetD32Async(0x1000, 1 << 32, 1, 0)


def test_host_function_is_refused_while_the_stream_captures(fake: Any) -> None:
    b, drv = fake
    s = b.stream_create(0, 0)
    b.graph_capture_begin(0, s)
    with pytest.raises(acc.DeviceError, match="captures a graph"):
        b.launch_host_func(0, lambda: None, s)
    assert "cuLaunchHostFunc" not in drv.names()
    b.launch_host_func(0, lambda: None, 0)   # another stream, not capturing: allowed
    b.graph_capture_end(0, s)
    b.launch_host_func(0, lambda: None, s)


@pytest.mark.parametrize(("call", "match"), [
    (lambda b, p, s: b.philox_fill(0, p + 4, 4, "float64", "uniform", 1, 0, (0.0, 1.0), s),
     "philox_fill pointer .* 8 bytes"),
    (lambda b, p, s: b.philox_fill(0, p + 1, 4, "float16", "normal", 1, 0, (0.0, 1.0), s),
     "philox_fill pointer .* 2 bytes"),
    (lambda b, p, s: b.philox_fill(0, p + 2, 4, "int32", "randint", 1, 0, (0, 9), s),
     "philox_fill pointer .* 4 bytes"),
    (lambda b, p, s: b.elementwise_add(0, p, p + 2, p, 4, "float32", s),
     "elementwise_add a .* 4 bytes"),
    (lambda b, p, s: b.elementwise_add(0, p, p, p + 4, 4, "complex128", s),
     "elementwise_add b .* 8 bytes"),
])
def test_misaligned_kernel_pointers_never_reach_the_gpu(fake: Any, call: Any,
                                                        match: str) -> None:
    b, drv = fake
    ptr = b.malloc(0, 4096)
    s = b.stream_create(0, 0)
    with pytest.raises(ValueError, match=match):
        call(b, ptr, s)
    assert "cuLaunchKernel" not in drv.names()
    b.elementwise_add(0, ptr + 4, ptr + 8, ptr + 12, 4, "complex64", s)   # 4-byte parts
    assert drv.names()[-1] == "cuLaunchKernel"


#: attribute keys the backend reads from get_device_properties()["attributes"]
_ATTRS_READ = [
    "multiprocessor_count", "compute_capability_major", "compute_capability_minor",
    "l2_cache_size", "clock_rate", "memory_clock_rate", "global_memory_bus_width", "warp_size",
    "max_threads_per_block", "max_threads_per_multiprocessor",
    "max_registers_per_multiprocessor", "max_shared_memory_per_block",
    "max_shared_memory_per_multiprocessor", "integrated", "multi_gpu_board", "pci_bus_id",
    "pci_device_id", "pci_domain_id", "virtual_memory_management_supported",
]


def test_attribute_names_read_exist_in_the_binding() -> None:
    real = pytest.importorskip("cuda.bindings.driver")
    members = real.CUdevice_attribute.__members__
    assert [k for k in _ATTRS_READ if f"CU_DEVICE_ATTRIBUTE_{k.upper()}" not in members] == []


def test_aliased_attributes_are_reported_under_every_name(fake: Any) -> None:
    b, drv = fake
    attrs = b.get_device_properties(0)["attributes"]
    # an alias of virtual_address_management_supported, which iterating the enum yields
    assert attrs["virtual_memory_management_supported"] == 8
    assert attrs["virtual_address_management_supported"] == 8
    assert [k for k in _ATTRS_READ if k not in attrs] == []
    assert b.vm_supported(0) is True
    asked = [a[0] for n, a in drv.calls if n == "cuDeviceGetAttribute"]
    assert len({int(m) for m in asked}) == len(asked)   # each value asked once


def test_unknown_stream_handle_at_an_unmapped_address_is_refused_before_the_driver() -> None:
    """On an H200, ``caching_allocator_alloc(512, "cuda:0", stream=0xDEAD0)`` crashed the
    interpreter: ``stream_is_valid`` handed the made-up handle to ``cuStreamGetCtx``, which
    dereferences it. The address check that now runs first needs no GPU."""
    import mmap

    from accelrt.backends.cuda._streams import address_is_mapped
    m = mmap.mmap(-1, mmap.PAGESIZE)
    view = ctypes.c_char.from_buffer(m)
    addr = ctypes.addressof(view)
    assert address_is_mapped(addr)
    del view
    m.close()                                   # unmapped now
    assert not address_is_mapped(addr)
    assert not address_is_mapped(0xDEAD0) and not address_is_mapped(-8)


def test_external_events_take_the_external_flags_inside_a_capture(
        fake: tuple[Any, FakeDriver]) -> None:
    # torch.cuda.Event(external=True): cudaEventRecordExternal / cudaEventWaitExternal while
    # the stream captures (the flags are invalid outside a capture)
    b, drv = fake
    o = _objs(b)

    def ev_calls() -> list[tuple[str, list[int]]]:
        names = ("cuEventRecord", "cuEventRecordWithFlags", "cuStreamWaitEvent")
        return [(n, [int(a) for a in args]) for n, args in drv.calls if n in names][-2:]

    b.event_record_external(0, o["ev2"], o["s"])
    b.stream_wait_event_external(0, o["s"], o["ev2"])
    assert ev_calls() == [
        ("cuEventRecord", [o["ev2"], o["s"]]), ("cuStreamWaitEvent", [o["s"], o["ev2"], 0])]
    b.graph_capture_begin(0, o["s"])
    b.event_record_external(0, o["ev2"], o["s"])
    b.stream_wait_event_external(0, o["s"], o["ev"])
    assert ev_calls() == [
        ("cuEventRecordWithFlags", [o["ev2"], o["s"], 1]),
        ("cuStreamWaitEvent", [o["s"], o["ev"], 1])]
    assert b.event_query(0, o["ev2"]) is True   # a record node: still usable outside
    b.event_record(0, o["ev"], o["s"])          # an internal record: not until the end
    with pytest.raises(acc.DeviceError, match="inside a graph capture"):
        b.event_query(0, o["ev"])
    b.graph_capture_end(0, o["s"])


@gpu
def test_gpu_native_handles_and_external_stream_round_trip(cuda: Any) -> None:
    # Stream.cuda_stream / native_handle are the CUstream, Event.cuda_event the CUevent;
    # ExternalStream wraps the same stream back without owning it (gpu_check: PTX_TESTS)
    s = acc.cuda.Stream()
    assert s.cuda_stream == s.native_handle == s.stream_id != 0
    e = acc.cuda.ExternalStream(s.cuda_stream)
    assert e == s and type(e) is acc.cuda.ExternalStream is acc.cuda.streams.ExternalStream
    ev = acc.cuda.Event()
    assert ev.cuda_event == 0
    ev.record(e)
    assert ev.cuda_event == ev.event_id != 0
    ev.synchronize()
    e.close()                      # not owned: the CUstream stays alive
    s.synchronize()
    assert s.query()


def test_closed_flag_checked_by_every_delegated_operation(fake: tuple[Any, FakeDriver]) -> None:
    """The backend delegates to its parts (memory, streams, graphs, ops) after checking the
    closed flag: no method is shadowed on the instance, and each operation raises."""
    from accelrt._backend import _OPEN_AFTER_CLOSE
    b, _drv = fake
    b.close()
    methods = {k for k in dir(type(b)) if callable(getattr(type(b), k, None))}
    assert not methods & set(vars(b))
    for attr in sorted(methods):
        member = getattr(type(b), attr)
        if attr.startswith("_") or attr in _OPEN_AFTER_CLOSE or isinstance(member, type) \
                or isinstance(vars(type(b)).get(attr), classmethod):
            continue
        with pytest.raises(ValueError, match=f"instance is closed .* so {attr}\\(\\) cannot"):
            getattr(b, attr)(*([0] * 12)[:inspect.unwrap(member).__code__.co_argcount - 1])
