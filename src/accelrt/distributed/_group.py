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
"""

from __future__ import annotations

import datetime
import os
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal, TypeVar

import numpy as np

from .._array import Array
from .._errors import AcceleratorTypeError, AcceleratorValueError, ClosedError, type_shown
from .._fork import reinit_after_fork
from .._stream import Stream, _current
from .._transfer import (pinned_pool, plan_landing, plan_staged_collective,
                         plan_staged_p2p, run_on_stream, run_steps)
from ._engine import (Buf, DirectPlan, Engine, EngineCapabilities, EngineContext, PremulSum,
                      RedOp, ReduceOp, registration)
from ._debug import (_DEVICE, DEBUG_ENV, DebugLevel, PeerCounts, _describe, _torch_words,
                     debug_level)
from ._errors import DistBackendError, DistError, _RankNotInGroupError
from ._locations import _buf, _Loc, _locate, _span
from ._work import WATCHDOG, Future, Work, detached

_E = TypeVar("_E", bound=BaseException)

__all__ = ["DebugLevel", "Future", "ProcessGroup", "Work"]


DEFAULT_TIMEOUT = 600.0
#: torch's ProcessGroup.BackendType names: ProcessGroup.name() answers "custom" for others
_TORCH_BACKEND_TYPES = ("gloo", "mpi", "nccl", "ucc", "undefined", "xccl")
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


# ---------------------------------------------------------------------------- argument kinds

#: torch 2.15's supports_complex() deny list of all_reduce and all_reduce_coalesced
_NO_COMPLEX = (ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT, ReduceOp.BAND, ReduceOp.BOR,
               ReduceOp.BXOR)

#: the numpy dtype kinds that are plain data (no pointers into this process): bool, integers,
#: floating, complex, timedelta/datetime, fixed-width bytes/str, void (structured: checked
#: for object fields by ``dtype.hasobject``)
_PLAIN_KINDS = "biufcmMSUV"

#: the in-place forms of :meth:`ProcessGroup.check_args`
Alias = Literal["none", "inplace", "gather", "scatter", "staged"]


class _DevCtx:
    """The comm stream of one (group, device) and its queue counters."""

    __slots__ = ("finished", "index", "issued", "stream")

    def __init__(self, stream: Stream, index: int) -> None:
        self.stream = stream
        self.index = index
        self.issued = 0
        self.finished = 0

    def idle(self) -> bool:
        return self.issued == self.finished


#: ``buf(array)``: the memory an engine call must use for one of the operation's arrays
BufOf = Callable[[Any], Buf]
#: one collective's engine call, ``call(engine, buf, stream)`` (``stream``: the comm stream
#: of a stream-ordered engine, else None)
EngineCall = Callable[[Engine, BufOf, "Stream | None"], None]
#: the same with the engine bound (what the group runs inline, queued or staged)
Body = Callable[[BufOf, "Stream | None"], None]


class GroupPlan:
    """An engine's :class:`~accelrt.distributed._engine.DirectPlan` as a group keeps it for
    the inline path (``ProcessGroup.plans_ar``/``plans_bc``/``plans_ag``): its fields, then
    the comm-stream context and backend whose idleness :meth:`ProcessGroup.run_plan` checks.
    A slotted class, not a NamedTuple: the small-message path reads its fields on every call,
    and slot reads are specialised by CPython where a tuple subclass's are not (measured:
    a NamedTuple cost 30-50 ns a call, about 6 % of an all_reduce of 4 bytes)."""

    __slots__ = ("args", "backend", "call", "ctx", "post")

    def __init__(self, call: Callable[..., object], args: tuple[object, ...],
                 post: Callable[[], None] | None, ctx: _DevCtx, backend: Any) -> None:
        self.call, self.args, self.post, self.ctx, self.backend = call, args, post, ctx, backend


# ---------------------------------------------------------------------------- groups
class ProcessGroup:
    """A set of ranks that run collectives together (``torch.distributed.ProcessGroup``).

    Made by :func:`~accelrt.distributed.init_process_group` (the world) and
    :func:`~accelrt.distributed.new_group`.
    """

    def __init__(self, name: str, rank: int, size: int, global_ranks: list[int],
                 engine_map: dict[str, str], backend_str: str, timeout: float,
                 mpi_comm: Any, global_rank: int, group_name: str = "0") -> None:
        #: the group's label in accelrt's messages: "WORLD", "group<k>" or its group_desc
        self._label = name
        self._group_name = group_name   # torch's group_name (see the property)
        #: torch's ``group_desc``: "default_pg" (the world), the ``group_desc=`` of
        #: new_group/split_group, else "undefined" (new_group) or "<parent's>:split:<k>"
        #: (split_group: k counts the parent's splits)
        self.group_desc = "default_pg" if name == "WORLD" else "undefined"
        self.splits = 0
        self._rank, self._size = rank, size
        self.global_ranks = global_ranks
        self.global_rank = global_rank
        self.engine_map = engine_map
        self.backend_str = backend_str
        self.timeout = timeout
        self.mpi_comm = mpi_comm          # the group's own (private) mpi4py communicator
        self._engines: dict[tuple[str, int], Engine] = {}
        self._ctx: dict[tuple[str, int], _DevCtx] = {}
        self._seq = 0
        #: point-to-point operations posted and not known to be complete: the group holds
        #: their work handles, and so their arrays, until the engine is done with them (a
        #: caller may drop the handle of an isend at once; torch's process groups keep the
        #: work, too); :meth:`_post` forgets the completed ones. Changed under the lock only
        self._in_flight: list[Work] = []
        self._flight_lock = reinit_after_fork(threading.Lock())
        self._p2p = 0   # point-to-point operations among the _seq (see next_p2p_seq)
        self._error: BaseException | None = None
        self._lock = reinit_after_fork(threading.Lock())
        self._ctrl: Any = None
        self._preset: dict[tuple[str, int], Engine] = {}
        self._supported: set[tuple[Engine, ReduceOp, Any]] = set()
        self._caps: dict[Engine, EngineCapabilities] = {}
        # (backend, index) -> (engine, comm-stream ctx) where a host engine may be called
        # directly on the caller's thread when both streams are idle (the fast path)
        self._fast: dict[tuple[Any, int], tuple[Engine, _DevCtx]] = {}
        # direct-call plans that all_reduce, broadcast and all_gather_into_tensor run inline
        # (no further Python frames) when the comm stream is idle: key -> (fn, args, post,
        # comm-stream ctx, backend). Made by the *_fast methods after a successful call;
        # dropped when an error is kept, the debug flags change or the group is destroyed.
        self.plans_ar: dict[tuple[int, int, int, int], GroupPlan] = {}   # op: its number
        self.plans_bc: dict[tuple[int, int, int], GroupPlan] = {}
        self.plans_ag: dict[tuple[int, int, int, int], GroupPlan] = {}
        self.parent: ProcessGroup | None = None
        # torch's bound_device_id: the device init_process_group(device_id=) bound the world
        # to (an acc.device with an index, a cpu one too as in torch 2.15), which the groups
        # split from it inherit; None when none was given
        self.bound_device_id: Any = None
        self.destroyed = False
        # MPI_THREAD_MULTIPLE: engine calls may run on comm-stream worker threads
        self.threads_ok = True
        # the direct call in progress on the caller's thread (watched by the watchdog)
        self._t0 = 0.0
        self._op = ""
        self._opseq = 0
        WATCHDOG.watch(self)

    def rank(self) -> int:
        """This process's rank in the group."""
        return self._rank

    def set_timeout(self, timeout: datetime.timedelta | float) -> None:
        """Make ``timeout`` (a ``datetime.timedelta``, as torch's, or seconds) the limit of
        this group's future operations; the watchdog enforces it for every engine. Raises
        TypeError or ValueError (:func:`~._store._positive_seconds`)."""
        from ._store import _positive_seconds
        self.timeout = _positive_seconds(timeout, "ProcessGroup.set_timeout()")
        wd = WATCHDOG
        if wd._thread is None or self.timeout / 4 < wd._interval:
            wd._start(min(1.0, max(0.01, self.timeout / 4)))

    def size(self) -> int:
        """Number of ranks in the group."""
        return self._size

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

    def name(self) -> str:
        """The name of the group's default backend (torch 2.15's ``ProcessGroup.name()``): a
        single backend's name, :func:`~accelrt.distributed.get_backend`'s answer
        (``"mpi"``, ``"nccl"``, ``"gloo"``); of a ``"cpu:mpi,cuda:nccl"`` group, the engine
        of its bound device's type (``device_id=``), else of the current accelerator's,
        else of the first device type named (torch prefers a non-cpu one there). An engine
        of :func:`~accelrt.distributed.register_backend` is ``"custom"``, as in torch. A
        destroyed group still answers."""
        spec = self.backend_str
        if ":" in spec or "," in spec:
            types = [getattr(self.bound_device_id, "type", None)]
            try:
                from .._device import current_accelerator
                types.append(getattr(current_accelerator(), "type", None))
            except Exception:   # noqa: BLE001 - a bad ACCELRT_ACCELERATOR: no preference
                pass
            spec = next((self.engine_map[t] for t in types if t in self.engine_map),
                        next(iter(self.engine_map.values()), "undefined"))
        return spec if spec in _TORCH_BACKEND_TYPES else "custom"

    @property
    def group_name(self) -> str:
        """torch's ``group_name``, the same on every rank: ``"0"`` for the world, then
        ``get_pg_count()`` at the group's creation as a str (``"1"``, ``"2"``, ...); for
        ``split_group`` and ``new_group(use_local_synchronization=True)`` torch 2.15's SHA-1
        of the ranks and that count. It outlives the group's destruction, as torch's."""
        return self._group_name

    @property
    def supports_abort_hooks(self) -> bool:
        """False: torch 2.15's ``ProcessGroup.supports_abort_hooks`` (False for gloo). No
        accelrt engine runs hooks when a group aborts: a failed group keeps its error and
        raises it on the next call, and there is no ``register_abort_hook``."""
        return False

    @property
    def supports_completion_hooks(self) -> bool:
        """False: torch 2.15's ``ProcessGroup.supports_completion_hooks`` (False for gloo).
        accelrt's groups take no completion hooks; wait on the :class:`Work` of
        ``async_op=True`` instead."""
        return False

    def __repr__(self) -> str:
        return (f"<accelrt.distributed.ProcessGroup {self._label!r} rank={self._rank} "
                f"size={self._size} backend={self.backend_str!r}>")

    # ------------------------------------------------------------------ errors
    def _raise_kept(self) -> None:
        err = self._error
        if err is not None:
            # (a fresh copy each time: re-raising the kept object would attach this call's
            # frames to it, and keep them, and the arrays they hold, alive with the group)
            raise detached(err)
        if self.destroyed:
            raise DistError(f"process group {self._label!r} was destroyed; create a new one",
                            rank=self.global_rank)

    def _keep(self, exc: _E, cause: BaseException | None = None) -> _E:
        """Keep ``exc`` (raised from ``cause``) as the group's error, raised by every later
        call, and return ``exc``: the group keeps a copy that holds no frames
        (:func:`._work.detached`), while ``exc`` itself goes to the caller with its traceback
        and cause. (Callers raise the result directly, ``raise self._keep(err, exc) from
        exc``: an ``err`` local of the raising frame would be a cycle through its traceback,
        which keeps the call's arrays until a collection.)"""
        with self._lock:
            if self._error is None:
                self._error = detached(exc, cause)
        self.drop_plans()
        return exc

    def _engine_error(self, op: str, seq: int, exc: BaseException) -> DistError:
        if isinstance(exc, DistError):
            return exc
        text = str(exc).strip().splitlines()
        reason = text[-1] if text else type(exc).__name__
        where = type(exc).__module__.split(".")[0]
        kind = type(exc).__name__ if where == "builtins" else f"{where}.{type(exc).__name__}"
        return DistBackendError(
            f"rank {self.global_rank}: {op} (sequence number {seq}) on group {self._label!r} "
            f"failed in the engine: {kind}: {reason}", rank=self.global_rank, op=op, seq=seq)

    # ------------------------------------------------------------------ engines and streams
    def control(self) -> Any:
        """A private MPI communicator for host-side control traffic, or None without MPI."""
        if self._ctrl is None and self.mpi_comm is not None:
            self._ctrl = self.mpi_comm.Dup()
        return self._ctrl

    def start_mpi_engines(self) -> None:
        """Start the MPI engines with the group, as torch makes gloo (their start is a
        collective that a first ``send``/``recv`` of two ranks would wait for forever)."""
        from ._engine import _mpi_factory
        for device_type, name in self.engine_map.items() if self.mpi_comm is not None else ():
            if (reg := registration(name)) is not None and reg.factory is _mpi_factory:
                self.engine(device_type, 0)

    def _engine_key(self, device_type: str, index: int) -> tuple[str, int]:
        name = self.engine_map.get(device_type)
        reg = None if name is None else registration(name)
        # one engine per device where its communicator is bound to one (NCCL), else per type
        return (device_type, index if reg is not None and reg.per_device else 0)

    def engine_started(self, device_type: str, index: int) -> bool:
        """Whether :meth:`engine` has the engine for these arrays already (starting it is a
        collective)."""
        return self._engine_key(device_type, index) in self._engines

    def engine(self, device_type: str, index: int) -> Engine:
        name = self.engine_map.get(device_type)
        reg = None if name is None else registration(name)
        key = self._engine_key(device_type, index)
        eng = self._engines.get(key)
        if eng is not None:
            return eng
        eng = self._preset.pop(key, None)
        if eng is None:
            if name is None:
                raise DistError(f"no engine serves {device_type} arrays in group "
                                f"{self._label!r} (backend {self.backend_str!r}); pass e.g. "
                                f"backend='{device_type}:mpi'", rank=self.global_rank)
            ctx = EngineContext(self._rank, self._size, self.global_ranks, device_type,
                                index, self.timeout, self.mpi_comm)
            # starting an engine is collective (ranks compare GPUs, a communicator is
            # duplicated or created)
            with WATCHDOG.watching(self, f"start of the {name!r} engine", self._seq + 1):
                if name == "nccl" and self.mpi_comm is not None:
                    from ._nccl import check_one_rank_per_gpu
                    check_one_rank_per_gpu(self, index)
                try:
                    assert reg is not None, name
                    eng = reg.factory(ctx)
                except DistError:
                    raise
                except Exception as exc:
                    raise DistBackendError(
                        f"rank {self.global_rank}: could not start the {name!r} engine for "
                        f"{device_type} arrays: {type(exc).__name__}: {exc}",
                        rank=self.global_rank) from exc
        self._engines[key] = eng
        return eng

    def capabilities(self, eng: Engine) -> EngineCapabilities:
        """``eng.capabilities()``, read once per engine."""
        caps = self._caps.get(eng)
        if caps is None:
            caps = self._caps[eng] = eng.capabilities()
        return caps

    def dev_ctx(self, b: Any, index: int) -> _DevCtx:
        key = (b.name, index)
        ctx = self._ctx.get(key)
        if ctx is None:
            from .._device import _device_obj
            ctx = _DevCtx(Stream(_device_obj(b.name, index)), index)
            self._ctx[key] = ctx
        return ctx

    def drain(self) -> None:
        """Block until every operation queued on this group's comm streams has run."""
        for ctx in list(self._ctx.values()):
            if not ctx.idle():
                ctx.stream.synchronize()

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def next_p2p_seq(self) -> int:
        """:meth:`next_seq` for a point-to-point operation, which only two ranks make: it
        is not counted in the collective sequence number the debug fingerprints compare
        (torch keeps a separate P2P sequence number for the same reason)."""
        self._p2p += 1
        return self.next_seq()

    # ------------------------------------------------------------------ debug checks
    def collective_desc(self, op: str, desc: Sequence[Any] = ()) -> tuple[Any, ...]:
        """The debug fingerprint of the collective about to run: ``(op, the collective
        sequence number it will take) + desc`` (point-to-point operations are not counted)."""
        return (op, self._seq + 1 - self._p2p) + tuple(desc)

    def fingerprint(self, device_type: str | None, desc: tuple[Any, ...]) -> None:
        """ACCELRT_DISTRIBUTED_DEBUG=DETAIL: every rank compares (op, seq, dtype, shape, root,
        reduce op, device type: None for a barrier) with every other rank and all raise,
        naming the odd rank(s), on a mismatch, with torch's words too (``_debug._torch_words``).
        Called on the caller's thread, before anything is enqueued."""
        comm = self.control()
        if comm is None:
            return
        dev = ((_DEVICE, device_type),)
        mine = (desc[:-1] + dev + desc[-1:] if desc and isinstance(desc[-1], PeerCounts)
                else desc + dev)   # (PeerCounts kept last: compared pairwise)
        # under the group's timeout, as the collective itself: a rank that never comes (an
        # argument error raised on it alone) must not leave the others waiting for ever
        with WATCHDOG.watching(self, str(desc[0]), self._seq + 1):
            gathered = comm.allgather(mine)
        # an all_to_all's per-peer element counts differ between ranks by design: they are
        # compared pairwise (what k sends to j is what j expects from k), the rest for equality
        peers = [d[-1] if d and isinstance(d[-1], PeerCounts) else None for d in gathered]
        everyone = [d[:-1] if p is not None else d for d, p in zip(gathered, peers)]
        if all(d == everyone[0] for d in everyone):
            if all(p is not None for p in peers):
                self._check_peer_counts(desc, [p for p in peers if p is not None])
            return
        counts: dict[Any, int] = {}
        for d in everyone:
            counts[d] = counts.get(d, 0) + 1
        common = max(counts, key=lambda d: (counts[d], -everyone.index(d)))
        odd = [self.global_ranks[r] for r, d in enumerate(everyone) if d != common]
        detail = "; ".join(f"rank {self.global_ranks[r]}: {_describe(d)}"
                           for r, d in enumerate(everyone))
        me = self._rank
        other = next(r for r, d in enumerate(everyone) if d != everyone[me])
        raise DistError(
            f"rank {self.global_rank}: collective mismatch in group {self._label!r} at sequence "
            f"number {desc[1]}: rank(s) {', '.join(map(str, odd))} differ from the others "
            f"({detail}). "
            f"{_torch_words(self.global_rank, everyone[me], self.global_ranks[other], everyone[other])}",
            rank=self.global_rank, op=str(desc[0]), seq=int(desc[1]))

    def _check_peer_counts(self, desc: tuple[Any, ...], peers: list[PeerCounts]) -> None:
        """Raise :class:`DistError` on every rank when some rank would send a peer another
        number of elements than that peer expects from it (an all_to_all size mismatch, which
        MPI reports on some ranks only and NCCL not at all)."""
        bad = [f"rank {self.global_ranks[k]} sends {p.send[j]} element(s) to rank "
               f"{self.global_ranks[j]}, which expects {peers[j].recv[k]}"
               for k, p in enumerate(peers) for j in range(len(peers))
               if p.send[j] != peers[j].recv[k]]
        if bad:
            raise DistError(
                f"rank {self.global_rank}: collective mismatch in group {self._label!r} at "
                f"sequence number {desc[1]}: {desc[0]} sizes disagree ({'; '.join(bad)})",
                rank=self.global_rank, op=str(desc[0]), seq=int(desc[1]))

    # ------------------------------------------------------------------ argument checks
    def canonical_rank(self, rank: Any, group_rank: Any, what: str,
                       default: int | None = None, *, root: bool = True) -> int:
        """The group rank that exactly one of ``rank`` (a global rank: the argument ``what``,
        e.g. ``src``) and ``group_rank`` (a rank of this group: ``group_<what>``) names, as
        torch's ``_canonicalize_group_rank``. Neither: ``default`` (a global rank; torch's 0
        of ``gather``, ``scatter`` and the object collectives), else ``ValueError``. A rank
        outside the group is an ``AcceleratorValueError``, a ``ValueError`` and a
        ``RuntimeError``: torch 2.14 raises the first for a subgroup and gloo's "invalid root
        rank" ``RuntimeError`` for the world (whose message then starts with gloo's words;
        ``root``: the rank is a collective's root, not a point-to-point peer). Part of the
        argument check: it raises before anything is enqueued or the sequence number moves,
        so the group stays usable."""
        if group_rank is not None:
            if rank is not None:
                raise ValueError(f"Can't specify both group_rank and global_rank: pass {what}= "
                                 f"(a global rank) or group_{what}= (a rank of the group), not "
                                 f"both (got {what}={rank!r}, group_{what}={group_rank!r})")
            if isinstance(group_rank, bool) or not isinstance(group_rank, (int, np.integer)):
                raise TypeError(f"group_{what} must be an int rank of the group, got "
                                f"{type_shown(group_rank)}")
            if not 0 <= int(group_rank) < self._size:
                raise AcceleratorValueError(
                    f"Group rank {group_rank} is not part of group {self._label!r} "
                    f"(group_{what} is a rank of the group: 0..{self._size - 1})")
            return int(group_rank)
        if rank is None:
            if default is None:
                raise ValueError(f"Must specify global_rank or group_rank: pass {what}= (a "
                                 f"global rank) or group_{what}= (a rank of the group)")
            rank = default
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
            raise TypeError(f"{what} must be an int rank, got {type_shown(rank)}")
        try:
            return self.global_ranks.index(int(rank))
        except ValueError:
            if self._label != "WORLD":   # torch's get_group_rank words, then accelrt's
                raise _RankNotInGroupError(
                    f"Global rank {rank} is not part of group {self._label!r}: the global rank "
                    f"{rank} is not part of the group's ranks {self.global_ranks}; "
                    f"group_{what}= takes a rank of the group") from None
            gloo = f"invalid root rank: {rank}: " if root else ""
            raise _RankNotInGroupError(
                f"{gloo}The global rank {rank} is not part of the group {self._label!r} (ranks "
                f"{self.global_ranks}); group_{what}= takes a rank of the group") from None

    def check_args(self, op: str, ins: Sequence[Any] = (), outs: Sequence[Any] = (), *,
                   alias: Alias = "none", peer: int | None = None,
                   peer_role: str | None = None, tag: object = NotImplemented) -> _Loc | None:
        """The one argument check of every collective and point-to-point operation: it runs
        on the calling rank before anything is enqueued and before the group's sequence
        number moves, so an argument error raises here and leaves the group usable.

        - ``peer_role`` (a blocking ``send``/``recv``: ``"destination"``/``"source"``): the
          group rank ``peer`` is not this rank's (``ValueError``, torch's message);
        - ``tag`` (point-to-point only; the default means none): an int (``TypeError``, None
          included) in ``0..max_tag`` of the engine (``AcceleratorValueError``, torch's "Tag
          must be nonnegative"): a tag the engine refused broke the group;
        - arrays of one device, contiguous (:func:`_locate`); none closed (``ClosedError``);
        - plain-data dtypes only: an object (or ``StringDType``) array holds pointers into
          this process, which no peer can read (``TypeError``);
        - ``outs`` (the arrays the operation writes, in-place operands included) writable: a
          numpy array over ``bytes`` is not (``ValueError``);
        - no input shares memory with an output, except in the operation's in-place form
          ``alias``: ``"inplace"`` (the output is the input itself), ``"gather"`` (the input
          is exactly the output's chunk at this rank's offset, as torch's in-place
          ``all_gather_into_tensor``), ``"scatter"`` (the output is exactly the input's chunk
          at this rank's offset, in-place ``reduce_scatter_tensor``), ``"staged"`` (the
          engine sees copies, the list forms: any overlap is harmless) (``ValueError``).

        Returns where the arrays live (None without arrays)."""
        if peer_role is not None and peer == self._rank:
            raise ValueError(f"Invalid {peer_role} rank: {peer_role} rank should not be the "
                             "same as the rank of the current process.")
        t = None
        if tag is not NotImplemented:
            if isinstance(tag, bool) or not isinstance(tag, (int, np.integer)):
                raise TypeError(f"{op}: tag must be an int, got {type_shown(tag)}")
            t = int(tag)
            if t < 0:
                raise AcceleratorValueError(f"Tag must be nonnegative: {op} got tag={t}")
        if not ins and not outs:
            return None
        loc = _locate([*ins, *outs], op)
        if t is not None:
            eng = self.engine(loc.type, loc.index)
            if t > eng.max_tag:
                raise AcceleratorValueError(f"{op}: tag {t} is out of range: the {eng.name} "
                                            f"engine takes tags 0..{eng.max_tag}")
        for a in (*ins, *outs):
            if not loc.host and a.is_closed:
                raise ClosedError(f"{op}: an accelrt.Array passed to it was closed (close()); "
                                  "its memory is no longer its own: pass an open array")
            dt = a.dtype
            if dt.hasobject or dt.kind not in _PLAIN_KINDS:
                raise AcceleratorTypeError(
                    f"{op}: an array of dtype {dt} holds pointers to Python objects, not "
                    "data, and no other process can read them; send plain-data dtypes "
                    "(numbers, bool, fixed-width strings), or move Python objects with the "
                    "object collectives (broadcast_object_list, all_gather_object, ...)")
        if loc.host:
            for a in outs:
                if not a.flags.writeable:
                    raise AcceleratorValueError(
                        f"{op}: an output array is read-only (numpy writeable=False, e.g. a "
                        "view of bytes); the operation writes into it: pass a writable array "
                        "(np.array(x) makes a writable copy)")
        if alias != "staged":
            for i in ins:
                for o in outs:
                    if not (i is o and alias == "inplace"):   # all_reduce's one array
                        self._check_overlap(op, i, o, alias)
        return loc

    def _check_overlap(self, op: str, i: Any, o: Any, alias: Alias) -> None:
        ip, inb = _span(i)
        op_, onb = _span(o)
        if not inb or not onb or ip >= op_ + onb or op_ >= ip + inb:
            return
        r, n = self._rank, self._size
        if alias == "inplace" and ip == op_ and inb == onb:
            return
        if alias == "gather" or alias == "scatter":
            # the in-place forms: the part is exactly the whole's chunk at this rank's offset
            # (gather: the input is the output's; scatter: the output is the input's)
            part, whole = ("input", "output") if alias == "gather" else ("output", "input")
            pp, pnb, wp, wnb = (ip, inb, op_, onb) if alias == "gather" else (op_, onb, ip, inb)
            if pp == wp + r * pnb and wnb == n * pnb:
                return
            raise AcceleratorValueError(
                f"{op}: the {part} overlaps the {whole} in memory but is not the {whole}'s "
                f"chunk at this rank's offset (rank {r}: {part} at byte {pp - wp:+d} of the "
                f"{whole}, expected {r * pnb}); pass a separate {part} array, or torch's "
                f"in-place form: the {part} is exactly {whole}[rank * k:(rank + 1) * k] (k = "
                f"the {part}'s elements)")
        raise AcceleratorValueError(f"{op}: the input and output arrays overlap in memory; "
                                    "this operation has no in-place form: pass separate "
                                    "arrays")

    def _check_red(self, op: str, eng: Engine, red: RedOp, arrays: Sequence[Any]) -> None:
        """The engine supports ``red`` on the arrays' dtypes (part of the argument check; it
        needs the engine, so it runs once that is known, still before anything is enqueued)."""
        if red is ReduceOp.PREMUL_SUM:
            raise AcceleratorValueError(f"{op}: ReduceOp.PREMUL_SUM needs its factor: pass "
                                        "op=accelrt.distributed._make_nccl_premul_sum(factor)")
        base = red.op if isinstance(red, PremulSum) else red   # PremulSum: its kind
        if (op in ("all_reduce", "all_reduce_coalesced") and base in _NO_COMPLEX
                and any(np.dtype(a.dtype).kind == "c" for a in arrays)):
            # torch 2.15's supports_complex(): refused before the engine, PRODUCT included
            raise AcceleratorValueError(
                f"all_reduce does not support {base} on complex tensors (use ReduceOp.SUM or "
                "ReduceOp.AVG, or reduce the real and imaginary parts as real arrays)")
        for a in arrays:
            key = (eng, base, a.dtype)
            if key not in self._supported:
                why = eng.supports(base, a.dtype)
                if why is not None:
                    raise AcceleratorValueError(f"{op}: {why}")
                self._supported.add(key)

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

    def drop_plans(self) -> None:
        """Forget the direct-call plans (an error was kept, debug flags changed, destroyed)."""
        self.plans_ar.clear()
        self.plans_bc.clear()
        self.plans_ag.clear()

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
