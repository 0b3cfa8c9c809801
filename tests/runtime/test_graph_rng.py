"""Graph-safe random numbers (docs/random.md), PyTorch's CUDA generator protocol read in its
source (``CUDAGeneratorState::capture_prologue/epilogue``, ``replay_prologue``, ``increase``;
``CUDAGraph::capture_begin`` registers the device's default generator): a capture consumes
nothing, each replay draws what the eager work would draw next and advances the generator by
the capture's blocks, an unregistered generator is refused in a capture, a captured generator
is refused outside it.
"""

from __future__ import annotations

import dataclasses
import pickle
import threading

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt import _device, backends
from accelrt._backend import Capabilities
from accelrt._graph import DeviceGraph
from accelrt.backends.cpu import CpuBackend
from accelrt.random import _philox

#: two devices whose streams run their work on worker threads
ASYNC = "graphrngasync"


class _DeviceRng(CpuBackend):
    """A cpu variant that says it makes random numbers on the device (as CUDA): a captured
    draw takes its blocks from the generator at capture time."""

    def capabilities(self, index: int) -> Capabilities:
        return dataclasses.replace(super().capabilities(index), device_rng=True)

    def philox_fill(self, index, ptr, n, dtype, dist, seed, offset, params, stream):  # type: ignore[no-untyped-def]
        host = np.empty(n, dtype)
        _philox.fill(host, dist, seed, offset, params)
        self.kept = host        # a captured copy reads it at replay
        self.memcpy(index, ptr, host.ctypes.data, host.nbytes, "h2d", stream)


DEVRNG = "graphrngdevrng"
# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({
    ASYNC: lambda: CpuBackend(num_devices=2, async_streams=True, name=ASYNC),
    DEVRNG: lambda: _DeviceRng(num_devices=1, name=DEVRNG),
})


@pytest.fixture
def current_async(monkeypatch: pytest.MonkeyPatch) -> str:
    """:data:`ASYNC` as the current accelerator for one test (``DeviceGraph`` captures the
    current accelerator's work)."""
    monkeypatch.setattr(_device, "_current_backend", backends.get_backend(ASYNC))
    monkeypatch.setattr(_device, "_current_name", ASYNC)
    return ASYNC


def _state(dev: str) -> bytes:
    return bytes(acc.random.get_rng_state(dev))


@pytest.mark.parametrize("name", ["cpu", ASYNC])
def test_replays_draw_the_eager_sequence_of_every_registered_generator(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_device, "_current_backend", backends.get_backend(name))
    monkeypatch.setattr(_device, "_current_name", name)
    dev = f"{name}:0"
    gen = acc.random.Generator(dev).manual_seed(11)
    x = acc.zeros(10, device=dev)
    y = acc.zeros(7, device=dev)
    acc.random.default_generator(dev).manual_seed(3)
    start = (_state(dev), gen.get_state().tobytes())
    g = DeviceGraph()
    g.register_generator_state(gen)
    g.register_generator_state(gen)                # twice is once
    s = acc.Stream(dev)
    with acc.graph(g, stream=s):
        acc.random.uniform_(x)                      # default generator, 3 blocks
        acc.random.normal_(y, 1.0, 2.0, generator=gen)
        acc.random.uniform_(x, -1.0, 1.0)           # 3 more from the default generator
    assert (_state(dev), gen.get_state().tobytes()) == start   # the capture consumed nothing
    replays = []
    for _ in range(3):                              # queued back to back, then read
        g.replay()
    acc.synchronize(dev)
    for _ in range(3):
        g.replay()
        acc.synchronize(dev)
        replays.append((tuple(x.tolist()), tuple(y.tolist())))
    ends = (_state(dev), gen.get_state().tobytes())
    acc.random.default_generator(dev).manual_seed(3)
    gen.manual_seed(11)
    eager = []
    for i in range(6):
        acc.random.uniform_(x)
        acc.random.normal_(y, 1.0, 2.0, generator=gen)
        acc.random.uniform_(x, -1.0, 1.0)
        if i >= 3:
            eager.append((tuple(x.tolist()), tuple(y.tolist())))
    assert replays == eager and len(set(replays)) == 3
    assert (_state(dev), gen.get_state().tobytes()) == ends
    g.reset()


def test_any_generator_joins_a_capture_at_its_first_draw_and_reset_unregisters() -> None:
    # torch 2.14.1 (as every torch >= 2.13) keeps a capture state per generator keyed by the
    # capture id, made at the first draw in the capture (CUDAGeneratorState::get_capture_state
    # with create_if_not_found): no registration is needed, and its libtorch_cuda.so no longer
    # holds the message "Attempt to increase offset for a CUDA generator not in capture mode"
    gen = acc.random.Generator("cpu:0").manual_seed(4)
    x = acc.zeros(4, device="cpu:0")
    g = acc.cpu.Graph()
    with acc.cpu.graph(g):
        acc.random.uniform_(x, generator=gen)
    assert gen.get_offset() == 0                  # the capture did not consume it
    g.replay()
    acc.synchronize("cpu:0")
    first = x.tolist()
    assert gen.get_offset() == 1
    assert first == acc.random.uniform_(x, generator=gen.clone_state().set_offset(0)).tolist()
    g.reset()                                     # drops the registration
    with acc.cpu.graph(g):
        acc.random.uniform_(x, generator=gen)
    g.replay()
    assert gen.get_offset() == 2
    g.reset()


def test_a_captured_generator_draws_eagerly_outside_the_capture() -> None:
    # torch 2.14.1: a draw on a stream that is not capturing is an ordinary one (its
    # libtorch_cuda.so no longer holds "Offset increment outside graph capture encountered
    # unexpectedly"); each later replay starts from the offset it left
    x = acc.zeros(4, device="cpu:0")
    dflt = acc.random.default_generator("cpu:0")
    g = acc.cpu.Graph()
    with acc.cpu.graph(g):
        acc.random.uniform_(x)
        with acc.Stream("cpu:0"):                  # a stream that is not capturing
            before = dflt.get_offset()
            acc.random.uniform_(acc.zeros(4, device="cpu:0"))
            assert dflt.get_offset() == before + 1
    g.replay()
    assert dflt.get_offset() == before + 2
    g.reset()


def test_generator_calls_refused_or_ignored_on_a_capturing_stream() -> None:
    # torch 2.14.1's CUDAGeneratorImpl: get_offset, set_offset, seed, clone (assertNotCapturing:
    # "Cannot call CUDAGeneratorImpl::<call> during CUDA graph capture ..."); set_current_seed
    # takes only the current seed ("... can be called during stream capture only if new seed
    # is the same as the original seed."), as a no-op
    gen = acc.random.Generator("cpu:0").manual_seed(9)
    x = acc.zeros(4, device="cpu:0")
    g = acc.cpu.Graph()
    with acc.cpu.graph(g):
        acc.random.uniform_(x, generator=gen)
        # (torch's Generator.__reduce__ reads get_offset: pickling is refused too)
        for call in (gen.get_offset, gen.seed, gen.clone_state, lambda: gen.set_offset(0),
                     lambda: pickle.dumps(gen)):
            with pytest.raises(RuntimeError, match="during graph capture"):
                call()
        with pytest.raises(RuntimeError, match="during graph capture"):
            gen.manual_seed(10)
        assert gen.manual_seed(9) is gen          # the same seed: a no-op
        with acc.Stream("cpu:0"):                  # not capturing: allowed
            assert gen.get_offset() == 0
    g.replay()
    assert gen.get_offset() == 1 and gen.initial_seed() == 9
    g.reset()


def test_generator_calls_ask_the_current_devices_stream(current_async: str) -> None:
    # torch 2.14.1's generator calls take no device guard: they ask whether the current
    # stream of the current device is capturing, whatever the generator's device
    other = acc.random.Generator(f"{current_async}:1").manual_seed(3)
    g = acc.Graph()
    with acc.graph(g):
        acc.random.uniform_(acc.zeros(4, device=f"{current_async}:0"))
        with pytest.raises(RuntimeError, match=f"stream of {current_async}:0 is capturing"):
            other.get_offset()
        with acc.device_index(1):                  # device 1's current stream: not capturing
            assert other.get_offset() == 0
    assert other.get_offset() == 0
    g.reset()


def test_get_state_and_set_state_in_a_capture_read_and_set_the_offset_within_it() -> None:
    # torch 2.14.1's CUDAGeneratorImpl::get_state/set_state go through
    # philox_offset_per_thread()/set_philox_offset_per_thread(), which in a capture read and set
    # the capture state's offset_intragraph_ (what activation checkpointing's saved RNG state
    # relies on to recompute the same numbers); set_current_seed takes only the current seed
    gen = acc.random.Generator("cpu:0").manual_seed(6)
    x, y = acc.zeros(4, device="cpu:0"), acc.zeros(4, device="cpu:0")
    g = acc.cpu.Graph()
    with acc.cpu.graph(g):
        acc.random.uniform_(x, generator=gen)
        saved = gen.get_state()
        assert saved.tobytes() == (6).to_bytes(8, "little") + (1).to_bytes(8, "little")
        acc.random.uniform_(x, generator=gen)
        assert gen.set_state(saved) is gen        # rewinds the capture's second draw
        acc.random.uniform_(y, generator=gen)
        with pytest.raises(RuntimeError, match="during graph capture"):
            gen.set_state(acc.random.Generator("cpu:0").manual_seed(7).get_state())
    assert gen.get_state().tobytes() == (6).to_bytes(8, "little") + bytes(8)
    g.replay()
    acc.synchronize("cpu:0")
    assert x.tolist() == y.tolist() and gen.get_offset() == 2
    g.reset()


def test_the_module_level_state_functions_in_a_capture_act_as_the_generators() -> None:
    # torch.cuda.get_rng_state/set_rng_state/manual_seed call the default generator's
    # get_state/set_state/manual_seed (as torch.utils.checkpoint does in a capture)
    acc.cpu.manual_seed(5)
    x, y = acc.zeros(4, device="cpu:0"), acc.zeros(4, device="cpu:0")
    g = acc.cpu.Graph()
    with acc.cpu.graph(g):
        saved = acc.cpu.get_rng_state()
        assert bytes(saved) == (5).to_bytes(8, "little") + bytes(8)
        acc.random.uniform_(x)
        acc.cpu.set_rng_state(saved)
        acc.random.uniform_(y)
        acc.cpu.manual_seed(5)                      # the same seed: a no-op
        acc.random.manual_seed(5)
        for reseed in (acc.cpu.manual_seed, acc.random.manual_seed):
            with pytest.raises(RuntimeError, match="during graph capture"):
                reseed(6)
    assert acc.cpu.initial_seed() == 5
    g.replay()
    acc.synchronize("cpu:0")
    assert x.tolist() == y.tolist()
    assert bytes(acc.cpu.get_rng_state()) == (5).to_bytes(8, "little") + (1).to_bytes(8, "little")
    g.reset()


def test_get_state_in_a_capture_on_a_device_rng_backend_is_the_generators(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # there a captured draw advances the generator itself, so get_state/set_state in the
    # capture read and set the generator's own offset (still refusing another seed)
    monkeypatch.setattr(_device, "_current_backend", backends.get_backend(DEVRNG))
    monkeypatch.setattr(_device, "_current_name", DEVRNG)
    gen = acc.random.Generator(f"{DEVRNG}:0").manual_seed(6)
    x = acc.zeros(4, device=f"{DEVRNG}:0")
    g = acc.Graph()
    with acc.graph(g):
        acc.random.uniform_(x, generator=gen)
        saved = gen.get_state()
        assert saved.tobytes() == (6).to_bytes(8, "little") + (1).to_bytes(8, "little")
        acc.random.uniform_(x, generator=gen)
        gen.set_state(saved)
        with pytest.raises(RuntimeError, match="during graph capture"):
            gen.set_state(acc.random.Generator("cpu:0").manual_seed(7).get_state())
    assert gen.get_offset() == 1
    g.reset()


def test_another_thread_draws_freely_while_a_capture_is_on_another_device(
        current_async: str) -> None:
    # only the capture's device's default generator is registered
    d0, d1 = f"{current_async}:0", f"{current_async}:1"
    x = acc.zeros(4, device=d0)
    started, done = threading.Event(), threading.Event()
    seen: list[int] = []

    def other() -> None:
        started.wait(10)
        before = acc.random.default_generator(d1).get_offset()
        acc.random.uniform_(acc.zeros(8, device=d1))
        seen.append(acc.random.default_generator(d1).get_offset() - before)
        done.set()

    t = threading.Thread(target=other)
    t.start()
    g = DeviceGraph()
    with acc.graph(g, stream=acc.Stream(d0), capture_error_mode="thread_local"):
        acc.random.uniform_(x)
        started.set()
        assert done.wait(10)
    t.join(10)
    assert seen == [2]
    g.reset()


def test_get_currently_capturing_graph() -> None:
    with pytest.raises(RuntimeError, match="The current stream is not currently capturing"):
        acc.cpu.Graph.get_currently_capturing_graph()
    g = acc.cpu.Graph()
    with acc.cpu.graph(g):
        assert acc.cpu.Graph.get_currently_capturing_graph() is g
        _ = acc.zeros(1, device="cpu:0")
    with pytest.raises(TypeError, match="Generator"):
        g.register_generator_state(object())
    g.reset()


# ---------------------------------------------------------------------- philox_state

def test_philox_state_reserves_blocks_that_accelrt_never_draws() -> None:
    g = acc.random.Generator("cpu:0").manual_seed(5)
    seed, offset, intra = g.philox_state(10)              # ceil(10 / 4) = 3 blocks
    assert [a.dtype.name for a in (seed, offset, intra)] == ["int64"] * 3
    assert (int(seed[0]), int(offset[0]), int(intra[0]), g.get_offset()) == (5, 0, 0, 3)
    assert g.philox_state(0)[1][0] == 3 and g.get_offset() == 3
    after = acc.rand(8, device="cpu:0", generator=g).tolist()
    assert after == acc.rand(8, device="cpu:0",
                             generator=acc.random.Generator("cpu:0").manual_seed(5)
                             .set_offset(3)).tolist()
    big = acc.random.Generator("cpu:0").manual_seed(2**64 - 1)
    assert int(big.philox_state(1)[0][0]) & (2**64 - 1) == 2**64 - 1   # uint64 bits


@pytest.mark.parametrize("bad, exc, text", [
    (True, TypeError, "expected an int, but got bool"),
    (1.5, TypeError, "expected an int, but got float"),
    (None, TypeError, "expected an int, but got NoneType"),
    (-1, OverflowError, "negative"),
    (2**64, OverflowError, "too big"),
])
def test_philox_state_argument(bad: object, exc: type, text: str) -> None:
    # observed on torch 2.14.1 (argument parsing runs before its CPU generator's refusal):
    # bool/float/str/None -> RuntimeError "philox_state expected an int, but got bool";
    # -1 -> OverflowError "can't convert negative int to unsigned"; 2**64 -> "int too big"
    g = acc.random.Generator("cpu:0")
    with pytest.raises(exc, match=text) as info:
        g.philox_state(bad)                                # type: ignore[arg-type]
    assert exc is OverflowError or isinstance(info.value, RuntimeError)
    assert g.get_offset() == 0


def test_philox_state_in_a_capture_views_the_state_each_replay_sets() -> None:
    gen = acc.random.Generator("cpu:0").manual_seed(9)
    x = acc.zeros(4, device="cpu:0")
    g = acc.cpu.Graph()
    g.register_generator_state(gen)
    with acc.cpu.graph(g):
        acc.random.uniform_(x, generator=gen)              # block 0 of the graph
        seed, offset, intra = gen.philox_state(6)          # blocks 1-2 of the graph
    assert int(intra[0]) == 1 and gen.get_offset() == 0
    for k in range(2):
        g.replay()
        acc.synchronize("cpu:0")
        assert (int(seed[0]), int(offset[0])) == (9, 3 * k)   # this replay's first block
    assert gen.get_offset() == 6
    g.reset()
