"""Porting review: real ``torch.cuda`` / ``torch.accelerator`` runtime code, ported by changing
the import, runs on the cpu backend and type-checks with ``mypy --strict``.

The snippets (:data:`PORTED`) are the runtime calls of PyTorch's "CUDA semantics" notes
(timing with events, side streams with ``wait_stream``/``record_stream``, memory statistics,
``MemPool``/``use_mem_pool``, CUDA graphs with shared pools), of the ``torch.accelerator``
docstrings (``device_index``, ``Graph`` under ``with stream, graph:``, ``memory``/``random``)
and of DeepSpeed's ``CUDA_Accelerator`` (accelerator/cuda_accelerator.py, which wraps most of
``torch.cuda``): ``torch.cuda`` becomes ``accelrt.cpu`` (imported as ``cuda``),
``torch.accelerator`` becomes ``accelrt``, and tensors become accelrt arrays. Where torch's
answer is written here as a literal, it was observed on torch 2.14.1 (a CUDA build on a
machine without a GPU) or read in its source, as each comment says.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from helpers.typecheck import run_mypy

import accelrt as acc

#: Ported user code. It names only public accelrt API (and the private names PyTorch's own
#: users call, such as ``memory._record_memory_history``), on the cpu backend's device 0.
PORTED = '''
from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import numpy as np

import accelrt
import accelrt.memory
import accelrt.random
from accelrt import cpu as cuda   # was: import torch.cuda as cuda

# -- CUDA semantics: devices and timing with events
cuda0 = accelrt.device("cpu:0")
x = accelrt.asarray([1.0, 2.0], device=cuda0)
with cuda.device(0):
    a = accelrt.asarray([1.0, 2.0], device=accelrt.device("cpu"))
start_event = cuda.Event(enable_timing=True)
end_event = cuda.Event(enable_timing=True)
start_event.record()
end_event.record()
cuda.synchronize()
elapsed_time_ms: float = start_event.elapsed_time(end_event)

# -- CUDA semantics: a side stream, ordered by wait_stream and record_stream
s = cuda.Stream()
A = accelrt.empty((100, 100), device=cuda0)
s.wait_stream(cuda.default_stream(cuda0))
with cuda.stream(s):
    A.fill_(1.0)
A.record_stream(s)
cuda.current_stream().wait_stream(s)
ev = cuda.current_stream().record_event()
native_event: int = ev.cuda_event            # torch.cuda.Event.cuda_event
native_stream: int = s.cuda_stream

# -- apex's data prefetcher (examples/imagenet/main_amp.py): copies on a side stream
class DataPrefetcher:
    def __init__(self, loader: Iterator[np.ndarray]) -> None:
        self.loader = loader
        self.stream = cuda.Stream()
        self.next_input: accelrt.Array | None = None
        self.preload()

    def preload(self) -> None:
        try:
            host = next(self.loader)
        except StopIteration:
            self.next_input = None
            return
        with cuda.stream(self.stream):
            self.next_input = accelrt.asarray(accelrt.pin_memory(host), device=cuda0)

    def next(self) -> accelrt.Array | None:
        cuda.current_stream().wait_stream(self.stream)
        batch = self.next_input
        if batch is not None:
            batch.record_stream(cuda.current_stream())
        self.preload()
        return batch


prefetcher = DataPrefetcher(iter([np.ones(4, np.float32), np.zeros(4, np.float32)]))
batches = []
while (batch := prefetcher.next()) is not None:
    batches.append(batch.tolist())
assert batches == [[1.0] * 4, [0.0] * 4]
streams: list[cuda.Stream] = [cuda.default_stream(), cuda.Stream(priority=-1)]
events: list[cuda.Event] = [s.record_event() for s in streams]

# -- CUDA semantics: memory management
allocated: int = cuda.memory_allocated() + cuda.max_memory_allocated()
reserved: int = cuda.memory_reserved() + cuda.max_memory_reserved()
cuda.empty_cache()
assert cuda.memory_stats()["allocation.all.current"] >= 2
assert isinstance(cuda.memory_snapshot(), list)
free, total = cuda.mem_get_info()
assert cuda.memory_summary(device=0, abbreviated=True).startswith("|====")

# -- CUDA semantics: MemPool's use_count and snapshot
pool = cuda.MemPool()
assert pool.use_count() == 1
nelem_1mb = 1024 * 1024 // 4
with cuda.use_mem_pool(pool):
    out_0 = accelrt.randn(nelem_1mb, device=cuda0)
    assert pool.use_count() == 2
assert pool.use_count() == 1
with cuda.use_mem_pool(pool):
    assert len(pool.snapshot()) == 1
    out_1 = accelrt.randn(nelem_1mb, device=cuda0)
    assert len(pool.snapshot()) == 1
    out_2 = accelrt.randn(nelem_1mb, device=cuda0)
    assert len(pool.snapshot()) == 2

# -- CUDA semantics: graphs (warm up on a side stream, capture, replay; a shared pool)
g = cuda.CUDAGraph()
static_input = accelrt.empty((5,), device=cuda0)
static_output = accelrt.empty((5,), device=cuda0)
s = cuda.Stream()
s.wait_stream(cuda.current_stream())
with cuda.stream(s):
    for _ in range(3):
        static_output.copy_(static_input)
cuda.current_stream().wait_stream(s)
with cuda.graph(g):
    static_output.copy_(static_input)
static_input.copy_(accelrt.full((5,), 3, device=cuda0))
g.replay()
assert static_output.tolist() == [3.0] * 5
g1, g2 = cuda.CUDAGraph(), cuda.CUDAGraph()
with cuda.graph(g1):
    static_output.fill_(1)
with cuda.graph(g2, pool=g1.pool()):
    static_output.fill_(2)
g1.replay()
g2.replay()

# -- torch.accelerator docstrings
assert accelrt.is_available(), "No available accelerators detected."
if (current_device := accelrt.current_accelerator(check_available=True)) is not None:
    print(current_device.type)
print("Supported dtypes:", len(accelrt.get_device_capability("cpu:0")["supported_dtypes"]))
with accelrt.device_index(0):
    pass
with accelrt.device_index(None):
    pass
y = accelrt.zeros([2000], device="cpu:0")
stream = accelrt.Stream("cpu:0")
graph = accelrt.Graph()
with stream, graph:
    y.fill_(1)
graph.replay()
pool_id = graph.pool()
g3 = accelrt.Graph(pool=pool_id)
accelrt.current_stream().record_event().synchronize()
e1 = accelrt.Event(enable_timing=True)
e1.record(stream)
free2, total2 = accelrt.memory.get_memory_info()
accelrt.memory.reset_peak_memory_stats()
state = accelrt.random.get_rng_state()
accelrt.random.set_rng_state(state)

# -- DeepSpeed's CUDA_Accelerator (accelerator/cuda_accelerator.py)
cuda.set_device(0)
name = "cpu:{}".format(cuda.current_device())
cuda.synchronize(None)
cuda.set_rng_state(cuda.get_rng_state(0), 0)
cuda.manual_seed(1)
cuda.manual_seed_all(1)
seed: int = cuda.initial_seed()
gen = cuda.default_generators[0]
with cuda.stream(cuda.Stream()):
    pass
print(cuda.current_stream(None), cuda.default_stream(0))
total_memory: int = cuda.get_device_properties(None).total_memory
available: int = total_memory - cuda.memory_allocated(0)
props = cuda.get_device_properties(0)
sm_clock_khz: int = props.clock_rate     # FLOPs estimates read these torch attributes
smem: int = props.shared_memory_per_block_optin + props.shared_memory_per_block
limits: int = props.max_threads_per_block + props.memory_bus_width + props.pci_bus_id
cuda.reset_peak_memory_stats(0)
cuda.nvtx.range_push("step")
cuda.nvtx.range_pop()
with cuda.nvtx.range("iter {}", 1):
    pass
g4 = cuda.CUDAGraph()
with cuda.graph(g4, None, None):
    y.fill_(2)
g4.replay()

# -- torch.cuda's submodules, typed as torch's: a decorator range, memory and random getters
@cuda.nvtx.range("forward")
def forward(n: int) -> int:
    return n + 1


def used_bytes() -> int:   # mypy --strict: no "Returning Any" (torch.cuda.memory is typed)
    return cuda.memory.memory_allocated(0) + cuda.memory.memory_stats()["num_ooms"]


assert forward(1) == 2 and used_bytes() >= 0
rng_state = cuda.random.get_rng_state(0)
cuda.random.set_rng_state(rng_state, 0)

# -- memory history, as the memory-profiling tutorial records it
cuda.memory._record_memory_history(max_entries=100000)
z = accelrt.empty(100, device=cuda0)
with tempfile.TemporaryDirectory() as d:
    cuda.memory._dump_snapshot(os.path.join(d, "snapshot.pickle"))
cuda.memory._record_memory_history(enabled=None)

del prefetcher, batch, events, streams, x, a, A, out_0, out_1, out_2, static_input, static_output, y, z
del g, g1, g2, g3, g4, graph, pool
cuda.synchronize()
cuda.empty_cache()
'''


def test_ported_snippets_run_on_the_cpu_backend() -> None:
    namespace: dict[str, object] = {"__name__": "ported"}
    exec(compile(PORTED, "ported.py", "exec"), namespace)   # noqa: S102 - the snippet above
    namespace.clear()
    gc.collect()
    acc.cpu.empty_cache()


def test_ported_snippets_type_check(tmp_path: Path) -> None:
    # Before s26: "Event" has no attribute "cuda_event" (Stream.record_event() was typed
    # as accelrt.Event, so list[cuda.Event] refused it too), "DeviceProperties" has no
    # attribute "clock_rate", ..., "Untyped decorator makes function "forward" untyped" and
    # "Returning Any from function declared to return "int"" (cuda.nvtx, cuda.memory and
    # cuda.random were typed as bare modules).
    pytest.importorskip("mypy")
    proc = run_mypy(tmp_path, PORTED, "ported.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr


#: The attributes of torch 2.14.1's device properties, observed with
#: ``[n for n in dir(torch._C._CudaDeviceProperties) if not n.startswith("_")]``.
TORCH_PROPERTIES = [
    "L2_cache_size", "clock_rate", "gcnArchName", "is_integrated", "is_multi_gpu_board",
    "major", "max_threads_per_block", "max_threads_per_multi_processor", "memory_bus_width",
    "memory_clock_rate", "minor", "multi_processor_count", "name", "pci_bus_id",
    "pci_device_id", "pci_domain_id", "regs_per_multiprocessor", "shared_memory_per_block",
    "shared_memory_per_block_optin", "shared_memory_per_multiprocessor", "total_memory", "uuid",
    "warp_size"]


def test_device_properties_have_every_torch_attribute(backend: str) -> None:
    p = acc.get_device_properties(f"{backend}:0")
    missing = [n for n in TORCH_PROPERTIES if not hasattr(type(p), n) or n not in p]
    assert missing == []        # before s26: clock_rate, max_threads_per_block, ... (10)
    for n in TORCH_PROPERTIES:
        value = getattr(p, n)
        assert isinstance(value, str if n in ("name", "gcnArchName", "uuid") else (int, bool)), n
    assert p.max_threads_per_block >= 1
    if backend == "cpu":   # a CPU has no shared memory, PCI location or known clock here
        assert p.max_threads_per_block == 1
        assert [p[n] for n in ("shared_memory_per_block", "shared_memory_per_block_optin",
                               "shared_memory_per_multiprocessor", "clock_rate",
                               "memory_clock_rate", "memory_bus_width", "pci_bus_id",
                               "pci_device_id", "pci_domain_id")] == [0] * 9
    elif backend == "opencl":   # the largest work-group, local memory, the peak clock
        assert p.max_threads_per_block == p.max_threads_per_multi_processor
        assert p.shared_memory_per_block > 0 and p.clock_rate > 0


def test_a_stream_is_usable_first_thing_in_a_process() -> None:
    # Before s26: AttributeError: '_Classes' object has no attribute 'Event' (record_event
    # before anything had imported accelrt._event).
    code = ("import accelrt as acc\n"
            "e = acc.current_stream().record_event()\n"
            "e.synchronize()\n"
            "print(type(e).__name__, e.query(), type(acc.Stream().record_event()).__name__)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELRT_")}
    env["ACCELRT_ACCELERATOR"] = "cpu"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert (proc.returncode, proc.stdout) == (0, "Event True Event\n"), proc.stderr


def test_private_set_allocator_settings_as_torch() -> None:
    # torch 2.14.1: torch.cuda.memory._set_allocator_settings(env) sets the allocator
    # settings, with FutureWarning "torch.cuda._set_allocator_settings is deprecated. Use
    # torch._C._accelerator_setAllocatorSettings instead." (vLLM still calls it).
    before = acc.cpu.get_allocator_settings()
    try:
        with pytest.warns(FutureWarning, match="accelrt.cpu.memory._set_allocator_settings "
                                               "is deprecated. Use accelrt.cpu."
                                               "set_allocator_settings instead."):
            acc.cpu.memory._set_allocator_settings("expandable_segments:False")
        assert "expandable_segments:False" in acc.cpu.get_allocator_settings()
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            acc.cpu.set_allocator_settings(before)


def test_use_mem_pool_during_capture_is_kept_by_the_graph() -> None:
    # CUDA semantics ("Sharing memory across captures"): "If use_mem_pool is used during
    # capture, the graph retains that pool until the graph is reset or destroyed ...
    # CUDAGraph.pools() returns all pools retained by the graph" (torch 2.14.1's
    # torch/cuda/memory.py use_mem_pool calls CUDAGraph._retain_pool; needs a GPU to run).
    # Before s26: pools() was [pool()] and the side pool was not kept.
    g_default_pool, g_side_pool = acc.cpu.MemPool(), acc.cpu.MemPool()
    g = acc.cpu.CUDAGraph()
    with acc.cpu.graph(g, pool=g_default_pool):
        y = acc.zeros(4, device="cpu:0")
        with acc.cpu.use_mem_pool(g_side_pool):
            assert g_side_pool.use_count() == 3      # the pool, the block and the graph
            tmp = acc.zeros(4, device="cpu:0")
        with acc.cpu.use_mem_pool(g_side_pool):  # kept once
            pass
    assert g.pool() == g_default_pool.id
    assert g.pools() == [g_default_pool.id, g_side_pool.id]
    assert (g_default_pool.use_count(), g_side_pool.use_count()) == (2, 2)
    g.reset()
    assert (g_default_pool.use_count(), g_side_pool.use_count()) == (1, 1)
    del y, tmp, g, g_default_pool, g_side_pool
    gc.collect()
    acc.cpu.empty_cache()
