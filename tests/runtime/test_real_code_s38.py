"""Real code (s38): the runtime calls of widely used projects, ported by changing the import,
run on the cpu backend.

Each test names the project file whose ``torch.cuda`` / ``torch.accelerator`` calls it
re-writes (short, adapted; read from the project's sources, not copied): ``torch.cuda``
becomes ``accelrt.cpu`` (imported as ``cuda``), ``torch.device("cuda", i)`` becomes
``acc.device("cpu", i)``, tensors become arrays. tests/runtime/test_review_porting_s26.py and
test_review_porting_s32.py port other parts of these projects (DeepSpeed's memory aliases,
accelerate's first batch-size search, vLLM's memory profiling, Megatron-LM, Lightning); this
file does not repeat them. Where torch's answer is stated, it was read in torch 2.15's sources
(``torch/cuda/memory.py``), as each comment says.
"""

from __future__ import annotations

import ctypes
import gc
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt import cpu as cuda   # was: import torch.cuda as cuda
from tests.helpers.cpu_script import run_cpu_script

MiB = 1 << 20
ALIGN = 512


_run = run_cpu_script   # (tests/helpers/cpu_script.py)


# ------------------------------------------------------------------ DeepSpeed

_DEEPSPEED_SCRIPT = '''
    import warnings
    import numpy as np
    import accelrt as acc
    from accelrt import cpu as cuda           # was: import torch.cuda

    # DeepSpeed, accelerator/cuda_accelerator.py: CUDA_Accelerator's runtime methods, each as
    # it forwards to torch.cuda (the "cuda" strings become "cpu")
    class Accelerator:
        def device_name(self, device_index=None):
            return "cpu" if device_index is None else "cpu:{}".format(device_index)
        def device(self, device_index=None):
            return acc.device("cpu", device_index)      # torch.device('cuda', device_index)
        def set_device(self, device_index): cuda.set_device(device_index)
        def current_device(self): return cuda.current_device()
        def current_device_name(self): return "cpu:{}".format(cuda.current_device())
        def device_count(self): return cuda.device_count()
        def synchronize(self, device_index=None): return cuda.synchronize(device_index)
        def random(self): return acc.random                # torch.random
        def set_rng_state(self, new_state, device_index=None):
            if device_index is None:
                return cuda.set_rng_state(new_state)
            return cuda.set_rng_state(new_state, device_index)
        def get_rng_state(self, device_index=None):
            if device_index is None:
                return cuda.get_rng_state()
            return cuda.get_rng_state(device_index)
        def manual_seed(self, seed): return cuda.manual_seed(seed)
        def manual_seed_all(self, seed): return cuda.manual_seed_all(seed)
        def initial_seed(self): return cuda.initial_seed()
        def default_generator(self, device_index): return cuda.default_generators[device_index]
        @property
        def Stream(self): return cuda.Stream
        def stream(self, stream): return cuda.stream(stream)
        def current_stream(self, device_index=None): return cuda.current_stream(device_index)
        def default_stream(self, device_index=None): return cuda.default_stream(device_index)
        @property
        def Event(self): return cuda.Event
        def empty_cache(self): return cuda.empty_cache()
        def memory_allocated(self, device_index=None): return cuda.memory_allocated(device_index)
        def max_memory_allocated(self, device_index=None):
            return cuda.max_memory_allocated(device_index)
        def memory_stats(self, device_index=None):
            if hasattr(cuda, "memory_stats"):
                return cuda.memory_stats(device_index)
        def reset_peak_memory_stats(self, device_index=None):
            if hasattr(cuda, "reset_peak_memory_stats"):
                return cuda.reset_peak_memory_stats(device_index)
        def memory_reserved(self, device_index=None):
            if hasattr(cuda, "memory_reserved"):
                return cuda.memory_reserved(device_index)
        def max_memory_reserved(self, device_index=None):
            if hasattr(cuda, "max_memory_reserved"):
                return cuda.max_memory_reserved(device_index)
        def total_memory(self, device_index=None):
            return cuda.get_device_properties(device_index).total_memory
        def available_memory(self, device_index=None):   # its branch without pynvml
            return self.total_memory(device_index) - self.memory_allocated(device_index)
        def is_bf16_supported(self):
            if not cuda.is_available():
                return True
            return cuda.is_bf16_supported()
        def is_available(self): return cuda.is_available()
        def range_push(self, msg, domain=None, category=None):
            torch_nvtx = getattr(cuda, "nvtx", None)
            if torch_nvtx is not None and hasattr(torch_nvtx, "range_push"):
                return torch_nvtx.range_push(msg)
        def range_pop(self, domain=None):
            torch_nvtx = getattr(cuda, "nvtx", None)
            if torch_nvtx is not None and hasattr(torch_nvtx, "range_pop"):
                return torch_nvtx.range_pop()
        def lazy_call(self, callback): return cuda._lazy_call(callback)
        def create_graph(self): return cuda.CUDAGraph()
        def capture_to_graph(self, graph, pool=None, stream=None):
            return cuda.graph(graph, pool, stream)      # positional, as DeepSpeed writes it
        def replay_graph(self, graph):
            graph.replay()
            return
        def on_accelerator(self, tensor):
            return str(tensor.device).startswith("cpu:")
        def visible_devices_envs(self): return ["CUDA_VISIBLE_DEVICES"]

    A = Accelerator()
    assert A.is_available() and A.device_count() == 2 and A.is_bf16_supported() is True
    A.set_device(1)
    assert A.current_device() == 1 and A.current_device_name() == "cpu:1"
    assert A.device(1) == acc.device("cpu:1") and A.device().index is None
    A.synchronize(); A.synchronize(0)

    # RNG: DeepSpeed's get/set with and without an index, seeds, default generators
    A.manual_seed_all(1234)
    assert A.initial_seed() == 1234
    state0 = A.get_rng_state(0)
    x = acc.rand(4, device="cpu:0").tolist()
    A.set_rng_state(state0, 0)
    assert acc.rand(4, device="cpu:0").tolist() == x
    state0 = A.get_rng_state(0)
    A.default_generator(1).set_state(state0)
    assert (A.get_rng_state() == state0).all()         # current device 1 now has device 0's
    assert A.random().initial_seed() == 1234

    # deepspeed/runtime/activation_checkpointing/checkpointing.py _set_cuda_rng_state, its
    # "newer PyTorch" branch: -1 is the current device, a str or an int a device
    def _set_cuda_rng_state(new_state, device=-1):
        if device == -1:
            device = acc.device(A.device_name())
        elif isinstance(device, str):
            device = acc.device(device)
        elif isinstance(device, int):
            device = acc.device(A.device_name(), device)
        def cb():
            idx = device.index
            if idx is None:
                idx = A.current_device()
            A.default_generator(idx).set_state(new_state)
        A.lazy_call(cb)
    A.manual_seed(5)
    fresh = A.get_rng_state()
    for dev in (-1, "cpu:1", 1):
        acc.rand(8, device="cpu:1")
        _set_cuda_rng_state(fresh, dev)
        assert (A.get_rng_state(1) == fresh).all(), dev

    # streams and events as ZeRO's overlapping uses them
    s = A.Stream()
    assert s.device == acc.device("cpu:1")              # made on the current device
    s.wait_stream(A.current_stream())
    start, end = A.Event(enable_timing=True), A.Event(enable_timing=True)
    with A.stream(s):
        assert A.current_stream() == s and A.current_stream(0) == A.default_stream(0)
        start.record()
        buf = acc.zeros(1024, device=A.current_device_name())
        end.record()
    buf.record_stream(s)
    A.current_stream().wait_event(end)
    end.synchronize()
    assert start.elapsed_time(end) >= 0 and A.on_accelerator(buf)

    # memory: the statistics it reads with None, an index or nothing
    A.reset_peak_memory_stats()
    assert A.memory_allocated() == A.memory_allocated(1) == 4096
    assert A.max_memory_allocated(1) == 4096
    # two 2 MiB segments: the random draws' on the default stream, buf's on s (a block is
    # cached for the stream it was allocated on, as torch's)
    assert A.memory_reserved(None) == 2 * (2 * 1024 * 1024)
    assert A.memory_stats(1)["allocated_bytes.all.current"] == 4096
    assert A.max_memory_reserved(1) >= A.memory_reserved(1)
    assert A.available_memory() == A.total_memory() - 4096
    assert A.memory_allocated(0) == 0

    # graphs: create_graph, capture_to_graph(graph, pool, stream) with positional arguments,
    # a second graph sharing the first one's pool, replay_graph
    g1, g2 = A.create_graph(), A.create_graph()
    side = A.Stream()
    side.wait_stream(A.current_stream())
    with A.capture_to_graph(g1, None, side):
        buf.fill_(2.0)
    with A.capture_to_graph(g2, g1.pool(), side):
        buf.fill_(3.0)
    A.current_stream().wait_stream(side)
    A.replay_graph(g1)
    A.synchronize()
    assert buf.tolist()[:2] == [2.0, 2.0]
    A.replay_graph(g2)
    A.synchronize()
    assert buf.tolist()[:2] == [3.0, 3.0]

    # NVTX ranges with no tool attached: torch answers -2 for both
    assert A.range_push("forward") in (-2, 0) and A.range_pop() in (-2, 0)
    del g1, g2, buf
    A.empty_cache()
    assert A.memory_reserved(1) == 0
    print("ok")
'''


def test_deepspeed_cuda_accelerator_on_two_devices() -> None:
    # DeepSpeed, accelerator/cuda_accelerator.py and deepspeed/runtime/activation_checkpointing/
    # checkpointing.py: every runtime method of CUDA_Accelerator, on the second of two devices
    assert _run(_DEEPSPEED_SCRIPT, ACCELRT_CPU_DEVICES="2") == ["ok"]


# ------------------------------------------------------------------ HF accelerate, transformers

_HF_SCRIPT = '''
    import functools, gc, inspect, pickle
    import accelrt as acc
    from accelrt import cpu as cuda

    # HF accelerate, src/accelerate/utils/modeling.py get_max_memory: every device touched
    # (torch.tensor([0], device=i)), then its free memory from mem_get_info(i)
    for i in range(cuda.device_count()):
        _ = acc.zeros(1, device=i)
    max_memory = {i: cuda.mem_get_info(i)[0] for i in range(cuda.device_count())}
    assert sorted(max_memory) == [0, 1] and all(isinstance(v, int) for v in max_memory.values())
    assert max_memory[0] == cuda.mem_get_info(0)[1] - cuda.memory_reserved(0)

    # transformers, src/transformers/testing_utils.py: the device-agnostic dispatch tables
    # (their "cuda" entries, the ported ones) and the backend_* helpers
    def _device_agnostic_dispatch(device, dispatch_table, *args, **kwargs):
        if device not in dispatch_table:
            if not callable(dispatch_table["default"]):
                return dispatch_table["default"]
            return dispatch_table["default"](*args, **kwargs)
        fn = dispatch_table[device]
        if not callable(fn):
            return fn
        return fn(*args, **kwargs)
    BACKEND_MANUAL_SEED = {"cuda": cuda.manual_seed, "default": None}
    BACKEND_EMPTY_CACHE = {"cuda": cuda.empty_cache, "cpu": None, "default": None}
    BACKEND_DEVICE_COUNT = {"cuda": cuda.device_count, "cpu": lambda: 0, "default": lambda: 1}
    BACKEND_RESET_PEAK_MEMORY_STATS = {"cuda": cuda.reset_peak_memory_stats, "default": None}
    BACKEND_MAX_MEMORY_ALLOCATED = {"cuda": cuda.max_memory_allocated, "cpu": 0, "default": 0}
    BACKEND_MEMORY_ALLOCATED = {"cuda": cuda.memory_allocated, "cpu": 0, "default": 0}
    BACKEND_SYNCHRONIZE = {"cuda": cuda.synchronize, "cpu": None, "default": None}
    BACKEND_TORCH_ACCELERATOR_MODULE = {"cuda": cuda, "cpu": None, "default": None}
    torch_device = "cuda"
    assert _device_agnostic_dispatch(torch_device, BACKEND_DEVICE_COUNT) == 2
    assert _device_agnostic_dispatch("cpu", BACKEND_DEVICE_COUNT) == 0
    assert _device_agnostic_dispatch(torch_device, BACKEND_TORCH_ACCELERATOR_MODULE) is cuda
    _device_agnostic_dispatch(torch_device, BACKEND_MANUAL_SEED, 0)
    _device_agnostic_dispatch(torch_device, BACKEND_RESET_PEAK_MEMORY_STATS)
    before = _device_agnostic_dispatch(torch_device, BACKEND_MEMORY_ALLOCATED)
    x = acc.empty(MiB := 1 << 20, dtype="uint8")
    _device_agnostic_dispatch(torch_device, BACKEND_SYNCHRONIZE)
    assert _device_agnostic_dispatch(torch_device, BACKEND_MEMORY_ALLOCATED) - before == MiB
    assert _device_agnostic_dispatch(torch_device, BACKEND_MAX_MEMORY_ALLOCATED) - before == MiB
    del x
    gc.collect()                                   # testing_utils.cleanup(device, True)
    _device_agnostic_dispatch(torch_device, BACKEND_EMPTY_CACHE)

    # transformers, src/transformers/trainer.py _save_rng_state / _load_rng_state (distributed:
    # get_rng_state_all, pickled by torch.save), and Lightning, src/lightning/fabric/utilities/
    # seed.py _collect_rng_states / _set_rng_states
    rng_states = {"cuda": cuda.random.get_rng_state_all()}
    saved = pickle.loads(pickle.dumps(rng_states))
    draws = [acc.rand(3, device=i).tolist() for i in range(2)]
    cuda.random.set_rng_state_all(saved["cuda"])
    lightning = {"torch.cuda": cuda.get_rng_state_all() if cuda.is_available() else []}
    assert [acc.rand(3, device=i).tolist() for i in range(2)] == draws
    cuda.manual_seed_all(99)
    if "torch.cuda" in lightning:
        cuda.set_rng_state_all(lightning["torch.cuda"])
    assert [acc.rand(3, device=i).tolist() for i in range(2)] == draws

    # torch.utils.checkpoint get_device_states / set_device_states, as ported libraries copy
    # them: each device's state read and put back inside `with device_module.device(d)`
    states = []
    cuda.set_rng_state_all(lightning["torch.cuda"])
    for d in (0, 1):
        with cuda.device(d):
            states.append(cuda.get_rng_state())
    acc.rand(5, device=0), acc.rand(5, device=1)
    for d, st in zip((0, 1), states):
        with cuda.device(d):
            cuda.set_rng_state(st)
    assert [acc.rand(3, device=i).tolist() for i in range(2)] == draws
    assert cuda.current_device() == 0
    print("ok")
'''


def test_accelerate_and_transformers_device_helpers_on_two_devices() -> None:
    # HF accelerate (utils/modeling.py get_max_memory), transformers (testing_utils.py backend
    # dispatch, trainer.py RNG checkpointing), Lightning (fabric/utilities/seed.py) and
    # torch.utils.checkpoint's device RNG states
    assert _run(_HF_SCRIPT, ACCELRT_CPU_DEVICES="2") == ["ok"]


_BATCH_SIZE_SCRIPT = '''
    import functools, gc, inspect
    import accelrt as acc
    from accelrt import cpu as cuda

    # HF accelerate, src/accelerate/utils/memory.py as of its device-agnostic version:
    # clear_device_cache, release_memory, should_reduce_batch_size (" out of memory." for
    # CUDA, HIP and XPU) and find_executable_batch_size reducing by 0.9 after each OOM
    def clear_device_cache(garbage_collection=False):
        if garbage_collection:
            gc.collect()
        if cuda.is_available():                   # its is_cuda_available() branch
            cuda.empty_cache()

    def release_memory(*objects):
        if not isinstance(objects, list):
            objects = list(objects)
        for i in range(len(objects)):
            objects[i] = None
        clear_device_cache(garbage_collection=True)
        return objects

    def should_reduce_batch_size(exception):
        _statements = [
            " out of memory.",
            "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",
            "DefaultCPUAllocator: can't allocate memory",
            "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed",
        ]
        if isinstance(exception, RuntimeError) and len(exception.args) == 1:
            return any(err in exception.args[0] for err in _statements)
        return False

    def find_executable_batch_size(function=None, starting_batch_size=128):
        if function is None:
            return functools.partial(find_executable_batch_size,
                                     starting_batch_size=starting_batch_size)
        batch_size = starting_batch_size
        def reduce_batch_size_fn():
            nonlocal batch_size
            batch_size = int(batch_size * 0.9)
            return batch_size
        def decorator(*args, **kwargs):
            nonlocal batch_size
            clear_device_cache(garbage_collection=True)
            params = list(inspect.signature(function).parameters.keys())
            if len(params) < (len(args) + 1):
                raise TypeError("Batch size was passed into the function")
            while True:
                if batch_size == 0:
                    raise RuntimeError("No executable batch size found, reached zero.")
                try:
                    return function(batch_size, *args, **kwargs)
                except Exception as e:
                    if should_reduce_batch_size(e):
                        clear_device_cache(garbage_collection=True)
                        batch_size = reduce_batch_size_fn()
                    else:
                        raise
        return decorator

    tried = []
    @find_executable_batch_size(starting_batch_size=128)
    def train(batch_size, row_bytes):
        tried.append(batch_size)
        activations = acc.empty(batch_size * row_bytes, dtype="uint8")
        return batch_size, activations.nbytes

    # 1 MiB rows on a 64 MiB device where 2 MiB are held (in a 20 MiB segment, as torch
    # rounds an allocation between 1 and 10 MiB): 128 down to 46 fail, 41 (42 MiB) fits
    held = acc.empty(2 << 20, dtype="uint8")
    assert train(1 << 20) == (41, 41 << 20), tried
    assert tried == [128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41]
    assert cuda.memory_stats()["num_ooms"] == 10
    held, = release_memory(held)
    # the array is freed; its segment stays cached: the call's own arguments still held it
    # while release_memory emptied the cache (in torch as here)
    assert held is None and cuda.memory_allocated() == 0 and cuda.memory_reserved() > 0
    clear_device_cache()
    assert cuda.memory_reserved() == 0
    print("ok")
'''


def test_accelerate_find_executable_batch_size_reduces_by_a_tenth() -> None:
    # HF accelerate, src/accelerate/utils/memory.py (the current version; s32 ported the first,
    # which halved): accelrt's OutOfMemoryError is a one-argument RuntimeError whose message
    # holds " out of memory." ("CPU out of memory. Tried to allocate ..."), as torch's "CUDA out
    # of memory. Tried to allocate ..."
    assert _run(_BATCH_SIZE_SCRIPT, ACCELRT_CPU_MEMORY="64MiB") == ["ok"]


# ------------------------------------------------------------------ vLLM sleep mode

def _aligned_host_allocator() -> tuple[dict[int, np.ndarray], Callable[..., int],
                                      Callable[..., None]]:
    """alloc/free callables over numpy buffers, aligned to 512 bytes."""
    held: dict[int, np.ndarray] = {}

    def alloc(size: int, device: int, stream: int) -> int:
        buf = np.empty(size + ALIGN, np.uint8)
        ptr = (buf.ctypes.data + ALIGN - 1) // ALIGN * ALIGN
        held[ptr] = buf
        return ptr

    def free(ptr: int, size: int, device: int, stream: int) -> None:
        del held[ptr]

    return held, alloc, free


def test_vllm_mempool_of_a_pluggable_allocators_allocator_attribute() -> None:
    # vLLM, vllm/device_allocator/cumem.py use_memory_pool_with_allocator: the pool is made
    # from the pluggable allocator's `_allocator` attribute, the C++ allocator of torch 2.15's
    # _CUDAAllocator (torch/cuda/memory.py: `self._allocator = torch._C._cuda_customAllocator(
    # alloc_fn, free_fn)`; MemPool takes only that object). accelrt's PluggableAllocator had
    # allocator() but no _allocator: AttributeError before s38.
    held, alloc, free = _aligned_host_allocator()
    new_alloc = cuda.memory.CUDAPluggableAllocator.from_callables(alloc, free)
    assert new_alloc._allocator is new_alloc.allocator()
    mem_pool = cuda.memory.MemPool(new_alloc._allocator)
    assert mem_pool.allocator is new_alloc
    with cuda.memory.use_mem_pool(mem_pool):
        x = acc.full((1000,), 3.0)
    assert len(held) == 1 and x.tolist()[:2] == [3.0, 3.0]
    (segment,) = mem_pool.snapshot()
    assert segment["address"] in held and segment["allocated_size"] == 4096
    del x, mem_pool
    gc.collect()
    cuda.empty_cache()
    assert held == {}


_CUMEM_C = r"""
#include <stdlib.h>
#include <sys/types.h>

/* vLLM's csrc/cumem_allocator.cpp, reduced: my_malloc/my_free call back into Python with the
   allocation handle (device, size, pointer), the memory comes from posix_memalign here
   instead of cuMemCreate/cuMemMap */
typedef void (*malloc_cb_t)(int device, ssize_t size, void *ptr);
typedef void (*free_cb_t)(void *ptr);
static malloc_cb_t g_malloc_cb;
static free_cb_t g_free_cb;

void init_module(malloc_cb_t m, free_cb_t f) { g_malloc_cb = m; g_free_cb = f; }

void *my_malloc(ssize_t size, int device, void *stream) {
    void *p = NULL;
    if (posix_memalign(&p, 512, (size_t)size) != 0) return NULL;
    if (g_malloc_cb) g_malloc_cb(device, size, p);
    return p;
}

void my_free(void *ptr, ssize_t size, int device, void *stream) {
    if (g_free_cb) g_free_cb(ptr);
    free(ptr);
}
"""

_MALLOC_CB = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_ssize_t, ctypes.c_void_p)
_FREE_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@pytest.fixture(scope="module")
def cumem_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the allocator library")
    d = tmp_path_factory.mktemp("cumem")
    src, so = d / "cumem.c", d / "libcumem.so"
    src.write_text(_CUMEM_C)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(so), str(src)], check=True,
                   capture_output=True, timeout=120)
    return so


@dataclass
class AllocationData:
    handle: tuple[int, int, int]      # (device, size, pointer)
    tag: str
    cpu_backup: np.ndarray | None = None


class CuMemAllocator:
    """vLLM's vllm/device_allocator/cumem.py CuMemAllocator, adapted: cudaMemcpy becomes
    ctypes.memmove, unmap_and_release a memset to zero (the memory is gone)."""

    default_tag = "default"

    def __init__(self, lib_path: Path) -> None:
        self.lib_path = str(lib_path)
        self.pointer_to_data: dict[int, AllocationData] = {}
        self.current_tag = CuMemAllocator.default_tag
        self.allocator_and_pools: dict[str, Any] = {}
        self.freed: list[tuple[int, int, int]] = []
        # strong references to the callbacks (vLLM's comment: ephemeral bound methods)
        self._callbacks = (_MALLOC_CB(self._python_malloc_callback),
                           _FREE_CB(self._python_free_callback))
        ctypes.CDLL(self.lib_path).init_module(*self._callbacks)

    def _python_malloc_callback(self, device: int, size: int, ptr: int) -> None:
        self.pointer_to_data[ptr] = AllocationData((device, size, ptr), self.current_tag)

    def _python_free_callback(self, ptr: int) -> None:
        data = self.pointer_to_data.pop(ptr)
        # vLLM: drain pending kernels before the unmap, from inside the allocator's free
        cuda.synchronize(data.handle[0])
        self.freed.append(data.handle)

    @contextmanager
    def _use_memory_pool_with_allocator(self) -> Iterator[tuple[Any, Any]]:
        new_alloc = cuda.memory.CUDAPluggableAllocator(self.lib_path, "my_malloc", "my_free")
        mem_pool = cuda.memory.MemPool(new_alloc._allocator)
        with cuda.memory.use_mem_pool(mem_pool):
            yield mem_pool, new_alloc

    @contextmanager
    def use_memory_pool(self, tag: str | None = None) -> Iterator[None]:
        tag = CuMemAllocator.default_tag if tag is None else tag
        old_tag, self.current_tag = self.current_tag, tag
        try:
            with self._use_memory_pool_with_allocator() as data:
                self.allocator_and_pools[tag] = data
                yield
                # vLLM releases the pool's segments that hold no allocation itself (torch's
                # empty_cache does not with a pluggable allocator); it reads these two keys
                self.unused = [a["address"] for a in data[0].snapshot()
                               if a["allocated_size"] == 0]
        finally:
            self.current_tag = old_tag

    def sleep(self, offload_tags: tuple[str, ...] | str | None = None) -> None:
        if offload_tags is None:
            offload_tags = (CuMemAllocator.default_tag,)
        elif isinstance(offload_tags, str):
            offload_tags = (offload_tags,)
        for ptr, data in self.pointer_to_data.items():
            size = data.handle[1]
            if data.tag in offload_tags:
                data.cpu_backup = np.empty(size, np.uint8)
                ctypes.memmove(data.cpu_backup.ctypes.data, ptr, size)
            ctypes.memset(ptr, 0, size)                  # unmap_and_release
        gc.collect()
        cuda.empty_cache()

    def wake_up(self, tags: list[str] | None = None) -> None:
        for ptr, data in self.pointer_to_data.items():
            if (tags is None or data.tag in tags) and data.cpu_backup is not None:
                ctypes.memmove(ptr, data.cpu_backup.ctypes.data, data.handle[1])
                data.cpu_backup = None

    def get_current_usage(self) -> int:
        return sum(data.handle[1] for data in self.pointer_to_data.values())


def test_vllm_cumem_allocator_sleep_and_wake_up(cumem_lib: Path) -> None:
    # vLLM, vllm/device_allocator/cumem.py: weights and KV cache allocated in pools of a
    # CUDAPluggableAllocator (a compiled library calling back into Python), offloaded to the
    # host and discarded by sleep(), the weights brought back by wake_up(); the free callback
    # synchronizes the device from inside the allocator's free
    allocator = CuMemAllocator(cumem_lib)
    with allocator.use_memory_pool(tag="weights"):
        weights = acc.full((1000,), 3.0)
        scratch = acc.empty(3 * MiB, dtype="uint8")     # a large segment of its own, freed
        del scratch
    assert len(allocator.unused) == 1                   # the 20 MiB segment scratch was in
    with allocator.use_memory_pool(tag="kv_cache"):
        kv_cache = acc.full((2000,), 5.0)
    # one 2 MiB segment per pool and the unused 20 MiB one, all from the library
    assert allocator.get_current_usage() == 2 * (2 * MiB) + 20 * MiB
    assert {d.tag for d in allocator.pointer_to_data.values()} == {"weights", "kv_cache"}
    assert cuda.memory_allocated() >= 4000 + 8000

    cuda.synchronize()
    allocator.sleep(offload_tags=("weights",))
    assert weights.tolist()[:2] == [0.0, 0.0] and kv_cache.tolist()[:2] == [0.0, 0.0]
    allocator.wake_up()
    assert weights.tolist() == [3.0] * 1000             # offloaded and brought back
    assert kv_cache.tolist()[:2] == [0.0, 0.0]          # discarded

    # the pools go with their arrays: every segment goes back through my_free
    del weights, kv_cache
    allocator.allocator_and_pools.clear()
    gc.collect()
    cuda.empty_cache()
    assert allocator.pointer_to_data == {}
    assert sorted(h[1] for h in allocator.freed) == [2 * MiB, 2 * MiB, 20 * MiB]


# ------------------------------------------------------------------ Triton, torchtitan

def test_triton_do_bench_and_do_bench_cudagraph() -> None:
    # Triton, python/triton/testing.py: do_bench (events per repetition, an L2-flush buffer
    # zeroed before each call) and do_bench_cudagraph (capture in a side-stream context on the
    # graph's own capture stream, events around each replay)
    src = acc.full((1024,), 2.0)
    outs: list[acc.Array] = []

    def fn() -> acc.Array:
        out = acc.empty((1024,))
        out.copy_(src)
        return out

    di = cuda                                   # runtime.driver.active.get_device_interface()
    fn()
    di.synchronize()
    cache = acc.empty(int(8 * MiB // 4), dtype="int32")
    start_event = [di.Event(enable_timing=True) for _ in range(3)]
    end_event = [di.Event(enable_timing=True) for _ in range(3)]
    for i in range(3):
        cache.fill_(0)                          # clear_cache(cache): cache.zero_()
        start_event[i].record()
        fn()
        end_event[i].record()
    di.synchronize()
    times = [s.elapsed_time(e) for s, e in zip(start_event, end_event)]
    assert all(isinstance(t, float) and t >= 0 for t in times)

    n_repeat = 4
    with cuda.stream(cuda.Stream()):
        g = cuda.CUDAGraph()
        with cuda.graph(g):
            for _ in range(n_repeat):
                outs.append(fn())
        cuda.synchronize()
        ret = []
        for _ in range(2):
            s, e = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            s.record()
            g.replay()
            e.record()
            cuda.synchronize()
            ret.append(s.elapsed_time(e) / n_repeat)
    assert len(ret) == 2 and all(r >= 0 for r in ret)
    assert [o.tolist()[:1] for o in outs] == [[2.0]] * n_repeat
    assert g.pool()[0] > 0                      # the graph's private pool
    del outs, g, cache


def test_torchtitan_cuda_memory_tracker() -> None:
    # torchtitan, torchtitan/tools/cuda_memory_tracker.py CUDAMemoryTracker: current device
    # and its name, stats read with .get, the fragmentation it logs
    gc.collect()
    cuda.empty_cache()                           # what earlier tests cached is not counted
    device = cuda.current_device()
    assert cuda.get_device_name(device) == cuda.get_device_properties(device).name
    cuda.reset_peak_memory_stats(device)
    x = acc.empty(3 * MiB + 100, dtype="uint8")
    y = acc.empty(1000, dtype="uint8")
    del y                                        # an inactive split block of the small pool
    stats = cuda.memory_stats(device)
    pytorch_mem = {
        "reserved_bytes": cuda.memory_reserved(device),
        "allocated_bytes": cuda.memory_allocated(device),
        "active_bytes": stats.get("active_bytes.all.current", 0),
        "inactive_bytes": stats.get("inactive_split_bytes.all.current", 0),
        "peak_active_bytes": stats.get("active_bytes.all.peak", 0),
        "num_alloc_retries": stats.get("num_alloc_retries.all.current", 0),
        "num_ooms": stats.get("num_ooms.all.current", 0),
    }
    props = cuda.get_device_properties(device)
    assert props.total_memory == cuda.mem_get_info(device)[1]
    # torch's sizes: 3 MiB + 100 rounds up to 3 MiB + 512 in a 20 MiB segment, whose free
    # remainder is an inactive split block; 1000 bytes to 1024 in a 2 MiB segment, which is
    # whole again (no split) once y is freed
    assert pytorch_mem["allocated_bytes"] == pytorch_mem["active_bytes"] == 3 * MiB + 512
    assert pytorch_mem["reserved_bytes"] == 22 * MiB
    assert pytorch_mem["inactive_bytes"] == 20 * MiB - (3 * MiB + 512)
    assert pytorch_mem["peak_active_bytes"] == 3 * MiB + 512 + 1024
    # keys that are not in memory_stats() read as the default (torch has no such keys either)
    assert pytorch_mem["num_alloc_retries"] == pytorch_mem["num_ooms"] == 0
    fragmentation = pytorch_mem["reserved_bytes"] - pytorch_mem["allocated_bytes"]
    assert 0 < fragmentation / pytorch_mem["reserved_bytes"] < 1
    del x
    gc.collect()
    cuda.empty_cache()
