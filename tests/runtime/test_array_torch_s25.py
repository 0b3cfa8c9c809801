"""``accelrt.Array`` against ``torch.Tensor`` where they differed (issue 25), each point settled
by PyTorch's source:

* ``fill_``/``full`` values by ``c10::checked_convert`` (c10/util/TypeCast.h) and
  ``c10::overflows`` (torch/headeronly/util/overflows.h, torch >= 2.14): negative ints wrap into
  unsigned dtypes when their magnitude fits, a float fills an integer dtype below ``max + 1``,
  bool takes any number, with PyTorch's "value cannot be converted to type ... without
  overflow"; ``fill_`` with a 0-d array (aten/src/ATen/native/Fill.cpp);
* ``copy_`` broadcasts its source (aten/src/ATen/native/Copy.cpp: a ``TensorIterator`` with
  ``resize_outputs(false)``, whose shape errors are ``infer_size``'s and "output with shape
  ... doesn't match the broadcast shape ...") for every copy direction;
* ``len()``, ``bool()`` and ``iter()`` (torch/_tensor.py, ``at::native::is_nonzero``);
* ``pin_memory=None`` in every factory that takes ``pin_memory`` (PyTorch's ``Optional[bool]``).
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends
from helpers.staging import RecordingNoHostCpu

import accelrt as acc
from accelrt import backends
from accelrt._errors import AcceleratorTypeError, AcceleratorValueError
from accelrt._transfer import (Copy, HostCopy, broadcast_on_device, broadcast_runs, execute,
                               plan_array_copy, run_on_stream)
from accelrt.backends.cpu import CpuBackend

# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({
    "s25arr": lambda: CpuBackend(num_devices=2, async_streams=True, name="s25arr"),
    "s25nohost": lambda: RecordingNoHostCpu(num_devices=2, async_streams=True,
                                            name="s25nohost"),
})
D0, D1 = "s25arr:0", "s25arr:1"
H0, H1 = "s25nohost:0", "s25nohost:1"


# ---------------------------------------------------------------------- fill_ / full values

UNSIGNED = [("uint8", 8), ("uint16", 16), ("uint32", 32), ("uint64", 64)]


@pytest.mark.parametrize("dtype, bits", UNSIGNED)
def test_negative_ints_wrap_into_unsigned_dtypes_when_their_magnitude_fits(dtype: str,
                                                                           bits: int) -> None:
    top = (1 << bits) - 1
    lowest = -top if bits < 64 else -(1 << 63)     # PyTorch's Scalar holds an int64
    for value, want in ((-1, top), (-2, top - 1), (lowest, lowest + (1 << bits)), (top, top)):
        for dev in (D0, H0):
            assert acc.zeros(2, dtype=dtype, device=dev).fill_(value).tolist() == [want] * 2
        assert acc.full((2,), value, dtype=dtype, device=D0).tolist() == [want] * 2
        assert acc.full((2,), value, dtype=dtype, pin_memory=True).tolist() == [want] * 2
    a = acc.zeros(2, dtype=dtype, device=D0)
    for bad in (lowest - 1, top + 1):
        with pytest.raises(AcceleratorValueError,
                           match=f"value cannot be converted to type {dtype}_t without "
                                 "overflow") as ei:
            a.fill_(bad)
        assert isinstance(ei.value, RuntimeError)
    assert a.tolist() == [0, 0]


FLOAT_BOUNDS = [   # (dtype, value, result or None when refused): c10::overflows for floats
    ("int8", 127.9, 127), ("int8", 127.0, 127), ("int8", 128.0, None), ("int8", -128.0, -128),
    ("int8", -128.5, None), ("int8", -0.9, 0), ("uint8", 255.99, 255), ("uint8", -0.0, 0),
    ("uint8", -0.5, None), ("uint8", 256.0, None), ("int32", 2147483647.5, 2147483647),
    ("int32", 2147483648.0, None), ("int64", 9223372036854774784.0, 9223372036854774784),
    ("int64", 2.0 ** 63, None), ("uint64", 18446744073709549568.0, 18446744073709549568),
    ("uint64", 2.0 ** 64, None), ("uint16", float("inf"), None), ("int16", float("nan"), None),
]


@pytest.mark.parametrize("dtype, value, want", FLOAT_BOUNDS, ids=str)
def test_floats_fill_integer_dtypes_below_max_plus_one(dtype: str, value: float,
                                                       want: int | None) -> None:
    a = acc.zeros(3, dtype=dtype, device=D0)
    if want is None:
        with pytest.raises(AcceleratorValueError, match="without overflow"):
            a.fill_(value)
        with pytest.raises(AcceleratorValueError, match="without overflow"):
            acc.full((3,), value, dtype=dtype, device=H0)
        assert a.tolist() == [0] * 3
    else:
        assert a.fill_(value).tolist() == [want] * 3
        assert acc.full((3,), np.float64(value), dtype=dtype, device=H0).tolist() == [want] * 3


@pytest.mark.parametrize("value, want", [(1j, True), (complex(0, float("nan")), True),
                                         (0j, False), (2 ** 70, True), (-1, True),
                                         (float("nan"), True), (-0.0, False)], ids=repr)
def test_bool_arrays_take_any_number_as_pytorch_never_checks_a_conversion_to_bool(
        value: object, want: bool) -> None:
    assert acc.zeros(2, dtype="bool", device=D0).fill_(value).tolist() == [want] * 2
    assert acc.full((2,), value, dtype="bool", device=H0).tolist() == [want] * 2  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype, value, ctype, exc", [
    ("int32", 2 ** 31, "int", AcceleratorValueError),
    ("int64", 2 ** 63, "int64_t", AcceleratorValueError),
    ("int16", -2 ** 15 - 1, "int16_t", AcceleratorValueError),
    ("float16", 65520.0, "c10::Half", AcceleratorValueError),
    ("float32", 1e39, "float", AcceleratorValueError),
    ("complex64", complex(0, 1e39), "c10::complex<float>", AcceleratorValueError),
    ("float64", 1 + 1j, "double", AcceleratorTypeError),
    ("uint32", -2 ** 32, "uint32_t", AcceleratorValueError),
])
def test_refusals_carry_pytorchs_overflow_message(dtype: str, value: object, ctype: str,
                                                   exc: type[Exception]) -> None:
    with pytest.raises(exc) as ei:
        acc.zeros(1, dtype=dtype, device=D0).fill_(value)
    assert f"value cannot be converted to type {ctype} without overflow" in str(ei.value)
    assert isinstance(ei.value, RuntimeError)


def test_fill_with_a_0d_array_copies_on_its_device_and_reads_it_elsewhere() -> None:
    src = acc.full((), 7, dtype="int64", device=D0)
    a = acc.zeros((2, 3), dtype="int32", device=D0)
    assert a.fill_(src) is a and a.tolist() == [[7] * 3] * 2
    # on the same device the value is copied in stream order, without the overflow check
    # (PyTorch's copy_): later work on the stream is seen, whatever the host does meanwhile
    s = acc.Stream(D0)
    with s:
        src.fill_(9)
        a.fill_(src)
    s.synchronize()
    assert a.tolist() == [[9] * 3] * 2
    assert acc.zeros((), dtype="int64", device=D0).fill_(acc.zeros((), device=D0)).tolist() == 0
    for elsewhere in (D1, H0):            # another device or backend: item(), then checked
        assert a.fill_(acc.full((), -3, device=elsewhere)).tolist() == [[-3] * 3] * 2
        with pytest.raises(AcceleratorValueError, match="does not fit in uint8"):
            acc.zeros(2, dtype="uint8", device=D0).fill_(acc.full((), 300, device=elsewhere))
    for shape in ((1,), (2, 2)):
        with pytest.raises(AcceleratorValueError,
                           match=f"^fill_ only supports 0-dimension value tensor but got tensor "
                                 f"with {len(shape)} dimensions"):
            a.fill_(acc.zeros(shape, device=D0))
    assert a.tolist() == [[-3] * 3] * 2


def test_full_reads_a_0d_array_as_a_number() -> None:
    # PyTorch parses a 0-d tensor given as a Number with item(): the dtype follows its kind
    for value, dtype in ((acc.full((), 2.5, dtype="float64", device=D1), "float32"),
                         (acc.full((), 4, dtype="int8", device=H0), "int64"),
                         (acc.full((), True, device=D0), "bool")):
        out = acc.full((2,), value, device=D0)
        assert out.dtype == np.dtype(dtype) and out.tolist() == [value.tolist()] * 2
    assert acc.full((2,), acc.full((), 3, device=D0), pin_memory=True).tolist() == [3, 3]
    with pytest.raises(TypeError, match="0-d accelrt.Array"):
        acc.full((2,), acc.zeros(1, device=D0), dtype="float32", device=D0)


# ---------------------------------------------------------------------- copy_ broadcasting

BROADCASTS = [((2, 3), (3,)), ((2, 3), (1, 3)), ((2, 3), (2, 1)), ((2, 3), ()), ((2, 3), (1,)),
              ((4, 5, 3), (5, 1)), ((3, 1, 4), (1, 1, 4)), ((2, 3, 4, 5), (3, 1, 5)),
              ((2, 3, 4, 5), (2, 1, 4, 1)), ((5, 1), (1,)), ((40, 7), (40, 1)),
              ((3, 40, 2), (1, 40, 1)), ((0, 3), (3,)), ((2, 0), (1,)), ((6,), (6,))]


def _host_source(src_shape: tuple[int, ...]) -> np.ndarray:
    return np.arange(1, int(np.prod(src_shape)) + 1, dtype=np.float64).reshape(src_shape)


def _sources(host: np.ndarray, dst: str) -> Iterator[tuple[str, Any]]:
    """Every kind of source ``copy_`` takes, beside a destination on ``dst``."""
    backend = dst.split(":")[0]
    yield "same device", acc.asarray(host, device=dst, copy=True)
    yield "peer device", acc.asarray(host, device=f"{backend}:1", copy=True)
    other = H0 if backend == "s25arr" else D0
    yield "other backend", acc.asarray(host, device=other, copy=True)
    if backend == "s25arr":          # memory borrowed from numpy (host memory on a device)
        yield "borrowed, same device", acc.asarray(host.copy(), device=D0)
        yield "borrowed, peer device", acc.asarray(host.copy(), device=D1)
    yield "numpy", host.copy()
    if host.size:                    # an empty nested list loses its shape
        yield "list", host.tolist()
    yield "other dtype", acc.asarray(host.astype(np.int16), device=dst, copy=True)


@pytest.mark.parametrize("dst_shape, src_shape", BROADCASTS, ids=str)
@pytest.mark.parametrize("dst", [D0, H0])
def test_copy_broadcasts_every_source_kind(dst_shape: tuple[int, ...],
                                           src_shape: tuple[int, ...], dst: str) -> None:
    host = _host_source(src_shape)
    want = np.broadcast_to(host, dst_shape)
    for non_blocking in (False, True):
        for what, src in _sources(host, dst):
            out = acc.full(dst_shape, -1.0, dtype="float64", device=dst)
            assert out.copy_(src, non_blocking=non_blocking) is out
            acc.synchronize(dst)
            assert np.array_equal(out.numpy(), want), (what, non_blocking)


@pytest.mark.parametrize("dst_shape, src_shape", [((2, 3), (3,)), ((40, 7), (40, 1)),
                                                  ((3, 40, 2), (1, 40, 1)), ((9,), ())])
def test_copy_broadcasts_into_borrowed_host_memory(dst_shape: tuple[int, ...],
                                                   src_shape: tuple[int, ...]) -> None:
    host = _host_source(src_shape)
    for dev, non_blocking in itertools.product((D0, D1), (False, True)):
        buf = np.full(dst_shape, -1.0)
        out = acc.asarray(buf, device=dev)             # borrows buf
        out.copy_(acc.asarray(host, device=D0, copy=True), non_blocking=non_blocking)
        acc.synchronize(dev)
        assert np.array_equal(buf, np.broadcast_to(host, dst_shape)), (dev, non_blocking)


def test_strided_numpy_sources_broadcast_as_their_values() -> None:
    # an Array is always C-contiguous; a numpy source may have any strides (negative too)
    base = np.arange(24.0).reshape(4, 6)
    for src, shape in ((base[::2, ::3], (3, 2, 2)), (base.T[:1], (5, 4)), (base[0, ::-1], (2, 6)),
                       (np.broadcast_to(np.arange(3.0), (2, 3)), (4, 2, 3))):
        for dev in (D0, H0):
            out = acc.zeros(shape, dtype="float64", device=dev)
            for non_blocking in (False, True):
                out.copy_(src, non_blocking=non_blocking)
                acc.synchronize(dev)
                assert np.array_equal(out.numpy(), np.broadcast_to(src, shape))


def test_broadcast_copies_are_ordered_on_the_streams_of_both_devices() -> None:
    # asynchronous cpu streams: the copy waits for the source's pending fill and the
    # destination's later work waits for the copy, as for a same-shape peer copy
    src = acc.zeros((3,), device=D0)
    out = acc.zeros((50, 3), device=D1)
    for value in (1.0, 2.0, 3.0):
        src.fill_(value)
        out.copy_(src)
        out.copy_(out.numpy()[::-1].copy())     # host data read at the call: synchronizes
        assert out.tolist() == [[value] * 3] * 50


def test_broadcast_runs_reproduce_numpy_broadcasting() -> None:
    rng = random.Random(25)
    for _ in range(400):
        dst = tuple(rng.choice((1, 2, 3, 5)) for _ in range(rng.randint(0, 4)))
        src = tuple(d if rng.random() < 0.5 else 1 for d in dst[rng.randint(0, len(dst)):])
        host = np.arange(int(np.prod(src)), dtype=np.int16).reshape(src)
        raw = host.reshape(-1).view(np.uint8)
        out = np.zeros(int(np.prod(dst)) * 2, np.uint8)
        bc = broadcast_runs(dst, src, 2)
        for steps, source in ((bc.scatter, raw), (bc.fill, out)):
            for dst_off, src_off, run, nruns, dst_pitch, src_pitch in steps:
                for k in range(nruns):
                    s, d = src_off + k * src_pitch, dst_off + k * dst_pitch
                    assert source is raw or d >= s + run or s >= d + run  # no overlap
                    out[d:d + run] = source[s:s + run]
        assert np.array_equal(out.view(np.int16).reshape(dst), np.broadcast_to(host, dst)), \
            (dst, src)


def test_broadcast_runs_stay_few() -> None:
    one = broadcast_runs((1000, 1000), (), 4)         # a scalar: one run, then doubling
    assert len(one.scatter) == 1 and len(one.fill) == 20
    rows = broadcast_runs((64, 3), (3,), 8)
    assert rows.scatter == ((0, 0, 24, 1, 0, 0),)
    assert len(rows.fill) == 6 and all(r[3] == 1 for r in rows.fill)
    cols = broadcast_runs((64, 3), (64, 1), 8)        # a column: strided runs
    assert cols.scatter == ((0, 0, 8, 64, 24, 8),)
    assert cols.fill == ((8, 0, 8, 64, 24, 24), (16, 0, 8, 64, 24, 24))
    assert broadcast_runs((0, 3), (3,), 8) == ((), ())


def test_a_broadcast_is_planned_as_data_before_any_byte_moves() -> None:
    src = acc.full((3,), 2.0, device=D0)
    dst = acc.zeros((4, 3), device=D1)
    plan = plan_array_copy(dst, src, False, broadcast_runs(dst.shape, src.shape, 4))
    assert [type(s).__name__ for s in plan.steps] == ["Barrier", "Copy", "Barrier", "Copy",
                                                      "Copy"]
    peer, fill = plan.steps[1], plan.steps[3:]
    assert isinstance(peer, Copy) and peer.kind == "peer" and peer.run == 12
    assert all(isinstance(s, Copy) and s.kind == "d2d" and s.stream == acc.current_stream(D1)
               for s in fill)
    assert dst.tolist() == [[0.0] * 3] * 4                 # nothing has moved yet
    execute(plan)
    assert dst.tolist() == [[2.0] * 3] * 4
    # many runs between memory the host reads: one numpy copy in stream order per step
    col, wide = acc.full((40, 1), 1.0, device=D0), acc.zeros((40, 5), device=D0)
    steps = plan_array_copy(wide, col, False, broadcast_runs((40, 5), (40, 1), 4)).steps
    assert [type(s) for s in steps] == [HostCopy] * 4
    nohost_col, nohost = acc.full((40, 1), 1.0, device=H0), acc.zeros((40, 5), device=H0)
    steps = plan_array_copy(nohost, nohost_col, False,
                            broadcast_runs((40, 5), (40, 1), 4)).steps
    assert [type(s) for s in steps] == [Copy] * 4 and steps[0].nruns == 40


def test_a_broadcast_of_many_runs_is_expanded_on_the_host_where_the_host_cannot_read() -> None:
    # (64, 1) into (64, 50) on a device without 2-D copies: 64 * (1 + 6) runs; through the
    # host instead (one download, one upload); memory the host reads keeps the device plan
    col = np.arange(64.0).reshape(64, 1)
    for dev, on_device in ((H0, False), (D0, True)):
        src = acc.asarray(col, device=dev, copy=True)
        out = acc.zeros((64, 50), dtype="float64", device=dev)
        bc = broadcast_runs(out.shape, src.shape, 8)
        assert broadcast_on_device(out, src, bc) is on_device
        assert broadcast_on_device(out, src, broadcast_runs((64, 50), (50,), 8))
        nohost = backends.get_backend("s25nohost")
        assert isinstance(nohost, RecordingNoHostCpu)
        before = len(nohost.copies)
        out.copy_(src)
        assert np.array_equal(out.numpy(), np.broadcast_to(col, (64, 50)))
        if dev == H0:
            assert len(nohost.copies) - before <= 4          # a download and an upload


def test_a_broadcast_copy_is_captured_into_a_graph_and_replays() -> None:
    src = acc.full((3,), 1.0, device="cpu:0")
    col = acc.full((20, 1), 2.0, device="cpu:0")
    out, wide = acc.zeros((4, 3), device="cpu:0"), acc.zeros((20, 5), device="cpu:0")
    s, g = acc.Stream("cpu:0"), acc.Graph()
    with s, g:
        out.copy_(src)
        wide.copy_(col)
    assert out.tolist() == [[0.0] * 3] * 4                  # captured, not run
    src.fill_(5.0)
    col.fill_(6.0)
    g.replay()
    acc.synchronize("cpu:0")
    assert out.tolist() == [[5.0] * 3] * 4 and wide.tolist() == [[6.0] * 5] * 20
    g.close()
    # many runs where the host cannot read: under capture still by runs (a host round trip
    # cannot be captured)
    hcol, hwide = acc.full((64, 1), 3.0, device=H0), acc.zeros((64, 50), device=H0)
    hs, hg = acc.Stream(H0), acc.Graph()
    with acc.graph(hg, stream=hs):
        assert broadcast_on_device(hwide, hcol, broadcast_runs((64, 50), (64, 1), 4))
        hwide.copy_(hcol)
    hcol.fill_(4.0)
    hg.replay()
    acc.synchronize(H0)
    assert hwide.tolist() == [[4.0] * 50] * 64
    hg.close()


REFUSED = [  # (dst, src, PyTorch's message)
    ((2, 3), (3, 2),
     "The size of tensor a (3) must match the size of tensor b (2) at non-singleton dimension 1"),
    ((2, 3), (2,),
     "The size of tensor a (3) must match the size of tensor b (2) at non-singleton dimension 1"),
    ((2, 3), (3, 1),
     "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 0"),
    ((3,), (1, 3), "output with shape [3] doesn't match the broadcast shape [1, 3]"),
    ((2, 1), (2, 3), "output with shape [2, 1] doesn't match the broadcast shape [2, 3]"),
    ((), (1,), "output with shape [] doesn't match the broadcast shape [1]"),
    ((0,), (2,),
     "The size of tensor a (0) must match the size of tensor b (2) at non-singleton dimension 0"),
    ((2, 3), (0, 3),
     "The size of tensor a (2) must match the size of tensor b (0) at non-singleton dimension 0"),
]


@pytest.mark.parametrize("dst_shape, src_shape, message", REFUSED, ids=str)
def test_a_source_that_does_not_broadcast_gets_pytorchs_error_and_writes_nothing(
        dst_shape: tuple[int, ...], src_shape: tuple[int, ...], message: str) -> None:
    host = np.ones(src_shape)
    for dst in (D0, H0):
        out = acc.zeros(dst_shape, dtype="float64", device=dst)
        for _, src in _sources(host, dst):
            with pytest.raises(AcceleratorValueError) as ei:
                out.copy_(src)
            assert str(ei.value).startswith(message) and isinstance(ei.value, RuntimeError)
            assert "shape mismatch" in str(ei.value)
        assert not out.numpy().any()


def test_copy_into_itself_skips_the_shape_check_as_pytorch() -> None:
    a = acc.full((2, 3), 1.0, device=D0)
    assert a.copy_(a) is a and a.tolist() == [[1.0] * 3] * 2


# ---------------------------------------------------------------------- len, bool, iter

def test_len_is_the_first_dimension_and_refuses_0d() -> None:
    assert [len(acc.zeros(s, device=D0)) for s in ((4,), (0, 3), (2, 5, 1))] == [4, 0, 2]
    with pytest.raises(TypeError, match=r"^len\(\) of a 0-d tensor$"):
        len(acc.zeros((), device=D0))


@pytest.mark.parametrize("dtype, value, want", [
    ("float32", 0.0, False), ("float32", -0.0, False), ("float32", 0.5, True),
    ("float64", float("nan"), True), ("int64", 0, False), ("int8", -3, True),
    ("uint8", 0, False), ("bool", True, True), ("bool", False, False),
    ("complex64", 0j, False), ("complex64", 1j, True)], ids=str)
@pytest.mark.parametrize("shape", [(), (1,), (1, 1)], ids=str)
def test_bool_of_one_element_is_its_value(dtype: str, value: object, want: bool,
                                           shape: tuple[int, ...]) -> None:
    for dev in (D0, H0):
        a = acc.full(shape, value, dtype=dtype, device=dev)  # type: ignore[arg-type]
        assert bool(a) is want
        assert (1 if a else 0) == int(want)


def test_bool_waits_for_the_work_queued_on_the_current_stream() -> None:
    a = acc.full((), 1.0, device=D0)
    gate = threading.Event()
    run_on_stream(acc.current_stream(D0), lambda: gate.wait(5.0))
    a.fill_(0.0)                                    # queued behind the gate
    timer = threading.Timer(0.05, gate.set)
    timer.start()
    assert bool(a) is False                         # item(): synchronizes, as PyTorch's
    timer.join()


@pytest.mark.parametrize("shape, what", [((0,), "no values"), ((2,), "more than one value"),
                                         ((2, 2), "more than one value"),
                                         ((0, 3), "no values")])
def test_bool_of_empty_or_many_elements_is_ambiguous(shape: tuple[int, ...], what: str) -> None:
    a = acc.zeros(shape, device=D0)
    for truth in (bool, lambda x: not x, lambda x: x or 1):
        with pytest.raises(AcceleratorValueError,
                           match=f"^Boolean value of Tensor with {what} is ambiguous$") as ei:
            truth(a)
        assert isinstance(ei.value, RuntimeError) and isinstance(ei.value, ValueError)


def test_iteration_refuses_with_pytorchs_0d_message_and_says_why_otherwise() -> None:
    with pytest.raises(TypeError, match=r"^iteration over a 0-d tensor$"):
        iter(acc.zeros((), device=D0))
    for shape in ((3,), (2, 2), (0,)):
        with pytest.raises(TypeError, match=r"no views; iterate over a\.numpy\(\)"):
            list(acc.zeros(shape, device=D0))


# ---------------------------------------------------------------------- pin_memory=None

FACTORIES: list[tuple[str, Callable[..., Any]]] = [
    ("empty", lambda **kw: acc.empty(2, **kw)), ("zeros", lambda **kw: acc.zeros(2, **kw)),
    ("ones", lambda **kw: acc.ones(2, **kw)), ("full", lambda **kw: acc.full((2,), 1.0, **kw)),
    ("rand", lambda **kw: acc.rand(2, **kw)), ("randn", lambda **kw: acc.randn(2, **kw)),
]


@pytest.mark.parametrize("name, make", FACTORIES, ids=[n for n, _ in FACTORIES])
def test_pin_memory_none_means_false(name: str, make: Callable[..., Any]) -> None:
    out = make(pin_memory=None, device=D0)
    assert isinstance(out, acc.Array) and str(out.device) == D0
    assert isinstance(make(pin_memory=None), acc.Array)
    assert acc.is_pinned(make(pin_memory=True))
    for bad in (1, 0, "yes", np.True_):
        with pytest.raises(TypeError, match="^pin_memory must be a bool or None, got"):
            make(pin_memory=bad, device=D0)
