"""Review s32 of the MPI engine's floating ``MAX``/``MIN`` ops (``_mpi._nan_apply``).

MPI reduces in its own order on each rank (recursive doubling: rank 0 computes
``op(theirs, mine)``, rank 1 ``op(mine, theirs)``), so the op must give the same bits in either
order. numpy's ``fmax``/``fmin`` return either operand where the two compare equal with other
bits (``+0``/``-0``, two NaNs; its SIMD loops take the second, its scalar loops the first):
the ranks disagreed on the sign of a zero. The launched check is the ``signed zeros`` case of
tests/distributed/cases.py; these run the op's function alone (no MPI needed).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from accelrt.distributed._engine import ReduceOp
from accelrt.distributed._mpi import _nan_apply

VALUES = [0.0, -0.0, np.nan, -np.nan, 1.0, -1.0, np.inf, -np.inf, 2.5, -2.5]
FNS = {ReduceOp.MAX: np.fmax, ReduceOp.MIN: np.fmin}


def _both_orders(op: ReduceOp, dt: str, x: np.ndarray,
                 y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    f = _nan_apply(op, np.dtype(dt))
    one, two = y.copy(), x.copy()
    f(x, one, None)      # inoutbuf = op(inbuf, inoutbuf), as MPI calls it
    f(y, two, None)
    return one, two


def _bits(a: np.ndarray) -> object:
    """What must agree between ranks: the bytes, or, for long double (whose padding bytes
    carry nothing), the values, NaNs and signs."""
    if a.dtype.itemsize in (2, 4, 8):
        return a.tobytes()
    return a.astype(np.float64).tobytes(), np.signbit(a).tobytes()


@pytest.mark.parametrize("dt", ["float16", "float32", "float64", "longdouble"])
@pytest.mark.parametrize("op", [ReduceOp.MAX, ReduceOp.MIN])
@pytest.mark.parametrize("n", [1, 37, 1000])   # numpy's scalar and SIMD loops
def test_every_pair_gives_the_same_bits_in_either_order(dt: str, op: ReduceOp, n: int) -> None:
    for x, y in itertools.product(VALUES, repeat=2):
        a, b = np.full(n, x, dt), np.full(n, y, dt)
        got, two = _both_orders(op, dt, a, b)
        assert _bits(got) == _bits(two), (dt, op, x, y)
        assert np.array_equal(got, FNS[op](a, b), equal_nan=True), (dt, op, x, y)
        if x == 0 and y == 0:   # IEEE 754-2019 maximumNumber/minimumNumber: -0 < +0
            sa, sb = bool(np.signbit(a[0])), bool(np.signbit(b[0]))
            assert bool(np.signbit(got[0])) == ((sa and sb) if op is ReduceOp.MAX
                                                else (sa or sb)), (dt, op, x, y)
        if np.isnan(x) and np.isnan(y):   # numpy's nan, whatever the NaNs' signs
            assert _bits(got) == _bits(np.full(n, np.nan, dt)), (dt, op, x, y)


@pytest.mark.parametrize("dt", ["float16", "float32", "float64"])
def test_mixed_arrays_reduce_as_fmax_fmin_in_any_order(dt: str) -> None:
    rng = np.random.default_rng(5)
    pool = np.array(VALUES, dt)
    for op in (ReduceOp.MAX, ReduceOp.MIN):
        for _ in range(20):
            a, b = rng.choice(pool, 301), rng.choice(pool, 301)
            one, two = _both_orders(op, dt, a, b)
            assert one.tobytes() == two.tobytes()
            assert np.array_equal(one, FNS[op](a, b), equal_nan=True)


def test_empty_chunks_are_left_alone() -> None:
    out = np.empty(0, np.float32)
    _nan_apply(ReduceOp.MAX, out.dtype)(np.empty(0, np.float32), out, None)
    assert out.size == 0
