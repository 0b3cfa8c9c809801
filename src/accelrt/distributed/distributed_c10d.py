"""``torch.distributed.distributed_c10d``'s names, for code that imports them from there
(``from torch.distributed.distributed_c10d import _get_default_group, ProcessGroup``):
the same objects as :mod:`accelrt.distributed`'s, nothing of its own.

It holds the names of torch 2.15's ``distributed_c10d.__all__`` that accelrt has, the others
of its names that accelrt.distributed has (``DistStoreError``, ``rendezvous``,
``register_rendezvous_handler``, ``_coalescing_manager``, ``_rank_not_in_group``,
``_get_process_group_name``), and torch's private helpers ``_get_default_group``,
``_get_global_rank`` (``get_global_rank``) and ``_resolve_process_group`` (the group of a
``group_name``). A name accelrt lacks raises ``AttributeError`` naming the reason (an
import of it: Python's ``ImportError``); docs/differences.md lists them.

Example::

    >>> from accelrt.distributed.distributed_c10d import _get_default_group, get_rank
    >>> import accelrt.distributed as dist
    >>> dist.init_process_group("mpi")
    >>> _get_default_group() is dist.group.WORLD, get_rank()
    (True, 0)
    >>> dist.destroy_process_group()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from . import (
    Backend,
    DebugLevel,
    GroupMember,
    GroupName,
    P2POp,
    PrefixStore,
    ProcessGroup,
    ReduceOp,
    Store,
    Work,
    all_gather,
    all_gather_coalesced,
    all_gather_into_tensor,
    all_gather_object,
    all_gather_single,
    all_reduce,
    all_reduce_coalesced,
    all_to_all,
    all_to_all_single,
    barrier,
    batch_isend_irecv,
    broadcast,
    broadcast_object_list,
    default_pg_timeout,
    destroy_process_group,
    gather,
    gather_into_tensor,
    gather_object,
    gather_single,
    get_backend,
    get_backend_config,
    get_debug_level,
    get_default_backend_for_device,
    get_global_rank,
    get_group_rank,
    get_node_local_rank,
    get_pg_count,
    get_process_group_ranks,
    get_rank,
    get_world_size,
    group,
    init_process_group,
    irecv,
    is_backend_available,
    is_gloo_available,
    is_initialized,
    is_mpi_available,
    is_nccl_available,
    is_torchelastic_launched,
    is_ucc_available,
    is_xccl_available,
    isend,
    monitored_barrier,
    new_group,
    new_subgroups,
    new_subgroups_by_enumeration,
    recv,
    recv_object_list,
    reduce,
    reduce_scatter,
    reduce_scatter_single,
    reduce_scatter_tensor,
    scatter,
    scatter_object_list,
    send,
    send_object_list,
    set_timeout,
    split_group,
    supports_complex,
)
# the other names of torch's module that accelrt.distributed has, and torch's private helpers
from . import DistStoreError as DistStoreError
from . import _coalescing_manager as _coalescing_manager
from . import _get_process_group_name as _get_process_group_name
from . import _rank_not_in_group as _rank_not_in_group
from . import register_rendezvous_handler as register_rendezvous_handler
from . import rendezvous as rendezvous
from ._world import _get_default_group as _get_default_group
from ._world import _resolve_process_group as _resolve_process_group

#: torch's deprecated name of :func:`get_global_rank`
_get_global_rank = get_global_rank

# torch 2.15's distributed_c10d.__all__, less the names below (_MISSING)
__all__ = [
    "Backend", "DebugLevel", "GroupMember", "GroupName", "P2POp", "PrefixStore",
    "ProcessGroup", "ReduceOp", "Store", "Work", "all_gather", "all_gather_coalesced",
    "all_gather_into_tensor", "all_gather_object", "all_gather_single", "all_reduce",
    "all_reduce_coalesced", "all_to_all", "all_to_all_single", "barrier", "batch_isend_irecv",
    "broadcast", "broadcast_object_list", "default_pg_timeout", "destroy_process_group",
    "gather", "gather_into_tensor", "gather_object", "gather_single", "get_backend",
    "get_backend_config", "get_debug_level", "get_default_backend_for_device",
    "get_global_rank", "get_group_rank", "get_node_local_rank", "get_pg_count",
    "get_process_group_ranks", "get_rank", "get_world_size", "group", "init_process_group",
    "irecv", "is_backend_available", "is_gloo_available", "is_initialized",
    "is_mpi_available", "is_nccl_available", "is_torchelastic_launched", "is_ucc_available",
    "is_xccl_available", "isend", "monitored_barrier", "new_group", "new_subgroups",
    "new_subgroups_by_enumeration", "recv", "recv_object_list", "reduce", "reduce_scatter",
    "reduce_scatter_single", "reduce_scatter_tensor", "scatter", "scatter_object_list",
    "send", "send_object_list", "set_timeout", "split_group", "supports_complex",
]

_OPTIONS = ("torch's C++ ProcessGroup interface takes it; accelrt's groups run the "
            "functional collectives (all_reduce(..., group=g))")
_BACKEND_CLASS = ("a torch C++ backend class; accelrt's engines are Engine objects "
                  "(Backend.register_backend) and groups come from init_process_group/new_group")
#: the names of torch 2.15's distributed_c10d.__all__ accelrt has not, and why
_MISSING = {
    **dict.fromkeys(("AllToAllOptions", "AllreduceCoalescedOptions", "AllreduceOptions",
                     "BarrierOptions", "BroadcastOptions", "GatherOptions", "ReduceOptions",
                     "ReduceScatterOptions", "ScatterOptions"), _OPTIONS),
    **dict.fromkeys(("ProcessGroupGloo", "ProcessGroupNCCL", "ProcessGroupNCCL2",
                     "ProcessGroupNCCLLazy"), _BACKEND_CLASS),
    "BackendConfig": "torch's per-device backend map object; get_backend_config(group) "
                     "answers the map as a string",
    "get_backend_impl": "it returns torch's C++ Backend object of a group, which accelrt's "
                        "engines have not; use get_backend(group)",
    "shrink_group": "NCCL 2.27's ncclCommShrink is not in nccl4py and MPI has no shrink; "
                    "make the smaller group with new_group(ranks)",
    "record_comm": "it names collectives in torch's profiler, which accelrt has not",
    "reduce_op": "deprecated in torch; use ReduceOp",
}

if not TYPE_CHECKING:   # (mypy keeps reporting a name that is not here)
    def __getattr__(name: str) -> NoReturn:
        where = "module 'accelrt.distributed.distributed_c10d' has no attribute"
        if name in _MISSING:
            raise AttributeError(f"{where} {name!r}: {_MISSING[name]} (docs/differences.md)",
                                 name=name)
        raise AttributeError(f"{where} {name!r} (it holds the names of "
                             "torch.distributed.distributed_c10d that accelrt.distributed "
                             "has: see its __all__ and docs/distributed.md)", name=name)
