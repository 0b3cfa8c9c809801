"""Collectives on picklable Python objects (``broadcast_object_list``, ``all_gather_object``,
...): pickled on the host, moved over the group's private control communicator.

Example::

    >>> import accelrt.distributed as dist
    >>> dist.init_process_group("mpi")
    >>> out = [None]; dist.all_gather_object(out, {"a": 1}); out
    [{'a': 1}]
    >>> dist.destroy_process_group()
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Sequence
from typing import Any

from .._array import Array
from .._errors import type_shown
from .._typing import DeviceLike
from ._errors import DistError
from . import _group as _group_mod
from ._group import ProcessGroup
from ._world import GroupArg, _group, _member


# ---------------------------------------------------------------------------- objects
class _HostOnlyPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, Array):
            raise TypeError("object collectives are host-only: an accelrt.Array inside the "
                            "object would unpickle on another rank's device; send "
                            "array.numpy() or use a collective on the array")
        return NotImplemented


def _dumps(obj: Any) -> bytes:
    out = io.BytesIO()
    _HostOnlyPickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return out.getvalue()


# What ``weights_only=True`` unpickles besides the types pickle needs no global for (None,
# bool, int, float, str, bytes, list, tuple, dict): plain data and numpy arrays, as torch's
# weights-only unpickler allows plain data and tensors.
_WEIGHTS_ONLY_GLOBALS = frozenset({
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "complex"),
    ("builtins", "bytearray"), ("builtins", "slice"), ("builtins", "range"),
    ("collections", "OrderedDict"), ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
})


class _WeightsOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _WEIGHTS_ONLY_GLOBALS or (
                module == "numpy.dtypes" and name.endswith("DType")):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"Weights only load failed: the received object needs the global "
            f"{module}.{name}, which weights_only=True does not allow (it unpickles plain "
            "data and numpy arrays only); pass weights_only=False if you trust the sender")


def _loads(data: bytes, weights_only: bool) -> Any:
    if weights_only:
        return _WeightsOnlyUnpickler(io.BytesIO(data)).load()
    return pickle.loads(data)


class _Unpicklable:
    """What a rank sends in place of an object it could not pickle: the collective still
    runs on every rank (none waits for it until the timeout), the failing rank re-raises its
    pickling error and the ranks that would have received the object raise
    :class:`DistError` naming it (:func:`_received`)."""

    def __init__(self, rank: int, reason: str) -> None:
        self.rank, self.reason = rank, reason

    def __reduce__(self) -> tuple[Any, ...]:
        return _Unpicklable, (self.rank, self.reason)


def _pickled(g: ProcessGroup, obj: Any) -> tuple[bytes | _Unpicklable, list[Exception]]:
    """``obj`` pickled (host-only) and ``[]``, or the marker of a failure and ``[error]``,
    the error for :func:`_raise_own` to re-raise on this rank once the collective ran (in a
    list made in the ``return``: a local of this frame, which the error's traceback holds,
    would be a cycle)."""
    try:
        return _dumps(obj), []
    except Exception as exc:
        return _Unpicklable(g.global_rank, f"{type(exc).__name__}: {exc}"), [exc]


def _raise_own(kept: list[Exception]) -> None:
    """Raise this rank's first pickling error (from :func:`_pickled`), if any, taking it
    out of ``kept``. A kept error is never raised from a local variable: its traceback holds
    the raising frames, so a local would be a cycle (error -> traceback -> frame -> error)
    that kept those frames, and the caller's objects and lists in them, alive until the
    garbage collector ran.

    Example::

        >>> from accelrt.distributed._objects import _raise_own
        >>> kept = [TypeError("cannot pickle 'lock'")]
        >>> _raise_own(kept)
        Traceback (most recent call last):
            ...
        TypeError: cannot pickle 'lock'
        >>> kept
        []
    """
    if kept:
        raise kept.pop()


def _received(g: ProcessGroup, op: str, got: Any, weights_only: bool) -> Any:
    """Unpickle what ``op`` received; a sender's failure marker raises :class:`DistError`."""
    if isinstance(got, _Unpicklable):
        raise DistError(f"rank {g.global_rank}: {op}: rank {got.rank} could not pickle its "
                        f"object(s) ({got.reason}); nothing was received from it",
                        rank=g.global_rank, op=op)
    return _loads(got, weights_only)


def _settle(g: ProcessGroup, op: str, kept: list[Exception], got: Sequence[Any],
            weights_only: bool) -> list[Any]:
    """The objects of a gathered list: this rank's own pickling error first (``kept``), then
    a :class:`DistError` naming every sender that failed, else the unpickled items."""
    _raise_own(kept)
    failed = [x for x in got if isinstance(x, _Unpicklable)]
    if len(failed) > 1:
        raise DistError(f"rank {g.global_rank}: {op}: ranks "
                        f"{', '.join(str(x.rank) for x in failed)} could not pickle their "
                        f"objects ({failed[0].reason}, ...)", rank=g.global_rank, op=op)
    return [_received(g, op, x, weights_only) for x in got]


def _check_slots(op: str, slots: Any, name: str, n: int, where: str = "") -> None:
    """``slots`` (the list an object collective fills) has ``n`` slots, at least.

    Raises:
        TypeError: ``slots`` has no length (None, a generator).
        ValueError: it has fewer than ``n`` slots.

    Example::

        >>> from accelrt.distributed._objects import _check_slots
        >>> _check_slots("all_gather_object", [None, None], "object_list", 2)
        >>> _check_slots("all_gather_object", [None], "object_list", 2)
        Traceback (most recent call last):
            ...
        ValueError: all_gather_object: object_list must have 2 slots (at least)
    """
    try:
        short = len(slots) < n
    except TypeError:
        raise TypeError(f"{op}: {name} must be a list of {n} slots (one per rank){where}, got "
                        f"{type_shown(slots)}") from None
    if short:
        raise ValueError(f"{op}: {name} must have {n} slots (at least){where}")


def _obj_comm(op: str, group: GroupArg,
              member: bool = False) -> tuple[ProcessGroup | None, Any]:
    """``group``'s process group and its control communicator; (None, None) with torch's
    warning where this rank is not in ``group``, or, with ``member``, torch 2.15's
    ``ValueError`` (send/recv_object_list translate their peer's rank in the group first,
    which fails for ``NON_GROUP_MEMBER``; the error torch's c10d logger raises then is
    "Invalid process group specified")."""
    if member:
        g = _group(group)
        if g is None:
            raise ValueError(f"Invalid process group specified: {op} was given a group this "
                             "rank is not in (new_group returned "
                             "GroupMember.NON_GROUP_MEMBER here); call it only on the group's "
                             "ranks")
    else:
        g = _member(group, op)
    if g is None:
        return None, None
    g._raise_kept()
    comm = g.control()
    if comm is None:
        raise DistError(f"{op} needs MPI (launch through mpiexec)", rank=g.global_rank)
    return g, comm


def _obj_call(g: ProcessGroup, op: str, fn: Callable[[], Any], p2p: bool = False,
              desc: tuple[Any, ...] = ()) -> Any:
    """Run an object collective's MPI call ``fn`` (``p2p``: a send or receive) after the
    group's queued work, under the group's sequence number and timeout
    (:meth:`ProcessGroup._inline`); returns its result. Arguments are checked and objects
    pickled before: nothing here raises for them."""
    g.drain()
    if _group_mod.DETAIL and not p2p:
        # compared as the array collectives are: a mismatch (an all_reduce on one rank and
        # this on another) raises on every rank instead of mixing MPI calls
        g.fingerprint(None, g.collective_desc(op, desc))
    seq = g.next_p2p_seq() if p2p else g.next_seq()
    box: list[Any] = []
    g._inline(op, seq, lambda: box.append(fn()))
    return box[0]


def broadcast_object_list(object_list: list[Any], src: int | None = None,
                          group: GroupArg = None, device: DeviceLike = None,
                          group_src: int | None = None, weights_only: bool = False) -> None:
    """Replace ``object_list``'s items on every other rank with those (pickled) of global
    rank ``src`` or group rank ``group_src`` (neither: global rank 0); the source's list keeps
    its own objects, as torch's. With ``weights_only=True`` the receivers unpickle only plain
    data and numpy arrays (else ``pickle.UnpicklingError``), as torch's ``weights_only``; the
    same holds for every ``*_object*`` collective.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> objs = [{"lr": 0.1}]
        >>> dist.broadcast_object_list(objs, src=0); objs; dist.destroy_process_group()
        [{'lr': 0.1}]
    """
    g, comm = _obj_comm("broadcast_object_list", group)
    if g is None:
        return
    root = g.canonical_rank(src, group_src, "src", default=0)
    data, kept = _pickled(g, list(object_list)) if g.rank() == root else (None, [])
    got = _obj_call(g, "broadcast_object_list", lambda: comm.bcast(data, root=root),
                    desc=(root,))
    _raise_own(kept)
    if g.rank() != root:   # the source keeps its own objects (torch 2.15: not unpickled)
        object_list[:] = _received(g, "broadcast_object_list", got, weights_only)


def all_gather_object(object_list: list[Any], obj: Any, group: GroupArg = None,
                      weights_only: bool = False) -> None:
    """Fill ``object_list`` (one slot per rank) with every rank's ``obj``; a longer list keeps
    its items past the group's size, as torch's.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = [None]
        >>> dist.all_gather_object(out, "hi"); out; dist.destroy_process_group()
        ['hi']
    """
    g, comm = _obj_comm("all_gather_object", group)
    if g is None:
        return
    n = g.size()
    data, kept = _pickled(g, obj)
    got = _obj_call(g, "all_gather_object", lambda: comm.allgather(data))
    # checked after the collective, as torch's list fails its assignment after it: a rank
    # with a bad list raises but stays in step (raised before, its next object collective
    # would meet the others' current one); torch fills the first n slots of a longer list
    _check_slots("all_gather_object", object_list, "object_list", n)
    object_list[:n] = _settle(g, "all_gather_object", kept, got, weights_only)


def gather_object(obj: Any, object_gather_list: list[Any] | None = None,
                  dst: int | None = None, group: GroupArg = None,
                  group_dst: int | None = None, weights_only: bool = False) -> None:
    """Gather every rank's ``obj`` into ``object_gather_list`` on global rank ``dst`` or group
    rank ``group_dst`` (neither: global rank 0); a longer list keeps its items past the
    group's size, as torch's.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = [None]
        >>> dist.gather_object(3, out, dst=0); out; dist.destroy_process_group()
        [3]
    """
    g, comm = _obj_comm("gather_object", group)
    if g is None:
        return
    root = g.canonical_rank(dst, group_dst, "dst", default=0)
    if g.rank() == root:
        if not object_gather_list:   # torch 2.15 checks this one before the collective
            raise ValueError("Argument ``gather_list`` must be specified on destination rank.")
    elif object_gather_list:   # torch 2.15's _validate_output_list_for_rank
        raise ValueError("Argument ``gather_list`` must NOT be specified on non-destination "
                         "ranks.")
    data, kept = _pickled(g, obj)
    got = _obj_call(g, "gather_object", lambda: comm.gather(data, root=root),
                    desc=(root,))
    if g.rank() == root:
        assert object_gather_list is not None
        # a short list after the collective, as torch's IndexError: every rank stays in step
        _check_slots("gather_object", object_gather_list, "object_gather_list", g.size(),
                     " on the destination rank")
        object_gather_list[:g.size()] = _settle(g, "gather_object", kept, got, weights_only)
    _raise_own(kept)


def scatter_object_list(scatter_object_output_list: list[Any],
                        scatter_object_input_list: list[Any] | None = None,
                        src: int | None = None, group: GroupArg = None,
                        group_src: int | None = None, weights_only: bool = False) -> None:
    """Set ``scatter_object_output_list[0]`` on group rank k to item k of the
    ``scatter_object_input_list`` of global rank ``src`` or group rank ``group_src``
    (neither: global rank 0).

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = [None]
        >>> dist.scatter_object_list(out, ["a"], src=0); out; dist.destroy_process_group()
        ['a']
    """
    g, comm = _obj_comm("scatter_object_list", group)
    if g is None:
        return
    if not isinstance(scatter_object_output_list, list) or not scatter_object_output_list:
        raise ValueError("Expected argument scatter_object_output_list to be a list of size "
                         "at least 1.")
    root = g.canonical_rank(src, group_src, "src", default=0)
    items: list[bytes | _Unpicklable] | None = None
    kept: list[Exception] = []
    if g.rank() == root:
        if scatter_object_input_list is None:
            raise ValueError("source rank must provide non-None scatter_object_input_list")
        if len(scatter_object_input_list) != g.size():
            raise ValueError(f"scatter_object_list: the source rank needs {g.size()} input "
                             "objects")
        items = []
        for x in scatter_object_input_list:
            data, failed = _pickled(g, x)
            items.append(data)
            kept = kept or failed   # the first error (a later one's list holds no cycle)
        if kept:   # every rank learns that the scatter failed
            items = [next(x for x in items if isinstance(x, _Unpicklable))] * g.size()
    mine = _obj_call(g, "scatter_object_list", lambda: comm.scatter(items, root=root),
                     desc=(root,))
    _raise_own(kept)
    scatter_object_output_list[0] = _received(g, "scatter_object_list", mine, weights_only)


_OBJ_TAG = 0x7AD0   # on the group's private control communicator: never a user tag


def send_object_list(object_list: list[Any], dst: int | None = None, group: GroupArg = None,
                     device: DeviceLike = None, group_dst: int | None = None,
                     use_batch: bool = False, weights_only: bool = False) -> None:
    """Send the (pickled, host-only) objects of ``object_list`` to global rank ``dst`` (or
    group rank ``group_dst``), which receives them with :func:`recv_object_list` into a list
    of the same length. ``use_batch`` (torch: send its size and data messages through
    ``batch_isend_irecv``) changes nothing here: the objects travel as one MPI message either
    way. ``weights_only`` is the receiver's (:func:`recv_object_list`).

    Raises:
        ValueError: no destination, both ``dst`` and ``group_dst``, or this rank itself; a
            ``group`` this rank is not in ("Invalid process group specified", as torch 2.15).
        TypeError: an object holds an accelrt array (send ``array.numpy()``).

    Example::

        >>> import accelrt.distributed as dist
        >>> callable(dist.send_object_list)
        True
    """
    g, comm = _obj_comm("send_object_list", group, member=True)
    assert g is not None
    peer = g.canonical_rank(dst, group_dst, "dst", root=False)
    g.check_args("send_object_list", peer=peer, peer_role="destination")
    data, kept = _pickled(g, list(object_list))
    _obj_call(g, "send_object_list", lambda: comm.send(data, dest=peer, tag=_OBJ_TAG),
              p2p=True)
    _raise_own(kept)


def recv_object_list(object_list: list[Any], src: int | None = None, group: GroupArg = None,
                     device: DeviceLike = None, group_src: int | None = None,
                     use_batch: bool = False, weights_only: bool = False) -> int:
    """Receive :func:`send_object_list`'s objects from global rank ``src`` or group rank
    ``group_src`` (neither: any rank, an accelrt addition: torch asks for one) into
    ``object_list`` (same length as the sender's); returns the sender's global rank.
    ``use_batch`` changes nothing (see
    :func:`send_object_list`); ``weights_only=True`` unpickles only plain data and numpy
    arrays (else ``pickle.UnpicklingError``).

    Raises:
        ValueError: the sender's list has another length (``object_list`` is left as it
            was); a ``group`` this rank is not in ("Invalid process group specified", as
            torch 2.15).

    Example::

        >>> import accelrt.distributed as dist
        >>> callable(dist.recv_object_list)
        True
    """
    g, comm = _obj_comm("recv_object_list", group, member=True)
    assert g is not None
    peer = (None if src is None and group_src is None else
            g.canonical_rank(src, group_src, "src", root=False))
    if peer is not None:
        g.check_args("recv_object_list", peer=peer, peer_role="source")
    from ._mpi import mpi
    MPI = mpi()
    status = MPI.Status()
    data = _obj_call(g, "recv_object_list", lambda: comm.recv(
        source=MPI.ANY_SOURCE if peer is None else peer, tag=_OBJ_TAG, status=status),
        p2p=True)
    sender = g.global_ranks[int(status.Get_source())]
    got = _received(g, "recv_object_list", data, weights_only)
    if len(got) != len(object_list):
        raise ValueError(f"recv_object_list: rank {sender} sent {len(got)} objects but "
                         f"object_list has {len(object_list)} slots; pass a list of the "
                         "sender's length")
    object_list[:] = got
    return sender
