"""Small requests come from a per-thread run of precomputed blocks: same bits as the chunk
pipeline, one pipeline pass per run (not per request). The runs are the numpy pipeline's
(the pure build's arithmetic): the compiled build's C arithmetic computes every request in
place, so these tests turn it off (tests/runtime/test_philox_host.py compares the two)."""

from __future__ import annotations

import numpy as np
import pytest

import accelrt as acc
from accelrt.random import _philox

DISTS = [("uniform", "float32", (0.0, 1.0)), ("uniform", "float64", (0.0, 1.0)),
         ("uniform", "float16", (0.0, 1.0)), ("uniform", "float32", (-2.0, 3.0)),
         ("normal", "float32", (0.0, 1.0)), ("normal", "float64", (1.0, 2.0)),
         ("randint", "int64", (-5, 1000)), ("randint", "int64", (0, 1 << 40))]


def _reference(n: int, dist: str, dtype: str, params, seed: int, offset: int) -> np.ndarray:
    """The pipeline path (small path off)."""
    out = np.empty(n, dtype)
    old = _philox.SMALL_MAX_BLOCKS
    _philox.SMALL_MAX_BLOCKS = -1
    try:
        _philox.fill(out, dist, seed, offset, params)
    finally:
        _philox.SMALL_MAX_BLOCKS = old
    return out


@pytest.mark.parametrize(("dist", "dtype", "params"), DISTS)
@pytest.mark.parametrize("offset", [0, 5, (1 << 32) - 3, (1 << 64) - 2, (1 << 64) - 9000])
def test_small_path_bits_match_pipeline(dist, dtype, params, offset, monkeypatch) -> None:
    monkeypatch.setattr(_philox, "_kernel", None)
    seed = 0x1234_5678_9ABC
    _philox._tls.__dict__.pop("run", None)
    for n in (1, 3, 7, 1000):
        out = np.empty(n, dtype)
        used = _philox.fill(out, dist, seed, offset, params)
        np.testing.assert_array_equal(out, _reference(n, dist, dtype, params, seed, offset))
        offset = (offset + used) & ((1 << 64) - 1)


def _spy_runs(monkeypatch) -> list[tuple[int, int, int]]:
    """Record ``(seed, start, blocks)`` of every run of blocks computed."""
    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(_philox, "_kernel", None)
    real_words, real_uniform = _philox.words, _philox._uniform_blocks
    monkeypatch.setattr(_philox, "words",
                        lambda s, o, n: calls.append((s, o, n)) or real_words(s, o, n))
    monkeypatch.setattr(_philox, "_uniform_blocks",
                        lambda s, o, n, d: calls.append((s, o, n)) or real_uniform(s, o, n, d))
    _philox._tls.__dict__.pop("run", None)
    return calls


def test_consecutive_small_requests_share_runs_that_grow(monkeypatch) -> None:
    calls = _spy_runs(monkeypatch)
    g = acc.random.Generator("cpu:0").manual_seed(7)
    parts = [acc.rand(1000, device="cpu:0", generator=g).numpy() for _ in range(400)]
    # each run the stream runs past is twice as long, up to SMALL_RUN; 250 blocks a request
    expected, start, size = [], 0, _philox.SMALL_RUN_MIN
    while start < 100_000:
        expected.append((7, start, size))
        start += size - size % 250
        size = min(2 * size, _philox.SMALL_RUN)
    assert calls == expected
    assert calls[-1][2] == _philox.SMALL_RUN
    whole = acc.rand(400_000, device="cpu:0",
                     generator=acc.random.Generator("cpu:0").manual_seed(7)).numpy()
    np.testing.assert_array_equal(np.concatenate(parts), whole)


def test_generators_used_in_turn_compute_short_runs(monkeypatch) -> None:
    calls = _spy_runs(monkeypatch)
    g1 = acc.random.Generator("cpu:0").manual_seed(1)
    g2 = acc.random.Generator("cpu:0").manual_seed(2)
    for _ in range(3):
        acc.rand(1000, device="cpu:0", generator=g1)
        acc.rand(1000, device="cpu:0", generator=g2)
    assert [n for _, _, n in calls] == [_philox.SMALL_RUN_MIN] * 6


def test_another_seed_or_a_jump_recomputes(monkeypatch) -> None:
    calls = _spy_runs(monkeypatch)
    a = np.empty(8, np.float32)
    _philox.fill(a, "uniform", 1, 100, (0.0, 1.0))
    _philox.fill(a, "uniform", 2, 102, (0.0, 1.0))      # another seed
    _philox.fill(a, "uniform", 2, 50, (0.0, 1.0))       # before the run
    _philox.fill(a, "uniform", 2, 102 + _philox.SMALL_RUN, (0.0, 1.0))  # past it
    assert [(s, o) for s, o, _ in calls] == [(1, 100), (2, 102), (2, 50),
                                              (2, 102 + _philox.SMALL_RUN)]
    np.testing.assert_array_equal(a, _reference(8, "uniform", "float32", (0.0, 1.0), 2,
                                                102 + _philox.SMALL_RUN))


def test_a_run_computes_only_what_its_requests_read(monkeypatch) -> None:
    calls = _spy_runs(monkeypatch)
    g = acc.random.Generator("cpu:0").manual_seed(5)
    acc.rand(100, device="cpu:0", generator=g)                   # uniform numbers only
    assert len(calls) == 1
    acc.randn(100, device="cpu:0", generator=g)                  # words of the same run
    acc.rand(100, device="cpu:0", generator=g)
    acc.randn(100, device="cpu:0", generator=g)
    assert [o for _, o, _ in calls] == [0, 0]
