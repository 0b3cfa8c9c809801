"""Where a factory allocates: a device's placement resolved once (:class:`Site`), the dtype
check of the factories, and the one allocation every factory makes (:meth:`Site.malloc`).

``Array``'s constructors and the random factories come here on every call, so a site keeps
what is per device: the backend and index, the ``(name, index)`` key of the per-device tables,
the dtype arguments already checked there and the device's default generator. The compiled
build compiles this module (``setup.py``'s ``COMPILED``).

Example::

    >>> import accelrt as acc
    >>> from accelrt._placement import place
    >>> site = place("cpu:0")
    >>> tuple(site.key), site.dtype("float32").name, place("cpu:0") is site
    (('cpu', 0), 'float32', True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

import numpy as np

from . import _backend
from . import _device as _device_mod
from ._device import _factory_device, _get_device, _lazy_init
from ._errors import caused, shown, type_shown
from ._memory_owner import _Memory
from ._size import storage_nbytes
from ._device_core import _Key, _key_of
from ._stream_core import _current_in
from .memory import _registry
from .memory._registry import get_allocator

if TYPE_CHECKING:
    from ._backend import Backend
    from ._handles import StreamHandle
    from ._typing import DeviceLike

__all__ = ["Site", "_check_dtype", "check_dtype_form", "dtype_cache_key", "init_array", "new_array", "place", "site"]

_T = TypeVar("_T")


# ---------------------------------------------------------------------- dtype checks

_supported: dict[tuple[str, int], frozenset[str]] = {}


#: (dtype argument, backend name, device index) -> the checked dtype (np.dtype() and the
#: checks below cost microseconds on every allocation otherwise)
_checked_dtypes: dict[tuple[Any, str, int], np.dtype] = {}


def _check_dtype(dtype: object, b: Backend, index: int) -> np.dtype:
    """``dtype`` as a numpy dtype that device ``index`` of ``b`` supports; ``None`` is the
    default dtype, float32 (as ``torch.empty(2, dtype=None)`` is ``torch.get_default_dtype()``).

    Raises:
        TypeError: an unknown or unsupported dtype.
        ValueError: a dtype not in native byte order.
    """
    try:
        return _checked_dtypes[(dtype, b.name, index)]
    except (KeyError, TypeError):   # TypeError: an unhashable argument
        pass
    dt = _check_dtype_uncached(dtype, b, index)
    if len(_checked_dtypes) < 256 and dtype_cache_key(dtype):
        _checked_dtypes[(dtype, b.name, index)] = dt
    return dt


def dtype_cache_key(dtype: object) -> bool:
    """Whether a dtype argument may key a cache of checked dtypes: None, a string, a type or a
    numpy dtype, each equal only to what names the same dtype. Not another object numpy
    reads a dtype from (its ``dtype`` attribute: an array, a numpy scalar): a cache would keep
    it alive (an ``Array``'s device memory with it), and it may equal a plain number
    (``np.bool_(True) == 1``), which is no dtype.

    Example::

        >>> import numpy as np
        >>> from accelrt._placement import dtype_cache_key
        >>> dtype_cache_key("float32"), dtype_cache_key(np.int8), dtype_cache_key(np.bool_(True))
        (True, True, False)
    """
    return dtype is None or isinstance(dtype, (str, type, np.dtype))


def check_dtype_form(dtype: object) -> None:
    """Refuse a dtype argument that is not one of :data:`accelrt._typing.DTypeLike`'s forms:
    a numpy dtype, a dtype name (a ``str``) or a type. numpy would also read a dtype from an
    object's ``dtype`` attribute (a numpy scalar, a numpy array, an ``Array``) and from
    ``bytes``; torch 2.15's argument parser refuses anything but a ``torch.dtype`` with
    ``TypeError`` ("argument 'dtype' must be torch.dtype, not numpy.float32"), and so does
    accelrt for what is none of its forms. ``None`` (the default dtype) is the caller's.

    Example::

        >>> import numpy as np
        >>> from accelrt._placement import check_dtype_form
        >>> check_dtype_form(np.float32), check_dtype_form("int8")
        (None, None)
        >>> check_dtype_form(np.float32(1.0))
        Traceback (most recent call last):
        ...
        TypeError: argument 'dtype' must be a numpy dtype, a dtype name or a type (np.dtype('float32'), 'float32', np.float32), not numpy.float32; to use the dtype of an array or numpy scalar x, pass x.dtype
    """
    if not isinstance(dtype, (str, type, np.dtype)):
        if hasattr(type(dtype), "dtype"):
            hint = "; to use the dtype of an array or numpy scalar x, pass x.dtype"
        elif type(dtype) in (bool, int, float, complex):
            hint = f" ({shown(dtype)})"
        else:
            hint = ""
        raise TypeError(f"argument 'dtype' must be a numpy dtype, a dtype name or a type "
                        f"(np.dtype('float32'), 'float32', np.float32), not "
                        f"{type_shown(dtype)}{hint}")


def _check_dtype_uncached(dtype: Any, b: Backend, index: int) -> np.dtype:
    if dtype is None:
        dtype = "float32"       # PyTorch's default dtype
    else:
        check_dtype_form(dtype)
    try:
        dt: np.dtype[Any] = np.dtype(dtype)
    except (TypeError, ValueError) as exc:     # ValueError: numpy cannot print a huge int
        why = f" ({exc})" if isinstance(exc, TypeError) else ""
        raise caused(TypeError(f"unknown dtype {shown(dtype)}; pass a numpy dtype such as "
                               f"'float32' or np.int64{why}"), None) from None
    if dt.kind not in "biufc" or dt.fields is not None or dt.subdtype is not None:
        raise TypeError(f"dtype {dt} is not supported; use a bool, integer, floating or "
                        "complex dtype")
    if not dt.isnative:
        raise ValueError(f"dtype {dt.str!r} is not in native byte order; use "
                         f"{dt.newbyteorder('=').str!r}")
    key = (b.name, index)
    names = _supported.get(key)
    if names is None:
        names = _supported[key] = frozenset(b.get_device_capability(index)["supported_dtypes"])
    if dt.name not in names:
        raise TypeError(f"dtype {dt.name} is not supported on {b.name}:{index}; supported: "
                        f"{', '.join(sorted(names))}")
    return dt


# ---------------------------------------------------------------------- sites

# The containers the hot paths read, bound ``Final`` (never rebound where they live): a
# compiled module reads a ``Final`` name from a C variable, any other global from its dict.
_tls: Final = _device_mod._tls                  # the per-thread state (``hot``)
_dev_globals: Final = vars(_device_mod)         # (rebound names, read by key: one dict lookup)
_memory: Final = _Memory                        # (an imported class is a lookup per use)
_allocators: Final = _registry._allocators      # (name, index) -> the device's allocator

class Site:
    """A device's placement, resolved once: the backend and index, the ``(name, index)`` key
    of the per-device tables, the dtype arguments already checked there and the default
    generator."""

    b: Backend
    index: int
    name: str
    key: _Key
    #: dtype argument -> the dtype :func:`_check_dtype` returned for it on this device
    dtypes: dict[object, np.dtype]
    #: the device's default generator once a random factory used it (the one
    #: ``random._generator._default_for`` returns for this backend instance: made once and
    #: never replaced); typed Any: ``accelrt.random`` is not imported here
    default: Any

    def __init__(self, b: Backend, index: int) -> None:
        self.b, self.index, self.name = b, index, b.name
        self.key = _key_of(b.name, index)
        self.dtypes = {}
        self.default = None

    def dtype(self, dtype: object) -> np.dtype:
        """:func:`_check_dtype` of ``dtype`` on this device, remembered in :attr:`dtypes`."""
        try:
            dt = self.dtypes.get(dtype)
        except TypeError:   # an unhashable argument: checked (and refused) below
            dt = None
        if dt is None:
            dt = _check_dtype(dtype, self.b, self.index)
            if len(self.dtypes) < 16 and dtype_cache_key(dtype):
                self.dtypes[dtype] = dt
        return dt

    def malloc(self, nbytes: int) -> tuple[_Memory, StreamHandle]:
        """``nbytes`` from the device's caching allocator on the calling thread's current
        stream (initialising the device for this thread first), and that stream: the one
        allocation of every factory."""
        b, index, key = self.b, self.index, self.key
        _, streams, inited = _tls.hot   # (one thread-local lookup)
        if key not in inited:
            _lazy_init(b, index)
        alloc = _allocators.get(key)
        if alloc is None or alloc._b is not b:
            alloc = get_allocator(b, index)
        stream = _current_in(streams, b, self.name, index, key)._handle   # the current one's
        ptr = alloc.malloc(nbytes, stream) if nbytes else 0
        return _memory(ptr, nbytes, alloc), stream


#: ``(backend name, index)`` -> the :class:`Site` of that device of the backend instance it
#: holds (replaced when the name refers to another instance)
_sites: Final[dict[tuple[str, int], Site]] = {}

#: Device strings with an index seen so far -> their :class:`Site`, used while the backend is
#: still the registered instance of its name (parsing a string and checking the index cost
#: more than the rest of the placement).
_placed: Final[dict[str, Site]] = {}

_instances: Final = _backend._instances    # the registry's instances by name (never rebound)


def _forget_sites(name: str) -> None:
    """Called by the registry after backend ``name`` was registered again or unregistered
    (:func:`accelrt.backends.on_change`): drop the sites of instances the name no longer
    refers to, which held them (and their allocators' cached memory) until another instance
    of the name made a site of the same device."""
    current = _instances.get(name)
    for key in [k for k, st in _sites.items() if st.name == name and st.b is not current]:
        _sites.pop(key, None)
    for dev in [d for d, st in _placed.items() if st.name == name and st.b is not current]:
        _placed.pop(dev, None)


_backend.on_change(_forget_sites)


def site(b: Backend, index: int) -> Site:
    """The :class:`Site` of device ``index`` (checked) of ``b``."""
    found = _sites.get((b.name, index))
    if found is None or found.b is not b:
        found = Site(b, index)
        if len(_sites) < 256:
            _sites[found.key] = found
    return found


def place(device: object) -> Site:
    """The :class:`Site` of any ``DeviceLike`` (``_get_device(device)``: same checks, same
    errors); a string naming an index is remembered."""
    if type(device) is str:
        found = _placed.get(device)
        if found is not None and _instances.get(found.name) is found.b:
            return found
        b, index = _get_device(device)
        found = site(b, index)
        if ":" in device and len(_placed) < 64:
            _placed[device] = found
        return found
    if device is None:
        cur: Backend | None = _dev_globals["_current_backend"]
        if cur is not None:
            # what _get_device(None) answers once the current accelerator is chosen: its
            # current device in this thread (the pure call was a sixth of empty(256) + free)
            return site(cur, _tls.device.get(cur.name, 0))
    # any object: _get_device (pure Python) refuses a wrong one with accelrt's own errors
    b, index = _get_device(cast("DeviceLike", device), torch_parser=True)
    return site(b, index)


def init_array(arr: Any, shape: tuple[int, ...], dtype: object, device: object) -> Any:
    """Allocate a checked ``shape`` of ``dtype`` on ``device`` (``None``: the factories' default
    device, :func:`accelrt.get_default_device`) into the new :class:`accelrt.Array` ``arr``
    and return it: the one allocation of ``Array``'s constructors (typed Any: ``Array`` is not
    imported here)."""
    if device is None and _dev_globals["_defaults_used"]:
        device = _factory_device(None)     # a with-device block's, or the default
    where = place(device)
    dt = where.dtype(dtype)
    arr._mem = where.malloc(storage_nbytes(shape, dt.itemsize))[0]
    arr._shape = shape
    arr._dtype = dt
    arr._b = where.b
    arr._index = where.index
    return arr


_object_new: Final[Any] = object.__new__


def new_array(cls: type[_T], shape: tuple[int, ...], dtype: object, device: object) -> _T:
    """:func:`init_array` into a new ``cls`` object: ``new_array(Array, shape, dtype, device)``
    is a new array of a factory's checked size, dtype and device."""
    arr: _T = _object_new(cls)
    init_array(arr, shape, dtype, device)
    return arr
