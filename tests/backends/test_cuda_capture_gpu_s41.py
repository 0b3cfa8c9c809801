"""GPU checks of the capture modes on CUDA (session 41): a capture begins in the
``capture_error_mode`` asked (accelrt captured every graph in thread-local mode before), so
CUDA's own rules for the mode apply to the other threads. Each test skips, with the reason,
where CUDA is missing; ``scripts/gpu_check.sh`` runs them in its ``changed`` phase. On the host,
tests/backends/test_cuda_calls_s40.py checks the mode reaching ``cuStreamBeginCapture``.

Thread A captures; thread B, once A's capture began (an event orders them), makes a call that
is *potentially unsafe* during a capture: a raw ``cuMemAlloc`` in B's own (default, global)
interaction mode. CUDA refuses it while another thread's capture is ``"global"`` (and the
capture is invalidated: its end fails), and lets it through while the capture is
``"relaxed"`` or ``"thread_local"``.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import accelrt as acc
from accelrt._errors import DeviceError

from helpers.cuda_gpu import gpu
TIMEOUT = 60.0


@pytest.fixture
def cuda() -> Any:
    acc.set_current_accelerator("cuda")
    yield acc.cuda
    acc.cuda.synchronize()
    acc.cuda.empty_cache()


def _raw_malloc_in_this_thread() -> tuple[int, int]:
    """``cuMemAlloc`` of 1 MiB in the calling thread (device 0's primary context made
    current first): ``(CUresult, pointer)``, the pointer freed again where it was made."""
    from cuda.bindings import driver as drv
    err, ctx = drv.cuDevicePrimaryCtxRetain(drv.CUdevice(0))
    assert int(err) == 0, err
    try:
        (err,) = drv.cuCtxSetCurrent(ctx)
        assert int(err) == 0, err
        err, ptr = drv.cuMemAlloc(1 << 20)
        code = int(err)
        if code == 0:
            drv.cuMemFree(ptr)
        return code, int(ptr)
    finally:
        drv.cuDevicePrimaryCtxRelease(drv.CUdevice(0))


def _capture_while(mode: str, other: Any) -> tuple[Any, BaseException | None]:
    """Thread A captures a fill on a side stream of cuda:0 in ``mode`` while the calling
    thread runs ``other()``; returns what ``other()`` returned and the error that ended A's
    capture (None if it ended cleanly)."""
    begun, done = threading.Event(), threading.Event()
    ended: list[BaseException | None] = []

    def capture() -> None:
        s, g = acc.Stream("cuda:0"), acc.cuda.CUDAGraph()
        x = acc.zeros(1024, dtype="float32", device="cuda:0")
        acc.cuda.synchronize()
        try:
            with s:
                g.capture_begin(capture_error_mode=mode)
                try:
                    x.fill_(1.0)
                    begun.set()
                    done.wait(TIMEOUT)
                finally:
                    g.capture_end()
            g.replay()
            acc.cuda.synchronize()
            ended.append(None)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            ended.append(exc)
        finally:
            begun.set()
            g.reset()
            s.close()

    t = threading.Thread(target=capture)
    t.start()
    try:
        assert begun.wait(TIMEOUT)
        out = other()
    finally:
        done.set()
        t.join(TIMEOUT)
    assert not t.is_alive()
    return out, ended[0]


@gpu
def test_gpu_a_global_capture_refuses_another_threads_unsafe_call(cuda: Any) -> None:
    """``capture_error_mode="global"`` (``CUDAGraph.capture_begin``'s default) reaches
    ``cuStreamBeginCapture``: B's ``cuMemAlloc`` fails (``CUDA_ERROR_STREAM_CAPTURE_
    UNSUPPORTED``/``_IMPLICIT``) and invalidates A's capture, whose end raises."""
    (code, _), ended = _capture_while("global", _raw_malloc_in_this_thread)
    assert code != 0
    assert isinstance(ended, DeviceError), ended


@gpu
@pytest.mark.parametrize("mode", ["relaxed", "thread_local"])
def test_gpu_a_relaxed_or_thread_local_capture_lets_another_thread_allocate(
        cuda: Any, mode: str) -> None:
    """B's ``cuMemAlloc`` succeeds while A captures ``"relaxed"`` or ``"thread_local"``,
    and A's capture ends and replays (accelrt captured every mode thread-local before s41,
    so only these two behaved as asked)."""
    (code, _), ended = _capture_while(mode, _raw_malloc_in_this_thread)
    assert code == 0
    assert ended is None


@gpu
def test_gpu_a_thread_local_capture_lets_another_thread_synchronize(cuda: Any) -> None:
    """The generic refusal rule (docs/graphs.md) on CUDA: while A captures
    ``"thread_local"``, B's ``acc.cuda.synchronize()`` is not refused by accelrt and CUDA
    runs it (A's capture goes on and ends cleanly); while A captures ``"global"``, accelrt
    refuses it before it reaches the driver, leaving A's capture intact."""
    _, ended = _capture_while("thread_local", acc.cuda.synchronize)
    assert ended is None

    def refused() -> bool:
        try:
            acc.cuda.synchronize()
        except DeviceError:
            return True
        return False

    was_refused, ended = _capture_while("global", refused)
    assert was_refused
    assert ended is None
