"""``accelrt.random.Generator`` and the per-device default generators.

A generator is a 64-bit ``seed`` (the Philox key) and a 64-bit ``offset`` (the next unused
Philox counter block). Each request reserves the blocks it consumes and advances the offset
past them, so later requests never reuse a counter. The state is 16 bytes, like PyTorch's
CUDA Philox state: ``get_state()`` returns a ``numpy.uint8`` array holding the seed then the
offset, each as a little-endian uint64.

Default generators exist one per ``(backend, device)``, created on first use with seed
``67280421310721`` (PyTorch's default). Seeds or states set before a device's generator exists
are remembered and applied when it is created; creating one never initialises the device.

Example::

    >>> from accelrt.random import Generator
    >>> g = Generator("cpu:0").manual_seed(123)
    >>> g.initial_seed(), len(g.get_state())
    (123, 16)
"""

from __future__ import annotations

import operator
import secrets
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from .._device import _get_device
from .._device import device as _device_cls
from .._errors import AcceleratorTypeError, AcceleratorValueError, shown, type_shown
from .._fork import reinit_after_fork
from ..backends._common import check_u64
from .._graph import _capturing   # the graph captures in progress (never rebound)
from . import _graphsafe

if TYPE_CHECKING:
    from .._backend import Backend
    from .._typing import DeviceLike, PhiloxWord, RngState, RngStateLike

__all__ = ["DEFAULT_SEED", "STATE_SIZE", "Generator", "default_generator"]

#: PyTorch's default seed (``default_rng_seed_val``).
DEFAULT_SEED = 67280421310721
#: Bytes in a generator state: seed then offset, little-endian uint64 each.
STATE_SIZE = 16

_M64 = (1 << 64) - 1


def _check_seed(seed: Any, what: str = "seed", torch_name: str = "manual_seed") -> int:
    """A seed as ``torch.Generator.manual_seed`` reads it (``THPUtils_checkLong``, then
    ``unpack_uint64``): an int or a numpy integer, never a bool, a float or another object
    with ``__index__`` (a 0-d numpy array), in ``[-2**63, 2**64)``; a negative seed wraps to
    uint64 (two's complement).
    ``torch.Generator.set_offset`` reads its offset the same way: ``what`` and ``torch_name``
    name the argument and PyTorch's function in the messages ("offset", "manual_offset").

    Raises:
        AcceleratorTypeError: not an int (a ``TypeError`` and, as PyTorch's "manual_seed
            expected a long, but got bool", a ``RuntimeError``).
        AcceleratorValueError: out of range (a ``ValueError`` and, as PyTorch's "Overflow
            when unpacking long long", a ``RuntimeError``).

    Example::

        >>> from accelrt.random._generator import _check_seed
        >>> _check_seed(-1, "offset", "manual_offset") == 2**64 - 1
        True
    """
    # THPUtils_checkLong: an int or a numpy integer, not any object with __index__
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, (bool, np.bool_)):
        return _wrap_seed(operator.index(seed), what)
    name = "bool" if isinstance(seed, (bool, np.bool_)) else type(seed).__name__
    raise AcceleratorTypeError(f"{what} must be an int, got {name} ({torch_name} expected a "
                               f"long, but got {name})")


def _seed_arg(seed: Any) -> int:
    """A seed as the module-level ``torch.manual_seed``, ``torch.cuda.manual_seed`` and
    ``manual_seed_all`` read it: ``int(seed)`` first (so a bool, a float, which is truncated,
    or a numeric string is taken, as in PyTorch), then the range of :func:`_check_seed`.
    What ``int()`` refuses keeps its class: ``ValueError`` (``"x"``, nan) or
    ``OverflowError`` (an infinity); ``TypeError`` (``None``) becomes an
    :class:`~accelrt._errors.AcceleratorTypeError` that says what to pass.

    Example::

        >>> from accelrt.random._generator import _seed_arg
        >>> _seed_arg(True), _seed_arg(2.9), _seed_arg("7"), _seed_arg(-1) == 2**64 - 1
        (1, 2, 7, True)
    """
    try:
        value = int(seed)
    except TypeError:
        raise AcceleratorTypeError(f"seed must be an int, got {type_shown(seed)}, which "
                                   "int() does not take; e.g. manual_seed(1234)") from None
    return _wrap_seed(value)


def _wrap_seed(value: int, what: str = "seed") -> int:
    if not -(1 << 63) <= value < 1 << 64:
        raise AcceleratorValueError(f"{what} {shown(value)} is out of range (Overflow when "
                                    f"unpacking "
                                    f"long long): it must be in [-2**63, 2**64); negative "
                                    f"{what}s wrap to uint64")
    return value & _M64


def nondeterministic_seed() -> int:
    """A seed from the operating system's entropy, in ``[0, 2**53)``: PyTorch's device
    generators' ``seed()`` (``c10::detail::getNonDeterministicRandom(true)``, the CUDA, XPU and
    MPS generators' and ``torch.cuda.seed()``'s) keeps 53 bits "to ensure unique
    representation in double", so a seed stored as a float (JSON, a config) reads back
    exactly. Every ``seed()``/``seed_all()`` of accelrt draws its seed here.

    Example::

        >>> from accelrt.random._generator import nondeterministic_seed
        >>> 0 <= nondeterministic_seed() < 2**53
        True
    """
    return secrets.randbits(53)


def _pack_state(seed: int, offset: int) -> RngState:
    return np.frombuffer(seed.to_bytes(8, "little") + offset.to_bytes(8, "little"),
                         dtype=np.uint8).copy()


def _unpack_state(state: Any) -> tuple[int, int]:
    """``(seed, offset)`` from a 16-byte uint8 state array (a numpy array, an
    ``accelrt.Array`` or a tensor-like with ``numpy()``); clear errors for anything else.
    As PyTorch's ``set_state``, which takes only a ByteTensor ("expected a torch.ByteTensor,
    but got bytes"), ``bytes``, ``bytearray`` and lists are refused. As PyTorch's CUDA
    generators, the state may have any shape (its bytes in order) and an 8-byte state is a seed
    alone, with offset 0; as PyTorch's ``check_rng_state``, a state that is not C-contiguous
    is refused ("RNG state must be contiguous", before its size is checked).

    Example::

        >>> import numpy as np
        >>> from accelrt.random._generator import _pack_state, _unpack_state
        >>> _unpack_state(_pack_state(3, 4))
        (3, 4)
        >>> _unpack_state(np.frombuffer(bytes(_pack_state(5, 6)), np.uint8))
        (5, 6)
        >>> _unpack_state(_pack_state(7, 8).reshape(2, 8)), _unpack_state(_pack_state(9, 1)[:8])
        ((7, 8), (9, 0))
    """
    host = getattr(state, "numpy", None)
    if callable(host) and not isinstance(state, np.ndarray):
        state = host()  # an accelrt.Array (or a tensor-like) holding the bytes
    if not isinstance(state, np.ndarray):
        name = type(state).__name__
        hint = (f"; for {name}, pass numpy.frombuffer(state, numpy.uint8)"
                if isinstance(state, (bytes, bytearray, memoryview)) else "")
        raise TypeError(f"RNG state must be a numpy uint8 array (from get_state()), got {name}"
                        f"{hint}; PyTorch's set_state takes only a ByteTensor (\"expected a "
                        f"torch.ByteTensor, but got {name}\")")
    if state.dtype != np.uint8:
        raise TypeError(f"RNG state must have dtype uint8, got {state.dtype} (PyTorch: \"RNG "
                        "state must be a torch.ByteTensor\"); pass the array returned by "
                        "get_state()/get_rng_state()")
    if not state.flags.c_contiguous:   # torch 2.15's check_rng_state, a RuntimeError
        raise AcceleratorValueError(
            "RNG state must be contiguous: pass numpy.ascontiguousarray(state) (PyTorch's "
            "set_state refuses a non-contiguous state too)")
    raw = state.tobytes()
    if len(raw) == STATE_SIZE // 2:   # a seed alone (PyTorch's CUDA generators: offset 0)
        return int.from_bytes(raw, "little"), 0
    if len(raw) != STATE_SIZE:   # a RuntimeError too, as PyTorch's "RNG state is wrong size"
        raise AcceleratorValueError(
            f"RNG state is wrong size: it must be {STATE_SIZE} bytes (8-byte seed + 8-byte "
            f"offset) or 8 (a seed alone), got {len(raw)}")
    return int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")


class _State:
    """A generator's seed and offset: the state object that :meth:`Generator.graphsafe_get_state`
    shares and :meth:`Generator.graphsafe_set_state` swaps in (PyTorch's
    ``CUDAGeneratorState``). A graph counts a capture's draws per state object
    (:mod:`accelrt.random._graphsafe`).

    Example::

        >>> from accelrt.random._generator import _State
        >>> st = _State(7, 2)
        >>> st.reserve(3), st.get()
        ((7, 2), (7, 5))
    """

    __slots__ = ("lock", "offset", "seed")

    def __init__(self, seed: int, offset: int) -> None:
        self.lock = reinit_after_fork(threading.Lock())
        self.seed = seed      # guarded by lock
        self.offset = offset  # guarded by lock

    def get(self) -> tuple[int, int]:
        """``(seed, offset)``, read together."""
        with self.lock:
            return self.seed, self.offset

    def set(self, seed: int, offset: int) -> None:
        """Set the seed and the offset together."""
        with self.lock:
            self.seed, self.offset = seed, offset

    def reserve(self, nblocks: int) -> tuple[int, int]:
        """Reserve ``nblocks`` counter blocks: return ``(seed, first block)``."""
        with self.lock:
            seed, offset = self.seed, self.offset
            self.offset = (offset + nblocks) & _M64
        return seed, offset


class Generator:
    """A counter-based Philox4x32-10 generator bound to one device.

    Numbers drawn with the same seed and offset are bit-identical on every backend, device and
    chunking (see ``docs/random.md``).

    Args:
        device: the device the generator belongs to (``None``: the current device). As
            ``torch.Generator``'s argument parser reads it, a numpy integer is an index and
            ``bytes`` a device string (``np.int64(0)``, ``b"cpu:0"``);
            a bool is refused.

    Raises:
        TypeError: ``device`` has a wrong type.
        IndexError: the device index is out of range.

    Example::

        >>> import accelrt as acc
        >>> g = acc.random.Generator("cpu:0")
        >>> g.manual_seed(7).initial_seed()
        7
        >>> state = g.get_state()
        >>> a = acc.rand(3, device="cpu:0", generator=g).tolist()
        >>> _ = g.set_state(state)
        >>> acc.rand(3, device="cpu:0", generator=g).tolist() == a
        True
    """

    __slots__ = ("__weakref__", "_b", "_index", "_st")

    def __init__(self, device: DeviceLike = None) -> None:
        # torch 2.14.1's parser (``Device? device``), as _get_device reads it: a numpy integer
        # is an index, bytes a device string (at run time; typed as torch's stub types it,
        # DeviceLikeType); bool, float, other __index__ objects: TypeError
        b, index = _get_device(device, torch_parser=True)
        self._init(b, index, DEFAULT_SEED, 0)

    def _init(self, b: Backend, index: int, seed: int, offset: int) -> None:
        self._b = b
        self._index = index
        self._st = _State(seed, offset)

    @classmethod
    def _make(cls, b: Backend, index: int, seed: int, offset: int) -> Generator:
        self = object.__new__(cls)
        self._init(b, index, seed, offset)
        return self

    @classmethod
    def _sharing(cls, b: Backend, index: int, st: _State) -> Generator:
        """A generator of ``b:index`` that uses the state object ``st``."""
        self = object.__new__(cls)
        self._b, self._index, self._st = b, index, st
        return self

    @property
    def device(self) -> _device_cls:
        """The device this generator belongs to."""
        return _device_cls(self._b.name, self._index)

    def manual_seed(self, seed: int, /) -> Generator:
        """Set the seed and reset the offset to 0; return ``self``. On a capturing stream
        (the current stream of the current device), only the generator's own seed is
        taken, and changes nothing (PyTorch's ``set_current_seed``).

        Args:
            seed: an int (or a numpy integer) in ``[-2**63, 2**64)``; negative values wrap
                to uint64. As ``torch.Generator.manual_seed``, a bool or a float is refused
                (the module-level :func:`accelrt.manual_seed` takes what ``int()`` takes).

        Raises:
            TypeError: ``seed`` is not an int (also a ``RuntimeError``, as in PyTorch).
            ValueError: ``seed`` is out of range (also a ``RuntimeError``, as in PyTorch).
            RuntimeError: another seed, on a capturing stream.
        """
        self._seed_to(_check_seed(seed))
        return self

    def _seed_to(self, value: int) -> None:
        """:meth:`manual_seed` of a checked seed (also the module-level seeding functions)."""
        if _capturing and _graphsafe.capturing(self):
            self._check_capture_seed(value, "manual_seed")
            return
        self._st.set(value, 0)

    def _check_capture_seed(self, value: int, call: str) -> None:
        """On a capturing stream, a seed is taken only if it is this generator's (PyTorch's
        ``set_current_seed`` in a capture)."""
        if value != self._st.seed:
            raise RuntimeError(
                "CUDAGeneratorImpl::set_current_seed can be called during stream capture only "
                "if new seed is the same as the original seed. (Generator."
                f"{call} with seed {value} during graph capture: the generator's seed is "
                f"{self._st.seed}; seed it before the capture begins)")

    def seed(self) -> int:
        """Seed from the operating system's entropy (non-deterministic); return the seed,
        which is below ``2**53`` as PyTorch's CUDA generators' (:func:`nondeterministic_seed`).

        Raises:
            RuntimeError: on a capturing stream (the current stream of the current
                device), as in PyTorch.
        """
        _graphsafe.check_not_capturing(self, "seed")
        value = nondeterministic_seed()
        self._st.set(value, 0)
        return value

    def initial_seed(self) -> int:
        """The seed last set (``67280421310721`` if never set)."""
        return self._st.seed

    def get_state(self) -> RngState:
        """The 16-byte state (seed, offset: little-endian uint64 each) as a uint8 array. On a
        capturing stream (the current stream of the current device) the offset is the
        generator's offset within the capture, as in PyTorch (docs/random.md)."""
        return _pack_state(*self._state())

    def _state(self) -> tuple[int, int]:
        """``(seed, offset)`` as :meth:`get_state` gives them (also ``get_rng_state``)."""
        inner = _graphsafe.intragraph_offset(self) if _capturing else None
        seed, offset = self._st.get()
        return seed, offset if inner is None else inner

    def set_state(self, new_state: RngStateLike, /) -> Generator:
        """Restore a state from :meth:`get_state`; return ``self``. On a capturing stream
        (the current stream of the current device) it sets the generator's offset within
        the capture and takes only the generator's own seed, as in PyTorch (docs/random.md).

        Raises:
            TypeError: not a uint8 array (``bytes`` too, as PyTorch's takes only a
                ByteTensor: pass ``numpy.frombuffer(b, numpy.uint8)``).
            ValueError: not C-contiguous, or not 16 bytes (or 8, a seed alone); also a
                ``RuntimeError``, PyTorch's class.
            RuntimeError: another seed, on a capturing stream.
        """
        self._restore(*_unpack_state(new_state))
        return self

    def _restore(self, seed: int, offset: int) -> None:
        """:meth:`set_state` of a checked state (also ``set_rng_state``)."""
        if _capturing and _graphsafe.capturing(self):
            self._check_capture_seed(seed, "set_state")
            if _graphsafe.intragraph_offset(self, offset) is not None:
                return
        self._st.set(seed, offset)

    def get_offset(self) -> int:
        """The next unused Philox counter block.

        Raises:
            RuntimeError: on a capturing stream (the current stream of the current
                device), as in PyTorch.
        """
        if _capturing:
            _graphsafe.check_not_capturing(self, "get_offset")
        return self._st.offset

    def philox_state(self, increment: int) -> tuple[PhiloxWord, PhiloxWord, PhiloxWord]:
        """Reserve ``increment`` 32-bit Philox outputs for a kernel of your own, as
        ``torch.Generator.philox_state`` (PyTorch 2.14): ``(seed, offset, intragraph_offset)``,
        three 1-element ``int64`` numpy arrays holding uint64 bits (``& (2**64 - 1)`` reads a
        negative value back). The caller owns the counter blocks ``offset + intragraph_offset``
        to ``offset + intragraph_offset + ceil(increment / 4) - 1`` at ``seed``, in accelrt's
        counter layout (docs/random.md): the offsets count blocks, as :meth:`get_offset`
        does (PyTorch's count outputs, four per block), so those blocks are exactly the ones
        accelrt's own draws will never use.

        Outside a graph capture ``seed`` and ``offset`` are copies and ``intragraph_offset`` is
        0. On a stream that a graph is capturing (the current stream of the current device,
        as for the other calls), ``seed`` and ``offset`` are views of the graph's state for this generator,
        which each replay sets, in stream order, before its work runs: read them when the
        kernel runs, not when it is queued; ``intragraph_offset`` is the reservation's place
        in the graph (on CUDA, whose own draws keep their captured counters, the values are
        copies there too).

        Raises:
            TypeError: ``increment`` is not an int (also a ``RuntimeError``, as PyTorch's
                "philox_state expected an int").
            OverflowError: ``increment`` is negative or above ``2**64 - 1``.

        Example::

            >>> import accelrt as acc
            >>> g = acc.random.Generator("cpu:0").manual_seed(5)
            >>> seed, offset, intra = g.philox_state(10)   # 3 blocks
            >>> int(seed[0]), int(offset[0]), int(intra[0]), g.get_offset()
            (5, 0, 0, 3)
        """
        return _graphsafe.philox_state(self, increment)

    def set_offset(self, offset: int, /) -> Generator:
        """Make ``offset`` the next unused Philox counter block (the seed stays); return
        ``self``. ``offset`` is read as :meth:`manual_seed` reads a seed, as
        ``torch.Generator.set_offset`` reads it: an int in ``[-2**63, 2**64)``, a negative
        one wrapping to uint64 (``set_offset(-1)`` is ``2**64 - 1``). accelrt's offset counts
        blocks, so every such value is valid (PyTorch's CUDA offset counts 32-bit words, a
        multiple of 4).

        Raises:
            TypeError: ``offset`` is not an int (also a ``RuntimeError``, as in PyTorch).
            ValueError: ``offset`` is out of range (also a ``RuntimeError``, as in PyTorch).
            RuntimeError: on a capturing stream (the current stream of the current
                device), as in PyTorch.

        Example::

            >>> import accelrt as acc
            >>> g = acc.random.Generator("cpu:0").manual_seed(1)
            >>> a = acc.rand(8, device="cpu:0", generator=g).tolist()
            >>> acc.rand(4, device="cpu:0", generator=g.set_offset(1)).tolist() == a[4:]
            True
        """
        value = _check_seed(offset, "offset", "manual_offset")
        _graphsafe.check_not_capturing(self, "set_offset")
        st = self._st
        with st.lock:
            st.offset = value
        return self

    def clone_state(self) -> Generator:
        """A new generator of the same device holding a copy of this one's seed and offset
        (``torch.Generator.clone_state``), in a state object of its own (unlike
        :meth:`graphsafe_get_state`): drawing from either does not move the other.

        Example::

            >>> import accelrt as acc
            >>> g = acc.random.Generator("cpu:0").manual_seed(5)
            >>> c = g.clone_state()
            >>> a = acc.rand(3, device="cpu:0", generator=g)
            >>> a.tolist() == acc.rand(3, device="cpu:0", generator=c).tolist()
            True

        Raises:
            RuntimeError: on a capturing stream (the current stream of the current
                device), as in PyTorch.
        """
        _graphsafe.check_not_capturing(self, "clone_state")
        return type(self)._make(self._b, self._index, *self._st.get())

    def graphsafe_get_state(self) -> Generator:
        """A new generator of the same device that shares this one's state object
        (``torch.Generator.graphsafe_get_state``): its seed and offset *are* this one's, so
        drawing from either moves both, and a graph counts their draws together. Pass it to
        :meth:`graphsafe_set_state` to switch a generator between states, for example to
        capture several graphs, each with its own registered state (docs/random.md). Allowed
        during a graph capture, as in PyTorch.

        Example::

            >>> import accelrt as acc
            >>> g = acc.random.Generator("cpu:0").manual_seed(5)
            >>> shared = g.graphsafe_get_state()
            >>> _ = acc.rand(8, device="cpu:0", generator=g)
            >>> shared.get_offset(), shared is g
            (2, False)
        """
        return type(self)._sharing(self._b, self._index, self._st)

    def graphsafe_set_state(self, state: Generator, /) -> Generator:
        """Make this generator use ``state``'s state object (from :meth:`graphsafe_get_state`
        or any generator of the same backend); return ``self``
        (``torch.Generator.graphsafe_set_state``). Nothing is copied: the two generators then
        share one seed and offset until either switches again. Allowed during a graph
        capture, as in PyTorch: the capture's later draws from this generator count in the
        graph for ``state``'s state object. As in PyTorch, ``state`` may belong to another
        device index of the same backend (accelrt's states are host-side).

        Raises:
            TypeError: ``state`` is not an ``accelrt.random.Generator``.
            RuntimeError: ``state`` belongs to another backend (also a ``TypeError``;
                PyTorch's "Expected a CUDA Generator").

        Example::

            >>> import accelrt as acc
            >>> g = acc.random.Generator("cpu:0").manual_seed(1)
            >>> other = acc.random.Generator("cpu:0").manual_seed(2)
            >>> saved = g.graphsafe_get_state()
            >>> g.graphsafe_set_state(other).initial_seed()
            2
            >>> g.graphsafe_set_state(saved).initial_seed()
            1
        """
        if not isinstance(state, Generator):
            raise TypeError(f"graphsafe_set_state() expected a Generator, but got "
                            f"{type_shown(state)}; pass an accelrt.random.Generator, e.g. "
                            "one from graphsafe_get_state()")
        if state._b is not self._b:
            raise AcceleratorTypeError(
                f"graphsafe_set_state() expected a {self._b.name} Generator (Expected a "
                f"{self._b.name} Generator), got one of {state._b.name}:{state._index}")
        self._st = state._st
        return self

    def __copy__(self) -> Generator:
        """``copy.copy``: :meth:`clone_state` (a new generator, as ``torch.Generator``)."""
        return self.clone_state()

    def __deepcopy__(self, memo: dict[int, Any]) -> Generator:
        """``copy.deepcopy``: :meth:`clone_state` (a new generator, as ``torch.Generator``)."""
        return self.clone_state()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as ``torch.Generator`` does: the device, then the seed and offset.

        Example::

            >>> import pickle, accelrt as acc
            >>> g = acc.random.Generator("cpu:0").manual_seed(9).set_offset(4)
            >>> c = pickle.loads(pickle.dumps(g))
            >>> (c.device, c.initial_seed(), c.get_offset())
            (device(type='cpu', index=0), 9, 4)

        Raises:
            RuntimeError: on a capturing stream (the current stream of the current
                device): PyTorch's reads the offset with ``get_offset``.
        """
        if _capturing:
            _graphsafe.check_not_capturing(self, "get_offset")
        return type(self), (f"{self._b.name}:{self._index}",), self._st.get()

    def __setstate__(self, state: Any) -> None:
        """Restore ``(seed, offset)`` from :meth:`__reduce__`.

        Raises:
            TypeError: not a pair of ints.
            ValueError: a value outside ``[0, 2**64)``.
        """
        if not isinstance(state, tuple) or len(state) != 2:
            raise TypeError(f"Generator state must be a (seed, offset) pair, got {shown(state)}")
        self._st.set(check_u64(state[0], "seed"), check_u64(state[1], "offset"))

    def __repr__(self) -> str:
        return f"accelrt.random.Generator(device='{self._b.name}:{self._index}')"


# ---------------------------------------------------------------------- default generators

_lock = reinit_after_fork(threading.Lock())
_defaults: dict[tuple[str, int], Generator] = {}             # guarded by _lock
_pending: dict[tuple[str, int], tuple[int, int]] = {}        # guarded by _lock


def _default_for(b: Backend, index: int) -> Generator:
    key = (b.name, index)
    g = _defaults.get(key)
    if g is not None and g._b is b:
        return g
    with _lock:
        g = _defaults.get(key)
        if g is None or g._b is not b:  # first use, or the backend was re-registered
            seed, offset = _pending.pop(key, (DEFAULT_SEED, 0))
            g = _defaults[key] = Generator._make(b, index, seed, offset)
        return g


def _peek(b: Backend, index: int) -> Generator | None:
    g = _defaults.get((b.name, index))
    return g if g is not None and g._b is b else None


def _set(b: Backend, index: int, seed: int, offset: int | None = None) -> None:
    """Set a default generator's state (``offset`` ``None``: seed it, as ``manual_seed``),
    or remember it until the generator is created. An existing generator takes it as
    :meth:`Generator.set_state` or :meth:`Generator.manual_seed` does (in a capture too)."""
    with _lock:
        g = _peek(b, index)
        if g is None:
            _pending[(b.name, index)] = (seed, 0 if offset is None else offset)
            return
    if offset is None:
        g._seed_to(seed)
    else:
        g._restore(seed, offset)


def _get(b: Backend, index: int) -> tuple[int, int]:
    with _lock:
        g = _peek(b, index)
        if g is None:
            return _pending.get((b.name, index), (DEFAULT_SEED, 0))
    return g._state()


def _is_started(b: Backend, index: int) -> bool:
    """True if the default generator of ``(b, index)`` has been created."""
    return _peek(b, index) is not None


def default_generator(device: DeviceLike = None) -> Generator:
    """The default generator of ``device`` (``None``: the current device), created lazily.

    Example::

        >>> from accelrt.random import default_generator
        >>> default_generator("cpu:0") is default_generator("cpu:0")
        True
    """
    b, index = _get_device(device)
    return _default_for(b, index)
