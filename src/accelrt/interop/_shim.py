"""The shim behind :mod:`accelrt.interop.torch`, driven through :mod:`ctypes` (no torch).

``_torch_shim.cpp`` (built with the package into ``accelrt/interop/_lib/``) exports, with a C
interface, the two functions PyTorch's ``CUDAPluggableAllocator`` calls by name, :data:`MALLOC`
and :data:`FREE`, with the signatures of ``torch/csrc/cuda/CUDAPluggableAllocator.h``::

    void* accelrt_torch_malloc(size_t size, int device, cudaStream_t stream);
    void  accelrt_torch_free(void* ptr, size_t size, int device, cudaStream_t stream);

plus ``accelrt_torch_set_callbacks``, through which :func:`install` hands it two ctypes
callbacks that forward each call to accelrt's caching allocator of that device, on that stream
(a stream handle of ``0``, CUDA's legacy default stream, is the device's default stream). An
exception inside a callback never reaches C: it is logged on the ``accelrt.memory`` logger, its
message is left with the shim (``accelrt_torch_set_error``) and the allocation returns NULL.
PyTorch does not check that pointer (a NULL would become a tensor at address 0), so for
PyTorch (``install(raise_on_failure=True)``) the shim then throws a C++ ``std::runtime_error``
with that message, which PyTorch raises as a Python ``RuntimeError``; through ctypes (the
default) the caller gets NULL. Before :func:`install` and after :func:`uninstall` (done at
interpreter exit) the shim's malloc returns NULL and its free does nothing.

Example::

    >>> import accelrt as acc
    >>> from accelrt.interop import _shim
    >>> if _shim.shim_path() is not None:      # built with the package (needs a C++ compiler)
    ...     _shim.install(backend="cpu")
    ...     lib = _shim.load()
    ...     ptr = lib.accelrt_torch_malloc(1024, 0, None)
    ...     lib.accelrt_torch_free(ptr, 1024, 0, None)
    ...     _shim.uninstall()
"""

from __future__ import annotations

import atexit
import ctypes
import importlib.machinery
import logging
import os
import threading
from typing import Any

from .._errors import BackendUnavailableError, OutOfMemoryError, type_shown
from .._fork import reinit_after_fork
from .._handles import StreamHandle

__all__ = ["FREE", "MALLOC", "install", "installed", "load", "restore", "shim_path",
           "uninstall"]

#: The names PyTorch's ``CUDAPluggableAllocator`` is given.
MALLOC = "accelrt_torch_malloc"
FREE = "accelrt_torch_free"
_LIB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib")
_VERSION = 2

_log = logging.getLogger("accelrt.memory")

_ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
_FREE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                            ctypes.c_void_p)

_lock = reinit_after_fork(threading.Lock())
_lib: Any = None   # guarded by _lock: the loaded shim (a ctypes.CDLL)


class _Target:
    """Where the callbacks send PyTorch's calls: backend name, optional fixed device.

    ``known`` holds the (device, stream) pairs checked once (a set lookup on every
    allocation); a pair leaves it when accelrt takes the stream back (a closed or collected
    ``Stream``: :func:`_forget`) or the backend's name is registered again
    (:func:`_forget_backend`), so the next allocation on it is checked again. A stream
    destroyed outside accelrt is not noticed (PyTorch never destroys its pool's streams)."""

    __slots__ = ("backend", "device", "known", "raising")

    def __init__(self, backend: str, device: int | None, raising: bool) -> None:
        self.backend = backend
        self.device = device
        self.raising = raising
        self.known: set[tuple[int, int]] = set()   # (device, PyTorch's stream) validated


_target: _Target | None = None   # replaced whole (never mutated but ``known``) under _lock
_listening = False   # guarded by _lock: _forget and _forget_backend are registered


def shim_path() -> str | None:
    """The path of the built shim library (``accelrt/interop/_lib/_torch_shim<suffix>``), or
    ``None`` if this installation has none."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(_LIB_DIR, "_torch_shim" + suffix)
        if os.path.isfile(path):
            return path
    return None


def _not_built() -> BackendUnavailableError:
    return BackendUnavailableError(
        "accelrt's PyTorch allocator shim (accelrt/interop/_torch_shim.cpp) was not built when "
        "accelrt was installed (no C++ compiler then?); install a C++ compiler (e.g. g++) and "
        "reinstall accelrt from source: pip install --force-reinstall --no-deps --no-binary "
        "accelrt accelrt (or pip install -e . in a checkout)")


def load() -> Any:
    """The shim as a :class:`ctypes.CDLL` with its five functions typed (loaded once).

    Raises:
        BackendUnavailableError: the shim was not built, or is not the version this accelrt
            expects (a stale build: reinstall).
    """
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = shim_path()
        if path is None:
            raise _not_built()
        try:
            lib = ctypes.CDLL(path)
            version = lib.accelrt_torch_shim_version
        except (OSError, AttributeError) as exc:
            raise BackendUnavailableError(
                f"accelrt's PyTorch allocator shim at {path} cannot be loaded ({exc}); "
                f"reinstall accelrt to rebuild it") from exc
        version.restype = ctypes.c_int
        version.argtypes = []
        if version() != _VERSION:
            raise BackendUnavailableError(
                f"accelrt's PyTorch allocator shim at {path} is version {version()}, this "
                f"accelrt needs {_VERSION}: reinstall accelrt to rebuild it")
        lib.accelrt_torch_set_callbacks.restype = ctypes.c_int
        lib.accelrt_torch_set_callbacks.argtypes = [_ALLOC_FN, _FREE_FN, ctypes.c_int]
        lib.accelrt_torch_set_error.restype = None
        lib.accelrt_torch_set_error.argtypes = [ctypes.c_char_p]
        lib.accelrt_torch_malloc.restype = ctypes.c_void_p
        lib.accelrt_torch_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        lib.accelrt_torch_free.restype = None
        lib.accelrt_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                           ctypes.c_void_p]
        _lib = lib
        return lib


def _allocator(t: _Target, device: int, stream: int | None) -> tuple[Any, int]:
    """The caching allocator of ``device`` and accelrt's handle of PyTorch's ``stream``."""
    from .._device import _lazy_init
    from ..memory._allocator import get_allocator
    from ._common import cuda_backend
    if t.device is not None and device != t.device:
        raise RuntimeError(f"accelrt's allocator was installed for device {t.device} but "
                           f"PyTorch asked for memory on device {device}; install it with "
                           f"device=None to serve every device")
    b = cuda_backend(t.backend)
    key = (device, stream or 0)
    new = key not in t.known
    if new and not 0 <= device < b.device_count():
        raise IndexError(f"PyTorch asked for memory on device {device}, but {b.name} has "
                         f"{b.device_count()} device(s)")
    _lazy_init(b, device)
    handle = stream or b.default_stream(device)   # NULL: CUDA's legacy default stream
    if new:
        from .._stream import _in_use
        # known first, then checked: a stream taken back meanwhile is forgotten after the
        # check (_forget) or seen taken back by it; cuda registers a foreign (PyTorch's)
        # stream in stream_is_valid
        t.known.add(key)
        if not _in_use(b, device, StreamHandle(handle)):
            t.known.discard(key)
            raise ValueError(f"PyTorch's stream {handle:#x} is not a live stream of "
                             f"{b.name}:{device} (never made, destroyed, or a closed "
                             "accelrt stream's)")
    return get_allocator(b, device), handle


def _forget(b: Any, index: int, handle: int) -> None:
    """A stream accelrt owned was taken back (:func:`accelrt._stream._give_back`): check it
    again before serving it."""
    t = _target
    if t is not None and b.name == t.backend:
        t.known.discard((index, handle))


def _forget_backend(name: str) -> None:
    """``name`` was registered again (another instance): check every stream again."""
    t = _target
    if t is not None and name == t.backend:
        t.known.clear()


def _failed(message: str) -> None:
    """Leave the reason of a failed allocation with the shim (it raises it into PyTorch)."""
    try:
        _lib.accelrt_torch_set_error(message.encode("utf-8", "replace")[:2047])
    except BaseException:   # never into C
        pass


def _on_malloc(size: int, device: int, stream: int | None) -> int | None:
    t = _target
    try:
        if t is None:
            return None
        from ._common import cuda_backend
        b = cuda_backend(t.backend)

        def malloc() -> int | None:
            alloc, handle = _allocator(t, device, stream)
            return alloc.malloc(size, handle) or None
        # PyTorch's context stays current (accelrt's current device may be another)
        return b.keeping_context(malloc) if b.follows_current_device else malloc()
    except OutOfMemoryError as exc:
        _log.warning("accelrt's allocator for PyTorch: %s", exc)
        _failed(str(exc))
    except BaseException as exc:   # never into C: the shim returns NULL or raises in PyTorch
        _log.exception("accelrt's allocator for PyTorch: allocating %d bytes on device %d "
                       "failed", size, device)
        _failed(f"accelrt's allocator could not allocate {size} bytes on device {device}: "
                f"{type(exc).__name__}: {exc} (the traceback is on the accelrt.memory logger)")
    return None


def _on_free(ptr: int | None, size: int, device: int, stream: int | None) -> None:
    t = _target
    try:
        if t is None or not ptr:
            return
        from ..memory._allocator import get_allocator
        from ._common import cuda_backend
        b = cuda_backend(t.backend)
        # never blocks: PyTorch may free from a finalizer running inside the allocator's
        # critical section on this thread (the free is then queued). PyTorch frees without
        # a device guard: its context stays current, the block's device may be another
        free = get_allocator(b, device).free
        if b.follows_current_device:
            b.keeping_context(lambda: free(ptr, True))
        else:
            free(ptr, True)
    except BaseException:   # never into C: the block stays where it was
        _log.exception("accelrt's allocator for PyTorch: freeing %#x (%d bytes) on device %d "
                       "failed", ptr or 0, size, device)


# Kept for the life of the process: the shim may call them from any thread at any time.
_MALLOC_CB = _ALLOC_FN(_on_malloc)
_FREE_CB = _FREE_FN(_on_free)
_NO_MALLOC = _ALLOC_FN()   # NULL function pointers
_NO_FREE = _FREE_FN()


def install(*, backend: str = "cuda", device: int | None = None,
            raise_on_failure: bool = False) -> _Target | None:
    """Make the shim forward PyTorch's calls to accelrt's caching allocators of ``backend``.

    Args:
        backend: the accelrt backend whose allocators serve the calls (``"cuda"`` with
            PyTorch; the tests drive the shim on ``"cpu"``).
        device: serve only this device index (other devices fail, logged); ``None`` serves
            the device of each call.
        raise_on_failure: a failed allocation throws a C++ exception carrying accelrt's
            message (for PyTorch, which turns it into a ``RuntimeError``) instead of returning
            NULL (for ctypes callers, which cannot catch it).

    Returns:
        The installation this one replaces (``None`` if there was none), for
        :func:`restore`.

    Raises:
        BackendUnavailableError: the shim was not built, or ``backend`` is not available.
    """
    if device is not None and (not isinstance(device, int) or isinstance(device, bool)):
        raise TypeError(f"device must be an int or None, got {type_shown(device)}")
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a backend name, got {type_shown(backend)}")
    if not isinstance(raise_on_failure, bool):
        raise TypeError(f"raise_on_failure must be a bool, got "
                        f"{type_shown(raise_on_failure)}")
    from ._common import cuda_backend
    cuda_backend(backend)
    load()
    _listen()
    return _set_target(_Target(backend, device, raise_on_failure))


def _listen() -> None:
    """Have :func:`_forget` and :func:`_forget_backend` called from now on (once)."""
    global _listening
    with _lock:
        if _listening:
            return
        from .. import _backend, _stream
        _stream._on_give_back(_forget)
        _backend.on_change(_forget_backend)
        _listening = True


def uninstall() -> None:
    """Stop forwarding: the shim's malloc returns NULL (or raises, when installed with
    ``raise_on_failure``), its free does nothing (idempotent). Memory handed out stays
    allocated."""
    _set_target(None)


def restore(previous: _Target | None) -> None:
    """Put back what :func:`install` returned (``None``: :func:`uninstall`), e.g. when the
    caller's next step failed and an earlier installation must keep serving."""
    _set_target(previous)


def _set_target(target: _Target | None) -> _Target | None:
    """Forward to ``target`` (``None``: stop forwarding); returns the previous target."""
    global _target
    with _lock:
        previous = _target
        if target is not None:
            if previous is None:
                # once the interpreter finalizes, C must no longer call into Python
                atexit.unregister(uninstall)
                atexit.register(uninstall)
            _lib.accelrt_torch_set_callbacks(_MALLOC_CB, _FREE_CB, int(target.raising))
        elif _lib is not None:
            raising = previous is not None and previous.raising
            _lib.accelrt_torch_set_callbacks(_NO_MALLOC, _NO_FREE, int(raising))
        _target = target
        return previous


def installed() -> bool:
    """True between :func:`install` and :func:`uninstall`."""
    return _target is not None

