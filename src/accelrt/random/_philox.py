"""Vectorised numpy Philox4x32-10 and the bit-exact conversions to numbers.

This module is the host reference of accelrt's random numbers; ``kernels/philox.cu`` is the
same algorithm for CUDA, and every backend must reproduce it. The compiled build also has
``_philox_host``, the same arithmetic in C: when it is there (:data:`_kernel`), the
blocks and the standard uniform numbers come from it and the numpy pipeline below is not run;
everything else (counters, conversions, chunks, threads) is this module's either way.

Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3",
SC'11; the Random123 library) maps a 128-bit counter ``(c0, c1, c2, c3)`` and a 64-bit key
``(k0, k1)`` to four uint32 words with ten rounds of::

    hi0:lo0 = 0xD2511F53 * c0          (32x32 -> 64-bit products)
    hi1:lo1 = 0xCD9E8D57 * c2
    (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
    (k0, k1) += (0x9E3779B9, 0xBB67AE85)        (mod 2**32, after every round)

Counter layout (the contract shared by every backend): for a generator with 64-bit ``seed``
and 64-bit ``offset``, Philox *block* ``j`` of a request is::

    key     = (seed & 0xFFFFFFFF, seed >> 32)
    b       = (offset + j) mod 2**64
    counter = (b & 0xFFFFFFFF, b >> 32, 0, 0)      -> words w[4j], w[4j+1], w[4j+2], w[4j+3]

A request of ``n`` elements consumes ``ceil(n / e)`` blocks, where ``e`` elements come from
one block (see :func:`words_per_element`); element ``i`` uses block ``i // e`` and words
``w * (i % e)`` to ``w * (i % e) + w - 1`` of it. So element ``i`` depends only on
``(seed, offset, i)``: any device, chunking or thread count gives the same bits.

Conversions (``w`` = words per element; ``V`` = words read as a little-endian integer):

* uniform float32: ``w=1``, ``(x >> 8) * 2**-24``; float16: ``w=1``, ``(x >> 21) * 2**-11``;
  float64: ``w=2``, ``(V >> 11) * 2**-53`` with ``V = w[2i+1] << 32 | w[2i]``. All exact,
  in ``[0, 1)``. With bounds ``(a, b) != (0, 1)``: ``t = a + (b - a) * u`` in float64
  (``b - a``, the product and the sum each rounded to nearest, no fused multiply-add), rounded
  to the dtype; a result equal to ``b`` becomes ``a`` (PyTorch's ``[from, to)`` rule).
* normal (Box-Muller, ``w=2``, one block gives elements ``2k`` and ``2k+1``):
  ``u1 = (V0 >> 11) * 2**-53``, ``u2 = (V1 >> 11) * 2**-53`` with ``V0 = w1 << 32 | w0`` and
  ``V1 = w3 << 32 | w2``; ``r = sqrt(-2 * log(1 - u1))``, ``t = 6.283185307179586 * u2``,
  ``z0 = r * cos(t)``, ``z1 = r * sin(t)`` in float64; then ``mean + std * z`` in float64 and
  one rounding to the dtype.
* randint in ``[low, high)``, ``R = high - low``: ``w=2`` when ``R <= 2**32`` else ``w=4``;
  ``low + floor(V * R / 2**(32 w))`` (rejection-free multiply-shift; the probability of any
  value differs from ``1/R`` by less than ``2**-32`` relative when ``w=2``, ``2**-64`` when
  ``w=4``).

Example::

    >>> import numpy as np
    >>> from accelrt.random import _philox
    >>> [hex(int(x)) for x in _philox.philox4x32_10(np.zeros((1, 4), np.uint32), (0, 0))[0]]
    ['0x6627e8d5', '0xe169c58d', '0xbc57ac4c', '0x9b00dbd8']
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._fork import reinit_after_fork

#: The C arithmetic of the compiled build (``words_at`` and ``uniform_at``, see
#: ``_philox_host.c``), or ``None`` in the pure build. Read at every call, so tests compare the
#: two by setting it to ``None``.
_kernel: Any
try:   # the compiled build's C arithmetic (setup.py builds it with the mypyc modules)
    from . import _philox_host as _kernel
except ImportError:   # the pure build: the numpy pipeline below
    _kernel = None

__all__ = [
    "DISTRIBUTIONS",
    "PHILOX_M0",
    "PHILOX_M1",
    "PHILOX_W0",
    "PHILOX_W1",
    "blocks_needed",
    "fill",
    "fill_at",
    "philox4x32_10",
    "words",
    "words_per_element",
]

PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
ROUNDS = 10
TWO_PI = 6.283185307179586

#: The distributions :func:`fill` knows, with their parameters.
DISTRIBUTIONS = ("uniform", "normal", "randint")

_M32 = 0xFFFFFFFF
_M64 = (1 << 64) - 1
_U32 = np.dtype("<u4")
_U64 = np.dtype("<u8")
_S8 = np.uint32(8)
_S11 = np.uint64(11)
_S21 = np.uint32(21)
_S32 = np.uint64(32)
_MUL0 = np.uint64(PHILOX_M0)
_MUL1 = np.uint64(PHILOX_M1)
_F32_SCALE = np.float32(2.0 ** -24)
_F16_SCALE = np.float32(2.0 ** -11)
_F64_SCALE = np.float64(2.0 ** -53)


def _const(value: Any, dtype: Any) -> np.ndarray:
    """A read-only 0-d array: a ufunc takes one faster than a numpy scalar (about 0.3 us a
    call, a fifth of a small pass), same types and values."""
    c = np.array(value, dtype)
    c.flags.writeable = False
    return c


# The hot paths' constants (the pipeline makes some 90 numpy calls per chunk).
_C8 = _const(8, np.uint32)
_C11 = _const(11, np.uint64)
_C32 = _const(32, np.uint64)
_CMUL0 = _const(PHILOX_M0, np.uint64)
_CMUL1 = _const(PHILOX_M1, np.uint64)
_CF32_SCALE = _const(2.0 ** -24, np.float32)
_CF64_SCALE = _const(2.0 ** -53, np.float64)

#: Blocks per inner chunk: the ``(2, CHUNK)`` uint64 state and product arrays (1 MiB) and the
#: chunk's output stay in a core's L2 cache, and numpy's per-call overhead (about 1 us, some
#: 50 calls per chunk) stays small. Measured best between 24K and 48K blocks.
CHUNK = 32768
#: Chunks of fewer blocks run the rounds lane by lane (:func:`_lanes`): below it numpy's
#: set-up of the two-lane calls costs more than a second call (measured 1.5-2x faster at
#: 2048 and 4096 blocks, the same from 8192 on).
LANES_BELOW = 8192
#: Requests of at least this many blocks are split across a few host threads.
PARALLEL_MIN_BLOCKS = 2 * CHUNK

_rs, _ls, _mul, _xor, _or, _and = (np.right_shift, np.left_shift, np.multiply, np.bitwise_xor,
                                   np.bitwise_or, np.bitwise_and)


def _round_keys(key: tuple[int, int]) -> list[tuple[np.uint64, np.uint64]]:
    """Per-round xor masks for :func:`_rounds`: five pairs (one per two rounds).

    Pair ``m`` is ``(k0[2m] << 32 | k0[2m+1], k1[2m] << 32 | k1[2m+1])`` where ``k[r]`` is the
    key of round ``r`` (the key plus ``r`` Weyl increments, mod 2**32).
    """
    k0, k1 = key
    ks = [(((k0 + r * PHILOX_W0) & _M32), ((k1 + r * PHILOX_W1) & _M32)) for r in range(ROUNDS)]
    return [(np.uint64(ks[r][0] << 32 | ks[r + 1][0]), np.uint64(ks[r][1] << 32 | ks[r + 1][1]))
            for r in range(0, ROUNDS, 2)]


def _rounds(x0: np.ndarray, x1: np.ndarray, a0: np.ndarray, a1: np.ndarray, q: np.ndarray,
            keys: Sequence[tuple[np.uint64, np.uint64]]) -> None:
    """Ten Philox rounds in place on packed state ``x0 = c0 << 32 | c1``, ``x1 = c2 << 32 | c3``.

    With this packing a round is a few uint64 passes per lane and no strided access:
    ``x0' = (M1 * c2) ^ ((c1 ^ k0) << 32)`` holds ``(hi1 ^ c1 ^ k0, lo1)``, and likewise ``x1'``.
    The key of an odd round is xored into the low half during the even round before it
    (``x0' = (hi1 ^ c1 ^ k0, lo1 ^ k0_next)``), where the next round's shift moves it into
    place, so the odd round needs no key pass.
    """
    for k0, k1 in keys:
        for masked in (True, False):
            _rs(x0, _S32, a0)
            _mul(a0, _MUL0, a0)          # M0 * c0 -> (hi0, lo0)
            _rs(x1, _S32, a1)
            _mul(a1, _MUL1, a1)          # M1 * c2 -> (hi1, lo1)
            _ls(x0, _S32, q)
            if masked:
                _xor(q, k0, q)
            _xor(a1, q, x0)              # (hi1 ^ c1 ^ k0, lo1 [^ k0 of the next round])
            _ls(x1, _S32, q)
            if masked:
                _xor(q, k1, q)
            _xor(a0, q, x1)              # (hi0 ^ c3 ^ k1, lo0 [^ k1 of the next round])


def philox4x32_10(counters: Any, key: tuple[int, int] | Sequence[int]) -> np.ndarray:
    """Philox4x32-10 of many 128-bit counters under one key (the reference entry point).

    Args:
        counters: array-like of shape ``(n, 4)`` of uint32 words ``(c0, c1, c2, c3)``.
        key: the two uint32 key words ``(k0, k1)``.

    Returns:
        A ``(n, 4)`` uint32 array: the output words of each counter.

    Raises:
        ValueError: the counters are not of shape ``(n, 4)`` or a word is out of range.

    Example::

        >>> import numpy as np
        >>> from accelrt.random._philox import philox4x32_10
        >>> out = philox4x32_10(np.full((1, 4), 0xFFFFFFFF, np.uint32), (0xFFFFFFFF,) * 2)
        >>> hex(int(out[0, 0]))
        '0x408f276d'
    """
    c = np.asarray(counters)
    if c.ndim != 2 or c.shape[1] != 4:
        raise ValueError(f"counters must have shape (n, 4), got {c.shape}")
    if c.size and (c.min() < 0 or c.max() > _M32):
        raise ValueError("counter words must be in [0, 2**32)")
    k = tuple(int(v) for v in key)
    if len(k) != 2 or not all(0 <= v <= _M32 for v in k):
        raise ValueError(f"key must be two words in [0, 2**32), got {key!r}")
    c = c.astype(np.uint64)
    x0 = (c[:, 0] << _S32) | c[:, 1]
    x1 = (c[:, 2] << _S32) | c[:, 3]
    a0, a1, q = np.empty_like(x0), np.empty_like(x0), np.empty_like(x0)
    _rounds(x0, x1, a0, a1, q, _round_keys((k[0], k[1])))
    return np.stack([x0 >> _S32, x0 & np.uint64(_M32), x1 >> _S32, x1 & np.uint64(_M32)],
                    axis=1).astype(np.uint32)


# ---------------------------------------------------------------------- sizes

def words_per_element(dist: str, dtype: np.dtype, params: Sequence[Any] = ()) -> int:
    """uint32 words each element consumes (1, 2 or 4); see the module docstring."""
    if dist == "uniform":
        return 2 if dtype.itemsize == 8 else 1
    if dist == "normal":
        return 2
    if dist == "randint":
        return 2 if int(params[1]) <= 1 << 32 else 4
    raise ValueError(f"unknown distribution {dist!r}; expected one of {DISTRIBUTIONS}")


def blocks_needed(n: int, dist: str, dtype: np.dtype, params: Sequence[Any] = ()) -> int:
    """Philox blocks (counter values) a request of ``n`` elements consumes.

    Example::

        >>> import numpy as np
        >>> from accelrt.random._philox import blocks_needed
        >>> blocks_needed(10, "uniform", np.dtype("float32")), blocks_needed(3, "normal",
        ...     np.dtype("float64"))
        (3, 2)
    """
    per_block = 4 // words_per_element(dist, dtype, params)
    return -(-n // per_block)


# ---------------------------------------------------------------------- block generation
#
# The chunk pipeline keeps the state of ``n`` blocks as a ``(2, n)`` uint64 array ``X``: lane 0
# holds ``c0 << 32 | c1``, lane 1 ``c2 << 32 | c3``. One round is then five (four) whole-array
# numpy passes over both lanes at once, with ``MV = [[M0], [M1]]``::
#
#     A = (X >> 32) * MV          # lane 0: M0 * c0 = (hi0, lo0); lane 1: M1 * c2 = (hi1, lo1)
#     X = (X << 32) [^ K] ^ A[::-1]   # lane 0: (hi1 ^ c1 ^ k0, lo1); lane 1: (hi0 ^ c3 ^ k1, lo0)
#
# ``A[::-1]`` swaps the lanes for free (a view with a negative outer stride). ``K`` holds this
# round's key in the high halves and the next round's key in the low halves (the next round's
# ``X << 32`` moves it into place), so only every other round has a key pass. Cost is set by
# the bytes each pass moves and by numpy's per-call overhead (about a microsecond), so the
# chunk is as long as the L2 cache allows and both lanes share every call.

_MV = np.array([[PHILOX_M0], [PHILOX_M1]], np.uint64)


class _Plan:
    """The per-seed constants of the chunk pipeline (see :func:`_core`)."""

    __slots__ = ("k0_1", "kv", "kv_lanes", "r1_xor", "r2_xor", "seed")

    def __init__(self, seed: int) -> None:
        self.seed = seed
        k0, k1 = seed & _M32, (seed >> 32) & _M32
        ks = [((k0 + r * PHILOX_W0) & _M32, (k1 + r * PHILOX_W1) & _M32) for r in range(ROUNDS)]
        self.k0_1 = ks[0][0]
        self.r1_xor = _const(ks[0][1] << 32 | ks[1][1], np.uint64)  # round 1's k1, round 2's
        self.r2_xor = _const(ks[1][0] << 32, np.uint64)             # round 2's k0, in place
        #: ``K`` of rounds 3, 5, 7, 9: (2, 1) arrays, one row per lane
        self.kv = [np.array([[ks[r][0] << 32 | ks[r + 1][0]], [ks[r][1] << 32 | ks[r + 1][1]]],
                            np.uint64) for r in range(2, ROUNDS, 2)]
        for kv in self.kv:
            kv.flags.writeable = False  # plans are cached and shared between threads
        #: the same per lane, as 0-d constants (for chunks below :data:`LANES_BELOW`)
        self.kv_lanes = [(_const(int(kv[0, 0]), np.uint64), _const(int(kv[1, 0]), np.uint64))
                         for kv in self.kv]


@functools.lru_cache(maxsize=16)
def _plan(seed: int) -> _Plan:
    """The (read-only) :class:`_Plan` of ``seed``, cached: a generator keeps its seed across
    many requests, and building a plan costs about as much as generating a few blocks."""
    return _Plan(seed)


class _Scratch:
    """Reusable buffers for chunks of up to ``n`` blocks (one set per thread).

    The ``(2, m)`` state and product arrays of a chunk of ``m <= n`` blocks are contiguous
    views of the front of flat buffers (a ``[:, :m]`` slice of a ``(2, n)`` array is not
    contiguous, and numpy sets up every call on it several times slower).
    """

    __slots__ = ("_w", "a", "m0j", "n", "x")

    def __init__(self, n: int) -> None:
        self.n = n
        self.x = np.empty(2 * n, np.uint64)
        self.a = np.empty(2 * n, np.uint64)
        self.m0j = np.arange(n, dtype=np.uint64) * np.uint64(PHILOX_M0)  # M0 * j, exact
        self._w: np.ndarray | None = None

    @property
    def w(self) -> np.ndarray:
        """``(n, 4)`` uint32 words for the conversions that need them (made on first use:
        standard uniform float32/float64 never do)."""
        if self._w is None:
            self._w = np.empty((self.n, 4), _U32)
        return self._w


_tls = threading.local()


def _scratch(n: int) -> _Scratch:
    """This thread's scratch buffers for chunks of ``n`` blocks, kept between calls so their
    pages stay mapped (a fresh set costs page faults on every call)."""
    s: _Scratch | None = getattr(_tls, "scratch", None)
    if s is None or s.n < n:
        s = _tls.scratch = _Scratch(n)
    return s


def _chunk_len(block0: int, n: int) -> int:
    """``n`` clipped so blocks ``block0 .. block0 + len - 1`` share the high counter word."""
    return min(n, (1 << 32) - (block0 & _M32))


def _core(block0: int, n: int, plan: _Plan, s: _Scratch) -> tuple[np.ndarray, np.ndarray]:
    """Rounds 1 to 9 of blocks ``block0 .. block0 + n - 1`` and the products of round 10.

    The blocks must share their high counter word (see :func:`_chunk_len`): then rounds 1 and
    2 collapse (``c1`` is constant and ``c2 = c3 = 0``, so round 1 leaves lane 0 constant and
    makes lane 1 ``M0 * c0 ^ k``, with ``M0 * c0 = M0 * lo + M0 * j`` from a table).

    Returns:
        ``(X, P)``: ``X`` the ``(2, n)`` state after round 9 (with round 10's key in the low
        halves), ``P`` round 10's products with the lanes swapped (``P[0] = M1 * c2``), both
        views of ``s``; :func:`_finish` turns them into output words.
    """
    x, a = s.x[:2 * n].reshape(2, n), s.a[:2 * n].reshape(2, n)
    x0, x1, a1 = x[0], x[1], a[1]
    hi, lo = block0 >> 32, block0 & _M32
    # round 1: lane 1 = M0 * c0 ^ (k1 of rounds 1, 2); lane 0 = (hi ^ k0 of round 1, k0 of 2)
    # (Python int operands below are below 2**64: numpy takes them as uint64)
    np.add(s.m0j[:n], lo * PHILOX_M0, out=x1)
    _xor(x1, plan.r1_xor, x1)
    c0 = hi ^ plan.k0_1
    # round 2: lane 0 = M1 * (x1 >> 32) ^ (k0 << 32); lane 1 = (x1 << 32) ^ M0 * c0
    _rs(x1, _C32, a1)
    _mul(a1, _CMUL1, a1)
    _xor(a1, plan.r2_xor, x0)
    _ls(x1, _C32, x1)
    _xor(x1, PHILOX_M0 * c0, x1)
    # rounds 3 to 9 and the products of round 10
    p = a[::-1]
    last = len(plan.kv) - 1
    if n < LANES_BELOW:
        _lanes(x, a, plan)
        return x, p
    for i, kv in enumerate(plan.kv):
        _rs(x, _C32, a)
        _mul(a, _MV, a)
        _ls(x, _C32, x)
        _xor(x, kv, x)
        _xor(x, p, x)                # odd round: keys of this round and the next
        _rs(x, _C32, a)
        _mul(a, _MV, a)
        if i == last:
            break
        _ls(x, _C32, x)
        _xor(x, p, x)                # even round: its key is already in the low halves
    return x, p


def _lanes(x: np.ndarray, a: np.ndarray, plan: _Plan) -> None:
    """:func:`_core`'s rounds 3 to 9 and round 10's products, with the passes that mix the
    lanes (the multiplier and key columns, the swapped products) made per lane: the same
    arithmetic, for short chunks, where numpy sets up a broadcast or a reversed operand
    several times slower than two plain 1-D calls."""
    x0, x1, a0, a1 = x[0], x[1], a[0], a[1]
    last = len(plan.kv_lanes) - 1
    for i, (k0, k1) in enumerate(plan.kv_lanes):
        _rs(x, _C32, a)
        _mul(a0, _CMUL0, a0)
        _mul(a1, _CMUL1, a1)
        _ls(x, _C32, x)
        _xor(x0, k0, x0)
        _xor(x1, k1, x1)
        _xor(x0, a1, x0)             # odd round: keys of this round and the next
        _xor(x1, a0, x1)
        _rs(x, _C32, a)
        _mul(a0, _CMUL0, a0)
        _mul(a1, _CMUL1, a1)
        if i == last:
            break
        _ls(x, _C32, x)
        _xor(x0, a1, x0)             # even round: its key is already in the low halves
        _xor(x1, a0, x1)


def _finish(x: np.ndarray, p: np.ndarray, dst: np.ndarray) -> None:
    """Round 10 into ``dst`` (``(2, n)`` uint64, any strides): lane ``l`` of block ``j`` gets
    the little-endian word pair ``w[2l + 1] << 32 | w[2l]``. Overwrites ``x`` and ``p``."""
    _ls(x, _C32, x)
    _xor(x, p, x)                    # (hi ^ c1 ^ k, lo) with hi, lo of the product
    _rs(x, _C32, x)                  # w0 = hi ^ c1 ^ k
    _ls(p, _C32, p)                  # w1 = lo, in the high half
    _or(p, x, dst)


def _words_into(w: np.ndarray, block0: int, n: int, plan: _Plan, s: _Scratch) -> None:
    """Words of blocks ``block0 .. block0 + n - 1`` into ``w`` (``(n, 4)`` uint32,
    C-contiguous; the blocks must share their high counter word, see :func:`_chunk_len`):
    from the C arithmetic when the build has it, else from the pipeline."""
    if _kernel is not None:
        _kernel.words_at(w.ctypes.data, n, plan.seed, block0)
        return
    x, p = _core(block0, n, plan, s)
    _finish(x, p, w.view(_U64).T)


def _uniform_into(seg: np.ndarray, block0: int, n: int, plan: _Plan, s: _Scratch) -> None:
    """The standard uniform float32 (float64) numbers of the ``n`` whole blocks from
    ``block0`` into ``seg`` (``4 n`` (``2 n``) elements, contiguous; the blocks share their high
    counter word): from the C arithmetic when the build has it, else the pipeline's
    :func:`_uniform_in_place`."""
    if _kernel is not None:
        _kernel.uniform_at(seg.ctypes.data, len(seg), seg.itemsize, plan.seed, block0)
        return
    x, p = _core(block0, n, plan, s)
    _uniform_in_place(seg, x, p, n)


def _blocks(block0: int, n: int, plan: _Plan, s: _Scratch) -> np.ndarray:
    """Words of blocks ``block0 .. block0 + n - 1`` as a ``(n, 4)`` uint32 view of ``s.w``
    (the blocks must share their high counter word, see :func:`_chunk_len`)."""
    w = s.w[:n]
    _words_into(w, block0, n, plan, s)
    return w


def words(seed: int, offset: int, nblocks: int) -> np.ndarray:
    """The uint32 words of ``nblocks`` blocks starting at ``offset``, shape ``(nblocks, 4)``.

    Example::

        >>> from accelrt.random._philox import words
        >>> words(0, 0, 1).shape
        (1, 4)
    """
    out = np.empty((nblocks, 4), np.uint32)
    plan = _plan(seed & _M64)
    s = _scratch(CHUNK)
    j = 0
    while j < nblocks:
        b = (offset + j) & _M64
        n = _chunk_len(b, min(CHUNK, nblocks - j))
        _words_into(out[j:j + n], b, n, plan, s)
        j += n
    return out


# ---------------------------------------------------------------------- small requests
#
# A request of a few hundred blocks costs little arithmetic but some 60 numpy calls (about a
# microsecond each, more on the strided lanes), so its cost is all fixed overhead. Blocks are
# a pure function of (seed, counter) and a generator hands out consecutive counters, so a
# small request computes a run of blocks from its first counter on (one pass of the chunk
# pipeline) and the requests that follow take theirs from that run: the same words, hence
# the same bits, at the cost of a copy.
#
# The first run after a jump (another seed, or a counter outside the run) is short
# (:data:`SMALL_RUN_MIN` blocks), so a lone request or generators used in turn pay little
# for blocks nobody takes; each run that the requests run past is twice as long as the last,
# up to :data:`SMALL_RUN`, where the pipeline's per-call cost is spread over enough blocks
# that a request pays about the arithmetic of its own blocks. A run computes only what its
# requests read: standard uniform float32/float64 straight from the pipeline (the
# conversion of :func:`_uniform_in_place`, no word array), the words for anything else.

#: Requests of at most this many blocks are served from the per-thread run of blocks.
SMALL_MAX_BLOCKS = 2048
#: Blocks of the first run after a jump.
SMALL_RUN_MIN = 2048
#: The most blocks a run holds (a request stream's runs double up to this; the pipeline's
#: per-block cost is near its floor from here on).
SMALL_RUN = 32768


class _Run:
    """Blocks ``start .. start + n - 1`` under key ``seed`` (one run per thread): their
    words and their standard uniform float32/float64 numbers, each made on first use."""

    __slots__ = ("_w", "addr", "n", "seed", "start", "uniform")

    def __init__(self, seed: int, start: int, n: int) -> None:
        self.seed, self.start, self.n = seed, start, n
        self._w: np.ndarray | None = None
        self.uniform: dict[str, np.ndarray] = {}
        #: dtype char -> address of ``uniform[char]``'s first element (for :func:`fill_at`)
        self.addr: dict[str, int] = {}

    @property
    def w(self) -> np.ndarray:
        """The run's words, ``(n, 4)`` uint32."""
        if self._w is None:
            self._w = words(self.seed, self.start, self.n)
        return self._w

    def standard_uniform(self, dtype: np.dtype) -> np.ndarray:
        """The run's standard uniform numbers of ``dtype`` (float32: one per word, float64:
        one per word pair), flat: the numbers :func:`_uniform_in_place` makes."""
        u = self.uniform.get(dtype.char)
        if u is None:
            u = self.uniform[dtype.char] = _uniform_blocks(self.seed, self.start, self.n,
                                                           dtype)
            self.addr[dtype.char] = u.ctypes.data
        return u


def _uniform_blocks(seed: int, offset: int, nblocks: int, dtype: np.dtype) -> np.ndarray:
    """Standard uniform float32 (float64) numbers of ``nblocks`` blocks from ``offset``:
    four (two) per block, converted in their own memory as the pipeline does."""
    per = 4 // words_per_element("uniform", dtype)
    out = np.empty(nblocks * per, dtype)
    plan = _plan(seed & _M64)
    s = _scratch(CHUNK)
    j = 0
    while j < nblocks:
        b = (offset + j) & _M64
        n = _chunk_len(b, min(CHUNK, nblocks - j))
        _uniform_into(out[j * per:(j + n) * per], b, n, plan, s)
        j += n
    return out


def _small_run(seed: int, offset: int, nblocks: int) -> tuple[_Run, int]:
    """This thread's run of blocks holding blocks ``offset .. offset + nblocks - 1`` (made
    anew when the request is not inside the current one: twice as long as the current one
    when the request starts inside it or right after it, else :data:`SMALL_RUN_MIN` long),
    and the request's first block's index in it."""
    r: _Run | None = getattr(_tls, "run", None)
    if r is None or r.seed != seed or not r.start <= offset <= r.start + r.n - nblocks:
        size = SMALL_RUN_MIN
        if r is not None and r.seed == seed and r.start <= offset <= r.start + r.n:
            size = min(SMALL_RUN, 2 * r.n)     # the requests ran past the run: a stream
        r = _tls.run = _Run(seed, offset, max(nblocks, min(size, (1 << 64) - offset)))
    return r, offset - r.start


def _small_fill(out: np.ndarray, dist: str, dtype: np.dtype, params: Sequence[Any],
                seed: int, offset: int, nblocks: int) -> None:
    """Fill the flat ``out`` from the run of blocks (see :func:`_small_run`)."""
    r, i = _small_run(seed, offset, nblocks)
    if _direct(dist, dtype, params):
        per = 4 // words_per_element(dist, dtype)
        np.copyto(out, r.standard_uniform(dtype)[i * per:i * per + len(out)])
        return
    _convert(r.w[i:i + nblocks].copy(), dist, dtype, params, out)


# ---------------------------------------------------------------------- conversions

def _uniform_std(w: np.ndarray, dtype: np.dtype, out: np.ndarray) -> None:
    """Standard uniform numbers of ``dtype`` from a ``(n, 4)`` word chunk into ``out``.

    The shifted words fit the signed type of their size, whose casts to float are numpy's
    fast ones; every cast and scaling here is exact.
    """
    if dtype.itemsize == 8:
        v = w.view(_U64).reshape(-1)
        _rs(v, _S11, v)
        np.copyto(out, v.view(np.int64), casting="unsafe")
        _mul(out, _F64_SCALE, out)
        return
    flat = w.reshape(-1)
    if dtype.itemsize == 4:
        _rs(flat, _S8, flat)
        np.copyto(out, flat.view(np.int32), casting="unsafe")
        _mul(out, _F32_SCALE, out)
    else:
        _rs(flat, _S21, flat)
        np.copyto(out, flat * _F16_SCALE, casting="unsafe")  # exact: 11-bit values


def _normal_std(w: np.ndarray) -> np.ndarray:
    """Standard normal float64 pairs (Box-Muller) from a ``(n, 4)`` word chunk: ``(n, 2)``."""
    v = w.view(_U64)                 # (n, 2): V0, V1
    u = np.right_shift(v, _S11)
    u = _mul(u, _F64_SCALE, dtype=np.float64, casting="unsafe")  # (n, 2) u1, u2 in [0, 1)
    r = np.subtract(1.0, u[:, 0])
    np.log(r, out=r)
    _mul(r, -2.0, out=r)
    np.sqrt(r, out=r)
    t = _mul(u[:, 1], TWO_PI)
    z = np.empty(v.shape, np.float64)
    np.cos(t, out=z[:, 0])
    np.sin(t, out=z[:, 1])
    _mul(z, r[:, None], out=z)
    return z


def _randint(v: np.ndarray, low: int, rng: int) -> np.ndarray:
    """``low + floor(V * rng / 2**(32 w))`` as uint64 (two's complement), one per element.

    ``v`` holds one 64-bit ``V`` per element (``rng <= 2**32``), or ``(n, 4)`` uint32 limbs of
    a 128-bit ``V``, least significant first.
    """
    if rng <= 1 << 32:
        v = v.astype(np.uint64)
        vh = v >> _S32
        vl = v & np.uint64(_M32)
        r = np.uint64(rng) if rng < 1 << 32 else None
        if r is None:  # rng == 2**32: floor(V / 2**32)
            h = vh
        else:
            h = (vh * r + ((vl * r) >> _S32)) >> _S32
    else:
        v = v.astype(np.uint64)
        if rng == 1 << 64:
            h = (v[:, 3] << _S32) | v[:, 2]
        else:
            limbs = (np.uint64(rng & _M32), np.uint64(rng >> 32))
            res = [np.zeros(len(v), np.uint64) for _ in range(6)]
            mask = np.uint64(_M32)
            for j, rj in enumerate(limbs):
                carry = np.zeros(len(v), np.uint64)
                for i in range(4):
                    t = v[:, i] * rj + res[i + j] + carry  # < 2**64: no overflow
                    res[i + j] = t & mask
                    carry = t >> _S32
                res[j + 4] = carry
            h = (res[5] << _S32) | res[4]
    return h + np.uint64(low % (1 << 64))


def _convert(w: np.ndarray, dist: str, dtype: np.dtype, params: Sequence[Any],
             out: np.ndarray) -> None:
    """Fill ``out`` (1-D, at most ``e * len(w)`` elements) from the word chunk ``w``."""
    n = len(out)
    if dist == "uniform":
        a, b = params
        if (a, b) == (0.0, 1.0):
            if n * words_per_element(dist, dtype) == w.size:
                _uniform_std(w, dtype, out)
            else:  # partial last block
                tmp = np.empty(w.size // words_per_element(dist, dtype), dtype)
                _uniform_std(w, dtype, tmp)
                out[:] = tmp[:n]
            return
        tmp = np.empty(w.size // words_per_element(dist, dtype), dtype)
        _uniform_std(w, dtype, tmp)
        t = tmp[:n].astype(np.float64)
        _mul(t, float(b) - float(a), out=t)
        np.add(t, float(a), out=t)
        res = t.astype(dtype)
        res[res == dtype.type(b)] = dtype.type(a)
        out[:] = res
        return
    if dist == "normal":
        mean, std = params
        z = _normal_std(w).reshape(-1)[:n]
        if (mean, std) == (0.0, 1.0):
            np.copyto(out, z, casting="unsafe")     # |z| < 9: fits every float dtype
            return
        # beyond the dtype's range: inf, as PyTorch; a nan or infinite mean or an infinite
        # std (which PyTorch takes) make nan or inf numbers without a warning, as in PyTorch
        with np.errstate(over="ignore", invalid="ignore"):
            z = z * float(std)
            z += float(mean)
            np.copyto(out, z, casting="unsafe")
        return
    low, rng = params
    v = w.view(_U64).reshape(-1)[:n] if rng <= 1 << 32 else w[:n]
    h = _randint(v, low, rng)
    if dtype.kind == "i" or low < 0:  # the result lies in [low, high) within int64
        h = h.view(np.int64)
    np.copyto(out, h, casting="unsafe")


# ---------------------------------------------------------------------- fill

_pool: concurrent.futures.ThreadPoolExecutor | None = None  # guarded by _pool_lock
_pool_pid = 0                                                 # guarded by _pool_lock
_pool_lock = reinit_after_fork(threading.Lock())


def _max_threads() -> int:
    """The most host threads one request uses (the pool's size): one per CPU, up to 4."""
    return max(1, min(4, os.cpu_count() or 1))


def _busy_elsewhere() -> float:
    """How many CPUs other work keeps busy now: the runnable tasks of ``/proc/loadavg``
    less the caller (an instant sample, so this function's own threads never feed back into
    it), else the 1-minute load average less one, else 0."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return int(f.read().split()[3].split("/")[0]) - 1
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.getloadavg()[0] - 1.0
    except (AttributeError, OSError):  # no load average on this platform
        return 0.0


def _threads() -> int:
    """Host threads for a request now: one per CPU that other work leaves free (at least 1,
    at most :func:`_max_threads`), in the spirit of libgomp's dynamic mode. On a busy machine
    extra threads only fight over the same cores and caches (measured 10-30% slower); the
    bits never depend on this."""
    free = (os.cpu_count() or 1) - max(0.0, _busy_elsewhere())
    return max(1, min(_max_threads(), int(free + 0.5)))


def _get_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The worker pool, made on first use and remade in a forked child (whose copy of the
    pool has no threads)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=_max_threads(), thread_name_prefix="accelrt-philox")
            _pool_pid = os.getpid()
        return _pool


def _direct(dist: str, dtype: np.dtype, params: Sequence[Any]) -> bool:
    """True if whole blocks can be converted in the destination's own memory: standard
    uniform float32 (four elements per block) or float64 (two), in native byte order (as the
    C arithmetic writes them)."""
    return (dist == "uniform" and dtype.kind == "f" and dtype.itemsize in (4, 8)
            and dtype.isnative and (float(params[0]), float(params[1])) == (0.0, 1.0))


def _uniform_in_place(seg: np.ndarray, x: np.ndarray, p: np.ndarray, n: int) -> None:
    """Round 10 and the standard uniform conversion of ``n`` whole blocks, in the float32
    or float64 array ``seg`` (``4 n`` or ``2 n`` elements) itself: the words are written as
    uint64 pairs, shifted right (``x >> 8`` per uint32 word, ``V >> 11`` per uint64 pair),
    cast in place through the signed type of the same size (exact: at most 24 or 53 bits, and
    signed-to-float casts are numpy's fast ones) and scaled by a power of two (exact)."""
    d = seg.view(_U64)
    _finish(x, p, d.reshape(n, 2).T)
    if seg.dtype.itemsize == 4:
        u = seg.view(_U32)
        _rs(u, _C8, u)
        np.copyto(seg, u.view(np.int32), casting="unsafe")
        _mul(seg, _CF32_SCALE, seg)
    else:
        _rs(d, _C11, d)
        np.copyto(seg, d.view(np.int64), casting="unsafe")
        _mul(seg, _CF64_SCALE, seg)


def _fill_range(out: np.ndarray, dist: str, dtype: np.dtype, params: Sequence[Any],
                plan: _Plan, offset: int, per: int, first: int, last: int,
                chunk: int) -> None:
    """Fill the elements made from blocks ``first .. last - 1`` of the request."""
    s = _scratch(chunk)
    total = len(out)
    j = first
    direct_end = min(last, total // per) if _direct(dist, dtype, params) else first
    while j < last:
        b = (offset + j) & _M64
        lo = j * per
        if j < direct_end:
            n = _chunk_len(b, min(chunk, direct_end - j))
            _uniform_into(out[lo:lo + n * per], b, n, plan, s)
        else:
            n = _chunk_len(b, min(chunk, last - j))
            _convert(_blocks(b, n, plan, s), dist, dtype, params,
                     out[lo:min(total, lo + n * per)])
        j += n


def fill(out: np.ndarray, dist: str, seed: int, offset: int,
         params: Sequence[Any] = (), *, parallel: bool = True) -> int:
    """Fill the C-contiguous numpy array ``out`` with Philox numbers; return the blocks used.

    Large requests are cut into chunks of :data:`CHUNK` blocks that :func:`_threads` threads
    (the caller and a pool; fewer when the machine is busy) claim in turn, so a slow thread
    delays the work rather than stalling it; every chunk's position in the output is fixed, so
    the bits do not depend on the threads.

    Args:
        out: the destination (any shape, C-contiguous, float16/32/64 for ``uniform`` and
            ``normal``; integer, bool or float for ``randint``).
        dist: ``"uniform"`` (params ``(a, b)``), ``"normal"`` (``(mean, std)``) or
            ``"randint"`` (``(low, high - low)``).
        seed: the 64-bit key.
        offset: the first block index (counter) of the request.
        params: the distribution's parameters (already validated by the caller).
        parallel: allow splitting a large request across host threads (the result is the
            same either way).

    Example::

        >>> import numpy as np
        >>> from accelrt.random._philox import fill
        >>> a = np.empty(8, np.float32)
        >>> fill(a, "uniform", 42, 0, (0.0, 1.0))
        2
        >>> bool(((a >= 0) & (a < 1)).all())
        True
    """
    if not out.flags.c_contiguous:
        raise ValueError("fill() needs a C-contiguous array")
    flat = out.reshape(-1)
    dtype = out.dtype
    per = 4 // words_per_element(dist, dtype, params)
    nblocks = -(-flat.size // per)
    if nblocks == 0:
        return 0
    offset &= _M64
    if _kernel is None and nblocks <= SMALL_MAX_BLOCKS and offset + nblocks <= 1 << 64:
        _small_fill(flat, dist, dtype, params, seed & _M64, offset, nblocks)
        return nblocks
    plan = _plan(seed & _M64)
    chunk = CHUNK
    nchunks = -(-nblocks // chunk)
    nt = min(_threads(), nchunks) if parallel and nblocks >= PARALLEL_MIN_BLOCKS else 1
    if nt <= 1:
        _fill_range(flat, dist, dtype, params, plan, offset, per, 0, nblocks, chunk)
        return nblocks
    lock = threading.Lock()
    claimed = [0]

    def work() -> None:
        while True:
            with lock:
                i = claimed[0]
                claimed[0] = i + 1
            if i >= nchunks:
                return
            try:
                _fill_range(flat, dist, dtype, params, plan, offset, per, i * chunk,
                            min(nblocks, (i + 1) * chunk), chunk)
            except BaseException:
                with lock:
                    claimed[0] = nchunks  # stop the other threads early
                raise

    pool = _get_pool()
    futures = [pool.submit(work) for _ in range(nt - 1)]
    try:
        work()
    finally:
        concurrent.futures.wait(futures)
    for fut in futures:
        fut.result()
    return nblocks


def _copy_uniform(ptr: int, nbytes: int, char: str, seed: int, offset: int,
                  nblocks: int) -> None:
    """:func:`fill_at` of a small standard uniform float32 (``char`` ``"f"``) or float64
    (``"d"``) request with the caller's checks done: ``nbytes`` bytes of the numbers of blocks
    ``offset .. offset + nblocks - 1`` (at most :data:`SMALL_MAX_BLOCKS`, below ``2**64``)
    copied to ``ptr`` from this thread's run of blocks. Every block holds 16 bytes of numbers
    in either dtype (four float32 or two float64).

    Example::

        >>> import numpy as np
        >>> from accelrt.random._philox import _copy_uniform, fill
        >>> a, b = np.empty(10, np.float32), np.empty(10, np.float32)
        >>> _copy_uniform(a.ctypes.data, a.nbytes, "f", 5, 0, 3)
        >>> fill(b, "uniform", 5, 0, (0.0, 1.0))
        3
        >>> a.tobytes() == b.tobytes()
        True
    """
    r: _Run | None = getattr(_tls, "run", None)
    if r is not None and r.seed == seed and r.start <= offset <= r.start + r.n - nblocks:
        i = offset - r.start                # _small_run's test, inlined: the common case
    else:
        r, i = _small_run(seed, offset, nblocks)
    addr = r.addr.get(char)
    if addr is None:
        r.standard_uniform(np.dtype(char))
        addr = r.addr[char]
    ctypes.memmove(ptr, addr + 16 * i, nbytes)


#: Elements per block of the standard uniform requests :func:`fill_at` copies straight from
#: the run of blocks, by dtype (native float32: four, float64: two).
_DIRECT_PER_BLOCK = {np.dtype(np.float32): 4, np.dtype(np.float64): 2}


def fill_at(ptr: int, n: int, dtype: np.dtype, dist: str, seed: int, offset: int,
            params: Sequence[Any]) -> None:
    """:func:`fill` of ``n`` elements of ``dtype`` at the host address ``ptr``.

    The random factories queue this on a stream (it owns nothing, so the array's memory is
    not kept allocated by queued work). A small standard uniform float32/float64 request is
    one call of the C arithmetic (compiled build) or one ``memmove`` from this thread's run of
    blocks (pure build); anything else goes through a numpy view of the memory and
    :func:`fill`. Same bits either way.

    Example::

        >>> import numpy as np
        >>> from accelrt.random._philox import fill, fill_at
        >>> a, b = np.empty(10, np.float32), np.empty(10, np.float32)
        >>> fill_at(a.ctypes.data, 10, a.dtype, "uniform", 5, 0, (0.0, 1.0))
        >>> fill(b, "uniform", 5, 0, (0.0, 1.0))
        3
        >>> a.tobytes() == b.tobytes()
        True
    """
    per = _DIRECT_PER_BLOCK.get(dtype) if dist == "uniform" else None
    if per is not None and n > 0 and (params[0] == 0.0 and params[1] == 1.0):
        nblocks = -(-n // per)
        offset &= _M64
        seed &= _M64
        if nblocks <= SMALL_MAX_BLOCKS and offset + nblocks <= 1 << 64:
            if _kernel is not None:       # the C arithmetic, straight into the memory
                _kernel.uniform_at(ptr, n, dtype.itemsize, seed, offset)
                return
            r: _Run | None = getattr(_tls, "run", None)
            if r is not None and r.seed == seed and r.start <= offset <= r.start + r.n - nblocks:
                i = offset - r.start            # _small_run's test, inlined: the common case
            else:
                r, i = _small_run(seed, offset, nblocks)
            addr = r.addr.get(dtype.char)
            if addr is None:
                r.standard_uniform(dtype)
                addr = r.addr[dtype.char]
            size = dtype.itemsize
            ctypes.memmove(ptr, addr + i * per * size, n * size)
            return
    nbytes = n * dtype.itemsize
    if nbytes:
        buf: Any = (ctypes.c_char * nbytes).from_address(ptr)
        fill(np.frombuffer(buf, dtype=dtype), dist, seed, offset, params)
