"""Process groups, work handles, stream ordering, staging, timeouts and errors.

One rule for every engine (ProcessGroupNCCL's): each (group, device) has a *comm stream*; an
operation makes it wait for the caller's current stream, runs there (NCCL: enqueued with
``stream=``; MPI: a host function in stream order), protects its arrays from early reuse by the
caching allocator (``record_stream``) and records a done event. ``async_op=False`` makes the
current stream wait for that event; ``async_op=True`` returns a :class:`Work`. When the comm
stream is idle and the current stream has no pending work, a host engine is called directly on
the calling thread (no stream hop: mpi4py's own cost plus a few microseconds).

Device memory an MPI cannot read (CUDA, OpenCL buffers) is staged through the backend's pinned
host pool on the comm stream (device to host, MPI on the host, host to device); the host blocks
for the MPI part.

Errors of queued communication are kept on the group and raised by the next call on it, by
``Work.wait()``/``synchronize()`` and by ``destroy_process_group()``. A watchdog thread ends
the job when an engine call runs past the group's timeout (MPI has no timeouts of its own),
printing the rank, the operation and its sequence number.

:class:`ProcessGroup` runs the operations; what a group holds (ranks, engines, comm streams,
its kept error) and the checks every operation runs first are its base class,
:class:`~accelrt.distributed._group_core.GroupCore` (``_group_core.py``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from .._array import Array
from .._errors import AcceleratorValueError
from .._stream import Stream, _current
from .._transfer import (pinned_pool, plan_landing, plan_staged_collective,
                         plan_staged_p2p, run_on_stream, run_steps)
from ._debug import DEBUG_ENV, DebugLevel, debug_level
from ._engine import Buf, DirectPlan, Engine, RedOp, ReduceOp
from ._errors import DistError
from ._group_core import Alias, GroupCore, GroupPlan, _DevCtx
from ._locations import _buf
from ._work import WATCHDOG, Future, Work


__all__ = ["DebugLevel", "Future", "ProcessGroup", "Work"]


DEFAULT_TIMEOUT = 600.0
_monotonic = time.monotonic


#: the debug level (get_debug_level/set_debug_level); DETAIL mirrors it for the hot paths
LEVEL = DebugLevel.OFF
#: True once set_debug_level chose the level: an environment without the variable keeps it
_LEVEL_SET = False
#: LEVEL is DETAIL
DETAIL = False


#: ACCELRT_MPI_STAGE=1: stage host-accessible device memory too (tests the staged path)
FORCE_STAGE = False


def set_level(level: DebugLevel, explicit: bool) -> None:
    """Make ``level`` the debug level (``explicit``: chosen by ``set_debug_level``)."""
    global LEVEL, DETAIL, _LEVEL_SET
    LEVEL, DETAIL = level, level is DebugLevel.DETAIL
    _LEVEL_SET = explicit
    for g in WATCHDOG.groups:   # the inline plans assume no debug checks
        g.drop_plans()


def read_debug_level() -> None:
    """Read the debug level (:func:`debug_level`; without the variable, a level chosen by
    ``set_debug_level`` stays) and ``ACCELRT_MPI_STAGE`` (at init_process_group; call again
    after changing them)."""
    global FORCE_STAGE
    keep = _LEVEL_SET and not any(v in os.environ for v in DEBUG_ENV)
    level = LEVEL if keep else DebugLevel[debug_level()]
    FORCE_STAGE = os.environ.get("ACCELRT_MPI_STAGE") == "1"
    set_level(level, keep)


def _force_stage() -> bool:
    return FORCE_STAGE


#: ``buf(array)``: the memory an engine call must use for one of the operation's arrays
BufOf = Callable[[Any], Buf]
#: one collective's engine call, ``call(engine, buf, stream)`` (``stream``: the comm stream
#: of a stream-ordered engine, else None)
EngineCall = Callable[[Engine, BufOf, "Stream | None"], None]
#: the same with the engine bound (what the group runs inline, queued or staged)
Body = Callable[[BufOf, "Stream | None"], None]


class ProcessGroup(GroupCore):
    """A set of ranks that run collectives together (``torch.distributed.ProcessGroup``).

    Made by :func:`~accelrt.distributed.init_process_group` (the world) and
    :func:`~accelrt.distributed.new_group`.
    """

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> None:
        """torch's ``ProcessGroup.monitored_barrier``:
        :func:`~accelrt.distributed.monitored_barrier` on this group; without ``timeout`` it
        waits up to the group's own timeout, as torch's (PyTorch Lightning's
        ``_InfiniteBarrier`` calls it on a ``new_group(timeout=timedelta(days=10000))``).

        Example::

            >>> import accelrt.distributed as dist
            >>> dist.init_process_group("mpi"); dist.group.WORLD.monitored_barrier()
            >>> dist.destroy_process_group()
        """
        from ._collectives import monitored_barrier
        monitored_barrier(self, self.timeout if timeout is None else timeout, wait_all_ranks)

    # ------------------------------------------------------------------ execution
    def run(self, op: str, arrays: Sequence[Any], ins: Sequence[Any], outs: Sequence[Any],
            call: EngineCall, async_op: bool,
            desc: tuple[Any, ...] = (), red: RedOp | None = None,
            result: Sequence[Any] = (), alias: Alias = "none") -> Work | None:
        """Run ``call(engine, buf, stream)`` for a collective over ``arrays`` (``ins`` are read,
        ``outs`` written; ``buf(array)`` gives the memory the engine must use; ``alias``: the
        operation's in-place form, see :meth:`check_args`)."""
        self._raise_kept()
        loc = self.check_args(op, ins, outs, alias=alias)
        assert loc is not None
        # DETAIL: fingerprints compared before anything is enqueued (a mismatch raises on every
        # rank, as torch's ProcessGroupWrapper): after the argument checks (an error on one
        # rank moves nothing), but before an engine's start, a collective itself
        early = DETAIL and not self.engine_started(loc.type, loc.index)
        if early:
            self.fingerprint(loc.type, self.collective_desc(op, desc))
        eng = self.engine(loc.type, loc.index)
        if red is not None:
            self._check_red(op, eng, red, arrays)
        if DETAIL and not early:
            self.fingerprint(loc.type, self.collective_desc(op, desc))
        seq = self.next_seq()

        def body(getbuf: BufOf, stream: Stream | None) -> None:
            call(eng, getbuf, stream)

        if loc.host:
            self.drain()
            self._inline(op, seq, lambda: body(_buf, None))
            return Work.completed(result) if async_op else None
        b, index = loc.b, loc.index
        cur = _current(b, index)
        ctx = self.dev_ctx(b, index)
        caps = self.capabilities(eng)
        if caps.stream_ordered:
            return self._enqueue(op, seq, eng, ctx, cur, b, index, arrays, body, async_op,
                                 result)
        # borrowed host memory (cpu arrays made from numpy) is never staged
        borrowed = all(a._mem.host for a in arrays)
        host_ok = borrowed or (b.capabilities(index).host_accessible and not _force_stage())
        if host_ok and b.capabilities(index).host_accessible and not DETAIL and caps.direct_plans:
            self._fast[(b, index)] = (eng, ctx)
        if host_ok or eng.device_aware(loc.type):
            if ctx.idle() and cur.query():
                self._inline(op, seq, lambda: body(_buf, None))
                return Work.completed(result) if async_op else None
            if host_ok and self.threads_ok:
                return self._queue_host(op, seq, ctx, cur, b, index, arrays, body, async_op,
                                        result)
            # a device-aware MPI may make CUDA calls: never inside a stream callback
            ctx.stream.wait_stream(cur)
            ctx.stream.synchronize()
            self._inline(op, seq, lambda: body(_buf, None))
            return self._finish(op, seq, ctx, cur, b, index, arrays, async_op, result)
        return self._staged(op, seq, ctx, cur, b, index, arrays, ins, outs, body, async_op,
                            result)

    def _fast_engine(self, a: Any) -> tuple[Engine, _DevCtx] | None:
        """The engine (and comm-stream context) that can take ``a`` directly on this thread,
        or ``None`` when the full path is needed (a kept error, debug checks, forced staging,
        an array of a device not used before, queued comm-stream work or pending work on the
        current stream)."""
        if type(a) is not Array or self._error is not None or DETAIL or FORCE_STAGE:
            return None
        b, index = a._b, a._index
        ent = self._fast.get((b, index))
        if ent is None:
            return None
        ctx = ent[1]
        if ctx.issued != ctx.finished or (not b.streams_idle
                                          and not _current(b, index).query()):
            return None
        return ent

    def run_plan(self, op: str, plan: GroupPlan) -> bool:
        """Run a direct-call plan (left by an earlier call in ``plans_ar``/``plans_bc``/
        ``plans_ag``, or just made by :meth:`_direct`) under the group's sequence number and
        watchdog timestamp if its comm stream and the current stream are idle; False
        otherwise (the caller takes the full path). The inline path of the small collectives;
        an engine failure is kept and raised as the full path does."""
        ctx, b = plan.ctx, plan.backend
        if ctx.issued != ctx.finished or not (b.streams_idle
                                              or _current(b, ctx.index).query()):
            return False
        self._seq = seq = self._seq + 1
        self._op, self._opseq, self._t0 = op, seq, _monotonic()
        try:
            plan.call(*plan.args)
            post = plan.post
            if post is not None:
                post()
        except Exception as exc:
            self._fast_failed(op, seq, exc)
        finally:
            self._t0 = 0.0
        return True

    def _fast_failed(self, op: str, seq: int, exc: Exception) -> None:
        """Keep and raise an engine failure of a direct call (as the full path does)."""
        if isinstance(exc, (DistError, AcceleratorValueError)):
            raise exc
        raise self._keep(self._engine_error(op, seq, exc), exc) from exc

    def _direct(self, op: str, plans: dict[Any, GroupPlan], key: Any, a: Array,
                make: Callable[[Engine], DirectPlan]) -> bool:
        """Run ``make(engine)``'s plan through :meth:`run_plan` (the one inline path) and keep
        it under ``key`` for the next call; False when the full path is needed (see
        :meth:`_fast_engine`). The caller checked the arguments."""
        ent = self._fast_engine(a)
        if ent is None:
            return False
        eng, ctx = ent
        dp = make(eng)
        plan = GroupPlan(dp.call, dp.args, dp.post, ctx, a._b)
        if not self.run_plan(op, plan):
            return False
        if len(plans) >= 256:
            plans.clear()
        plans[key] = plan
        return True


    def all_reduce_fast(self, a: Array, op: ReduceOp) -> bool:
        """``all_reduce(a, op)`` called directly on this thread when nothing needs the full
        path (see :meth:`_fast_engine`); False otherwise. This is the small-message path: a
        successful call leaves a plan that ``all_reduce`` itself runs next time."""
        ent = self._fast_engine(a)
        if ent is None:
            return False
        eng = ent[0]
        self.check_args("all_reduce", (a,), (a,), alias="inplace")
        self._check_red("all_reduce", eng, op, (a,))
        mem, dtype, num = a._mem, a._dtype, op._value_   # (an int hashes in C, a ReduceOp not)
        return self._direct("all_reduce", self.plans_ar, (mem.ptr, mem.nbytes, dtype.num, num), a,
                            lambda e: e.plan_all_reduce(mem.ptr, mem.nbytes, dtype, op))

    def broadcast_fast(self, a: object, root: int, src: int) -> bool:
        """``broadcast(a, root)`` through the fast path (see :meth:`all_reduce_fast`);
        ``src`` is the caller's (global) source rank, the plan's key."""
        if type(a) is not Array or self._fast_engine(a) is None:
            return False
        self.check_args("broadcast", (a,), (a,), alias="inplace")
        mem = a._mem
        return self._direct("broadcast", self.plans_bc, (mem.ptr, mem.nbytes, src), a,
                            lambda e: e.plan_broadcast(mem.ptr, mem.nbytes, root))

    def all_gather_fast(self, out: Array, a: Array) -> bool:
        """``all_gather_into_tensor(out, a)`` through the fast path when ``out`` is an array
        of ``a``'s device, dtype and world_size times its bytes (else the full path checks)."""
        if type(out) is not Array or type(a) is not Array:
            return False
        mem, omem = a._mem, out._mem
        if (out._b is not a._b or out._index != a._index or out._dtype != a._dtype
                or omem.nbytes != mem.nbytes * self._size or self._fast_engine(a) is None):
            return False
        self.check_args("all_gather_into_tensor", (a,), (out,), alias="gather")
        return self._direct("all_gather_into_tensor", self.plans_ag,
                            (mem.ptr, omem.ptr, mem.nbytes, omem.nbytes), a,
                            lambda e: e.plan_all_gather(mem.ptr, omem.ptr, mem.nbytes))

    def _inline(self, op: str, seq: int, fn: Callable[[], None]) -> None:
        """Call ``fn`` (which talks to the peers) on this thread under the group's timeout;
        an engine failure is kept on the group (its peers may be mid-operation) and raised."""
        try:
            with WATCHDOG.watching(self, op, seq):
                fn()
        except (DistError, AcceleratorValueError):
            raise
        except Exception as exc:
            raise self._keep(self._engine_error(op, seq, exc), exc) from exc

    def _finish(self, op: str, seq: int, ctx: _DevCtx, cur: Stream, b: Any, index: int,
                arrays: Sequence[Any], async_op: bool, result: Sequence[Any],
                early: bool = False) -> Work | None:
        comm = ctx.stream
        for a in arrays:
            a.record_stream(comm)
        done = comm.record_event()
        self._raise_kept()
        if async_op:
            return Work(self, op, seq, event=done, stream_of=(b, index), outputs=result,
                        early=early)   # early: result() before completion (NCCL's work)
        cur.wait_event(done)
        return None

    def _queue_host(self, op: str, seq: int, ctx: _DevCtx, cur: Stream, b: Any, index: int,
                    arrays: Sequence[Any], body: Body,
                    async_op: bool, result: Sequence[Any]) -> Work | None:
        comm = ctx.stream
        comm.wait_stream(cur)
        bufs = [_buf(a) for a in arrays]
        table = {id(a): bf for a, bf in zip(arrays, bufs)}

        def fn() -> None:
            try:
                if self._error is None:
                    self._inline(op, seq, lambda: body(lambda a: table[id(a)], None))
            except BaseException as exc:
                self._keep(exc)
            finally:
                ctx.finished += 1

        ctx.issued += 1
        try:
            run_on_stream(comm, fn)
        except BaseException:
            ctx.finished = ctx.issued
            raise
        return self._finish(op, seq, ctx, cur, b, index, arrays, async_op, result)

    def _enqueue(self, op: str, seq: int, eng: Engine, ctx: _DevCtx, cur: Stream, b: Any,
                 index: int, arrays: Sequence[Any], body: Body, async_op: bool,
                 result: Sequence[Any]) -> Work | None:
        comm = ctx.stream
        comm.wait_stream(cur)
        kept = eng.async_error()
        if kept is not None:
            self._keep(self._engine_error(op, seq, kept))
            self._raise_kept()
        self._inline(op, seq, lambda: body(_buf, comm))
        return self._finish(op, seq, ctx, cur, b, index, arrays, async_op, result, True)

    def _staged(self, op: str, seq: int, ctx: _DevCtx, cur: Stream, b: Any, index: int,
                arrays: Sequence[Any], ins: Sequence[Any], outs: Sequence[Any],
                body: Body, async_op: bool, result: Sequence[Any]) -> Work | None:
        """Run a host engine on host blocks standing in for the arrays (the plan of
        :func:`~accelrt._transfer.plan_staged_collective`), then finish as every path does."""
        comm = ctx.stream
        st = plan_staged_collective(comm, cur, pinned_pool(b), arrays, ins, outs)
        host = st.host
        try:
            run_steps(st.before)
            self._inline(op, seq, lambda: body(lambda a: Buf(host[id(a)], a.size, a.dtype), None))
            run_steps(st.after)
        finally:
            run_steps(st.release)
        return self._finish(op, seq, ctx, cur, b, index, arrays, async_op, result)

    # ------------------------------------------------------------------ point-to-point
    def p2p(self, op: str, array: Any, peer: int | None, tag: int, send: bool,
            blocking: bool = False) -> Work:
        """Post a send or receive of ``array`` to or from group rank ``peer`` (``blocking``:
        for ``send``/``recv``, which may not name this rank)."""
        self._raise_kept()
        role = None if not blocking else "destination" if send else "source"
        loc = self.check_args(op, (array,) if send else (), () if send else (array,),
                              peer=peer, peer_role=role, tag=tag)
        assert loc is not None
        tag = int(tag)
        eng = self.engine(loc.type, loc.index)
        caps = self.capabilities(eng)
        if caps.stream_ordered and peer is None:
            raise AcceleratorValueError(f"{op}: the {eng.name} engine needs an explicit "
                                        "source rank (src=None is MPI only)")
        seq = self.next_p2p_seq()
        if loc.host:
            self.drain()
            # the Work keeps the numpy array alive until the engine is done with it
            return self._post(op, seq, eng, _buf(array), peer, tag, send, None, keep=array)
        b, index = loc.b, loc.index
        cur = _current(b, index)
        ctx = self.dev_ctx(b, index)
        if caps.stream_ordered:
            assert peer is not None
            comm = ctx.stream
            comm.wait_stream(cur)
            fn = eng.send_on if send else eng.recv_on
            p = peer
            self._inline(op, seq, lambda: fn(_buf(array), p, comm))
            array.record_stream(comm)
            done = comm.record_event()
            w = Work(self, op, seq, event=done, stream_of=(b, index), outputs=[array], early=True)
            w._source = peer
            return w
        if (array._mem.host or b.capabilities(index).host_accessible and not _force_stage()
                or eng.device_aware(loc.type)):
            if not cur.query():
                cur.synchronize()
            if not ctx.idle():
                ctx.stream.synchronize()
            return self._post(op, seq, eng, _buf(array), peer, tag, send, None, keep=array)
        # staged through a pinned block (the plan of plan_staged_p2p)
        busy = None if ctx.idle() else ctx.stream
        st = plan_staged_p2p(pinned_pool(b), array, send, cur, busy if send else None)
        host = Buf(st.host[id(array)], array.size, array.dtype)
        keep = (array, st.buffers[0] if st.buffers else None)
        if send:
            try:
                run_steps(st.before)
            except BaseException:
                run_steps(st.release)
                raise
            return self._post(op, seq, eng, host, peer, tag, send,
                              partial(run_steps, st.release), keep=keep)

        def land() -> None:
            done = plan_landing(st, array, _current(b, index))
            try:
                run_steps(done.after)
            finally:
                run_steps(done.release)

        return self._post(op, seq, eng, host, peer, tag, send, land, keep=keep)

    def _post(self, op: str, seq: int, eng: Engine, buf: Buf, peer: int | None, tag: int,
              send: bool, finish: Callable[[], None] | None, keep: Any = None) -> Work:
        self._reap()
        try:
            if send:
                assert peer is not None
                req = eng.isend(buf, peer, tag)
            else:
                req = eng.irecv(buf, peer, tag)
        except Exception as exc:
            raise self._keep(self._engine_error(op, seq, exc), exc) from exc
        w = Work(self, op, seq, request=req, finish=finish,   # (the outputs keep `keep`)
                 outputs=[keep] if keep is not None else [], no_result=True)
        with self._flight_lock:
            self._in_flight.append(w)
        return w

    def _forget(self, w: Work) -> None:
        """Stop keeping ``w``, whose point-to-point operation completed (or failed)."""
        with self._flight_lock:
            if any(x is w for x in self._in_flight):
                self._in_flight.remove(w)

    def _reap(self) -> None:
        """Complete and forget the point-to-point work of :attr:`_in_flight` that the engine
        finished (a staged receive lands, a staging block goes back; an error stays with its
        work handle, raised by its ``wait()``). Threads may post and reap at once: the works
        are polled outside the lock (finishing one takes it, in :meth:`_forget`), and only
        those found done are dropped, not the list of a moment ago."""
        if not self._in_flight:
            return
        with self._flight_lock:
            works = self._in_flight[:]
        done: list[Work] = []
        for w in works:
            try:
                if w._poll():
                    done.append(w)
            except Exception:   # noqa: BLE001 - kept by the work: its wait() raises it
                done.append(w)
        if done:
            gone = {id(w) for w in done}
            with self._flight_lock:
                self._in_flight = [w for w in self._in_flight if id(w) not in gone]

    def _abandon_in_flight(self) -> list[Work]:
        """Reap, then stop keeping (and return) the work still in flight: destroy's."""
        self._reap()
        with self._flight_lock:
            left, self._in_flight = self._in_flight, []
        return left
