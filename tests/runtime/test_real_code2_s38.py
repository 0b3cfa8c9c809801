"""Real code, second pass (s38): the runtime calls of more widely used projects, ported by
changing the import, run on the cpu backend.

Each test names the project file whose ``torch.cuda`` / ``torch.accelerator`` calls it
re-writes (short, adapted; read from the project's sources, not copied): ``torch.cuda``
becomes ``accelrt.cpu`` (imported as ``cuda``), ``torch.accelerator`` becomes ``accelrt``,
``torch.device("cuda", i)`` becomes ``acc.device("cpu", i)``, tensors become arrays.
tests/runtime/test_real_code_s38.py and test_review_porting_s32.py port DeepSpeed, HF
accelerate/transformers, Lightning, vLLM, Triton, torchtitan, torchtune and Megatron-LM; this
file does not repeat them. torch's answers were observed with torch 2.15.0 on this machine (no
GPU) or read in its sources (``torch/utils/checkpoint.py``, ``torch/random.py``,
``torch/cuda/memory.py``, ``torch/utils/benchmark/utils/timer.py``), as each comment says.
"""

from __future__ import annotations

import gc
import pickle
import timeit
from pathlib import Path

import pytest

import accelrt as acc
from accelrt import cpu as cuda   # was: import torch.cuda as cuda
from tests.helpers.cpu_script import run_cpu_script

MiB = 1 << 20


_run = run_cpu_script   # (tests/helpers/cpu_script.py)


# ------------------------------------------------------------------ ColossalAI

_COLOSSALAI_SCRIPT = '''
    import warnings
    import accelrt as acc
    import accelrt.distributed as dist
    from accelrt import cpu as cuda           # was: import torch.cuda

    # ColossalAI, colossalai/accelerator/cuda_accelerator.py CudaAccelerator: every method but
    # autocast (no autograd here) and utilization (NVML: needs CUDA, docs/differences.md),
    # each forwarding its arguments to torch.cuda as ColossalAI does (keywords, positionals,
    # the "cuda" default string of its RNG methods)
    class CudaAccelerator:
        name, communication_backend, is_synchronous = "cpu", "nccl", False
        def get_current_device(self): return acc.device(f"cpu:{cuda.current_device()}")
        def current_device(self): return cuda.current_device()
        def set_device(self, device):
            if device is None:
                if not dist.is_initialized():
                    raise RuntimeError("Cannot get current device when distributed is not "
                                       "initialized.")
                device = dist.get_rank() % self.device_count()
            cuda.set_device(device)
        def synchronize(self, device=None): cuda.synchronize(device)
        def is_available(self): return cuda.is_available()
        def device_count(self): return cuda.device_count()
        def get_device_capability(self, device=None): return cuda.get_device_capability(device)
        def get_device_name(self, device=None): return cuda.get_device_name(device)
        def get_device_properties(self, device): return cuda.get_device_properties(device)
        def get_rng_state(self, device="cpu"): return cuda.get_rng_state(device)
        def get_rng_state_all(self): return cuda.get_rng_state_all()
        def set_rng_state(self, new_state, device="cpu"): cuda.set_rng_state(new_state, device)
        def set_rng_state_all(self, new_states): cuda.set_rng_state_all(new_states)
        def manual_seed(self, seed): cuda.manual_seed(seed)
        def manual_seed_all(self, seed): cuda.manual_seed_all(seed)
        def seed(self): cuda.seed()
        def seed_all(self): cuda.seed_all()
        def initial_seed(self): return cuda.initial_seed()
        def empty_cache(self): cuda.empty_cache()
        def memory_stats(self, device=None): return cuda.memory_stats(device=device)
        def memory_summary(self, device=None, abbreviated=False):
            return cuda.memory_summary(device=device, abbreviated=abbreviated)
        def memory_snapshot(self): return cuda.memory_snapshot()
        def memory_allocated(self, device=None): return cuda.memory_allocated(device=device)
        def max_memory_allocated(self, device=None):
            return cuda.max_memory_allocated(device=device)
        def reset_max_memory_allocated(self, device=None):
            cuda.reset_max_memory_allocated(device=device)
        def reset_max_memory_cached(self, device=None): cuda.reset_max_memory_cached(device=device)
        def memory_reserved(self, device=None): return cuda.memory_reserved(device=device)
        def max_memory_reserved(self, device=None): return cuda.max_memory_reserved(device=device)
        def set_per_process_memory_fraction(self, fraction, device=None):
            cuda.set_per_process_memory_fraction(fraction, device=device)
        def reset_peak_memory_stats(self, device=None): cuda.reset_peak_memory_stats(device=device)
        def Stream(self, device=None, priority=0, **kwargs):
            return cuda.Stream(device, priority, **kwargs)
        def Event(self, enable_timing=False, blocking=False, interprocess=False):
            return cuda.Event(enable_timing, blocking, interprocess)
        def current_stream(self, device=None): return cuda.current_stream(device)
        def default_stream(self, device=None): return cuda.default_stream(device)
        def set_stream(self, stream_): cuda.set_stream(stream_)
        def stream(self, stream_): return cuda.stream(stream_)

    A = CudaAccelerator()
    assert A.is_available() and A.device_count() == 2
    try:
        A.set_device(None)
    except RuntimeError as e:
        assert "distributed is not initialized" in str(e)
    else:
        raise AssertionError("set_device(None) without a process group")
    A.set_device(acc.device("cpu:1"))               # a torch.device-like object
    assert A.current_device() == 1 and A.get_current_device() == acc.device("cpu", 1)
    for dev in (None, 1, "cpu:1", acc.device("cpu:1")):
        assert A.get_device_name(dev) == A.get_device_properties(1).name
        assert "supported_dtypes" in A.get_device_capability(dev)   # a dict off cuda
        A.synchronize(dev)

    # RNG: the "cpu" default string is the current device, as torch.cuda's "cuda"
    A.manual_seed_all(7)
    assert A.initial_seed() == 7
    state = A.get_rng_state()
    assert (state == cuda.get_rng_state(1)).all()
    draw = acc.rand(4, device="cpu:1").tolist()
    A.set_rng_state(state)
    assert acc.rand(4, device="cpu:1").tolist() == draw
    A.set_rng_state(state, "cpu:1")
    assert acc.rand(4, device=1).tolist() == draw
    states = A.get_rng_state_all()
    A.seed(); A.seed_all()
    A.set_rng_state_all(states)
    assert acc.rand(4, device=1).tolist() != draw and len(states) == 2
    A.manual_seed(3)
    assert A.initial_seed() == 3

    # memory: keywords device=None / an index / a device object
    A.reset_peak_memory_stats()
    x = acc.empty(1000, dtype="uint8", device="cpu:1")
    assert A.memory_allocated() == A.memory_allocated(device=1) == 1024
    assert A.max_memory_allocated(acc.device("cpu:1")) == 1024
    assert A.memory_reserved() == A.max_memory_reserved() == 2 * 1024 * 1024
    assert A.memory_stats()["allocated_bytes.all.current"] == 1024
    assert isinstance(A.memory_summary(abbreviated=True), str)
    assert [s["device"] for s in A.memory_snapshot()] == [1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)   # torch warns the same
        A.reset_max_memory_allocated(); A.reset_max_memory_cached(device=1)
    A.set_per_process_memory_fraction(0.5)
    assert cuda.get_per_process_memory_fraction(1) == 0.5
    A.set_per_process_memory_fraction(1.0, device=1)

    # streams and events with ColossalAI's positional forwarding
    s = A.Stream(acc.device("cpu:1"), -1)
    assert s.device == acc.device("cpu:1") and s.priority == -1
    assert A.Stream().device == acc.device("cpu:1")
    e = A.Event(True, False, False)
    A.set_stream(s)
    assert A.current_stream() == s and A.current_stream(0) == A.default_stream(0)
    e.record()
    A.set_stream(A.default_stream())
    with A.stream(s):
        x.fill_(1)
    A.current_stream().wait_stream(s)
    e.synchronize()
    assert x.tolist()[:2] == [1, 1]
    del x
    A.empty_cache()
    assert A.memory_reserved(1) == 0
    print("ok")
'''


def test_colossalai_cuda_accelerator_on_two_devices() -> None:
    # ColossalAI, colossalai/accelerator/cuda_accelerator.py: every runtime method ran unchanged
    assert _run(_COLOSSALAI_SCRIPT, ACCELRT_CPU_DEVICES="2") == ["ok"]


# ------------------------------------------------------------------ torch.utils.checkpoint

_CHECKPOINT_SCRIPT = '''
    import accelrt as acc
    from accelrt import cpu as cuda

    # torch 2.15, torch/utils/checkpoint.py: _get_device_module is getattr(torch, device), the
    # RNG is saved only when the device module says it was initialised
    # (`getattr(device_module, "_initialized", False)`: torch.cuda._initialized), then
    # get_device_states / set_device_states / fork_rng(device_type=...) on recompute
    def _get_device_module(device="cpu"):
        return getattr(acc, device)                  # was: getattr(torch, device)

    def get_device_states(*args):
        fwd_device_ids = [a.device.index for a in args if isinstance(a, acc.Array)]
        device_module = _get_device_module("cpu")
        fwd_device_states = []
        for device_id in fwd_device_ids:
            with device_module.device(device_id):
                fwd_device_states.append(device_module.get_rng_state())
        return fwd_device_ids, fwd_device_states

    def set_device_states(devices, states, *, device_type=None):
        device_module = _get_device_module(device_type or "cpu")
        for device, state in zip(devices, states):
            with device_module.device(device):
                device_module.set_rng_state(state)

    def checkpoint(function, *args, preserve_rng_state=True):
        device_type = "cpu"                          # _infer_device_type(*args)
        device_module = _get_device_module(device_type)
        had_device_in_fwd = False
        if preserve_rng_state and getattr(device_module, "_initialized", False):
            had_device_in_fwd = True
            fwd_devices, fwd_device_states = get_device_states(*args)
        out = function(*args)                        # the forward, without grad
        def recompute():                             # the backward's recompute
            rng_devices = fwd_devices if had_device_in_fwd else []
            with acc.random.fork_rng(devices=rng_devices, enabled=preserve_rng_state,
                                     device_type=device_type):
                if had_device_in_fwd:
                    set_device_states(fwd_devices, fwd_device_states, device_type=device_type)
                return function(*args)
        return out, recompute, had_device_in_fwd

    # a fresh process: nothing is initialised yet, as torch.cuda._initialized is False
    assert cuda._initialized is False and getattr(acc, "cpu")._initialized is False
    a, b = acc.empty(4, device=0), acc.empty(4, device="cpu:1")
    assert cuda._initialized is True

    def dropout_like(x, y):                          # draws on both arrays' devices
        return acc.rand(3, device=x.device).tolist() + acc.rand(3, device=y.device).tolist()

    out, recompute, saved = checkpoint(dropout_like, a, b)
    assert saved                                     # accelrt.cpu had no _initialized: False
    acc.rand(10, device=0), acc.rand(10, device=1)   # other work moves both generators on
    after = cuda.get_rng_state_all()
    assert recompute() == out                        # the same draws as the forward
    assert all((s == t).all() for s, t in zip(cuda.get_rng_state_all(), after))
    print("ok")
'''


def test_torch_utils_checkpoint_reads_initialized_flag() -> None:
    # torch 2.15, torch/utils/checkpoint.py (CheckpointFunction and _checkpoint_without_
    # reentrant_generator): before s38 accelrt's device modules had no `_initialized`, so the
    # ported getattr(..., "_initialized", False) was False and the recompute drew different
    # numbers from the forward
    assert _run(_CHECKPOINT_SCRIPT, ACCELRT_CPU_DEVICES="2") == ["ok"]


def test_initialized_flag_assignment_as_scripts_do() -> None:
    # scripts ported from torch write `torch.cuda.current_device(); torch.cuda._initialized =
    # True` (a common workaround): a true value initialises; a false one changes nothing
    # (accelrt cannot un-initialise), so a test's monkeypatch of the flag undoes cleanly
    lines = _run('''
        import accelrt as acc
        from accelrt import cpu as cuda
        cuda._initialized = False                    # nothing initialised yet: stays so
        assert cuda._initialized is False and not cuda.is_initialized()
        cuda.current_device()
        cuda._initialized = True
        assert cuda._initialized is True and cuda.is_initialized()
        assert acc.backends.device_module("cpu")._initialized is True
        cuda._initialized = False                    # no error, and still initialised
        assert cuda._initialized is True
        cuda._initialized = 0
        assert cuda._initialized is True
        assert "_initialized" not in cuda.__all__
        print("ok")
    ''')
    assert lines == ["ok"]


def test_initialized_flag_under_monkeypatch_restores() -> None:
    # pytest's monkeypatch.setattr(torch.cuda, "_initialized", True) in a ported test: the
    # undo sets the value read before (False), which raised RuntimeError before the fix
    lines = _run('''
        import pytest
        from accelrt import cpu as cuda
        mp = pytest.MonkeyPatch()
        mp.setattr(cuda, "_initialized", True)
        assert cuda._initialized is True
        mp.undo()
        assert cuda._initialized is True             # initialised stays initialised
        print("ok")
    ''')
    assert lines == ["ok"]


# ------------------------------------------------------------------ torch.random.fork_rng

def test_torch_random_fork_rng_argument_forms() -> None:
    # torch 2.15, torch/random.py fork_rng as torch's own callers pass it (checkpoint.py:
    # devices=list, enabled=, device_type=; torch.utils.data: no arguments): a generator of
    # devices is listed once, "meta" is a no-op, one warning without devices= on several
    # devices (torch's text starts "CUDA reports that you have 2 available devices")
    lines = _run('''
        import warnings
        import accelrt as acc
        from accelrt import cpu as cuda
        def draw():
            return [acc.rand(3, device=i).tolist() for i in range(2)]
        def restored(**kw):
            before = cuda.get_rng_state_all()
            with acc.random.fork_rng(**kw):
                draw()
            return [bool((a == b).all()) for a, b in zip(before, cuda.get_rng_state_all())]
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert restored() == [True, True]
            assert restored() == [True, True]
        assert len(w) == 1 and str(w[0].message).startswith(
            "CPU reports that you have 2 available devices"), [str(m.message) for m in w]
        assert restored(device_type="cpu", devices=[0]) == [True, False]
        assert restored(devices=(i for i in range(2))) == [True, True]
        assert restored(devices=["cpu:0", acc.device("cpu", 1)]) == [True, True]
        assert restored(devices=[], enabled=True) == [False, False]
        assert restored(enabled=False) == [False, False]
        assert restored(device_type="meta") == [False, False]
        print("ok")
    ''', ACCELRT_CPU_DEVICES="2")
    assert lines == ["ok"]


# ------------------------------------------------------------------ torch.utils.benchmark

def test_torch_utils_benchmark_timer_synchronizes() -> None:
    # torch 2.15, torch/utils/benchmark/utils/timer.py: timer() synchronizes the accelerator
    # before reading the clock and is handed to timeit.Timer; a stream's queued work is done
    # when the measured statement returns
    def timer() -> float:
        if acc.is_available():                     # torch.accelerator.is_available()
            acc.synchronize()                      # torch.accelerator.synchronize()
        return timeit.default_timer()

    x = acc.empty(1024, dtype="uint8")
    s = cuda.Stream()
    s.wait_stream(cuda.current_stream())

    def stmt() -> None:
        with cuda.stream(s):
            x.fill_(7)

    t = timeit.Timer(stmt=stmt, timer=timer)
    number, elapsed = t.autorange()
    assert number >= 1 and elapsed >= 0.2          # timeit's autorange: at least 0.2 s
    assert s.query() and x.tolist()[:2] == [7, 7]


# ------------------------------------------------------------------ memory history forms

def test_record_memory_history_argument_forms_and_dump_snapshot(tmp_path: Path) -> None:
    # torch 2.15, torch/cuda/memory.py _record_memory_history: a bool first argument is the
    # legacy form (_record_memory_history_legacy(enabled, record_context,
    # trace_alloc_max_entries, trace_alloc_record_context, ...)), a str or None the current
    # one; callers seen: torchtitan/PyTorch docs (max_entries=), the memory-viz tutorial
    # (enabled="all", context=..., stacks="python"), older Megatron/NeMo (True with
    # trace_alloc_max_entries=), torchtune (enabled=None to stop), _dump_snapshot(filename)
    m = cuda.memory
    try:
        m._record_memory_history(True, trace_alloc_max_entries=100,
                                 trace_alloc_record_context=True)
        m._record_memory_history(True, True, 100, True)
        m._record_memory_history(False)
        m._record_memory_history("all", "all", "all", 1000, None, False)
        m._record_memory_history(enabled="all", context="alloc", stacks="python",
                                 max_entries=1000, device=0, clear_history=True,
                                 compile_context=False, global_record_annotations=False,
                                 skip_actions=["free_requested"])
        x = acc.empty(1000, dtype="uint8")
        m._dump_snapshot(str(tmp_path / "snap.pickle"))
        m._dump_snapshot(tmp_path / "snap2.pickle")              # a path-like, as torch's open()
        with pytest.raises(ValueError, match="enabled must be"):
            m._record_memory_history("yes")
        with pytest.raises(ValueError, match="context must be"):
            m._record_memory_history(context="python")
        with pytest.raises(ValueError, match="stacks must be"):
            m._record_memory_history(stacks="cpp")
    finally:
        m._record_memory_history(None)
    with open(tmp_path / "snap.pickle", "rb") as f:
        snap = pickle.load(f)
    assert {"segments", "device_traces"} <= set(snap)
    assert any(t["action"] == "alloc" and t["size"] == 1000 for t in snap["device_traces"][0])
    assert all(t["action"] != "free_requested" for t in snap["device_traces"][0])
    assert (tmp_path / "snap2.pickle").stat().st_size > 0
    del x
    gc.collect()
    cuda.empty_cache()


# ------------------------------------------------------------------ SGLang

_SGLANG_SCRIPT = '''
    import gc, warnings
    import accelrt as acc
    from accelrt import cpu as cuda

    # SGLang, python/sglang/srt/utils.py get_available_gpu_memory (its cuda branch without a
    # process group): warn if gpu_id is not the current device, empty the cache, read
    # mem_get_info(gpu_id), answer GiB
    def get_available_gpu_memory(device, gpu_id, distributed=False, empty_cache=True):
        assert device == "cuda"
        num_gpus = cuda.device_count()
        assert gpu_id < num_gpus
        if cuda.current_device() != gpu_id:
            warnings.warn(f"WARNING: current device is not {gpu_id}, but "
                          f"{cuda.current_device()}")
        if empty_cache:
            cuda.empty_cache()
        free_gpu_memory, _ = cuda.mem_get_info(gpu_id)
        return free_gpu_memory / (1 << 30)

    cuda.set_device(1)
    before = get_available_gpu_memory("cuda", 1)
    kv_pool = acc.empty(4 << 20, dtype="uint8")      # mem_cache/memory_pool.py's buffers
    during = get_available_gpu_memory("cuda", 1)
    assert before - during == 20 / 1024              # one 20 MiB segment, as torch rounds 4 MiB
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert get_available_gpu_memory("cuda", 0) == before
    assert "current device is not 0, but 1" in str(w[0].message)

    # SGLang, python/sglang/srt/model_executor/cuda_graph_runner.py: one capture stream, a
    # global pool from graph_pool_handle() shared by every batch size's graph, captured
    # largest first (graph(g, pool=..., stream=...)), warm-up runs synchronized before
    graphs, outputs = {}, {}
    global_graph_memory_pool = None
    stream = cuda.Stream()
    static = acc.full((64,), 1.0)
    def run_once(bs):
        out = acc.empty((bs,))
        out.copy_(acc.full((bs,), float(bs)))
        return out
    stream.wait_stream(cuda.current_stream())         # graph_capture(): the side stream
    with cuda.stream(stream):
        for bs in (16, 8, 4):
            for _ in range(2):
                cuda.synchronize()
                run_once(bs)
            if global_graph_memory_pool is None:
                global_graph_memory_pool = cuda.graph_pool_handle()
            graph = cuda.CUDAGraph()
            with cuda.graph(graph, pool=global_graph_memory_pool, stream=stream):
                outputs[bs] = run_once(bs)
            graphs[bs] = graph
    cuda.current_stream().wait_stream(stream)
    assert isinstance(global_graph_memory_pool, tuple) and len(global_graph_memory_pool) == 2
    assert {g.pool() for g in graphs.values()} == {global_graph_memory_pool}
    for bs in (4, 16):
        graphs[bs].replay()
    cuda.synchronize()
    assert outputs[4].tolist() == [4.0] * 4 and outputs[16].tolist() == [16.0] * 16
    del graphs, outputs, graph, kv_pool, static
    gc.collect()
    assert get_available_gpu_memory("cuda", 1) == before
    print("ok")
'''


def test_sglang_available_memory_and_cuda_graph_runner_pool() -> None:
    # SGLang, python/sglang/srt/utils.py and model_executor/cuda_graph_runner.py: ran unchanged
    assert _run(_SGLANG_SCRIPT, ACCELRT_CPU_DEVICES="2") == ["ok"]
