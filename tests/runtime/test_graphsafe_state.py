"""``Generator.graphsafe_get_state()`` / ``graphsafe_set_state()`` (docs/random.md), with
PyTorch's CUDA semantics read in its source (``CUDAGeneratorImpl::graphsafe_get_state`` makes
a generator around the same ``CUDAGeneratorState``; ``graphsafe_set_state`` swaps the state
pointer; ``CUDAGraph`` keys its registrations by state) and what torch 2.14.1 does observed
by running it (literals below). The random tests live in tests/runtime.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt._backend import Capabilities
from accelrt._errors import AcceleratorError
from accelrt.backends.cpu import CpuBackend
from accelrt.random import Generator, _philox

#: a second cpu-like backend with two devices (another device type for graphsafe_set_state)
OTHER = "graphsafeother"


class _DeviceRng(CpuBackend):
    """A cpu variant that makes its random numbers "on the device", as CUDA: a captured draw
    takes its blocks from the generator's state at capture time."""

    def capabilities(self, index: int) -> Capabilities:
        return dataclasses.replace(super().capabilities(index), device_rng=True)

    def philox_fill(self, index, ptr, n, dtype, dist, seed, offset, params, stream):  # type: ignore[no-untyped-def]
        host = np.empty(n, dtype)
        _philox.fill(host, dist, seed, offset, params)
        self.kept = host
        self.memcpy(index, ptr, host.ctypes.data, host.nbytes, "h2d", stream)


DEVRNG = "graphsafedevrng"
# closed and unregistered after the module
_backends = module_backends({
    OTHER: lambda: CpuBackend(num_devices=2, name=OTHER),
    DEVRNG: lambda: _DeviceRng(num_devices=1, name=DEVRNG),
})


def _eager(seed: int, offset: int, n: int, dev: str = "cpu:0") -> list[float]:
    """``rand(n)`` from a fresh generator at ``seed``/``offset``."""
    g = Generator(dev).manual_seed(seed).set_offset(offset)
    return acc.rand(n, device=dev, generator=g).tolist()  # type: ignore[no-any-return]


def test_get_state_shares_the_state_object_and_clones_copy_it() -> None:
    g = Generator("cpu:0").manual_seed(42)
    shared = g.graphsafe_get_state()
    assert type(shared) is Generator and shared is not g and shared.device == g.device
    a = acc.rand(10, device="cpu:0", generator=g).tolist()          # 3 blocks
    assert shared.get_offset() == 3 and shared.get_state().tobytes() == g.get_state().tobytes()
    shared.manual_seed(7)                                            # either one seeds both
    assert (g.initial_seed(), g.get_offset()) == (7, 0)
    g.set_state(shared.get_state()).set_offset(5)
    assert shared.get_offset() == 5
    # clone_state, copy and pickle give a new state object, as torch's clone()
    for c in (g.clone_state(), copy.copy(g), copy.deepcopy(g), pickle.loads(pickle.dumps(g))):
        c.manual_seed(42)
        assert g.initial_seed() == 7 and acc.rand(10, device="cpu:0", generator=c).tolist() == a
    # graphsafe_get_state of a shared generator shares the same object still
    third = shared.graphsafe_get_state()
    third.set_offset(9)
    assert g.get_offset() == shared.get_offset() == 9


def test_set_state_switches_state_objects_and_returns_self() -> None:
    g = Generator("cpu:0").manual_seed(1)
    saved = g.graphsafe_get_state()
    other = Generator("cpu:0").manual_seed(2)
    # torch 2.14.1's stub: graphsafe_set_state(self, _new_state: Generator) -> Generator (self)
    assert g.graphsafe_set_state(other) is g and g.initial_seed() == 2
    acc.rand(4, device="cpu:0", generator=g)
    assert other.get_offset() == 1 and saved.get_offset() == 0       # other's state moved
    assert g.graphsafe_set_state(saved).initial_seed() == 1 and g.get_offset() == 0
    assert acc.rand(4, device="cpu:0", generator=g).tolist() == _eager(1, 0, 4)
    # another device index of the same backend: taken, as torch's (no index check)
    g1 = Generator(f"{OTHER}:1").manual_seed(5).set_offset(3)
    g0 = Generator(f"{OTHER}:0").graphsafe_set_state(g1)
    assert g0.device == acc.device(f"{OTHER}:0") and g0.get_offset() == 3
    assert acc.rand(4, device=f"{OTHER}:0", generator=g0).tolist() == _eager(5, 3, 4)
    assert g1.get_offset() == 4


def test_set_state_errors() -> None:
    g = Generator("cpu:0")
    # torch 2.14.1 (observed): g.graphsafe_set_state(x) for x in None, 1, "x", object() raises
    # TypeError("expected a Generator, but got NoneType"/"int"/"str"/"object")
    for bad, name in ((None, "NoneType"), (1, "int"), ("x", "str"), (object(), "object"),
                      (g.get_state(), "numpy.ndarray")):
        with pytest.raises(TypeError, match=f"^graphsafe_set_state\\(\\) expected a Generator, "
                                            f"but got {name}; pass an accelrt.random.Generator"):
            g.graphsafe_set_state(bad)  # type: ignore[arg-type]
    # a generator of another device type: torch's CUDA generator raises RuntimeError
    # ("Expected a CUDA Generator", read in CUDAGeneratorImpl::graphsafe_set_state)
    with pytest.raises(AcceleratorError, match=f"expected a cpu Generator .* got one of "
                                               f"{OTHER}:0") as info:
        g.graphsafe_set_state(Generator(f"{OTHER}:0"))
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, TypeError)
    # torch 2.14.1 (observed): "Generator.graphsafe_get_state() takes no arguments (1 given)"
    # and "... graphsafe_set_state() takes exactly one argument (0 given)": Python's own here
    with pytest.raises(TypeError):
        g.graphsafe_get_state(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        g.graphsafe_set_state()  # type: ignore[call-arg]
    assert g.initial_seed() == acc.random.DEFAULT_SEED


def test_two_graphs_captured_with_their_own_registered_states() -> None:
    """torch.compile's cudagraph trees: each graph registers its own state, the generator is
    switched to it for the capture, and each replay advances only that state."""
    sa = Generator("cpu:0").manual_seed(1)
    sb = Generator("cpu:0").manual_seed(2)
    g = Generator("cpu:0").manual_seed(3)
    x, y = acc.zeros(4, device="cpu:0"), acc.zeros(8, device="cpu:0")
    ga, gb = acc.cpu.Graph(), acc.cpu.Graph()
    ga.register_generator_state(sa)
    gb.register_generator_state(sb)
    own = g.graphsafe_get_state()
    g.graphsafe_set_state(sa)
    with acc.cpu.graph(ga):
        acc.random.uniform_(x, generator=g)
    g.graphsafe_set_state(sb)
    with acc.cpu.graph(gb):
        acc.random.uniform_(y, generator=g)
    g.graphsafe_set_state(own)
    assert (sa.get_offset(), sb.get_offset(), g.get_offset()) == (0, 0, 0)   # captures: none
    ga.replay()
    gb.replay()
    acc.cpu.synchronize()
    assert x.tolist() == _eager(1, 0, 4) and y.tolist() == _eager(2, 0, 8)
    ga.replay()
    acc.cpu.synchronize()
    assert x.tolist() == _eager(1, 1, 4)
    assert (sa.get_offset(), sb.get_offset(), g.get_offset()) == (2, 2, 0)


def test_registration_is_of_the_state_in_use_and_switching_in_a_capture() -> None:
    gen = Generator("cpu:0").manual_seed(5)
    first = gen.graphsafe_get_state()
    graph = acc.cpu.Graph()
    graph.register_generator_state(gen)          # registers the state gen uses now
    gen.graphsafe_set_state(Generator("cpu:0").manual_seed(6))
    x = acc.zeros(4, device="cpu:0")
    with acc.cpu.graph(graph):
        acc.random.uniform_(x, generator=first)
    graph.replay()
    acc.cpu.synchronize()
    assert first.get_offset() == 1 and gen.get_offset() == 0 and x.tolist() == _eager(5, 0, 4)

    # in a capture: both calls are allowed (torch's _impl_graphsafe_rng swaps the default
    # generator's state around a captured op); draws count for the state in use
    d = acc.random.default_generator("cpu:0")
    saved = d.get_state()
    try:
        d.manual_seed(3)
        other = Generator("cpu:0").manual_seed(4)
        y = acc.zeros(8, device="cpu:0")
        gc = acc.cpu.Graph()
        with acc.cpu.graph(gc):
            acc.random.uniform_(x)                           # the default state: 1 block
            orig = d.graphsafe_get_state()
            d.graphsafe_set_state(other)
            assert d.get_state()[8:].tobytes() == bytes(8)   # other's offset in the capture
            acc.random.uniform_(y)                           # other's state: 2 blocks
            assert int.from_bytes(d.get_state()[8:].tobytes(), "little") == 2
            d.graphsafe_set_state(orig)
            assert int.from_bytes(d.get_state()[8:].tobytes(), "little") == 1
            with pytest.raises(RuntimeError, match="during graph capture"):
                other.get_offset()
        assert (d.get_offset(), other.get_offset()) == (0, 0)
        gc.replay()
        acc.cpu.synchronize()
        assert x.tolist() == _eager(3, 0, 4) and y.tolist() == _eager(4, 0, 8)
        assert (d.get_offset(), other.get_offset()) == (1, 2)
    finally:
        d.set_state(saved)


def test_device_rng_backend_captures_draw_from_the_state_in_use() -> None:
    """On a backend with device RNG (CUDA), a captured draw takes its blocks from the state in
    use at capture time (its replays repeat them), so a swapped-in state is the one moved."""
    dev = f"{DEVRNG}:0"
    g = Generator(dev).manual_seed(8)
    other = Generator(dev).manual_seed(9)
    own = g.graphsafe_get_state()
    x = acc.zeros(4, device=dev)
    graph = acc.Graph()
    with acc.graph(graph, stream=acc.Stream(dev)):
        g.graphsafe_set_state(other)
        acc.random.uniform_(x, generator=g)
        g.graphsafe_set_state(own)
    assert (own.get_offset(), other.get_offset()) == (0, 1)
    graph.replay()
    acc.synchronize(dev)
    assert x.tolist() == _eager(9, 0, 4)


def test_torchs_graphsafe_set_get_rng_state_test_on_the_cpu_backend() -> None:
    """PyTorch's test_cuda.py ``test_graphsafe_set_get_rng_state``, ported: a graph with two
    registered states of the default generator (one shared, one cloned), captured while the
    generator switches between them, replays what the same steps draw eagerly from another
    generator's two states, and leaves both pairs of states at the same offsets."""

    def create_states(generator: Generator) -> tuple[Generator, Generator, Generator]:
        generator.manual_seed(0)
        return generator, generator.graphsafe_get_state(), generator.clone_state()

    def steps(states: tuple[Generator, Generator, Generator]) -> list[acc.Array]:
        generator, old_state, new_state = states
        generator.graphsafe_set_state(new_state)
        values = [acc.rand(5, device="cpu:0", generator=generator)]
        generator.graphsafe_set_state(old_state)
        values += [acc.rand(5, device="cpu:0", generator=generator) for _ in range(2)]
        return values

    def offsets(states: tuple[Generator, Generator, Generator]) -> tuple[int, int]:
        return states[1].get_offset(), states[2].get_offset()

    d = acc.random.default_generator("cpu:0")
    saved = d.get_state()
    try:
        eager_states = create_states(Generator("cpu:0"))
        graph_states = create_states(d)
        g = acc.cpu.Graph()
        g.register_generator_state(graph_states[1])
        g.register_generator_state(graph_states[2])
        with acc.cpu.graph(g):
            graphed = steps(graph_states)
        for _ in range(3):
            values = steps(eager_states)
            g.replay()
            acc.cpu.synchronize()
            assert offsets(eager_states) == offsets(graph_states)
            assert [v.tolist() for v in values] == [v.tolist() for v in graphed]
        assert offsets(graph_states) == (12, 6)          # 2 blocks per rand(5), 3 replays
    finally:
        d.graphsafe_set_state(Generator("cpu:0")).set_state(saved)
