"""Review of accelrt.interop (issue 24 §4) by tests: the PyTorch allocator shim driven through
its exported C symbols as ``CUDAPluggableAllocator`` calls them, ``use_accelrt_allocator``
against a stand-in for PyTorch (and, where a CUDA-enabled PyTorch build is installed, its real
pluggable-allocator objects without a GPU), and DLPack both ways with hostile inputs.

Anything that could crash the interpreter runs in a subprocess with a timeout. Tests that need
PyTorch skip without it (it is an optional extra, not in the test extra)."""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import logging
import os
import subprocess
import sys
import types
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends
from helpers.shim import reset_shim, shim_forwarding_to

import accelrt as acc
from accelrt import _device, _dlpack, backends
from accelrt.backends.cpu import CpuBackend
from accelrt.interop import _shim
from accelrt.interop._dlpack_in import from_dlpack
from accelrt.memory import _config
from accelrt.memory._allocator import get_allocator

NAME = "s24cpu"
# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({NAME: lambda: CpuBackend(num_devices=2, memory_limit="64MiB",
                                                      async_streams=True, name=NAME)})

needs_shim = pytest.mark.skipif(_shim.shim_path() is None,
                                reason="the shim was not built (no C++ compiler at install)")
HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH,
                                 reason="torch is not installed (an optional extra)")
_ENV = {k: v for k, v in os.environ.items() if not k.startswith("ACCELRT_")}


def _run(code: str, *args: str, timeout: int = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout, check=False, env=_ENV)


def _alloc(index: int = 0) -> Any:
    return get_allocator(backends.get_backend(NAME), index)


@pytest.fixture
def lib() -> Iterator[Any]:
    """The shim forwarding to the ``s24cpu`` allocators (as ctypes callers: NULL on failure);
    uninstalled and emptied afterwards."""
    with shim_forwarding_to(NAME, 2) as shim:
        yield shim


# ---------------------------------------------------------------------- the C entry points

@needs_shim
def test_malloc_of_zero_bytes_is_null_and_allocates_nothing(lib: Any) -> None:
    """PyTorch's native allocator hands out NULL for 0 bytes; so does the shim (no block)."""
    stats = _alloc().stats()
    assert lib.accelrt_torch_malloc(0, 0, None) is None
    lib.accelrt_torch_free(None, 0, 0, None)          # PyTorch frees what it got: a no-op
    after = _alloc().stats()
    assert after["allocation.all.current"] == stats["allocation.all.current"]
    assert after["num_ooms"] == stats["num_ooms"]


@needs_shim
@pytest.mark.parametrize("size", [2**64 - 1, 2**63, 2**62, (64 << 20) + 1])
def test_huge_malloc_is_null_never_a_crash(lib: Any, size: int,
                                           caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="accelrt.memory"):
        assert lib.accelrt_torch_malloc(size, 0, None) is None
    assert any("out of memory" in r.getMessage() for r in caplog.records)
    assert _alloc().memory_allocated() == 0
    p = lib.accelrt_torch_malloc(4096, 0, None)     # still serves afterwards
    assert p
    lib.accelrt_torch_free(p, 4096, 0, None)


@needs_shim
@pytest.mark.parametrize("device", [-1, 2, 99, 2**31 - 1])
def test_malloc_on_a_device_out_of_range_says_so(lib: Any, device: int,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """An out-of-range device index is reported as such (it was reported as "stream 0x0 is
    not a live stream") and initialises nothing for that index."""
    with caplog.at_level(logging.ERROR, logger="accelrt.memory"):
        assert lib.accelrt_torch_malloc(1024, device, None) is None
        lib.accelrt_torch_free(0x1000, 1024, device, None)     # logged, nothing happens
    text = "\n".join(str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    assert f"PyTorch asked for memory on device {device}, but {NAME} has 2 device(s)" in text
    assert (NAME, device) not in _device._initialized


@needs_shim
def test_unknown_double_and_wrong_device_frees_keep_the_stats(
        lib: Any, caplog: pytest.LogCaptureFixture) -> None:
    p = lib.accelrt_torch_malloc(8192, 1, None)
    stats = [_alloc(i).stats() for i in range(2)]
    with caplog.at_level(logging.ERROR, logger="accelrt.memory"):
        lib.accelrt_torch_free(0xDEAD000, 8192, 1, None)       # never allocated
        lib.accelrt_torch_free(p, 8192, 0, None)               # the other device
        lib.accelrt_torch_free(p, 8192, 7, None)               # no such device
        lib.accelrt_torch_free(p + 8, 8192, 1, None)           # inside the block
    assert [_alloc(i).stats() for i in range(2)] == stats
    lib.accelrt_torch_free(p, 8192, 1, None)
    with caplog.at_level(logging.ERROR, logger="accelrt.memory"):
        lib.accelrt_torch_free(p, 8192, 1, None)               # double free
    assert "double free" in str(caplog.records[-1].exc_info[1])  # type: ignore[index]
    assert _alloc(1).memory_allocated() == 0


@needs_shim
def test_install_and_uninstall_twice(lib: Any) -> None:
    first = _shim.install(backend=NAME)        # replaces the fixture's installation
    assert first is not None and first.backend == NAME
    p = lib.accelrt_torch_malloc(512, 0, None)
    assert p
    _shim.uninstall()
    _shim.uninstall()                            # idempotent
    assert not _shim.installed() and lib.accelrt_torch_malloc(512, 0, None) is None
    lib.accelrt_torch_free(p, 512, 0, None)     # a no-op while uninstalled
    assert _alloc().memory_allocated() == 512
    assert _shim.install(backend=NAME, device=0) is None
    lib.accelrt_torch_free(p, 512, 0, None)     # forwarded again
    assert _alloc().memory_allocated() == 0
    previous = _shim.install(backend=NAME, device=1)
    assert lib.accelrt_torch_malloc(512, 0, None) is None      # only device 1 now
    _shim.restore(previous)
    q = lib.accelrt_torch_malloc(512, 0, None)                 # device 0 again
    assert q
    lib.accelrt_torch_free(q, 512, 0, None)


@needs_shim
def test_install_refuses_bad_arguments() -> None:
    with pytest.raises(TypeError, match="device must be an int"):
        _shim.install(backend=NAME, device="0")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="device must be an int"):
        _shim.install(backend=NAME, device=True)
    with pytest.raises(TypeError, match="raise_on_failure must be a bool"):
        _shim.install(backend=NAME, raise_on_failure=1)  # type: ignore[arg-type]
    with pytest.raises(acc.BackendUnavailableError):
        _shim.install(backend="no-such-backend")
    assert not _shim.installed()


_HAMMER = """
import ctypes, sys, threading
import accelrt as acc
from accelrt.backends.cpu import CpuBackend
from accelrt.interop import _shim
acc.backends.register("ham", lambda: CpuBackend(num_devices=2, memory_limit="32MiB",
                                                async_streams=True, name="ham"))
lib = _shim.load()
_shim.install(backend="ham")
stop = threading.Event()
errors = []

def flip():   # install/uninstall while the others allocate
    while not stop.is_set():
        _shim.uninstall()
        _shim.install(backend="ham")

def work(k):
    try:
        for r in range(300):
            size = [0, 1, 4096, 1 << 20, 1 << 40, 2**64 - 1][(k + r) % 6]
            dev = [0, 1, -1, 5][(k * 3 + r) % 4]
            p = lib.accelrt_torch_malloc(size, dev, None)
            if p:
                ctypes.memset(p, k, min(size, 64))
            lib.accelrt_torch_free(p, size, dev, None)
            lib.accelrt_torch_free(0x1000 + r, 16, dev, None)
    except BaseException as e:
        errors.append(e)

import logging
logging.getLogger("accelrt.memory").disabled = True
t = threading.Thread(target=flip); t.start()
ws = [threading.Thread(target=work, args=(k,)) for k in range(6)]
for w in ws: w.start()
for w in ws: w.join()
stop.set(); t.join()
_shim.install(backend="ham")
assert not errors, errors
print("ok", acc.memory.memory_allocated("ham:0") + acc.memory.memory_allocated("ham:1"))
"""


@needs_shim
def test_hostile_calls_from_many_threads_while_installing_and_uninstalling() -> None:
    """Sizes 0 / huge, devices out of range, unknown pointers, from six threads while a
    seventh installs and uninstalls: no crash, no hang, and (frees that arrived while
    uninstalled aside) nothing but NULLs and logged failures."""
    proc = _run(_HAMMER, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[0] == "ok"


_AFTER_UNINSTALL_RAISING = """
from accelrt.interop import _shim
_shim.install(backend="cpu", raise_on_failure=True)
lib = _shim.load()
_shim.uninstall()
lib.accelrt_torch_free(0x1000, 16, 0, None)      # a no-op
assert lib.accelrt_torch_malloc(0, 0, None) is None   # 0 bytes: NULL, no exception
print("ok", flush=True)
lib.accelrt_torch_malloc(16, 0, None)            # for PyTorch: an exception, not NULL
"""


@needs_shim
def test_after_uninstall_pytorch_gets_an_exception_not_a_null_pointer() -> None:
    proc = _run(_AFTER_UNINSTALL_RAISING)
    assert proc.stdout.split() == ["ok"], proc.stderr
    assert proc.returncode != 0 and "no longer installed" in proc.stderr


# ---------------------------------------------------------------------- use_accelrt_allocator

class _FakeTorch:
    """A stand-in for ``torch`` with PyTorch's pluggable-allocator semantics: the library is
    loaded with ctypes and its two functions looked up by name; the allocator is initialised
    when created, and PyTorch refuses to swap an initialised allocator."""

    def __init__(self, native_initialized: bool = False) -> None:
        self.current: Any = types.SimpleNamespace(initialized=native_initialized)
        self.swaps = 0
        fake = self

        class CUDAPluggableAllocator:
            def __init__(self, path: str, alloc_fn_name: str, free_fn_name: str) -> None:
                so = ctypes.CDLL(path)
                self.alloc = ctypes.cast(getattr(so, alloc_fn_name), ctypes.c_void_p).value
                self.free = ctypes.cast(getattr(so, free_fn_name), ctypes.c_void_p).value
                assert self.alloc and self.free
                self.initialized = True

        def change_current_allocator(allocator: Any) -> None:
            if fake.current.initialized:
                raise RuntimeError("Can't swap an already initialized allocator")
            fake.current = allocator
            fake.swaps += 1

        memory = types.SimpleNamespace(CUDAPluggableAllocator=CUDAPluggableAllocator,
                                       change_current_allocator=change_current_allocator)
        self.module = types.ModuleType("torch")
        self.module.__version__ = "0.0-fake"  # type: ignore[attr-defined]
        self.module.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
            is_available=lambda: True, memory=memory)


@pytest.fixture
def fake_torch(monkeypatch: pytest.MonkeyPatch) -> Iterator[_FakeTorch]:
    """``import torch`` gives a :class:`_FakeTorch`; the process-wide allocator settings and
    the record of the allocator installed into PyTorch are isolated."""
    from accelrt.interop import torch as acc_torch
    from accelrt.memory import _registry
    fake = _FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", fake.module)
    monkeypatch.setattr(acc_torch, "_in_use", None)
    monkeypatch.setattr(_config, "_current", None)
    monkeypatch.setattr(_registry, "_allocators", {})
    monkeypatch.delenv(_config.ENV_VAR, raising=False)
    try:
        yield fake
    finally:
        reset_shim(NAME, 2)


@needs_shim
def test_use_accelrt_allocator_twice_keeps_serving_pytorch(fake_torch: _FakeTorch) -> None:
    """PyTorch's pluggable allocator is initialised when created, so a second
    change_current_allocator always fails: a second call must neither swap nor unhook the
    shim that PyTorch now allocates through (it did: every later allocation failed)."""
    from accelrt.interop.torch import use_accelrt_allocator
    lib = _shim.load()
    first = use_accelrt_allocator(backend=NAME)
    assert fake_torch.current is first and fake_torch.swaps == 1
    p = lib.accelrt_torch_malloc(4096, 0, None)
    assert p
    second = use_accelrt_allocator(backend=NAME, settings="expandable_segments:True")
    assert second is first and fake_torch.swaps == 1
    assert _shim.installed()
    assert _config.get_config().expandable_segments is True
    q = lib.accelrt_torch_malloc(4096, 1, None)
    assert q
    lib.accelrt_torch_free(p, 4096, 0, None)
    lib.accelrt_torch_free(q, 4096, 1, None)
    assert _alloc(0).memory_allocated() == 0 and _alloc(1).memory_allocated() == 0
    use_accelrt_allocator(1, backend=NAME)           # a later call applies device=
    assert _shim._target is not None and _shim._target.device == 1
    r = lib.accelrt_torch_malloc(4096, 1, None)     # (a failure would throw: PyTorch's mode)
    assert r
    lib.accelrt_torch_free(r, 4096, 1, None)


@needs_shim
@pytest.mark.parametrize("settings,expandable,page_reuse", [
    ("", False, False),
    ("expandable_segments:False", False, False),
    ("expandable_segments:True", True, False),
    ("expandable_segments:True,page_reuse:True", True, True),
])
def test_use_accelrt_allocator_with_each_setting(fake_torch: _FakeTorch, settings: str,
                                                 expandable: bool, page_reuse: bool) -> None:
    from accelrt.interop.torch import use_accelrt_allocator
    use_accelrt_allocator(backend=NAME, settings=settings)
    got = _config.get_config()
    assert got.expandable_segments is expandable and got.page_reuse is page_reuse
    assert acc.memory.get_allocator_settings() == settings
    lib = _shim.load()
    p = lib.accelrt_torch_malloc(3 << 20, 0, None)
    segs = [s for s in _alloc().snapshot_segments() if s["allocated_size"]]
    assert segs and all(s["is_expandable"] is expandable for s in segs)
    lib.accelrt_torch_free(p, 3 << 20, 0, None)


@needs_shim
@pytest.mark.parametrize("settings", [
    "expandable_segments:maybe", "page_reuse:yes", "no_such_key:1", "expandable_segments",
    ":", "max_split_size_mb:-5", "garbage", "page_reuse:True,page_reuse:1.5",
])
def test_use_accelrt_allocator_refuses_bad_settings(fake_torch: _FakeTorch,
                                                    settings: str) -> None:
    from accelrt.interop.torch import use_accelrt_allocator
    before = acc.memory.get_allocator_settings()
    with pytest.raises(ValueError, match=r"use_accelrt_allocator\(settings="):
        use_accelrt_allocator(backend=NAME, settings=settings)
    assert acc.memory.get_allocator_settings() == before
    assert fake_torch.swaps == 0 and not _shim.installed()


@needs_shim
def test_use_accelrt_allocator_parses_its_settings_once(fake_torch: _FakeTorch) -> None:
    """A bad value that PyTorch warns about and ignores warned twice: the settings were parsed
    to check them, then again by set_allocator_settings once the shim was in (s32)."""
    from accelrt.interop.torch import use_accelrt_allocator
    settings = "expandable_segments_reserve:bogus,page_reuse:True"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        use_accelrt_allocator(backend=NAME, settings=settings)
    assert [str(w.message).startswith("Ignoring invalid expandable-segment reserve value "
                                      "'bogus'") for w in caught] == [True]
    assert fake_torch.swaps == 1 and _config.get_config().page_reuse is True
    assert acc.memory.get_allocator_settings() == settings


@needs_shim
def test_refused_swap_restores_the_earlier_installation(fake_torch: _FakeTorch) -> None:
    """PyTorch already initialised its own allocator: AcceleratorError, and whatever the shim
    served before keeps being served (it was uninstalled)."""
    from accelrt.interop.torch import use_accelrt_allocator
    fake_torch.current.initialized = True
    _shim.install(backend=NAME, device=1)
    before = acc.memory.get_allocator_settings()
    with pytest.raises(acc.AcceleratorError, match="before any CUDA tensor"):
        use_accelrt_allocator(backend=NAME, settings="expandable_segments:True")
    assert acc.memory.get_allocator_settings() == before
    lib = _shim.load()
    assert _shim.installed()
    assert lib.accelrt_torch_malloc(256, 0, None) is None      # still device 1 only
    p = lib.accelrt_torch_malloc(256, 1, None)
    assert p
    lib.accelrt_torch_free(p, 256, 1, None)


def test_use_accelrt_allocator_refuses_bad_argument_types(fake_torch: _FakeTorch) -> None:
    from accelrt.interop.torch import use_accelrt_allocator
    with pytest.raises(TypeError, match="device must be an int"):
        use_accelrt_allocator("cuda:0")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="settings must be a str"):
        use_accelrt_allocator(settings=b"expandable_segments:True")  # type: ignore[arg-type]
    with pytest.raises(acc.BackendUnavailableError):
        use_accelrt_allocator(backend="no-such-backend")


_REAL_TORCH_TWICE = """
import ctypes, torch
from accelrt.interop import _shim
from accelrt.interop.torch import use_accelrt_allocator
if not hasattr(torch._C, "_cuda_customAllocator"):
    print("no-cuda-build"); raise SystemExit
torch.cuda.is_available = lambda: True      # no GPU here: PyTorch's objects only
first = use_accelrt_allocator(backend="cpu", settings="expandable_segments:True")
second = use_accelrt_allocator(backend="cpu")
lib = _shim.load()
p = lib.accelrt_torch_malloc(4096, 0, None)
lib.accelrt_torch_free(p, 4096, 0, None)
print(first is second, _shim.installed(), bool(p))
"""


@needs_shim
@needs_torch
def test_real_pytorch_pluggable_allocator_twice_without_a_gpu() -> None:
    """A CUDA build of PyTorch creates and installs its CUDAPluggableAllocator without a GPU:
    the second call (which PyTorch refuses to swap) leaves accelrt's shim serving."""
    proc = _run(_REAL_TORCH_TWICE, timeout=120)
    if proc.stdout.strip() == "no-cuda-build":
        pytest.skip("this PyTorch build has no CUDA pluggable allocator")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", "True", "True"]


# ---------------------------------------------------------------------- importing

def test_importing_accelrt_and_interop_never_imports_torch() -> None:
    code = ("import sys\n"
            "import accelrt, accelrt.interop, accelrt.interop._shim, accelrt.interop._dlpack_in\n"
            "import accelrt.interop.torch\n"
            "accelrt.interop.torch.__doc__\n"
            "print(sorted(m for m in ('torch', 'cupy', 'numba') if m in sys.modules))\n")
    proc = _run(code)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr


def test_missing_torch_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelrt.interop import torch as acc_torch
    monkeypatch.setitem(sys.modules, "torch", None)
    for call in (lambda: acc_torch.from_torch(np.ones(2)),
                 lambda: acc_torch.to_torch(acc.zeros(2, device="cpu:0")),
                 lambda: acc_torch.use_accelrt_allocator()):
        with pytest.raises(acc.BackendUnavailableError, match=r"pip install torch"):
            call()


# ---------------------------------------------------------------------- DLPack: exports

class _Via:
    """A producer that forwards to another (hides its type from accelrt's fast paths)."""

    def __init__(self, obj: Any, **force: Any) -> None:
        self.obj, self.force = obj, force

    def __dlpack__(self, **kwargs: Any) -> Any:
        kwargs.update(self.force)
        return self.obj.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return tuple(self.obj.__dlpack_device__())  # type: ignore[return-value]


def test_dlpack_stream_argument_on_host_memory() -> None:
    """Host memory has no stream: None (synchronise the current stream) and -1 (don't) are
    accepted, any other int is a BufferError, and a non-int is a TypeError."""
    a = acc.full(3, 1.5, device="cpu:0")
    for stream in (None, -1):
        assert np.from_dlpack(_Via(a, stream=stream)).tolist() == [1.5] * 3
    for stream in (0, 1, 2, 2**40):
        with pytest.raises(BufferError, match="stream must be None"):
            a.__dlpack__(stream=stream)
    for bad in (True, "1", 1.0, object()):
        with pytest.raises(TypeError, match="stream must be an int or None"):
            a.__dlpack__(stream=bad)


def test_dlpack_max_version_copy_and_device_arguments() -> None:
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    a = acc.full((2, 2), 3, dtype="int32", device="cpu:0")
    assert name(a.__dlpack__()) == b"dltensor"
    assert name(a.__dlpack__(max_version=(0, 8))) == b"dltensor"
    for mv in ((1, 0), (1, 3), (2, 0)):
        assert name(a.__dlpack__(max_version=mv)) == b"dltensor_versioned"
    for bad in ("ab", (1,), (1, 0, 0), (1.0, 0), [1, 0], 1):
        with pytest.raises(TypeError, match="max_version must be a tuple"):
            a.__dlpack__(max_version=bad)
    copied = np.from_dlpack(_Via(a, copy=True, max_version=(1, 0)))
    shared = np.from_dlpack(_Via(a, copy=False))
    assert copied.ctypes.data != a.data_ptr() and shared.ctypes.data == a.data_ptr()
    for bad in (1, 0, "yes", np.bool_(True)):
        with pytest.raises(TypeError, match="copy must be a bool or None"):
            a.__dlpack__(copy=bad)
    assert np.from_dlpack(_Via(a, dl_device=(_dlpack.kDLCPU, 0))).sum() == 12
    with pytest.raises(BufferError, match="cannot export"):
        a.__dlpack__(dl_device=(_dlpack.kDLCUDA, 0))
    for bad in ("cpu", 1, (1,), (1, "0")):
        with pytest.raises(TypeError, match="dl_device must be a tuple"):
            a.__dlpack__(dl_device=bad)


def test_dlpack_type_errors_on_device_memory_too() -> None:
    import dataclasses

    class Hidden(CpuBackend):
        def capabilities(self, index: int) -> Any:
            return dataclasses.replace(super().capabilities(index), host_accessible=False)

    backends.register("s24dev", lambda: Hidden(num_devices=1, name="s24dev"), replace=True)
    a = acc.full(2, 1.0, device="s24dev:0")
    for kw in ({"stream": True}, {"copy": 1}, {"max_version": "1.0"}, {"dl_device": "cpu"}):
        with pytest.raises(TypeError):
            a.__dlpack__(**kw)
    assert np.from_dlpack(a, device="cpu").tolist() == [1.0, 1.0]   # a copy to the host


# ---------------------------------------------------------------------- DLPack: imports

def test_from_dlpack_refuses_negative_and_other_strides_instead_of_copying() -> None:
    """from_dlpack (what from_torch uses) shares memory or raises: a strided host producer
    was silently copied (writes to the array then did not reach the producer)."""
    base = np.arange(12.0).reshape(3, 4)
    zero_stride = np.lib.stride_tricks.as_strided(base[0], (3, 4), (0, 8))
    for view in (base[::-1], base[:, ::2], base.T, zero_stride):
        with pytest.raises(BufferError, match=r"not C-contiguous.*contiguous\(\)"):
            from_dlpack(_Via(view))
    row = from_dlpack(_Via(base[1]))                       # an offset view is contiguous
    assert row.data_ptr() == base[1].ctypes.data and row.numpy().tolist() == [4, 5, 6, 7]
    # asarray may copy: a negative-strided producer gives the right values
    assert acc.asarray(_Via(base[::-1]), device="cpu:0").numpy().tolist() == \
        base[::-1].tolist()


def test_read_only_producer_memory_is_never_shared_as_writable() -> None:
    ro = np.arange(4, dtype=np.int16)
    ro.flags.writeable = False
    a = acc.asarray(_Via(ro), device="cpu:0")
    assert a.data_ptr() != ro.ctypes.data and a.numpy().tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="copy=False"):
        acc.asarray(_Via(ro), device="cpu:0", copy=False)
    with pytest.raises(BufferError, match="read-only"):
        from_dlpack(_Via(ro))
    assert acc.asarray(ro, device="cpu:0").data_ptr() != ro.ctypes.data   # numpy: copied
    rw = np.arange(4, dtype=np.int16)
    assert acc.asarray(_Via(rw), device="cpu:0").data_ptr() == rw.ctypes.data
    assert from_dlpack(_Via(rw)).data_ptr() == rw.ctypes.data
    legacy = np.arange(4, dtype=np.int16)       # a legacy capsule has no read-only flag
    shared = acc.asarray(_Via(legacy, max_version=None), device="cpu:0")
    assert shared.data_ptr() == legacy.ctypes.data


_READ_ONLY_MAPPING = """
import mmap, sys, numpy as np, accelrt as acc
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)     # PROT_READ pages
ro = np.frombuffer(m, dtype=np.uint8)

class Via:
    def __dlpack__(self, **kw): return ro.__dlpack__(**kw)
    def __dlpack_device__(self): return ro.__dlpack_device__()

a = acc.asarray(Via(), device="cpu:0")
a.fill_(7)                                   # wrote into the read-only pages: SIGSEGV
print(a.numpy()[:2].tolist(), ro[:2].tolist())
"""


def test_writing_an_array_imported_from_read_only_pages_does_not_crash(tmp_path: Any) -> None:
    path = tmp_path / "ro.bin"
    path.write_bytes(bytes(4096))
    proc = _run(_READ_ONLY_MAPPING, str(path))
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "[7, 7] [0, 0]"


def test_from_dlpack_host_memory_on_a_device_the_host_cannot_read() -> None:
    import dataclasses

    class Hidden(CpuBackend):
        def capabilities(self, index: int) -> Any:
            return dataclasses.replace(super().capabilities(index), host_accessible=False)

    backends.register("s24dev2", lambda: Hidden(num_devices=1, name="s24dev2"), replace=True)
    with pytest.raises(BufferError, match="host memory, which s24dev2:0 cannot share"):
        from_dlpack(np.arange(3.0), device="s24dev2:0")


@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (1, 1, 1)])
def test_from_dlpack_zero_dim_and_empty(shape: tuple[int, ...]) -> None:
    host = np.full(shape, 2.5, dtype=np.float32)
    a = from_dlpack(_Via(host))
    assert a.shape == shape and a.dtype == np.float32
    assert a.numpy().tolist() == host.tolist()
    back = np.from_dlpack(a)
    assert back.shape == shape and back.tolist() == host.tolist()


def test_lifetimes_and_no_leak_numpy_both_ways() -> None:
    dev = "cpu:0"
    base = acc.memory.memory_allocated(dev)
    a = acc.full(1000, 4, dtype="int64", device=dev)
    v = np.from_dlpack(a)
    a.close()                                   # closed while exported: memory stays valid
    gc.collect()
    assert (v == 4).all() and acc.memory.memory_allocated(dev) > base
    if not v.flags.writeable:   # numpy < 2.2 imports DLPack memory read-only: refused then
        with pytest.raises(BufferError, match="read-only memory"):
            from_dlpack(_Via(v))
        v = v.copy()            # (the export's memory is released below all the same)
        gc.collect()
        assert acc.memory.memory_allocated(dev) == base
        return
    b = from_dlpack(_Via(v))                    # and imported again
    del v
    gc.collect()
    assert b.numpy().sum() == 4000
    del b
    gc.collect()
    assert acc.memory.memory_allocated(dev) == base


# ---------------------------------------------------------------------- DLPack with torch

_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
           "float16", "float32", "float64", "complex64", "complex128"]


@needs_torch
@pytest.mark.parametrize("dtype", _DTYPES)
def test_torch_round_trips_every_dtype(dtype: str) -> None:
    import torch
    from torch.testing import assert_close

    from accelrt.interop.torch import from_torch, to_torch
    host = (np.arange(6) % 3).astype(dtype).reshape(2, 3)
    a = acc.asarray(host, device="cpu:0", copy=True)
    t = torch.from_dlpack(a)
    assert t.data_ptr() == a.data_ptr()
    assert_close(t, torch.from_numpy(host.copy()))
    assert_close(to_torch(a), t)
    b = from_torch(t)
    assert b.data_ptr() == t.data_ptr() and b.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(b.numpy(), host)
    c = acc.asarray(torch.from_numpy(host.copy()), device="cpu:0")
    np.testing.assert_array_equal(c.numpy(), host)


@needs_torch
def test_torch_dtypes_accelrt_has_not_are_refused_with_the_fix() -> None:
    import torch

    from accelrt.interop.torch import from_torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)    # "ComplexHalf support is experimental"
        tensors = [torch.ones(2, dtype=torch.bfloat16), torch.ones(2, dtype=torch.complex32)]
    if hasattr(torch, "float8_e4m3fn"):
        tensors.append(torch.ones(2).to(torch.float8_e4m3fn))
    for t in tensors:
        with pytest.raises(BufferError, match=r"no numpy or accelrt dtype.*tensor\.float\(\)"):
            from_torch(t)
        with pytest.raises(TypeError, match="no numpy or accelrt dtype"):
            acc.asarray(t, device="cpu:0")


@needs_torch
def test_torch_zero_dim_empty_and_views() -> None:
    import torch
    from torch.testing import assert_close

    from accelrt.interop.torch import from_torch, to_torch
    s = acc.full((), 3.0, device="cpu:0")
    assert_close(to_torch(s), torch.tensor(3.0))
    assert from_torch(torch.tensor(7, dtype=torch.int32)).numpy().tolist() == 7
    for shape in ((0,), (2, 0), (0, 3)):
        e = to_torch(acc.empty(shape, device="cpu:0"))
        assert tuple(e.shape) == shape
        assert from_torch(torch.empty(shape)).shape == shape
    t = torch.arange(12.0).reshape(3, 4)
    for view in (t.T, t[:, ::2], torch.ones(3).expand(2, 3)):
        with pytest.raises(BufferError, match=r"contiguous\(\)"):
            from_torch(view)
    row = from_torch(t[2])                               # storage offset, contiguous
    assert row.data_ptr() == t[2].data_ptr()
    row.fill_(-1.0)
    assert t[2].tolist() == [-1.0] * 4                   # shared both ways
    with pytest.raises(RuntimeError):                    # PyTorch refuses negative strides
        torch.from_dlpack(np.arange(5.0)[::-1])
    with pytest.raises(BufferError, match="detach"):
        from_torch(torch.ones(2, requires_grad=True))
    assert from_torch(torch.ones(2, requires_grad=True).detach()).numpy().tolist() == [1, 1]


@needs_torch
def test_torch_lifetimes_and_stats() -> None:
    import torch

    from accelrt.interop.torch import from_torch, to_torch
    dev = "cpu:0"
    base = acc.memory.memory_allocated(dev)
    a = acc.full(4096, 2.0, device=dev)
    t = to_torch(a)
    del a
    gc.collect()
    assert t.sum().item() == 8192.0 and acc.memory.memory_allocated(dev) > base
    b = from_torch(t)                                   # tensor -> array over the same memory
    del t
    gc.collect()
    assert b.numpy().sum() == 8192.0
    del b
    gc.collect()
    assert acc.memory.memory_allocated(dev) == base
    c = acc.full(16, 1.0, device=dev)
    tc = torch.from_dlpack(c)
    c.close()                                           # closed while PyTorch holds it
    assert tc.sum().item() == 16.0
    del tc
    gc.collect()
    assert acc.memory.memory_allocated(dev) == base
    x = torch.full((8,), 5.0)
    y = from_torch(x)
    del x
    gc.collect()
    assert y.numpy().tolist() == [5.0] * 8


@needs_torch
def test_torch_from_dlpack_arguments() -> None:
    import torch
    from torch.testing import assert_close
    a = acc.full((2, 2), 1.25, device="cpu:0")
    assert torch.from_dlpack(a, device="cpu").data_ptr() == a.data_ptr()
    assert torch.from_dlpack(a, copy=False).data_ptr() == a.data_ptr()
    c = torch.from_dlpack(a, copy=True)
    assert c.data_ptr() != a.data_ptr()
    assert_close(c, torch.full((2, 2), 1.25))
    t = torch.arange(4.0)
    with pytest.raises((AssertionError, BufferError, RuntimeError)):
        t.__dlpack__(stream=1)                           # PyTorch: host memory has no stream
    assert acc.asarray(_Via(t, stream=-1), device="cpu:0").numpy().tolist() == [0, 1, 2, 3]
