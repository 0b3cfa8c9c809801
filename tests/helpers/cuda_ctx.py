"""The thread's current CUDA context after each public accelrt call that changes the current
device or works on another device, over the real ``cuda.bindings`` and the stand-in libcuda
(run by tests/backends/test_cuda_ctx_s41.py in a fresh interpreter:
``python -m helpers.cuda_ctx STUB_DIR``, printing one JSON report).

The rule checked is torch's, whose current device *is* the CUDA runtime's: after a call
returns, the context current in the thread is the primary context of accelrt's current cuda
device when that device has one (``torch.cuda.set_device``: ``c10::cuda::SetDevice``;
device guards: ``ExchangeDevice`` on entry, ``MaybeExchangeDevice`` on exit, which creates no
context on a device that has none and leaves the current one). :class:`helpers.cuda_calls.Driver`
knows the current context of each thread (``cuCtxSetCurrent``/``cuCtxGetCurrent``) and the
devices whose primary context is active. Three stand-in devices: device 0 keeps no context
for the first steps, device 2 none until ``set_device(2)``.
"""

from __future__ import annotations

import json
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

from helpers.cuda_calls import CTX, LOG, Driver, setup

C0, C1, C2 = CTX, CTX + 0x100, CTX + 0x200


class Checks:
    """The expectations and what the stand-in driver answered."""

    def __init__(self, drv: Driver) -> None:
        self.drv = drv
        self.failures: list[str] = []
        self.count = 0

    def ctx(self, step: str, expected: int) -> None:
        """The calling thread's current context is ``expected`` (0: none)."""
        self.count += 1
        got = self.drv.current
        if got != expected:
            self.failures.append(f"{step}: context {got:#x} current, expected {expected:#x}")

    def true(self, step: str, ok: bool) -> None:
        self.count += 1
        if not ok:
            self.failures.append(step)

    def retained(self) -> list[int]:
        """The devices whose primary context accelrt retained so far (in call order)."""
        return list(self.drv.retains)


def in_thread(fn: Callable[[], None]) -> None:
    """Run ``fn`` in a new thread (no context current there yet), re-raising its error."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            errors.append(exc)
    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    if t.is_alive():
        raise RuntimeError(f"{fn.__name__} did not finish")
    if errors:
        raise errors[0]


def no_context_yet(acc: Any, ck: Checks) -> None:
    """A fresh process: device 0 never used, as torch keeps it (MaybeSetDevice)."""
    c = acc.cuda
    ck.ctx("a thread that never touched CUDA", 0)
    c.set_device(0)     # torch: SetDevice(0) finds cudaGetDevice() == 0: nothing happens
    ck.ctx("set_device(0) on a fresh thread", 0)
    ck.true("set_device(0) on a fresh thread retains no context", ck.retained() == [])
    with c.device(1):   # torch: ExchangeDevice(1) creates device 1's context
        ck.ctx("inside device(1)", C1)
    # torch: MaybeExchangeDevice(0) leaves device 1's context current, creates none on 0
    ck.ctx("after device(1), device 0 without a context", C1)
    ck.true("device(1) created no context on device 0", 0 not in ck.retained())
    a = acc.empty(16, dtype="uint8", device="cuda:1")
    a.fill_(3)
    ck.ctx("an array on cuda:1, device 0 still without a context", C1)
    ck.true("an array on cuda:1 created no context on device 0", 0 not in ck.retained())
    ck.true("the current device is still 0", acc.current_device_index() == 0)
    # another library (torch, CuPy) made device 0's primary context: the exit of a device
    # block now makes it current (torch's hasPrimaryContext asks the driver too)
    ck.drv.active.add(0)
    with c.device(1):
        ck.ctx("inside device(1) again", C1)
    ck.ctx("after device(1), device 0's context made elsewhere", C0)
    ck.true("that context is retained, not made", ck.retained().count(0) == 1)


def switches(acc: Any, ck: Checks) -> None:
    """set_device, device contexts (nested, left by an exception), device_of, device_index."""
    c = acc.cuda
    c.set_device(2)                   # torch: SetDevice(2) creates device 2's context
    ck.ctx("set_device(2)", C2)
    ck.true("set_device(2) created device 2's context", 2 in ck.retained())
    c.set_device(0)
    ck.ctx("set_device(0)", C0)
    acc.set_device_index(1)
    ck.ctx("acc.set_device_index(1)", C1)
    acc.set_device_index("cuda:0")
    ck.ctx("acc.set_device_index('cuda:0')", C0)
    c.set_device_index(1)
    ck.ctx("acc.cuda.set_device_index(1)", C1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        acc.set_device_idx(0)
    ck.ctx("acc.set_device_idx(0)", C0)
    with c.device(1):
        ck.ctx("device(1)", C1)
        with c.device(0):
            ck.ctx("device(1) > device(0)", C0)
            with acc.device_index(2):
                ck.ctx("device(1) > device(0) > device_index(2)", C2)
            ck.ctx("back in device(0)", C0)
        ck.ctx("back in device(1)", C1)
    ck.ctx("after the nested blocks", C0)
    try:
        with c.device(1):
            raise KeyError("inside")
    except KeyError:
        pass
    ck.ctx("after device(1) left by an exception", C0)
    with c._DeviceGuard(1):
        ck.ctx("_DeviceGuard(1)", C1)
    ck.ctx("after _DeviceGuard(1)", C0)
    a1 = acc.empty(8, dtype="float32", device="cuda:1")
    ck.ctx("an array on cuda:1", C0)
    with c.device_of(a1):
        ck.ctx("device_of(an array on cuda:1)", C1)
    ck.ctx("after device_of", C0)
    with c.device(1):
        c.set_device(2)               # inside a block: the exit goes back to device 0
        ck.ctx("set_device(2) inside device(1)", C2)
    ck.ctx("after device(1) with a set_device inside", C0)


def streams(acc: Any, ck: Checks) -> None:
    """Stream contexts and set_stream on another device's stream."""
    c = acc.cuda
    s1 = acc.Stream("cuda:1")
    ck.ctx("a stream made on cuda:1", C0)
    with s1:
        ck.ctx("with a cuda:1 stream", C1)
    ck.ctx("after the cuda:1 stream block", C0)
    with c.stream(s1):
        ck.ctx("cuda.stream(cuda:1 stream)", C1)
    ck.ctx("after cuda.stream", C0)
    try:
        with c.StreamContext(s1):
            raise KeyError("inside")
    except KeyError:
        pass
    ck.ctx("after StreamContext left by an exception", C0)
    s0 = acc.current_stream("cuda:0")
    acc.set_stream(s1)
    ck.ctx("set_stream(cuda:1 stream)", C1)
    ck.true("set_stream made device 1 current", acc.current_device_index() == 1)
    acc.set_stream(s0)
    ck.ctx("set_stream(cuda:0 stream)", C0)


def other_device_ops(acc: Any, ck: Checks) -> None:
    """Work on cuda:1 from device 0 leaves device 0's context current."""
    c = acc.cuda
    s1 = acc.Stream("cuda:1")
    a = acc.empty(64, dtype="uint8", device="cuda:1")
    ck.ctx("empty on cuda:1", C0)
    a.fill_(1)
    ck.ctx("fill_ on cuda:1", C0)
    e = c.Event()
    e.record(s1)
    ck.ctx("Event recorded on a cuda:1 stream", C0)
    e.query()
    ck.ctx("Event.query of a cuda:1 event", C0)
    s1.synchronize()
    ck.ctx("a cuda:1 stream synchronized", C0)
    c.synchronize(1)
    ck.ctx("synchronize(1)", C0)
    a.record_stream(s1)
    del a
    c.empty_cache()
    ck.ctx("a cuda:1 array freed, the cache emptied", C0)
    c.set_device(1)
    acc.empty(64, dtype="uint8", device="cuda:0")
    ck.ctx("empty on cuda:0 from device 1", C1)
    c.set_device(0)
    ck.drv.tls.ctx = C1                   # another library switched this thread to device 1
    ck.true("accelrt's current device stays 0", acc.current_device_index() == 0)
    c.synchronize(0)                      # a raw operation on device 0 runs in its context
    ck.ctx("synchronize(0) after another library switched", C0)


def torch_allocator(acc: Any, ck: Checks) -> None:
    """accelrt's allocator serving PyTorch (:mod:`accelrt.interop.torch`): PyTorch's context
    stays current whatever accelrt's current device (its malloc runs under PyTorch's guard
    of the block's device, its free under none)."""
    from accelrt.interop import _shim
    s1 = acc.cuda.Stream(1)
    previous = _shim._target
    _shim._target = _shim._Target("cuda", None, True)
    try:
        ck.drv.tls.ctx = C1                 # PyTorch on device 1, accelrt's device is 0
        ptr = _shim._on_malloc(1 << 20, 1, int(s1.cuda_stream))
        ck.true("PyTorch's malloc served", bool(ptr))
        ck.ctx("after PyTorch's malloc on cuda:1", C1)
        ck.drv.tls.ctx = C2                 # PyTorch moved to device 2, frees the block
        _shim._on_free(ptr, 1 << 20, 1, int(s1.cuda_stream))
        ck.ctx("after PyTorch's free of a cuda:1 block", C2)
        b = acc.backends.get_backend("cuda")
        b.keeping_context(lambda: acc.cuda.synchronize(1))
        ck.ctx("keeping_context of a synchronize(1)", C2)
    finally:
        _shim._target = previous
    acc.cuda.set_device(1)
    acc.cuda.set_device(0)
    ck.ctx("set_device(0) after PyTorch's calls", C0)


def threads(acc: Any, ck: Checks) -> None:
    """Threads that never touched CUDA: each starts on device 0 with nothing current."""
    def array_on_1() -> None:
        ck.ctx("a new thread", 0)
        acc.empty(8, dtype="uint8", device="cuda:1")
        # device 0 has a context (made by the main thread): torch's guard makes it current
        ck.ctx("a new thread after an array on cuda:1", C0)

    def block_on_1() -> None:
        with acc.cuda.device(1):
            ck.ctx("a new thread in device(1)", C1)
        ck.ctx("a new thread after device(1)", C0)

    def set_1() -> None:
        acc.cuda.set_device(1)
        ck.ctx("a new thread after set_device(1)", C1)
    for fn in (array_on_1, block_on_1, set_1):
        in_thread(fn)
    ck.ctx("the main thread after the others", C0)


def main(stub_dir: str) -> None:
    routed = setup(stub_dir)
    if routed is None:
        return
    drv = routed[0]
    from accelrt.backends.cuda import _discovery
    _discovery.probe = lambda: _discovery.Probe(3, None, "nvml", 13000, (0, 1, 2))  # type: ignore[assignment]
    import accelrt as acc
    ck = Checks(drv)
    errors = []
    for steps in (no_context_yet, switches, streams, other_device_ops, torch_allocator,
                  threads):
        try:
            steps(acc, ck)
        except Exception as exc:  # noqa: BLE001 - reported
            errors.append(f"{steps.__name__}: {type(exc).__name__}: {exc}")
    print(json.dumps({"failures": ck.failures, "errors": errors, "checks": ck.count,
                      "problems": LOG.problems}))


if __name__ == "__main__":
    main(sys.argv[1])
