"""Groups: ranks and sizes, :func:`new_group`, :func:`split_group`, subgroups, rank
translation, and a group's timeout and backend.

Example::

    >>> import accelrt.distributed as dist
    >>> dist.init_process_group("mpi")
    >>> g = dist.new_group([0]); dist.get_process_group_ranks(g)
    [0]
    >>> dist.destroy_process_group()
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .._typing import DeviceSpec
from ._engine import Engine
from ._engine import parse_backend as _parse_backend
from ._engine import require_engines as _require_engines
from ._group import DEFAULT_TIMEOUT, ProcessGroup
from ._store import _int
from ._world import (
    _S,
    GroupArg,
    GroupMember,
    TimeoutArg,
    _group,
    _in_world_map,
    _NonMember,
    _ranks_of,
    _registered,
    _seconds,
)
from .._errors import type_shown
from ._errors import _AssertValueError


def set_timeout(timeout: TimeoutArg, group: GroupArg = None) -> None:
    """Make ``timeout`` (a ``datetime.timedelta`` or seconds) the limit of ``group``'s (the
    world's by default) future operations, for every engine of it (the watchdog enforces it;
    torch's MPI backend ignores this).

    Raises:
        ValueError: this rank is not in ``group``, or ``timeout`` is not positive.

    Example::

        >>> import datetime, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> dist.set_timeout(datetime.timedelta(seconds=30)); dist.group.WORLD.timeout
        30.0
        >>> dist.destroy_process_group()
    """
    g = _group(group)
    if g is None:
        raise ValueError("Invalid process group specified")
    if timeout is None:
        raise TypeError("set_timeout() needs a timeout (a datetime.timedelta or seconds)")
    g.set_timeout(_seconds(timeout, g.timeout))


def get_pg_count() -> int:
    """The number of process groups made since :func:`init_process_group`: the world and
    every call of :func:`new_group` and :func:`split_group` (:func:`new_subgroups` makes one
    per subgroup), the groups this rank is not a member of included, so every rank answers
    the same (torch's ``group_count``).

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.get_pg_count()
        0
    """
    return _S.pg_count


def get_backend_config(group: GroupArg = None) -> str:
    """The engine of each device type of ``group`` (the world by default), as
    ``"cpu:mpi,cuda:nccl"`` (torch's ``BackendConfig`` string: no spaces).

    Raises:
        ValueError: this rank is not in ``group``, or ``group`` was destroyed (as
            :func:`get_backend`; torch fails there with an internal ``TypeError``).

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("cpu:mpi"); dist.get_backend_config()
        'cpu:mpi'
        >>> dist.destroy_process_group()
    """
    g = _in_world_map(group)
    return ",".join(f"{d}:{e}" for d, e in g.engine_map.items())


def get_rank(group: GroupArg = None) -> int:
    """This process's rank in ``group`` (-1 if not a member, ``NON_GROUP_MEMBER``), as
    torch's: the default group must exist, and ``group`` must be registered.

    Raises:
        ValueError: no default group, or ``group`` was destroyed ("is not registered").

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi"); dist.get_rank(); dist.destroy_process_group()
        0
    """
    if isinstance(group, _NonMember):
        return -1           # answered before the default group is looked up, as in torch
    return _registered(group).rank()


def get_world_size(group: GroupArg = None) -> int:
    """Number of ranks in ``group`` (-1 if this rank is not a member). As torch's, a group
    given is asked its size, registered or not: a destroyed group still answers, also after
    :func:`destroy_process_group` of everything; ``group=None`` needs the default group.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi"); dist.get_world_size(); dist.destroy_process_group()
        1
    """
    if isinstance(group, _NonMember):
        return -1
    g = group if isinstance(group, ProcessGroup) else _group(group)
    assert g is not None
    return g.size()


def get_backend(group: GroupArg = None) -> str:
    """The group's backend string (``"mpi"``, ``"nccl"`` or ``"cpu:mpi,cuda:nccl"``).

    Raises:
        ValueError: this rank is not in ``group`` ("Invalid process group specified"),
            ``group`` was destroyed ("not initialized in the world group map", also after
            :func:`destroy_process_group` of everything), or ``group=None`` without a
            default group; torch's texts.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi"); dist.get_backend(); dist.destroy_process_group()
        'mpi'
    """
    return _in_world_map(group).backend_str


def get_node_local_rank(fallback_rank: int | None = None) -> int:
    """``LOCAL_RANK`` (set by ``accelrt.distributed.run`` and torchrun), or the MPI launcher's
    node-local rank, else ``fallback_rank``.

    Raises:
        RuntimeError: none is known and no fallback was given.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.get_node_local_rank(fallback_rank=0) >= 0
        True
    """
    for var in ("LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"):
        if var in os.environ:
            return int(os.environ[var])
    if fallback_rank is not None:
        return int(fallback_rank)
    raise RuntimeError("LOCAL_RANK is not in the environment: launch with "
                       "'mpiexec -n N python -m accelrt.distributed.run' or pass fallback_rank")


def _group_ranks(ranks: Sequence[int] | None, n: int, sort_ranks: bool = True) -> list[int]:
    """``new_group``'s ranks (every rank of a world of ``n`` for None), checked in torch
    2.15's order: a sequence of ints, no duplicate, no more than the world, each in range."""
    # each message ends with torch's text for the same mistake
    if ranks is not None and (isinstance(ranks, (str, bytes))
                              or not isinstance(ranks, Iterable)):
        raise TypeError(f"new_group(): ranks must be a list of int ranks or None, got "
                        f"{type_shown(ranks)}; ranks must be a sequence of integers")
    try:
        members = (list(range(n)) if ranks is None
                   else [_int(r, "new_group(): each of ranks") for r in ranks])
    except TypeError as err:
        raise TypeError(f"{err}; ranks must be a sequence of integers") from None
    if sort_ranks:
        members.sort()
    outside = [r for r in members if not 0 <= r < n]
    if len(set(members)) != len(members) or outside:
        if len(set(members)) != len(members):
            why = f"ranks list must not contain duplicate entries, got {members}"
        elif len(members) > n:
            why = ("the new group's world size should be less or equal to the world size set "
                   "by init_process_group")
        else:
            why = (f"Rank {outside[0]} is out of range. Valid ranks are 0 to {n - 1} "
                   f"(world_size={n})")
        raise ValueError(f"new_group(): ranks must be distinct world ranks in [0, {n}), got "
                         f"{list(ranks or [])}; {why}")
    return members


def new_group(ranks: Sequence[int] | None = None, timeout: TimeoutArg = None,
              backend: str | None = None, pg_options: object = None,
              use_local_synchronization: bool = False, group_desc: str | None = None,
              device_id: DeviceSpec | None = None,
              sort_ranks: bool = True) -> ProcessGroup | _NonMember:
    """A group of the world's ``ranks`` (all by default). Every rank of the world must call
    it, with the same ``ranks``; ranks outside get ``GroupMember.NON_GROUP_MEMBER``. With
    ``use_local_synchronization=True`` (as in torch) only the members call it, and a rank
    outside that calls it gets ``NON_GROUP_MEMBER`` at once (not in a world met through a
    store, where every rank calls it). Group
    rank ``k`` is the ``k``-th of the sorted ``ranks``, or with ``sort_ranks=False`` the
    ``k``-th as given (as in torch). ``device_id`` (torch 2.15) is the group's bound device:
    it must be the world's bound device when the world has one (``AssertionError``, torch's,
    compared before any check), else it is checked as ``init_process_group``'s; by default
    the group keeps the world's.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> g = dist.new_group([0])
        >>> dist.get_rank(g), dist.get_world_size(g)
        (0, 1)
        >>> dist.destroy_process_group()
    """
    world = _group(None)
    assert world is not None
    if device_id is not None and world.bound_device_id is not None:
        _group_device(world.bound_device_id, device_id)   # torch 2.15 compares first
    n = world.size()
    members = _group_ranks(ranks, n, sort_ranks)
    if ranks is not None and not members and not use_local_synchronization:
        # torch 2.15: an empty list names the default group's ranks in its group helper,
        # which then asserts on every rank (use_local_synchronization=True gives every rank
        # NON_GROUP_MEMBER first, as here below); torch has named the group by then, so its
        # group_count has moved on: get_pg_count() too
        _S.pg_count += 1
        raise _AssertValueError("Group rank must be specified for group members: "
                                "new_group(ranks=[]) names no rank; pass ranks=None for "
                                "every rank of the world, or the ranks of the group")
    engine_map = world.engine_map if backend is None else _parse_backend(backend)
    backend_str = world.backend_str if backend is None else str(backend)
    if backend is not None:
        _require_engines(engine_map)   # every rank, before the collective split
    t = world.timeout if timeout is None else _seconds(timeout, DEFAULT_TIMEOUT)
    if device_id is not None:   # torch 2.15: the world's bound device, or the group's own
        bound = _group_device(world.bound_device_id, device_id)
    else:
        bound = world.bound_device_id
    me = world.rank()
    member = me in members
    # torch's use_local_synchronization: only the members call it; the others get
    # NON_GROUP_MEMBER at once (and record nothing). Over MPI (MPI_Comm_create_group); a
    # world met through a store (NCCL only) splits its communicators collectively, so there
    # every rank still calls it
    local = bool(use_local_synchronization) and world.mpi_comm is not None
    if local and not member:
        return GroupMember.NON_GROUP_MEMBER
    # a member's key is its place in `members` (sorted, or as given with sort_ranks=False)
    # torch names a use_local_synchronization group by a hash of its ranks
    g = _split(world, members if member else None, members.index(me) if member else me,
               engine_map, backend_str, t, group_desc, "new_group",
               local=local, hashed=members if use_local_synchronization else None)
    if isinstance(g, ProcessGroup):
        g.bound_device_id = bound
    else:
        _S.nonmember_ranks = list(members)   # torch's rank map under NON_GROUP_MEMBER
    return g


def _group_device(bound: Any, device_id: DeviceSpec) -> Any:
    """``new_group(device_id=)``'s bound device: in a bound world ``bound`` itself, any other
    device (one without an index too) torch 2.15's ``AssertionError``, compared before any
    check; in an unbound world ``device_id`` checked as ``init_process_group``'s."""
    from .._device import device as _device
    from ._init import _bound_device
    if bound is None:
        return _bound_device(device_id, group=True)
    if _device(device_id) != bound:
        raise AssertionError("Mismatched bound device between new pg and the default pg.")
    return bound


def _split(parent: ProcessGroup, members: list[int] | None, key: int,
           engine_map: dict[str, str], backend_str: str, timeout: float,
           group_desc: str | None, op: str, *, local: bool = False,
           hashed: Sequence[int] | None = None) -> ProcessGroup | _NonMember:
    """The one split of a group, collective over ``parent``'s ranks: this rank joins the group
    of the parent ranks ``members`` (None: it joins none) at the place ``key`` orders it
    (the members' keys order them as ``members`` does). The parent's MPI communicator is split
    (``MPI_Comm_split``, colored by the member list) and so are its NCCL communicators
    (``ncclCommSplit``); the MPI engines start from the new communicator at once
    (:meth:`ProcessGroup.start_mpi_engines`), other engines when first used.
    ``local`` (``new_group(use_local_synchronization=True)``): only the members call it
    (``MPI_Comm_create_group``, collective over them alone; NCCL communicators then start
    from the new MPI communicator when first used).
    ``hashed``: the ranks torch 2.15 names the group by (``_hash_ranks_to_str``), else
    it is named by the count of groups made (``_process_group_name``).
    Returns the new group, or ``GroupMember.NON_GROUP_MEMBER``."""
    _S.counter += 1
    group_name = _group_name(hashed)
    _S.pg_count += 1   # on every rank, member or not, as torch's group_count: ranks agree
    name = group_desc or f"group{_S.counter}"
    if group_desc is None and op == "split_group":   # torch: the parent's split count
        group_desc = f"{parent.group_desc}:split:{parent.splits}"
    if op == "split_group":
        parent.splits += 1
    color = None if members is None else min(members)   # disjoint lists: a unique color
    parent.drain()
    sub = None
    from ._work import WATCHDOG
    if parent.mpi_comm is not None:
        from ._mpi import mpi
        MPI = mpi()
        with WATCHDOG.watching(parent, op, parent._seq):
            if local:
                assert members is not None
                sub = parent.mpi_comm.Create_group(parent.mpi_comm.Get_group().Incl(members))
            else:
                sub = parent.mpi_comm.Split(MPI.UNDEFINED if color is None else color, key)
        if color is None:
            sub = None
    sub_engines: dict[tuple[str, int], Engine] = {}
    for ekey, eng in list(parent._engines.items()) if not local else ():
        # NCCL communicators are split (ncclCommSplit); MPI engines start from `sub`
        if eng.name == "nccl" and engine_map.get(ekey[0]) == "nccl":
            child = eng.split(color, key, None)
            if child is not None:
                sub_engines[ekey] = child
    if members is None:
        return GroupMember.NON_GROUP_MEMBER
    ranks = [parent.global_ranks[r] for r in members]
    g = ProcessGroup(name, members.index(parent.rank()), len(members), ranks, engine_map,
                     backend_str, timeout, sub, parent.global_rank, group_name)
    g.bound_device_id = parent.bound_device_id   # as torch's new_group and split_group
    g.group_desc = "undefined" if group_desc is None else group_desc
    if sub is not None:
        with WATCHDOG.watching(g, op, 0):
            g.control()   # collective over the members: made now, while they are all here
        g.start_mpi_engines()   # (a collective too: see start_mpi_engines)
    g._preset.update(sub_engines)
    g.parent = parent
    g.threads_ok = parent.threads_ok
    _S.groups.append(g)
    return g


def _group_name(hashed: Sequence[int] | None, count: int | None = None) -> str:
    """torch 2.15's ``_process_group_name``, before the count moves on: the count of groups
    made (``count``, else ``get_pg_count()``) as a str, or with ``hashed`` the SHA-1 of those
    ranks and the count (the same on every rank that makes the group)."""
    count = _S.pg_count if count is None else count
    if hashed is None:
        return str(count)
    text = "_".join(["_".join(map(str, hashed)), str(count)])
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


def split_group(parent_pg: ProcessGroup | None = None,
                split_ranks: Sequence[Sequence[int]] | None = None, timeout: TimeoutArg = None,
                pg_options: object = None, group_desc: str | None = None,
                backend: str | None = None) -> ProcessGroup | _NonMember:
    """Split ``parent_pg`` (the world by default) into the groups of ``split_ranks``: lists of
    *parent group* ranks, disjoint; a rank's place in its list is its rank in the new group.
    Every rank of the parent must call it, with the same lists. Returns this rank's group, or
    ``GroupMember.NON_GROUP_MEMBER`` if no list names it. ``backend`` keeps some of the
    parent's per-device engines (each must be the parent's engine for that device type).

    Raises:
        ValueError: no lists, an empty list, a list longer than the world, a repeated rank, a
            rank in two lists, a rank not in the parent, a parent this rank is not in, or a
            ``backend`` the parent does not run.
        TypeError: a rank of ``split_ranks`` is not an int (numpy ints are).

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> g = dist.split_group(split_ranks=[[0]])
        >>> dist.get_process_group_ranks(g); dist.destroy_process_group()
        [0]
    """
    if split_ranks is None or len(split_ranks) == 0:
        raise ValueError("split_ranks cannot be None or empty")
    world = _group(None)
    assert world is not None
    if parent_pg is None:
        parent_pg = world
    if not isinstance(parent_pg, ProcessGroup):
        # torch 2.15: NON_GROUP_MEMBER is no registered group, and says so first
        raise ValueError(f"Group {parent_pg!r} is not registered: global rank {world.rank()} "
                         "is not part of the parent group; split a group this rank is in")
    if parent_pg.destroyed:
        raise ValueError(f"Group {parent_pg!r} is not registered (it was destroyed)")
    n = parent_pg.size()
    seen: dict[int, int] = {}
    lists = [list(r) for r in split_ranks]
    for k, ranks in enumerate(lists):
        if len(ranks) == 0:
            raise ValueError("the split group cannot be empty")
        if len(ranks) > world.size():
            raise ValueError("the split group's size should be less or equal to the "
                             "world_size set by init_process_group")
        if len(ranks) != len(set(ranks)):
            raise ValueError("the split group cannot have duplicate ranks")
        for r in ranks:
            if isinstance(r, (bool, np.bool_)) or not isinstance(r, (int, np.integer)):
                # torch's binding refuses a rank that is no int with a TypeError
                raise TypeError(f"split_group(): split_ranks must hold int ranks (of the "
                                f"parent group), got {type_shown(r)} {r!r:.40}")
            if not 0 <= r < n:
                raise ValueError(f"split_ranks holds {r!r}, which is not a rank of the parent "
                                 f"group (its ranks are 0..{n - 1}; split_ranks are group "
                                 "ranks, not global ranks)")
            if int(r) in seen:
                raise ValueError(f"Rank {r} is in two splits, {lists[seen[int(r)]]} and "
                                 f"{ranks}; the splits must not overlap")
            seen[int(r)] = k
    engine_map, backend_str = parent_pg.engine_map, parent_pg.backend_str
    if backend is not None:
        wanted = _parse_backend(str(backend))
        if ":" not in str(backend):   # a bare engine name: the parent's devices running it
            wanted = {d: e for d, e in parent_pg.engine_map.items() if e == wanted[d]
                      } if any(parent_pg.engine_map.get(d) == e for d, e in wanted.items()) \
                else {}
            if not wanted:
                raise ValueError(f"Requested backend '{str(backend).lower()}' is not present "
                                 f"in the parent process group (parent backends: "
                                 f"{parent_pg.engine_map})")
        for dev, eng in wanted.items():
            if dev not in parent_pg.engine_map:
                raise ValueError(f"Requested backend for device '{dev}' is not present in the "
                                 f"parent process group (parent backends: "
                                 f"{parent_pg.engine_map})")
            if parent_pg.engine_map[dev] != eng:
                raise ValueError(f"Backend mismatch for device '{dev}': parent has "
                                 f"'{parent_pg.engine_map[dev]}', requested '{eng}'. Backend "
                                 "names must match exactly when filtering split_group "
                                 "backends.")
        engine_map = wanted
        backend_str = str(backend).lower()
    t = parent_pg.timeout if timeout is None else _seconds(timeout, DEFAULT_TIMEOUT)
    me = parent_pg.rank()
    mine = next((ranks for ranks in lists if me in ranks), None)
    members = None if mine is None else [int(r) for r in mine]
    # torch names the group by the hash of this rank's list (the first one where it is in
    # none): its parent group ranks, as given
    return _split(parent_pg, members, 0 if mine is None else mine.index(me), engine_map,
                  backend_str, t, group_desc, "split_group",
                  hashed=mine if mine is not None else lists[0])


def new_subgroups(group_size: int | None = None, group: GroupArg = None, timeout: TimeoutArg = None,
                  backend: str | None = None, pg_options: object = None,
                  group_desc: str | None = None) -> tuple[ProcessGroup | _NonMember,
                                                          list[ProcessGroup | _NonMember]]:
    """Split ``group``'s ranks (the world's by default) into groups of ``group_size``
    consecutive ranks (default: the number of CUDA devices of a node). Every rank of the world
    must call it (as torch's). Returns (this rank's group, every group:
    ``GroupMember.NON_GROUP_MEMBER`` where this rank is not a member).

    Raises:
        ValueError: ``group_size`` is not positive, exceeds or does not divide the group's
            size, or is None without CUDA devices; this rank is not in ``group``.
        TypeError: ``group_size`` is not an int (numpy ints are; a bool is not).

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> cur, all_groups = dist.new_subgroups(group_size=1)
        >>> dist.get_process_group_ranks(cur), len(all_groups)
        ([0], 1)
        >>> dist.destroy_process_group()
    """
    if group_size is None:   # torch 2.15 checks this first, before the default group
        from .. import backends
        try:
            count = backends.get_backend("cuda").device_count()
        except Exception:
            count = 0
        if count == 0:
            # torch 2.15's words (its strings are joined without spaces)
            raise ValueError("Default group size only takes effect when CUDA/XPU is available."
                             "If your subgroup using a backend that does not depend on "
                             "CUDA/XPU,please pass in 'group_size' correctly.")
        group_size = count
    world = _group(None)
    assert world is not None
    # an int, numpy's too (torch compares and ranges it: a float or a str is its TypeError)
    if isinstance(group_size, (bool, np.bool_)) or not isinstance(group_size, (int, np.integer)):
        raise TypeError(f"new_subgroups(): group_size must be an int (the size of each "
                        f"subgroup), got {type_shown(group_size)}")
    group_size = int(group_size)
    if group_size <= 0:
        raise ValueError(f"The arg 'group_size' ({group_size}) must be positive")
    # torch's order: the group's size first (-1 where this rank is not a member, so such a
    # rank raises here, before any group is made), then its ranks
    n = get_world_size(group)
    if n < group_size:
        raise ValueError(f"The arg 'group_size' ({group_size}) must not exceed the world size "
                         f"({n})")
    if n % group_size:
        raise ValueError(f"The world size ({n}) must be divisible by 'group_size={group_size}'")
    ranks = get_process_group_ranks(group)
    cur, groups = new_subgroups_by_enumeration(
        [ranks[k:k + group_size] for k in range(0, n, group_size)], timeout=timeout,
        backend=backend, pg_options=pg_options, group_desc=group_desc)
    if cur is None:
        raise ValueError(f"new_subgroups: global rank {world.rank()} is not in group "
                         f"{group!r}, whose ranks it splits")
    return cur, groups


def new_subgroups_by_enumeration(ranks_per_subgroup_list: Sequence[Sequence[int]],
                                 timeout: TimeoutArg = None, backend: str | None = None,
                                 pg_options: object = None, group_desc: str | None = None
                                 ) -> tuple[ProcessGroup | _NonMember | None,
                                            list[ProcessGroup | _NonMember]]:
    """One group per rank list (disjoint lists of world ranks). Every rank must call it.
    Returns (this rank's group, or None if it is in none; every group, with
    ``GroupMember.NON_GROUP_MEMBER`` where this rank is not a member).

    Raises:
        ValueError: the list is empty or a rank appears in two lists.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> cur, _ = dist.new_subgroups_by_enumeration([[0]])
        >>> dist.get_world_size(cur); dist.destroy_process_group()
        1
    """
    if not ranks_per_subgroup_list:
        raise ValueError("The arg 'ranks_per_subgroup_list' cannot be empty")
    world = _group(None)
    assert world is not None
    seen: dict[int, int] = {}
    for k, ranks in enumerate(ranks_per_subgroup_list):
        # torch makes each list's group (new_group's checks) before it looks for overlaps;
        # here every list is checked, in that order, before any group is made
        _group_ranks(ranks, world.size())
        for r in ranks:
            if r in seen:
                raise ValueError(f"Rank {r} has appeared in both subgroup "
                                 f"{list(ranks_per_subgroup_list[seen[r]])} and {list(ranks)}")
            seen[r] = k
    me = get_rank()
    cur: ProcessGroup | _NonMember | None = None
    groups: list[ProcessGroup | _NonMember] = []
    for ranks in ranks_per_subgroup_list:
        # torch 2.15 gives every subgroup the same group_desc
        sub = new_group(list(ranks), timeout=timeout, backend=backend, pg_options=pg_options,
                        group_desc=group_desc)
        groups.append(sub)
        if me in ranks:
            cur = sub
    return cur, groups


def get_process_group_ranks(group: ProcessGroup | _NonMember | None) -> list[int]:
    """The global ranks of ``group``'s members, in group-rank order.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> dist.get_process_group_ranks(dist.group.WORLD); dist.destroy_process_group()
        [0]
    """
    ranks, _ = _ranks_of(group)
    return list(ranks)


def get_global_rank(group: ProcessGroup | _NonMember | None, group_rank: int) -> int:
    """The global rank of ``group``'s rank ``group_rank``.

    Raises:
        ValueError: ``group_rank`` is not a rank of ``group``.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> dist.get_global_rank(dist.new_group([0]), 0); dist.destroy_process_group()
        0
    """
    ranks, name = _ranks_of(group)
    if isinstance(group_rank, bool) or not isinstance(group_rank, (int, np.integer)) \
            or not 0 <= int(group_rank) < len(ranks):
        raise ValueError(f"Group rank {group_rank} is not part of group {name} (its ranks "
                         f"are 0..{len(ranks) - 1})")
    return ranks[int(group_rank)]


def get_group_rank(group: ProcessGroup | _NonMember | None, global_rank: int) -> int:
    """``group``'s rank of global rank ``global_rank``.

    Raises:
        ValueError: ``global_rank`` is not in ``group``.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> dist.get_group_rank(dist.new_group([0]), 0); dist.destroy_process_group()
        0
    """
    ranks, name = _ranks_of(group)
    if isinstance(global_rank, bool) or not isinstance(global_rank, (int, np.integer)):
        raise TypeError(f"global_rank must be an int, got {type_shown(global_rank)}")
    if int(global_rank) not in ranks:
        raise ValueError(f"Global rank {global_rank} is not part of group {name} (global "
                         f"ranks {ranks})")
    return ranks.index(int(global_rank))
