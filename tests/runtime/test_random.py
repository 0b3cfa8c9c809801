"""Tests of accelrt.random: Philox4x32-10 known answers, the counter layout, bit-identity
across chunkings, threads, devices and backends, generator state, and the factories."""

from __future__ import annotations

import dataclasses
import math
import uuid

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accelrt as acc
from accelrt import backends
from accelrt.backends import Capabilities
from accelrt.backends.cpu import CpuBackend
from accelrt.random import _generator, _philox

M32 = 0xFFFFFFFF

# Random123 known-answer vectors: file tests/kat_vectors of D. E. Shaw Research's Random123
# (github.com/DEShawResearch/random123), the three "philox4x32 10" lines; columns are the
# counter (4 words), the key (2 words) and the expected output (4 words).
KAT = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF),
     (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def ref_philox(ctr: tuple[int, ...], key: tuple[int, int]) -> list[int]:
    """Scalar Philox4x32-10 written from the SC'11 paper, independent of the module."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return [c0, c1, c2, c3]


def ref_words(seed: int, offset: int, nblocks: int) -> list[int]:
    """The documented counter layout: block j -> counter (b lo, b hi, 0, 0), b = offset + j."""
    out: list[int] = []
    for j in range(nblocks):
        b = (offset + j) % (1 << 64)
        out += ref_philox((b & M32, b >> 32, 0, 0), (seed & M32, seed >> 32))
    return out


def _register(num_devices: int = 2, **kw: object) -> str:
    name = "rng" + uuid.uuid4().hex[:8]
    backends.register(name, lambda: CpuBackend(num_devices=num_devices, name=name, **kw),
                      replace=True)
    return name


# ---------------------------------------------------------------------- Philox core

@pytest.mark.parametrize("ctr,key,expected", KAT)
def test_known_answer_vectors(ctr, key, expected) -> None:
    assert ref_philox(ctr, key) == list(expected)
    got = _philox.philox4x32_10(np.array([ctr], np.uint32), key)
    assert got.dtype == np.uint32
    assert got[0].tolist() == list(expected)


def test_vectorised_matches_scalar_on_many_counters() -> None:
    rng = np.random.default_rng(1)
    ctr = rng.integers(0, 1 << 32, size=(50, 4), dtype=np.uint64).astype(np.uint32)
    key = (0x12345678, 0x9ABCDEF0)
    got = _philox.philox4x32_10(ctr, key)
    for i in range(50):
        assert got[i].tolist() == ref_philox(tuple(int(v) for v in ctr[i]), key)


def test_counter_layout_including_64_bit_carry_and_wrap() -> None:
    seed = 0xDEADBEEF_01234567
    for offset in (0, (1 << 32) - 2, (1 << 64) - 2):
        w = _philox.words(seed, offset, 5)
        assert w.reshape(-1).tolist() == ref_words(seed, offset, 5)


@pytest.mark.parametrize("nblocks", [_philox.LANES_BELOW - 1, _philox.LANES_BELOW, 40_000])
def test_lane_by_lane_and_two_lane_rounds_match_the_reference(nblocks: int) -> None:
    """Chunks below LANES_BELOW blocks run the rounds lane by lane, longer ones on both lanes
    per call; both give the reference words (sampled), across a high-word carry."""
    seed = 0x0123456789ABCDEF
    for offset in (5, (1 << 32) - 3):
        w = _philox.words(seed, offset, nblocks)
        for j in (0, 1, 2, 3, 4, nblocks // 2, nblocks - 1):
            assert w[j].tolist() == ref_words(seed, offset + j, 1), (offset, j)


def test_philox_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match=r"shape \(n, 4\)"):
        _philox.philox4x32_10(np.zeros((2, 3), np.uint32), (0, 0))
    with pytest.raises(ValueError, match="key"):
        _philox.philox4x32_10(np.zeros((1, 4), np.uint32), (0, 1 << 32))


# ---------------------------------------------------------------------- conversions

def test_uniform_conversions_exact() -> None:
    seed, off = 99, 7
    w = ref_words(seed, off, 4)
    f32 = np.empty(16, np.float32)
    assert _philox.fill(f32, "uniform", seed, off, (0.0, 1.0)) == 4
    assert f32.tolist() == [(x >> 8) * 2.0 ** -24 for x in w]
    f16 = np.empty(16, np.float16)
    _philox.fill(f16, "uniform", seed, off, (0.0, 1.0))
    assert f16.astype(np.float64).tolist() == [(x >> 21) * 2.0 ** -11 for x in w]
    f64 = np.empty(8, np.float64)
    assert _philox.fill(f64, "uniform", seed, off, (0.0, 1.0)) == 4
    assert f64.tolist() == [((w[2 * i + 1] << 32 | w[2 * i]) >> 11) * 2.0 ** -53
                            for i in range(8)]


def test_uniform_bounds_formula() -> None:
    seed = 5
    w = ref_words(seed, 0, 2)
    out = np.empty(8, np.float32)
    _philox.fill(out, "uniform", seed, 0, (-3.0, 5.5))
    expect = [np.float32(-3.0 + 8.5 * float(np.float32((x >> 8) * 2.0 ** -24))) for x in w]
    assert out.tolist() == [float(v) for v in expect]


def test_normal_formula() -> None:
    seed, off = 1234, 3
    w = ref_words(seed, off, 3)
    z = []
    for j in range(3):
        u1 = ((w[4 * j + 1] << 32 | w[4 * j]) >> 11) * 2.0 ** -53
        u2 = ((w[4 * j + 3] << 32 | w[4 * j + 2]) >> 11) * 2.0 ** -53
        r = math.sqrt(-2.0 * math.log(1.0 - u1))
        t = 6.283185307179586 * u2
        z += [r * math.cos(t), r * math.sin(t)]
    out = np.empty(5, np.float64)   # odd: the last pair's second value is dropped
    assert _philox.fill(out, "normal", seed, off, (0.0, 1.0)) == 3
    np.testing.assert_allclose(out, z[:5], rtol=1e-14, atol=1e-15)
    out2 = np.empty(5, np.float64)
    _philox.fill(out2, "normal", seed, off, (2.0, 3.0))
    np.testing.assert_allclose(out2, [2.0 + 3.0 * v for v in z[:5]], rtol=1e-14)


@pytest.mark.parametrize("low,high", [(0, 10), (-7, 1 << 32 - 7), (5, (1 << 32) + 5),
                                      (-(1 << 40), 1 << 40), (-(1 << 63), 1 << 63)])
def test_randint_formula(low: int, high: int) -> None:
    rng = high - low
    nw = 2 if rng <= 1 << 32 else 4
    n = 6
    w = ref_words(77, 11, -(-n * nw // 4))
    expect = []
    for i in range(n):
        v = sum(w[nw * i + k] << (32 * k) for k in range(nw))
        expect.append(low + (v * rng >> (32 * nw)))
    out = np.empty(n, np.int64)
    _philox.fill(out, "randint", 77, 11, (low, rng))
    assert out.tolist() == expect


def test_blocks_needed() -> None:
    f32, f64 = np.dtype("float32"), np.dtype("float64")
    assert _philox.blocks_needed(0, "uniform", f32) == 0
    assert _philox.blocks_needed(5, "uniform", f32) == 2
    assert _philox.blocks_needed(5, "uniform", f64) == 3
    assert _philox.blocks_needed(5, "normal", f32) == 3
    assert _philox.blocks_needed(5, "randint", f32, (0, 1 << 32)) == 3
    assert _philox.blocks_needed(5, "randint", f32, (0, (1 << 32) + 1)) == 5
    with pytest.raises(ValueError, match="unknown distribution"):
        _philox.blocks_needed(5, "poisson", f32)


# ---------------------------------------------------------------------- bit identity

CASES = [("uniform", "float32", (0.0, 1.0)), ("uniform", "float64", (-1.0, 2.0)),
         ("uniform", "float16", (0.0, 1.0)), ("normal", "float32", (0.0, 1.0)),
         ("normal", "float64", (1.0, 2.0)), ("randint", "int64", (-5, 100)),
         ("randint", "int64", (0, 1 << 50))]


@pytest.mark.parametrize("dist,dtype,params", CASES)
def test_chunking_and_threads_do_not_change_bits(monkeypatch, dist, dtype, params) -> None:
    n = 1001
    ref = np.empty(n, dtype)
    _philox.fill(ref, dist, 42, 10, params, parallel=False)
    monkeypatch.setattr(_philox, "CHUNK", 7)
    monkeypatch.setattr(_philox, "PARALLEL_MIN_BLOCKS", 8)
    monkeypatch.setattr(_philox, "_threads", lambda: 3)
    small = np.empty(n, dtype)
    _philox.fill(small, dist, 42, 10, params)
    assert small.tobytes() == ref.tobytes()
    # a request split at a block boundary: the second part starts at offset + blocks of part 1
    per = 4 // _philox.words_per_element(dist, np.dtype(dtype), params)
    cut = 60 * per
    a, b = np.empty(cut, dtype), np.empty(n - cut, dtype)
    used = _philox.fill(a, dist, 42, 10, params)
    _philox.fill(b, dist, 42, 10 + used, params)
    assert np.concatenate([a, b]).tobytes() == ref.tobytes()


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 300), split=st.integers(0, 300), offset=st.integers(0, (1 << 64) - 1),
       seed=st.integers(0, (1 << 64) - 1), dist=st.sampled_from(CASES))
def test_element_depends_only_on_seed_offset_and_index(n, split, offset, seed, dist) -> None:
    name, dtype, params = dist
    per = 4 // _philox.words_per_element(name, np.dtype(dtype), params)
    cut = min(n, split) // per * per          # split at a block boundary
    whole = np.empty(n, dtype)
    used = _philox.fill(whole, name, seed, offset, params)
    assert used == _philox.blocks_needed(n, name, np.dtype(dtype), params)
    a, b = np.empty(cut, dtype), np.empty(n - cut, dtype)
    _philox.fill(a, name, seed, offset, params)
    _philox.fill(b, name, seed, offset + cut // per, params)
    assert np.concatenate([a, b]).tobytes() == whole.tobytes()


def test_same_bits_on_two_devices_and_backends() -> None:
    name = _register(2)
    ga = acc.random.Generator(f"{name}:0").manual_seed(2024)
    gb = acc.random.Generator(f"{name}:1").manual_seed(2024)
    gc = acc.random.Generator("cpu:0").manual_seed(2024)
    xs = [acc.rand(3, 5, device=g.device, generator=g).numpy() for g in (ga, gb, gc)]
    assert xs[0].tobytes() == xs[1].tobytes() == xs[2].tobytes()
    ys = [acc.randint(-9, 9, (40,), device=g.device, generator=g).numpy() for g in (ga, gb, gc)]
    assert ys[0].tobytes() == ys[1].tobytes() == ys[2].tobytes()
    assert str(ys[0].dtype) == "int64"


def test_async_stream_matches_synchronous() -> None:
    name = _register(1, async_streams=True)
    g = acc.random.Generator(f"{name}:0").manual_seed(11)
    s = acc.Stream(f"{name}:0")
    with s:
        x = acc.randn(1000, device=f"{name}:0", generator=g)
    s.synchronize()
    ref = np.empty(1000, np.float32)
    _philox.fill(ref, "normal", 11, 0, (0.0, 1.0))
    assert x.numpy().tobytes() == ref.tobytes()


def test_stream_order_on_async_streams() -> None:
    name = _register(1, async_streams=True)
    dev = f"{name}:0"
    x = acc.empty(50_000, dtype="float64", device=dev)
    acc.random.normal_(x)            # enqueued before the fill: the fill must win
    x.fill_(1.0)
    acc.synchronize(dev)
    assert (x.numpy() == 1.0).all()
    acc.random.uniform_(x, 2.0, 3.0)  # enqueued after the fill: the numbers must win
    acc.synchronize(dev)
    v = x.numpy()
    assert v.min() >= 2.0 and v.max() < 3.0


def test_concurrent_requests_never_share_counters() -> None:
    import threading
    g = acc.random.Generator("cpu:0").manual_seed(4)
    results: list[bytes] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(25):
            v = acc.rand(8, device="cpu:0", generator=g).numpy().tobytes()
            with lock:
                results.append(v)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert g.get_offset() == 200
    whole = np.empty(800, np.float32)
    _philox.fill(whole, "uniform", 4, 0, (0.0, 1.0))
    expected = sorted(whole.reshape(100, 8)[i].tobytes() for i in range(100))
    assert sorted(results) == expected


class _NoHost(CpuBackend):
    """A cpu variant whose memory the host may not touch: exercises the copy path."""

    def capabilities(self, index: int) -> Capabilities:
        return dataclasses.replace(super().capabilities(index), host_accessible=False)


class _WithDeviceFill(CpuBackend):
    """A cpu variant that implements the optional ``philox_fill`` hook."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)
        self.fills: list[tuple[object, ...]] = []

    def capabilities(self, index: int) -> Capabilities:
        return dataclasses.replace(super().capabilities(index), host_accessible=False,
                                   device_rng=True)

    def philox_fill(self, index, ptr, n, dtype, dist, seed, offset, params, stream):  # type: ignore[no-untyped-def]
        self.fills.append((n, dtype, dist, seed, offset, params, index, stream))
        host = np.empty(n, dtype)
        _philox.fill(host, dist, seed, offset, params)
        self.memcpy(index, ptr, host.ctypes.data, host.nbytes, "h2d", stream)


def test_non_host_backends_give_the_same_bits() -> None:
    n1 = "rng" + uuid.uuid4().hex[:8]
    n2 = "rng" + uuid.uuid4().hex[:8]
    backends.register(n1, lambda: _NoHost(num_devices=1, name=n1), replace=True)
    backends.register(n2, lambda: _WithDeviceFill(num_devices=1, name=n2), replace=True)
    ref = acc.random.uniform_(acc.empty(77, dtype="float64", device="cpu:0"), -1, 1,
                              generator=acc.random.Generator("cpu:0").manual_seed(8)).numpy()
    for name in (n1, n2):
        g = acc.random.Generator(f"{name}:0").manual_seed(8)
        out = acc.random.uniform_(acc.empty(77, dtype="float64", device=f"{name}:0"), -1, 1,
                                  generator=g)
        assert out.numpy().tobytes() == ref.tobytes()
        assert g.get_offset() == 39
    fills = backends.get_backend(n2).fills
    assert fills and fills[0][:6] == (77, "float64", "uniform", 8, 0, (-1.0, 1.0))


# ---------------------------------------------------------------------- generator state

def test_state_round_trip_and_offset_advance() -> None:
    g = acc.random.Generator("cpu:0").manual_seed(31)
    st = g.get_state()
    assert st.dtype == np.uint8 and st.shape == (16,)
    assert int.from_bytes(st[:8].tobytes(), "little") == 31
    assert int.from_bytes(st[8:].tobytes(), "little") == 0
    a = acc.rand(3, device="cpu:0", generator=g).numpy().copy()
    assert g.get_offset() == 1                       # 3 float32 -> one block, rounded up
    b = acc.rand(5, device="cpu:0", generator=g).numpy().copy()
    assert g.get_offset() == 3
    g.set_state(st)
    whole = acc.rand(12, device="cpu:0", generator=g).numpy()
    assert a.tobytes() == whole[:3].tobytes()        # blocks never shared between requests
    assert b.tobytes() == whole[4:9].tobytes()
    assert g.set_state(np.frombuffer(bytes(st), np.uint8)) is g and g.get_offset() == 0
    assert g.initial_seed() == 31


def test_generator_defaults_and_seed() -> None:
    g = acc.random.Generator("cpu:0")
    assert g.initial_seed() == acc.random.DEFAULT_SEED == 67280421310721
    assert g.device == acc.device("cpu:0")
    s = g.seed()
    assert 0 <= s < 1 << 64 and g.initial_seed() == s and g.get_offset() == 0
    assert "cpu:0" in repr(g)


@pytest.mark.parametrize("seed,stored", [(-1, (1 << 64) - 1), (-(1 << 63), 1 << 63),
                                         ((1 << 64) - 1, (1 << 64) - 1), (np.int64(5), 5)])
def test_seed_bounds(seed, stored) -> None:
    assert acc.random.Generator("cpu:0").manual_seed(seed).initial_seed() == stored


@pytest.mark.parametrize("seed,exc", [(1 << 64, ValueError), (-(1 << 63) - 1, ValueError),
                                      (1.5, TypeError), ("3", TypeError), (True, TypeError)])
def test_bad_seeds(seed, exc) -> None:
    with pytest.raises(exc, match="seed"):
        acc.random.Generator("cpu:0").manual_seed(seed)
    if exc is ValueError:   # the module-level seeders read int(seed), as torch.manual_seed
        with pytest.raises(exc, match="seed"):
            acc.random.manual_seed(seed)


@pytest.mark.parametrize("state,exc,msg", [
    (np.zeros(15, np.uint8), ValueError, "16 bytes"),
    (np.zeros(16, np.int64), TypeError, "uint8"),
    ([0] * 16, TypeError, "numpy uint8"),
    (np.frombuffer(b"x" * 17, np.uint8), ValueError, "16 bytes")])
def test_bad_states(state, exc, msg) -> None:
    with pytest.raises(exc, match=msg):
        acc.random.Generator("cpu:0").set_state(state)
    with pytest.raises(exc, match=msg):
        acc.random.set_rng_state(state, "cpu:0")


def test_default_generators_and_remembered_states() -> None:
    name = _register(3)
    acc.set_current_accelerator(name)
    b = backends.get_backend(name)
    acc.random.manual_seed_all(77)
    assert not any(_generator._is_started(b, i) for i in range(3))
    assert all(int.from_bytes(s[:8].tobytes(), "little") == 77
               for s in acc.random.get_rng_state_all())
    state = acc.random.Generator(f"{name}:0").manual_seed(5).get_state()
    acc.random.set_rng_state(state, f"{name}:2")       # remembered until device 2 starts
    assert not _generator._is_started(b, 2)
    x2 = acc.rand(6, device=f"{name}:2").numpy()
    assert _generator._is_started(b, 2)
    ref = acc.rand(6, device="cpu:0", generator=acc.random.Generator("cpu:0").manual_seed(5))
    assert x2.tobytes() == ref.numpy().tobytes()
    x1 = acc.rand(6, device=f"{name}:1").numpy()       # from manual_seed_all(77)
    ref77 = acc.rand(6, device="cpu:0", generator=acc.random.Generator("cpu:0").manual_seed(77))
    assert x1.tobytes() == ref77.numpy().tobytes()
    # the started generator now follows set_rng_state
    acc.random.set_rng_state(state, f"{name}:2")
    assert acc.rand(6, device=f"{name}:2").numpy().tobytes() == x2.tobytes()
    assert acc.random.default_generator(f"{name}:2") is acc.random.default_generator(
        f"{name}:2")
    # current-device functions
    with acc.device_index(1):
        acc.random.manual_seed(9)
        assert acc.random.initial_seed() == 9
        assert acc.random.seed() == acc.random.initial_seed()
    assert acc.random.initial_seed() == 77
    s = acc.random.seed_all()
    assert [int.from_bytes(st[:8].tobytes(), "little") for st in
            acc.random.get_rng_state_all()] == [s] * 3
    states = acc.random.get_rng_state_all()
    acc.random.set_rng_state_all([state] * 3)
    assert acc.random.initial_seed() == 5
    with pytest.raises(IndexError, match="only 3"):
        acc.random.set_rng_state_all(states + states)


# ---------------------------------------------------------------------- factories

def test_rand_arguments() -> None:
    assert acc.rand(2, 3, device="cpu:0").shape == (2, 3)
    assert acc.rand((2, 3), device="cpu:0").shape == (2, 3)
    assert acc.rand(size=[4], device="cpu:0").shape == (4,)
    assert acc.rand(0, device="cpu:0").shape == (0,)
    g = acc.random.Generator("cpu:0")
    assert acc.randn(2, generator=g).device == acc.device("cpu:0")
    with pytest.raises(TypeError, match="missing the size"):
        acc.rand(device="cpu:0")
    with pytest.raises(ValueError, match="negative"):
        acc.rand(-1, device="cpu:0")
    with pytest.raises(TypeError, match="dtype must be one of"):
        acc.rand(3, dtype="int32", device="cpu:0")
    with pytest.raises(TypeError, match="size entries must be ints"):
        acc.randn(2.5, device="cpu:0")
    with pytest.raises(TypeError, match="size entries"):
        acc.randn((2, 2.5), device="cpu:0")
    with pytest.raises(TypeError, match="Generator"):
        acc.rand(3, device="cpu:0", generator=object())
    with pytest.raises(TypeError, match="unexpected keyword"):
        acc.rand(3, device="cpu:0", shape=3)
    name = _register(2)
    # (s41: a generator of another device of the backend draws there, as torch's
    # check_generator compares device types only: test_review_rng_s41.py)
    with pytest.raises(ValueError, match="belongs to"):
        acc.rand(3, device="cpu:0", generator=acc.random.Generator(f"{name}:0"))


def test_zero_size_consumes_nothing() -> None:
    g = acc.random.Generator("cpu:0")
    acc.randn(0, 3, device="cpu:0", generator=g)
    assert g.get_offset() == 0


def test_uniform_and_normal_inplace() -> None:
    g = acc.random.Generator("cpu:0").manual_seed(3)
    x = acc.empty(200_000, dtype="float64", device="cpu:0")
    v = acc.random.uniform_(x, -2.0, 6.0, generator=g).numpy()
    assert v.min() >= -2.0 and v.max() < 6.0
    assert abs(v.mean() - 2.0) < 0.05 and abs(v.var() - 64 / 12) < 0.1
    v = acc.random.normal_(x, 1.5, 2.0, generator=g).numpy()
    assert abs(v.mean() - 1.5) < 0.03 and abs(v.std() - 2.0) < 0.03
    y = acc.rand(100_000, dtype="float16", device="cpu:0", generator=g).numpy()
    assert y.dtype == np.float16 and y.min() >= 0 and y.max() < 1
    z = acc.randn(100_000, device="cpu:0", generator=g).numpy()
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02 and np.isfinite(z).all()
    x = acc.empty(5, dtype="float32", device="cpu:0")
    assert acc.random.uniform_(x, 1.0, 1.0).tolist() == [1.0] * 5
    with pytest.raises(TypeError, match="floating array"):
        acc.random.uniform_(acc.empty(3, dtype="int32", device="cpu:0"))
    with pytest.raises(TypeError, match="accelrt.Array"):
        acc.random.normal_(np.zeros(3))
    with pytest.raises(ValueError, match="a=2.0 > b=1.0"):
        acc.random.uniform_(acc.empty(3, device="cpu:0"), 2, 1)
    with pytest.raises(ValueError, match="finite"):
        acc.random.uniform_(acc.empty(3, device="cpu:0"), 0, math.inf)
    with pytest.raises(ValueError, match="b - a"):
        acc.random.uniform_(acc.empty(3, dtype="float16", device="cpu:0"), -60000, 60000)
    with pytest.raises(ValueError, match="std >= 0.0"):
        acc.random.normal_(acc.empty(3, device="cpu:0"), 0, -1)
    with pytest.raises(TypeError, match="real number"):
        acc.random.normal_(acc.empty(3, device="cpu:0"), "0")


def test_randint_ranges_and_balance() -> None:
    g = acc.random.Generator("cpu:0").manual_seed(12)
    x = acc.randint(0, 6, (60_000,), device="cpu:0", generator=g).numpy()
    counts = np.bincount(x, minlength=6)
    assert counts.sum() == 60_000 and len(counts) == 6
    chi2 = float(((counts - 10_000) ** 2 / 10_000).sum())
    assert chi2 < 30                                 # 5 dof: p < 1e-5 to fail by chance
    y = acc.randint(10, (1000,), dtype="uint8", device="cpu:0", generator=g).numpy()
    assert y.dtype == np.uint8 and y.min() == 0 and y.max() == 9
    big = acc.randint(-(1 << 63), 1 << 63, (1000,), device="cpu:0", generator=g).numpy()
    assert (big < 0).any() and (big > 0).any()
    top = acc.randint(0, 1 << 64, (1000,), dtype="uint64", device="cpu:0", generator=g).numpy()
    assert (top >= 1 << 63).any() and (top < 1 << 63).any()
    wide = acc.randint(-(1 << 40), 1 << 40, (20_000,), device="cpu:0", generator=g).numpy()
    assert wide.min() >= -(1 << 40) and wide.max() < 1 << 40
    assert abs(wide.mean()) < (1 << 40) * 0.03
    b = acc.randint(2, (1000,), dtype="bool", device="cpu:0", generator=g).numpy()
    assert b.dtype == np.bool_ and b.any() and not b.all()
    f = acc.randint(-3, 3, (1000,), dtype="float32", device="cpu:0", generator=g).numpy()
    assert set(f.tolist()) == {-3.0, -2.0, -1.0, 0.0, 1.0, 2.0}
    kw = acc.randint(low=5, high=6, size=(3,), device="cpu:0").numpy()
    assert kw.tolist() == [5, 5, 5]
    assert acc.randint(4, 5, size=(2,), device="cpu:0").tolist() == [4, 4]


@pytest.mark.parametrize("args,kw,exc,msg", [
    ((5, 5, (3,)), {}, ValueError, "less than"),
    ((0, 300, (3,)), {"dtype": "uint8"}, ValueError, "do not fit"),
    ((-1, 3, (3,)), {"dtype": "uint32"}, ValueError, "do not fit"),
    ((0, 3, (3,)), {"dtype": "complex64"}, TypeError, "dtype"),
    ((0, 3.5, (3,)), {}, TypeError, "high must be an int"),
    ((10,), {}, TypeError, "size"),
    ((1, 2, 3, 4), {}, TypeError, "at most 3"),
])
def test_randint_bad_arguments(args, kw, exc, msg) -> None:
    with pytest.raises(exc, match=msg):
        acc.randint(*args, device="cpu:0", **kw)


# ---------------------------------------------------------------------- the CUDA kernel source

_SHIM = r"""
#include <math.h>
#include <string.h>
#define __global__
#define __device__
#define __forceinline__ inline
struct accelrt_dim3 { unsigned long long x; };
static accelrt_dim3 blockIdx = {0}, threadIdx = {0}, blockDim = {1}, gridDim = {1};
static inline unsigned int __umulhi(unsigned int a, unsigned int b) {
    return (unsigned int)(((unsigned long long)a * b) >> 32); }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64); }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dsqrt_rn(double a) { return sqrt(a); }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __double2float_rn(double a) { return (float)a; }
static inline float __ll2float_rn(long long a) { return (float)a; }
static inline float __ull2float_rn(unsigned long long a) { return (float)a; }
static inline double __ll2double_rn(long long a) { return (double)a; }
static inline double __ull2double_rn(unsigned long long a) { return (double)a; }
static inline long long __double_as_longlong(double d) { long long r; memcpy(&r, &d, 8); return r; }
"""


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory):  # type: ignore[no-untyped-def]
    """kernels/philox.cu compiled for the host (CUDA intrinsics mapped to IEEE C operations,
    no FMA contraction), one thread running the whole grid-stride loop."""
    import ctypes
    import shutil
    import subprocess
    from pathlib import Path

    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None or not hasattr(ctypes, "CDLL"):
        pytest.skip("no host C++ compiler to build kernels/philox.cu for the host")
    src = Path(_philox.__file__).resolve().parents[1] / "kernels" / "philox.cu"
    d = tmp_path_factory.mktemp("philox")
    (d / "shim.h").write_text(_SHIM)
    lib = d / "philox_host.so"
    subprocess.run([cxx, "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-Wno-unknown-pragmas",
                    "-include", str(d / "shim.h"), "-x", "c++", str(src), "-o", str(lib)],
                   check=True, capture_output=True, timeout=60)
    return ctypes.CDLL(str(lib))


def _host_run(lib, dist: str, dtype: str, n: int, seed: int, offset: int, params) -> np.ndarray:  # type: ignore[no-untyped-def]
    import ctypes
    u64, dbl, i32 = ctypes.c_ulonglong, ctypes.c_double, ctypes.c_int
    dt = np.dtype(dtype)
    out = np.empty(n, dt)
    ptr = ctypes.c_void_p(out.ctypes.data)
    suffix = {"float16": "f16", "float32": "f32", "float64": "f64"}.get(dtype)
    if dist == "uniform":
        a, b = params
        getattr(lib, f"accelrt_philox_uniform_{suffix}")(
            ptr, u64(n), u64(seed), u64(offset), dbl(a), dbl(b - a), dbl(b),
            i32((a, b) == (0.0, 1.0)))
    elif dist == "normal":
        m, s = params
        getattr(lib, f"accelrt_philox_normal_{suffix}")(
            ptr, u64(n), u64(seed), u64(offset), dbl(m), dbl(s), i32((m, s) == (0.0, 1.0)))
    else:
        low, rng = params
        kind = {"i": 0, "u": 0, "b": 1}[dt.kind] if dt.kind != "f" else {2: 2, 4: 3, 8: 4}[
            dt.itemsize]
        lib.accelrt_philox_randint(ptr, u64(n), u64(seed), u64(offset), ctypes.c_longlong(low),
                                   u64(rng & (2 ** 64 - 1)), ctypes.c_uint(rng >> 64),
                                   i32(kind), i32(dt.itemsize),
                                   i32(dt.kind == "i" or low < 0))
    return out


@pytest.mark.parametrize("dist,dtype,params", [
    ("uniform", "float32", (0.0, 1.0)), ("uniform", "float32", (-3.0, 5.5)),
    ("uniform", "float16", (0.0, 1.0)), ("uniform", "float16", (-100.0, 100.0)),
    ("uniform", "float64", (0.0, 1.0)), ("uniform", "float64", (1.0, 1.0000001)),
    ("randint", "int64", (-5, 12)), ("randint", "int64", (-(1 << 63), 1 << 64)),
    ("randint", "uint64", (0, 1 << 64)), ("randint", "int8", (-128, 256)),
    ("randint", "uint16", (3, 1 << 40)), ("randint", "bool", (0, 2)),
    ("randint", "float32", (-1000, 2000)), ("randint", "float16", (0, 2048)),
    ("normal", "float32", (0.0, 1.0)), ("normal", "float16", (2.0, 3.0))])
def test_cuda_kernel_source_matches_numpy_bit_for_bit(host_kernels, dist, dtype, params) -> None:
    for n, seed, offset in ((1, 5, 0), (7, (1 << 64) - 5, (1 << 64) - 3), (1001, 123, 1 << 33)):
        ref = np.empty(n, dtype)
        _philox.fill(ref, dist, seed, offset, params)
        got = _host_run(host_kernels, dist, dtype, n, seed, offset, params)
        assert got.tobytes() == ref.tobytes()


def test_cuda_kernel_source_float64_normals_within_ulps(host_kernels) -> None:
    n = 20001
    ref = np.empty(n, "float64")
    _philox.fill(ref, "normal", 77, 5, (2.0, 3.0))
    got = _host_run(host_kernels, "normal", "float64", n, 77, 5, (2.0, 3.0))
    np.testing.assert_allclose(got, ref, rtol=4 * 2.0 ** -52, atol=4 * 2.0 ** -52)


def test_set_state_refuses_what_torchs_bytetensor_only_set_state_refuses() -> None:
    # torch 2.14.1 (observed): Generator.set_state and torch.set_rng_state raise
    # TypeError("expected a torch.ByteTensor, but got bytes") (bytearray, list alike),
    # TypeError("RNG state must be a torch.ByteTensor") for a float tensor, and RuntimeError
    # for a wrong-size uint8 tensor (CUDA's "RNG state is wrong size"); torch.cuda.set_rng_state
    # raises AttributeError("'bytes' object has no attribute 'clone'").
    g = acc.random.Generator("cpu:0").manual_seed(3)
    good = g.get_state()
    for bad, name in ((bytes(good), "bytes"), (bytearray(good), "bytearray"),
                      (list(good), "list")):
        hint = "; for [a-z]+, pass numpy.frombuffer" if name != "list" else ""
        msg = f"^RNG state must be a numpy uint8 array \\(from get_state\\(\\)\\), got {name}{hint}"
        for f in (g.set_state, acc.random.set_rng_state, acc.cpu.set_rng_state,
                  lambda s: acc.random.set_rng_state_all([s])):
            with pytest.raises(TypeError, match=msg) as info:
                f(bad)
            assert f"expected a torch.ByteTensor, but got {name}" in str(info.value)
    with pytest.raises(TypeError, match="dtype uint8"):
        g.set_state(good.astype(np.float32))
    with pytest.raises(ValueError, match="16 bytes") as short:
        g.set_state(good[:3])
    assert isinstance(short.value, RuntimeError)
    # what accelrt documents stays accepted: a uint8 array, or an Array holding one
    g.set_state(np.frombuffer(bytes(good), np.uint8)).set_state(acc.asarray(good, device="cpu:0"))
    assert g.initial_seed() == 3


def test_states_of_any_shape_and_seed_only_states_are_taken_as_torchs_cuda_generators() -> None:
    # torch 2.14.1 (observed): a contiguous 2-D ByteTensor state is taken (its bytes in
    # order); its CUDA
    # generators' set_state (CUDAGeneratorImpl::set_state) takes an 8-byte state as the seed
    # alone, with offset 0 (read in the source: total_size - offset_size)
    g = acc.random.Generator("cpu:0").manual_seed(5)
    acc.rand(10, device="cpu:0", generator=g)
    state = g.get_state()
    h = acc.random.Generator("cpu:0").set_state(state.reshape(2, 8))
    assert (h.initial_seed(), h.get_offset()) == (5, 3)
    h.set_state(state[:8])
    assert (h.initial_seed(), h.get_offset()) == (5, 0)
    acc.random.set_rng_state(state.reshape(4, 4), "cpu:0")
    assert acc.random.get_rng_state("cpu:0").tobytes() == state.tobytes()
    # a non-contiguous state: test_non_contiguous_states_are_refused_as_torchs
    with pytest.raises(ValueError, match="or 8 \\(a seed alone\\), got 12") as info:
        h.set_state(state[:12])
    assert isinstance(info.value, RuntimeError)


def test_non_contiguous_states_are_refused_as_torchs() -> None:
    # torch 2.15.0 (observed, /tmp/t215): Generator().set_state(t[::2]) and
    # torch.set_rng_state(t[::2]) raise RuntimeError("RNG state must be contiguous"); its CUDA
    # generators' set_state calls the same at::detail::check_rng_state (read in
    # CUDAGeneratorImpl.cpp), which checks the dtype first, then contiguity, then the size
    g = acc.random.Generator("cpu:0").manual_seed(5)
    state = g.get_state()
    acc.rand(3, device="cpu:0", generator=g)
    before = g.get_state().tobytes()
    saved = acc.random.get_rng_state("cpu:0")
    views = [np.repeat(state, 2)[::2],                        # strided 1-D
             np.ascontiguousarray(state.reshape(8, 2).T).T,   # Fortran order, 2-D
             np.repeat(state, 2)[::2][:8],                    # a seed alone, strided
             np.repeat(state, 2)[::2][:12]]                   # wrong size too: contiguity first
    for view in views:
        assert not view.flags.c_contiguous
        for f in (g.set_state, acc.random.set_rng_state, acc.cpu.set_rng_state, acc.set_rng_state,
                  lambda s: acc.random.set_rng_state_all([s])):
            with pytest.raises(ValueError, match="^RNG state must be contiguous") as info:
                f(view)
            assert isinstance(info.value, RuntimeError)   # torch's class
            assert "numpy.ascontiguousarray" in str(info.value)
    assert g.get_state().tobytes() == before
    assert acc.random.get_rng_state("cpu:0").tobytes() == saved.tobytes()
    with pytest.raises(TypeError, match="dtype uint8"):       # the dtype is checked first
        g.set_state(np.repeat(state.astype(np.int16), 2)[::2])
    # contiguous copies, and what numpy counts as contiguous (size-1 axes), are taken
    g.set_state(np.ascontiguousarray(views[0])).set_state(state.reshape(16, 1)[:, :1])
    assert (g.initial_seed(), g.get_offset()) == (5, 0)
