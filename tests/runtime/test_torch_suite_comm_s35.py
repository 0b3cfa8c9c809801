"""PyTorch's own tests of ``torch.cuda.comm`` (``test/test_cuda_multigpu.py``, class
``TestCudaComm``), ported to :mod:`accelrt.comm` and checked against torch 2.15's behaviour.

Each test names the PyTorch test it mirrors. ``torch.cuda`` devices are the devices of a
three-device cpu backend with synchronous streams (real data: values are compared with numpy)
and of a three-device :class:`~accelrt.testing.SimulatedBackend` (it holds no data: placement,
identity, argument rules and errors only). A CPU tensor of PyTorch's tests is a numpy array
(plain host memory) here. Messages read "tensor" as "array" and "CUDA tensor" as "accelrt
array", as docs/comm.md says; where the test matches a message, the same prefix is matched.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt import comm
from accelrt.backends.cpu import CpuBackend
from accelrt.testing import SimulatedBackend

CPU, SIM = "s35cmcpu", "s35cmsim"

_backends = module_backends({
    CPU: lambda: CpuBackend(num_devices=3, async_streams=False, name=CPU),
    SIM: lambda: SimulatedBackend(device_count=3, name=SIM),
})


@pytest.fixture(params=[CPU, SIM])
def be(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each backend's name, made the current accelerator with device 0 current (conftest puts
    the accelerator and devices back)."""
    name: str = request.param
    acc.set_current_accelerator(name)
    acc.backends.device_module(name).set_device(0)
    yield name
    acc.backends.device_module(name).synchronize()


@pytest.fixture
def cpu() -> Iterator[str]:
    """The cpu backend alone (tests that compare values)."""
    acc.set_current_accelerator(CPU)
    acc.backends.device_module(CPU).set_device(0)
    yield CPU
    acc.backends.device_module(CPU).synchronize()


def _rng() -> np.random.Generator:
    return np.random.default_rng(35)


def _on(x: np.ndarray, dev: str) -> acc.Array:
    return acc.asarray(x, device=dev, copy=True)


def _values(be: str, arr: Any) -> np.ndarray | None:
    """``arr``'s values, or None on the simulated backend (no data to compare)."""
    if isinstance(arr, np.ndarray):
        return arr
    return None if be == SIM else arr.numpy()


def _same(be: str, arr: Any, expected: np.ndarray) -> None:
    got = _values(be, arr)
    if got is not None:
        np.testing.assert_array_equal(got, expected)


# ---------------------------------------------------------------------- broadcast

@pytest.mark.parametrize("source", ["host", "device"])
def test_broadcast(be: str, source: str) -> None:
    """mirrors test_cuda_multigpu.py TestCudaComm test_broadcast_cpu / test_broadcast_gpu
    (_test_broadcast): copies on devices 0 and 1, no copy for the source's own device, ``out=``
    filled and returned as is, and its three argument errors."""
    x = _rng().standard_normal((5, 5)).astype(np.float32)
    inp: Any = x if source == "host" else _on(x, f"{be}:0")
    results = comm.broadcast(inp, (0, 1))
    assert isinstance(results, tuple) and len(results) == 2
    for i, r in enumerate(results):
        assert str(r.device) == f"{be}:{i}"
        _same(be, r, x)
        if source == "device" and i == 0:
            assert r is inp and r.data_ptr() == inp.data_ptr()
        else:
            assert r is not inp
    for inplace in (True, False):
        if inplace:
            outputs = [acc.empty((5, 5), dtype="float32", device=f"{be}:0"),
                       acc.empty((5, 5), dtype="float32", device=f"{be}:1")]
        else:
            outputs = [_on(x, f"{be}:0"), acc.empty((5, 5), dtype="float32", device=f"{be}:1")]
        got = comm.broadcast(inp, out=outputs)
        assert len(got) == 2 and all(g is o for g, o in zip(got, outputs))
        for i, g in enumerate(got):
            assert str(g.device) == f"{be}:{i}"
            _same(be, g, x)
    with pytest.raises(RuntimeError, match=r"^Exactly one of 'devices' and 'out'"):
        comm.broadcast(inp, (0, 1), out=outputs)
    with pytest.raises(RuntimeError, match=r"^Expected all output arrays to be accelrt arrays, "
                                           r"but output array at index 1"):
        comm.broadcast(inp, out=[_on(x, f"{be}:0"), x.copy()])
    with pytest.raises(RuntimeError, match=r"^Expected all output arrays to have same shape as "
                                           r"the source .+ at index 1"):
        comm.broadcast(inp, out=[_on(x, f"{be}:0"), _on(x[None], f"{be}:1")])


def test_broadcast_to_no_devices_returns_empty(be: str) -> None:
    """torch 2.15's ``comm.broadcast(t, [])`` and ``broadcast(t, out=[])`` return ``[]``
    (checked with torch 2.15 on a CPU tensor; its C++ has no check for an empty list); accelrt
    answers ``()`` (it raised "Expected at least one device to broadcast to")."""
    a = _on(np.arange(4.0), f"{be}:0")
    assert comm.broadcast(a, []) == ()
    assert comm.broadcast(a, out=[]) == ()
    assert comm.broadcast(np.arange(4.0), devices=iter(())) == ()


def test_broadcast_negative_device(be: str) -> None:
    """torch 2.15: ``comm.broadcast(t, [-1])`` raises RuntimeError "Expected non-negative
    device index, but got -1" (checked on a CPU tensor)."""
    with pytest.raises(RuntimeError, match=r"^Expected non-negative device index"):
        comm.broadcast(_on(np.arange(4.0), f"{be}:0"), [-1])


def _dense_arrays(be: str) -> list[acc.Array]:
    """test_broadcast_coalesced_dense_only's mix: int64 and float32 arrays of 5 elements, an
    int32 one of 10 (same bytes as an int64 of 5)."""
    r = _rng()
    hosts = [(r.standard_normal(5) * 10).astype(np.int64), r.standard_normal(5).astype(np.float32),
             (r.standard_normal(5) * 10).astype(np.int64),
             (r.standard_normal(5) * 10).astype(np.int64),
             (r.standard_normal(10) * 10).astype(np.int32),
             r.standard_normal(5).astype(np.float32)]
    return [_on(h, f"{be}:0") for h in hosts]


def _empty_mix(be: str) -> list[acc.Array]:
    """test_broadcast_coalesced_empty_tensors's mix: an empty uint8 array, float32, float64."""
    r = _rng()
    return [_on(np.zeros(0, np.uint8), f"{be}:0"), _on(r.standard_normal(5).astype(np.float32),
            f"{be}:0"), _on(r.standard_normal(5), f"{be}:0")]


@pytest.mark.parametrize("mix, buffer_size", [("dense", 5 * 8 * 5 // 2), ("empty", 256)])
def test_broadcast_coalesced(be: str, mix: str, buffer_size: int) -> None:
    """mirrors test_cuda_multigpu.py TestCudaComm test_broadcast_coalesced_dense_only and
    test_broadcast_coalesced_empty_tensors (_test_broadcast_coalesced): the same arrays as
    one ``broadcast`` each, device 0's row is the inputs themselves, and the copies on device 1
    are independent arrays (PyTorch checks separate version counters: writing one changes no
    other)."""
    arrays = _dense_arrays(be) if mix == "dense" else _empty_mix(be)
    singles = [comm.broadcast(a, (0, 1)) for a in arrays]
    rows = comm.broadcast_coalesced(arrays, (0, 1), buffer_size=buffer_size)
    assert len(rows) == 2 and len(rows[0]) == len(rows[1]) == len(arrays)
    for a, (s0, s1), c0, c1 in zip(arrays, singles, rows[0], rows[1]):
        assert s0 is a and c0 is a
        assert str(s1.device) == str(c1.device) == f"{be}:1"
        assert c1.dtype == a.dtype and c1.shape == a.shape
        if be == CPU:
            np.testing.assert_array_equal(c1.numpy(), s1.numpy())
            np.testing.assert_array_equal(c1.numpy(), a.numpy())
    if be == CPU:
        before = [c.numpy().copy() for c in rows[1]]
        for k, c in enumerate(rows[1]):
            if c.size:
                c.fill_(0)
                for j, other in enumerate(rows[1]):
                    if j > k:
                        np.testing.assert_array_equal(other.numpy(), before[j])


def test_broadcast_coalesced_needs_arrays_on_the_first_device(be: str) -> None:
    """torch 2.15: ``broadcast_coalesced`` of a tensor not on ``devices[0]`` raises
    RuntimeError "All tensors must be on devices[0]: 0" (checked on a CPU tensor)."""
    arrays = [_on(np.arange(3.0), f"{be}:0"), _on(np.arange(3.0), f"{be}:1")]
    with pytest.raises(RuntimeError, match=r"^All arrays must be on devices\[0\]"):
        comm.broadcast_coalesced(arrays, (0, 1))


# ---------------------------------------------------------------------- reduce_add

def test_reduce_add(be: str) -> None:
    """mirrors test_cuda_multigpu.py TestCudaComm test_reduce_add: inputs on devices 0 and 1,
    no destination: the sum is on the current device (0)."""
    r = _rng()
    x, y = r.standard_normal((5, 5)), r.standard_normal((5, 5))
    result = comm.reduce_add((_on(x, f"{be}:0"), _on(y, f"{be}:1")))
    assert str(result.device) == f"{be}:0"
    _same(be, result, x + y)


def test_reduce_add_coalesced_dense_only(be: str) -> None:
    """mirrors test_cuda_multigpu.py TestCudaComm test_reduce_add_coalesced_dense_only
    (_test_reduce_add_coalesced): each sum twice its input with its dtype, the coalesced sums
    equal the one-by-one sums, and they are new, independent arrays."""
    arrays = _dense_arrays(be)
    dup = [arrays, [a.to(f"{be}:1") for a in arrays]]
    singles = [comm.reduce_add(pair) for pair in zip(*dup)]
    for s, a in zip(singles, arrays):
        assert s.dtype == a.dtype and str(s.device) == f"{be}:0"
        if be == CPU:
            np.testing.assert_array_equal(s.numpy(), a.numpy() * 2)
    coalesced = comm.reduce_add_coalesced(dup, buffer_size=5 * 8 * 5 // 2)
    assert isinstance(coalesced, tuple) and len(coalesced) == len(arrays)
    for c, s in zip(coalesced, singles):
        assert c.dtype == s.dtype and c.shape == s.shape and str(c.device) == f"{be}:0"
        assert all(c is not x for x in arrays)
        if be == CPU:
            np.testing.assert_array_equal(c.numpy(), s.numpy())
    if be == CPU:
        before = [c.numpy().copy() for c in coalesced]
        coalesced[0].fill_(0)
        for c, b in zip(coalesced[1:], before[1:]):
            np.testing.assert_array_equal(c.numpy(), b)
        np.testing.assert_array_equal(arrays[0].numpy(), before[0] // 2)


def test_reduce_add_errors_as_torch(be: str) -> None:
    """torch 2.15's ``torch.nn.parallel.comm.reduce_add`` (Python; run with CPU tensors):
    a CPU input raises AssertionError "reduce_add expects all inputs to be on GPUs, but input 0
    is on CPU", no inputs IndexError, a size mismatch ValueError "input 1 has invalid size: got
    5x2, but expected 2x5", a destination that holds no input RuntimeError; and
    ``reduce_add_coalesced([])`` returns ``()``."""
    a = _on(np.ones((2, 5)), f"{be}:0")
    with pytest.raises(AssertionError, match=r"^reduce_add expects all inputs to be on devices, "
                                             r"but input 1 is on the host") as info:
        comm.reduce_add([a, np.ones((2, 5))])
    assert isinstance(info.value, TypeError)    # what accelrt raised before
    with pytest.raises(AssertionError, match=r"but input 1 is on the host"):
        comm.reduce_add_coalesced([[a], [np.ones((2, 5))]])
    with pytest.raises(IndexError) as ei:
        comm.reduce_add([])
    assert isinstance(ei.value, RuntimeError) and isinstance(ei.value, ValueError)
    with pytest.raises(ValueError, match=r"^input 1 has invalid size: got 5x2, but expected 2x5$"):
        comm.reduce_add([a, _on(np.ones((5, 2)), f"{be}:1")])
    with pytest.raises(RuntimeError, match=r"^reduce_add expects destination to be on the same "
                                           r"device with one of the arrays"):
        comm.reduce_add([a, _on(np.ones((2, 5)), f"{be}:1")], destination=2)
    assert comm.reduce_add_coalesced([]) == ()
    assert comm.reduce_add_coalesced([[], []]) == ()
    assert comm.reduce_add([a]) is a


# ---------------------------------------------------------------------- scatter

@pytest.mark.parametrize("shape, chunk_sizes, dim", [
    ((4, 4), None, 0),      # test_scatter_cpu / test_scatter_gpu
    ((4, 4), None, 1),      # test_scatter_cpu_dim / _gpu_dim
    ((4, 4), None, -2),     # test_scatter_cpu_neg_dim / _gpu_neg_dim
    ((6, 4), (2, 4), 0),    # test_scatter_cpu_sizes / _gpu_sizes
])
@pytest.mark.parametrize("source", ["host", "device"])
def test_scatter(be: str, source: str, shape: tuple[int, int],
                 chunk_sizes: tuple[int, int] | None, dim: int) -> None:
    """mirrors test_cuda_multigpu.py TestCudaComm test_scatter_cpu, test_scatter_cpu_dim,
    test_scatter_cpu_neg_dim, test_scatter_cpu_sizes and their _gpu twins (_test_scatter):
    two pieces with the right slices, ``out=`` filled and returned as is, and the argument
    errors. (PyTorch's piece for the source's own device is a view; accelrt's is a copy,
    docs/comm.md.)"""
    x = _rng().standard_normal(shape).astype(np.float32)
    inp: Any = x if source == "host" else _on(x, f"{be}:0")
    sizes = chunk_sizes or (shape[dim] // 2,) * 2
    bounds = np.cumsum((0,) + tuple(sizes))
    expected = [np.take(x, range(bounds[i], bounds[i + 1]), axis=dim) for i in range(2)]
    result = comm.scatter(inp, (0, 1), chunk_sizes, dim)
    assert isinstance(result, tuple) and len(result) == 2
    for i, r in enumerate(result):
        assert str(r.device) == f"{be}:{i}" and r.shape == expected[i].shape
        _same(be, r, expected[i])
    out = [acc.empty(r.shape, dtype="float32", device=str(r.device)) for r in result]
    got = comm.scatter(inp, dim=dim, out=out)
    assert len(got) == 2 and all(g is o for g, o in zip(got, out))
    for g, e in zip(got, expected):
        _same(be, g, e)

    if chunk_sizes is not None:
        with pytest.raises(RuntimeError, match=r"^Expected devices and chunk_sizes to be of "
                                               r"same length"):
            comm.scatter(inp, [0] * (len(chunk_sizes) + 1), dim=dim, chunk_sizes=chunk_sizes)
    with pytest.raises(RuntimeError, match=r"^'devices' must not be specified"):
        comm.scatter(inp, (0, 1), dim=dim, out=out)
    with pytest.raises(RuntimeError, match=r"^Expected at least one device to scatter to"):
        comm.scatter(inp, (), dim=dim)
    with pytest.raises(RuntimeError, match=r"^Expected at least one output array to scatter to"):
        comm.scatter(inp, dim=dim, out=[])
    with pytest.raises(RuntimeError, match=r"^Expected all output arrays to be accelrt arrays, "
                                           r"but output array at index 0"):
        comm.scatter(inp, dim=dim, out=[np.empty(out[0].shape, np.float32)] + out[1:])
    with pytest.raises(RuntimeError, match=r"^Output array at index 0 has incorrect shape"):
        comm.scatter(inp, dim=dim, out=[acc.empty((1, *out[0].shape), dtype="float32",
                                                  device=f"{be}:0")] + out[1:])
    short = list(out[0].shape)
    short[dim] -= 1
    with pytest.raises(RuntimeError, match=r"^Total size for output arrays along scatter dim \d+ "
                                           r"does not match"):
        comm.scatter(inp, dim=dim, out=[acc.empty(tuple(short), dtype="float32",
                                                  device=f"{be}:0")] + out[1:])


def test_scatter_chunk_size_errors_as_torch(be: str) -> None:
    """torch 2.15's ``comm.scatter`` splits with ``split_with_sizes`` (checked on a CPU
    tensor): chunk sizes that do not sum to the dimension, or a negative one, raise its
    RuntimeErrors; zeros are allowed."""
    a = _on(np.arange(10.0).reshape(5, 2), f"{be}:0")
    with pytest.raises(RuntimeError, match=r"^split_with_sizes expects split_sizes to sum "
                                           r"exactly to 5 \(input array's size at dimension 0\), "
                                           r"but got split_sizes=\[2, 2\]"):
        comm.scatter(a, (0, 1), chunk_sizes=(2, 2))
    with pytest.raises(RuntimeError, match=r"^split_with_sizes expects split_sizes have only "
                                           r"non-negative entries, but got split_sizes=\[-1, 6\]"):
        comm.scatter(a, (0, 1), chunk_sizes=(-1, 6))
    with pytest.raises(RuntimeError, match=r"^split_with_sizes expects split_sizes to sum "
                                           r"exactly to 2 \(input array's size at dimension 1\)"):
        comm.scatter(a, (0, 1), chunk_sizes=(1, 2), dim=-1)
    parts = comm.scatter(a, (0, 1), chunk_sizes=(5, 0))
    assert [p.shape for p in parts] == [(5, 2), (0, 2)]


def test_scatter_argument_classes_as_torch(be: str) -> None:
    """torch 2.15 (CPU tensor): ``comm.scatter(t)`` raises TypeError (its Python iterates
    ``devices=None``), a 0-d tensor RuntimeError "chunk expects at least a 1-dimensional
    tensor", a ``dim`` out of range IndexError "Dimension out of range (expected to be in range
    of [-2, 1], but got 2)"."""
    a = _on(np.arange(10.0).reshape(5, 2), f"{be}:0")
    with pytest.raises(TypeError) as info:
        comm.scatter(a)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, ValueError)
    with pytest.raises(RuntimeError, match=r"^chunk expects at least a 1-dimensional array"):
        comm.scatter(_on(np.array(1.0), f"{be}:0"), (0, 1))
    with pytest.raises(IndexError, match=r"^Dimension out of range \(expected to be in range of "
                                         r"\[-2, 1\], but got 2\)$"):
        comm.scatter(a, (0, 1), dim=2)
    with pytest.raises(IndexError, match=r"^Dimension out of range \(expected to be in range of "
                                         r"\[-2, 1\], but got 3\)$"):
        comm.scatter(a, dim=3, out=[_on(np.zeros((5, 2)), f"{be}:1")])


def test_scatter_splits_like_torch_chunk(be: str) -> None:
    """torch 2.15's ``Tensor.chunk`` (what ``comm.scatter`` uses without ``chunk_sizes``):
    5 rows over 4 devices are three pieces (2, 2, 1); 0 rows over 4 devices are four empty
    pieces (both checked with torch 2.15)."""
    parts = comm.scatter(_on(np.zeros((5, 3)), f"{be}:0"), (0, 1, 2, 0))
    assert [p.shape for p in parts] == [(2, 3), (2, 3), (1, 3)]
    assert [str(p.device) for p in parts] == [f"{be}:0", f"{be}:1", f"{be}:2"]
    parts = comm.scatter(_on(np.zeros((0, 3)), f"{be}:0"), (0, 1, 2, 0))
    assert [p.shape for p in parts] == [(0, 3)] * 4


def test_scatter_streams(be: str) -> None:
    """torch 2.15's ``comm.scatter(..., streams=...)``: a piece copied to another device goes
    on the given stream of that device; a stream of another device raises RuntimeError
    "Expected the device associated with the stream at index 1 (was 0) to match the device
    supplied at that index (expected 1)"."""
    x = np.arange(8.0).reshape(4, 2)
    a = _on(x, f"{be}:0")
    s1 = acc.Stream(f"{be}:1")
    parts = comm.scatter(a, (0, 1), streams=[None, s1])
    s1.synchronize()
    _same(be, parts[1], x[2:])
    with pytest.raises(RuntimeError, match=r"^Expected the device associated with the stream "
                                           r"at index 1 .*to match the device supplied at that "
                                           r"index"):
        comm.scatter(a, (0, 1), streams=[None, acc.Stream(f"{be}:0")])


# ---------------------------------------------------------------------- gather

@pytest.mark.parametrize("dim", [0, 1, -1])   # test_gather, test_gather_dim, test_gather_neg_dim
def test_gather(be: str, dim: int) -> None:
    """mirrors test_cuda_multigpu.py TestCudaComm test_gather, test_gather_dim and
    test_gather_neg_dim (_test_gather): with device 1 current, destination None (the current
    device), device 0, the host (PyTorch's ``"cpu"``: ``-1`` here, a numpy array) and device
    2, with and without ``out=``; then the argument errors."""
    r = _rng()
    xh, yh = r.standard_normal((2, 5)), r.standard_normal((2, 5))
    x, y = _on(xh, f"{be}:0"), _on(yh, f"{be}:1")
    expected = np.concatenate([xh, yh], axis=dim)
    mod = acc.backends.device_module(be)
    mod.set_device(1)
    for destination in (None, 0, -1, 2):
        where = {None: f"{be}:1", 0: f"{be}:0", -1: "host", 2: f"{be}:2"}[destination]
        for use_out in (True, False):
            if use_out:
                out: Any = (np.empty(expected.shape) if where == "host" else
                            acc.empty(expected.shape, dtype="float64", device=where))
                result: Any = comm.gather((x, y), dim, out=out)
                assert result is out
            else:
                result = comm.gather((x, y), dim, destination=destination)
            if where == "host":
                assert isinstance(result, np.ndarray)
            else:
                assert str(result.device) == where
            assert tuple(result.shape) == expected.shape
            if be == CPU:   # a numpy result gathered from the simulated devices holds garbage
                _same(be, result, expected)
    mod.set_device(0)

    with pytest.raises(RuntimeError, match=r"^'destination' must not be specified"):
        comm.gather((x, y), dim, destination=-1, out=np.empty(expected.shape))
    with pytest.raises(RuntimeError, match=r"^Expected at least one array to gather from"):
        comm.gather(())
    with pytest.raises(RuntimeError, match=r"^Expected all input arrays to be accelrt arrays, "):
        comm.gather((xh, y))
    with pytest.raises(RuntimeError, match=r"^Expected all input arrays to have the same number "
                                           r"of dimensions"):
        comm.gather((x, _on(yh[None], f"{be}:1")))
    with pytest.raises(RuntimeError, match=r"^Input array at index 1 has invalid shape"):
        bad = yh[:, 1:] if dim in (0, -2) else yh[1:, :]
        comm.gather((x, _on(np.ascontiguousarray(bad), f"{be}:1")), dim=dim)


def test_gather_errors_as_torch(be: str) -> None:
    """torch 2.15's ``comm.gather`` (CPU tensors): ``dim`` out of range IndexError "Dimension
    out of range (expected to be in range of [-2, 1], but got 5)"; an ``out`` of the wrong
    shape RuntimeError "Expected out tensor to have shape ..."."""
    x = _on(np.ones((2, 5)), f"{be}:0")
    with pytest.raises(IndexError, match=r"^Dimension out of range \(expected to be in range of "
                                         r"\[-2, 1\], but got 5\)$"):
        comm.gather([x], dim=5)
    with pytest.raises(RuntimeError, match=r"^Expected out array to have shape"):
        comm.gather([x, x], out=acc.empty((3, 5), dtype="float64", device=f"{be}:0"))


def test_scatter_then_gather_round_trip(cpu: str) -> None:
    """mirrors test_cuda_multigpu.py TestCudaComm test_memory_format_scatter_gather's data
    path (the memory format half does not apply: accelrt arrays are C-contiguous): what
    ``scatter`` splits, ``gather`` puts back."""
    x = _rng().standard_normal((10, 3, 4, 4)).astype(np.float32)
    parts = comm.scatter(x, (0, 1))
    assert [str(p.device) for p in parts] == [f"{cpu}:0", f"{cpu}:1"]
    np.testing.assert_array_equal(comm.gather(parts, destination=-1), x)
