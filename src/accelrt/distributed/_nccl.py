"""The ``"nccl"`` engine: NVIDIA's nccl4py (``nccl.core``) for CUDA arrays.

Each call enqueues on the group's comm stream (an accelrt cuda ``Stream``, which implements
``__cuda_stream__``) and returns at once, as NCCL does. Buffers are passed as small
``__cuda_array_interface__`` spans (address, count, dtype), so sub-ranges of an array
(``all_to_all_single`` splits, ``all_gather`` lists) need no copies. Errors: whatever nccl4py
raises, and this engine's ``RuntimeError`` for an NCCL result code, become
:class:`~accelrt.distributed.DistBackendError` at the group's boundary;
``get_async_error()`` is polled by the group for errors of queued work.

Example::

    >>> import numpy as np
    >>> from accelrt.distributed._engine import Buf
    >>> from accelrt.distributed._nccl import Span
    >>> Span(Buf(4096, 8, np.dtype("float32"), 0)).__cuda_array_interface__["shape"]
    (8,)
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._stream import Stream
from ._engine import (Buf, Engine, EngineContext, PremulSum, RedOp, ReduceOp, Request,
                      cuda_memory)
from ._errors import DistError

if TYPE_CHECKING:
    from ._group_core import GroupCore

__all__ = ["NcclEngine", "Span", "a2a_plan", "check_one_rank_per_gpu", "nccl_available"]

_IN_PROGRESS = 7   # ncclInProgress


def _core() -> Any:
    return importlib.import_module("nccl.core")


def nccl_available() -> bool:
    """True if ``nccl.core`` (nccl4py with its CUDA bindings) imports."""
    try:
        _core()
    except Exception:   # ImportError, or cuda.bindings missing under a bare nccl4py
        return False
    return True


class Span:
    """A device buffer for nccl4py: ``count`` elements of ``dtype`` at ``ptr``."""

    __slots__ = ("_buf",)

    def __init__(self, buf: Buf) -> None:
        self._buf = buf

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        b = self._buf
        return {"shape": (b.count,), "typestr": b.dtype.str, "data": (b.ptr, False),
                "version": 3, "strides": None}


def _op(op: ReduceOp, dtype: np.dtype[Any]) -> Any:
    core = _core()
    if op is ReduceOp.PREMUL_SUM:
        raise ValueError("ReduceOp.PREMUL_SUM needs its factor: pass "
                         "op=accelrt.distributed._make_nccl_premul_sum(factor)")
    if dtype.kind == "b":
        op = {ReduceOp.SUM: ReduceOp.MAX, ReduceOp.PRODUCT: ReduceOp.MIN}.get(op, op)
    return {ReduceOp.SUM: core.SUM, ReduceOp.PRODUCT: core.PROD, ReduceOp.MIN: core.MIN,
            ReduceOp.MAX: core.MAX, ReduceOp.AVG: core.AVG}[op]


def _as_nccl(buf: Buf) -> Span:
    if buf.dtype.kind == "b":   # NCCL has no bool: bytes
        buf = Buf(buf.ptr, buf.count, np.dtype(np.uint8), buf.device)
    elif buf.dtype.kind == "c":   # complex as twice as many reals (sum only), as cupyx does
        buf = Buf(buf.ptr, buf.count * 2, np.dtype(f"f{buf.dtype.itemsize // 2}"), buf.device)
    return Span(buf)


def a2a_plan(send_counts: Sequence[int],
             recv_counts: Sequence[int]) -> list[tuple[int, int, int, int, int]]:
    """The point-to-point steps of an all-to-all: ``(peer, send_offset, send_count,
    recv_offset, recv_count)`` per peer, offsets and counts in elements, peers with nothing to
    send or receive left out.

    Example::

        >>> a2a_plan([1, 0, 2], [2, 1, 0])
        [(0, 0, 1, 0, 2), (1, 1, 0, 2, 1), (2, 1, 2, 3, 0)]
    """
    if len(send_counts) != len(recv_counts):
        raise ValueError(f"all_to_all: {len(send_counts)} send counts but "
                         f"{len(recv_counts)} receive counts")
    plan = []
    so = ro = 0
    for peer, (sc, rc) in enumerate(zip(send_counts, recv_counts)):
        if sc < 0 or rc < 0:
            raise ValueError(f"all_to_all: negative count for peer {peer}")
        if sc or rc:
            plan.append((peer, so, sc, ro, rc))
        so += sc
        ro += rc
    return plan


def settle(comm: Any, timeout: float, what: str) -> None:
    """Wait until a non-blocking communicator is done *enqueueing* (not executing) its last
    call.

    NCCL's non-blocking communicators may return ``ncclInProgress`` from any call, and
    nccl4py's bindings do not raise on it. A group with point-to-point work (``all_to_all``,
    ``send``/``recv``) is then launched by a background thread, so the kernels reach the stream
    *later*: an event recorded on the stream before that covers nothing. NCCL's rule (nccl4py's
    ``get_async_error``): poll until ``ncclSuccess`` before any other NCCL call or stream work.
    """
    res = comm.get_async_error()
    if int(res) == 0:
        return
    deadline = time.monotonic() + timeout
    while int(res) == _IN_PROGRESS:
        if time.monotonic() > deadline:
            raise RuntimeError(f"NCCL did not finish enqueueing {what} within {timeout:g} s")
        time.sleep(0)
        res = comm.get_async_error()
    if int(res) != 0:
        raise RuntimeError(f"NCCL error {res!r} in {what}: {_core().get_error_string(res)}")


class _NcclRequest(Request):
    def __init__(self, event: Any, peer: int) -> None:
        self._event, self._peer = event, peer

    def test(self) -> bool:
        return bool(self._event.query())

    def wait(self) -> int:
        self._event.synchronize()
        return self._peer


class NcclEngine(Engine):
    """One nccl4py ``Communicator`` per group and device."""

    name = "nccl"
    host_memory = False
    stream_ordered = True
    grouped_p2p = True      # batch_isend_irecv's operations go in one NCCL group

    def p2p_group(self) -> Any:
        """nccl4py's ``group()`` (``ncclGroupStart``/``ncclGroupEnd``), process-wide: one
        serves every NCCL communicator of the batch."""
        return _core().group()

    def p2p_group_settle(self, timeout: float, what: str) -> None:
        settle(self.comm, timeout, what)

    def __init__(self, comm: Any, device: int, timeout: float = 600.0) -> None:
        self.comm = comm
        self.device = device
        self.timeout = timeout
        self.size = int(comm.nranks)
        self.rank = int(comm.rank)

    @classmethod
    def create(cls, ctx: EngineContext) -> NcclEngine:
        from ._errors import DistBackendError, DistTimeoutError
        try:
            core = _core()
        except ImportError as exc:
            raise DistBackendError(
                "the 'nccl' engine needs nccl4py built for your CUDA major version: pip "
                "install 'accelrt[nccl-cu12]' or 'accelrt[nccl-cu13]' (nccl4py[cu12] or "
                f"nccl4py[cu13]); importing nccl.core failed: {exc}", rank=ctx.rank) from exc
        uid = ctx.options.get("unique_id")
        if uid is None:
            if ctx.mpi_comm is None:
                raise DistBackendError("nccl: no unique id and no MPI to share one; use "
                                       "init_method='env://' or launch through mpiexec",
                                       rank=ctx.rank)
            raw = bytes(core.get_unique_id()) if ctx.rank == 0 else None
            raw = ctx.mpi_comm.bcast(raw, root=0)
            uid = core.UniqueId.from_bytes(raw)
        from .._device import _get_device, set_device_index
        set_device_index(f"cuda:{ctx.device_index}")
        # NCCL makes the communicator on the device whose context is current in this thread
        # (cudaGetDevice): set_device_index switches it when the index changes; init_device
        # also makes it current when the index was already current but had no context yet
        b, index = _get_device(f"cuda:{ctx.device_index}")
        b.init_device(index)
        config = core.NCCLConfig(blocking=False)
        comm = core.Communicator.init(ctx.size, ctx.rank, uid, config=config)
        _wait_ready(comm, ctx.timeout, ctx.rank, "init_process_group (NCCL communicator)",
                    DistTimeoutError)
        return cls(comm, ctx.device_index, ctx.timeout)

    def device_aware(self, device_type: str) -> bool:
        return cuda_memory(device_type)

    def supports(self, op: ReduceOp, dtype: np.dtype[Any]) -> str | None:
        if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR):
            return f"Cannot use {op} with NCCL (NCCL has no bitwise reductions)"   # torch's words
        if op is ReduceOp.PREMUL_SUM and dtype.kind != "f":
            return f"{op} needs a floating dtype on NCCL, got {dtype.name}"
        if op is ReduceOp.AVG and dtype.kind == "b":   # torch's words (bool travels as uint8)
            return "Cannot use ReduceOp.AVG with boolean inputs"
        if dtype.kind == "c" and op not in (ReduceOp.SUM, ReduceOp.AVG):
            return f"{op} is not defined for complex {dtype.name} on NCCL (use SUM or AVG)"
        if dtype.kind not in "biufc":
            return f"NCCL cannot move {dtype.name}"
        return None

    def _red(self, op: RedOp, dtype: np.dtype[Any]) -> Any:
        """NCCL's op for ``op``: PREMUL_SUM is NCCL's own (``ncclRedOpCreatePreMulSum`` with
        the factor in host memory, in the buffer's dtype), made per call and closed after."""
        if type(op) is PremulSum:
            return self.comm.create_pre_mul_sum(np.array([op.factor], dtype=dtype))
        assert type(op) is ReduceOp
        return _op(op, dtype)

    @staticmethod
    def _done(red: Any) -> None:
        close = getattr(red, "close", None)   # a CustomRedOp, once its call is enqueued
        if close is not None:
            close()

    def all_reduce(self, send: Buf | None, recv: Buf, op: RedOp, stream: Stream | None) -> None:
        r = _as_nccl(recv)
        red = self._red(op, recv.dtype)
        self.comm.allreduce(r if send is None else _as_nccl(send), r, red, stream=stream)
        settle(self.comm, self.timeout, "allreduce")
        self._done(red)

    def broadcast(self, buf: Buf, root: int, stream: Stream | None) -> None:
        b = _as_nccl(buf)
        self.comm.broadcast(b, b, root, stream=stream)
        settle(self.comm, self.timeout, "broadcast")

    def reduce(self, buf: Buf, op: RedOp, root: int, stream: Stream | None) -> None:
        b = _as_nccl(buf)
        red = self._red(op, buf.dtype)
        self.comm.reduce(b, b, red, root, stream=stream)
        settle(self.comm, self.timeout, "reduce")
        self._done(red)

    def all_gather(self, send: Buf, recv: Buf, stream: Stream | None) -> None:
        self.comm.allgather(_as_nccl(send), _as_nccl(recv), stream=stream)
        settle(self.comm, self.timeout, "allgather")

    def reduce_scatter(self, send: Buf, recv: Buf, op: RedOp, stream: Stream | None) -> None:
        red = self._red(op, recv.dtype)
        self.comm.reduce_scatter(_as_nccl(send), _as_nccl(recv), red, stream=stream)
        settle(self.comm, self.timeout, "reduce_scatter")
        self._done(red)

    def gather(self, send: Buf, recv: Buf | None, root: int, stream: Stream | None) -> None:
        s = _as_nccl(send)
        self.comm.gather(s, s if recv is None else _as_nccl(recv), root, stream=stream)
        settle(self.comm, self.timeout, "gather")

    def scatter(self, send: Buf | None, recv: Buf, root: int, stream: Stream | None) -> None:
        r = _as_nccl(recv)
        self.comm.scatter(r if send is None else _as_nccl(send), r, root, stream=stream)
        settle(self.comm, self.timeout, "scatter")

    def all_to_all(self, send: Buf, recv: Buf, send_counts: Sequence[int],
                   recv_counts: Sequence[int], stream: Stream | None) -> None:
        core = _core()
        plan = a2a_plan(send_counts, recv_counts)
        with core.group():
            for peer, so, sc, ro, rc in plan:
                if sc:
                    self.comm.send(_as_nccl(send.at(so, sc)), peer, stream=stream)
                if rc:
                    self.comm.recv(_as_nccl(recv.at(ro, rc)), peer, stream=stream)
        # the group (point-to-point work) is launched by a background thread of a
        # non-blocking communicator: wait until it reached the stream
        settle(self.comm, self.timeout, "all_to_all")

    def barrier(self) -> None:
        raise NotImplementedError("the group runs barriers on the comm stream")

    def send_on(self, buf: Buf, peer: int, stream: Stream | None) -> None:
        self.comm.send(_as_nccl(buf), peer, stream=stream)
        settle(self.comm, self.timeout, "send")

    def recv_on(self, buf: Buf, peer: int, stream: Stream | None) -> None:
        self.comm.recv(_as_nccl(buf), peer, stream=stream)
        settle(self.comm, self.timeout, "recv")

    def split(self, color: int | None, key: int, ctx: EngineContext | None) -> Engine | None:
        sub = self.comm.split(color, key)
        settle(self.comm, self.timeout, "split")   # the parent is busy until the split ends
        if color is None:
            return None
        settle(sub, self.timeout, "split (the new communicator)")
        return NcclEngine(sub, self.device, self.timeout)

    def async_error(self) -> BaseException | None:
        core = _core()
        res = self.comm.get_async_error()
        bindings = importlib.import_module("nccl.bindings.nccl")
        if int(res) == 0 or res == bindings.Result.InProgress:   # ncclSuccess is 0
            return None
        return RuntimeError(f"NCCL async error {res!r}: {core.get_error_string(res)}")

    def abort(self) -> None:
        self.comm.abort()

    def destroy(self) -> None:
        comm, self.comm = self.comm, None
        if comm is not None:
            comm.destroy()


def _wait_ready(comm: Any, timeout: float, rank: int, what: str, exc: type[Exception]) -> None:
    """Poll a non-blocking communicator until it is ready, aborting it after ``timeout`` s."""
    bindings = importlib.import_module("nccl.bindings.nccl")
    deadline = time.monotonic() + timeout
    while True:
        res = comm.get_async_error()
        if int(res) == 0:   # ncclSuccess
            return
        if res != bindings.Result.InProgress:
            comm.abort()
            raise RuntimeError(f"NCCL error {res!r} during {what}")
        if time.monotonic() > deadline:
            comm.abort()
            seen = {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "RANK",
                                                   "WORLD_SIZE", "NCCL_COMM_ID",
                                                   "NCCL_SOCKET_IFNAME")}
            raise exc(f"rank {rank}: {what} did not complete within {timeout:.1f} s; "
                      f"environment seen: {seen}. Check that every rank started, that "
                      "MASTER_ADDR is reachable and that NCCL_SOCKET_IFNAME names the right "
                      "interface")
        time.sleep(0.001)


def check_one_rank_per_gpu(group: GroupCore, index: int) -> None:
    """NCCL refuses two ranks on one GPU ('Duplicate GPU detected'): say so before it does
    (a collective over the group's members: called as its MPI world starts an NCCL engine)."""
    import socket

    from .._device import _get_device
    b, _ = _get_device(f"cuda:{index}")
    try:
        uid = str(b.get_device_properties(index).get("uuid", index))
    except Exception:
        uid = f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')}/{index}"
    mine = (socket.gethostname(), uid)
    everyone = group.control().allgather(mine)
    twins = [group.global_ranks[r] for r, x in enumerate(everyone) if x == mine]
    if len(twins) > 1:
        raise DistError(
            f"ranks {', '.join(map(str, twins))} use the same GPU (cuda:{index} on "
            f"{mine[0]}); NCCL needs one GPU per rank. Launch through "
            "'mpiexec -n N python -m accelrt.distributed.run', which pins rank k of a node to "
            "device k, or pass device_id; the 'mpi' engine (backend='cuda:mpi') allows "
            "sharing a GPU", rank=group.global_rank)
