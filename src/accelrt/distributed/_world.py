"""The process-wide state of accelrt.distributed: the world group, the groups made since
:func:`~accelrt.distributed.init_process_group`, and the ``group`` argument every public
function takes (``None``: the world; ``GroupMember.NON_GROUP_MEMBER``: not a member).

Example::

    >>> from accelrt.distributed._world import GroupMember, _S
    >>> _S.world is None, GroupMember.WORLD is None
    (True, True)
"""

from __future__ import annotations

import datetime
import os
from typing import TYPE_CHECKING, Union

from ._errors import _NotRegisteredError, _WrongGroupError
from ._group import ProcessGroup
from ._store import Store, _seconds_of
from .._errors import type_shown

if TYPE_CHECKING:
    from typing import TypeAlias

    from .._array import Array
    from .._typing import HostArray


class _NonMember:
    """The group handle of a rank that is not in a group (``GroupMember.NON_GROUP_MEMBER``)."""

    def __repr__(self) -> str:
        return "<accelrt.distributed.GroupMember.NON_GROUP_MEMBER>"


class GroupMember:
    """``GroupMember.WORLD`` (the default group, or None) and ``NON_GROUP_MEMBER``.

    Example::

        >>> from accelrt.distributed import GroupMember
        >>> GroupMember.NON_GROUP_MEMBER
        <accelrt.distributed.GroupMember.NON_GROUP_MEMBER>
    """

    WORLD: ProcessGroup | None = None
    NON_GROUP_MEMBER = _NonMember()


class _State:
    world: ProcessGroup | None = None
    store: Store | None = None   # the store the world met through (kept alive with it)
    groups: list[ProcessGroup] = []
    counter = 0
    pg_count = 0   # get_pg_count(): groups made since init (the world included)
    #: the global ranks (group-rank order) of the last group new_group made without this
    #: rank: torch records every group's rank map, a non-member's under NON_GROUP_MEMBER
    #: (each such new_group overwrites it), so get_group_rank, get_global_rank and
    #: get_process_group_ranks of NON_GROUP_MEMBER answer for that group
    nonmember_ranks: list[int] | None = None
    hook_installed = False


_S = _State()

#: what every ``group`` argument accepts: a group, ``GroupMember.NON_GROUP_MEMBER`` (this rank
#: is not a member: the call does nothing) or None (the world)
GroupArg = ProcessGroup | _NonMember | None

#: what every array argument accepts ("tensor" in torch's names): an :class:`accelrt.Array`
#: or a numpy array (host memory)
ArrayArg: TypeAlias = Union["Array", "HostArray"]

#: what every ``timeout`` argument accepts: a ``datetime.timedelta`` or seconds (None: the
#: default)
TimeoutArg: TypeAlias = datetime.timedelta | float | None


def _seconds(timeout: TimeoutArg, default: float) -> float:
    if timeout is None:
        env = os.environ.get("ACCELRT_DISTRIBUTED_TIMEOUT")
        if not env:
            return default
        try:   # checked as an argument is: a negative or junk value aborted every operation
            timeout = float(env)
        except ValueError:
            raise ValueError(f"ACCELRT_DISTRIBUTED_TIMEOUT must be a number of seconds, got "
                             f"{env!r}") from None
    value = _seconds_of(timeout)
    if not value > 0:
        raise ValueError(f"timeout must be positive, got {value}")
    if value > datetime.timedelta.max.total_seconds():   # inf too: a store needs a timedelta
        raise ValueError(f"timeout must be finite (at most datetime.timedelta.max), got "
                         f"{value}")
    return value


def _rank_not_in_group(group: GroupArg) -> bool:
    """Whether ``group`` is ``GroupMember.NON_GROUP_MEMBER`` (this rank is not in the group
    it was handed), torch's private helper: ``None`` (the world) and a group are False.

    Example::

        >>> _rank_not_in_group(GroupMember.NON_GROUP_MEMBER), _rank_not_in_group(None)
        (True, False)
    """
    if group is None:
        return False
    return group is GroupMember.NON_GROUP_MEMBER


def _group(group: GroupArg) -> ProcessGroup | None:
    if _S.world is None:
        raise ValueError("Default process group has not been initialized, please make sure to "
                         "call init_process_group.")
    if group is None:
        return _S.world
    if isinstance(group, _NonMember):
        return None
    if not isinstance(group, ProcessGroup):
        raise _WrongGroupError(f"group must be a ProcessGroup or None, got "
                               f"{type_shown(group)}")
    return group


def _get_default_group() -> ProcessGroup:
    """The world group (torch's private ``_get_default_group``).

    Raises:
        ValueError: no default group (torch's text).
    """
    g = _group(None)
    assert g is not None
    return g


def _get_process_group_name(pg: object) -> str:
    """``pg``'s :attr:`~ProcessGroup.group_name` while it is registered, else ``"None"`` (a
    destroyed group, ``None``, ``NON_GROUP_MEMBER``, ...), as torch's private helper.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist._get_process_group_name(None)
        'None'
    """
    if isinstance(pg, ProcessGroup) and not pg.destroyed and pg in _S.groups:
        return pg.group_name
    return "None"


def _resolve_process_group(group_name: str) -> ProcessGroup:
    """The registered group whose :attr:`~ProcessGroup.group_name` is ``group_name`` (torch's
    private ``distributed_c10d._resolve_process_group``).

    Raises:
        TypeError: ``group_name`` is not a str.
        RuntimeError: no registered group has that name (torch's text): a group that
            ``destroy_process_group`` destroyed is forgotten.
    """
    if not isinstance(group_name, str):
        raise TypeError(f"_resolve_process_group(): group_name must be a str (a group's "
                        f"group_name, e.g. '0' for the world), got {type_shown(group_name)}")
    for g in _S.groups:
        if g.group_name == group_name and not g.destroyed:
            return g
    raise RuntimeError(f"Could not resolve the process group registered under the name "
                       f"{group_name} (pass the group_name of a group that exists: "
                       "pg.group_name)")


def _warn_not_member(op: str, stacklevel: int = 3) -> None:
    import warnings
    rank = -1 if _S.world is None else _S.world.rank()   # get_rank(): the caller checked
    warnings.warn(f"Running {op} on global rank {rank} which does not belong to the "
                  "given group.", stacklevel=stacklevel)


def _member(group: GroupArg, op: str) -> ProcessGroup | None:
    """``group``'s process group (:func:`_group`), or None, with torch's warning, where this
    rank is not a member: ``op`` then does nothing."""
    g = _group(group)
    if g is None:
        _warn_not_member(op, stacklevel=4)   # the warning names the caller of ``op``
    return g


def _ranks_of(group: ProcessGroup | _NonMember | None) -> tuple[list[int], str]:
    """(global ranks in group-rank order, name) of a registered ``group``
    (:func:`_registered`), and of ``NON_GROUP_MEMBER`` after a :func:`new_group` that left
    this rank out (the ranks of the last such group, as torch's rank map keeps them)."""
    if isinstance(group, _NonMember) and _S.world is not None and \
            _S.nonmember_ranks is not None:
        return _S.nonmember_ranks, "NON_GROUP_MEMBER"
    g = _registered(group)
    return g.global_ranks, repr(g._label)


def _registered(group: ProcessGroup | _NonMember | None) -> ProcessGroup:
    """``group``'s process group (:func:`_group`) where torch looks it up among the
    registered groups (``_world.pg_group_ranks``: ranks and rank translation): a
    ``ValueError`` with torch's text (also a ``KeyError``, which torch's
    ``get_process_group_ranks`` raises) for ``NON_GROUP_MEMBER`` and for a group that
    :func:`~accelrt.distributed.destroy_process_group` destroyed (torch forgets it there)."""
    g = _group(group)
    if g is None:
        raise _NotRegisteredError("Group NON_GROUP_MEMBER is not registered, please create "
                                  "group with torch.distributed.new_group API (this rank is "
                                  "not a member)")
    if g.destroyed:
        raise _NotRegisteredError(f"Group {g!r} is not registered, please create group with "
                                  "torch.distributed.new_group API (destroy_process_group "
                                  "destroyed it)")
    return g


def _in_world_map(group: GroupArg) -> ProcessGroup:
    """``group``'s process group where torch looks it up in ``_world.pg_map`` (its backend:
    ``get_backend``, ``get_backend_config``): a group given is used as it is, without the
    default group (torch's ``group or _get_default_group()``); ``NON_GROUP_MEMBER`` is
    "Invalid process group specified" and a destroyed group "not initialized in the world
    group map", each a ``ValueError`` as in torch."""
    g = group if isinstance(group, ProcessGroup) else _group(group)
    if g is None:
        raise ValueError("Invalid process group specified")
    if g.destroyed:
        raise ValueError(f"Process group {g!r} is not initialized in the world group map. "
                         "Please initialize the group first (destroy_process_group destroyed "
                         "it).")
    return g


class group:   # noqa: N801  (torch.distributed.group)
    """``group.WORLD``: the default group (``torch.distributed.group.WORLD``), None before
    :func:`init_process_group`.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.group.WORLD is None
        True
    """

    WORLD: ProcessGroup | None = None


_GroupNS = group   # functions whose parameter is named ``group`` set group.WORLD through this
