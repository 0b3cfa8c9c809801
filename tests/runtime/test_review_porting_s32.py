"""Porting review (s32): the runtime code of well-known projects, ported by changing the
import, runs on the cpu backend and answers as torch would.

Each test mirrors the ``torch.cuda`` / ``torch.accelerator`` calls of one project file (named
in its comment), written here anew: ``torch.cuda`` becomes ``accelrt.cpu`` (imported as
``cuda``), ``torch.device("cuda", i)`` becomes ``acc.device("cpu", i)``, tensors become
arrays. tests/runtime/test_review_porting_s26.py covers PyTorch's own examples and the part of
DeepSpeed's ``CUDA_Accelerator`` that s26 ported; this file does not repeat them. Where torch's
answer is a literal here, it was observed with torch 2.15.0 (a CUDA build on this machine,
which has no GPU) or read in its source, as each comment says.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import pickle
import queue
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt import cpu as cuda   # was: import torch.cuda as cuda

MiB = 1 << 20


@pytest.fixture
def rng_states() -> Iterator[None]:
    """Restore the cpu backend's default generators after a test that seeds them."""
    saved = cuda.get_rng_state_all()
    try:
        yield
    finally:
        cuda.set_rng_state_all(saved)


def _release() -> None:
    gc.collect()
    cuda.empty_cache()


# ------------------------------------------------------------------ out of memory, ported

#: Run with a 48 MiB cpu device: the OOM-driven helpers of HF accelerate
#: (src/accelerate/utils/memory.py), PyTorch Lightning (src/lightning/pytorch/utilities/
#: memory.py) and torchtitan (torchtitan/tools/profiling.py), each printing what it saw.
_OOM_SCRIPT = textwrap.dedent('''
    import functools, gc, inspect, json, os, pickle, sys
    import accelrt as acc
    from accelrt import cpu as cuda
    MiB = 1 << 20
    out = {}

    # -- HF accelerate, utils/memory.py: the OOM test of should_reduce_batch_size, then
    #    find_executable_batch_size halving from 128 (its first version) after each OOM
    def should_reduce_batch_size(exception):
        statements = [" out of memory.", "DefaultCPUAllocator: can't allocate memory"]
        if isinstance(exception, RuntimeError) and len(exception.args) == 1:
            return any(s in exception.args[0] for s in statements)
        return False

    def clear_device_cache(garbage_collection=False):
        if garbage_collection:
            gc.collect()
        if cuda.is_available():
            cuda.empty_cache()

    def release_memory(*objects):
        objects = [None for _ in objects]
        clear_device_cache(garbage_collection=True)
        return objects

    def find_executable_batch_size(function=None, starting_batch_size=128):
        if function is None:
            return functools.partial(find_executable_batch_size,
                                     starting_batch_size=starting_batch_size)
        batch_size = starting_batch_size

        def decorator(*args, **kwargs):
            nonlocal batch_size
            clear_device_cache(garbage_collection=True)
            if len(inspect.signature(function).parameters) < len(args) + 1:
                raise TypeError("batch size passed twice")
            while True:
                if batch_size == 0:
                    raise RuntimeError("No executable batch size found, reached zero.")
                try:
                    return function(batch_size, *args, **kwargs)
                except Exception as e:
                    if should_reduce_batch_size(e):
                        clear_device_cache(garbage_collection=True)
                        batch_size //= 2
                    else:
                        raise
        return decorator

    tried = []

    @find_executable_batch_size(starting_batch_size=128)
    def train(batch_size, width):
        tried.append(batch_size)
        activations = acc.empty((batch_size * width,), dtype="uint8", device="cpu:0")
        return batch_size

    out["batch_size"] = train(MiB)
    out["tried"] = tried
    out["num_ooms"] = cuda.memory_stats()["num_ooms"]
    a = acc.empty((8 * MiB,), dtype="uint8", device="cpu:0")
    a, = release_memory(a)
    out["released"] = [a is None, cuda.memory_allocated()]

    # -- torchtitan, tools/profiling.py: record the history, and dump a snapshot when the
    #    step raises torch.OutOfMemoryError
    cuda.memory._record_memory_history(max_entries=100000)
    path = os.path.join(sys.argv[1], "rank0_memory_snapshot.pickle")
    try:
        acc.empty((64 * MiB,), dtype="uint8", device="cpu:0")
    except acc.OutOfMemoryError as e:   # was: except torch.OutOfMemoryError
        with open(path, "wb") as f:
            pickle.dump(cuda.memory._snapshot(), f)
        # -- PyTorch Lightning, utilities/memory.py: an OOM is a one-argument RuntimeError
        #    that says "out of memory" (its CUDA test also wants "CUDA" in the text)
        out["oom"] = [isinstance(e, RuntimeError), isinstance(e, cuda.OutOfMemoryError),
                      len(e.args), "out of memory" in e.args[0],
                      e.args[0].split(" Device ")[0]]
    cuda.memory._record_memory_history(enabled=None)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    out["traces"] = [t["action"] for t in snap["device_traces"][0]]

    # -- PyTorch Lightning, utilities/memory.py garbage_collection_cuda: an empty_cache that
    #    raised an OOM would be swallowed; here it must not raise at all
    gc.collect()
    cuda.empty_cache()
    print(json.dumps(out))
''')


def test_oom_helpers_of_accelerate_lightning_and_torchtitan(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELRT_")}
    env.update(ACCELRT_ACCELERATOR="cpu", ACCELRT_CPU_MEMORY="48MiB")
    proc = subprocess.run([sys.executable, "-c", _OOM_SCRIPT, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # 128 and 64 MiB do not fit in 48 MiB, 32 does; each failure counted as torch counts it
    assert (out["batch_size"], out["tried"], out["num_ooms"]) == (32, [128, 64, 32], 2)
    # release_memory: the caller's names are rebound to None and the arrays freed (their
    # segment stays cached: the caller still held them while release_memory emptied the
    # cache, in torch as here)
    assert out["released"] == [True, 0]
    # torch's OutOfMemoryError is a RuntimeError with one argument (torch 2.15:
    # torch.OutOfMemoryError.__mro__ == (OutOfMemoryError, RuntimeError, ...)); accelrt's
    # message starts "<backend> out of memory." as torch's "CUDA out of memory."
    assert out["oom"][:4] == [True, True, 1, True]
    assert out["oom"][4] == "CPU out of memory. Tried to allocate 64.00 MiB."   # torch: "CUDA ..."
    # the snapshot dumped on the OOM holds torch's "oom" trace entry
    assert out["traces"][-1] == "oom"


# ------------------------------------------------------------------ vLLM memory profiling

@dataclass
class MemorySnapshot:
    """vllm/utils/mem_utils.py's MemorySnapshot, ported (its UMA branch left out)."""

    torch_peak: int = 0
    free_memory: int = 0
    total_memory: int = 0
    cuda_memory: int = 0
    torch_memory: int = 0
    non_torch_memory: int = 0
    timestamp: float = 0.0
    device: acc.device | None = None
    auto_measure: bool = True

    def __post_init__(self) -> None:
        # was: torch.device(current_platform.current_device())
        self.device_ = self.device or acc.device("cpu", cuda.current_device())
        if self.auto_measure:
            self.measure()

    def measure(self) -> None:
        self.torch_peak = cuda.memory_stats(self.device_).get("allocated_bytes.all.peak", 0)
        self.free_memory, self.total_memory = cuda.mem_get_info(self.device_)
        self.cuda_memory = self.total_memory - self.free_memory
        self.torch_memory = cuda.memory_reserved(self.device_)
        self.non_torch_memory = self.cuda_memory - self.torch_memory
        self.timestamp = time.time()

    def __sub__(self, other: MemorySnapshot) -> MemorySnapshot:
        if self.device_ != other.device_:
            raise ValueError("The two snapshots should be from the same device!")
        return MemorySnapshot(
            torch_peak=self.torch_peak - other.torch_peak,
            free_memory=self.free_memory - other.free_memory,
            total_memory=self.total_memory - other.total_memory,
            cuda_memory=self.cuda_memory - other.cuda_memory,
            torch_memory=self.torch_memory - other.torch_memory,
            non_torch_memory=self.non_torch_memory - other.non_torch_memory,
            timestamp=self.timestamp - other.timestamp, device=self.device_,
            auto_measure=False)


@dataclass
class ProfilingResult:
    non_kv_cache_memory: int = 0
    torch_peak_increase: int = 0
    non_torch_increase: int = 0
    weights_memory: int = 0


@contextlib.contextmanager
def memory_profiling(baseline: MemorySnapshot,
                     weights_memory: int) -> Iterator[ProfilingResult]:
    """vllm/utils/mem_utils.py's memory_profiling, ported."""
    gc.collect()
    cuda.empty_cache()
    cuda.reset_peak_memory_stats(baseline.device_)
    result = ProfilingResult(weights_memory=weights_memory)
    before_profile = MemorySnapshot(device=baseline.device_)
    yield result
    gc.collect()
    cuda.empty_cache()
    after_profile = MemorySnapshot(device=baseline.device_)
    result.torch_peak_increase = (after_profile - before_profile).torch_peak
    result.non_torch_increase = (after_profile - baseline).non_torch_memory
    result.non_kv_cache_memory = (result.non_torch_increase + result.torch_peak_increase
                                  + weights_memory)


def test_vllm_memory_profiling() -> None:
    # vllm/v1/worker/gpu_worker.py: set_device, a baseline snapshot, load the weights, profile
    # one forward pass whose activations are freed at its end
    cuda.set_device(acc.device("cpu", 0))
    _release()
    baseline = MemorySnapshot()
    assert baseline.total_memory == cuda.get_device_properties(0).total_memory
    weights = acc.empty((4 * MiB,), dtype="uint8", device="cpu:0")
    with memory_profiling(baseline, weights_memory=4 * MiB) as result:
        activations = acc.empty((6 * MiB,), dtype="uint8", device="cpu:0")
        activations.fill_(1)
        del activations
    assert result.torch_peak_increase == 6 * MiB
    # the cpu device's "used" memory is what its allocators reserved: nothing else here
    assert result.non_torch_increase == 0
    assert result.non_kv_cache_memory == 10 * MiB
    with pytest.raises(ValueError, match="same device"):
        _ = baseline - MemorySnapshot(device=acc.device("cuda", 0), auto_measure=False)
    del weights
    _release()


# ------------------------------------------------------------------ torchtitan / torchtune

def test_torchtitan_memory_monitor_and_snapshot(tmp_path: Path) -> None:
    # torchtitan/tools/metrics.py DeviceMemoryMonitor: a device without an index, its name and
    # capacity, peak statistics read with .get and defaults
    device_module = acc.backends.device_module("cpu")   # was: torch._utils._get_device_module
    device = acc.device("cpu")                           # was: torch.device("cuda")
    name = device_module.get_device_name(device)
    capacity = device_module.get_device_properties(device).total_memory
    assert isinstance(name, str) and name and capacity == cuda.mem_get_info()[1]
    device_module.reset_peak_memory_stats()
    device_module.empty_cache()
    x = acc.empty((3 * MiB,), dtype="uint8", device=device)
    info = device_module.memory_stats(device)
    assert info.get("active_bytes.all.peak", -1) >= 3 * MiB
    assert info.get("reserved_bytes.all.peak", -1) >= 3 * MiB
    assert (info.get("num_alloc_retries", -1), info.get("num_ooms", -1)) == (0, 0)
    # torchtitan/tools/profiling.py MemoryProfiler: history on, a snapshot pickled per step
    device_module.memory._record_memory_history(max_entries=100000)
    try:
        y = acc.empty((1000,), dtype="uint8", device=device)
        with open(tmp_path / "rank0_memory_snapshot.pickle", "wb") as output:
            pickle.dump(device_module.memory._snapshot(), output)
    finally:
        device_module.memory._record_memory_history(enabled=None)
    with open(tmp_path / "rank0_memory_snapshot.pickle", "rb") as f:
        snap = pickle.load(f)
    # the allocation is in the trace (an "alloc" entry has the size asked for)
    assert any(t["action"] == "alloc" and t["size"] == 1000 for t in snap["device_traces"][0])
    assert {s["device"] for s in snap["segments"]} == {0}
    # torchtune/training/memory.py get_memory_stats / cleanup_before_training
    peak_active = cuda.memory_stats().get("active_bytes.all.peak", 0) / 1024**3
    peak_alloc = cuda.max_memory_allocated(device) / 1024**3
    peak_reserved = cuda.max_memory_reserved(device) / 1024**3
    cuda.reset_peak_memory_stats(device)
    assert 0 < peak_active and 0 < peak_alloc <= peak_reserved
    del x, y
    _release()
    assert cuda.max_memory_allocated(device) >= cuda.memory_allocated(device)


# ------------------------------------------------------------------ Megatron-LM

def test_megatron_rng_tracker_imports_private_torch_cuda_names(rng_states: None) -> None:
    # megatron/core/tensor_parallel/random.py imports these at module level: before s32 the
    # port failed right there (ImportError: cannot import name '_lazy_call' from accelrt.cpu)
    from accelrt.cpu import _lazy_call, _lazy_init
    from accelrt.cpu import device as device_ctx_manager

    def get_rng_state(clone: bool = False, graph_safe: bool = False) -> Any:
        if not graph_safe:
            return cuda.random.get_rng_state(device="cpu")
        _lazy_init()
        gen = cuda.default_generators[cuda.current_device()]
        return gen.clone_state() if clone else gen.graphsafe_get_state()

    def set_rng_state(new_state: Any, device: int | str = -1, graph_safe: bool = False) -> None:
        if device == -1:
            dev = acc.device("cpu")
        elif isinstance(device, str):
            dev = acc.device(device)
        else:
            dev = acc.device("cpu", device)

        def cb() -> None:
            idx = dev.index if dev.index is not None else cuda.current_device()
            gen = cuda.default_generators[idx]
            if graph_safe:
                gen.graphsafe_set_state(new_state)
            else:
                gen.set_state(new_state)
        _lazy_call(cb)

    class Tracker:   # CudaRNGStatesTracker
        def __init__(self, graphable: bool) -> None:
            self.graphable = graphable
            self.states: dict[str, Any] = {}

        def add(self, name: str, seed: int) -> None:
            if self.graphable:
                new_state = get_rng_state(clone=True, graph_safe=True)
                new_state.manual_seed(seed)
                self.states[name] = new_state
            else:
                orig = cuda.get_rng_state()
                cuda.manual_seed(seed)
                self.states[name] = cuda.get_rng_state()
                set_rng_state(orig)

        @contextlib.contextmanager
        def fork(self, name: str) -> Iterator[None]:
            orig = get_rng_state(graph_safe=self.graphable)
            set_rng_state(self.states[name], graph_safe=self.graphable)
            with device_ctx_manager(-1):   # torch.cuda.device(-1) is a no-op
                try:
                    yield
                finally:
                    self.states[name] = get_rng_state(graph_safe=self.graphable)
                    set_rng_state(orig, graph_safe=self.graphable)

    def draw() -> list[float]:
        values: list[float] = acc.rand(4, device="cpu:0").tolist()
        return values

    cuda.manual_seed(7)
    expected_default = [draw(), draw()]
    cuda.manual_seed(2718 + 1)
    expected_forked = [draw(), draw()]
    for graphable in (False, True):
        cuda.manual_seed(7)
        tracker = Tracker(graphable)
        tracker.add("model-parallel-rng", 2718 + 1)
        got_default = [draw()]
        with tracker.fork("model-parallel-rng"):
            got_forked = [draw()]
        with tracker.fork("model-parallel-rng"):   # the forked state carries on
            got_forked.append(draw())
        got_default.append(draw())                  # the default one was left as it was
        assert (got_default, got_forked) == (expected_default, expected_forked), graphable


def test_lazy_call_runs_now_or_never_as_torch() -> None:
    # torch 2.15's torch.cuda._lazy_call(cb) runs cb at once once CUDA is initialised and
    # queues it until then; on this machine (a CUDA build, no GPU) it never ran, and
    # torch.cuda._lazy_init() raised RuntimeError("Found no NVIDIA driver on your system...").
    ran: list[str] = []
    cuda._lazy_call(lambda: ran.append("cpu"), seed=True)   # torch's seed= is accepted
    assert ran == ["cpu"]
    cuda._lazy_init()
    assert cuda.is_initialized()
    acc.cuda._lazy_call(lambda: ran.append("cuda"))
    if acc.cuda.is_available():
        assert ran == ["cpu", "cuda"]
    else:
        assert ran == ["cpu"]
        with pytest.raises(RuntimeError, match="not available"):
            acc.cuda._lazy_init()
    # private in torch.cuda: bound, not exported
    assert "_lazy_call" not in cuda.__all__ and "_lazy_init" not in acc.cuda.__all__
    assert acc.backends.device_module("cpu")._lazy_call is not None


def test_megatron_timers_and_straggler_events() -> None:
    # megatron/core/timers.py Timer: synchronize around host time
    cuda.synchronize()
    start = time.time()
    acc.zeros(16, device="cpu:0").fill_(1)
    cuda.synchronize()
    assert time.time() - start >= 0
    # megatron/core/utils.py StragglerDetector: events pooled in a queue and re-recorded on
    # every iteration; elapsed_time read after one synchronize
    pool: queue.Queue[Any] = queue.Queue()
    for _ in range(3):
        sev = pool.get() if pool.qsize() > 1 else cuda.Event(enable_timing=True)
        eev = pool.get() if pool.qsize() > 0 else cuda.Event(enable_timing=True)
        sev.record()
        acc.zeros(1024, device="cpu:0").fill_(2)
        eev.record()
        cuda.synchronize()
        assert sev.elapsed_time(eev) >= 0.0
        pool.put(sev)
        pool.put(eev)
    # torch 2.15 (c10/cuda/CUDAEvent.h): TORCH_CHECK_VALUE, so a ValueError, for an event
    # never recorded or made without timing
    with pytest.raises(ValueError, match="Both events must be recorded before"):
        cuda.Event(enable_timing=True).elapsed_time(pool.get())
    with pytest.raises(ValueError, match="enable_timing=True"):
        cuda.Event().elapsed_time(pool.get())
    # megatron/training/utils.py report_memory and core/utils.py nvtx_range_push/pop
    mega_bytes = 1024.0 * 1024.0
    report = " | ".join(f"{label}: {fn() / mega_bytes}" for label, fn in (
        ("allocated", cuda.memory_allocated), ("max allocated", cuda.max_memory_allocated),
        ("reserved", cuda.memory_reserved), ("max reserved", cuda.max_memory_reserved)))
    assert report.count("|") == 3
    depth = cuda.nvtx.range_push("forward-backward")
    assert cuda.nvtx.range_pop() == depth


# ------------------------------------------------------------------ DeepSpeed, Lightning, vLLM

def test_deepspeed_accelerator_memory_aliases_and_lazy_call(rng_states: None) -> None:
    # accelerator/cuda_accelerator.py: the deprecated *_cached names (torch 2.15 warns with
    # FutureWarning: "`torch.cuda.memory_cached` has been renamed to
    # `torch.cuda.memory_reserved`"), hasattr-guarded getters, lazy_call, available_memory
    x = acc.empty((MiB,), dtype="uint8", device="cpu:0")
    with pytest.warns(FutureWarning, match="renamed"):
        assert cuda.memory_cached(0) == cuda.memory_reserved(0)
    with pytest.warns(FutureWarning, match="renamed"):
        assert cuda.max_memory_cached(None) == cuda.max_memory_reserved(None)
    with pytest.warns(FutureWarning, match="resets /all/ peak memory stats"):
        cuda.reset_max_memory_allocated(0)
    with pytest.warns(FutureWarning, match="resets /all/ peak memory stats"):
        cuda.reset_max_memory_cached(0)
    assert cuda.max_memory_allocated(0) == cuda.memory_allocated(0)
    for fn in ("memory_stats", "reset_peak_memory_stats", "memory_reserved",
               "max_memory_reserved"):
        assert hasattr(cuda, fn)
    available = cuda.get_device_properties(0).total_memory - cuda.memory_allocated(0)
    assert 0 < available < cuda.get_device_properties(0).total_memory
    state = cuda.get_rng_state(0)
    cuda.manual_seed(3)
    cuda._lazy_call(lambda: cuda.set_rng_state(state, 0))   # DeepSpeed's lazy_call(callback)
    assert np.array_equal(cuda.get_rng_state(0), state)
    del x
    _release()


def test_lightning_cuda_accelerator() -> None:
    # src/lightning/fabric/accelerators/cuda.py: setup_device, get_parallel_devices,
    # find_usable_cuda_devices (a 0-d array on each device), teardown; pytorch's
    # accelerators/cuda.py get_device_stats
    device = acc.device("cpu", 0)
    cuda.set_device(device)
    assert isinstance(cuda.get_device_name(device), str)
    devices = [acc.device("cpu", i) for i in range(cuda.device_count())]
    usable = []
    for i, d in enumerate(devices):
        try:
            acc.asarray(0, device=d)
        except RuntimeError:
            continue
        usable.append(i)
    assert usable == list(range(cuda.device_count()))
    stats = cuda.memory_stats(device)
    assert "allocated_bytes.all.current" in stats
    gc.collect()
    cuda.empty_cache()   # _clear_cuda_memory


def test_vllm_streams_events_and_graph_capture() -> None:
    # vllm/utils/multi_stream_utils.py maybe_execute_in_parallel: events recorded and waited
    # on the current stream without arguments
    a = acc.zeros(4, device="cpu:0")
    b = acc.zeros(4, device="cpu:0")
    event0, event1 = cuda.Event(), cuda.Event()
    aux_stream = cuda.Stream()

    def run(fn0: Callable[[], None], fn1: Callable[[], None]) -> None:
        event0.record()
        fn0()
        with cuda.stream(aux_stream):
            event0.wait()
            fn1()
            event1.record()
        event1.wait()

    def fn0() -> None:
        a.fill_(1)

    def fn1() -> None:
        b.fill_(2)

    run(fn0, fn1)
    cuda.synchronize()
    assert (a.tolist(), b.tolist()) == ([1.0] * 4, [2.0] * 4)
    # vllm/compilation/cuda_graph.py: capture on the current stream (vLLM makes a side stream
    # current) into the global pool from graph_pool_handle()
    side = cuda.Stream()
    cuda.set_stream(side)
    try:
        pool = cuda.graph_pool_handle()
        g = cuda.CUDAGraph()
        with cuda.graph(g, pool=pool, stream=cuda.current_stream()):
            a.fill_(7)
        a.fill_(0)
        g.replay()
        cuda.current_stream().synchronize()
        assert a.tolist() == [7.0] * 4
    finally:
        cuda.set_stream(cuda.default_stream())

