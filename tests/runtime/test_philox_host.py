"""The compiled build's C Philox4x32-10 (``accelrt.random._philox_host``) against the numpy
pipeline (the host reference, which the pure build runs): the same bits for every counter,
key, size and distribution, through the module's functions and through the random factories.

Skipped in the pure build, which has no C arithmetic (``_philox._kernel is None``).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accelrt as acc
from accelrt import memory
from accelrt.random import _philox

KERNEL = _philox._kernel
pytestmark = pytest.mark.skipif(KERNEL is None, reason="the pure build has no C Philox "
                                                       "(pip install . builds it)")
M64 = (1 << 64) - 1


def test_the_compiled_build_has_the_c_arithmetic() -> None:
    assert memory.compiled, "the C Philox loaded in a build whose mypyc modules did not"


def _pipeline(fn, *args):
    """``fn(*args)`` with the C arithmetic off (the pure build's numpy pipeline)."""
    saved = _philox._kernel
    _philox._kernel = None
    try:
        return fn(*args)
    finally:
        _philox._kernel = saved


def _fill(n: int, dtype: str, dist: str, seed: int, offset: int, params) -> np.ndarray:
    out = np.empty(n, dtype)
    _philox.fill(out, dist, seed, offset, params)
    return out


# counters where the high word changes, the 64-bit counter wraps, and a key of all ones
COUNTERS = [0, 1, (1 << 32) - 5, (1 << 33) + 7, M64 - 3, M64]
SEEDS = [0, 0x1234_5678_9ABC, M64]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("offset", COUNTERS)
def test_words_match_the_pipeline(seed: int, offset: int) -> None:
    for n in (1, 2, 17, 300):
        got = _philox.words(seed, offset, n)
        np.testing.assert_array_equal(got, _pipeline(_philox.words, seed, offset, n))


def test_words_match_the_reference_entry_point() -> None:
    # the counter layout of the module docstring, through philox4x32_10 (numpy, per counter)
    seed, offset = 0xDEAD_BEEF_0BAD_F00D, M64 - 1
    b = [(offset + j) & M64 for j in range(4)]
    counters = np.array([[x & 0xFFFFFFFF, x >> 32, 0, 0] for x in b], np.uint32)
    ref = _philox.philox4x32_10(counters, (seed & 0xFFFFFFFF, seed >> 32))
    np.testing.assert_array_equal(_philox.words(seed, offset, 4), ref)


DISTS = [("uniform", "float32", (0.0, 1.0)), ("uniform", "float64", (0.0, 1.0)),
         ("uniform", "float16", (0.0, 1.0)), ("uniform", "float32", (-2.0, 3.0)),
         ("normal", "float32", (0.0, 1.0)), ("normal", "float64", (1.0, 2.0)),
         ("randint", "int64", (-5, 1000)), ("randint", "int64", (0, 1 << 40))]


@pytest.mark.parametrize(("dist", "dtype", "params"), DISTS)
@pytest.mark.parametrize("offset", [0, (1 << 32) - 3, M64 - 2])
def test_every_distribution_matches_the_pipeline(dist, dtype, params, offset) -> None:
    for n in (1, 3, 7, 1001):   # partial last blocks of every width
        got = _fill(n, dtype, dist, 0x1234_5678_9ABC, offset, params)
        want = _pipeline(_fill, n, dtype, dist, 0x1234_5678_9ABC, offset, params)
        assert got.tobytes() == want.tobytes(), (dist, dtype, params, offset, n)


@pytest.mark.parametrize("dtype", [">f4", ">f8"])
def test_arrays_in_the_other_byte_order_get_the_same_numbers(dtype: str) -> None:
    # numpy arrays only (accelrt's arrays are native): the C code writes native numbers, so
    # these take the word path and a converting copy
    for n in (1, 9, 1000):
        got = _fill(n, dtype, "uniform", 5, 0, (0.0, 1.0))
        want = _fill(n, dtype[1:], "uniform", 5, 0, (0.0, 1.0))
        np.testing.assert_array_equal(got, want)
        assert got.tobytes() == _pipeline(_fill, n, dtype, "uniform", 5, 0,
                                          (0.0, 1.0)).tobytes()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_large_request_on_threads_matches_the_pipeline(dtype: str) -> None:
    # more than PARALLEL_MIN_BLOCKS: chunks on several threads, the C code without the GIL;
    # across the high word's change
    n = (_philox.PARALLEL_MIN_BLOCKS + 1001) * (4 if dtype == "float32" else 2) + 1
    offset = (1 << 32) - 40_000
    got = _fill(n, dtype, "uniform", 99, offset, (0.0, 1.0))
    want = _pipeline(_fill, n, dtype, "uniform", 99, offset, (0.0, 1.0))
    assert got.tobytes() == want.tobytes()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, M64), offset=st.integers(0, M64), n=st.integers(1, 70),
       dtype=st.sampled_from(["float32", "float64"]))
def test_uniform_at_matches_the_pipeline(seed: int, offset: int, n: int, dtype: str) -> None:
    out = np.full(n + 1, -1.0, dtype)      # one guard element after the request
    KERNEL.uniform_at(out.ctypes.data, n, out.itemsize, seed, offset)
    want = _pipeline(_fill, n, dtype, "uniform", seed, offset, (0.0, 1.0))
    assert out[:n].tobytes() == want.tobytes()
    assert out[n] == -1.0                  # nothing written past the count


def test_rand_through_the_factories_matches_the_pipeline() -> None:
    g = acc.random.Generator("cpu:0")
    for dtype in ("float32", "float64"):
        for n in (1, 5, 1000, 9000):        # the queued C call, and fill_at's larger path
            g.manual_seed(21)
            got = acc.rand(n, dtype=dtype, device="cpu:0", generator=g).numpy()
            g.manual_seed(21)
            want = _pipeline(lambda: acc.rand(n, dtype=dtype, device="cpu:0",
                                              generator=g).numpy())
            assert got.tobytes() == want.tobytes(), (dtype, n)
    g.manual_seed(3)
    got = acc.randn(333, device="cpu:0", generator=g).numpy()
    g.manual_seed(3)
    want = _pipeline(lambda: acc.randn(333, device="cpu:0", generator=g).numpy())
    assert got.tobytes() == want.tobytes()


def test_threads_drawing_at_once_get_their_own_numbers() -> None:
    # every thread's generator draws while the others do (a barrier starts them together);
    # each result is the one its seed gives alone
    n_threads, gate = 4, threading.Barrier(4, timeout=30)
    results: dict[int, bytes] = {}

    def draw(i: int) -> None:
        g = acc.random.Generator("cpu:0").manual_seed(100 + i)
        gate.wait()
        results[i] = b"".join(acc.rand(777, device="cpu:0", generator=g).numpy().tobytes()
                              for _ in range(20))

    threads = [threading.Thread(target=draw, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for i in range(n_threads):
        g = acc.random.Generator("cpu:0").manual_seed(100 + i)
        alone = b"".join(acc.rand(777, device="cpu:0", generator=g).numpy().tobytes()
                         for _ in range(20))
        assert results[i] == alone, i


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: KERNEL.uniform_at(1.5, 1, 4, 0, 0), TypeError, "address must be an int"),
    (lambda: KERNEL.uniform_at(0, 1, 4, 0, 0), ValueError, "must not be 0"),
    # a negative address was read as 2**64 - n (written to with a count above 0)
    (lambda: KERNEL.uniform_at(-8, 0, 4, 0, 0), ValueError, "must not be negative, got -8"),
    (lambda: KERNEL.words_at(-2**64, 0, 0, 0), ValueError, "must not be negative"),
    (lambda: KERNEL.words_at(1 << 64, 0, 0, 0), OverflowError, "too large"),
    (lambda: KERNEL.uniform_at(8, 1, 2, 0, 0), ValueError, "itemsize must be 4"),
    (lambda: KERNEL.uniform_at(8, -1, 4, 0, 0), ValueError, r"count must be in \[0, 2\*\*64\)"),
    (lambda: KERNEL.uniform_at(8, 1 << 62, 4, 0, 0), ValueError, "count must be at most"),
    (lambda: KERNEL.uniform_at(8, 1, 4, 1 << 64, 0), ValueError, "seed must be in"),
    (lambda: KERNEL.uniform_at(8, 1, 4, 0, -1), ValueError, "offset must be in"),
    (lambda: KERNEL.uniform_at(8, 1, 4, "0", 0), TypeError, "seed must be an int"),
    (lambda: KERNEL.uniform_at(8, 1, 4, 0), TypeError, "takes 5 arguments"),
    (lambda: KERNEL.words_at(8, 1 << 62, 0, 0), ValueError, "nblocks must be at most"),
    (lambda: KERNEL.words_at(8, 1, 0), TypeError, "takes 4 arguments"),
])
def test_bad_arguments_raise_before_anything_is_written(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()


def test_zero_counts_write_nothing() -> None:
    out = np.full(4, 7, np.uint32)
    KERNEL.words_at(out.ctypes.data, 0, 1, 2)
    KERNEL.uniform_at(out.ctypes.data, 0, 4, 1, 2)
    assert (out == 7).all()


ISAS = KERNEL.isas() if KERNEL is not None else ()


def test_the_best_instruction_set_is_used_and_the_baseline_always_runs() -> None:
    assert KERNEL.isa() == ISAS[0]
    assert ISAS[-1] == "baseline"
    assert set(ISAS) <= {"avx512f", "baseline"}


@pytest.mark.parametrize("isa", ISAS)
def test_every_instruction_set_computes_the_same_bits(isa: str) -> None:
    # the SIMD lanes' loops and the one-block tails, across the lanes' edges, the counter's
    # high word and its wrap; every variant this CPU runs against the numpy pipeline
    previous = KERNEL.use_isa(isa)
    try:
        assert KERNEL.isa() == isa
        for seed in SEEDS:
            for offset in COUNTERS:
                for n in [*range(1, 41), 300]:
                    got = np.full((n + 1, 4), 7, np.uint32)
                    KERNEL.words_at(got.ctypes.data, n, seed, offset)
                    np.testing.assert_array_equal(got[:n],
                                                  _pipeline(_philox.words, seed, offset, n))
                    assert (got[n] == 7).all()
                for dtype in ("float32", "float64"):
                    for n in [*range(1, 71), 1001]:
                        out = np.full(n + 1, -1.0, dtype)
                        KERNEL.uniform_at(out.ctypes.data, n, out.itemsize, seed, offset)
                        want = _pipeline(_fill, n, dtype, "uniform", seed, offset, (0.0, 1.0))
                        assert out[:n].tobytes() == want.tobytes(), (isa, dtype, seed, offset, n)
                        assert out[n] == -1.0
    finally:
        KERNEL.use_isa(previous)


def test_use_isa_takes_only_what_this_cpu_runs() -> None:
    with pytest.raises(ValueError, match=r"use_isa\('sse9'\): this CPU runs only"):
        KERNEL.use_isa("sse9")
    with pytest.raises(TypeError, match="takes a str, got int"):
        KERNEL.use_isa(4)
    assert KERNEL.isa() == ISAS[0]
    assert KERNEL.use_isa(ISAS[0]) == ISAS[0]
