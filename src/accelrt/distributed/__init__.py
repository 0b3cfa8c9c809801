"""Collectives between processes, with torch.distributed's names ("tensor" reads "array").

Engines: ``"mpi"`` (mpi4py over any MPI) for cpu, OpenCL and numpy arrays, with CUDA and
OpenCL memory staged through pinned host memory when the MPI is not device-aware; ``"nccl"``
(nccl4py) for CUDA arrays; third-party engines through :func:`register_backend`. Importing
this module imports no engine. Launch with ``mpiexec -n N python -m accelrt.distributed.run
script.py`` (or plain ``mpiexec python script.py``), or torchrun-style ``env://`` for NCCL.
See ``docs/distributed.md``.

Example (one process: a world of one rank)::

    >>> import accelrt as acc
    >>> import accelrt.distributed as dist
    >>> dist.init_process_group("mpi")
    >>> a = acc.full((3,), 2.0, device="cpu")
    >>> dist.all_reduce(a, op=dist.ReduceOp.SUM)
    >>> dist.get_rank(), dist.get_world_size(), a.tolist()
    (0, 1, [2.0, 2.0, 2.0])
    >>> dist.destroy_process_group()
"""

from __future__ import annotations

from typing import NewType

# the package is split by concept; every public name is re-exported here
from ._breakpoint import _make_distributed_pdb as _make_distributed_pdb
from ._breakpoint import breakpoint
from ._coalescing import _coalescing_manager as _coalescing_manager
from ._collectives import _make_nccl_premul_sum as _make_nccl_premul_sum
from ._collectives import (
                           all_gather,
                           all_gather_coalesced,
                           all_gather_into_tensor,
                           all_gather_single,
                           all_reduce,
                           all_reduce_coalesced,
                           all_to_all,
                           all_to_all_single,
                           barrier,
                           broadcast,
                           gather,
                           gather_into_tensor,
                           gather_single,
                           monitored_barrier,
                           reduce,
                           reduce_scatter,
                           reduce_scatter_single,
                           reduce_scatter_tensor,
                           scatter,
)
from ._debug import DebugLevel, get_debug_level, set_debug_level, set_debug_level_from_env
from ._engine import Backend, Engine, EngineContext, PremulSum, ReduceOp, register_backend
from ._errors import (
                           DistBackendError,
                           DistError,
                           DistNetworkError,
                           DistStoreError,
                           DistTimeoutError,
                           QueueEmptyError,
)
from ._group import Future, ProcessGroup, Work
from ._groups import (
                           get_backend,
                           get_backend_config,
                           get_global_rank,
                           get_group_rank,
                           get_node_local_rank,
                           get_pg_count,
                           get_process_group_ranks,
                           get_rank,
                           get_world_size,
                           new_group,
                           new_subgroups,
                           new_subgroups_by_enumeration,
                           set_timeout,
                           split_group,
)
from ._init import (
                           destroy_process_group,
                           get_default_backend_for_device,
                           init_process_group,
                           is_available,
                           is_backend_available,
                           is_gloo_available,
                           is_initialized,
                           is_mpi_available,
                           is_nccl_available,
                           is_torchelastic_launched,
                           is_ucc_available,
                           is_xccl_available,
                           supports_complex,
)
from ._objects import (
                           all_gather_object,
                           broadcast_object_list,
                           gather_object,
                           recv_object_list,
                           scatter_object_list,
                           send_object_list,
)
from ._p2p import P2POp, batch_isend_irecv, irecv, isend, recv, send
from ._rendezvous import register_rendezvous_handler, rendezvous
from ._filestore import FileStore
from ._store import HashStore, PrefixStore, Store
from ._tcpstore import TCPStore
from ._world import GroupMember, group
from ._world import _get_process_group_name as _get_process_group_name
from ._world import _rank_not_in_group as _rank_not_in_group

__all__ = [
    "Backend", "DebugLevel", "DeviceMesh", "DistBackendError", "DistError", "DistNetworkError",
    "DistStoreError", "DistTimeoutError", "Engine", "EngineContext", "FileStore", "Future",
    "GroupMember",
    "GroupName", "HashStore", "P2POp", "PrefixStore", "PremulSum", "ProcessGroup",
    "QueueEmptyError", "ReduceOp", "Store", "TCPStore", "Work", "all_gather",
    "all_gather_coalesced", "all_gather_into_tensor", "all_gather_object", "all_gather_single",
    "all_reduce", "all_reduce_coalesced", "all_to_all", "all_to_all_single", "barrier",
    "batch_isend_irecv", "breakpoint", "broadcast", "broadcast_object_list",
    "default_pg_timeout",
    "destroy_process_group", "gather", "gather_into_tensor", "gather_object", "gather_single",
    "get_backend", "get_backend_config", "get_debug_level", "get_default_backend_for_device",
    "get_global_rank", "get_group_rank", "get_node_local_rank", "get_pg_count",
    "get_process_group_ranks", "get_rank", "get_world_size", "group", "init_device_mesh",
    "init_process_group",
    "irecv", "is_available", "is_backend_available", "is_gloo_available", "is_initialized",
    "is_mpi_available", "is_nccl_available", "is_torchelastic_launched", "is_ucc_available",
    "is_xccl_available", "isend", "monitored_barrier", "new_group", "new_subgroups",
    "new_subgroups_by_enumeration", "recv", "recv_object_list", "reduce", "reduce_scatter",
    "reduce_scatter_single", "reduce_scatter_tensor", "register_backend",
    "register_rendezvous_handler", "rendezvous", "scatter",
    "scatter_object_list", "send", "send_object_list", "set_debug_level",
    "set_debug_level_from_env", "set_timeout", "split_group", "supports_complex",
]

#: the default timeout of accelrt's process groups (torch's ``default_pg_timeout``; here 10
#: minutes for every engine, or ``ACCELRT_DISTRIBUTED_TIMEOUT``): accelrt.distributed.constants'
from . import constants as constants
from .constants import default_pg_timeout as default_pg_timeout

#: the type of process group names (torch's ``GroupName``)
GroupName = NewType("GroupName", str)

# torch.distributed.distributed_c10d's names (``dist.distributed_c10d._get_default_group``)
from . import distributed_c10d as distributed_c10d  # noqa: E402

# torch.distributed.device_mesh (torch.distributed re-exports its two names too)
from . import device_mesh as device_mesh  # noqa: E402
from .device_mesh import DeviceMesh, init_device_mesh  # noqa: E402
