"""GPU checks of the CUDA-only paths changed since the GPU run of 2026-11-26 that no GPU test
covered (session 40). Each skips, with the reason, where CUDA (or a second GPU, or nccl4py) is
missing; ``scripts/gpu_check.sh`` runs them in its ``changed`` phase, early, then leaves them
out of ``suite-backends``. What they check on the host is checked by the stand-ins (the cpu
backend's and tests/backends/test_cuda_calls_s40.py's); here the driver answers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt import _backend as registry

from helpers.cuda_gpu import gpu, two_gpus


@pytest.fixture
def cuda() -> Any:
    acc.set_current_accelerator("cuda")
    yield acc.cuda
    acc.cuda.synchronize()
    acc.cuda.empty_cache()


def _active(dev: int) -> int:
    return int(acc.memory.memory_stats(f"cuda:{dev}").get("active_bytes.all.current", 0))


@gpu
def test_gpu_record_stream_of_a_side_stream_destroyed_before_the_free(cuda: Any) -> None:
    """The free's event cannot be recorded on a destroyed stream: the device is synchronized
    and the block freed at once (s39, ``StreamFrees.insert_events``)."""
    from accelrt.memory import _allocator
    b = registry.get_backend("cuda")
    before = _active(0)
    raw = b.stream_create(0, 0)
    ptr = acc.memory.caching_allocator_alloc(1 << 20, "cuda:0")
    b.memset(0, ptr, 7, 1 << 20, raw)            # work of the side stream on the block
    _allocator.get_allocator(b, 0).record_stream(ptr, raw)
    b.stream_destroy(0, raw)                      # its queued work still runs
    acc.memory.caching_allocator_delete(ptr)      # synchronizes cuda:0, then frees
    assert _active(0) == before


@two_gpus
def test_gpu_record_stream_of_another_devices_stream(cuda: Any) -> None:
    """An array of cuda:0 used by a stream of cuda:1 (s39): its free records an event on
    cuda:1 (with that device's context current); the block stays active until
    ``empty_cache`` has waited for it there, as in PyTorch."""
    b = registry.get_backend("cuda")
    s1 = acc.Stream("cuda:1")
    scratch = b.malloc(1, 1 << 20)
    before = _active(0)
    a = acc.empty(1 << 22, dtype="uint8", device="cuda:0")
    a.record_stream(s1)
    for _ in range(8):                            # keep s1 busy for a while
        b.memset(1, scratch, 0, 1 << 20, s1.stream_id)
    del a
    assert _active(0) == before + (1 << 22)       # the event on cuda:1 is pending
    acc.cuda.empty_cache()                        # waits for it on cuda:1, frees the block
    assert _active(0) == before
    s1.synchronize()
    b.free(1, scratch)


@gpu
def test_gpu_external_events_inside_a_captured_graph(cuda: Any) -> None:
    """``Event(external=True)`` inside a capture is an event record node (``cuEventRecord
    WithFlags(EXTERNAL)``) and a wait node (``CU_EVENT_WAIT_EXTERNAL``): after the replay the
    event is usable outside the graph."""
    s = acc.Stream("cuda:0")
    done = acc.cuda.Event(external=True)
    ready = acc.cuda.Event(external=True)
    x = acc.zeros(1024, dtype="float32", device="cuda:0")
    g = acc.cuda.CUDAGraph()
    with acc.cuda.graph(g, stream=s):
        ready.record()
        s.wait_event(ready)
        x.fill_(2.0)
        done.record()
    g.replay()
    done.synchronize()
    assert done.query()
    assert float(x.numpy()[0]) == 2.0


@gpu
def test_gpu_out_of_memory_observer_and_torchs_message(cuda: Any) -> None:
    seen: list[tuple[int, ...]] = []
    acc.cuda.memory.set_per_process_memory_fraction(0.01, 0)
    acc.cuda.attach_out_of_memory_observer(lambda *a: seen.append(a))
    try:
        total = acc.cuda.get_device_properties(0).total_memory
        with pytest.raises(acc.OutOfMemoryError, match=r"^CUDA out of memory\."):
            acc.empty(total // 50, dtype="uint8", device="cuda:0")
    finally:
        acc.cuda.memory.set_per_process_memory_fraction(1.0, 0)
    assert seen and seen[-1][0] == 0 and seen[-1][1] >= total // 50


@gpu
def test_gpu_profiler_start_and_stop(cuda: Any) -> None:
    """``cuProfilerStart``/``cuProfilerStop`` succeed with no profiler attached."""
    acc.cuda.profiler.start()
    acc.cuda.profiler.stop()


@two_gpus
def test_gpu_nccl_communicator_of_cuda_1_is_made_on_gpu_1(cuda: Any) -> None:
    """The NCCL engine of a rank bound to cuda:1, made in a thread whose current context is
    cuda:0's, is on GPU 1 (s40: ``ncclCommInitRank`` uses the current context)."""
    core = pytest.importorskip("nccl.core", reason="nccl4py is not installed")
    from accelrt.distributed import _nccl
    from accelrt.distributed._engine import EngineContext
    acc.cuda.synchronize(0)   # cuda:0's context current in this thread
    ctx = EngineContext(0, 1, [0], "cuda", 1, 60.0, None)
    ctx.options["unique_id"] = core.get_unique_id()
    eng = _nccl.NcclEngine.create(ctx)
    try:
        assert eng.comm.cuda_dev == 1
        x = acc.ones(8, dtype="float32", device="cuda:1")
        eng.all_reduce(None, _buf(x), _sum(), acc.Stream("cuda:1"))
        acc.cuda.synchronize(1)
        assert x.numpy().tolist() == [1.0] * 8
    finally:
        eng.destroy()


def _buf(x: Any) -> Any:
    from accelrt.distributed._engine import Buf
    return Buf(x.data_ptr(), x.size, np.dtype(x.dtype.name), 1)


def _sum() -> Any:
    from accelrt.distributed._engine import ReduceOp
    return ReduceOp.SUM
