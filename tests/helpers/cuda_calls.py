"""Every CUDA driver, NVRTC, NVML, NVTX and NCCL call of accelrt, made against the real Python
packages without a GPU (run by tests/backends/test_cuda_calls_s40.py in a fresh interpreter:
``python -m helpers.cuda_calls STUB_DIR``, printing one JSON report).

* Driver and NVRTC: the real ``cuda.bindings`` modules over the stand-in libraries of
  :mod:`helpers.cuda_stub`. The Cython wrappers convert accelrt's arguments (a wrong kind or
  count is their TypeError/ValueError) and return their real result tuples; :class:`Binding`
  then puts the values a device would answer into those real result objects (a pointer into
  the ``CUdeviceptr`` the wrapper made, bytes into its ``CUuuid``...), so accelrt's code runs
  on results of the real arity and types. :class:`Driver` also holds CUDA's documented rules
  about contexts (which context each handle belongs to, which one is current in the calling
  thread) and the virtual-memory and IPC arguments, and reports a call that breaks one.
* NVML: the real ``pynvml`` wrappers, with its library replaced by functions answering
  ``NVML_SUCCESS``.
* NVTX: the real ``nvtx`` package (it needs no GPU).
* NCCL: the real ``nccl.core`` (nccl4py) down to its Cython bindings module, replaced by one
  that checks each call against the real function's signature.

The report lists every call (library, function, accelrt file, line, function) and every
problem; the test compares the calls with the call sites an AST scan of ``src/accelrt`` finds.
"""

from __future__ import annotations

import ctypes
import inspect
import itertools
import json
import sys
import threading
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: the accelrt package under test (the source tree, or the installed copy CI tests): set by
#: :func:`main` before any call
SRC = Path(__file__).resolve().parents[2] / "src" / "accelrt"

CTX = 0xC7000000          # device i's primary context: CTX + 0x100 * i
GRAN = 2 << 20
SPECIAL = (0, 1, 2)       # the NULL stream, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD


class Log:
    """The calls made and the problems found, with the accelrt code that made each call."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.problems: list[str] = []

    @staticmethod
    def site() -> tuple[str, int, str] | None:
        """``(file under the accelrt package, line, function)`` of the innermost accelrt
        frame."""
        f = sys._getframe(2)
        src = str(SRC)
        while f is not None:
            name = f.f_code.co_filename
            if name.startswith(src):
                return (str(Path(name).relative_to(SRC)), f.f_lineno, f.f_code.co_name)
            f = f.f_back
        return None

    def call(self, lib: str, name: str) -> tuple[str, int, str] | None:
        where = self.site()
        self.calls.append({"lib": lib, "name": name, "site": where})
        return where

    def problem(self, where: Any, text: str) -> None:
        self.problems.append(f"{where}: {text}")


LOG = Log()


# ====================================================================== driver and NVRTC

def put(real: Any, value: Any) -> Any:
    """``value`` in the type of the real wrapper's output ``real``."""
    if value is None or real is None:
        return real
    if type(value) is type(real):
        return value
    if type(real) in (int, float, bytes, bool):
        return value
    if isinstance(value, bytes) and hasattr(real, "getPtr"):   # CUuuid, CUipc*Handle
        ctypes.memmove(real.getPtr(), value, len(value))
        return real
    return type(real)(value)


class Binding:
    """A real bindings module over a stand-in library: each call goes to the real wrapper,
    which must accept accelrt's arguments and answer the stand-in's result; the outputs are
    then given the values :meth:`values` says (subclasses), in the wrapper's own types."""

    lib = ""
    ok: Any = 0

    def __init__(self, real: Any, stub: Any) -> None:
        self.real = real
        self.stub = stub
        self.fail: dict[str, list[int]] = {}   # name -> result codes of its next calls

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.real, name)
        if not name.startswith(("cu", "nvrtc")) or isinstance(attr, type) \
                or not callable(attr):
            return attr

        def call(*args: Any) -> Any:
            where = LOG.call(self.lib, name)
            codes = self.fail.get(name)
            code = codes.pop(0) if codes else 0
            self.stub.accelrt_stub_result(code)
            try:
                ret = attr(*args)
            except Exception as exc:   # the real wrapper refused accelrt's arguments
                LOG.problem(where, f"{name}{_shown(args)} refused by the real binding: "
                                   f"{type(exc).__name__}: {exc}")
                raise
            finally:
                self.stub.accelrt_stub_result(0)
            if name == "nvrtcGetErrorString":
                return ret
            if int(ret[0]) != code:
                LOG.problem(where, f"{name} answered {ret[0]!r} instead of the stand-in's {code}")
            if code:
                return ret
            try:
                self.check(name, args, where)
                vals = self.values(name, args, ret[1:])
            except Exception as exc:  # noqa: BLE001 - the model's own failure is a problem too
                LOG.problem(where, f"{name}: {type(exc).__name__}: {exc}")
                raise
            if vals is None:
                return ret
            if len(vals) != len(ret) - 1:
                LOG.problem(where, f"{name} returns {len(ret) - 1} values, the model "
                                   f"{len(vals)}")
            return (ret[0], *(put(r, v) for r, v in zip(ret[1:], vals)))
        return call

    def check(self, name: str, args: tuple[Any, ...], where: Any) -> None:
        """Report a call that breaks one of CUDA's documented rules."""

    def values(self, name: str, args: tuple[Any, ...], outs: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """The outputs a device would give (None: keep the wrapper's)."""
        return None


def _shown(args: tuple[Any, ...]) -> str:
    return "(" + ", ".join(f"{type(a).__name__}:{a!r}"[:60] for a in args) + ")"


#: the allocator's driver calls: made during a capture in relaxed capture mode only
_ALLOCATION_CALLS = frozenset({
    "cuMemAlloc", "cuMemFree", "cuMemHostAlloc", "cuMemFreeHost", "cuMemAddressReserve",
    "cuMemAddressFree", "cuMemCreate", "cuMemMap", "cuMemSetAccess", "cuMemUnmap",
    "cuMemRelease"})


class Driver(Binding):
    """``cuda.bindings.driver`` over the stand-in, with two devices and CUDA's context rules:
    each stream, event, module, function, graph and allocation belongs to the context that was
    current when it was made; an event is recorded only on a stream of its own context; work
    is queued on a stream of the current context (the NULL stream *is* the current
    context's); a kernel runs in the context its module was loaded in."""

    lib = "driver"

    def __init__(self, real: Any, stub: Any) -> None:
        super().__init__(real, stub)
        self.tls = threading.local()
        self.owner: dict[int, int] = {}          # handle or allocation base -> context
        self.sizes: dict[int, int] = {}          # allocation base -> size
        self.capturing: set[int] = set()
        self.begin_modes: list[str] = []         # each cuStreamBeginCapture's mode, by name
        self.handles = itertools.count(0x7F0000010000, 0x1000)
        self.reserve = itertools.count(0x7E0000000000, 1 << 32)
        self.memory = itertools.count(0x7D0000000000, 1 << 32)   # allocations, 4 GiB apart
        self.mapped: dict[int, int] = {}         # cuMemCreate handle -> device
        #: devices whose primary context is active (retained by accelrt or another library)
        self.active: set[int] = set()
        self.retains: list[int] = []             # the devices of each cuDevicePrimaryCtxRetain

    # ------------------------------------------------------------------ helpers
    @property
    def current(self) -> int:
        return getattr(self.tls, "ctx", 0)

    def _ctx_of_stream(self, s: Any, where: Any, what: str) -> int:
        s = int(s)
        cur = self.current
        if s in SPECIAL:
            if not cur:
                LOG.problem(where, f"{what}: the NULL stream with no context current")
            return cur
        ctx = self.owner.get(s)
        if ctx is None:
            LOG.problem(where, f"{what}: stream {s:#x} was never created")
            return cur
        return ctx

    def _need_current(self, name: str, where: Any) -> None:
        if not self.current:
            LOG.problem(where, f"{name} with no context current in the thread")

    def _queued(self, name: str, stream: Any, where: Any) -> int:
        """Work queued on ``stream``: it must belong to the current context."""
        self._need_current(name, where)
        ctx = self._ctx_of_stream(stream, where, name)
        if ctx != self.current:
            LOG.problem(where, f"{name} on stream {int(stream):#x} of context {ctx:#x} while "
                               f"{self.current:#x} is current")
        return ctx

    def _new(self, where: Any) -> int:
        h = next(self.handles)
        self.owner[h] = self.current
        return h

    def device_of(self, ctx: int) -> int:
        return (ctx - CTX) // 0x100

    # ------------------------------------------------------------------ the rules
    def check(self, name: str, args: tuple[Any, ...], where: Any) -> None:  # noqa: C901
        r = self.real
        if name in ("cuMemAlloc", "cuMemHostAlloc", "cuStreamCreateWithPriority",
                    "cuEventCreate", "cuModuleLoadData", "cuMemAddressReserve", "cuMemCreate",
                    "cuCtxSynchronize", "cuCtxGetStreamPriorityRange", "cuMemGetInfo",
                    "cuIpcOpenMemHandle", "cuIpcOpenEventHandle", "cuCtxEnablePeerAccess",
                    "cuProfilerStart", "cuProfilerStop", "cuPointerGetAttribute",
                    "cuMemGetAddressRange", "cuIpcGetMemHandle"):
            self._need_current(name, where)
        if name in ("cuEventRecord", "cuEventRecordWithFlags"):
            ev, s = int(args[0]), args[1]
            ectx = self.owner.get(ev)
            sctx = self._ctx_of_stream(s, where, name)
            if ectx is not None and ectx != sctx:
                LOG.problem(where, f"{name}: event of context {ectx:#x} recorded on a stream "
                                   f"of context {sctx:#x} (they must share one)")
            if name == "cuEventRecordWithFlags" and int(s) not in self.capturing:
                LOG.problem(where, "cuEventRecordWithFlags(EXTERNAL) outside a capture")
        elif name in ("cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync",
                      "cuMemcpyAsync", "cuMemsetD8Async", "cuMemsetD16Async",
                      "cuMemsetD32Async"):
            self._queued(name, args[3], where)
        elif name == "cuMemcpyPeerAsync":
            self._queued(name, args[5], where)
            for ctx in (int(args[1]), int(args[3])):
                if ctx not in {CTX, CTX + 0x100}:
                    LOG.problem(where, f"cuMemcpyPeerAsync: {ctx:#x} is not a context")
        elif name == "cuLaunchKernel":
            fctx = self.owner.get(int(args[0]))
            if fctx != self.current:
                LOG.problem(where, f"cuLaunchKernel of a function of context {fctx} while "
                                   f"{self.current:#x} is current")
            self._queued(name, args[8], where)
        elif name in ("cuLaunchHostFunc", "cuStreamBeginCapture"):
            self._queued(name, args[0], where)
            if name == "cuStreamBeginCapture":
                if int(args[0]) in SPECIAL:
                    LOG.problem(where, "cuStreamBeginCapture of the NULL stream")
                self.capturing.add(int(args[0]))
                self.begin_modes.append(r.CUstreamCaptureMode(int(args[1])).name)
        elif name == "cuStreamEndCapture":
            self.capturing.discard(int(args[0]))
        elif name == "cuGraphLaunch":
            ectx = self.owner.get(int(args[0]))
            sctx = self._queued(name, args[1], where)
            if ectx != sctx:
                LOG.problem(where, "cuGraphLaunch of a graph of another context")
        elif name in ("cuMemAllocFromPoolAsync", "cuMemFreeAsync"):
            sctx = self._queued(name, args[2] if name == "cuMemAllocFromPoolAsync" else args[1],
                                where)
            if name == "cuMemAllocFromPoolAsync":
                pdev = self.owner.get(int(args[1]))
                if pdev is not None and pdev != sctx:
                    LOG.problem(where, "cuMemAllocFromPoolAsync from the pool of another "
                                       "device than the stream's")
        elif name == "cuStreamWaitEvent":
            self._ctx_of_stream(args[0], where, name)
            if int(args[2]) not in (0, int(r.CUevent_wait_flags.CU_EVENT_WAIT_EXTERNAL)):
                LOG.problem(where, f"cuStreamWaitEvent flags {args[2]!r}")
        elif name == "cuEventCreate":
            fl = r.CUevent_flags
            flags = int(args[0])
            if flags & int(fl.CU_EVENT_INTERPROCESS) and not flags & int(fl.CU_EVENT_DISABLE_TIMING):
                LOG.problem(where, "an interprocess event must disable timing")
        elif name == "cuIpcOpenMemHandle":
            if int(args[1]) != int(r.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS):
                LOG.problem(where, f"cuIpcOpenMemHandle flags {args[1]!r}: only "
                                   "CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS is valid")
        elif name == "cuIpcGetMemHandle":
            base = int(args[0])
            if self.owner.get(base) is None or base not in self.sizes:
                LOG.problem(where, f"cuIpcGetMemHandle of {base:#x}, no cuMemAlloc base")
        elif name in ("cuMemCreate", "cuMemGetAllocationGranularity"):
            prop = args[1] if name == "cuMemCreate" else args[0]
            self._check_prop(prop, where, name)
            if name == "cuMemCreate" and (int(args[0]) % GRAN or int(args[2]) != 0):
                LOG.problem(where, f"cuMemCreate size {args[0]} / flags {args[2]}")
        elif name == "cuMemMap":
            ptr, size, offset, handle, flags = (int(a) for a in args)
            if ptr % GRAN or size % GRAN or offset or flags:
                LOG.problem(where, f"cuMemMap({ptr:#x}, {size}, {offset}, ., {flags}): "
                                   "aligned address and size, offset 0 and flags 0 required")
            if handle not in self.mapped:
                LOG.problem(where, "cuMemMap of a handle cuMemCreate did not make")
        elif name == "cuMemSetAccess":
            ptr, size, descs, count = args
            if int(count) != len(descs):
                LOG.problem(where, "cuMemSetAccess count != len(desc)")
            dev = self.device_of(self.current)
            for d in descs:
                if d.location.type != r.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE or \
                        int(d.location.id) != dev or \
                        d.flags != r.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
                    LOG.problem(where, f"cuMemSetAccess descriptor {d.location.type!r} "
                                       f"{d.location.id} {d.flags!r} (device {dev} current)")
        if name in _ALLOCATION_CALLS and self.capturing and self.mode_stack()[-1:] != ["out"]:
            LOG.problem(where, f"{name} while a graph captures, outside relaxed capture mode "
                               "(cuThreadExchangeStreamCaptureMode)")
        if name == "cuThreadExchangeStreamCaptureMode":
            stack = self.tls.__dict__.setdefault("modes", [])
            mode = args[0]
            if mode == r.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED and (
                    not stack or stack[-1] != "out"):
                stack.append("out")
            elif stack:
                stack.pop()

    def mode_stack(self) -> list[str]:
        """The calling thread's relaxed-mode exchanges not yet undone ("out" each)."""
        stack: list[str] = self.tls.__dict__.setdefault("modes", [])
        return stack

    def _check_prop(self, prop: Any, where: Any, name: str) -> None:
        r = self.real
        dev = self.device_of(self.current)
        if prop.type != r.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED or \
                prop.location.type != r.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE or \
                int(prop.location.id) != dev:
            LOG.problem(where, f"{name}: allocation properties {prop.type!r} "
                               f"{prop.location.type!r} {prop.location.id} on device {dev}")

    # ------------------------------------------------------------------ values
    def values(self, name: str, args: tuple[Any, ...],  # noqa: C901
               outs: tuple[Any, ...]) -> tuple[Any, ...] | None:
        r = self.real
        a = r.CUdevice_attribute
        if name == "cuCtxSetCurrent":
            self.tls.ctx = int(args[0])
            return ()
        if name == "cuCtxGetCurrent":
            return (self.current,)
        if name == "cuDeviceGet":
            return (int(args[0]),)
        if name == "cuDeviceGetCount":
            return (2,)
        if name == "cuDevicePrimaryCtxRetain":
            self.active.add(int(args[0]))
            self.retains.append(int(args[0]))
            return (CTX + 0x100 * int(args[0]),)
        if name == "cuDevicePrimaryCtxGetState":   # (flags, active)
            return (0, int(int(args[0]) in self.active))
        if name == "cuDeviceGetAttribute":
            attr = args[0]
            table = {a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9,
                     a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0,
                     a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: 132}
            return (table.get(attr, 1),)
        if name == "cuDeviceGetName":
            return (b"Stub GPU\0" + b" " * (int(args[0]) - 9),)
        if name == "cuDeviceTotalMem":
            return (80 << 30,)
        if name == "cuDeviceGetUuid":
            return (bytes(range(16)),)
        if name == "cuMemGetInfo":
            return (1 << 30, 2 << 30)
        if name == "cuCtxGetStreamPriorityRange":
            return (0, -5)
        if name == "cuMemGetAllocationGranularity":
            return (GRAN,)
        if name == "cuMemAddressReserve":
            return (next(self.reserve),)
        if name == "cuMemHostAlloc":
            return (next(self.memory),)
        if name in ("cuMemAlloc", "cuMemAllocFromPoolAsync", "cuIpcOpenMemHandle"):
            h = next(self.memory)
            self.owner[h] = self.current
            self.sizes[h] = int(args[0]) if name != "cuIpcOpenMemHandle" else 1 << 20
            return (h,)
        if name == "cuMemCreate":
            h = next(self.handles)
            self.mapped[h] = int(args[1].location.id)
            return (h,)
        if name in ("cuStreamCreateWithPriority", "cuEventCreate", "cuModuleLoadData",
                    "cuIpcOpenEventHandle", "cuStreamEndCapture", "cuGraphInstantiate"):
            return (self._new(None),)
        if name == "cuModuleGetFunction":
            h = next(self.handles)
            self.owner[h] = self.owner.get(int(args[0]), 0)
            return (h,)
        if name == "cuDeviceGetDefaultMemPool":
            h = next(self.handles)
            self.owner[h] = CTX + 0x100 * int(args[0])
            return (h,)
        if name == "cuStreamGetCtx":
            return (self.owner.get(int(args[0]), 0),)
        if name == "cuPointerGetAttribute":
            pa = r.CUpointer_attribute
            ptr = int(args[1])
            base = next((b for b, n in self.sizes.items() if b <= ptr < b + n), ptr)
            table = {pa.CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
                     int(r.CUmemorytype.CU_MEMORYTYPE_DEVICE),
                     pa.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
                     self.device_of(self.owner.get(base, CTX)),
                     pa.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: base,
                     pa.CU_POINTER_ATTRIBUTE_RANGE_SIZE: self.sizes.get(base, 1 << 20)}
            return (table[args[0]],)
        if name == "cuMemGetAddressRange":
            return (int(args[0]), 1 << 20)
        if name == "cuEventElapsedTime":
            return (1.5,)
        if name == "cuStreamIsCapturing":
            st = r.CUstreamCaptureStatus
            return (st.CU_STREAM_CAPTURE_STATUS_ACTIVE if int(args[0]) in self.capturing
                    else st.CU_STREAM_CAPTURE_STATUS_NONE,)
        if name in ("cuIpcGetEventHandle", "cuIpcGetMemHandle"):
            return (bytes(range(64)),)
        if name == "cuDeviceCanAccessPeer":
            return (1,)
        if name == "cuGraphExecGetId":
            return (7,)
        if name == "cuMemPoolGetAttribute":
            return (4096,)
        return None


class Nvrtc(Binding):
    """``cuda.bindings.nvrtc`` over the stand-in (NVRTC 13.0; a 16-byte image)."""

    lib = "nvrtc"

    def values(self, name: str, args: tuple[Any, ...],
               outs: tuple[Any, ...]) -> tuple[Any, ...] | None:
        if name == "nvrtcVersion":
            return (13, 0)
        if name in ("nvrtcGetCUBINSize", "nvrtcGetPTXSize", "nvrtcGetProgramLogSize"):
            return (16,)
        return None


# ====================================================================== NVML

class FakeNvmlLib:
    """``pynvml``'s C library: every function answers NVML_SUCCESS and records its call."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml

    def __getattr__(self, name: str) -> Callable[..., int]:
        nvml = self.nvml

        def fn(*args: Any) -> int:
            LOG.call("nvml-c", name)
            if name == "nvmlDeviceGetCount_v2":
                args[0]._obj.value = 2
            elif name == "nvmlSystemGetCudaDriverVersion":
                args[0]._obj.value = 13000
            elif name == "nvmlDeviceGetUUID":
                ctypes.memmove(args[1], b"GPU-00010203\0", 13)
            return int(nvml.NVML_SUCCESS)
        return fn


class Module:
    """A module whose attribute reads made from accelrt are recorded (library ``lib``)."""

    def __init__(self, real: Any, lib: str) -> None:
        self._real, self._lib = real, lib

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._real, name)
        if callable(attr) and not isinstance(attr, type):
            def call(*args: Any, **kwargs: Any) -> Any:
                LOG.call(self._lib, name)
                return attr(*args, **kwargs)
            return call
        LOG.call(self._lib, name)
        return attr


# ====================================================================== scenarios

def _expect(where: str, fn: Callable[[], Any], exc: type[BaseException] | None = None) -> Any:
    """Run one step; record a problem if it raises (or does not raise ``exc``)."""
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - compared below
        if exc is not None and isinstance(e, exc):
            return e
        LOG.problems.append(f"step {where}: {type(e).__name__}: {e}\n"
                            + "".join(traceback.format_exception(e)[-4:]))
        return None
    if exc is not None:
        LOG.problems.append(f"step {where}: {exc.__name__} expected, returned {out!r}")
    return out


def backend_steps(b: Any, drv: Driver, nvrtc: Nvrtc) -> None:  # noqa: C901
    """Every raw operation of the backend, on both devices, and the error answers accelrt
    reads (out of memory, not ready, peer access already enabled, a failed capture end...)."""
    from accelrt.backends.cuda import CudaError, _profiler
    res = drv.real.CUresult
    x = _expect
    x("init_device", lambda: b.init_device(0))
    # leaving a device block for device 1, which has no context yet (asks the driver)
    x("set_current_device, no context", lambda: b.set_current_device(1, False))
    x("set_current_device", lambda: b.set_current_device(0, True))
    drv.tls.ctx = CTX + 0x100      # PyTorch on device 1 calls accelrt's allocator for device 0
    x("keeping_context", lambda: b.keeping_context(lambda: b.malloc(0, 64)))
    if drv.current != CTX + 0x100:
        LOG.problems.append("keeping_context: the caller's context is current again")
    x("set_current_device back", lambda: b.set_current_device(0, True))
    x("properties", lambda: b.get_device_properties(1))
    x("capabilities", lambda: b.capabilities(0))
    x("memory_info", lambda: b.get_memory_info(1))
    x("can_access_peer", lambda: b.can_access_peer(0, 1))
    x("enable_peer_access", lambda: b.enable_peer_access(0, 1))
    drv.fail["cuCtxEnablePeerAccess"] = [int(res.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)]
    x("enable_peer_access again", lambda: b.enable_peer_access(0, 1))
    s0 = x("stream_create", lambda: b.stream_create(0, -9))
    s1 = x("stream_create 1", lambda: b.stream_create(1, 0))
    x("priority range", lambda: b.stream_priority_range(1))
    p0 = x("malloc", lambda: b.malloc(0, 1 << 20))
    p1 = x("malloc 1", lambda: b.malloc(1, 1 << 20))
    drv.fail["cuMemAlloc"] = [int(res.CUDA_ERROR_OUT_OF_MEMORY)]
    if x("malloc oom", lambda: b.malloc(0, 64)) != 0:
        LOG.problems.append("malloc: out of memory is 0")
    hp = x("host_malloc", lambda: b.host_malloc(4096))
    drv.fail["cuMemHostAlloc"] = [int(res.CUDA_ERROR_OUT_OF_MEMORY)]
    x("host_malloc oom", lambda: b.host_malloc(64))
    for kind, dst, src in (("h2d", p0, hp), ("d2h", hp, p0), ("d2d", p0 + 512, p0),
                           ("h2h", hp + 64, hp)):
        x(f"memcpy {kind}", lambda k=kind, d=dst, s=src: b.memcpy(0, d, s, 64, k, s0))
        x(f"memcpy {kind} null stream", lambda k=kind, d=dst, s=src: b.memcpy(0, d, s, 64, k, 0))
    x("memcpy to device 1", lambda: b.memcpy(1, p1, hp, 64, "h2d", s1))
    x("memcpy_peer", lambda: b.memcpy_peer(1, p1, 0, p0, 64, s0))
    nvrtc.fail["nvrtcCompileProgram"] = [6]   # the first kernel module falls back to the PTX
    x("memcpy_peer null stream", lambda: b.memcpy_peer(0, p0, 1, p1, 64, 0))
    x("memset", lambda: b.memset(1, p1, 7, 64, s1))
    for pat, ptr in ((b"a", p0), (b"ab", p0), (b"abcd", p0), (b"abcdefgh", p0),
                     (b"abcd", p0 + 1), (b"ab", p1 + 1)):
        dev, st = (1, s1) if ptr in (p1, p1 + 1) else (0, s0)
        x(f"fill {pat!r}", lambda p=pat, q=ptr, d=dev, s=st: b.fill(d, q, p, 8, s))
    foreign = p0 + (2 << 20)
    drv.sizes[foreign] = 1 << 20
    drv.owner[foreign] = CTX
    x("foreign range", lambda: b.memset(0, foreign, 1, 64, 0))
    drv.fail["cuPointerGetAttribute"] = [int(res.CUDA_ERROR_INVALID_VALUE)]
    x("unknown range", lambda: b.memset(0, foreign + (8 << 20), 1, 64, 0), ValueError)
    x("pointer_device", lambda: b.pointer_device(p1))
    drv.fail["cuPointerGetAttribute"] = [int(res.CUDA_ERROR_INVALID_VALUE)]
    x("pointer_device of host memory", lambda: b.pointer_device(hp))
    x("philox", lambda: b.philox_fill(1, p1, 64, "float32", "uniform", 1, 0, (0.0, 1.0), s1))
    x("philox null stream", lambda: b.philox_fill(0, p0, 64, "int64", "randint", 1, 0, (0, 9), 0))
    x("add", lambda: b.elementwise_add(0, p0, p0, p0 + 512, 64, "float64", s0))
    # events: create, record, wait across devices, query (done / not ready), timing, IPC
    e0 = x("event_create", lambda: b.event_create(0, True, False, False))
    e0b = x("event_create timing", lambda: b.event_create(0, True, True, False))
    e1 = x("event_create 1", lambda: b.event_create(1, False, False, False))
    x("event_record", lambda: b.event_record(0, e0, s0))
    x("event_record null stream", lambda: b.event_record(1, e1, 0))
    x("event_record 1", lambda: b.event_record(1, e1, s1))
    x("wait across devices", lambda: b.stream_wait_event(0, s0, e1))
    x("event_query", lambda: b.event_query(1, e1))
    drv.fail["cuEventQuery"] = [int(res.CUDA_ERROR_NOT_READY)]
    if x("event_query not ready", lambda: b.event_query(0, e0)) is not False:
        LOG.problems.append("event_query: NOT_READY is False")
    x("event_synchronize", lambda: b.event_synchronize(0, e0))
    x("elapsed", lambda: b.event_elapsed_time(0, e0, e0b))
    ipc = x("ipc event", lambda: b.event_create(1, False, False, True))
    h = x("ipc event handle", lambda: b.event_ipc_handle(1, ipc))
    x("ipc event open", lambda: b.event_from_ipc_handle(0, h))
    x("stream_query", lambda: b.stream_query(1, s1))
    drv.fail["cuStreamQuery"] = [int(res.CUDA_ERROR_NOT_READY)]
    x("stream_query not ready", lambda: b.stream_query(0, s0))
    x("stream_synchronize", lambda: b.stream_synchronize(0, s0))
    x("synchronize", lambda: b.synchronize(1))
    x("host func", lambda: b.launch_host_func(1, lambda: None, s1))
    # foreign streams: a real heap address the driver is asked about
    buf = ctypes.create_string_buffer(1 << 17)
    fs = (ctypes.addressof(buf) + 0xFFFF) & ~0xFFFF
    drv.owner[fs] = CTX + 0x100
    if not x("stream_is_valid", lambda: b.stream_is_valid(1, fs)):
        LOG.problems.append("stream_is_valid: a stream of the device")
    x("stream_is_valid other device", lambda: b.stream_is_valid(0, fs + 0x10000))
    # IPC memory
    mh = x("ipc_mem_handle", lambda: b.ipc_mem_handle(1, p1))
    opened = x("ipc_open", lambda: b.ipc_open_mem_handle(0, mh))
    x("ipc_close", lambda: b.ipc_close_mem_handle(0, opened[0]))
    drv.fail["cuMemGetAddressRange"] = [int(res.CUDA_ERROR_INVALID_VALUE)]
    x("ipc_open failing", lambda: b.ipc_open_mem_handle(0, mh), CudaError)
    # stream-ordered pool
    q = x("pool alloc", lambda: b.mempool_alloc_async(1, 4096, s1))
    x("pool free", lambda: b.mempool_free_async(1, q, s1))
    drv.fail["cuMemAllocFromPoolAsync"] = [int(res.CUDA_ERROR_OUT_OF_MEMORY)]
    x("pool oom", lambda: b.mempool_alloc_async(0, 64, 0))
    x("pool trim", lambda: b.mempool_trim_to(0, 0))
    x("pool get", lambda: b.mempool_get_attribute(1, "used_mem_high"))
    x("pool set", lambda: b.mempool_set_attribute(1, "release_threshold", 2**64 - 1))
    x("pool reset", lambda: b.mempool_set_attribute(0, "reserved_mem_high", 0))
    # virtual memory (expandable segments)
    gran = x("granularity", lambda: b.vm_granularity(1))
    base = x("reserve", lambda: b.vm_reserve(1, 4 * gran))
    x("map", lambda: b.vm_map(1, base, gran))
    x("map 2", lambda: b.vm_map(1, base + gran, gran))
    x("fill mapped", lambda: b.memset(1, base, 0, 2 * gran, s1))
    drv.fail["cuMemCreate"] = [int(res.CUDA_ERROR_OUT_OF_MEMORY)]
    if x("map oom", lambda: b.vm_map(1, base + 2 * gran, gran)) is not False:
        LOG.problems.append("vm_map: out of memory is False")
    drv.fail["cuMemMap"] = [int(res.CUDA_ERROR_INVALID_VALUE)]
    x("map failing", lambda: b.vm_map(1, base + 2 * gran, gran), CudaError)
    drv.fail["cuMemSetAccess"] = [int(res.CUDA_ERROR_INVALID_VALUE)]
    x("access failing", lambda: b.vm_map(1, base + 2 * gran, gran), CudaError)
    x("ipc of expandable", lambda: b.ipc_mem_handle(1, base), ValueError)
    x("unmap", lambda: b.vm_unmap(1, base, 2 * gran))
    x("release", lambda: b.vm_release(1, base, 4 * gran))
    drv.fail["cuMemAddressReserve"] = [int(res.CUDA_ERROR_OUT_OF_MEMORY)]
    x("reserve refused", lambda: b.vm_reserve(0, gran), ValueError)
    # graphs: capture (allocations during it relaxed), instantiate, replay, dot, destroy
    x("not capturing", lambda: b.stream_is_capturing(1, s1))
    x("capture", lambda: b.graph_capture_begin(1, s1))
    x("capturing", lambda: b.stream_is_capturing(1, s1))
    x("malloc during capture", lambda: b.malloc(1, 4096))
    x("record external", lambda: b.event_record_external(1, e1, s1))
    x("wait external", lambda: b.stream_wait_event_external(1, s1, e1))
    x("query during capture", lambda: b.event_query(0, e0))
    g = x("capture end", lambda: b.graph_capture_end(1, s1))
    x("record external outside", lambda: b.event_record_external(0, e0, s0))
    x("wait external outside", lambda: b.stream_wait_event_external(0, s0, e0))
    x("instantiate", lambda: b.graph_instantiate(1, g))
    x("instantiate again", lambda: b.graph_instantiate(1, g))
    x("replay", lambda: b.graph_replay(1, g, s1))
    x("dot", lambda: b.graph_debug_dot(1, g, "/dev/null", True))
    x("nodes", lambda: b.graph_node_count(1, g))
    x("native", lambda: b.graph_native_handles(1, g))
    x("destroy graph", lambda: b.graph_destroy(1, g))
    x("capture 2", lambda: b.graph_capture_begin(0, s0))
    g2 = x("capture end 2", lambda: b.graph_capture_end(0, s0))
    x("replay uninstantiated", lambda: b.graph_replay(0, g2, 0))
    drv.fail["cuGraphExecGetId"] = [int(res.CUDA_ERROR_INVALID_VALUE)]
    x("exec id failing", lambda: b.graph_instantiate(0, g2), CudaError)
    x("destroy graph 2", lambda: b.graph_destroy(0, g2))
    capture_mode_steps(b, drv, s0)
    x("profiler", lambda: (_profiler.start(b, 1), _profiler.stop(b, 1)))
    x("arch_list", lambda: b.arch_list())
    # frees
    x("event_destroy", lambda: b.event_destroy(0, e0))
    x("free", lambda: b.free(1, p1))
    x("host_free", lambda: b.host_free(hp))
    x("stream_destroy", lambda: b.stream_destroy(1, s1))
    x("close", lambda: b.close())


def capture_mode_steps(b: Any, drv: Driver, s0: int) -> None:
    """Captures in each ``capture_error_mode`` (s41): the mode reaches cuStreamBeginCapture,
    a bad one is refused before it, an allocation during the capture runs in relaxed mode and
    restores the thread's mode also when the driver call fails, and a synchronize of the
    device is refused by the capture's mode and thread (the conformance check)."""
    from accelrt.backends.cuda import CudaBackend, CudaError
    from accelrt.testing import backend_conformance as conf
    res = drv.real.CUresult
    x = _expect
    x("capture mode bad", lambda: b.graph_capture_begin_mode(0, s0, "strict"), ValueError)
    for mode in ("global", "thread_local", "relaxed"):
        x(f"capture {mode}", lambda m=mode: b.graph_capture_begin_mode(0, s0, m))
        drv.fail["cuMemAlloc"] = [int(res.CUDA_ERROR_OUT_OF_MEMORY)]
        x(f"malloc failing in {mode} capture", lambda: b.malloc(0, 4096))
        if drv.mode_stack():
            LOG.problem(f"step {mode}", "the capture mode was not restored after a failed "
                                        "cuMemAlloc")
        drv.fail["cuMemMap"] = [int(res.CUDA_ERROR_INVALID_VALUE)]
        base = x(f"reserve in {mode} capture", lambda: b.vm_reserve(0, GRAN))
        x(f"map failing in {mode} capture", lambda: b.vm_map(0, base, GRAN), CudaError)
        x(f"release in {mode} capture", lambda: b.vm_release(0, base, GRAN))
        if drv.mode_stack():
            LOG.problem(f"step {mode}", "the capture mode was not restored after a failed "
                                        "cuMemMap")
        x(f"capture end {mode}",
          lambda: b.graph_destroy(0, b.graph_capture_end(0, s0)))
    x("conformance graph_capture_modes",
      lambda: conf.run_check("graph_capture_modes", conf.Target(CudaBackend)))


def discovery_steps(drv: Driver, nvml: Any) -> None:
    """The driver's and NVML's discovery paths."""
    from accelrt.backends.cuda import _discovery
    res = drv.real.CUresult
    x = _expect
    x("probe driver", lambda: _discovery._probe_driver(drv, ""))
    drv.fail["cuInit"] = [int(res.CUDA_ERROR_NO_DEVICE)]
    x("probe driver no device", lambda: _discovery._probe_driver(drv, ""))
    drv.fail["cuInit"] = [int(res.CUDA_ERROR_UNKNOWN)]
    x("probe driver failing", lambda: _discovery._probe_driver(drv, ""))
    x("probe nvml", lambda: _discovery._probe_nvml(drv, nvml))
    import os
    os.environ["CUDA_VISIBLE_DEVICES"] = "GPU-0001"
    try:
        x("probe nvml uuids", lambda: _discovery._probe_nvml(drv, nvml))
    finally:
        del os.environ["CUDA_VISIBLE_DEVICES"]
    from accelrt.backends.cuda import _cu
    x("error text", lambda: _cu.error_text(2))


def nvml_steps() -> None:
    from accelrt.backends.cuda import _nvml
    x = _expect
    h = x("nvml handle", lambda: _nvml.handle(0))
    x("nvml handle by uuid", lambda: _nvml_by_uuid(_nvml))
    for fn in (_nvml.utilization, _nvml.memory_usage, _nvml.memory_used, _nvml.temperature,
               _nvml.power_draw, _nvml.clock_rate):
        x(f"nvml {fn.__name__}", lambda f=fn: f(h))
    x("nvml processes", lambda: _nvml.list_gpu_processes(0, h))


def _nvml_by_uuid(_nvml: Any) -> Any:
    from accelrt.backends.cuda import _discovery
    probe = _discovery.probe
    _discovery.probe = lambda: _discovery.Probe(1, None, "driver")   # type: ignore[assignment]
    try:
        return _nvml.handle(0, "00010203-0405-0607-0809-0a0b0c0d0e0f")
    finally:
        _discovery.probe = probe   # type: ignore[assignment]


def nvtx_steps() -> None:
    from accelrt.backends.cuda import _nvtx
    x = _expect
    x("nvtx push", lambda: _nvtx.range_push("a"))
    x("nvtx pop", lambda: _nvtx.range_pop())
    rid = x("nvtx start", lambda: _nvtx.range_start("b"))
    x("nvtx end", lambda: _nvtx.range_end(rid))
    x("nvtx mark", lambda: _nvtx.mark("c"))

    def ranged() -> None:
        with _nvtx.range("d {}", 1):
            pass
    x("nvtx range", ranged)
    # with a tool attached start_range returns (range id, domain handle), which range_end
    # hands back to nvtx
    import importlib
    handle = importlib.import_module("nvtx._lib.lib").DomainHandle("accelrt-check")
    with _nvtx._ranges_lock:
        _nvtx._ranges[-1] = (12345, handle)
    x("nvtx end of a handle", lambda: _nvtx.range_end(-1))


def runtime_steps(acc: Any, drv: Driver) -> None:
    """What changed since the GPU run, through the public API on two devices: the caching
    allocator (with a use on another device's stream), its out-of-memory path and observer,
    expandable segments, a graph capture with its private pool, interprocess sharing of an
    array and an event."""
    import pickle

    from accelrt.multiprocessing import reductions
    res = drv.real.CUresult
    x = _expect
    c = acc.cuda
    s1 = x("stream on cuda:1", lambda: acc.Stream("cuda:1"))

    def cross_device() -> None:
        a = acc.empty(1 << 20, dtype="uint8", device="cuda:0")
        a.record_stream(s1)              # a use on a stream of another device
        del a
        acc.empty(1 << 20, dtype="uint8", device="cuda:0")   # the free's event is asked
        c.synchronize(0)
        c.empty_cache()
    x("record_stream of another device", cross_device)

    seen: list[Any] = []

    def oom() -> None:
        c.memory._record_memory_history("all") if hasattr(c.memory, "_record_memory_history") \
            else None
        c.memory._set_allocator_settings("expandable_segments:False")
        acc.memory.attach_out_of_memory_observer(lambda *a: seen.append(a)) \
            if hasattr(acc.memory, "attach_out_of_memory_observer") else None
        drv.fail["cuMemAlloc"] = [int(res.CUDA_ERROR_OUT_OF_MEMORY)] * 2
        acc.empty(3 << 20, dtype="uint8", device="cuda:1")
    x("out of memory", oom, acc.OutOfMemoryError)

    def expandable() -> None:
        c.memory._set_allocator_settings("expandable_segments:True")
        try:
            a = acc.empty(5 << 20, dtype="uint8", device="cuda:1")
            b = acc.empty(7 << 20, dtype="uint8", device="cuda:1")
            a.fill_(3)
            del a, b
            c.empty_cache()
        finally:
            c.memory._set_allocator_settings("expandable_segments:False")
    x("expandable segments", expandable)

    def graph() -> None:
        s = acc.Stream("cuda:0")
        with acc.StreamContext(s) if hasattr(acc, "StreamContext") else s:
            g = c.CUDAGraph()
            a = acc.empty(1 << 10, dtype="float32", device="cuda:0")
            with c.graph(g, stream=s):
                b = acc.empty(1 << 10, dtype="float32", device="cuda:0")
                b.fill_(1.0)
            g.replay()
            g.reset()
            del a, b
    x("graph capture", graph)

    def ipc() -> None:
        a = acc.empty(1 << 20, dtype="uint8", device="cuda:1")
        fn, args = reductions.reduce_array(a)
        ev = c.Event(interprocess=True)
        ev.record()
        return fn, args, pickle.dumps(ev.ipc_handle())
    x("interprocess", ipc)


def selftest(drv: Driver) -> None:
    """The context rules report a call that breaks them (problems found here are expected:
    the test checks that they are)."""
    r = drv.real
    before = len(LOG.problems)
    drv.tls.ctx = CTX
    ev = int(drv.cuEventCreate(0)[1])
    drv.tls.ctx = CTX + 0x100
    s = int(drv.cuStreamCreateWithPriority(1, 0)[1])
    drv.cuEventRecord(ev, s)                                  # another context's stream
    drv.tls.ctx = CTX
    drv.cuMemsetD8Async(0x7F0000100000, 0, 1, s)              # not the current context's
    drv.cuIpcOpenMemHandle(r.CUipcMemHandle(), 0)             # flags 0
    drv.capturing.add(s)
    drv.tls.ctx = CTX + 0x100
    drv.cuMemAlloc(4096)                                      # during a capture, not relaxed
    drv.capturing.discard(s)
    drv.tls.ctx = CTX
    found = LOG.problems[before:]
    del LOG.problems[before:]
    print(json.dumps({"selftest": found}), file=sys.stderr)
    LOG.calls.append({"lib": "selftest", "name": json.dumps(found), "site": None})


# ====================================================================== NCCL

class NcclBindings:
    """nccl4py's Cython bindings module, checked: each call must bind to the real function's
    signature and give its C integer parameters integers; answers are a device's."""

    def __init__(self, real: Any, nranks: int, rank: int, drv: Driver) -> None:
        self.real, self.nranks, self.rank, self.drv = real, nranks, rank, drv
        #: the CUDA device the communicator being made must be on: NCCL makes it on the
        #: device whose context is current in the calling thread (cudaGetDevice)
        self.device = 0
        self.pending = 0
        self.error: Any = None   # the next comm_get_async_error's answer, when set

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.real, name)
        if isinstance(attr, type) or not callable(attr) or not name[:1].islower():
            return attr
        sig = inspect.signature(attr)
        doc = (attr.__doc__ or "").split("\n", 1)[0]
        ints = {p.split()[-1] for p in doc[doc.find("(") + 1:doc.rfind(")")].split(",")
                if p.strip().split()[:1] and p.strip().split()[0] in
                ("int", "intptr_t", "size_t", "int64_t", "uint64_t", "unsigned")}

        def call(*args: Any, **kwargs: Any) -> Any:
            where = LOG.call("nccl-bindings", name)
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as exc:
                LOG.problem(where, f"nccl bindings {name}{_shown(args)}: {exc}")
                raise
            for p, v in bound.arguments.items():
                if p in ints and (isinstance(v, bool) or not isinstance(v, int)):
                    LOG.problem(where, f"nccl bindings {name}: {p}={v!r} is no C integer")
            return self._answer(name, bound.arguments)
        return call

    def _answer(self, name: str, args: dict[str, Any]) -> Any:
        r = self.real
        if name in ("comm_init_rank_scalable", "comm_init_rank_config", "comm_init_rank"):
            cur = self.drv.current
            if cur != CTX + 0x100 * self.device:
                LOG.problem(LOG.site(), f"NCCL {name} with context {cur:#x} current: the "
                                        f"communicator of cuda:{self.device} would be made on "
                                        "another GPU")
        if name in ("comm_init_rank_scalable", "comm_init_rank_config", "comm_split",
                    "comm_init_rank"):
            self.pending = 2   # a non-blocking communicator: in progress twice, then ready
            return r.Comm(0x5000)
        if name == "comm_get_async_error":
            if self.error is not None:
                err, self.error = self.error, None
                return err
            if self.pending:
                self.pending -= 1
                return r.Result.InProgress
            return r.Result.Success
        if name == "comm_count":
            return self.nranks
        if name == "comm_user_rank":
            return self.rank
        if name == "comm_cu_device":
            return 0
        if name == "get_unique_id":
            return r.UniqueId()
        if name == "get_error_string":
            return "stub"
        if name == "red_op_create_pre_mul_sum":
            return 64
        return None


def nccl_steps(acc: Any, drv: Driver) -> None:
    """Every NcclEngine operation, through the real nccl4py down to its bindings module."""
    try:
        import nccl.core as core
        import nccl.core.communicator as communicator
    except Exception as exc:  # noqa: BLE001 - reported as the reason the part did not run
        LOG.calls.append({"lib": "nccl-missing", "name": f"{type(exc).__name__}: {exc}",
                          "site": None})
        return
    import numpy as np

    from accelrt.distributed import _nccl
    from accelrt.distributed._engine import Buf, EngineContext, PremulSum, ReduceOp
    fake = NcclBindings(communicator._nccl_bindings, 2, 0, drv)
    mods = [m for n, m in sys.modules.items() if n.startswith("nccl.core")
            and hasattr(m, "_nccl_bindings")]
    for m in mods:
        m._nccl_bindings = fake    # type: ignore[attr-defined]
    real_core = _nccl._core
    _nccl._core = lambda: Module(core, "nccl")   # type: ignore[assignment]
    x = _expect
    try:
        ctx = EngineContext(0, 2, [0, 1], "cuda", 0, 5.0, None)
        ctx.options["unique_id"] = core.UniqueId.from_bytes(bytes(core.get_unique_id()))
        eng = x("nccl create", lambda: _nccl.NcclEngine.create(ctx))
        if eng is None:
            return
        # cuda.core's Device(0) would ask the stand-in driver for its (zero) device count
        eng.comm._device = types.SimpleNamespace(device_id=0)
        eng.comm = Module(eng.comm, "nccl-comm")
        s = acc.Stream("cuda:0")
        f32, i8 = np.dtype("float32"), np.dtype("bool")
        b = Buf(0x7F0000100000, 64, f32, 0)
        r = Buf(0x7F0000200000, 128, f32, 0)
        for op in (ReduceOp.SUM, ReduceOp.AVG, PremulSum(0.5)):
            x(f"nccl all_reduce {op}", lambda o=op: eng.all_reduce(None, b, o, s))
        x("nccl all_reduce bool", lambda: eng.all_reduce(Buf(r.ptr, 64, i8, 0),
                                                         Buf(b.ptr, 64, i8, 0), ReduceOp.SUM, s))
        x("nccl all_reduce complex", lambda: eng.all_reduce(
            None, Buf(b.ptr, 8, np.dtype("complex64"), 0), ReduceOp.SUM, s))
        x("nccl broadcast", lambda: eng.broadcast(b, 0, s))
        x("nccl reduce", lambda: eng.reduce(b, ReduceOp.MAX, 1, s))
        x("nccl all_gather", lambda: eng.all_gather(b, r, s))
        x("nccl reduce_scatter", lambda: eng.reduce_scatter(r, b, PremulSum(2.0), s))
        x("nccl gather", lambda: eng.gather(b, r, 0, s))
        x("nccl gather non-root", lambda: eng.gather(b, None, 1, None))
        x("nccl scatter", lambda: eng.scatter(r, b, 0, s))
        x("nccl scatter non-root", lambda: eng.scatter(None, b, 1, s))
        x("nccl all_to_all", lambda: eng.all_to_all(r, r, [32, 32], [64, 0], s))
        x("nccl send", lambda: eng.send_on(b, 1, s))
        x("nccl recv", lambda: eng.recv_on(b, 1, s))
        x("nccl group", lambda: [eng.p2p_group().__enter__(), eng.p2p_group_settle(1.0, "g")])
        x("nccl async_error", lambda: eng.async_error())
        fake.error = fake.real.Result.InternalError
        if not isinstance(x("nccl async_error failed", lambda: eng.async_error()), RuntimeError):
            LOG.problems.append("nccl async_error: an NCCL error is a RuntimeError")
        fake.error = fake.real.Result.InternalError
        x("nccl settle failed", lambda: eng.broadcast(b, 0, s), RuntimeError)
        x("nccl split", lambda: eng.split(3, 0, None))
        x("nccl split none", lambda: eng.split(None, 0, None))
        x("nccl abort", lambda: eng.abort())
        x("nccl destroy", lambda: eng.destroy())

        class _Mpi:   # rank 0 of an MPI world makes the unique id and broadcasts it
            def bcast(self, obj: Any, root: int = 0) -> Any:
                return obj
        # a rank bound to cuda:1 while this thread last used cuda:0 (and the other way)
        for dev in (1, 0):
            acc.cuda.synchronize(1 - dev)   # the other device's context is current
            fake.device = dev
            ctx2 = EngineContext(0, 2, [0, 1], "cuda", dev, 5.0, _Mpi())
            x(f"nccl create through MPI on cuda:{dev}", lambda c=ctx2: _nccl.NcclEngine.create(c))
    finally:
        _nccl._core = real_core   # type: ignore[assignment]


# ====================================================================== main

def setup(stub_dir: str) -> tuple[Driver, Nvrtc, Any] | None:
    """Route accelrt's driver, NVRTC, NVML and NVTX calls to the checked stand-ins (before
    accelrt's first call): ``(driver, nvrtc, nvml)``, or None (after printing the skip
    report) when ``cuda.bindings`` did not load the stand-in libcuda."""
    global SRC
    import importlib.util
    import os
    spec = importlib.util.find_spec("accelrt")
    assert spec is not None and spec.origin is not None
    SRC = Path(spec.origin).resolve().parent
    from helpers import cuda_stub
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    os.environ["ACCELRT_ACCELERATOR"] = "cuda"
    libs = {k: cuda_stub.load(Path(stub_dir) / n)
            for k, n in (("cuda", "libcuda.so.1"), ("nvrtc", "libnvrtc.so.13"))}
    from cuda.bindings import driver as real_driver
    from cuda.bindings import nvrtc as real_nvrtc
    # the calls reach the stand-in: cuInit answers what it is told to
    libs["cuda"].accelrt_stub_result(999)
    routed = int(real_driver.cuInit(0)[0]) == 999
    libs["cuda"].accelrt_stub_result(0)
    if not routed:
        print(json.dumps({"skip": "cuda.bindings did not load the stand-in libcuda"}))
        return None
    drv = Driver(real_driver, libs["cuda"])
    nvrtc = Nvrtc(real_nvrtc, libs["nvrtc"])
    import pynvml
    pynvml.nvmlLib = FakeNvmlLib(pynvml)
    pynvml._nvmlGetFunctionPointer_cache = {}
    nvml = Module(pynvml, "nvml")

    from accelrt.backends.cuda import _cu, _nvtx
    _cu._driver = drv                                   # type: ignore[assignment]
    _cu.load_nvrtc = lambda: nvrtc                      # type: ignore[assignment]
    _cu.load_nvml = lambda: nvml                        # type: ignore[assignment]
    import nvtx as real_nvtx
    _nvtx._lib = lambda: Module(real_nvtx, "nvtx")      # type: ignore[assignment]
    return drv, nvrtc, nvml


def main(stub_dir: str) -> None:
    routed = setup(stub_dir)
    if routed is None:
        return
    drv, nvrtc, nvml = routed
    from accelrt.backends.cuda import _cu, _discovery
    discovery_steps(drv, nvml)
    _discovery.probe = lambda: _discovery.Probe(2, None, "nvml", 13000, (0, 1))   # type: ignore[assignment]
    from accelrt.backends.cuda import CudaBackend
    backend_steps(CudaBackend(), drv, nvrtc)
    nvrtc.fail["nvrtcCompileProgram"] = [6]   # NVRTC_ERROR_COMPILATION: the log is read
    from accelrt.backends.cuda import _kernels
    _expect("nvrtc failing", lambda: _kernels.compile_source(b"x", "x.cu", "sm_90"),
            _cu.CudaError)
    _expect("nvrtc ptx", lambda: _kernels.compile_source(b"x", "x.cu", "compute_70"))
    nvml_steps()
    nvtx_steps()
    import accelrt as acc
    runtime_steps(acc, drv)
    nccl_steps(acc, drv)
    selftest(drv)
    print(json.dumps({"calls": LOG.calls, "problems": LOG.problems,
                      "capture_modes": drv.begin_modes}))


if __name__ == "__main__":
    main(sys.argv[1])
