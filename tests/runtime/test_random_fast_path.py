"""The factories' per-call fast path (``_new``/``_fill``, ``_philox.fill_at``) gives the same
bits, the same counter advance and the same placement rules as before it existed.

The hashes below were recorded with the code before the fast path (issue 13): a request
sequence on one generator that crosses the small-request path, the chunk pipeline and the
threaded path. Uniform numbers and integers are exact integer arithmetic, so their bytes are
pinned; normals use the platform's ``log``/``sin``/``cos`` and are compared with the
reference fill instead.
"""

from __future__ import annotations

import hashlib
import uuid

import numpy as np
import pytest

import accelrt as acc
from accelrt import backends
from accelrt.backends.cpu import CpuBackend
from accelrt.random import _philox

D = "cpu:0"
M64 = (1 << 64) - 1

# name, factory, pinned sha256 prefix (None: a normal, checked against the reference)
SEQUENCE = [
    ("rand 1000 f32", lambda g: acc.rand(1000, device=D, generator=g), "b7970d2031e0c72e"),
    ("rand 1000 f64", lambda g: acc.rand(1000, dtype="float64", device=D, generator=g),
     "e23646550c090a7e"),
    ("rand 7 f16", lambda g: acc.rand(7, dtype="float16", device=D, generator=g),
     "f1149392ca384ea0"),
    ("rand 3x5", lambda g: acc.rand(3, 5, device=D, generator=g), "28bf9b14e524171c"),
    ("randn 1001", lambda g: acc.randn(1001, device=D, generator=g), None),
    ("randint", lambda g: acc.randint(-5, 1000, (999,), device=D, generator=g),
     "08bde385aecbeb53"),
    ("uniform_ -2 3", lambda g: acc.random.uniform_(acc.empty(513, device=D), -2, 3,
                                                     generator=g), "5c87a689c9e259c0"),
    ("normal_ f64", lambda g: acc.random.normal_(acc.empty(77, dtype="float64", device=D), 1.5, 2.0,
                                                 generator=g), None),
    ("rand 300000", lambda g: acc.rand(300_000, device=D, generator=g), "559bb48b57a335b5"),
    ("randn 70001 f64", lambda g: acc.randn(70_001, dtype="float64", device=D, generator=g),
     None),
    ("randint big", lambda g: acc.randint(0, 1 << 40, (100,), device=D, generator=g),
     "2b2766e31fa2112b"),
    ("rand 1 f32", lambda g: acc.rand(1, device=D, generator=g), "ad09076717752bb0"),
]
FINAL_OFFSET = 112027
NORMAL_PARAMS = {"randn 1001": (0.0, 1.0), "normal_ f64": (1.5, 2.0),
                 "randn 70001 f64": (0.0, 1.0)}


def test_outputs_are_the_recorded_bits() -> None:
    g = acc.random.Generator(D).manual_seed(2024)
    for name, make, digest in SEQUENCE:
        before = g.get_offset()
        out = make(g).numpy()
        if digest is not None:
            assert hashlib.sha256(out.tobytes()).hexdigest()[:16] == digest, name
        else:
            ref = np.empty(out.shape, out.dtype)
            _philox.fill(ref, "normal", 2024, before, NORMAL_PARAMS[name])
            assert out.tobytes() == ref.tobytes(), name
    assert g.get_offset() == FINAL_OFFSET


def test_first_values_pinned() -> None:
    g = acc.random.Generator(D).manual_seed(0)
    assert acc.rand(4, device=D, generator=g).tolist() == [
        float(np.float32(x)) for x in _reference_words_f32(0, 0, 4)]


def _reference_words_f32(seed: int, offset: int, n: int) -> list[float]:
    """Standard uniform float32 from the scalar Philox reference (words >> 8) * 2**-24."""
    words = _philox.philox4x32_10(
        np.array([[(offset + j) & 0xFFFFFFFF, (offset + j) >> 32, 0, 0]
                  for j in range(-(-n // 4))], np.uint32), (seed & 0xFFFFFFFF, seed >> 32))
    return [int(w >> 8) * 2.0 ** -24 for w in words.reshape(-1)[:n]]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("params", [(0.0, 1.0), (-2.0, 3.0)])
@pytest.mark.parametrize("offset", [0, 3, (1 << 32) - 2, M64 - 1, M64 - 3000])
def test_fill_at_matches_fill(dtype, params, offset) -> None:
    _philox._tls.__dict__.pop("run", None)
    for n in (1, 5, 1000, 8191, 40_000):
        a, b = np.empty(n, dtype), np.empty(n, dtype)
        _philox.fill_at(a.ctypes.data, n, a.dtype, "uniform", 99, offset, params)
        used = _philox.fill(b, "uniform", 99, offset, params)
        assert a.tobytes() == b.tobytes(), (n, offset)
        offset = (offset + used) & M64


def test_fill_at_other_distributions_and_empty() -> None:
    for dist, dtype, params in (("normal", "float32", (0.0, 1.0)),
                                ("randint", "int32", (-7, 100))):
        a, b = np.empty(333, dtype), np.empty(333, dtype)
        _philox.fill_at(a.ctypes.data, 333, a.dtype, dist, 5, 17, params)
        _philox.fill(b, dist, 5, 17, params)
        assert a.tobytes() == b.tobytes()
    _philox.fill_at(0, 0, np.dtype("float32"), "uniform", 5, 0, (0.0, 1.0))  # touches nothing


def test_device_strings_follow_a_re_registered_backend() -> None:
    name = "rngfast" + uuid.uuid4().hex[:8]
    backends.register(name, lambda: CpuBackend(num_devices=1, name=name), replace=True)
    first = acc.rand(3, device=f"{name}:0")
    backends.register(name, lambda: CpuBackend(num_devices=1, name=name), replace=True)
    second = acc.rand(3, device=f"{name}:0")
    assert second._b is backends.get_backend(name) and second._b is not first._b
    g = acc.random.Generator(f"{name}:0").manual_seed(1)
    assert acc.rand(2, generator=g).device == acc.device(f"{name}:0")   # the generator's device
    with pytest.raises(ValueError, match="belongs to"):
        acc.rand(2, device="cpu:0", generator=g)


def test_factories_check_before_consuming_counters() -> None:
    g = acc.random.Generator(D).manual_seed(3)
    with pytest.raises(TypeError, match="dtype must be one of"):
        acc.rand(3, dtype="int32", device=D, generator=g)
    with pytest.raises(IndexError):
        acc.rand(3, device="cpu:99", generator=g)
    with pytest.raises(TypeError, match="Generator"):
        acc.randn(3, device=D, generator="g")     # type: ignore[arg-type]
    assert g.get_offset() == 0
    a = acc.rand(10, device=D, generator=g)       # the counters are still there
    assert g.get_offset() == 3 and a.shape == (10,)


def test_borrowed_memory_is_filled_and_kept() -> None:
    host = np.zeros(1000, np.float32)
    x = acc.asarray(host, device=D)
    g = acc.random.Generator(D).manual_seed(12)
    acc.random.uniform_(x, generator=g)
    acc.synchronize(D)
    ref = np.empty(1000, np.float32)
    _philox.fill(ref, "uniform", 12, 0, (0.0, 1.0))
    assert x.numpy().tobytes() == ref.tobytes()


def test_factory_arrays_are_made_like_empty() -> None:
    """``_new`` makes the array as ``Array.__init__`` does: same owner type, same allocator,
    same accounting, freed when dropped."""
    from accelrt import memory

    start = memory.memory_allocated(D)
    e = acc.empty((3, 5), dtype="float64", device=D)
    before = memory.memory_allocated(D)
    r = acc.rand(3, 5, dtype="float64", device=D)
    assert memory.memory_allocated(D) - before == before - start > 0
    assert type(r) is type(e) and type(r._mem) is type(e._mem)
    assert r._mem.alloc is e._mem.alloc and r._b is e._b and r._index == e._index
    assert (r.shape, r.dtype, r.nbytes, r.device) == (e.shape, e.dtype, e.nbytes, e.device)
    del r
    assert memory.memory_allocated(D) == before
    with pytest.raises(ValueError):
        acc.rand(2, device="nonsense:x:y")
    with pytest.raises(TypeError, match="dtype"):
        acc.randint(0, 3, (2,), dtype="complex64", device=D)


def test_device_strings_without_an_index_follow_the_current_device() -> None:
    from accelrt import _device

    name = "rngidx" + uuid.uuid4().hex[:8]
    backends.register(name, lambda: CpuBackend(num_devices=2, name=name), replace=True)
    assert acc.rand(2, device=name).device == acc.device(f"{name}:0")
    assert acc.rand(2, device=f"{name}:1").device == acc.device(f"{name}:1")
    _device._tls.device[name] = 1       # this thread's current device of that backend
    try:
        assert acc.rand(2, device=name).device == acc.device(f"{name}:1")
        assert acc.rand(2, device=f"{name}:0").device == acc.device(f"{name}:0")
    finally:
        _device._tls.device.pop(name, None)
    assert acc.rand(2, device=name).device == acc.device(f"{name}:0")


def test_a_bad_device_string_raises_every_time() -> None:
    for _ in range(2):
        with pytest.raises(IndexError):
            acc.rand(2, device="cpu:99")
        with pytest.raises(ValueError):
            acc.rand(2, device="cpu:x")
        assert acc.rand(2, device=D).device == acc.device(D)


def test_each_thread_initialises_the_device_it_draws_on() -> None:
    import threading

    inits: list[tuple[int, int]] = []

    class Recording(CpuBackend):
        def init_device(self, index: int) -> None:
            inits.append((threading.get_ident(), index))
            super().init_device(index)

    name = "rnginit" + uuid.uuid4().hex[:8]
    backends.register(name, lambda: Recording(num_devices=1, name=name), replace=True)
    acc.rand(2, device=f"{name}:0")
    acc.rand(2, device=f"{name}:0")
    t = threading.Thread(target=lambda: acc.rand(2, device=f"{name}:0"))
    t.start()
    t.join()
    assert len(inits) == 2 and inits[0][0] != inits[1][0]


def test_factories_follow_the_current_stream() -> None:
    from accelrt import memory

    s = acc.Stream(D)
    g = acc.random.Generator(D).manual_seed(4)
    with s:                                   # the thread's current stream of cpu:0
        x = acc.rand(1000, device=D, generator=g)
    y = acc.rand(1000, device=D, generator=g)
    stream_of = {}
    for seg in memory.memory_snapshot():
        for p in (x._mem.ptr, y._mem.ptr):
            if seg["address"] <= p < seg["address"] + seg["total_size"]:
                stream_of[p] = seg["stream"]
    assert stream_of == {x._mem.ptr: s.stream_id, y._mem.ptr: 0}
    ref = np.empty(2000, np.float32)
    _philox.fill(ref, "uniform", 4, 0, (0.0, 1.0))
    assert np.concatenate([x.numpy(), y.numpy()]).tobytes() == ref.tobytes()


def _state(seed: int, offset: int) -> np.ndarray:
    return np.frombuffer(seed.to_bytes(8, "little") + offset.to_bytes(8, "little"), np.uint8)


def _ref(n: int, dtype: str, seed: int, offset: int) -> bytes:
    out = np.empty(n, dtype)
    _philox.fill(out, "uniform", seed, offset, (0.0, 1.0))
    return out.tobytes()


def test_small_standard_uniform_requests_copy_from_the_run(monkeypatch) -> None:
    """rand's small float32/float64 requests queue one copy from the thread's run (no
    fill_at, no numpy view); every other request (float16, bounds, normals, large) does not."""
    g = acc.random.Generator(D).manual_seed(21)
    expect = {"float32": _ref(1000, "float32", 21, 0), "float64": _ref(1000, "float64", 21, 250)}

    def refuse(*args: object) -> None:
        raise AssertionError("the small standard uniform path must not call fill_at")

    monkeypatch.setattr(_philox, "fill_at", refuse)
    for dtype, ref in expect.items():
        assert acc.rand(1000, dtype=dtype, device=D, generator=g).numpy().tobytes() == ref
    assert g.get_offset() == 750
    monkeypatch.undo()
    monkeypatch.setattr(_philox, "_copy_uniform", refuse)
    for make in (lambda: acc.rand(10, dtype="float16", device=D, generator=g),
                 lambda: acc.randn(10, device=D, generator=g),
                 lambda: acc.random.uniform_(acc.empty(10, device=D), generator=g),
                 lambda: acc.rand(8193, device=D, generator=g)):
        make()


@pytest.mark.parametrize("offset", [M64 - 100, (1 << 64) - 250, (1 << 32) - 7])
def test_small_requests_near_the_end_of_the_counter(offset) -> None:
    """A request whose blocks would pass 2**64 wraps as the reference fill does (it leaves
    the copy path); one that ends exactly at 2**64 stays on it."""
    g = acc.random.Generator(D)
    g.set_state(_state(9, offset))
    out = acc.rand(1000, device=D, generator=g).numpy()
    assert out.tobytes() == _ref(1000, "float32", 9, offset)
    assert g.get_offset() == (offset + 250) & M64


def test_default_generators_follow_a_re_registered_backend() -> None:
    name = "rngdef" + uuid.uuid4().hex[:8]
    backends.register(name, lambda: CpuBackend(num_devices=1, name=name), replace=True)
    acc.random.set_rng_state(_state(5, 0), f"{name}:0")
    assert acc.rand(8, device=f"{name}:0").numpy().tobytes() == _ref(8, "float32", 5, 0)
    backends.register(name, lambda: CpuBackend(num_devices=1, name=name), replace=True)
    acc.random.set_rng_state(_state(6, 0), f"{name}:0")     # the new instance's generator
    assert acc.rand(8, device=f"{name}:0").numpy().tobytes() == _ref(8, "float32", 6, 0)
    assert acc.random.get_rng_state(f"{name}:0").tobytes() == _state(6, 2).tobytes()


def test_a_generator_of_a_replaced_backend_is_refused_without_a_device() -> None:
    name = "rnggen" + uuid.uuid4().hex[:8]
    backends.register(name, lambda: CpuBackend(num_devices=1, name=name), replace=True)
    g = acc.random.Generator(f"{name}:0").manual_seed(1)
    assert acc.rand(3, generator=g).device == acc.device(f"{name}:0")
    backends.register(name, lambda: CpuBackend(num_devices=1, name=name), replace=True)
    with pytest.raises(ValueError, match="belongs to"):
        acc.rand(3, generator=g)
    assert g.get_offset() == 1


def test_no_device_means_this_threads_current_device_and_its_default_generator() -> None:
    import threading

    name = "rngcur" + uuid.uuid4().hex[:8]
    backends.register(name, lambda: CpuBackend(num_devices=2, name=name), replace=True)
    prev = acc.current_accelerator()
    acc.set_current_accelerator(name)
    try:
        acc.random.set_rng_state(_state(11, 0), f"{name}:0")
        acc.random.set_rng_state(_state(12, 0), f"{name}:1")
        assert acc.rand(4).numpy().tobytes() == _ref(4, "float32", 11, 0)
        acc.set_device_index(1)
        x = acc.rand(4)
        assert x.device == acc.device(f"{name}:1")
        assert x.numpy().tobytes() == _ref(4, "float32", 12, 0)
        seen = []
        t = threading.Thread(target=lambda: seen.append(acc.rand(4)))   # starts on device 0
        t.start()
        t.join()
        assert seen[0].device == acc.device(f"{name}:0")
        assert seen[0].numpy().tobytes() == _ref(4, "float32", 11, 1)
    finally:
        acc.set_device_index(0)
        acc.set_current_accelerator(prev.type if prev is not None else "cpu")
