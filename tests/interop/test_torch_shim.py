"""accelrt.interop.torch: the shim for PyTorch's CUDAPluggableAllocator, driven through its
exported symbols with ctypes on the cpu backend (no torch, no GPU), the DLPack import that
``from_torch`` uses, and, where torch is installed, the round trips with real tensors."""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends
from helpers.shim import shim_forwarding_to

import accelrt as acc
from accelrt import backends
from accelrt.backends.cpu import CpuBackend
from accelrt.interop import _shim
from accelrt.memory._allocator import get_allocator

NAME = "shimcpu"
# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({NAME: lambda: CpuBackend(num_devices=2, memory_limit="64MiB",
                                                      async_streams=True, name=NAME)})

needs_shim = pytest.mark.skipif(_shim.shim_path() is None,
                                reason="the shim was not built (no C++ compiler at install)")
pytestmark = needs_shim


@pytest.fixture
def lib() -> Iterator[Any]:
    """The shim forwarding to the ``shimcpu`` backend's allocators; emptied afterwards."""
    with shim_forwarding_to(NAME, 2) as shim:
        yield shim


def _alloc(name: str = NAME, index: int = 0) -> Any:
    return get_allocator(backends.get_backend(name), index)


def test_exports_torchs_signatures() -> None:
    """The library loads as PyTorch loads it (ctypes.CDLL + getattr by name), exports the two
    functions CUDAPluggableAllocator is given, and needs no Python symbols."""
    path = _shim.shim_path()
    assert path is not None
    cdll = ctypes.CDLL(path)
    for name in (_shim.MALLOC, _shim.FREE, "accelrt_torch_set_callbacks",
                 "accelrt_torch_set_error"):
        assert ctypes.cast(getattr(cdll, name), ctypes.c_void_p).value
    # not a Python extension module: no module init function, no libpython symbols used
    with open(path, "rb") as f:
        data = f.read()
    assert b"PyInit_" not in data and b"PyGILState" not in data


def test_malloc_is_null_before_callbacks_are_installed() -> None:
    """A fresh process (nothing installed): malloc returns NULL, free does nothing."""
    code = (
        "import ctypes, sys\n"
        "lib = ctypes.CDLL(sys.argv[1])\n"
        "lib.accelrt_torch_malloc.restype = ctypes.c_void_p\n"
        "lib.accelrt_torch_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]\n"
        "lib.accelrt_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,\n"
        "                                   ctypes.c_void_p]\n"
        "assert lib.accelrt_torch_malloc(1024, 0, None) is None\n"
        "lib.accelrt_torch_free(0x1000, 1024, 0, None)\n"
        "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code, str(_shim.shim_path())],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_malloc_free_forward_sizes_devices_streams(lib: Any) -> None:
    b = backends.get_backend(NAME)
    s1 = acc.Stream(f"{NAME}:1")
    before = [_alloc(NAME, i).stats()["allocation.all.allocated"] for i in range(2)]
    p0 = lib.accelrt_torch_malloc(1000, 0, None)              # NULL stream: the default one
    p1 = lib.accelrt_torch_malloc(3 << 20, 1, s1.native_handle)
    assert p0 and p1
    a0, a1 = _alloc(NAME, 0), _alloc(NAME, 1)
    assert a0.memory_allocated() == 1024 and a1.memory_allocated() == 3 << 20
    assert a0.stats()["allocation.all.allocated"] == before[0] + 1
    assert a1.stats()["requested_bytes.all.current"] == 3 << 20
    segs = {s["device"]: s for s in a1.snapshot_segments() if s["blocks"][0]["state"]
            == "active_allocated"}
    assert segs[1]["stream"] == s1.native_handle                  # on PyTorch's stream
    assert [s["stream"] for s in a0.snapshot_segments()] == [b.default_stream(0)]
    lib.accelrt_torch_free(p1, 3 << 20, 1, s1.native_handle)
    lib.accelrt_torch_free(p0, 1000, 0, None)
    assert a0.memory_allocated() == 0 and a1.memory_allocated() == 0
    # stream-ordered reuse: the freed block comes back for the same stream
    assert lib.accelrt_torch_malloc(3 << 20, 1, s1.native_handle) == p1
    lib.accelrt_torch_free(p1, 3 << 20, 1, s1.native_handle)
    s1.close()


def test_out_of_memory_returns_null_and_is_logged(lib: Any,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    a = _alloc()
    ooms = a.stats()["num_ooms"]
    with caplog.at_level(logging.WARNING, logger="accelrt.memory"):
        assert lib.accelrt_torch_malloc(128 << 20, 0, None) is None   # the device has 64 MiB
    assert a.stats()["num_ooms"] == ooms + 1
    assert any("out of memory" in r.getMessage() for r in caplog.records)
    a.set_memory_fraction(0.25)           # a fraction limits PyTorch's memory too
    try:
        assert lib.accelrt_torch_malloc(20 << 20, 0, None) is None
        p = lib.accelrt_torch_malloc(1 << 20, 0, None)
        assert p
        lib.accelrt_torch_free(p, 1 << 20, 0, None)
    finally:
        a.set_memory_fraction(1.0)


def test_exception_in_callback_returns_null_and_is_logged(
        lib: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def boom(*args: object) -> None:
        raise RuntimeError("injected failure")

    monkeypatch.setattr(_shim, "_allocator", boom)
    with caplog.at_level(logging.ERROR, logger="accelrt.memory"):
        assert lib.accelrt_torch_malloc(1024, 0, None) is None
    rec = [r for r in caplog.records if r.exc_info]
    assert rec and "injected failure" in str(rec[-1].exc_info[1])
    monkeypatch.undo()
    p = lib.accelrt_torch_malloc(1024, 0, None)   # the shim still works afterwards
    assert p
    lib.accelrt_torch_free(p, 1024, 0, None)


def test_bad_stream_and_other_device_return_null(lib: Any,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="accelrt.memory"):
        assert lib.accelrt_torch_malloc(1024, 0, 0xDEAD0) is None
        _shim.install(backend=NAME, device=1)
        assert lib.accelrt_torch_malloc(1024, 0, None) is None
    text = "\n".join(str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    assert "not a live stream" in text and "installed for device 1" in text
    assert _alloc().memory_allocated() == 0


def _served(lib: Any, handle: int, device: int = 0) -> bool:
    """Whether the shim serves an allocation on stream ``handle`` (freed again at once)."""
    p = lib.accelrt_torch_malloc(1024, device, handle)
    if p:
        lib.accelrt_torch_free(p, 1024, device, handle)
    return bool(p)


@pytest.mark.parametrize("how", ["close", "collect", "destroy"])
def test_a_stream_taken_back_is_not_served(lib: Any, caplog: pytest.LogCaptureFixture,
                                           how: str) -> None:
    """The shim checks a (device, stream) pair once and remembers it; a stream accelrt takes
    back (closed or collected: its handle goes back to the pool, or is destroyed when the pool
    is full) must be checked again, and refused, as a stream that never existed is."""
    s = acc.Stream(f"{NAME}:0")
    handle = s.native_handle
    assert _served(lib, handle) and _served(lib, handle)        # checked once, then known
    if how == "destroy":                                         # a full pool destroys it
        others = [acc.Stream(f"{NAME}:0") for _ in range(64)]
        for o in others:
            o.close()
    if how == "collect":
        del s
        gc.collect()
    else:
        s.close()
    with caplog.at_level(logging.ERROR, logger="accelrt.memory"):
        assert not _served(lib, handle)
    text = "\n".join(str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    assert f"PyTorch's stream {handle:#x} is not a live stream of {NAME}:0" in text
    again = acc.Stream(f"{NAME}:0")                  # an open stream with that handle again
    if again.native_handle == handle:
        assert _served(lib, handle)
    again.close()
    assert _alloc().memory_allocated() == 0


def test_a_backend_registered_again_checks_streams_again(caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    name = "shimcpuagain"
    backends.register(name, lambda: CpuBackend(name=name), replace=True)
    s = acc.Stream(f"{name}:0")
    handle = s.native_handle
    try:
        with shim_forwarding_to(name, 1) as shim:
            assert _served(shim, handle)
            backends.register(name, lambda: CpuBackend(name=name), replace=True)
            with caplog.at_level(logging.ERROR, logger="accelrt.memory"):
                assert not _served(shim, handle)             # not a stream of the new one
            assert any("is not a live stream" in str(r.exc_info[1]) for r in caplog.records
                       if r.exc_info)
    finally:
        s.close()
        backends.unregister(name)


def test_free_of_unknown_pointer_keeps_state(lib: Any, caplog: pytest.LogCaptureFixture) -> None:
    a = _alloc()
    p = lib.accelrt_torch_malloc(4096, 0, None)
    stats = a.stats()
    with caplog.at_level(logging.ERROR, logger="accelrt.memory"):
        lib.accelrt_torch_free(p + 512, 4096, 0, None)     # inside a block, not its start
        lib.accelrt_torch_free(0x1234000, 4096, 0, None)   # never allocated
        lib.accelrt_torch_free(p, 4096, 1, None)           # wrong device
    assert sum("was not allocated" in str(r.exc_info[1]) for r in caplog.records
               if r.exc_info) == 3
    assert a.stats() == stats
    lib.accelrt_torch_free(p, 4096, 0, None)
    with caplog.at_level(logging.ERROR, logger="accelrt.memory"):
        lib.accelrt_torch_free(p, 4096, 0, None)           # double free
    assert "double free" in str(caplog.records[-1].exc_info[1])   # type: ignore[index]
    assert a.memory_allocated() == 0


def test_threads_stress(lib: Any) -> None:
    """Several threads allocate and free through the C entry points at once (ctypes drops
    the GIL around each call; the callback takes it back)."""
    n_threads, rounds = 8, 200
    start = threading.Barrier(n_threads)
    errors: list[BaseException] = []
    streams = [acc.Stream(f"{NAME}:{i % 2}") for i in range(n_threads)]

    def work(k: int) -> None:
        try:
            start.wait()
            dev, s = k % 2, streams[k].native_handle
            live: list[tuple[int, int]] = []
            for r in range(rounds):
                size = 512 * (1 + (k * 7 + r) % 40)
                p = lib.accelrt_torch_malloc(size, dev, s)
                assert p, "NULL under no memory pressure"
                ctypes.memset(p, k, size)
                live.append((p, size))
                if r % 3 == 2:
                    q, qs = live.pop(0)
                    assert ctypes.string_at(q, qs) == bytes([k]) * qs   # nobody else wrote
                    lib.accelrt_torch_free(q, qs, dev, s)
            for q, qs in live:
                lib.accelrt_torch_free(q, qs, dev, s)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for i in range(2):
        st = _alloc(NAME, i).stats()
        assert st["allocated_bytes.all.current"] == 0
        assert st["allocation.all.allocated"] >= rounds * n_threads // 2
    for s in streams:
        s.close()


def test_settings_page_reuse_in_snapshot(lib: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The low-fragmentation policy applies to PyTorch's memory: expandable segments in the
    snapshot, the settings recorded."""
    from accelrt.memory import _config, _registry
    monkeypatch.setattr(_config, "_current", None)       # process-wide settings, isolated
    monkeypatch.setattr(_registry, "_allocators", {})
    monkeypatch.delenv(_config.ENV_VAR, raising=False)
    acc.memory.set_allocator_settings("expandable_segments:True,page_reuse:True")
    try:
        dev, m = f"{NAME}:0", backends.device_module(NAME)
        m.record_memory_history("all", device=dev)
        p = lib.accelrt_torch_malloc(5 << 20, 0, None)
        snap = m.memory._snapshot(dev)
        m.record_memory_history(None, device=dev)
        assert "page_reuse:True" in snap["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"]
        assert snap["allocator_settings"]["expandable_segments"] is True
        seg = [s for s in snap["segments"] if s["device"] == 0 and s["allocated_size"]]
        assert seg and all(s["is_expandable"] for s in seg)
        trace = snap["device_traces"][0]
        assert any(e["action"] == "alloc" and e["addr"] == p and e["size"] >= 5 << 20
                   for e in trace)
        lib.accelrt_torch_free(p, 5 << 20, 0, None)
    finally:
        _alloc().empty_cache()


def test_shim_not_built_says_how_to_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_shim, "shim_path", lambda: None)
    monkeypatch.setattr(_shim, "_lib", None)
    with pytest.raises(acc.BackendUnavailableError, match="not built.*reinstall"):
        _shim.load()


_RAISING = """
import sys
import accelrt as acc
from accelrt.backends.cpu import CpuBackend
from accelrt.interop import _shim
acc.backends.register("tiny", lambda: CpuBackend(num_devices=1, memory_limit="8MiB",
                                                 name="tiny"))
_shim.install(backend="tiny", raise_on_failure=True)
lib = _shim.load()
p = lib.accelrt_torch_malloc(1024, 0, None)      # served: no exception
lib.accelrt_torch_free(p, 1024, 0, None)
print("served", flush=True)
lib.accelrt_torch_malloc(64 << 20, 0, None)      # throws into C: ctypes cannot catch it
print("not reached", flush=True)
"""


def test_raise_on_failure_throws_accelrts_message() -> None:
    """For PyTorch (which does not check the pointer), a failed allocation throws a C++
    exception carrying accelrt's message; ctypes cannot catch one, so the process aborts with
    it (in PyTorch it becomes a RuntimeError: scripts/gpu_check.py's torch-allocator phase)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELRT_")}
    proc = subprocess.run([sys.executable, "-c", _RAISING], capture_output=True, text=True,
                          timeout=60, check=False, env=env)
    assert proc.stdout.split() == ["served"], proc.stderr
    assert proc.returncode != 0
    assert "AllocationFailed" in proc.stderr
    assert "TINY out of memory. Tried to allocate 64.00 MiB" in proc.stderr


def test_uninstall_returns_null(lib: Any) -> None:
    _shim.uninstall()
    assert not _shim.installed()
    assert lib.accelrt_torch_malloc(1024, 0, None) is None
    lib.accelrt_torch_free(0x1000, 1024, 0, None)     # a no-op


def test_interpreter_exit_with_a_live_block_is_clean() -> None:
    """Installed, a block still out at exit: the atexit hook unhooks the callbacks, so C never
    calls into a finalizing interpreter (no crash, exit status 0)."""
    code = (
        "import accelrt as acc\n"
        "from accelrt.interop import _shim\n"
        "_shim.install(backend='cpu')\n"
        "lib = _shim.load()\n"
        "p = lib.accelrt_torch_malloc(4096, 0, None)\n"
        "assert p\n"
        "import atexit\n"
        "atexit.register(lambda: lib.accelrt_torch_free(p, 4096, 0, None))\n"  # runs after
        "print('ok')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELRT_")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------------- the build

def _setup_script() -> Any:
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        "accelrt_setup_shim", Path(__file__).resolve().parents[2] / "setup.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_setup_builds_the_shim_in_both_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    setup = _setup_script()
    assert setup.SHIM.optional and setup.SHIM.sources == ["src/accelrt/interop/_torch_shim.cpp"]
    monkeypatch.setenv("ACCELRT_COMPILE", "0")
    assert setup.all_ext_modules() == [setup.SHIM]
    monkeypatch.setattr(setup, "ext_modules",
                        lambda: (["mypyc modules"], setup.Choice(True, False, "compiled")))
    assert setup.all_ext_modules() == [setup.SHIM, "mypyc modules"]


@pytest.mark.parametrize("cc", ["", "/nonexistent/cc"])
def test_build_ext_builds_the_shim_or_says_in_one_line(
        cc: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    """setup.py's build_ext: with a compiler the shim builds (a library that loads);
    without one the install goes on, with one warning saying what to do."""
    import shutil

    from setuptools import Distribution
    setup = _setup_script()
    if not cc and not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("no C++ compiler here")
    if cc:
        monkeypatch.setenv("CC", cc)
        monkeypatch.setenv("CXX", cc)
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    cmd = setup.BuildExt(Distribution({"name": "accelrt", "ext_modules": [setup.SHIM]}))
    cmd.build_lib, cmd.build_temp = str(tmp_path / "lib"), str(tmp_path / "tmp")
    cmd.ensure_finalized()
    with caplog.at_level(logging.WARNING):
        cmd.run()
    built = list((tmp_path / "lib").rglob("_torch_shim*"))
    said = caplog.text + capsys.readouterr().err
    if cc:
        assert not built
        assert "shim (accelrt.interop._lib._torch_shim) was not built" in said
        assert "Install a C++ compiler" in said
    else:
        assert len(built) == 1
        assert ctypes.cast(ctypes.CDLL(str(built[0])).accelrt_torch_free, ctypes.c_void_p).value


# ---------------------------------------------------------------------- torch-free API checks

def test_import_accelrt_does_not_import_torch() -> None:
    code = ("import sys, accelrt, accelrt.interop\n"
            "from accelrt.interop import torch as t\n"
            "print('torch' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.stdout.strip() == "False", proc.stderr


def test_missing_torch_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelrt.interop import torch as acc_torch
    monkeypatch.setitem(sys.modules, "torch", None)     # import torch -> ImportError
    with pytest.raises(acc.BackendUnavailableError, match="pip install torch"):
        acc_torch.use_accelrt_allocator()
    with pytest.raises(acc.BackendUnavailableError, match="PyTorch is not available"):
        acc_torch.to_torch(acc.zeros(2, device="cpu:0"))


def test_invalid_settings_are_refused_before_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelrt.interop import torch as acc_torch
    monkeypatch.setitem(sys.modules, "torch", None)
    old = acc.memory.get_allocator_settings()
    with pytest.raises(ValueError, match="page_reuse"):
        acc_torch.use_accelrt_allocator(settings="page_reuse:maybe")
    with pytest.raises(ValueError, match="no_such_key"):
        acc_torch.use_accelrt_allocator(settings="no_such_key:1")
    with pytest.raises(TypeError, match="settings must be a str"):
        acc_torch.use_accelrt_allocator(settings=1)  # type: ignore[arg-type]
    assert acc.memory.get_allocator_settings() == old


# ---------------------------------------------------------------------- DLPack import

def test_from_dlpack_shares_device_memory_with_stream_handshake() -> None:
    """A device-memory producer (a cpu backend that says its memory is not host-accessible):
    zero copy, the consumer's stream is handed to __dlpack__, the producer is kept alive and
    its deleter runs when the array goes."""
    import dataclasses

    from accelrt.interop._dlpack_in import from_dlpack

    class Dev(CpuBackend):
        def capabilities(self, index: int) -> Any:
            return dataclasses.replace(super().capabilities(index), host_accessible=False)

    backends.register("shimdev", lambda: Dev(num_devices=2, async_streams=True,
                                             name="shimdev"), replace=True)
    src = acc.full((4, 3), 1.5, device="shimdev:1")
    seen: list[Any] = []

    class Producer:
        def __init__(self, arr: Any) -> None:
            self.arr = arr

        def __dlpack__(self, **kw: Any) -> Any:
            seen.append(kw.get("stream"))
            return self.arr.__dlpack__(**kw)

        def __dlpack_device__(self) -> tuple[int, int]:
            return self.arr.__dlpack_device__()

    s = acc.Stream("shimdev:1")
    with backends.device_module("shimdev").stream(s):
        out = from_dlpack(Producer(src), device="shimdev:1")
    assert seen == [s.native_handle]
    assert out.data_ptr() == src.data_ptr() and out.shape == (4, 3)
    assert out.dtype == np.float32 and out.numpy().tolist() == [[1.5] * 3] * 4
    alloc = _alloc("shimdev", 1)
    held = alloc.memory_allocated()
    del src
    gc.collect()
    assert alloc.memory_allocated() == held           # the array keeps the producer alive
    del out
    gc.collect()
    assert alloc.memory_allocated() == 0              # the deleter ran
    with pytest.raises(BufferError, match="not on shimdev:0"):
        from_dlpack(acc.zeros(2, device="shimdev:1"), device="shimdev:0")
    s.close()


def test_from_dlpack_refuses_strided() -> None:
    from accelrt.interop._dlpack_in import _consume
    host = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    from accelrt._array import Array, _Memory
    with pytest.raises(BufferError, match="not C-contiguous"):
        _consume(host.__dlpack__(), backends.get_backend("cpu"), 0, (1, 0), Array, _Memory)


# ---------------------------------------------------------------------- with torch

def test_torch_round_trips() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed (an optional extra)")
    from accelrt.interop.torch import from_torch, to_torch
    a = acc.full((2, 3), 4.0, device="cpu:0")
    t = to_torch(a)
    assert t.device.type == "cpu" and t.data_ptr() == a.data_ptr()
    t.add_(1)
    assert a.numpy().tolist() == [[5.0] * 3] * 2       # shared memory
    del a
    gc.collect()
    assert t.sum().item() == 30.0                      # the tensor keeps the memory alive
    x = torch.arange(6, dtype=torch.int32)
    b = from_torch(x)
    assert b.device == acc.device("cpu:0") and b.data_ptr() == x.data_ptr()
    with pytest.raises(BufferError, match="detach"):
        from_torch(torch.ones(2, requires_grad=True))
    with pytest.raises(TypeError, match="torch.Tensor"):
        from_torch(np.ones(2))
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device: CPU round trips checked only")
    c = acc.full((3,), 2.0, device="cuda:0")
    tc = to_torch(c)
    assert tc.device.type == "cuda" and tc.data_ptr() == c.data_ptr()
    y = torch.ones(5, device="cuda")
    d = from_torch(y)
    assert d.device == acc.device("cuda:0") and d.data_ptr() == y.data_ptr()


def test_use_accelrt_allocator_needs_cuda_torch() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed (an optional extra)")
    if torch.cuda.is_available():
        pytest.skip("a CUDA torch: scripts/gpu_check.py runs the allocator in a fresh process")
    from accelrt.interop.torch import use_accelrt_allocator
    with pytest.raises(acc.BackendUnavailableError, match="no usable CUDA"):
        use_accelrt_allocator()


_GPU_RUN = """
import json, torch, accelrt as acc
from accelrt.interop.torch import use_accelrt_allocator
use_accelrt_allocator(settings="expandable_segments:True,page_reuse:True")
x = torch.randn(1024, 1024, device="cuda")
y = x @ x
torch.cuda.synchronize()
live = acc.cuda.memory_stats()["allocated_bytes.all.current"]
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    z = torch.empty(1 << 20, device="cuda")
snap = acc.cuda.memory._snapshot()
streams = {b["address"]: seg["stream"] for seg in snap["segments"] for b in seg["blocks"]
           if b["state"] == "active_allocated"}
out = {"live": live, "expandable": all(seg["is_expandable"] for seg in snap["segments"]),
       "z_stream": streams.get(z.data_ptr()), "s": s.cuda_stream,
       "torch_reserved": torch.cuda.memory_reserved()}
del x, y, z
torch.cuda.synchronize()
out["after"] = acc.cuda.memory_stats()["allocated_bytes.all.current"]
try:
    torch.empty(1 << 47, dtype=torch.uint8, device="cuda")   # 128 TiB: accelrt's OOM
except RuntimeError as e:
    out["oom"] = str(e)
out["still_works"] = float(torch.ones(4, device="cuda").sum())
print(json.dumps(out))
"""

_GPU_LATE = """
import torch, accelrt as acc
from accelrt.interop.torch import use_accelrt_allocator
torch.empty(1, device="cuda")
try:
    use_accelrt_allocator()
except acc.AcceleratorError as e:
    print("REFUSED", e)
"""


def test_gpu_pytorch_allocates_through_accelrt() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed (an optional extra)")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA PyTorch and a GPU (scripts/gpu_check.py runs it)")
    import json
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELRT_")}
    proc = subprocess.run([sys.executable, "-c", _GPU_RUN], capture_output=True, text=True,
                          timeout=120, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["live"] >= 2 * 4 * 2**20                    # x and y, in accelrt's stats
    assert out["expandable"] and out["z_stream"] == out["s"]   # settings and torch's stream
    assert out["after"] == 0
    assert "out of memory. Tried to allocate 128.00 TiB" in out["oom"]
    assert out["still_works"] == 4.0
    proc = subprocess.run([sys.executable, "-c", _GPU_LATE], capture_output=True, text=True,
                          timeout=120, check=False, env=env)
    assert "REFUSED" in proc.stdout and "before any CUDA tensor" in proc.stdout, proc.stderr
