"""accelrt.comm: every collective against a numpy reference on simulated cpu devices, the
argument rules of torch.cuda.comm, stream ordering with async cpu streams, and the staging /
kernel / no-peer-copy paths through cpu-backed test backends, and the pinned host pool
staging of host <-> device copies (pool use, reuse, no leaks, direct fallback)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from helpers.registry import module_backends
from helpers.staging import RecordingNoHostCpu
from hypothesis import given, settings
from hypothesis import strategies as st

import accelrt as acc
from accelrt import backends, comm
from accelrt._backend import Backend
from accelrt.backends import Capabilities
from accelrt.backends.cpu import CpuBackend

N = 4


class NoHostCpu(CpuBackend):
    """cpu memory the core must treat like GPU memory (no direct host access)."""

    def capabilities(self, index: int) -> Capabilities:
        return dataclasses.replace(super().capabilities(index), host_accessible=False)


class KernelCpu(NoHostCpu):
    """Like NoHostCpu, with an ``elementwise_add`` device kernel (counts its launches)."""

    launches = 0

    def capabilities(self, index: int) -> Capabilities:
        return dataclasses.replace(super().capabilities(index), device_add=True)

    def elementwise_add(self, index: int, out: int, a: int, b: int, count: int, dtype: str,
                        stream: int) -> None:
        type(self).launches += 1
        dt = np.dtype(dtype)

        def run() -> None:
            from accelrt._transfer import host_view
            np.add(host_view(a, (count,), dt), host_view(b, (count,), dt),
                   out=host_view(out, (count,), dt))
        self.launch_host_func(index, run, stream)


class NoPeerCpu(NoHostCpu):
    """No peer copies: transfers between devices are staged through the host."""

    memcpy_peer = Backend.memcpy_peer

    def capabilities(self, index: int) -> Capabilities:
        return dataclasses.replace(super().capabilities(index), peer_copies=False)


_BACKENDS = {
    "commcpu": lambda: CpuBackend(num_devices=N, async_streams=False, name="commcpu"),
    "commcpua": lambda: CpuBackend(num_devices=N, async_streams=True, name="commcpua"),
    "commnohost": lambda: NoHostCpu(num_devices=N, async_streams=True, name="commnohost"),
    "commkernel": lambda: KernelCpu(num_devices=N, async_streams=False, name="commkernel"),
    "commnopeer": lambda: NoPeerCpu(num_devices=N, async_streams=False, name="commnopeer"),
}
# closed (worker threads stopped) and unregistered after the module
_backends = module_backends(_BACKENDS)


@pytest.fixture(params=list(_BACKENDS))
def be(request: pytest.FixtureRequest) -> str:
    """Each test backend's name (devices ``f"{be}:0"`` .. ``f"{be}:3"``)."""
    return request.param


@pytest.fixture
def sync_be() -> str:
    return "commcpu"


def put(data: np.ndarray, dev: str) -> acc.Array:
    """A device array (from the caching allocator) holding ``data``."""
    return acc.asarray(np.array(data, order="C"), device=dev, copy=True)


def host(a: object) -> np.ndarray:
    return np.asarray(a.numpy() if isinstance(a, acc.Array) else a)


def rand(shape: tuple[int, ...], dtype: str = "float64", seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 100, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------- broadcast

def test_broadcast_to_all_devices(be: str) -> None:
    src = rand((5, 7))
    a = put(src, f"{be}:1")
    outs = comm.broadcast(a, devices=[0, 1, 2, f"{be}:3"])
    assert len(outs) == N and outs[1] is a
    for i, o in enumerate(outs):
        assert str(o.device) == f"{be}:{i}"
        np.testing.assert_array_equal(host(o), src)


def test_broadcast_out_and_numpy_source(be: str) -> None:
    src = rand((3, 4), "int32")
    outs = [acc.zeros((3, 4), dtype="int32", device=f"{be}:{i}") for i in range(N)]
    res = comm.broadcast(put(src, f"{be}:0"), out=outs)
    assert all(r is o for r, o in zip(res, outs))
    for o in outs:
        np.testing.assert_array_equal(host(o), src)
    res = comm.broadcast(src + 1, devices=[f"{be}:2", f"{be}:3"])   # host source
    for o in res:
        np.testing.assert_array_equal(host(o), src + 1)


def test_broadcast_argument_rules(sync_be: str) -> None:
    a = put(rand((2, 2)), f"{sync_be}:0")
    with pytest.raises(ValueError, match="Exactly one of 'devices' and 'out'"):
        comm.broadcast(a)
    with pytest.raises(ValueError, match="Exactly one of 'devices' and 'out'"):
        comm.broadcast(a, devices=[0], out=[a])
    assert comm.broadcast(a, devices=[]) == ()      # torch 2.15 returns [] too
    with pytest.raises(TypeError, match="iterable of devices"):
        comm.broadcast(a, devices=f"{sync_be}:0")
    with pytest.raises(TypeError, match="to be an accelrt.Array or a numpy.ndarray"):
        comm.broadcast([1.0, 2.0], devices=[0])
    with pytest.raises(IndexError, match="out of index range"):
        comm.broadcast(a, devices=[0, N])
    with pytest.raises(ValueError, match="non-negative"):
        comm.broadcast(a, devices=[-1])
    with pytest.raises(TypeError, match="devices\\[0\\]"):
        comm.broadcast(a, devices=[1.5])
    with pytest.raises(ValueError, match="specified index"):
        comm.broadcast(a, devices=[sync_be])
    with pytest.raises(TypeError, match="output array at index 1 has device 'host'"):
        comm.broadcast(a, out=[acc.empty((2, 2), dtype="float64", device=f"{sync_be}:1"),
                               np.empty((2, 2))])
    with pytest.raises(ValueError, match=r"same shape as the source array \(2, 2\).*index 0 "
                                         r"has shape \(4,\)"):
        comm.broadcast(a, out=[acc.empty(4, dtype="float64", device=f"{sync_be}:1")])
    with pytest.raises(ValueError, match="dtype"):
        comm.broadcast(a, out=[acc.empty((2, 2), dtype="float32", device=f"{sync_be}:1")])
    assert comm.broadcast(a, out=[]) == ()          # torch 2.15 returns [] too


def test_broadcast_across_backends(sync_be: str) -> None:
    src = rand((6,))
    a = put(src, "cpu:0")
    outs = comm.broadcast(a, devices=[f"{sync_be}:2", "cpu:0", "commnohost:1"])
    assert outs[1] is a
    assert [str(o.device) for o in outs] == [f"{sync_be}:2", "cpu:0", "commnohost:1"]
    for o in outs:
        np.testing.assert_array_equal(host(o), src)


# ---------------------------------------------------------------------- broadcast_coalesced

@pytest.mark.parametrize("buffer_size", [1, 200, 10485760])
def test_broadcast_coalesced(be: str, buffer_size: int) -> None:
    dts = ["float32", "int64", "float32", "int8", "float64", "float32", "int64"]
    shapes = [(3, 4), (5,), (1,), (7, 2), (0,), (10,), (2, 2, 2)]
    srcs = [rand(s, d, seed=i) for i, (s, d) in enumerate(zip(shapes, dts))]
    arrays = [put(x, f"{be}:2") for x in srcs]
    devices = [2, 0, 3, 1]
    outs = comm.broadcast_coalesced(arrays, devices, buffer_size=buffer_size)
    assert len(outs) == len(devices)
    assert all(o is a for o, a in zip(outs[0], arrays))
    for dev, row in zip(devices, outs):
        assert len(row) == len(arrays)
        for x, ref in zip(row, srcs):
            assert str(x.device) == f"{be}:{dev}" and x.dtype == ref.dtype
            np.testing.assert_array_equal(host(x), ref)


def test_broadcast_coalesced_argument_rules(sync_be: str) -> None:
    a = put(rand((2,)), f"{sync_be}:0")
    b = put(rand((2,)), f"{sync_be}:1")
    with pytest.raises(ValueError, match=r"All arrays must be on devices\[0\].*index 1 is on "
                                         f"{sync_be}:1"):
        comm.broadcast_coalesced([a, b], [0, 1])
    with pytest.raises(ValueError, match="at least one device"):
        comm.broadcast_coalesced([a], [])
    with pytest.raises(ValueError, match="buffer_size must be positive"):
        comm.broadcast_coalesced([a], [0, 1], buffer_size=0)
    with pytest.raises(TypeError, match="buffer_size must be an int"):
        comm.broadcast_coalesced([a], [0, 1], buffer_size=1.5)
    with pytest.raises(TypeError, match="sequence of arrays"):
        comm.broadcast_coalesced(a, [0, 1])
    with pytest.raises(TypeError, match="array at index 0"):
        comm.broadcast_coalesced([np.zeros(2)], [0, 1])
    assert comm.broadcast_coalesced([], [f"{sync_be}:0", f"{sync_be}:1"]) == [[], []]


# ---------------------------------------------------------------------- reduce_add

@pytest.mark.parametrize("dtype", ["float32", "int64", "complex64"])
def test_reduce_add(be: str, dtype: str) -> None:
    srcs = [rand((4, 5), dtype, seed=i) for i in range(N)]
    inputs = [put(x, f"{be}:{i}") for i, x in enumerate(srcs)]
    for dest in range(N):
        out = comm.reduce_add(inputs, destination=dest)
        assert str(out.device) == f"{be}:{dest}" and out.dtype == np.dtype(dtype)
        # PyTorch's order: the input already on the destination first, then the others
        expected = srcs[dest].copy()
        for i in range(N):
            if i != dest:
                expected = expected + srcs[i]
        np.testing.assert_array_equal(host(out), expected)
    for x, ref in zip(inputs, srcs):    # inputs untouched
        np.testing.assert_array_equal(host(x), ref)


def test_reduce_add_default_destination_and_single_input(sync_be: str) -> None:
    acc.set_current_accelerator(sync_be)
    acc.set_device_index(2)
    inputs = [put(np.full(3, i, "int32"), f"{sync_be}:{i}") for i in range(N)]
    out = comm.reduce_add(inputs)
    assert str(out.device) == f"{sync_be}:2"
    assert host(out).tolist() == [6, 6, 6]
    assert comm.reduce_add([inputs[2]]) is inputs[2]


def test_reduce_add_argument_rules(sync_be: str) -> None:
    a = put(rand((2, 3)), f"{sync_be}:0")
    b = put(rand((3, 2)), f"{sync_be}:1")
    with pytest.raises(ValueError, match="input 1 has invalid size: got 3x2, but expected 2x3"):
        comm.reduce_add([a, b], destination=0)
    with pytest.raises(ValueError, match="dtype"):
        comm.reduce_add([a, put(rand((2, 3), "float32"), f"{sync_be}:1")], destination=0)
    with pytest.raises(ValueError, match="destination to be on the same device with one of the arrays"):
        comm.reduce_add([a, put(rand((2, 3)), f"{sync_be}:1")], destination=3)
    with pytest.raises(ValueError, match="at least one input"):
        comm.reduce_add([])
    with pytest.raises(TypeError, match="input 1 is on the host"):   # AssertionError too
        comm.reduce_add([a, np.zeros((2, 3))], destination=0)
    with pytest.raises(TypeError, match="sequence of arrays"):
        comm.reduce_add(a)
    with pytest.raises(ValueError, match="one backend"):
        comm.reduce_add([a, put(rand((2, 3)), "cpu:0")], destination=0)
    with pytest.raises(IndexError):
        comm.reduce_add([a], destination=N)


def test_reduce_add_kernel_path() -> None:
    before = KernelCpu.launches
    inputs = [put(np.full(6, i + 1.0), f"commkernel:{i}") for i in range(3)]
    out = comm.reduce_add(inputs, destination=1)
    assert host(out).tolist() == [6.0] * 6
    assert KernelCpu.launches - before == 2


# ---------------------------------------------------------------------- reduce_add_coalesced

@pytest.mark.parametrize("buffer_size", [1, 64, 10485760])
def test_reduce_add_coalesced(be: str, buffer_size: int) -> None:
    dts = ["float32", "int64", "float32", "int16", "float64"]
    shapes = [(3, 4), (5,), (2,), (4, 2), (3,)]
    per_dev = [[rand(s, d, seed=10 * g + i) for i, (s, d) in enumerate(zip(shapes, dts))]
               for g in range(3)]
    inputs = [[put(x, f"{be}:{g}") for x in lst] for g, lst in enumerate(per_dev)]
    out = comm.reduce_add_coalesced(inputs, destination=1, buffer_size=buffer_size)
    assert isinstance(out, tuple) and len(out) == len(shapes)
    for i, o in enumerate(out):
        assert str(o.device) == f"{be}:1" and o.shape == shapes[i]
        expected = per_dev[1][i] + per_dev[0][i] + per_dev[2][i]
        np.testing.assert_allclose(host(o), expected, rtol=1e-6)


def test_reduce_add_coalesced_argument_rules(sync_be: str) -> None:
    a0, a1 = (put(rand((2,)), f"{sync_be}:{i}") for i in range(2))
    with pytest.raises(ValueError, match="same number of arrays"):
        comm.reduce_add_coalesced([[a0, a0], [a1]], destination=0)
    with pytest.raises(ValueError, match=r"inputs\[1\]\[0\] has shape \(3,\)"):
        comm.reduce_add_coalesced([[a0], [put(rand((3,)), f"{sync_be}:1")]], destination=0)
    assert comm.reduce_add_coalesced([]) == ()      # torch 2.15's answer
    with pytest.raises(TypeError, match=r"inputs\[0\]"):
        comm.reduce_add_coalesced([a0, a1])
    assert comm.reduce_add_coalesced([[], []], destination=0) == ()


# ---------------------------------------------------------------------- scatter

@pytest.mark.parametrize("shape,dim,chunks", [
    ((10, 3), 0, None), ((5, 3), 0, None), ((3, 9), -1, None), ((2, 8, 3), 1, [1, 0, 4, 3]),
    ((0, 2), 0, None), ((6,), 0, [6, 0, 0, 0]),
])
def test_scatter(be: str, shape: tuple[int, ...], dim: int, chunks: list[int] | None) -> None:
    src = rand(shape, "float32")
    a = put(src, f"{be}:0")
    devices = [f"{be}:{i}" for i in (3, 2, 1, 0)]
    outs = comm.scatter(a, devices, chunk_sizes=chunks, dim=dim)
    size = shape[dim]
    if chunks is None:   # torch.chunk: ceil(size / n) each, maybe fewer pieces
        step = -(-size // N) if size else 0
        chunks = [min(step, size - s) for s in range(0, size, step)] if size else [0] * N
    assert len(outs) == len(chunks)
    bounds = np.cumsum(chunks)[:-1]
    for o, dev, ref in zip(outs, devices, np.split(src, bounds, axis=dim)):
        assert str(o.device) == dev and o.shape == ref.shape
        np.testing.assert_array_equal(host(o), ref)


def test_scatter_out_and_streams(be: str) -> None:
    src = rand((4, 6), "int64")
    a = put(src, f"{be}:1")
    outs = [acc.empty((4, w), dtype="int64", device=f"{be}:{i}")
            for i, w in enumerate((1, 2, 0, 3))]
    streams = [acc.Stream(f"{be}:{i}") for i in range(N)]
    res = comm.scatter(a, dim=1, streams=streams, out=outs)
    assert all(r is o for r, o in zip(res, outs))
    for s in streams:
        s.synchronize()
    for o, ref in zip(outs, np.split(src, [1, 3, 3], axis=1)):
        np.testing.assert_array_equal(host(o), ref)
    pieces = comm.scatter(a, [0, 1], streams=[streams[0], None])
    streams[0].synchronize()
    np.testing.assert_array_equal(host(pieces[0]), src[:2])
    np.testing.assert_array_equal(host(pieces[1]), src[2:])


def test_scatter_argument_rules(sync_be: str) -> None:
    a = put(rand((4, 2)), f"{sync_be}:0")
    out2 = [acc.empty((2, 2), dtype="float64", device=f"{sync_be}:{i}") for i in range(2)]
    with pytest.raises(ValueError, match="Exactly one of 'devices' and 'out'"):
        comm.scatter(a)
    with pytest.raises(ValueError, match="'devices' must not be specified when 'out'"):
        comm.scatter(a, [0, 1], out=out2)
    with pytest.raises(ValueError, match="'chunk_sizes' must not be specified when 'out'"):
        comm.scatter(a, chunk_sizes=[2, 2], out=out2)
    with pytest.raises(ValueError, match=r"^split_with_sizes expects split_sizes to sum exactly "
                                         r"to 4 \(input array's size at dimension 0\), but "
                                         r"got split_sizes=\[1, 2\]"):
        comm.scatter(a, [0, 1], chunk_sizes=[1, 2])
    with pytest.raises(ValueError, match="len\\(devices\\) = 2 and len\\(chunk_sizes\\) = 3"):
        comm.scatter(a, [0, 1], chunk_sizes=[1, 2, 1])
    with pytest.raises(ValueError, match="non-negative"):
        comm.scatter(a, [0, 1], chunk_sizes=[5, -1])
    with pytest.raises(TypeError, match="chunk_sizes must contain only ints"):
        comm.scatter(a, [0, 1], chunk_sizes=[2.0, 2.0])
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of "
                                         r"\[-2, 1\], but got 2\)"):
        comm.scatter(a, [0, 1], dim=2)
    with pytest.raises(TypeError, match="dim must be an int"):
        comm.scatter(a, [0, 1], dim="0")
    with pytest.raises(ValueError, match="at least a 1-dimensional"):
        comm.scatter(put(np.float64(1.0), f"{sync_be}:0"), [0, 1])
    with pytest.raises(ValueError, match="at least one device"):
        comm.scatter(a, [])
    with pytest.raises(ValueError, match=r"stream at index 1 \(was .*:0\) to match the device "
                                         r"supplied at that index \(expected .*:1\)"):
        comm.scatter(a, [0, 1], streams=[None, acc.Stream(f"{sync_be}:0")])
    with pytest.raises(TypeError, match=r"streams\[0\] must be an accelrt.Stream"):
        comm.scatter(a, [0, 1], streams=["s"])
    with pytest.raises(ValueError, match="Output array at index 1 has incorrect shape"):
        comm.scatter(a, out=[out2[0], acc.empty((2, 3), dtype="float64", device=f"{sync_be}:1")])
    with pytest.raises(ValueError, match="Total size for output arrays along scatter dim 0 does "
                                         "not match .* Expected 4, but got total size 2"):
        comm.scatter(a, out=out2[:1])
    with pytest.raises(TypeError, match="output array at index 0 has device 'host'"):
        comm.scatter(a, out=[np.empty((4, 2))])
    with pytest.raises(ValueError, match="at least one output"):
        comm.scatter(a, out=[])
    with pytest.raises(ValueError, match=r"stream at index 0"):
        comm.scatter(a, out=out2, streams=[acc.Stream(f"{sync_be}:1")])


# ---------------------------------------------------------------------- gather

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(be: str, dim: int) -> None:
    parts = [rand((3, 2 + i, 2) if dim == 1 else (2 + i, 3, 2) if dim == 0 else (3, 2, 1 + i),
                  seed=i) for i in range(N)]
    inputs = [put(p, f"{be}:{i}") for i, p in enumerate(parts)]
    expected = np.concatenate(parts, axis=dim)
    for dest in (2, f"{be}:0", -1, "cpu:0"):
        out = comm.gather(inputs, dim=dim, destination=dest)
        if dest == -1:
            assert isinstance(out, np.ndarray)
        else:
            want = f"{be}:2" if dest == 2 else str(dest)
            assert str(out.device) == want
        np.testing.assert_array_equal(host(out), expected)


def test_gather_default_destination_and_out(sync_be: str) -> None:
    acc.set_current_accelerator(sync_be)
    acc.set_device_index(3)
    inputs = [put(np.full((1, 2), i, "int16"), f"{sync_be}:{i}") for i in range(N)]
    out = comm.gather(inputs)
    assert str(out.device) == f"{sync_be}:3"
    expected = np.repeat(np.arange(N, dtype="int16"), 2).reshape(N, 2)
    np.testing.assert_array_equal(host(out), expected)
    dev_out = acc.zeros((N, 2), dtype="int16", device=f"{sync_be}:1")
    assert comm.gather(inputs, out=dev_out) is dev_out
    np.testing.assert_array_equal(host(dev_out), expected)
    np_out = np.zeros((2, N), "int16")
    assert comm.gather(inputs, dim=0, out=np_out.T.copy()) is not None
    host_out = np.zeros((N, 2), "int16")
    assert comm.gather(inputs, out=host_out) is host_out
    np.testing.assert_array_equal(host_out, expected)


def test_gather_argument_rules(sync_be: str) -> None:
    a = put(rand((2, 3)), f"{sync_be}:0")
    b = put(rand((2, 4)), f"{sync_be}:1")
    with pytest.raises(ValueError, match="at least one array to gather"):
        comm.gather([])
    with pytest.raises(TypeError, match="array at index 1 has device 'host'"):
        comm.gather([a, np.zeros((2, 3))])
    with pytest.raises(ValueError, match=r"Input array at index 1 has invalid shape \(2, 4\), "
                                         r"but expected \(2, 3\)"):
        comm.gather([a, b], dim=0)
    with pytest.raises(ValueError, match="same number of dimensions"):
        comm.gather([a, put(rand((6,)), f"{sync_be}:1")])
    with pytest.raises(ValueError, match="dtype"):
        comm.gather([a, put(rand((2, 3), "float32"), f"{sync_be}:1")])
    with pytest.raises(ValueError, match="'destination' must not be specified when 'out'"):
        comm.gather([a, b], dim=1, destination=0, out=acc.empty((2, 7), dtype="float64",
                                                                 device=f"{sync_be}:0"))
    with pytest.raises(ValueError, match=r"Expected out array to have shape \(2, 7\), but got "
                                         r"\(7, 2\)"):
        comm.gather([a, b], dim=1, out=acc.empty((7, 2), dtype="float64", device=f"{sync_be}:0"))
    with pytest.raises(ValueError, match="dtype"):
        comm.gather([a, b], dim=1, out=np.empty((2, 7), "float32"))
    with pytest.raises(TypeError, match="to be an accelrt.Array or a numpy.ndarray"):
        comm.gather([a, b], dim=1, out=[0] * 14)
    with pytest.raises(IndexError, match="Dimension out of range"):
        comm.gather([a, b], dim=-3)
    with pytest.raises(ValueError, match="0-d"):
        comm.gather([put(np.float64(1.0), f"{sync_be}:0")])
    with pytest.raises(ValueError, match="non-negative"):
        comm.gather([a], destination=-2)


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(0, 5), min_size=1, max_size=3), data=st.data())
def test_scatter_gather_round_trip(shape: list[int], data: st.DataObject) -> None:
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = data.draw(st.integers(1, N))
    size = shape[dim]
    cuts = sorted(data.draw(st.lists(st.integers(0, size), min_size=n - 1, max_size=n - 1)))
    sizes = [b - a for a, b in zip([0] + cuts, cuts + [size])]
    src = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    a = put(src, "commcpua:0")
    devices = [f"commcpua:{(i + 1) % N}" for i in range(n)]
    pieces = comm.scatter(a, devices, chunk_sizes=sizes, dim=dim)
    back = comm.gather(pieces, dim=dim, destination=-1)
    np.testing.assert_array_equal(back, src)


# ---------------------------------------------------------------------- peer access

def test_can_device_access_peer(sync_be: str) -> None:
    assert comm.can_device_access_peer(f"{sync_be}:0", f"{sync_be}:3") is True
    assert acc.can_device_access_peer is comm.can_device_access_peer
    acc.set_current_accelerator(sync_be)
    assert acc.can_device_access_peer(1, 2) is True
    with pytest.raises(ValueError, match="different backends"):
        comm.can_device_access_peer(f"{sync_be}:0", "cpu:0")
    with pytest.raises(IndexError):
        comm.can_device_access_peer(0, N)
    with pytest.raises(TypeError):
        comm.can_device_access_peer(0.5, 0)


# ---------------------------------------------------------------------- stream ordering

def _slow_write(dev: str, arr: acc.Array, value: float, delay: float = 0.15) -> None:
    """Enqueue, on the current stream of ``dev``, a host function that sleeps then fills
    ``arr`` (host-accessible cpu memory) with ``value``."""
    b = backends.get_backend(dev.split(":")[0])
    idx = int(dev.split(":")[1])
    view = np.asarray(arr.numpy())   # zero-copy (the stream is idle now)

    def work() -> None:
        time.sleep(delay)
        view[...] = value
    b.launch_host_func(idx, work, acc.current_stream(dev).stream_id)


def test_copies_wait_for_pending_source_work() -> None:
    be = "commcpua"
    a = put(np.zeros(1000), f"{be}:0")
    _slow_write(f"{be}:0", a, 5.0)
    outs = comm.broadcast(a, devices=[1, 2, 3])
    for o in outs:   # numpy() synchronises o's device's current stream only
        assert host(o).tolist() == [5.0] * 1000
    b = put(np.ones(1000), f"{be}:1")
    _slow_write(f"{be}:1", b, 2.0)
    total = comm.reduce_add([a, b], destination=0)
    assert host(total).tolist() == [7.0] * 1000


def test_copies_wait_for_pending_destination_work() -> None:
    be = "commcpua"
    a = put(np.full(500, 3.0), f"{be}:0")
    out = acc.zeros(500, dtype="float64", device=f"{be}:2")
    _slow_write(f"{be}:2", out, -1.0)        # the destination is still busy
    comm.broadcast(a, out=[out])
    assert host(out).tolist() == [3.0] * 500  # the copy ran after the pending write


def test_scatter_ready_on_given_stream() -> None:
    be = "commcpua"
    src = np.arange(8.0)
    a = put(np.zeros(8), f"{be}:0")
    _slow_write(f"{be}:0", a, 1.0)
    s = acc.Stream(f"{be}:1")
    seen: list[list[float]] = []
    (piece,) = comm.scatter(a, [f"{be}:1"], streams=[s])
    view = np.asarray(piece.numpy())
    b = backends.get_backend(be)
    done = threading.Event()

    def look() -> None:
        seen.append(view.tolist())
        done.set()
    b.launch_host_func(1, look, s.stream_id)   # on the given stream, no host sync before
    assert done.wait(10)
    assert seen == [[1.0] * 8]
    del src


def test_borrowed_host_memory_arrays(sync_be: str) -> None:
    """Arrays that borrow numpy memory (``asarray`` without a copy) work as inputs and
    outputs (their bytes are host memory, not device memory)."""
    hosts = [np.full((2, 3), i + 1.0) for i in range(3)]
    borrowed = [acc.asarray(h, device=f"{sync_be}:{i}") for i, h in enumerate(hosts)]
    assert borrowed[0].data_ptr() == hosts[0].ctypes.data   # really shared
    total = comm.reduce_add(borrowed, destination=1)
    np.testing.assert_array_equal(host(total), np.full((2, 3), 2.0 + 1.0 + 3.0))
    g = comm.gather(borrowed, dim=1, destination=f"{sync_be}:3")
    np.testing.assert_array_equal(host(g), np.concatenate(hosts, axis=1))
    target = np.zeros((2, 3))
    comm.broadcast(put(np.full((2, 3), 7.0), f"{sync_be}:2"),
                   out=[acc.asarray(target, device=f"{sync_be}:0")])
    assert target.tolist() == [[7.0] * 3] * 2


def test_scatter_stream_on_source_device_waits_for_current_stream() -> None:
    be = "commcpua"
    a = put(np.zeros(6), f"{be}:0")
    _slow_write(f"{be}:0", a, 4.0)             # pending on cpu:0's current stream
    s = acc.Stream(f"{be}:0")
    (piece,) = comm.scatter(a, [f"{be}:0"], streams=[s])
    s.synchronize()
    assert np.asarray(piece.numpy()).tolist() == [4.0] * 6


# ---------------------------------------------------------------------- pinned host staging

class PinnedNoHostCpu(RecordingNoHostCpu):
    """NoHostCpu that records its pinned host blocks, its copies and its live events."""


class NoPinnedNoHostCpu(PinnedNoHostCpu):
    """Pinned host memory is always exhausted: every copy falls back to a direct one."""

    def host_malloc(self, size: int) -> int:
        return 0


_PINNED = {
    "commpinsync": lambda: PinnedNoHostCpu(num_devices=N, async_streams=False,
                                           name="commpinsync"),
    "commpinasync": lambda: PinnedNoHostCpu(num_devices=N, async_streams=True,
                                            name="commpinasync"),
    "commnopin": lambda: NoPinnedNoHostCpu(num_devices=2, async_streams=True, name="commnopin"),
}
_pinned_backends = module_backends(_PINNED, name="_pinned_backends")


@pytest.fixture(params=["commpinsync", "commpinasync"])
def pin_be(request: pytest.FixtureRequest) -> Iterator[str]:
    """A pinned-recording backend made the current accelerator (acc.memory's host functions
    read its pool); call :func:`fresh` once the inputs are made."""
    prev = acc.current_accelerator()
    acc.set_current_accelerator(request.param)
    try:
        yield request.param
    finally:
        acc.set_current_accelerator(prev.type if prev is not None else "cpu")


def fresh(name: str) -> PinnedNoHostCpu:
    """Settle every device of ``name``, empty its host pool and zero its counters."""
    b = backends.get_backend(name)
    assert isinstance(b, PinnedNoHostCpu)
    for i in range(b.device_count()):
        acc.synchronize(f"{name}:{i}")
    acc.memory.empty_host_cache()
    acc.memory.reset_accumulated_host_memory_stats()
    b.copies.clear()
    return b


def host_stats() -> dict[str, int]:
    return dict(acc.memory.host_memory_stats())


def copies_of(b: PinnedNoHostCpu, kind: str) -> list[tuple[int, int]]:
    return [(d, s) for k, d, s in b.copies if k == kind]


@pytest.mark.parametrize("dim", [0, 1])
def test_gather_to_host_goes_through_the_pinned_pool(pin_be: str, dim: int) -> None:
    parts = [rand((3, 4) if dim == 1 else (4, 3), "int32", seed=i) for i in range(N)]
    inputs = [put(p, f"{pin_be}:{i}") for i, p in enumerate(parts)]
    b = fresh(pin_be)
    out = comm.gather(inputs, dim=dim, destination=-1)
    np.testing.assert_array_equal(out, np.concatenate(parts, axis=dim))
    d2h = copies_of(b, "d2h")
    assert len(d2h) == N and not copies_of(b, "h2d")
    assert all(dst in b.pinned for dst, _ in d2h)          # each landed in a pinned block
    assert all(dst != out.ctypes.data for dst, _ in d2h)
    st = host_stats()
    assert st["num_host_alloc"] == 1                       # one block served every input
    assert st["active_requests.current"] == 0 and st["allocations.current"] == 1
    host_out = np.zeros_like(out)
    assert comm.gather(inputs, dim=dim, out=host_out) is host_out
    np.testing.assert_array_equal(host_out, out)
    assert host_stats()["num_host_alloc"] == 1             # reused, not reallocated


@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_from_host_goes_through_the_pinned_pool(pin_be: str, dim: int) -> None:
    b = fresh(pin_be)
    src = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    devices = [f"{pin_be}:{i}" for i in range(N)]
    pieces = comm.scatter(src, devices, chunk_sizes=[1, 2, 3, 2] if dim == 0 else [2, 2, 1, 1],
                          dim=dim)
    h2d = copies_of(b, "h2d")
    assert len(h2d) == N and not copies_of(b, "d2h")
    assert all(s in b.pinned for _, s in h2d)              # each read a pinned block
    assert host_stats()["active_requests.current"] == 0
    buckets = {(p.nbytes - 1).bit_length() for p in pieces}
    assert host_stats()["num_host_alloc"] == len(buckets)  # one block per power-of-two size
    src[...] = -1                                          # the pieces hold their own copy
    want = np.split(np.arange(8 * 6, dtype=np.float32).reshape(8, 6),
                    [1, 3, 6] if dim == 0 else [2, 4, 5], axis=dim)
    for piece, w in zip(pieces, want):
        np.testing.assert_array_equal(host(piece), w)
    outs = [acc.empty(w.shape, dtype="float32", device=d) for w, d in zip(want, devices)]
    b.copies.clear()
    comm.scatter(np.concatenate(want, axis=dim) + 1, out=outs, dim=dim)
    assert all(s in b.pinned for _, s in copies_of(b, "h2d"))
    assert host_stats()["num_host_alloc"] == len(buckets)  # the cached blocks were reused
    for o, w in zip(outs, want):
        np.testing.assert_array_equal(host(o), w + 1)


def test_strided_device_side_is_staged_per_run(pin_be: str) -> None:
    """Across backends the device side of a copy can be strided (gather along dim 1 into a
    device, scatter along dim 1 out of one): each run goes through the pool."""
    parts = [rand((3, 2 + i), seed=i) for i in range(2)]
    on_cpu = [put(p, f"commcpua:{i}") for i, p in enumerate(parts)]
    b = fresh(pin_be)
    g = comm.gather(on_cpu, dim=1, destination=f"{pin_be}:1")
    h2d = copies_of(b, "h2d")
    assert len(h2d) == 2 * 3 and all(s in b.pinned for _, s in h2d)
    whole = np.concatenate(parts, axis=1)
    np.testing.assert_array_equal(host(g), whole)
    b.copies.clear()
    pieces = comm.scatter(g, ["commcpua:0", "commcpua:1"], chunk_sizes=[2, 3], dim=1)
    d2h = copies_of(b, "d2h")
    assert len(d2h) == 2 * 3 and all(d in b.pinned for d, _ in d2h)
    for piece, w in zip(pieces, np.split(whole, [2], axis=1)):
        np.testing.assert_array_equal(host(piece), w)
    assert host_stats()["active_requests.current"] == 0


def test_many_collectives_through_the_pool_leak_nothing(pin_be: str) -> None:
    rng = np.random.default_rng(3)
    b = fresh(pin_be)
    events_before = b.live_events
    devices = [f"{pin_be}:{i}" for i in range(N)]
    for i in range(30):
        src = rng.integers(-99, 99, (8, 5 + i % 3)).astype(np.int64)
        pieces = comm.scatter(src, devices, dim=i % 2)
        back = comm.gather(pieces, dim=i % 2, destination=-1)
        np.testing.assert_array_equal(back, src)
        outs = comm.broadcast(src, devices=devices[:2])
        total = comm.reduce_add(outs, destination=1)    # host staging sum
        np.testing.assert_array_equal(host(total), 2 * src)
    for d in devices:
        acc.synchronize(d)
    st = host_stats()
    assert st["num_host_alloc"] <= 8                      # a few blocks served everything
    assert st["active_requests.current"] == 0 and st["active_bytes.current"] == 0
    acc.memory.empty_host_cache()
    st = host_stats()
    assert st["allocations.current"] == 0 and not b.pinned
    assert b.live_events == events_before                 # every pool event was destroyed


def test_without_pinned_memory_collectives_copy_directly() -> None:
    be = "commnopin"
    b = backends.get_backend(be)
    assert isinstance(b, NoPinnedNoHostCpu)
    src = np.arange(24, dtype=np.int16).reshape(4, 6)
    b.copies.clear()
    pieces = comm.scatter(src, [f"{be}:0", f"{be}:1"], dim=1)
    np.testing.assert_array_equal(comm.gather(pieces, dim=1, destination=-1), src)
    g = comm.gather([put(src[:, :2], "commcpua:0"), put(src[:, 2:], "commcpua:1")], dim=1,
                    destination=f"{be}:0")
    back = comm.scatter(g, ["commcpua:0", "commcpua:1"], chunk_sizes=[4, 2], dim=1)
    np.testing.assert_array_equal(np.concatenate([host(p) for p in back], axis=1), src)
    assert b.copies and not b.pinned                      # every copy was a direct one


def test_not_a_device_array_errors_have_pytorchs_wording(sync_be: str) -> None:
    # torch/csrc/cuda/comm.cpp: "Expected all output tensors to be CUDA tensors, but output
    # tensor at index 1 has device 'cpu'" (broadcast and scatter) and "Expected all input
    # tensors to be CUDA tensors, but tensor at index 1 has device 'cpu'" (gather): the same
    # sentences with arrays for tensors (issue 23)
    a = put(rand((2, 2)), f"{sync_be}:0")
    good = acc.empty((2, 2), dtype="float64", device=f"{sync_be}:1")
    with pytest.raises(TypeError, match=r"^Expected all output arrays to be accelrt arrays, but "
                                        r"output array at index 1 has device 'host' \(a "
                                        r"numpy\.ndarray"):
        comm.broadcast(a, out=[good, np.empty((2, 2))])
    with pytest.raises(TypeError, match=r"^Expected all output arrays to be accelrt arrays, but "
                                        r"output array at index 0 has device 'host'"):
        comm.scatter(a, out=[np.empty((1, 2)), good])
    with pytest.raises(TypeError, match=r"^Expected all input arrays to be accelrt arrays, but "
                                        r"array at index 1 has device 'none' \(a list"):
        comm.gather([a, [1.0, 2.0]])
