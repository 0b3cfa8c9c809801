"""Pluggable allocators: device memory from a shared library (or two Python callables).

:class:`PluggableAllocator` is PyTorch's ``CUDAPluggableAllocator`` for every backend: a shared
library exporting ``void* alloc(ssize_t size, int device, void* stream)`` and ``void
free(void* ptr, ssize_t size, int device, void* stream)``, loaded with :mod:`ctypes`. It is
used in one of two ways, as in PyTorch:

* :func:`change_current_allocator` replaces a backend's caching allocator before the backend
  allocated anything: every allocation then calls the library's ``alloc`` and every free its
  ``free`` (no caching, no statistics: ``memory_stats()`` and the other statistics, snapshots
  and memory history raise PyTorch's "does not yet support" errors, ``empty_cache()`` and
  ``set_per_process_memory_fraction()`` do nothing); :func:`get_allocator_backend` then says
  ``"pluggable"``.
* ``MemPool(allocator=PluggableAllocator(...))`` keeps the caching allocator and makes the
  library the raw allocator of that pool's segments: a ``NULL`` from ``alloc`` is an
  out-of-memory of the device, with the allocator's usual release-and-retry before
  :class:`~accelrt.OutOfMemoryError`; ``empty_cache()`` gives the segments back through
  ``free``.

``alloc`` receives the requested size, the device index and the raw stream handle the memory is
allocated on; ``free`` receives the pointer with the size, device and stream of its ``alloc``.
On the cpu backend the library returns ordinary host memory, which the backend adopts as that
device's memory while it is allocated (it is not charged to the device's memory budget).

Example::

    >>> from accelrt import memory
    >>> import numpy as np
    >>> blocks = {}
    >>> def alloc(size, device, stream):
    ...     buf = np.zeros(size, np.uint8); blocks[buf.ctypes.data] = buf
    ...     return buf.ctypes.data
    >>> def free(ptr, size, device, stream):
    ...     del blocks[ptr]
    >>> pool = memory.MemPool(memory.PluggableAllocator.from_callables(alloc, free))
    >>> with memory.use_mem_pool(pool, "cpu:0"):
    ...     p = memory.caching_allocator_alloc(4096, "cpu:0")
    >>> p in blocks    # the pool's segment came from alloc()
    True
    >>> memory.caching_allocator_delete(p); del pool; memory.empty_cache()
    >>> blocks
    {}
"""

from __future__ import annotations

import bisect
import ctypes
import operator
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, NoReturn, SupportsIndex

import numpy as np

from .. import _backend_registry, _device
from .._fork import reinit_after_fork
from ._allocator import DeviceCachingAllocator
from .._errors import type_shown

if TYPE_CHECKING:
    from .._backend import Backend

__all__ = ["NativeAllocator", "PluggableAllocator", "change_current_allocator",
           "get_allocator_backend", "get_current_allocator"]

AllocFn = Callable[[int, int, int], int]
FreeFn = Callable[[int, int, int, int], None]

#: Every address ``alloc`` returns must be a multiple of this (``alignof(max_align_t)``: what
#: ``malloc``, ``posix_memalign``, numpy and Python's allocators always give on 64-bit machines).
ALIGNMENT: Final = 16
#: Addresses are ``void*``: a range must end at or below this.
_ADDRESS_END: Final = 1 << 64


class _LiveRanges:
    """The address ranges that pluggable allocators handed out and that are still allocated,
    over the whole process (every allocator, backend and device: a live address is unique in a
    process), so that an ``alloc`` returning memory still in use is refused before any use.

    Re-entrant: a garbage collection inside :meth:`claim` may run a finalizer whose free calls
    :meth:`release` on the same thread. A release only removes ranges; :meth:`claim` repeats its
    search when one happened meanwhile and inserts with ``bisect.insort`` (a single call).

    Example::

        >>> from accelrt.memory._pluggable import _LiveRanges
        >>> r = _LiveRanges()
        >>> r.claim(0x1000, 0x2000, ("a", "cpu:0")), r.claim(0x1800, 0x2800, ("b", "cpu:1"))
        (None, (4096, 8192, ('a', 'cpu:0')))
        >>> r.release(0x1000); r.claim(0x1800, 0x2800, ("b", "cpu:1")) is None
        True
    """

    def __init__(self) -> None:
        self._lock = reinit_after_fork(threading.RLock())
        # guarded by _lock: base -> (end, (allocator, device)) of every live range
        self._ends: dict[int, tuple[int, tuple[str, str]]] = {}
        self._bases: list[int] = []                   # guarded by _lock; sorted bases
        self._releases = 0                            # guarded by _lock; counts releases

    def claim(self, base: int, end: int, owner: tuple[str, str]
              ) -> tuple[int, int, tuple[str, str]] | None:
        """Record ``[base, end)`` as live for ``owner`` (the allocator and the device); or,
        when it overlaps a live range, record nothing and return that range's ``(base, end,
        owner)``."""
        entry = (end, owner)
        with self._lock:
            while True:
                seen = self._releases
                hit = self._overlap(base, end)
                if self._releases == seen:
                    break
            if hit is not None:
                return hit
            self._ends[base] = entry
            bisect.insort(self._bases, base)
        return None

    def _overlap(self, base: int, end: int) -> tuple[int, int, tuple[str, str]] | None:
        bases = self._bases
        i = bisect.bisect_right(bases, base)
        for j in (i - 1, i):
            if 0 <= j < len(bases):
                other = bases[j]
                found = self._ends.get(other)
                if found is not None and other < end and base < found[0]:
                    return other, found[0], found[1]
        return None

    def release(self, base: int) -> None:
        """Forget the live range starting at ``base`` (nothing if there is none)."""
        with self._lock:
            if self._ends.pop(base, None) is not None:
                self._bases.remove(base)
                self._releases += 1


_live_ranges = _LiveRanges()


class _DlInfo(ctypes.Structure):
    """``Dl_info`` of ``<dlfcn.h>``."""
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


class _Elf64Sym(ctypes.Structure):
    """``Elf64_Sym`` of ``<elf.h>``."""
    _fields_ = [("st_name", ctypes.c_uint32), ("st_info", ctypes.c_ubyte),
                ("st_other", ctypes.c_ubyte), ("st_shndx", ctypes.c_uint16),
                ("st_value", ctypes.c_uint64), ("st_size", ctypes.c_uint64)]


#: ELF symbol types of data, not code: ``STT_OBJECT``, ``STT_COMMON``, ``STT_TLS``
_DATA_SYMBOL_TYPES: Final = {1: "a variable", 5: "a common variable", 6: "a thread-local variable"}
_RTLD_DL_SYMENT: Final = 1
#: glibc's ``dladdr1`` once looked up (``[None]``: there is none)
_dladdr1: list[Any] = []


def _data_symbol(addr: int | None) -> str | None:
    """What the symbol at ``addr`` (a ``dlsym`` result) is when it is data, not a function
    (``"a variable"``), from its ELF symbol type (glibc's ``dladdr1``); ``None`` for a
    function, or where the type cannot be read (another C library, a 32-bit process).
    Calling a variable's address as a function crashes the process.

    Example::

        >>> import ctypes, ctypes.util
        >>> from accelrt.memory._pluggable import _data_symbol
        >>> libc = ctypes.CDLL(ctypes.util.find_library("c"))
        >>> _data_symbol(ctypes.cast(libc["malloc"], ctypes.c_void_p).value) is None
        True
    """
    if not _dladdr1:
        found: Any = None
        if ctypes.sizeof(ctypes.c_void_p) == 8:
            for lib in (None, "libdl.so.2"):
                try:
                    found = ctypes.CDLL(lib)["dladdr1"]
                    break
                except (OSError, AttributeError):
                    continue
        if found is not None:
            found.restype = ctypes.c_int
            found.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo),
                              ctypes.POINTER(ctypes.POINTER(_Elf64Sym)), ctypes.c_int]
        _dladdr1.append(found)
    dladdr1 = _dladdr1[0]
    if dladdr1 is None or not addr:
        return None
    info, sym = _DlInfo(), ctypes.POINTER(_Elf64Sym)()
    if not dladdr1(addr, ctypes.byref(info), ctypes.byref(sym), _RTLD_DL_SYMENT) or not sym \
            or info.dli_saddr != addr:
        return None
    return _DATA_SYMBOL_TYPES.get(sym.contents.st_info & 0xF)


class _LibraryError(ValueError, OSError):
    """The library of a :class:`PluggableAllocator` cannot be loaded: a ``ValueError`` and the
    ``OSError`` that PyTorch's ``CUDAPluggableAllocator`` (``ctypes.CDLL``) raises."""


class _SymbolError(ValueError, AttributeError):
    """The library of a :class:`PluggableAllocator` lacks a function: a ``ValueError`` and the
    ``AttributeError`` that PyTorch's ``CUDAPluggableAllocator`` (``getattr(CDLL, name)``)
    raises."""


class NativeAllocator:
    """A backend's own allocator (the caching allocator, or the stream-ordered pool of
    ``backend:cudaMallocAsync``) as one object: what ``_get_current_allocator().allocator()``
    gives while no :class:`PluggableAllocator` replaces it, as PyTorch's gives its native
    allocator's object. One object per backend name, so two calls compare equal.

    Example::

        >>> import accelrt as acc
        >>> a = acc.cpu.memory._get_current_allocator().allocator()
        >>> a, a is acc.cpu.memory._get_current_allocator().allocator()
        (NativeAllocator('cpu'), True)
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name: Final = name

    def __repr__(self) -> str:
        return f"NativeAllocator({self.name!r})"


class _CUDAAllocator:
    """PyTorch's ``torch.cuda.memory._CUDAAllocator``: a wrapper of an allocator object
    (:class:`PluggableAllocator` or a backend's :class:`NativeAllocator`), what
    ``_get_current_allocator()`` returns and :func:`change_current_allocator` takes.
    :class:`PluggableAllocator` is one, as PyTorch's ``CUDAPluggableAllocator``.

    Args:
        allocator: the allocator object.

    Raises:
        TypeError: ``allocator`` is neither (PyTorch's pybind refuses it at the switch).

    Example::

        >>> import accelrt as acc
        >>> w = acc.cpu.memory._CUDAAllocator(acc.cpu.memory._get_current_allocator().allocator())
        >>> w.allocator()
        NativeAllocator('cpu')
    """

    def __init__(self, allocator: PluggableAllocator | NativeAllocator) -> None:
        if not isinstance(allocator, (PluggableAllocator, NativeAllocator)):
            raise TypeError(f"_CUDAAllocator() takes an allocator object (an accelrt.memory."
                            f"PluggableAllocator, or the .allocator() of "
                            f"_get_current_allocator()), got {type_shown(allocator)}")
        self._wrapped = allocator

    def allocator(self) -> PluggableAllocator | NativeAllocator:
        """The wrapped allocator object (PyTorch's ``torch._C._cuda_CUDAAllocator``)."""
        return self._wrapped

    @property
    def _allocator(self) -> PluggableAllocator | NativeAllocator:
        """PyTorch's ``_allocator`` attribute: the object :meth:`allocator` returns
        (read-only here, see :attr:`PluggableAllocator._allocator`)."""
        return self._wrapped

    def __repr__(self) -> str:
        return f"_CUDAAllocator({self._wrapped!r})"


class PluggableAllocator(_CUDAAllocator):
    """A raw device allocator in a shared library, PyTorch's ``CUDAPluggableAllocator``.

    Args:
        path_to_so_file: path of the shared library.
        alloc_fn_name: name of its ``void* alloc(ssize_t size, int device, void* stream)``
            function; it returns ``NULL`` when it cannot allocate.
        free_fn_name: name of its ``void free(void* ptr, ssize_t size, int device, void*
            stream)`` function.

    Raises:
        TypeError: an argument is not a string (or a path for ``path_to_so_file``).
        ValueError: the library cannot be loaded (also an ``OSError``, as PyTorch's; an empty
            path, which would load the program itself, is refused too), or lacks one of the
            functions (also an ``AttributeError``, as PyTorch's), or a function name contains
            a NUL character or names a variable (where glibc's ``dladdr1`` tells: PyTorch
            would call it and crash).

    Use it with :func:`change_current_allocator` or ``MemPool(allocator=...)``;
    :meth:`from_callables` makes one from two Python functions.

    Example::

        >>> from accelrt import memory
        >>> try:
        ...     memory.PluggableAllocator("/no/such/lib.so", "my_alloc", "my_free")
        ... except ValueError as e:
        ...     print(str(e).split(":")[0])
        cannot load the pluggable allocator library '/no/such/lib.so'
    """

    def __init__(self, path_to_so_file: str | os.PathLike[str], alloc_fn_name: str,
                 free_fn_name: str) -> None:
        if not isinstance(path_to_so_file, (str, os.PathLike)):
            raise TypeError(f"path_to_so_file must be a str or a path, got "
                            f"{type_shown(path_to_so_file)}")
        for what, val in (("alloc_fn_name", alloc_fn_name), ("free_fn_name", free_fn_name)):
            if not isinstance(val, str):
                raise TypeError(f"{what} must be a str, got {type_shown(val)}")
        path = os.fspath(path_to_so_file)
        if not isinstance(path, str):
            raise TypeError(f"path_to_so_file must be a str or a path, got a path of "
                            f"{type_shown(path)}")
        problem = ("the path is empty (ctypes would load the program itself)" if not path
                   else "the path contains a NUL character" if "\0" in path else None)
        try:
            if problem is not None:
                raise OSError(problem)
            lib = ctypes.CDLL(path)
        except OSError as exc:
            raise _LibraryError(f"cannot load the pluggable allocator library {path!r}: {exc}; "
                                "pass the path of a shared library (.so) built for this "
                                "machine") from exc
        fns = []
        for what, name in (("alloc", alloc_fn_name), ("free", free_fn_name)):
            if "\0" in name:
                raise ValueError(f"{what}_fn_name {name!r} contains a NUL character (the C "
                                 "lookup would stop there); pass the function's name")
            try:
                fn = lib[name]    # always a symbol lookup, never an attribute of the CDLL
            except AttributeError:
                raise _SymbolError(f"the pluggable allocator library {path!r} has no {what} "
                                   f"function {name!r}; export it with C linkage (extern \"C\" "
                                   "in C++)") from None
            kind = _data_symbol(ctypes.cast(fn, ctypes.c_void_p).value)
            if kind is not None:
                raise ValueError(f"{name!r} in the pluggable allocator library {path!r} is "
                                 f"{kind}, not a function: calling it would crash the process; "
                                 f"pass the name of its {what} function")
            fns.append(fn)
        c_alloc, c_free = fns
        c_alloc.restype = ctypes.c_void_p
        c_alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        c_free.restype = None
        c_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]

        def alloc(size: int, device: int, stream: int) -> int:
            return int(c_alloc(size, device, stream or None) or 0)

        def free(ptr: int, size: int, device: int, stream: int) -> None:
            c_free(ptr, size, device, stream or None)

        self._setup(alloc, free, f"{path}:{alloc_fn_name}/{free_fn_name}")
        self._lib: ctypes.CDLL | None = lib   # keeps the library loaded while this lives

    def _setup(self, alloc: AllocFn, free: FreeFn, what: str) -> None:
        self._alloc = alloc
        self._free = free
        self._what = what
        # pointer -> (size, backend, device, stream) of its alloc; single dict operations
        # only (atomic), so a free from a finalizer can never deadlock against an alloc
        self._live: dict[int, tuple[int, Backend, int, int]] = {}

    @classmethod
    def from_callables(cls, alloc: AllocFn, free: FreeFn) -> PluggableAllocator:
        """A pluggable allocator calling two Python functions with the C functions' arguments:
        ``alloc(size, device, stream) -> int`` returns an address (``0``: out of memory) and
        ``free(ptr, size, device, stream)`` releases one. ``stream`` is the raw stream handle.

        Raises:
            TypeError: ``alloc`` or ``free`` is not callable.

        Example::

            >>> import numpy as np
            >>> from accelrt import memory
            >>> held = {}
            >>> def alloc(size, device, stream):
            ...     b = np.empty(size, np.uint8); held[b.ctypes.data] = b; return b.ctypes.data
            >>> a = memory.PluggableAllocator.from_callables(alloc, lambda p, *_: held.pop(p))
            >>> a
            PluggableAllocator(<callables alloc/<lambda>>)
        """
        for what, fn in (("alloc", alloc), ("free", free)):
            if not callable(fn):
                raise TypeError(f"PluggableAllocator.from_callables: {what} must be callable, "
                                f"got {type_shown(fn)}")
        self = cls.__new__(cls)
        names = "/".join(getattr(f, "__name__", type(f).__name__) for f in (alloc, free))
        self._setup(alloc, free, f"<callables {names}>")
        self._lib = None
        return self

    def allocator(self) -> PluggableAllocator:
        """The underlying allocator object (``CUDAPluggableAllocator.allocator()``): torch
        returns the C++ allocator its ``MemPool(allocator=)`` and allocator switch take; here
        that object is this one, so torch's ``MemPool(a.allocator())`` works unchanged.

        Example::

            >>> from accelrt import memory
            >>> a = memory.PluggableAllocator.from_callables(lambda *_: 0, lambda *_: None)
            >>> a.allocator() is a, memory.MemPool(a.allocator()).allocator is a
            (True, True)
        """
        return self

    @property
    def _allocator(self) -> PluggableAllocator:
        """torch's ``_CUDAAllocator._allocator`` attribute, the object :meth:`allocator`
        returns: vLLM's sleep-mode allocator (``vllm/device_allocator/cumem.py``) and others
        write ``MemPool(alloc._allocator)``. Here that object is this one.

        Example::

            >>> from accelrt import memory
            >>> a = memory.PluggableAllocator.from_callables(lambda *_: 0, lambda *_: None)
            >>> memory.MemPool(a._allocator).allocator is a
            True
        """
        return self

    def __repr__(self) -> str:
        return f"PluggableAllocator({self._what})"

    # ------------------------------------------------------------------ raw operations
    def _raw_alloc(self, b: Backend, index: int, size: int, stream: int) -> int:
        """Call ``alloc``; the address, or 0 when it returned NULL.

        Everything ``alloc`` returns is checked before any use. An exception of ``alloc``
        propagates (nothing was allocated). An address not aligned to :data:`ALIGNMENT` may be
        real memory of the library: it is handed back to ``free`` before the error. Any other
        refused value is not given to ``free``: it is no address (not an int, a bool, negative,
        ``2**64`` or more), or no memory the library can own (its range runs past ``2**64``,
        overlaps memory still allocated by a pluggable allocator, or the device refuses it as
        memory it already has), so that ``free`` could crash or release memory in use; leaking
        it is the safe side.

        Raises:
            TypeError: ``alloc`` returned something other than an int.
            ValueError: ``alloc`` returned an address that cannot be used.
        """
        ret = self._alloc(size, index, stream)
        dev = f"{b.name}:{index}"
        ptr = self._address(ret, dev)
        if not ptr:
            return 0
        end = ptr + size
        if end > _ADDRESS_END:
            self._refuse(ptr, size, index, stream, dev, "runs past the end of the 64-bit "
                         "address space (2**64)", give_back=False)
        if ptr % ALIGNMENT:
            self._refuse(ptr, size, index, stream, dev, f"is not aligned to {ALIGNMENT} bytes "
                         "(malloc's alignment)", give_back=True)
        hit = _live_ranges.claim(ptr, end, (self._what, dev))
        if hit is not None:
            base, hit_end, (by, on) = hit
            self._refuse(ptr, size, index, stream, dev,
                         f"overlaps [{base:#x}, {hit_end:#x}), which the pluggable allocator "
                         f"{by} returned for {on} and is still allocated", give_back=False)
        if b.capabilities(index).adopt_memory:
            try:
                b.adopt_memory(index, ptr, size)
            except Exception as exc:
                _live_ranges.release(ptr)
                self._refuse(ptr, size, index, stream, dev, f"the device refused ({exc})",
                             give_back=False, cause=exc)
            except BaseException:   # interrupted (KeyboardInterrupt): the memory goes back
                _live_ranges.release(ptr)
                self._free(ptr, size, index, stream)
                raise
        self._live[ptr] = (size, b, index, stream)
        return ptr

    def _address(self, ret: object, dev: str) -> int:
        """``ret``, what ``alloc`` returned for ``dev``, as an address (0: NULL)."""
        ptr = None
        if isinstance(ret, SupportsIndex) and not isinstance(ret, (bool, np.bool_)):
            ptr = operator.index(ret)   # an int, or an integer such as numpy's
        if ptr is None:
            hint = " (a missing return statement?)" if ret is None else ""
            raise TypeError(f"the pluggable allocator {self._what} returned {ret!r} for {dev}"
                            f"{hint}; its alloc must return an address (an int, 0 for out of "
                            "memory)")
        if not 0 <= ptr < _ADDRESS_END:
            raise ValueError(f"the pluggable allocator {self._what} returned {ptr:#x} for {dev}, "
                             "which is not an address (a void* lies in [0, 2**64)); its alloc "
                             "must return the address of the memory, 0 for out of memory")
        return ptr

    def _refuse(self, ptr: int, size: int, index: int, stream: int, dev: str, why: str, *,
                give_back: bool, cause: BaseException | None = None) -> NoReturn:
        """Raise ValueError for the range ``alloc`` returned, after handing it back to
        ``free`` when ``give_back``."""
        what = (f"the pluggable allocator {self._what} returned [{ptr:#x}, {ptr + size:#x}) "
                f"({size} bytes) for {dev}, which {why}")
        if give_back:
            try:
                self._free(ptr, size, index, stream)
            except Exception as exc:  # noqa: BLE001 - reported in the error below
                what += f" (handing it back to free raised {type(exc).__name__}: {exc})"
            else:
                what += " (handed back to its free)"
        else:
            what += " (not handed back to free: it is no memory the library can own)"
        raise ValueError(f"{what}; alloc must return the address of {size} bytes that nothing "
                         f"else uses, aligned to {ALIGNMENT} bytes, or 0 for out of memory"
                         ) from cause

    def _raw_free(self, ptr: int) -> None:
        """Call ``free`` with the arguments of the pointer's ``alloc``. Once called, accelrt
        no longer uses the memory, even when ``free`` raises (its exception propagates).

        Raises:
            ValueError: ``ptr`` is not live memory of this allocator (PyTorch's message).
        """
        meta = self._live.pop(ptr, None)
        if meta is None:
            raise ValueError(f"Trying to free a pointer not allocated here ({ptr:#x})")
        size, b, index, stream = meta
        try:
            if b.capabilities(index).adopt_memory:
                b.disown_memory(index, ptr)  # waits for queued work on the memory (cpu, async)
        finally:
            _live_ranges.release(ptr)
        try:
            self._free(ptr, size, index, stream)
        except Exception as exc:
            note = getattr(exc, "add_note", None)   # Python 3.11+
            if note is not None:
                note(f"raised by the free of the pluggable allocator {self._what} for pointer "
                     f"{ptr:#x} of {b.name}:{index}; accelrt no longer uses that memory")
            raise

    def _live_count(self) -> int:
        return len(self._live)


_current: dict[str, PluggableAllocator] = {}   # backend name -> its replacing allocator
_current_lock = reinit_after_fork(threading.Lock())
#: backend name -> its NativeAllocator (guarded by _current_lock)
_natives: dict[str, NativeAllocator] = {}


def _forget_backend(name: str) -> None:
    """Called by the backend registry after ``name`` was registered again or unregistered
    (:func:`accelrt.backends.on_change`). As PyTorch's ``change_current_allocator``, a swap is
    for the process: it outlives ``register(name, factory, replace=True)`` (the new instance's
    devices get the same allocator). PyTorch has no unregister: a name unregistered no longer
    denotes a backend, so its swap ends there, and a backend registered under that name later
    starts with accelrt's caching allocator (and may be swapped again), as a new device type
    would (docs/memory.md). Arrays made through the old allocator keep it and free through it."""
    if name in _backend_registry._factories:
        return
    with _current_lock:
        _current.pop(name, None)


_backend_registry.on_change(_forget_backend)


def _backend_of(device_type: object) -> Backend:
    if device_type is None:
        b = _device._current()
        if b is None:
            b = _device._require_current()
        return b
    if not isinstance(device_type, str):
        raise TypeError(f"device_type must be a backend name such as 'cuda' or None, got "
                        f"{type_shown(device_type)}")
    from .._backend import get_backend
    return get_backend(device_type)


def change_current_allocator(allocator: _CUDAAllocator, device_type: str | None = None
                             ) -> None:
    """Make ``allocator`` the allocator of every device of a backend, replacing its caching
    allocator (PyTorch's ``torch.cuda.memory.change_current_allocator``).

    Args:
        allocator: a :class:`PluggableAllocator`, or what :func:`get_current_allocator`
            returned (PyTorch's ``_CUDAAllocator``): the backend's own allocator there changes
            nothing, as PyTorch's switch to the allocator in use (``change_current_allocator(
            _get_current_allocator())``) before the first allocation.
        device_type: the backend name; ``None`` is the current accelerator. Device modules
            (``accelrt.cuda``) bind their own.

    Raises:
        TypeError: ``allocator`` is not a :class:`PluggableAllocator` or ``_CUDAAllocator``.
        ValueError: it wraps another backend's own allocator.
        RuntimeError: the backend's allocator was already initialized (it allocated, or was
            asked for, on some device; or an allocator was already swapped in): PyTorch's
            "Can't swap an already initialized allocator".

    Example::

        >>> from accelrt import backends, memory
        >>> from accelrt.backends.cpu import CpuBackend
        >>> backends.register("plugdoc", lambda: CpuBackend(name="plugdoc"), replace=True)
        >>> import numpy as np
        >>> held = {}
        >>> def alloc(size, device, stream):
        ...     b = np.empty(size, np.uint8); held[b.ctypes.data] = b; return b.ctypes.data
        >>> plug = memory.PluggableAllocator.from_callables(alloc, lambda p, *_: held.pop(p))
        >>> memory.change_current_allocator(plug, "plugdoc")
        >>> memory.get_allocator_backend("plugdoc")
        'pluggable'
        >>> import accelrt as acc
        >>> x = acc.full(4, 7, dtype="int32", device="plugdoc:0")
        >>> x.data_ptr() in held, x.tolist()
        (True, [7, 7, 7, 7])
        >>> del x; held     # freed through the allocator's free
        {}
    """
    if not isinstance(allocator, _CUDAAllocator):
        raise TypeError(f"change_current_allocator() takes an accelrt.memory."
                        f"PluggableAllocator (or what _get_current_allocator() returned), got "
                        f"{type_shown(allocator)}")
    b = _backend_of(device_type)
    obj = allocator.allocator()
    if isinstance(obj, NativeAllocator) and obj.name != b.name:
        raise ValueError(f"change_current_allocator(): {allocator!r} is the {obj.name!r} "
                         f"backend's own allocator, which cannot allocate for {b.name!r}; "
                         f"pass {b.name!r}'s _get_current_allocator() or a PluggableAllocator")
    from . import _registry
    with _current_lock, _registry._lock:
        initialized = b.name in _current or any(
            name == b.name for name, _ in _registry._allocators)
        if initialized:
            raise RuntimeError("Can't swap an already initialized allocator")
        if isinstance(obj, PluggableAllocator):
            _current[b.name] = obj
        # (the backend's own allocator: it stays, nothing to swap)


def get_current_allocator(device_type: str | None = None) -> _CUDAAllocator:
    """The allocator of a backend (PyTorch's ``torch.cuda.memory._get_current_allocator``):
    a new ``_CUDAAllocator`` wrapping the :class:`PluggableAllocator` that
    :func:`change_current_allocator` swapped in, or else the backend's own allocator
    (:class:`NativeAllocator`, one object per backend, whichever of ``native`` and
    ``cudaMallocAsync`` :func:`get_allocator_backend` names). It starts no allocator.

    Args:
        device_type: the backend name; ``None`` is the current accelerator. Device modules
            (``accelrt.cuda.memory._get_current_allocator()``) bind their own.

    Example::

        >>> from accelrt.memory._pluggable import get_current_allocator
        >>> get_current_allocator("cpu").allocator()
        NativeAllocator('cpu')
    """
    b = _backend_of(device_type)
    with _current_lock:
        obj: PluggableAllocator | NativeAllocator | None = _current.get(b.name)
        if obj is None:
            obj = _natives.get(b.name)
            if obj is None:
                obj = _natives[b.name] = NativeAllocator(b.name)
    return _CUDAAllocator(obj)


def get_allocator_backend(device_type: str | None = None) -> str:
    """The allocator of a backend: ``"native"`` (accelrt's caching allocator),
    ``"cudaMallocAsync"`` (the device's stream-ordered pool, selected by the option
    ``backend:cudaMallocAsync`` on a backend that has one) or ``"pluggable"`` (replaced by
    :func:`change_current_allocator`), as PyTorch's ``torch.cuda.get_allocator_backend``.

    Example::

        >>> from accelrt import memory
        >>> memory.get_allocator_backend("cpu")
        'native'
    """
    b = _backend_of(device_type)
    if b.name in _current:
        return "pluggable"
    from . import _allocator
    from ._config import get_config
    for i in range(b.device_count()):
        started = _allocator.peek_allocator(b.name, i)
        if started is not None:
            return started.allocator_backend
    cfg = get_config()
    if b.device_count() and _allocator._wants_pool(cfg, b, 0):
        return cfg.backend
    return "native"


def _make_allocator(backend: Backend, index: int) -> DeviceCachingAllocator | None:
    """The replacing allocator of ``backend``'s device ``index``, or ``None`` (native)."""
    plug = _current.get(backend.name)
    if plug is None:
        return None
    from ._pluggable_device import PluggableDeviceAllocator   # (it imports this module)
    return PluggableDeviceAllocator(backend, index, plug)
