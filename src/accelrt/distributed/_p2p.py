"""Point-to-point operations: :func:`send`, :func:`recv`, :func:`isend`, :func:`irecv` and
:func:`batch_isend_irecv` of :class:`P2POp` lists.

Example::

    >>> from accelrt.distributed import P2POp, isend
    >>> P2POp.__name__, isend.__name__
    ('P2POp', 'isend')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._errors import _TypeValueError
from ._group import Work
from ._world import _S, ArrayArg, GroupArg, _group, _registered, _warn_not_member


# ---------------------------------------------------------------------------- point-to-point
def isend(tensor: ArrayArg, dst: int | None = None, group: GroupArg = None, tag: int = 0,
          group_dst: int | None = None) -> Work | None:
    """Start sending ``tensor`` to global rank ``dst`` (or group rank ``group_dst``: give
    exactly one); ``wait()`` on the result.

    Example (a world of one rank sends to itself)::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> sent = dist.isend(acc.full((2,), 5.0, device="cpu"), dst=0)
        >>> out = acc.empty((2,), device="cpu")
        >>> dist.irecv(out, src=0).wait(), sent.wait(), out.tolist()
        (True, True, [5.0, 5.0])
        >>> dist.destroy_process_group()
    """
    return _p2p("isend", tensor, dst, group_dst, group, tag, send=True, blocking=False)


def irecv(tensor: ArrayArg, src: int | None = None, group: GroupArg = None, tag: int = 0,
          group_src: int | None = None) -> Work | None:
    """Start receiving into ``tensor`` from global rank ``src`` or group rank ``group_src``
    (neither: any rank, MPI only).

    Example (``src=None``: from whichever rank sends; here the only one)::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> got = acc.zeros((3,), dtype="int32", device="cpu")
        >>> w = dist.irecv(got)
        >>> dist.isend(acc.full((3,), 7, dtype="int32", device="cpu"), dst=0).wait()
        True
        >>> w.source_rank(), got.tolist()
        (0, [7, 7, 7])
        >>> dist.destroy_process_group()
    """
    return _p2p("irecv", tensor, src, group_src, group, tag, send=False, blocking=False)


def send(tensor: ArrayArg, dst: int | None = None, group: GroupArg = None, tag: int = 0,
         group_dst: int | None = None) -> None:
    """Send ``tensor`` to global rank ``dst`` or group rank ``group_dst`` (give exactly one;
    blocks until the buffer may be reused).

    Raises:
        ValueError: ``dst`` is this rank (a blocking send to itself would wait for ever;
            :func:`isend` may send to itself), or both or neither of ``dst`` and
            ``group_dst`` were given.

    Example::

        >>> import accelrt.distributed as dist
        >>> callable(dist.send)
        True
    """
    w = _p2p("send", tensor, dst, group_dst, group, tag, send=True, blocking=True)
    if w is not None:
        w.wait()


def recv(tensor: ArrayArg, src: int | None = None, group: GroupArg = None, tag: int = 0,
         group_src: int | None = None) -> int:
    """Receive into ``tensor`` from global rank ``src`` or group rank ``group_src`` (neither:
    any rank); returns the sender's global rank (-1 if not a member of ``group``).

    Raises:
        ValueError: ``src`` is this rank (a blocking receive from itself would wait for
            ever; :func:`irecv` may receive from itself), or, with ``src=None``, the data
            came from this rank's own :func:`isend` (torch's check).

    Example::

        >>> import accelrt.distributed as dist
        >>> callable(dist.recv)
        True
    """
    w = _p2p("recv", tensor, src, group_src, group, tag, send=False, blocking=True)
    if w is None:
        return -1
    w.wait()
    g = _group(group)
    assert g is not None
    source = w.source_rank()
    if src is None and group_src is None:
        g.check_args("recv", peer=source, peer_role="source")
    return g.global_ranks[source]


def _p2p(op: str, tensor: Any, rank: int | None, group_rank: int | None, group: GroupArg,
         tag: int, *, send: bool, blocking: bool) -> Work | None:
    """Post ``op`` (the peer: global ``rank`` or ``group_rank``; neither: any source) after
    the argument check (:meth:`ProcessGroup.canonical_rank`, :meth:`ProcessGroup.check_args`)."""
    g = _group(group)
    if g is None:
        _warn_not_member(op)
        return None
    peer = (None if not send and rank is None and group_rank is None else
            g.canonical_rank(rank, group_rank, "dst" if send else "src", root=False))
    return g.p2p(op, tensor, peer, tag, send, blocking)


@dataclass
class P2POp:
    """One operation for :func:`batch_isend_irecv`: ``P2POp(dist.isend, array, peer)``, or
    ``P2POp(dist.irecv, array, group=g, group_peer=k)`` (a rank of ``g``); exactly one of
    ``peer`` and ``group_peer``. Made while a world exists, it holds both (and its group), as
    torch's does; a group that was destroyed raises ``ValueError`` ("... is not registered"),
    as torch's.

    Example::

        >>> import numpy as np, accelrt.distributed as dist
        >>> dist.P2POp(dist.isend, np.zeros(2), 1).peer
        1
    """

    op: Callable[..., Work | None]
    tensor: Any
    peer: int | None = None
    group: GroupArg = None
    tag: int = 0
    group_peer: int | None = None

    def __post_init__(self) -> None:
        if self.op not in (isend, irecv):
            raise ValueError("Invalid ``op``. Expected ``op`` to be of type "
                             "``torch.distributed.isend`` or ``torch.distributed.irecv``.")
        # torch's P2POp is given its peer by exactly one of peer and group_peer
        if self.peer is not None and self.group_peer is not None:
            raise ValueError("Can't specify both group_rank and global_rank: pass peer= (a "
                             "global rank) or group_peer= (a rank of the group), not both")
        if self.peer is None and self.group_peer is None:
            raise ValueError("Must specify global_rank or group_rank: pass peer= (a global "
                             "rank) or group_peer= (a rank of the group)")
        # as torch's: once a world exists, the group is resolved and the peer named both ways
        # (a rank outside the group raises here); a P2POp made before init keeps its form
        g = None if _S.world is None else _group(self.group)
        if g is not None:
            if g.destroyed:   # torch looks the group up among the registered ones
                _registered(g)
            k = g.canonical_rank(self.peer, self.group_peer, "peer", root=False)
            self.group, self.peer, self.group_peer = g, g.global_ranks[k], k

    def _peer(self) -> tuple[int | None, int | None]:
        """(peer, group_peer) with one of them None, as isend/irecv take them: the group rank
        where both are known."""
        return (None, self.group_peer) if self.group_peer is not None else (self.peer, None)


def batch_isend_irecv(p2p_op_list: list[P2POp]) -> list[Work]:
    """Post every send and receive of ``p2p_op_list``; returns their work handles.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.batch_isend_irecv([])
        []
    """
    if not isinstance(p2p_op_list, list) or not all(isinstance(p, P2POp) for p in p2p_op_list):
        raise _TypeValueError("Invalid ``p2p_op_list``. Each op is expected to to be of type "
                               "``torch.distributed.P2POp``.")
    if not p2p_op_list:
        return []
    groups = {id(_group(p.group)) for p in p2p_op_list}
    if len(groups) != 1:
        raise ValueError("All ops need to use the same group.")
    g = _group(p2p_op_list[0].group)
    if g is not None:   # every operation's arguments, before any is posted
        g._raise_kept()   # a destroyed or broken group says so (the checks need its engine)
        for p in p2p_op_list:
            send = p.op is isend
            g.canonical_rank(*p._peer(), "peer", root=False)
            g.check_args("isend" if send else "irecv", (p.tensor,) if send else (),
                         () if send else (p.tensor,), tag=p.tag)
    # engines that launch a batch together (NCCL's group): asked, not named
    grouped = [] if g is None else [e for e in g._engines.values()
                                    if g.capabilities(e).grouped_p2p]
    works: list[Work] = []
    ctxs: list[Any] = []    # the groups entered: each is ended, also when a later one fails
    try:
        for e in {type(e): e for e in grouped}.values():
            ctx = e.p2p_group()
            ctx.__enter__()
            ctxs.append(ctx)
        for p in p2p_op_list:
            peer, group_peer = p._peer()
            w = p.op(p.tensor, peer, p.group, p.tag, group_peer)
            if w is not None:
                works.append(w)
    finally:
        for ctx in reversed(ctxs):
            ctx.__exit__(None, None, None)
    if grouped and g is not None:
        # NCCL launches the grouped sends and receives at the group's end (through a
        # background thread on a non-blocking communicator): the done events recorded inside
        # the group covered nothing. Wait until the group reached the streams, then record
        # them again.
        for e in grouped:
            e.p2p_group_settle(g.timeout, "batch_isend_irecv")
        for w in works:
            if w._event is not None and w._stream_of is not None:
                w._event = g.dev_ctx(*w._stream_of).stream.record_event()
    return works
