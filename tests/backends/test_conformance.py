"""The conformance suite of the raw backend contract (``accelrt.testing.backend_conformance``)
on every (backend, options) pair present: cpu with synchronous and asynchronous streams (and
shared memory, for interprocess memory), the simulated backend (work completing at once, or
only when a synchronization waits for it), OpenCL in SVM and buffer modes
(PoCL in CI) and CUDA where a GPU is; a backend that is not here is skipped with the reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from accelrt import backends
from accelrt.backends import Backend
from accelrt.testing.backend_conformance import CHECKS, Target, run_check


def _cpu(**kw: Any) -> Callable[[], Backend]:
    from accelrt.backends.cpu import CpuBackend
    return lambda: CpuBackend(num_devices=2, memory_limit="256MiB", **kw)


def _simulated(auto_complete: bool) -> Callable[[], Backend]:
    from accelrt.testing import SimulatedBackend
    return lambda: SimulatedBackend(capacity=1 << 30, device_count=2,
                                    auto_complete=auto_complete)


def _opencl(mode: str) -> Callable[[], Backend]:
    def make() -> Backend:
        from accelrt.backends.opencl import OpenCLBackend
        return OpenCLBackend(mode)
    return make


def _cuda() -> Backend:
    from accelrt.backends.cuda import CudaBackend
    return CudaBackend()


def _opencl_svm_reason() -> str | None:
    reason = backends.unavailable_reason("opencl")
    if reason is not None:
        return reason
    from accelrt.backends.opencl import OpenCLBackend
    b = OpenCLBackend("auto")
    try:
        if b.get_device_properties(0)["memory_mode"] != "svm":
            return "the OpenCL device has no coarse-grained SVM"
    finally:
        b.close()
    return None


TARGETS: list[tuple[str, Callable[[], Target], Callable[[], str | None]]] = [
    ("cpu-sync", lambda: Target(_cpu(async_streams=False)), lambda: None),
    ("cpu-async", lambda: Target(_cpu(async_streams=True)), lambda: None),
    ("cpu-async-shm", lambda: Target(_cpu(async_streams=True, shared_memory=True)),
     lambda: None),
    ("simulated", lambda: Target(_simulated(True), holds_data=False), lambda: None),
    ("simulated-manual", lambda: Target(_simulated(False), holds_data=False), lambda: None),
    ("opencl-svm", lambda: Target(_opencl("svm")), _opencl_svm_reason),
    ("opencl-buffer", lambda: Target(_opencl("buffer")),
     lambda: backends.unavailable_reason("opencl")),
    ("cuda", lambda: Target(_cuda), lambda: backends.unavailable_reason("cuda")),
]

_reasons: dict[str, str | None] = {}


def _reason(tid: str, probe: Callable[[], str | None]) -> str | None:
    if tid not in _reasons:
        _reasons[tid] = probe()
    return _reasons[tid]


@pytest.mark.parametrize("check_name", sorted(CHECKS))
@pytest.mark.parametrize("tid", [t[0] for t in TARGETS])
def test_conformance(tid: str, check_name: str) -> None:
    _, make, probe = next(t for t in TARGETS if t[0] == tid)
    reason = _reason(tid, probe)
    if reason is not None:
        pytest.skip(f"{tid} is not available here: {reason}")
    outcome = run_check(check_name, make())
    if outcome.startswith("skipped: "):
        pytest.skip(outcome[len("skipped: "):])


def test_a_broken_backend_fails_the_suite() -> None:
    # the suite can fail: a cpu variant whose host functions drop exceptions
    from accelrt.backends import StreamHandle
    from accelrt.backends.cpu import CpuBackend

    class Swallowing(CpuBackend):
        def launch_host_func(self, index: int, fn: Callable[[], None],
                             stream: StreamHandle) -> None:
            def quiet() -> None:
                try:
                    fn()
                except Exception:  # noqa: BLE001 - the bug under test
                    pass
            super().launch_host_func(index, quiet, stream)

    with pytest.raises(AssertionError, match="never raised"):
        run_check("host_function_exceptions", Target(lambda: Swallowing(async_streams=True)))


def test_make_tests_gives_a_parametrised_pytest_function() -> None:
    from accelrt.testing import backend_conformance
    fn = backend_conformance.make_tests(_cpu(async_streams=True))
    marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
    assert marks and sorted(marks[0].args[1]) == sorted(CHECKS)
    fn("memcpy")    # one check, run directly


def test_a_backend_that_ignores_waits_fails_the_suite() -> None:
    # the gate holds the first stream, so a second stream that does not wait reads too early
    from accelrt.backends import EventHandle, StreamHandle
    from accelrt.backends.cpu import CpuBackend

    class NoWaits(CpuBackend):
        def stream_wait_event(self, index: int, stream: StreamHandle,
                              event: EventHandle) -> None:
            pass

    with pytest.raises(AssertionError, match="did not order"):
        run_check("events_order_streams", Target(lambda: NoWaits(async_streams=True)))
