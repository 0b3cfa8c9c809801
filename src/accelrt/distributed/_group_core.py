"""A process group's state and its checks: the base class of
:class:`~accelrt.distributed._group.ProcessGroup`.

:class:`GroupCore` holds what a group is (its ranks, backend, timeout and torch's names), its
engines and comm streams (one per (group, device)), the error it keeps for later calls, the
cross-rank fingerprints of ``ACCELRT_DISTRIBUTED_DEBUG=DETAIL`` and the one argument check
that every operation runs before anything is enqueued. Running the operations (the inline,
queued, stream-ordered and staged paths, the direct-call plans and point-to-point) is
:class:`~accelrt.distributed._group.ProcessGroup`'s, in ``_group.py``.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np

from .._errors import AcceleratorTypeError, AcceleratorValueError, ClosedError, type_shown
from .._fork import reinit_after_fork
from .._stream import Stream
from ._debug import _DEVICE, PeerCounts, _describe, _torch_words
from ._engine import (Engine, EngineCapabilities, EngineContext, PremulSum, RedOp, ReduceOp,
                      registration)
from ._errors import DistBackendError, DistError, _RankNotInGroupError
from ._locations import _Loc, _locate, _span
from ._work import WATCHDOG, Work, detached

if TYPE_CHECKING:
    from ._group import ProcessGroup

_E = TypeVar("_E", bound=BaseException)

#: torch's ProcessGroup.BackendType names: ProcessGroup.name() answers "custom" for others
_TORCH_BACKEND_TYPES = ("gloo", "mpi", "nccl", "ucc", "undefined", "xccl")


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
class GroupCore:
    """A process group's state, engines, comm streams, kept error and checks: the base of
    :class:`~accelrt.distributed._group.ProcessGroup` (which runs the operations), never
    made on its own.
    """

    def __reduce_ex__(self, protocol: object) -> Any:
        # torch's ProcessGroup refuses copy.copy, copy.deepcopy and pickle with TypeError; a
        # shallow copy here was a second group sharing the engines and communicators but
        # counting its own sequence numbers, unknown to the world's registry
        raise TypeError(f"cannot pickle {type(self).__name__!r} object: a process group "
                        "belongs to the processes that made it and cannot be copied or sent; "
                        "pass its ranks (get_process_group_ranks) or its group_name instead")

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

    def drop_plans(self) -> None:
        """Forget the direct-call plans (an error was kept, debug flags changed, destroyed)."""
        self.plans_ar.clear()
        self.plans_bc.clear()
        self.plans_ag.clear()
