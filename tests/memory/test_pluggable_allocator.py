"""Pluggable allocators: a C library compiled here (PyTorch's ``alloc``/``free`` signatures),
or two Python callables, replacing a backend's allocator or under a ``MemPool``."""

from __future__ import annotations

import ctypes
import itertools
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt import backends, memory
from accelrt.backends.cpu import CpuBackend
from accelrt.memory._allocator import get_allocator
from accelrt.memory._config import parse_config
from tests.helpers.pluggable import numpy_allocator

MiB = 1 << 20

C_SOURCE = r"""
#include <stdlib.h>
#include <sys/types.h>

static long n_alloc, n_free, fail_next;
static long last_device = -1, last_free_device = -1;
static ssize_t last_size = -1, last_free_size = -1, live_bytes;
static void *last_stream, *last_free_stream, *last_ptr, *last_free_ptr;

void *plug_alloc(ssize_t size, int device, void *stream) {
    void *p = NULL;
    n_alloc++; last_size = size; last_device = device; last_stream = stream;
    if (fail_next > 0) { fail_next--; return NULL; }
    if (posix_memalign(&p, 256, (size_t)size) != 0) return NULL;
    live_bytes += size; last_ptr = p;
    return p;
}

void plug_free(void *ptr, ssize_t size, int device, void *stream) {
    n_free++; last_free_ptr = ptr; last_free_size = size; last_free_device = device;
    last_free_stream = stream; live_bytes -= size;
    free(ptr);
}

long get_n_alloc(void) { return n_alloc; }
long get_n_free(void) { return n_free; }
long get_last_device(void) { return last_device; }
long get_last_free_device(void) { return last_free_device; }
ssize_t get_last_size(void) { return last_size; }
ssize_t get_last_free_size(void) { return last_free_size; }
ssize_t get_live_bytes(void) { return live_bytes; }
void *get_last_stream(void) { return last_stream; }
void *get_last_free_stream(void) { return last_free_stream; }
void *get_last_ptr(void) { return last_ptr; }
void *get_last_free_ptr(void) { return last_free_ptr; }
void set_fail_next(long n) { fail_next = n; }

/* a broken library: its addresses are 8 bytes past malloc's alignment */
void *plug_alloc_off8(ssize_t size, int device, void *stream) {
    char *p = plug_alloc(size + 8, device, stream);
    return p ? p + 8 : NULL;
}

void plug_free_off8(void *ptr, ssize_t size, int device, void *stream) {
    plug_free((char *)ptr - 8, size + 8, device, stream);
}
"""


class Lib:
    """The compiled library's counters, read through its own getters."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self._lib = ctypes.CDLL(self.path)     # the same handle the allocator gets
        for name in ("get_last_stream", "get_last_free_stream", "get_last_ptr",
                     "get_last_free_ptr"):
            getattr(self._lib, name).restype = ctypes.c_void_p
        for name in ("get_last_size", "get_last_free_size", "get_live_bytes"):
            getattr(self._lib, name).restype = ctypes.c_ssize_t
        for name in ("get_n_alloc", "get_n_free", "get_last_device", "get_last_free_device"):
            getattr(self._lib, name).restype = ctypes.c_long
        self._lib.set_fail_next.argtypes = [ctypes.c_long]

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._lib, "get_" + name)()
        return 0 if value is None else value

    def fail_next(self, n: int) -> None:
        self._lib.set_fail_next(n)

    def allocator(self) -> memory.PluggableAllocator:
        return memory.PluggableAllocator(self.path, "plug_alloc", "plug_free")


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Lib:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the test allocator library")
    d = tmp_path_factory.mktemp("plug")
    src, so = d / "plug.c", d / "libplug.so"
    src.write_text(C_SOURCE)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(so), str(src)], check=True,
                   capture_output=True, timeout=120)
    return Lib(so)


_names = itertools.count()


def _fresh_backend(async_streams: bool, **kw: Any) -> str:
    """A new cpu backend (2 devices) under a new name: its allocator is not initialized yet
    (closed and unregistered after the test, by tests/conftest.py)."""
    name = f"plug{next(_names)}"
    backends.register(name, lambda: CpuBackend(num_devices=2, async_streams=async_streams,
                                                name=name, **kw), replace=True)
    return name


@pytest.fixture(params=[False, True], ids=["sync", "async"])
def fresh(request: pytest.FixtureRequest) -> str:
    return _fresh_backend(bool(request.param))


# ---------------------------------------------------------------------- MemPool(allocator=)

def test_mempool_segments_come_from_the_library(lib: Lib, fresh: str) -> None:
    dev = f"{fresh}:1"
    pool = memory.MemPool(allocator=lib.allocator())
    assert pool.allocator is not None
    n_alloc, n_free = lib.n_alloc, lib.n_free
    s = acc.Stream(dev)
    with s, memory.use_mem_pool(pool, dev):
        x = acc.empty(1000, dtype="int32", device=dev)
    assert lib.n_alloc == n_alloc + 1
    ptr = lib.last_ptr
    assert x.data_ptr() == ptr                         # the block starts the library's segment
    assert lib.last_size == 2 * MiB                    # the caching allocator's segment size
    assert lib.last_device == 1
    assert lib.last_stream == s.stream_id              # the stream the memory is for
    with s:
        x.copy_(np.arange(1000, dtype=np.int32))       # really used: written and read back
        assert x.tolist() == list(range(1000))
        x.fill_(-3)
        assert set(x.tolist()) == {-3}
    assert [seg["segment_pool_id"] for seg in pool.snapshot()] == [pool.id]
    del x
    acc.synchronize(dev)
    assert lib.n_free == n_free                        # cached, not freed
    del pool
    acc.set_current_accelerator(fresh)
    memory.empty_cache()
    assert lib.n_free == n_free + 1
    assert (lib.last_free_ptr, lib.last_free_size, lib.last_free_device,
            lib.last_free_stream) == (ptr, 2 * MiB, 1, s.stream_id)
    assert memory.memory_reserved(dev) == 0


def test_null_from_the_library_is_out_of_memory(lib: Lib, fresh: str) -> None:
    # As in torch 2.15, a pool in use (use_mem_pool, not a graph capture) reclaims cached
    # memory: after the library's NULL the allocator empties the cache and asks the library
    # again (its malloc retries unless is_capture_context()); a second NULL raises
    # OutOfMemoryError with its usual message and statistics.
    dev = f"{fresh}:0"
    pool = memory.MemPool(allocator=lib.allocator())
    a = get_allocator(backends.get_backend(fresh), 0)
    lib.fail_next(2)
    n_alloc, live = lib.n_alloc, lib.live_bytes
    with memory.use_mem_pool(pool, dev), pytest.raises(
            acc.OutOfMemoryError, match=rf"{fresh.upper()} out of memory. Tried to allocate 4.00 KiB\. "
                                        r".* The custom allocator backing this MemPool "
                                        r"returned nullptr\. .* new 2.00 MiB segment for the "
                                        r"4.00 KiB request") as info:
        memory.caching_allocator_alloc(4096, dev)   # the size asked for, then the segment
    # torch 2.15 names the pool's allocator; the backend's advice (more device memory) is left
    # out, as it does not apply to the library's NULL
    assert "ACCELRT_CPU_MEMORY" not in str(info.value)
    assert lib.n_alloc == n_alloc + 2 and lib.live_bytes == live
    stats = a.stats()
    assert stats["num_ooms"] == 1 and stats["segment.all.current"] == 0
    assert stats["num_alloc_retries"] == stats["num_sync_all_streams"] == 1
    lib.fail_next(1)
    with memory.use_mem_pool(pool, dev):               # one NULL: the retry gets the memory
        p = memory.caching_allocator_alloc(4096, dev)
    assert lib.n_alloc == n_alloc + 4 and p == lib.last_ptr
    assert a.stats()["num_alloc_retries"] == 2 and a.stats()["num_ooms"] == 1
    memory.caching_allocator_delete(p)
    del pool
    acc.set_current_accelerator(fresh)
    memory.empty_cache()
    assert memory.memory_reserved(dev) == 0 and lib.live_bytes == live


def test_an_oom_outside_a_pluggable_pool_does_not_name_one(fresh: str) -> None:
    dev = f"{fresh}:0"
    with pytest.raises(acc.OutOfMemoryError) as info:
        memory.caching_allocator_alloc(1 << 50, dev)
    assert "MemPool" not in str(info.value) and "nullptr" not in str(info.value)
    pool = memory.MemPool()                       # a pool of the backend's own memory
    with memory.use_mem_pool(pool, dev), pytest.raises(acc.OutOfMemoryError) as info:
        memory.caching_allocator_alloc(1 << 50, dev)
    assert "MemPool" not in str(info.value)


def test_pool_with_allocator_and_expandable_segments_uses_the_library(lib: Lib) -> None:
    name = _fresh_backend(False)
    dev = f"{name}:0"
    a = get_allocator(backends.get_backend(name), 0)
    a.set_config(parse_config("expandable_segments:True"))   # this device only
    pool = memory.MemPool(allocator=lib.allocator())
    n_alloc = lib.n_alloc
    with memory.use_mem_pool(pool, dev):
        x = acc.zeros(64, device=dev)
    y = acc.zeros(64, device=dev)                       # outside the pool: expandable
    assert lib.n_alloc == n_alloc + 1 and x.data_ptr() == lib.last_ptr
    assert x.tolist() == [0.0] * 64
    assert [s["is_expandable"] for s in pool.snapshot()] == [False]
    assert y.data_ptr() != lib.last_ptr
    del x, y, pool
    a.empty_cache()


# ---------------------------------------------------------------------- change_current_allocator

def test_replacing_allocator_sends_every_malloc_and_free_to_the_library(lib: Lib,
                                                                        fresh: str) -> None:
    memory.change_current_allocator(lib.allocator(), fresh)
    assert memory.get_allocator_backend(fresh) == "pluggable"
    assert memory.get_allocator_backend("cpu") == "native"
    dev = f"{fresh}:1"
    n_alloc, n_free = lib.n_alloc, lib.n_free
    with acc.Stream(dev) as s:
        x = acc.full(10, 7, dtype="int32", device=dev)
        assert x.tolist() == [7] * 10
    assert lib.n_alloc == n_alloc + 1
    assert (lib.last_ptr, lib.last_size, lib.last_device, lib.last_stream) == \
        (x.data_ptr(), 40, 1, s.stream_id)            # the exact size: no caching, no rounding
    ptr = x.data_ptr()
    del x
    assert lib.n_free == n_free + 1                    # freed at once, not cached
    assert (lib.last_free_ptr, lib.last_free_size, lib.last_free_device,
            lib.last_free_stream) == (ptr, 40, 1, s.stream_id)
    p = memory.caching_allocator_alloc(100, dev)
    memory.caching_allocator_delete(p)
    assert lib.n_free == n_free + 2


def test_replacing_allocator_statistics_raise_as_pytorch(lib: Lib) -> None:
    name = _fresh_backend(False)
    memory.change_current_allocator(lib.allocator(), name)
    dev = f"{name}:0"
    x = acc.zeros(4, device=dev)
    for fn in (memory.memory_stats, memory.memory_allocated, memory.max_memory_reserved,
               memory.memory_reserved, memory.max_memory_allocated):
        with pytest.raises(RuntimeError, match="does not yet support getDeviceStats"):
            fn(dev)
    with pytest.raises(RuntimeError, match="does not yet support resetPeakStats"):
        memory.reset_peak_memory_stats(dev)
    with pytest.raises(RuntimeError, match="does not yet support recordHistory"):
        memory.record_memory_history("all", device=dev)
    acc.set_current_accelerator(name)
    with pytest.raises(RuntimeError, match="does not yet support snapshot"):
        memory.memory_snapshot()
    memory.empty_cache()                               # nothing cached: nothing to do
    memory.set_per_process_memory_fraction(0.5, dev)   # as PyTorch: ignored
    assert x.tolist() == [0.0] * 4
    del x


def test_replacing_allocator_null_is_out_of_memory(lib: Lib) -> None:
    name = _fresh_backend(True)
    memory.change_current_allocator(lib.allocator(), name)
    lib.fail_next(1)
    with pytest.raises(acc.OutOfMemoryError, match=r"out of memory.*returned NULL"):
        acc.empty(1000, device=f"{name}:0")
    lib.fail_next(0)
    live = lib.live_bytes
    y = acc.empty(1000, device=f"{name}:0")
    assert lib.live_bytes == live + 4000
    del y
    acc.synchronize(f"{name}:0")
    assert lib.live_bytes == live


def test_swapping_an_initialized_allocator_raises(lib: Lib) -> None:
    name = _fresh_backend(False)
    acc.zeros(1, device=f"{name}:1")                   # the native allocator is initialized
    with pytest.raises(RuntimeError, match="Can't swap an already initialized allocator"):
        memory.change_current_allocator(lib.allocator(), name)
    assert memory.get_allocator_backend(name) == "native"
    other = _fresh_backend(False)
    memory.change_current_allocator(lib.allocator(), other)
    with pytest.raises(RuntimeError, match="Can't swap an already initialized allocator"):
        memory.change_current_allocator(lib.allocator(), other)


def test_current_accelerator_is_the_default_device_type(lib: Lib) -> None:
    name = _fresh_backend(False)
    acc.set_current_accelerator(name)
    assert memory.get_allocator_backend() == "native"
    memory.change_current_allocator(lib.allocator())
    assert memory.get_allocator_backend() == "pluggable"
    assert memory.get_allocator_backend(name) == "pluggable"


# ---------------------------------------------------------------------- Python callables

def test_from_callables_receives_the_c_arguments() -> None:
    calls: list[tuple[Any, ...]] = []
    held: dict[int, np.ndarray] = {}

    def alloc(size: int, device: int, stream: int) -> int:
        buf = np.zeros(size, np.uint8)
        held[buf.ctypes.data] = buf
        calls.append(("alloc", size, device, stream))
        return int(buf.ctypes.data)

    def free(ptr: int, size: int, device: int, stream: int) -> None:
        calls.append(("free", ptr in held, size, device, stream))
        del held[ptr]

    name = _fresh_backend(True)
    memory.change_current_allocator(memory.PluggableAllocator.from_callables(alloc, free), name)
    s = acc.Stream(f"{name}:1")
    with s:
        x = acc.asarray(np.arange(6, dtype=np.int16), device=f"{name}:1", copy=True)
        assert x.tolist() == list(range(6))
    del x
    assert calls == [("alloc", 12, 1, s.stream_id), ("free", True, 12, 1, s.stream_id)]
    assert held == {}


def test_allocator_method_is_what_mempool_and_the_switch_take() -> None:
    # torch's idiom: MemPool(CUDAPluggableAllocator(...).allocator()) and
    # change_current_allocator(alloc); allocator() is the object the pool allocates through
    a, held = numpy_allocator()
    assert isinstance(a, acc.cpu.CUDAPluggableAllocator)
    assert a.allocator() is a
    name = _fresh_backend(False)
    pool = memory.MemPool(a.allocator())
    assert pool.allocator is a
    with memory.use_mem_pool(pool, f"{name}:0"):
        x = acc.zeros(8, device=f"{name}:0")
    assert held and x.data_ptr() in held
    del x, pool
    acc.set_current_accelerator(name)
    memory.empty_cache()
    assert held == {}


# ---------------------------------------------------------------------- hostile inputs

def test_missing_file_symbol_and_bad_types(lib: Lib, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot load the pluggable allocator library"):
        memory.PluggableAllocator(str(tmp_path / "missing.so"), "plug_alloc", "plug_free")
    (tmp_path / "not_a_lib.so").write_text("hello")
    with pytest.raises(ValueError, match="cannot load"):
        memory.PluggableAllocator(tmp_path / "not_a_lib.so", "plug_alloc", "plug_free")
    with pytest.raises(ValueError, match="no alloc function 'nope'"):
        memory.PluggableAllocator(lib.path, "nope", "plug_free")
    with pytest.raises(ValueError, match="no free function 'gone'"):
        memory.PluggableAllocator(lib.path, "plug_alloc", "gone")
    with pytest.raises(TypeError, match="alloc_fn_name"):
        memory.PluggableAllocator(lib.path, None, "plug_free")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="path_to_so_file"):
        memory.PluggableAllocator(3, "plug_alloc", "plug_free")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="alloc must be callable"):
        memory.PluggableAllocator.from_callables(5, lambda *a: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="free must be callable"):
        memory.PluggableAllocator.from_callables(lambda *a: 0, "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="PluggableAllocator"):
        memory.change_current_allocator("libplug.so")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="PluggableAllocator"):
        memory.MemPool(allocator=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="device_type"):
        memory.get_allocator_backend(0)  # type: ignore[arg-type]
    with pytest.raises(acc.BackendUnavailableError):
        memory.change_current_allocator(lib.allocator(), "nosuchbackend")


def test_alloc_returning_garbage_is_a_clear_error() -> None:
    name = _fresh_backend(False)
    plug = memory.PluggableAllocator.from_callables(lambda *a: "0x10", lambda *a: None)
    memory.change_current_allocator(plug, name)
    with pytest.raises(TypeError, match="must return an address"):
        acc.empty(4, device=f"{name}:0")


def test_misaligned_address_from_a_library_goes_back_to_its_free(lib: Lib) -> None:
    name = _fresh_backend(False)
    plug = memory.PluggableAllocator(lib.path, "plug_alloc_off8", "plug_free_off8")
    memory.change_current_allocator(plug, name)
    n_alloc, n_free, live = lib.n_alloc, lib.n_free, lib.live_bytes
    with pytest.raises(ValueError, match=rf"libplug.so:plug_alloc_off8/plug_free_off8 returned "
                                         rf"\[0x[0-9a-f]+8, 0x[0-9a-f]+\) \(40 bytes\) for "
                                         rf"{name}:0, which is not aligned to 16 bytes"):
        acc.zeros(10, dtype="int32", device=f"{name}:0")
    assert (lib.n_alloc, lib.n_free, lib.live_bytes) == (n_alloc + 1, n_free + 1, live)
    assert plug._live_count() == 0


def test_freeing_a_foreign_pointer_is_refused(lib: Lib) -> None:
    name = _fresh_backend(False)
    memory.change_current_allocator(lib.allocator(), name)
    a = get_allocator(backends.get_backend(name), 0)
    with pytest.raises(ValueError, match="Trying to free a pointer not allocated here"):
        a.free(12345)


# ---------------------------------------------------------------------- what alloc returns

CRASH = """
    import sys
    import numpy as np
    import accelrt as acc
    from accelrt import backends, memory
    from accelrt.backends.cpu import CpuBackend

    where, bad = sys.argv[1], int(sys.argv[2], 0)
    backends.register("plugcrash", lambda: CpuBackend(num_devices=2, name="plugcrash"))
    freed = []

    def alloc(size, device, stream):
        return bad

    def free(ptr, size, device, stream):
        freed.append(ptr)

    plug = memory.PluggableAllocator.from_callables(alloc, free)
    if where == "replace":
        memory.change_current_allocator(plug, "plugcrash")
    pool = memory.MemPool(allocator=plug)
    try:
        with memory.use_mem_pool(pool, "plugcrash:1"):
            x = acc.empty(1024, dtype="uint8", device="plugcrash:1")
        x.fill_(1)               # the memory is used: a bad address crashed here
        print("USED", x.tolist()[:1])
    except ValueError as e:
        print("REFUSED", freed, e)
"""


@pytest.mark.parametrize("where", ["replace", "mempool"])
@pytest.mark.parametrize("bad", [hex((1 << 64) + 4096), hex((1 << 64) - 256)],
                         ids=["beyond-2**64", "wraps-past-2**64"])
def test_alloc_returning_no_usable_address_is_refused_before_any_use(where: str,
                                                                     bad: str) -> None:
    # an address at or beyond 2**64, or a range running past it, once crashed the interpreter
    # in the first fill_ (the address reached memset); it is refused before any use, with an
    # error naming the allocator and the device, and not handed to free (no memory there)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CRASH), where, bad],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert proc.stdout.startswith("REFUSED [] the pluggable allocator <callables alloc/free> "
                                  "returned "), proc.stdout
    assert "for plugcrash:1, which" in proc.stdout
    assert "2**64" in proc.stdout and "alloc must return" in proc.stdout


class Hostile:
    """A Python allocator holding real memory, whose next alloc returns ``self.ret(ptr)``
    (the good address by default) and which records every call."""

    def __init__(self) -> None:
        self.held: dict[int, np.ndarray] = {}
        self.freed: list[tuple[int, int, int, int]] = []
        self.ret: Any = None            # None: return the address; else ret(address) -> value
        self.raise_in_free: BaseException | None = None

    def alloc(self, size: int, device: int, stream: int) -> Any:
        buf = np.zeros(size + 256, np.uint8)
        ptr = (buf.ctypes.data + 255) // 256 * 256
        ret, self.ret = self.ret, None
        if ret is not None:
            value = ret(ptr)
            if isinstance(value, BaseException):
                raise value
            if not (isinstance(value, (int, np.integer)) and not isinstance(value, bool)
                    and value == ptr):
                return value          # a bad value: nothing of it is kept
            self.held[ptr] = buf
            return value
        self.held[ptr] = buf
        return ptr

    def free(self, ptr: int, size: int, device: int, stream: int) -> None:
        self.freed.append((ptr, size, device, stream))
        if ptr in self.held:
            del self.held[ptr]
        exc, self.raise_in_free = self.raise_in_free, None
        if exc is not None:
            raise exc

    def allocator(self) -> memory.PluggableAllocator:
        return memory.PluggableAllocator.from_callables(self.alloc, self.free)


NO_ADDRESS = {   # what alloc returns instead of address p -> (error, message)
    "None": (lambda p: None, TypeError,
             r"returned None for plug\d+:1 \(a missing return statement\?\)"),
    "float": (float, TypeError,
              (r"returned \d+\.0 for plug\d+:1; its alloc must return an address \(an int, 0 "
               r"for out of memory\)")),
    "bool": (lambda p: True, TypeError, r"returned True for plug\d+:1"),
    "str": (lambda p: "0x1000", TypeError, r"returned '0x1000'"),
    "negative": (lambda p: -4096, ValueError,
                 r"returned -0x1000 for plug\d+:1, which is not an address"),
    "2**64": (lambda p: 1 << 64, ValueError,
              (r"returned 0x10000000000000000 for plug\d+:1, which is not an address \(a void\* "
               r"lies in \[0, 2\*\*64\)\)")),
    "wraps": (lambda p: (1 << 64) - 512, ValueError,
              (r"returned \[0xfffffffffffffe00, 0x1[0-9a-f]+\) \(\d+ bytes\) for plug\d+:1, "
               r"which runs past the end of the 64-bit address space")),
}


@pytest.mark.parametrize(("ret", "error", "match"), NO_ADDRESS.values(), ids=NO_ADDRESS.keys())
@pytest.mark.parametrize("where", ["replace", "mempool"])
def test_alloc_returning_no_address_is_refused_and_not_freed(ret: Any, error: type,
                                                             match: str, where: str) -> None:
    h = Hostile()
    name = _fresh_backend(False)
    dev = f"{name}:1"
    plug = h.allocator()
    if where == "replace":
        memory.change_current_allocator(plug, name)
    pool = memory.MemPool(allocator=plug)
    h.ret = ret
    with memory.use_mem_pool(pool, dev), pytest.raises(error, match=match) as info:
        acc.empty(1000, dtype="uint8", device=dev)
    assert "<callables alloc/free>" in str(info.value)
    assert h.freed == [] and h.held == {} and plug._live_count() == 0
    with memory.use_mem_pool(pool, dev):              # the allocator still works
        x = acc.full(1000, 3, dtype="uint8", device=dev)
    assert x.tolist() == [3] * 1000 and x.data_ptr() in h.held
    del x, pool
    acc.set_current_accelerator(name)
    memory.empty_cache()
    assert h.held == {} and plug._live_count() == 0


def test_numpy_integer_addresses_are_accepted() -> None:
    h = Hostile()
    name = _fresh_backend(False)
    memory.change_current_allocator(h.allocator(), name)
    h.ret = np.uint64
    x = acc.full(8, 5, dtype="int32", device=f"{name}:0")
    assert x.tolist() == [5] * 8 and x.data_ptr() in h.held
    assert type(x.data_ptr()) is int
    del x
    assert h.held == {}


def _stats(name: str, index: int) -> dict[str, int]:
    return dict(get_allocator(backends.get_backend(name), index).stats())


def test_misaligned_address_is_handed_back_to_free_and_stats_do_not_move() -> None:
    h = Hostile()
    name = _fresh_backend(False)
    dev = f"{name}:1"
    plug = h.allocator()
    pool = memory.MemPool(allocator=plug)
    with memory.use_mem_pool(pool, dev):
        keep = acc.zeros(4, device=dev)                # a live segment: stats are not empty
    before = _stats(name, 1)
    misaligned: list[int] = []

    def off_by_8(p: int) -> int:
        misaligned.append(p + 8)
        h.held[p + 8] = np.zeros(1)                    # what its free will give back
        return p + 8

    h.ret = off_by_8
    with memory.use_mem_pool(pool, dev), pytest.raises(
            ValueError, match=rf"for {name}:1, which is not aligned to 16 bytes .*\(handed back "
                              r"to its free\); alloc must return the address of 20971520 "
                              r"bytes"):
        acc.empty(4 * MiB, dtype="uint8", device=dev)  # a new 20 MiB segment: alloc is called
    assert h.freed == [(misaligned[0], 20 * MiB, 1, 0)]
    assert _stats(name, 1) == before                   # nothing counted, nothing lost
    assert plug._live_count() == 1
    del keep, pool
    acc.set_current_accelerator(name)
    memory.empty_cache()
    assert h.held == {} and plug._live_count() == 0


@pytest.mark.parametrize("same_device", [True, False], ids=["same-device", "other-device"])
def test_range_overlapping_live_memory_is_refused_naming_allocator_and_device(
        same_device: bool) -> None:
    # the same memory handed out twice: refused (not adopted, not counted, not given to free,
    # which would free the live block), naming this allocator and device, and the live range's
    h = Hostile()
    name = _fresh_backend(False)
    plug = h.allocator()
    pool = memory.MemPool(allocator=plug)
    with memory.use_mem_pool(pool, f"{name}:1"):
        x = acc.full(1000, 7, dtype="int32", device=f"{name}:1")
    seg = x.data_ptr()
    dev = f"{name}:1" if same_device else f"{name}:0"
    index = int(dev[-1])
    before = _stats(name, index)
    h.ret = lambda p: seg + 4096
    with memory.use_mem_pool(pool, dev), pytest.raises(
            ValueError, match=rf"<callables alloc/free> returned \[{seg + 4096:#x}, "
                              rf"{seg + 4096 + 20 * MiB:#x}\) \(20971520 bytes\) for {dev}, "
                              rf"which overlaps \[{seg:#x}, {seg + 2 * MiB:#x}\), which the "
                              rf"pluggable allocator <callables alloc/free> returned for {name}:1 "
                              r"and is still allocated \(not handed back to free"):
        acc.empty(4 * MiB, dtype="uint8", device=dev)  # a new 20 MiB segment: alloc is called
    assert h.freed == [] and _stats(name, index) == before
    assert x.tolist() == [7] * 1000                    # the live block is untouched
    del x, pool
    acc.set_current_accelerator(name)
    memory.empty_cache()
    assert h.held == {} and plug._live_count() == 0


def test_range_overlapping_the_devices_own_memory_is_refused_naming_the_device() -> None:
    h = Hostile()
    name = _fresh_backend(False)
    dev = f"{name}:1"
    own = acc.zeros(1 << 18, dtype="uint8", device=dev)    # the caching allocator's memory
    pool = memory.MemPool(allocator=h.allocator())
    addr = own.data_ptr()
    h.ret = lambda p: addr
    with memory.use_mem_pool(pool, dev), pytest.raises(
            ValueError, match=rf"returned \[{addr:#x}, .* for {dev}, which the "
                              r"device refused \(adopt: .*overlaps memory"):
        acc.empty(10, device=dev)
    assert h.freed == []
    del own, pool


def test_alloc_that_raises_propagates_and_changes_nothing() -> None:
    h = Hostile()
    name = _fresh_backend(False)
    dev = f"{name}:0"
    plug = h.allocator()
    pool = memory.MemPool(allocator=plug)
    before = _stats(name, 0)
    boom = KeyError("allocator exhausted")
    h.ret = lambda p: boom
    with memory.use_mem_pool(pool, dev), pytest.raises(KeyError) as info:
        acc.empty(10, device=dev)
    assert info.value is boom
    assert _stats(name, 0) == before and plug._live_count() == 0 and h.freed == []
    with memory.use_mem_pool(pool, dev):
        y = acc.full(3, 1.0, device=dev)
    assert y.tolist() == [1.0] * 3
    del y, pool


def test_free_that_raises_propagates_and_the_memory_is_given_back() -> None:
    # the pointer went to free: accelrt no longer counts or uses it, whatever free did
    h = Hostile()
    name = _fresh_backend(False)
    dev = f"{name}:0"
    plug = h.allocator()
    pool = memory.MemPool(allocator=plug)
    with memory.use_mem_pool(pool, dev):
        x = acc.zeros(4, device=dev)
    del pool                                           # x keeps the segment until empty_cache
    del x
    assert memory.memory_reserved(dev) == 2 * MiB
    h.raise_in_free = OSError("free failed")
    acc.set_current_accelerator(name)
    with pytest.raises(OSError, match="free failed"):
        memory.empty_cache()
    assert memory.memory_reserved(dev) == 0 and plug._live_count() == 0
    stats = _stats(name, 0)
    assert stats["segment.all.current"] == 0 and stats["reserved_bytes.all.current"] == 0
    memory.empty_cache()                               # consistent: nothing left to free
    assert len(h.freed) == 1

    other = _fresh_backend(False)                      # the replacing allocator: the same
    memory.change_current_allocator(plug, other)
    p = memory.caching_allocator_alloc(64, f"{other}:0")
    h.raise_in_free = OSError("free failed")
    with pytest.raises(OSError, match="free failed"):
        memory.caching_allocator_delete(p)
    assert plug._live_count() == 0
    with pytest.raises(ValueError, match="already deleted"):
        memory.caching_allocator_delete(p)


def test_free_that_raises_in_a_collected_mempool_still_releases_every_device(
        caplog: pytest.LogCaptureFixture) -> None:
    h = Hostile()
    name = _fresh_backend(False)
    plug = h.allocator()
    pool = memory.MemPool(allocator=plug)
    for i in (0, 1):
        with memory.use_mem_pool(pool, f"{name}:{i}"):
            acc.zeros(4, device=f"{name}:{i}")
    assert plug._live_count() == 2
    h.raise_in_free = OSError("free failed")
    with caplog.at_level("ERROR", logger="accelrt.memory"):
        del pool                                       # the finalizer gives both back
    errors = [r.exc_info[1] for r in caplog.records if r.exc_info]
    assert len(errors) == 1 and isinstance(errors[0], OSError)   # reported once, not raised
    assert "free failed" in caplog.text and "MemPool" in caplog.text
    assert len(h.freed) == 2 and plug._live_count() == 0 and h.held == {}
    assert [memory.memory_reserved(f"{name}:{i}") for i in (0, 1)] == [0, 0]
