"""PyTorch's own generator and RNG-state tests (``test/test_torch.py``, ``test/test_cuda.py``,
``torch/random.py``'s ``fork_rng``), ported to accelrt and checked against torch 2.15's semantics.

Each test names the PyTorch test it mirrors. ``torch.cuda`` is a device module here (a
two-device cpu backend and a two-device :class:`~accelrt.testing.SimulatedBackend`, each made
the current accelerator, so ``torch.accelerator``/``torch.manual_seed`` map to ``accelrt``);
``torch.Generator(device)`` is :class:`accelrt.random.Generator`. Values are compared by their
semantics (round trips, seeds, offsets, error classes and messages), not by PyTorch's bits:
accelrt's Philox stream is its own (docs/random.md). Every test puts the default generators of
its backends back (:func:`_saved_states`).
"""

from __future__ import annotations

import copy
import gc
import io
import pickle
from collections.abc import Iterator
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt.backends.cpu import CpuBackend
from accelrt.random import Generator
from accelrt.testing import SimulatedBackend

CPU, SIM = "s35rngcpu", "s35rngsim"

_backends = module_backends({
    CPU: lambda: CpuBackend(num_devices=2, async_streams=False, name=CPU, shared_memory=True),
    SIM: lambda: SimulatedBackend(device_count=2, name=SIM),
})

MAX_I64 = (1 << 63) - 1
MAX_U64 = (1 << 64) - 1


@pytest.fixture(params=[CPU, SIM])
def m(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The device module of each backend, made the current accelerator with device 0
    current; the default generators' states are put back afterwards (conftest restores the
    accelerator, devices and streams)."""
    name: str = request.param
    mod: Any = acc.backends.device_module(name)
    acc.set_current_accelerator(name)
    mod.set_device(0)
    saved = mod.get_rng_state_all()
    yield mod
    for i in range(mod.device_count()):
        mod.synchronize(i)
    mod.set_rng_state_all(saved)


def _host(a: Any) -> np.ndarray:
    return np.asarray(a.numpy()).copy()


# ---------------------------------------------------------------------- test_torch.py

def test_rng_state_is_a_snapshot_and_restores(m: Any) -> None:
    """mirrors test_torch.py test_RNGState: the state returned is a copy (drawing does not
    change it), and setting it back repeats the draws."""
    state = m.get_rng_state()
    kept = state.copy()
    before = _host(acc.rand(1000))
    assert np.array_equal(state, kept)
    m.set_rng_state(state)
    assert np.array_equal(_host(acc.rand(1000)), before)
    # torch.accelerator's spelling (acc.get_rng_state/acc.set_rng_state) reads the same state
    assert np.array_equal(acc.get_rng_state(), m.get_rng_state())
    acc.set_rng_state(state)
    assert np.array_equal(_host(acc.rand(1000)), before)


def test_generator_forks_the_default_stream(m: Any) -> None:
    """mirrors test_torch.py test_RNGStateAliasing: a new generator given the default
    generator's state draws what the default one would, whatever the default one does next."""
    gen = Generator(m.current_device())
    gen.set_state(m.get_rng_state())
    assert np.array_equal(gen.get_state(), m.get_rng_state())
    target = _host(acc.rand(1000))
    _ = acc.rand(100_000)                 # move the default generator far away
    forked = _host(acc.rand(1000, generator=gen))
    assert np.array_equal(target, forked)


def test_pickling_an_array_draws_nothing(m: Any) -> None:
    """mirrors test_torch.py test_RNG_after_pickle: pickling an array (with the
    multiprocessing pickler too, which accelrt.multiprocessing makes share the memory) leaves
    the default generator where it was. The simulated backend has no interprocess memory, so
    its share is refused (ValueError), also without drawing."""
    import accelrt.multiprocessing as amp   # registers the sharing reducers
    acc.manual_seed(100)
    before = _host(acc.rand(10))
    acc.manual_seed(100)
    arr = acc.zeros(3)
    pickle.loads(pickle.dumps(arr))
    if m.name == CPU:
        shared = pickle.loads(ForkingPickler.dumps(arr, pickle.HIGHEST_PROTOCOL))
        assert shared.tolist() == [0.0, 0.0, 0.0]
        del shared
    else:
        with pytest.raises(ValueError, match="cannot share"):
            ForkingPickler(io.BytesIO(), pickle.HIGHEST_PROTOCOL).dump(arr)
    del arr
    assert np.array_equal(_host(acc.rand(10)), before)
    gc.collect()
    amp.ipc_collect()       # the producer's entry, now released, goes back to the allocator


def test_normal_state_round_trip_with_an_odd_count(m: Any) -> None:
    """mirrors test_torch.py test_boxMullerState: with an odd number of normals per request
    (Box-Muller makes them in pairs) a saved state and a reseed repeat the numbers."""
    acc.manual_seed(123)
    seeded = _host(acc.randn(101))
    state = m.get_rng_state()
    midstream = _host(acc.randn(101))
    m.set_rng_state(state)
    assert np.array_equal(_host(acc.randn(101)), midstream)
    acc.manual_seed(123)
    assert np.array_equal(_host(acc.randn(101)), seeded)


_SEEDS = [(MAX_I64, MAX_I64), (MAX_I64 + 1, MAX_I64 + 1), (MAX_U64, MAX_U64), (0, 0),
          (-1, MAX_U64), (-(1 << 63), MAX_I64 + 1)]


def test_manual_seed_bounds_and_wrap(m: Any) -> None:
    """mirrors test_torch.py test_manual_seed: a seed repeats the draws and is initial_seed();
    seeds span [-2**63, 2**64), a negative one wraps to uint64, and one outside raises
    RuntimeError "Overflow when unpacking long" (checked on torch 2.15: ValueError there; accelrt's
    error is both). The same holds for the device module's, accelrt's and Generator's
    manual_seed."""
    acc.manual_seed(2)
    x = _host(acc.randn(100))
    assert acc.initial_seed() == 2 == m.initial_seed()
    acc.manual_seed(2)
    assert np.array_equal(_host(acc.randn(100)), x)
    gen = Generator(0)
    setters = [acc.manual_seed, m.manual_seed, acc.random.manual_seed, gen.manual_seed]
    readers = [acc.initial_seed, m.initial_seed, acc.random.initial_seed, gen.initial_seed]
    for set_seed, read in zip(setters, readers):
        for seed, expected in _SEEDS:
            set_seed(seed)
            assert read() == expected, (set_seed, seed)
        for bad in (-(1 << 63) - 1, MAX_U64 + 1):
            with pytest.raises(RuntimeError, match="Overflow when unpacking long"):
                set_seed(bad)
            with pytest.raises(ValueError, match="Overflow when unpacking long"):
                set_seed(bad)


def test_generator_api(m: Any) -> None:
    """mirrors test_torch.py test_generator_cpu: default generators are one object per device;
    equal seeds give equal initial seeds, seed() gives different ones; a state copied into a
    new generator repeats the draws, also the default generator's state for normal_."""
    assert m.default_generators[0] is m.default_generators[0]
    assert acc.random.default_generator() is m.default_generators[0]
    g1, g2 = Generator(), Generator()
    assert g1.device == g2.device == acc.device(m.name, 0)
    g1.manual_seed(12345)
    g2.manual_seed(12345)
    assert g1.initial_seed() == g2.initial_seed() == 12345
    s1, s2 = g1.seed(), g2.seed()
    assert s1 == g1.initial_seed() and s2 == g2.initial_seed()
    assert g1.initial_seed() != g2.initial_seed()

    g1 = Generator()
    g2_state = g2.get_state()
    g2_draw = _host(acc.randn(1, generator=g2))
    g1.set_state(g2_state)
    assert np.array_equal(_host(acc.randn(1, generator=g1)), g2_draw)

    default_state = m.default_generators[0].get_state()
    q = acc.empty(100)
    from_default = _host(acc.random.normal_(q))
    g2 = Generator().set_state(default_state)
    assert np.array_equal(_host(acc.random.normal_(q, generator=g2)), from_default)
    del q


def test_unknown_generator_device_raises_runtime_error() -> None:
    """mirrors test_torch.py test_invalid_generator_raises: torch.Generator('opengl') raises
    RuntimeError (torch 2.15: "OPENGL device type not an accelerator")."""
    with pytest.raises(RuntimeError, match="opengl"):
        Generator("opengl")


def test_pickle_and_copy_generator(m: Any) -> None:
    """mirrors test_torch.py test_pickle_generator: pickling a generator with an offset set and
    a draw made keeps its device, seed, offset and state; copy and deepcopy do too (torch 2.15's
    Generator supports both), each giving a new generator with a state of its own."""
    for index in range(m.device_count()):
        gen = Generator(index).manual_seed(12345).set_offset(100)
        _ = acc.randn(100, 100, device=gen.device, generator=gen)
        for again in (pickle.loads(pickle.dumps(gen)), copy.copy(gen), copy.deepcopy(gen)):
            assert again is not gen
            assert again.device == gen.device
            assert again.initial_seed() == gen.initial_seed() == 12345
            assert again.get_offset() == gen.get_offset() > 100
            assert np.array_equal(again.get_state(), gen.get_state())
            a = _host(acc.rand(5, device=gen.device, generator=again))
            assert again.get_offset() != gen.get_offset()
            gen_state = gen.get_state()
            assert np.array_equal(_host(acc.rand(5, device=gen.device, generator=gen)), a)
            gen.set_state(gen_state)


def test_generator_argument_checks(m: Any) -> None:
    """torch 2.15's Generator argument errors (observed on its CPU generator, same parser for
    CUDA): manual_seed/set_offset take only an int (RuntimeError "manual_seed expected a long,
    but got bool"); set_state takes only a uint8 state (TypeError); a wrong size raises
    RuntimeError, with the CUDA generator's words. The module-level manual_seed reads
    int(seed), as torch.cuda.manual_seed."""
    gen = Generator(0)
    for bad, name in ((True, "bool"), (1.5, "float"), ("3", "str")):
        with pytest.raises(RuntimeError, match=f"manual_seed expected a long, but got {name}"):
            gen.manual_seed(bad)
    with pytest.raises(RuntimeError, match="manual_offset expected a long, but got bool"):
        gen.set_offset(True)
    # torch 2.15's CUDA generator (libtorch_cuda's messages): "RNG state must be a
    # torch.ByteTensor" (TypeError), "RNG state is wrong size" (RuntimeError)
    with pytest.raises(TypeError, match="RNG state must be a torch.ByteTensor"):
        gen.set_state(np.zeros(16, dtype=np.float32))
    with pytest.raises(TypeError, match="bytes"):
        gen.set_state(bytes(16))
    with pytest.raises(TypeError, match="list"):
        gen.set_state([0] * 16)
    with pytest.raises(RuntimeError, match="RNG state is wrong size.*17"):
        gen.set_state(np.zeros(17, dtype=np.uint8))
    with pytest.raises(RuntimeError, match="RNG state is wrong size.*17"):
        m.set_rng_state(np.zeros(17, dtype=np.uint8))
    with pytest.raises(TypeError, match="RNG state must be a torch.ByteTensor"):
        m.set_rng_state(np.zeros(16))
    m.manual_seed(True)
    assert m.initial_seed() == 1
    m.manual_seed(2.9)
    assert m.initial_seed() == 2
    with pytest.raises(ValueError, match="invalid literal"):
        m.manual_seed("x")
    with pytest.raises(TypeError):
        m.manual_seed(None)


def test_clone_state_copies_and_graphsafe_get_state_shares(m: Any) -> None:
    """torch 2.15's Generator.clone_state and graphsafe_get_state outside a capture (the parts
    of test_cuda.py test_graphsafe_set_get_rng_state that need no graph): a clone moves on its
    own; a graph-safe state is the same state object, so drawing from either moves both."""
    gen = Generator(0).manual_seed(0)
    clone = gen.clone_state()
    shared = gen.graphsafe_get_state()
    assert clone is not gen and shared is not gen
    a = _host(acc.rand(5, generator=gen))
    assert shared.get_offset() == gen.get_offset() > 0 == clone.get_offset()
    assert np.array_equal(_host(acc.rand(5, generator=clone)), a)
    gen.graphsafe_set_state(clone)
    assert gen.get_offset() == clone.get_offset()
    gen.graphsafe_set_state(shared)
    assert np.array_equal(gen.get_state(), shared.get_state())


# ---------------------------------------------------------------------- test_cuda.py

def test_accelerator_manual_seed_seeds_the_device(m: Any) -> None:
    """mirrors test_cuda.py test_torch_manual_seed_seeds_cuda_devices (torch.manual_seed is
    acc.manual_seed, which seeds the current accelerator's current device)."""
    x = acc.zeros(4, 4)
    acc.manual_seed(2)
    assert m.initial_seed() == 2
    acc.random.uniform_(x)
    acc.manual_seed(2)
    y = acc.random.uniform_(acc.zeros(4, 4))
    assert np.array_equal(_host(x), _host(y))
    assert m.initial_seed() == 2
    del x, y


def test_device_module_manual_seed(m: Any) -> None:
    """mirrors test_cuda.py test_manual_seed: torch.cuda.manual_seed(2) repeats uniform_ and
    is initial_seed() (bernoulli is not in accelrt)."""
    x = acc.zeros(4, 4)
    m.manual_seed(2)
    assert m.initial_seed() == 2
    acc.random.uniform_(x)
    m.manual_seed(2)
    y = acc.random.uniform_(acc.zeros(4, 4))
    assert np.array_equal(_host(x), _host(y))
    assert m.initial_seed() == 2
    del x, y


def test_get_set_rng_state_all(m: Any) -> None:
    """mirrors test_cuda.py test_get_set_rng_state_all: the states of both devices, set back
    together, repeat each device's normals."""
    states = m.get_rng_state_all()
    assert len(states) == m.device_count() == 2
    before = [_host(acc.random.normal_(acc.empty(100, device=acc.device(n, i))))
              for i, n in ((0, _name(m)), (1, _name(m)))]
    m.set_rng_state_all(states)
    after = [_host(acc.random.normal_(acc.empty(100, device=acc.device(n, i))))
             for i, n in ((0, _name(m)), (1, _name(m)))]
    assert all(np.array_equal(b, a) for b, a in zip(before, after))


def _name(m: Any) -> str:
    return str(m.name)


def test_rng_state_offset(m: Any) -> None:
    """mirrors test_cuda.py test_rng_state_offset: torch.cuda._set_rng_state_offset(100) then
    _get_rng_state_offset() is 100 (torch 2.15: Generator.set_offset/get_offset of the
    default generator; the seed is kept), and set_rng_state puts the state back."""
    before = m.get_rng_state()
    m._set_rng_state_offset(100)
    offset = m._get_rng_state_offset()
    assert m.initial_seed() == int.from_bytes(before[:8].tobytes(), "little")
    m.set_rng_state(before)
    assert offset == 100
    assert np.array_equal(m.get_rng_state(), before)
    # a device argument, as torch's (an index, a device string of the backend)
    m._set_rng_state_offset(7, 1)
    assert m._get_rng_state_offset(f"{_name(m)}:1") == 7 == m.default_generators[1].get_offset()
    assert m._get_rng_state_offset() == int.from_bytes(before[8:].tobytes(), "little")
    with pytest.raises(RuntimeError, match="manual_offset expected a long, but got bool"):
        m._set_rng_state_offset(True)
    with pytest.raises(RuntimeError, match="Overflow when unpacking long"):
        m._set_rng_state_offset(1 << 64)


def test_rng_state_offset_private_names_match_torch() -> None:
    """torch.cuda._get_rng_state_offset/_set_rng_state_offset are importable from every device
    module (``from torch.cuda import ...``) and stay out of ``__all__``, as in torch.cuda."""
    from accelrt.cpu import _get_rng_state_offset, _set_rng_state_offset
    assert callable(_get_rng_state_offset) and callable(_set_rng_state_offset)
    for mod in (acc.cpu, acc.cuda, acc.opencl):
        assert "_set_rng_state_offset" not in mod.__all__
        assert hasattr(mod, "_get_rng_state_offset")
    acc.cuda._set_rng_state_offset(5)   # an unusable backend: ignored, as torch's lazy call


def test_randint_large_range_uses_new_counters(m: Any) -> None:
    """mirrors test_cuda.py test_randint_randomness_for_large_range: two consecutive randint
    draws over a range above 2**32 do not reuse counters (almost all values distinct)."""
    size, high = 100_000, 6_000_000_000
    gen = Generator(0).manual_seed(0)
    t1 = _host(acc.randint(0, high, (size,), generator=gen))
    t2 = _host(acc.randint(0, high, (size,), generator=gen))
    # ~ size**2 / high = 1.7 collisions expected between independent draws
    assert np.unique(np.concatenate([t1, t2])).size > 2 * size - 50


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_consecutive_draws_use_new_counters(m: Any, dtype: str) -> None:
    """mirrors test_cuda.py test_random_no_reused_random_states: consecutive rand/randn draws
    take new counters, so together they are the numbers one draw of both sizes gives
    (accelrt's counter layout, docs/random.md) and not a repeat of each other."""
    size = 20_000
    for fn in (acc.rand, acc.randn):
        gen = Generator(0).manual_seed(0)
        t1 = _host(fn(size, generator=gen, dtype=dtype))
        t2 = _host(fn(size, generator=gen, dtype=dtype))
        both = _host(fn(2 * size, generator=Generator(0).manual_seed(0), dtype=dtype))
        assert np.array_equal(np.concatenate([t1, t2]), both)
        assert np.intersect1d(t1, t2).size < 100


def test_cuda_random_module_functions(m: Any) -> None:
    """``torch.cuda.random``'s functions (torch 2.15): the submodule's are the module's;
    manual_seed_all seeds every device, seed_all one random seed for all (returning None, as
    torch.cuda's), seed a new seed for the current device only."""
    r = m.random
    assert set(r.__all__) == {"get_rng_state", "get_rng_state_all", "set_rng_state",
                              "set_rng_state_all", "manual_seed", "manual_seed_all", "seed",
                              "seed_all", "initial_seed"}
    r.manual_seed_all(7)
    assert [g.initial_seed() for g in m.default_generators] == [7, 7]
    assert r.seed_all() is None
    seeds = {g.initial_seed() for g in m.default_generators}
    assert len(seeds) == 1 and seeds != {7}
    other = m.default_generators[1].initial_seed()
    assert r.seed() is None
    assert m.default_generators[1].initial_seed() == other
    assert r.initial_seed() == m.initial_seed() == m.default_generators[0].initial_seed()
    assert np.array_equal(r.get_rng_state(1), m.get_rng_state(1))


# ---------------------------------------------------------------------- torch/random.py

def test_fork_rng_restores_on_exit_and_on_error(m: Any) -> None:
    """torch.random.fork_rng: the forked devices' default generators get their states back when
    the block ends, also by an exception; ``devices`` may be any iterable (read once)."""
    before = m.get_rng_state_all()
    with acc.random.fork_rng(devices=iter([0, 1])):
        acc.rand(8, device=acc.device(_name(m), 0))
        acc.rand(8, device=acc.device(_name(m), 1))
        m.manual_seed_all(3)
    assert all(np.array_equal(b, a) for b, a in zip(before, m.get_rng_state_all()))
    with pytest.raises(KeyError):
        with acc.random.fork_rng(devices=[1], device_type=_name(m)):
            m.default_generators[1].manual_seed(9)
            raise KeyError("body")
    assert np.array_equal(m.get_rng_state(1), before[1])
    with acc.random.fork_rng(devices=[0]):      # only device 0 is forked
        m.default_generators[1].manual_seed(11)
    assert m.default_generators[1].initial_seed() == 11
    m.set_rng_state_all(before)


def test_fork_rng_disabled_and_meta(m: Any) -> None:
    """torch.random.fork_rng(enabled=False) and device_type="meta" fork nothing; an unknown
    device type raises RuntimeError, as torch 2.15's."""
    with acc.random.fork_rng(devices=[0], enabled=False) as inside:
        m.manual_seed(21)
    assert inside is None and m.initial_seed() == 21
    with acc.random.fork_rng(devices=[0], device_type="meta"):
        m.manual_seed(22)
    assert m.initial_seed() == 22
    with pytest.raises(RuntimeError, match="nosuch"):
        with acc.random.fork_rng(device_type="nosuch"):
            pass
    with pytest.raises(TypeError):
        with acc.random.fork_rng(device_type=1):  # type: ignore[arg-type]
            pass


def test_fork_rng_warns_once_for_every_device(m: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.random.fork_rng(): with more than one device and no ``devices`` it forks every
    device and warns once per process (torch 2.15's UserWarning, naming the keyword)."""
    monkeypatch.setattr(acc.random, "_fork_rng_warned_already", False)
    before = m.get_rng_state_all()
    with pytest.warns(UserWarning, match="'devices' keyword argument of fork_rng"):
        with acc.random.fork_rng():
            m.manual_seed_all(5)
    assert all(np.array_equal(b, a) for b, a in zip(before, m.get_rng_state_all()))
    with acc.random.fork_rng(_caller="wrapper", _devices_kw="gpus"):   # no second warning
        m.manual_seed_all(6)
    assert all(np.array_equal(b, a) for b, a in zip(before, m.get_rng_state_all()))
