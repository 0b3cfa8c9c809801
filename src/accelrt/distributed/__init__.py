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

import datetime
import io
import os
import pickle
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NewType

import numpy as np

from .._array import Array
from .._errors import AcceleratorValueError
from ._engine import (Backend, Buf, Engine, EngineContext, PremulSum, RedOp, ReduceOp,
                      register_backend)
from ._engine import parse_backend as _parse_backend
from ._engine import require_engines as _require_engines
from ._errors import (DistBackendError, DistError, DistNetworkError, DistStoreError,
                      DistTimeoutError, QueueEmptyError)
from ._group import DEFAULT_TIMEOUT, DebugLevel, ProcessGroup, Work
from ._store import FileStore, HashStore, PrefixStore, Store
from ._tcpstore import TCPStore
from ._store import _int

__all__ = [
    "Backend", "DebugLevel", "DistBackendError", "DistError", "DistNetworkError",
    "DistStoreError", "DistTimeoutError", "Engine", "EngineContext", "FileStore", "GroupMember",
    "GroupName", "HashStore", "P2POp", "PrefixStore", "PremulSum", "ProcessGroup",
    "QueueEmptyError", "ReduceOp", "Store", "TCPStore", "Work", "all_gather",
    "all_gather_coalesced", "all_gather_into_tensor", "all_gather_object", "all_gather_single",
    "all_reduce", "all_reduce_coalesced", "all_to_all", "all_to_all_single", "barrier",
    "batch_isend_irecv", "broadcast", "broadcast_object_list", "default_pg_timeout",
    "destroy_process_group", "gather", "gather_into_tensor", "gather_object", "gather_single",
    "get_backend", "get_backend_config", "get_debug_level", "get_default_backend_for_device",
    "get_global_rank", "get_group_rank", "get_node_local_rank", "get_pg_count",
    "get_process_group_ranks", "get_rank", "get_world_size", "group", "init_process_group",
    "irecv", "is_available", "is_backend_available", "is_gloo_available", "is_initialized",
    "is_mpi_available", "is_nccl_available", "is_torchelastic_launched", "is_ucc_available",
    "is_xccl_available", "isend", "monitored_barrier", "new_group", "new_subgroups",
    "new_subgroups_by_enumeration", "recv", "recv_object_list", "reduce", "reduce_scatter",
    "reduce_scatter_single", "reduce_scatter_tensor", "register_backend", "scatter",
    "scatter_object_list", "send", "send_object_list", "set_debug_level",
    "set_debug_level_from_env", "set_timeout", "split_group", "supports_complex",
]

DEFAULT_INIT_TIMEOUT = 300.0


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
    hook_installed = False


_S = _State()

GroupArg = ProcessGroup | _NonMember | None


# ---------------------------------------------------------------------------- availability
def is_available() -> bool:
    """True: the distributed package is always importable (engines load when used).

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.is_available()
        True
    """
    return True


def is_mpi_available() -> bool:
    """True if mpi4py can be imported (without initializing MPI).

    Example::

        >>> import accelrt.distributed as dist
        >>> isinstance(dist.is_mpi_available(), bool)
        True
    """
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


def is_nccl_available() -> bool:
    """True if nccl4py (``nccl.core``) imports with its CUDA bindings (torch's "built with
    NCCL"; whether a GPU is present is :func:`init_process_group`'s check).

    Example::

        >>> import accelrt.distributed as dist
        >>> isinstance(dist.is_nccl_available(), bool)
        True
    """
    from ._nccl import nccl_available
    return nccl_available()


def is_gloo_available() -> bool:
    """True if ``backend="gloo"`` can run: it names the host engine, MPI, here (accelrt has no
    gloo of its own), so this is :func:`is_mpi_available`.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.is_gloo_available() == dist.is_mpi_available()
        True
    """
    return is_mpi_available()


def is_backend_available(backend: str) -> bool:
    """True if ``backend`` (an engine name, or a ``"cpu:mpi,cuda:nccl"`` map: every engine it
    names) is available: the built-in engines' ``is_<name>_available()``, and a registered
    third-party engine always. An unknown name is False.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.is_backend_available("mpi") == dist.is_mpi_available()
        True
        >>> dist.is_backend_available("nosuchengine")
        False
    """
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a string, got {type(backend).__name__}")
    names = [part.partition(":")[2] if ":" in part else part
             for part in backend.lower().split(",")]
    for name in names:
        reg = Backend._registry.get(name.strip())
        if reg is None or (reg.available is not None and not reg.available()):
            return False
    return True


def get_default_backend_for_device(device: Any) -> str:
    """The engine ``init_process_group(backend=None)`` uses for arrays of ``device`` (a device
    type, ``"cuda:1"``, an :class:`accelrt.device`, or an index of the current accelerator):
    ``"mpi"`` for cpu and OpenCL, ``"nccl"`` for CUDA (torch answers ``"gloo"`` for cpu: that
    is the MPI engine here).

    Raises:
        ValueError: no default engine for that device type.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.get_default_backend_for_device("cuda:0"), dist.get_default_backend_for_device("cpu")
        ('nccl', 'mpi')
    """
    if isinstance(device, str):
        kind = device.partition(":")[0]
    elif isinstance(device, int) and not isinstance(device, bool):
        from .. import current_accelerator
        acc_dev = current_accelerator()
        kind = "cpu" if acc_dev is None else acc_dev.type
    elif isinstance(getattr(device, "type", None), str):
        kind = device.type
    else:
        raise TypeError(f"device must be a device string, an accelrt.device or an int, got "
                        f"{type(device).__name__}")
    backend = Backend.default_device_backend_map.get(kind)
    if backend is None:
        raise ValueError(f"Default backend not registered for device : {device}")
    return backend


def is_initialized() -> bool:
    """True between :func:`init_process_group` and :func:`destroy_process_group`.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.is_initialized()
        False
    """
    return _S.world is not None


def is_ucc_available() -> bool:
    """False: accelrt has no UCC engine (torch's ``is_ucc_available``).

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.is_ucc_available(), dist.is_xccl_available()
        (False, False)
    """
    return False


def is_xccl_available() -> bool:
    """False: accelrt has no XCCL (Intel GPU) engine."""
    return False


def is_torchelastic_launched() -> bool:
    """True if ``TORCHELASTIC_RUN_ID`` is set (torchrun's, as torch checks).

    Example::

        >>> import accelrt.distributed as dist
        >>> isinstance(dist.is_torchelastic_launched(), bool)
        True
    """
    return os.getenv("TORCHELASTIC_RUN_ID") is not None


def supports_complex(reduceOp: ReduceOp) -> bool:   # noqa: N803  (torch's name)
    """False for the reductions torch refuses on complex arrays (``MAX``, ``MIN``,
    ``PRODUCT``, ``BAND``, ``BOR``, ``BXOR``), else True.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.supports_complex(dist.ReduceOp.SUM), dist.supports_complex(dist.ReduceOp.MAX)
        (True, False)
    """
    return reduceOp not in (ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT, ReduceOp.BAND,
                            ReduceOp.BOR, ReduceOp.BXOR)


#: the default timeout of accelrt's process groups (torch's ``default_pg_timeout``; here 10
#: minutes for every engine, or ``ACCELRT_DISTRIBUTED_TIMEOUT``)
default_pg_timeout = datetime.timedelta(seconds=DEFAULT_TIMEOUT)

#: the type of process group names (torch's ``GroupName``)
GroupName = NewType("GroupName", str)


def get_debug_level() -> DebugLevel:
    """The debug level: :class:`DebugLevel` ``OFF``, ``INFO`` or ``DETAIL`` (from
    :func:`set_debug_level`, or the environment, read at :func:`init_process_group`).

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.get_debug_level() in list(dist.DebugLevel)
        True
    """
    from ._group import LEVEL   # (read at the call: set_level rebinds it)
    return LEVEL


def set_debug_level(level: DebugLevel) -> None:
    """Make ``level`` (a :class:`DebugLevel`) the debug level, at once and over the
    environment. ``DETAIL`` makes every rank compare each collective's arguments (operation,
    sequence number, dtype, shape, root, reduction) with every other rank of the group before
    running it, raising :class:`DistError` naming the odd ranks on all of them: torch's
    collective fingerprint check. Every rank must use the same level.

    Raises:
        TypeError: ``level`` is not a :class:`DebugLevel`.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.set_debug_level(dist.DebugLevel.DETAIL); dist.get_debug_level()
        <DebugLevel.DETAIL: 2>
        >>> dist.set_debug_level(dist.DebugLevel.OFF)
    """
    if not isinstance(level, DebugLevel):
        raise TypeError(f"set_debug_level() takes a DebugLevel (DebugLevel.OFF, .INFO or "
                        f".DETAIL), got {level!r}")
    from ._group import set_level
    set_level(level, True)


def set_debug_level_from_env() -> None:
    """Set the debug level from ``ACCELRT_DISTRIBUTED_DEBUG``, else torch's
    ``TORCH_DISTRIBUTED_DEBUG`` (``OFF``, ``INFO`` or ``DETAIL``; neither: ``OFF``).

    Raises:
        ValueError: another value ("The value of TORCH_DISTRIBUTED_DEBUG must be OFF, INFO,
            or DETAIL.").

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.set_debug_level_from_env()
    """
    from ._group import debug_level, set_level
    set_level(DebugLevel[debug_level()], False)


def set_timeout(timeout: Any, group: GroupArg = None) -> None:
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
    """The number of process groups made since :func:`init_process_group` (the world, the
    groups of :func:`new_group` and :func:`split_group` on this rank).

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.get_pg_count()
        0
    """
    return _S.pg_count


def get_backend_config(group: GroupArg = None) -> str:
    """The engine of each device type of ``group`` (the world by default), as
    ``"cpu:mpi, cuda:nccl"`` (torch's ``BackendConfig`` string).

    Raises:
        ValueError: this rank is not in ``group``.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("cpu:mpi"); dist.get_backend_config()
        'cpu:mpi'
        >>> dist.destroy_process_group()
    """
    g = _group(group)
    if g is None:
        raise ValueError("Invalid process group specified")
    return ", ".join(f"{d}:{e}" for d, e in g.engine_map.items())


# ---------------------------------------------------------------------------- init
def _seconds(timeout: Any, default: float) -> float:
    if timeout is None:
        env = os.environ.get("ACCELRT_DISTRIBUTED_TIMEOUT")
        return float(env) if env else default
    if isinstance(timeout, datetime.timedelta):
        value = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        value = float(timeout)
    else:
        raise TypeError(f"timeout must be a datetime.timedelta or a number of seconds, got "
                        f"{type(timeout).__name__}")
    if not value > 0:
        raise ValueError(f"timeout must be positive, got {value}")
    if value > datetime.timedelta.max.total_seconds():   # inf too: a store needs a timedelta
        raise ValueError(f"timeout must be finite (at most datetime.timedelta.max), got "
                         f"{value}")
    return value


def _under_mpi_launcher() -> bool:
    from ._mpi import under_launcher
    return under_launcher()


def _install_abort_hook(comm_world: Any) -> None:
    """An uncaught exception on one rank aborts the whole job instead of hanging the others
    (``mpi4py.run``'s behaviour, for plain ``mpiexec python script.py``)."""
    if _S.hook_installed:
        return
    _S.hook_installed = True
    previous = sys.excepthook

    def hook(tp: Any, value: Any, tb: Any) -> None:
        try:
            previous(tp, value, tb)
            sys.stderr.flush()
            import time

            from ._work import ABORT_GRACE
            time.sleep(ABORT_GRACE)   # the launcher forwards the traceback before the abort
        finally:
            comm_world.Abort(1)

    sys.excepthook = hook


def init_process_group(backend: str | None = None, init_method: str | None = None,
                       timeout: Any = None, world_size: int = -1, rank: int = -1,
                       store: Any = None, group_name: str = "", pg_options: Any = None,
                       device_id: Any = None, _ranks: list[int] | None = None,
                       enable_reconfigure: bool = False) -> None:
    """Start the default process group (the world).

    Args:
        backend: ``"mpi"``, ``"gloo"`` (torch's CPU backend: the MPI engine here;
            ``get_backend()`` answers ``"gloo"``), ``"nccl"``, a per-device-type map such as
            ``"cpu:gloo,cuda:nccl"``, a registered engine, or None (cpu and opencl on MPI,
            cuda on NCCL, each started when first used; or ``ACCELRT_DISTRIBUTED_BACKEND``).
            Every engine the string names must be able to start here (torch's init
            constructs each backend of the map).
        init_method: ``"mpi://"`` (ranks from the MPI launcher; the default under
            ``mpiexec``), ``"env://"`` (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
            ``MASTER_PORT``, as torchrun sets them: rank 0 serves a :class:`TCPStore` there),
            ``"tcp://host:port"``, ``"file:///path"`` (a :class:`FileStore`) or None
            (detect). Through a store, NCCL's unique id is exchanged as in torch; the MPI
            engine cannot join ranks that no MPI launcher started (see
            ``docs/distributed.md``), so a store-based world of more than one rank serves
            NCCL only.
        timeout: a ``datetime.timedelta`` or seconds: the longest any operation of the group
            may take before the job is aborted with the rank, operation and sequence number
            (default 10 minutes, or ``ACCELRT_DISTRIBUTED_TIMEOUT``); also bounds init.
        world_size, rank: must agree with the launcher's when given.
        store: a :class:`Store` the ranks share (with ``rank`` and ``world_size``), instead
            of ``init_method``.
        group_name, pg_options: accepted for compatibility.
        device_id: a cuda device this rank binds to (made current; NCCL starts eagerly).
        _ranks: torch 2.14's ranks whose hash names the group inside c10d; accelrt exposes
            no internal group name, so a list of ints (or None) is accepted and changes
            nothing.
        enable_reconfigure: must be ``False``: torch 2.14's fault-tolerance regime (the
            communicator waits for ``ProcessGroup.reconfigure``) has no accelrt engine.

    Raises:
        ValueError: called twice, both a store and an init method, a store without rank
            and world_size, an unknown init method, or world_size or rank disagree with the
            launcher's; ``"nccl"`` named on a machine without a
            CUDA GPU (``AcceleratorValueError``: torch's "ProcessGroupNCCL is only supported
            with GPUs, no GPUs found!").
        DistError: the engine could not start (its message is the cause);
            ``DistBackendError`` when ``"nccl"`` is named without nccl4py.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group(backend="cpu:mpi", timeout=60)
        >>> dist.get_backend()
        'cpu:mpi'
        >>> dist.destroy_process_group()
    """
    if _S.world is not None:
        raise ValueError("trying to initialize the default process group twice!")
    if _ranks is not None and (isinstance(_ranks, (str, bytes)) or not all(
            isinstance(r, int) and not isinstance(r, bool) for r in _ranks)):
        raise TypeError(f"_ranks must be a list of ints or None, got {_ranks!r:.60}")
    if not isinstance(enable_reconfigure, bool):
        raise TypeError(f"enable_reconfigure must be a bool, got "
                        f"{type(enable_reconfigure).__name__}")
    if enable_reconfigure:
        raise ValueError("enable_reconfigure=True is not supported: accelrt's engines (MPI, "
                         "NCCL) have no reconfigure regime (ProcessGroup.reconfigure); pass "
                         "enable_reconfigure=False (the default)")
    world_size, rank = _int(world_size, "world_size"), _int(rank, "rank")
    if init_method is not None and not isinstance(init_method, str):
        raise TypeError(f"init_method must be a str such as 'env://' or 'tcp://host:port', "
                        f"got {type(init_method).__name__}")
    if store is not None:
        if init_method is not None:
            raise ValueError("Cannot specify both init_method and store.")
        if not isinstance(store, Store):
            raise TypeError(f"store must be an accelrt.distributed.Store, got "
                            f"{type(store).__name__}")
        if not world_size > 0:
            raise ValueError("world_size must be positive if using store")
        if not rank >= 0:
            raise ValueError("rank must be non-negative if using store")
        if not rank < world_size:
            raise ValueError(f"rank {rank} is out of range for world size {world_size}: a "
                             "store's ranks are 0 .. world_size - 1")
    if backend is None:
        backend = os.environ.get("ACCELRT_DISTRIBUTED_BACKEND") or None
    engine_map = _parse_backend(backend)
    backend_str = (",".join(f"{d}:{e}" for d, e in engine_map.items())
                   if backend is None or ":" in str(backend) else str(Backend(str(backend))))
    # the engines a backend string names must be able to start (torch constructs each backend
    # of the map at init: "nccl" without a GPU fails there); the defaults of backend=None
    # start when first used, and only for arrays that exist
    named = {} if backend is None else engine_map
    op_timeout = _seconds(timeout, DEFAULT_TIMEOUT)
    init_timeout = min(op_timeout, DEFAULT_INIT_TIMEOUT) if timeout is None else op_timeout
    method = init_method
    if store is not None:
        method = "store"
    elif method is None:
        if _under_mpi_launcher():
            method = "mpi://"
        elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            method = "env://"
        else:
            method = "mpi://" if is_mpi_available() else "env://"
    if method.startswith("mpi://"):
        group = _init_mpi(engine_map, backend_str, op_timeout, init_timeout, world_size, rank,
                          named)
    else:
        from ._rendezvous import RendezvousPlan, plan
        where: Store | RendezvousPlan = (store if store is not None
                                         else plan(method, rank, world_size))
        r, n = (rank, world_size) if isinstance(where, Store) else (where.rank,
                                                                     where.world_size)
        group = _init_store(engine_map, backend_str, op_timeout, init_timeout, n, r,
                            device_id, named, where)
    if device_id is not None:
        from .._device import _get_device, set_device_index
        b, index = _get_device(device_id)
        set_device_index(f"{b.name}:{index}")
        if b.capabilities(index).cuda_array_interface:
            # CUDA device memory (what NCCL serves): start its engine now, as PyTorch's
            # device_id makes the communicator eagerly
            group.engine(b.name, index)
    from ._group import read_debug_level
    read_debug_level()
    _S.world = group
    GroupMember.WORLD = group
    _GroupNS.WORLD = group
    _S.groups = [group]
    _S.pg_count = 1


def _init_mpi(engine_map: dict[str, str], backend_str: str, op_timeout: float,
              init_timeout: float, world_size: int, rank: int,
              named: dict[str, str]) -> ProcessGroup:
    from ._work import WATCHDOG
    from ._mpi import mpi
    try:
        MPI = mpi()
    except ImportError as exc:
        raise DistBackendError("init_method='mpi://' needs mpi4py and an MPI: pip install "
                               "'accelrt[mpi]' (mpi4py and the mpich wheel)") from exc
    world = MPI.COMM_WORLD
    r, n = world.Get_rank(), world.Get_size()
    if world_size not in (-1, n):
        raise ValueError(f"world_size={world_size} but the MPI launcher started {n} ranks")
    if rank not in (-1, r):
        raise ValueError(f"rank={rank} but the MPI launcher made this process rank {r}")
    _require_engines(named)   # every rank, before any collective step: none waits
    if n > 1:
        _install_abort_hook(world)
    group = ProcessGroup("WORLD", r, n, list(range(n)), engine_map, backend_str, op_timeout,
                         None, r)
    group.threads_ok = MPI.Query_thread() == MPI.THREAD_MULTIPLE
    # every step is collective: a rank that never arrives ends the job after init_timeout
    with WATCHDOG.watching(group, "init_process_group", 0, init_timeout):
        group.mpi_comm = world.Dup()
        group.control()
        if n > 1:
            group.mpi_comm.Barrier()
    return group


def _mpi_needs_launcher(n: int) -> DistBackendError:
    return DistBackendError(
        f"the 'mpi' engine (backend 'mpi' or 'gloo') cannot join {n} processes that no MPI "
        "launcher started: MPICH's singleton MPI_Comm_connect/MPI_Comm_accept, which would "
        "join them through the store, fails (pmodels/mpich#7805). Launch with mpiexec -n N "
        "python -m accelrt.distributed.run script.py (init_method='mpi://'), or use "
        "backend='nccl' for CUDA arrays")


def _init_store(engine_map: dict[str, str], backend_str: str, op_timeout: float,
                init_timeout: float, n: int, r: int, device_id: Any,
                named: dict[str, str], where: Any) -> ProcessGroup:
    """A world met through a store (``store=``, ``env://``, ``tcp://``, ``file://``): the
    rendezvous ``where`` is a :class:`Store` or a plan to make one."""
    if (n == 1 and is_mpi_available() and "nccl" not in named.values()
            and ("nccl" not in engine_map.values() or not _cuda_count())):
        # one rank: a singleton MPI world serves every engine map without a CUDA device
        return _init_mpi(engine_map, backend_str, op_timeout, init_timeout, 1, 0, named)
    _require_engines(named)   # before the rendezvous: no rank waits for one that failed
    if n > 1 and any(e in ("mpi", "gloo") for e in named.values()):
        raise _mpi_needs_launcher(n)
    if "nccl" not in engine_map.values() or (not named and not _cuda_count()):
        raise _mpi_needs_launcher(n)
    base = (where if isinstance(where, Store)
            else where.connect(datetime.timedelta(seconds=init_timeout)))
    try:
        group = _init_nccl_world(engine_map, backend_str, op_timeout, init_timeout, n, r,
                                 device_id, PrefixStore("default_pg", base))
    except BaseException:
        if base is not where and isinstance(base, (TCPStore, FileStore)):
            base.close()
        raise
    _S.store = base   # a TCPStore master serves the others as long as the world lives
    return group


def _init_nccl_world(engine_map: dict[str, str], backend_str: str, op_timeout: float,
                     init_timeout: float, n: int, r: int, device_id: Any,
                     store: Store) -> ProcessGroup:
    """The world of a store-based init: NCCL's unique id made by rank 0 and shared through
    ``store`` (as torch's ProcessGroupNCCL does); a singleton MPI world for host arrays."""
    from ._rendezvous import share
    mpi_comm = None
    if n == 1 and is_mpi_available():   # a singleton MPI world serves host arrays
        from ._mpi import mpi
        mpi_comm = mpi().COMM_WORLD.Dup()
    group = ProcessGroup("WORLD", r, n, list(range(n)), engine_map, backend_str, op_timeout,
                         mpi_comm, r)
    from .._device import _get_device
    if device_id is None:
        count = _cuda_count()
        if count == 0:
            raise DistError("init_process_group with NCCL needs a CUDA device; none found",
                            rank=r)
        index = int(os.environ.get("LOCAL_RANK", r)) % count
    else:
        _, index = _get_device(device_id)
    from ._nccl import NcclEngine, _core
    core = _core()
    ctx = EngineContext(r, n, list(range(n)), "cuda", index, init_timeout, None)
    raw = share(store, "nccl/unique_id/0", r, lambda: bytes(core.get_unique_id()))
    ctx.options["unique_id"] = core.UniqueId.from_bytes(raw)
    try:
        group._preset[("cuda", index)] = NcclEngine.create(ctx)
    except DistError:
        raise
    except Exception as exc:
        raise DistBackendError(f"rank {r}: NCCL init through the store failed: "
                               f"{type(exc).__name__}: {exc}", rank=r) from exc
    return group


def _cuda_count() -> int:
    from . import _engine
    return _engine.cuda_device_count()


# ---------------------------------------------------------------------------- groups
def _group(group: GroupArg) -> ProcessGroup | None:
    if _S.world is None:
        raise ValueError("Default process group has not been initialized, please make sure to "
                         "call init_process_group.")
    if group is None:
        return _S.world
    if isinstance(group, _NonMember):
        return None
    if not isinstance(group, ProcessGroup):
        raise TypeError(f"group must be a ProcessGroup or None, got {type(group).__name__}")
    return group


def _warn_not_member(op: str) -> None:
    import warnings
    warnings.warn(f"Running {op} on global rank {get_rank()} which does not belong to the "
                  "given group.", stacklevel=3)


def destroy_process_group(group: GroupArg = None) -> None:
    """Destroy ``group`` (None: every group, then the world). Every rank must call it, in the
    same order. Re-raises an error kept from queued communication of the group.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> dist.destroy_process_group()
        >>> dist.is_initialized()
        False
    """
    g = _group(group)
    if g is None:
        return
    targets = list(_S.groups) if group is None or g is _S.world else [g]
    kept: BaseException | None = None
    for pg in targets:
        try:
            pg.drain()
        except BaseException as exc:   # a kept stream error; re-raised after cleanup
            kept = kept or exc
        kept = kept or pg._error
        for eng in pg._engines.values():
            try:
                eng.destroy()
            except Exception as exc:
                kept = kept or DistBackendError(f"destroying {pg.name!r}: {exc}")
        pg._engines.clear()
        for comm in (pg._ctrl, pg.mpi_comm):
            if comm is not None:
                try:
                    comm.Free()
                except Exception:
                    pass
        pg._ctrl = pg.mpi_comm = None
        pg.destroyed = True
        # close the group's comm streams now (drained above), as destroying a CUDA stream
        # does: the group object may outlive this call (the watchdog, a Work) but its
        # streams must not
        for ctx in list(pg._ctx.values()):
            ctx.stream.close()
        pg._ctx.clear()
        pg._fast.clear()
        pg.drop_plans()
        if pg in _S.groups:
            _S.groups.remove(pg)
    if group is None or g is _S.world:
        _S.world = None
        _S.store = None
        GroupMember.WORLD = None
        _GroupNS.WORLD = None
        _S.groups = []
        _S.pg_count = 0
    if kept is not None:
        raise kept


def get_rank(group: GroupArg = None) -> int:
    """This process's rank in ``group`` (-1 if not a member).

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi"); dist.get_rank(); dist.destroy_process_group()
        0
    """
    g = _group(group)
    return -1 if g is None else g.rank()


def get_world_size(group: GroupArg = None) -> int:
    """Number of ranks in ``group`` (-1 if this rank is not a member).

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi"); dist.get_world_size(); dist.destroy_process_group()
        1
    """
    g = _group(group)
    return -1 if g is None else g.size()


def get_backend(group: GroupArg = None) -> str:
    """The group's backend string (``"mpi"``, ``"nccl"`` or ``"cpu:mpi,cuda:nccl"``).

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi"); dist.get_backend(); dist.destroy_process_group()
        'mpi'
    """
    g = _group(group)
    if g is None:
        raise ValueError("Invalid process group specified")
    return g.backend_str


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


def new_group(ranks: Sequence[int] | None = None, timeout: Any = None,
              backend: str | None = None, pg_options: Any = None,
              use_local_synchronization: bool = False, group_desc: str | None = None,
              device_id: Any = None, sort_ranks: bool = True) -> ProcessGroup | _NonMember:
    """A group of the world's ``ranks`` (all by default). Every rank of the world must call
    it, with the same ``ranks``; ranks outside get ``GroupMember.NON_GROUP_MEMBER``. Group
    rank ``k`` is the ``k``-th of the sorted ``ranks``, or with ``sort_ranks=False`` the
    ``k``-th as given (as in torch).

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
    n = world.size()
    members = list(range(n)) if ranks is None else [int(r) for r in ranks]
    if sort_ranks:
        members.sort()
    if len(set(members)) != len(members) or any(not 0 <= r < n for r in members):
        raise ValueError(f"new_group(): ranks must be distinct world ranks in [0, {n}), got "
                         f"{list(ranks or [])}")
    engine_map = world.engine_map if backend is None else _parse_backend(backend)
    backend_str = world.backend_str if backend is None else str(backend)
    if backend is not None:
        _require_engines(engine_map)   # every rank, before the collective split
    t = world.timeout if timeout is None else _seconds(timeout, DEFAULT_TIMEOUT)
    me = world.rank()
    member = me in members
    # a member's key is its place in `members` (sorted, or as given with sort_ranks=False)
    return _split(world, members if member else None, members.index(me) if member else me,
                  engine_map, backend_str, t, group_desc, "new_group")


def _split(parent: ProcessGroup, members: list[int] | None, key: int,
           engine_map: dict[str, str], backend_str: str, timeout: float,
           group_desc: str | None, op: str) -> ProcessGroup | _NonMember:
    """The one split of a group, collective over ``parent``'s ranks: this rank joins the group
    of the parent ranks ``members`` (None: it joins none) at the place ``key`` orders it
    (the members' keys order them as ``members`` does). The parent's MPI communicator is split
    (``MPI_Comm_split``, colored by the member list) and so are its NCCL communicators
    (``ncclCommSplit``); the other engines start from the new communicator when first used.
    Returns the new group, or ``GroupMember.NON_GROUP_MEMBER``."""
    _S.counter += 1
    name = group_desc or f"group{_S.counter}"
    color = None if members is None else min(members)   # disjoint lists: a unique color
    parent.drain()
    sub = None
    from ._work import WATCHDOG
    if parent.mpi_comm is not None:
        from ._mpi import mpi
        MPI = mpi()
        with WATCHDOG.watching(parent, op, parent._seq):
            sub = parent.mpi_comm.Split(MPI.UNDEFINED if color is None else color, key)
        if color is None:
            sub = None
    sub_engines: dict[tuple[str, int], Engine] = {}
    for ekey, eng in list(parent._engines.items()):
        # NCCL communicators are split (ncclCommSplit); MPI engines start from `sub`
        if eng.name == "nccl" and engine_map.get(ekey[0]) == "nccl":
            child = eng.split(color, key, None)
            if child is not None:
                sub_engines[ekey] = child
    if members is None:
        return GroupMember.NON_GROUP_MEMBER
    ranks = [parent.global_ranks[r] for r in members]
    g = ProcessGroup(name, members.index(parent.rank()), len(members), ranks, engine_map,
                     backend_str, timeout, sub, parent.global_rank)
    if sub is not None:
        with WATCHDOG.watching(g, op, 0):
            g.control()   # collective over the members: made now, while they are all here
    g._preset.update(sub_engines)
    g.parent = parent
    g.threads_ok = parent.threads_ok
    _S.groups.append(g)
    _S.pg_count += 1
    return g


def split_group(parent_pg: ProcessGroup | None = None,
                split_ranks: Sequence[Sequence[int]] | None = None, timeout: Any = None,
                pg_options: Any = None, group_desc: str | None = None,
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
        raise ValueError(f"Global rank {world.rank()} is not part of the parent group "
                         f"{parent_pg!r}")
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
            if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= r < n:
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
    return _split(parent_pg, members, 0 if mine is None else mine.index(me), engine_map,
                  backend_str, t, group_desc, "split_group")


def new_subgroups(group_size: int | None = None, group: GroupArg = None, timeout: Any = None,
                  backend: str | None = None, pg_options: Any = None,
                  group_desc: str | None = None) -> tuple[ProcessGroup | _NonMember,
                                                          list[ProcessGroup | _NonMember]]:
    """Split ``group``'s ranks (the world's by default) into groups of ``group_size``
    consecutive ranks (default: the number of CUDA devices of a node). Every rank of the world
    must call it (as torch's). Returns (this rank's group, every group:
    ``GroupMember.NON_GROUP_MEMBER`` where this rank is not a member).

    Raises:
        ValueError: ``group_size`` is not positive, exceeds or does not divide the group's
            size, or is None without CUDA devices; this rank is not in ``group``.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> cur, all_groups = dist.new_subgroups(group_size=1)
        >>> dist.get_process_group_ranks(cur), len(all_groups)
        ([0], 1)
        >>> dist.destroy_process_group()
    """
    world = _group(None)
    assert world is not None
    if group_size is None:
        from .. import backends
        try:
            count = backends.get_backend("cuda").device_count()
        except Exception:
            count = 0
        if count == 0:
            raise ValueError("Default group size only takes effect when CUDA is available. If "
                             "your subgroup using a backend that does not depend on CUDA, "
                             "please pass in 'group_size' correctly.")
        group_size = count
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0:
        raise ValueError(f"The arg 'group_size' ({group_size}) must be positive")
    ranks = get_process_group_ranks(group)
    n = len(ranks)
    if n < group_size:
        raise ValueError(f"The arg 'group_size' ({group_size}) must not exceed the world size "
                         f"({n})")
    if n % group_size:
        raise ValueError(f"The world size ({n}) must be divisible by 'group_size={group_size}'")
    cur, groups = new_subgroups_by_enumeration(
        [ranks[k:k + group_size] for k in range(0, n, group_size)], timeout=timeout,
        backend=backend, pg_options=pg_options, group_desc=group_desc)
    if cur is None:
        raise ValueError(f"new_subgroups: global rank {world.rank()} is not in group "
                         f"{group!r}, whose ranks it splits")
    return cur, groups


def new_subgroups_by_enumeration(ranks_per_subgroup_list: Sequence[Sequence[int]],
                                 timeout: Any = None, backend: str | None = None,
                                 pg_options: Any = None, group_desc: str | None = None
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
    seen: dict[int, int] = {}
    for k, ranks in enumerate(ranks_per_subgroup_list):
        for r in ranks:
            if r in seen:
                raise ValueError(f"Rank {r} has appeared in both subgroup "
                                 f"{list(ranks_per_subgroup_list[seen[r]])} and {list(ranks)}")
            seen[r] = k
    me = get_rank()
    cur: ProcessGroup | _NonMember | None = None
    groups: list[ProcessGroup | _NonMember] = []
    for k, ranks in enumerate(ranks_per_subgroup_list):
        desc = None if group_desc is None else f"{group_desc}_{k}"
        sub = new_group(list(ranks), timeout=timeout, backend=backend, pg_options=pg_options,
                        group_desc=desc)
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
    g = _registered(group)
    return list(g.global_ranks)


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
    g = _registered(group)
    if isinstance(group_rank, bool) or not isinstance(group_rank, (int, np.integer)) \
            or not 0 <= int(group_rank) < g.size():
        raise ValueError(f"Group rank {group_rank} is not part of group {g.name!r} (its ranks "
                         f"are 0..{g.size() - 1})")
    return g.global_ranks[int(group_rank)]


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
    g = _registered(group)
    if isinstance(global_rank, bool) or not isinstance(global_rank, (int, np.integer)):
        raise TypeError(f"global_rank must be an int, got {type(global_rank).__name__}")
    if int(global_rank) not in g.global_ranks:
        raise ValueError(f"Global rank {global_rank} is not part of group {g.name!r} (global "
                         f"ranks {g.global_ranks})")
    return g.global_ranks.index(int(global_rank))


def _registered(group: ProcessGroup | _NonMember | None) -> ProcessGroup:
    g = _group(group)
    if g is None:
        raise ValueError("Group NON_GROUP_MEMBER is not registered, please create group with "
                         "torch.distributed.new_group API (this rank is not a member)")
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


# ---------------------------------------------------------------------------- helpers
def _op(op: Any) -> RedOp:
    if type(op) is PremulSum:
        return op
    if not isinstance(op, ReduceOp):
        raise TypeError(f"op must be a ReduceOp, got {op!r}")
    if op is ReduceOp.PREMUL_SUM:
        raise AcceleratorValueError("ReduceOp.PREMUL_SUM needs its factor: pass "
                                    "op=accelrt.distributed._make_nccl_premul_sum(factor)")
    return op


def _make_nccl_premul_sum(factor: Any) -> PremulSum:
    """``ReduceOp.PREMUL_SUM`` with ``factor`` (torch.distributed's name): each rank multiplies
    its input by ``factor`` (a number or a one-element array, read once here), then the
    inputs are summed. For :func:`all_reduce`, :func:`reduce`, :func:`reduce_scatter` and
    :func:`reduce_scatter_tensor` on floating (MPI: or complex) arrays. MPI scales on the host
    before a sum; NCCL uses its own ``ncclRedOpCreatePreMulSum``.

    Raises:
        TypeError: ``factor`` is not a number or a one-element array.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> a = acc.full((2,), 3.0, device="cpu")
        >>> dist.all_reduce(a, op=dist._make_nccl_premul_sum(0.5)); a.tolist()
        [1.5, 1.5]
        >>> dist.destroy_process_group()
    """
    if isinstance(factor, (bool, np.bool_)):
        raise TypeError("_make_nccl_premul_sum: factor must be a number, got a bool")
    if isinstance(factor, (int, float, complex, np.number)):
        return PremulSum(factor.item() if isinstance(factor, np.number) else factor)
    if isinstance(factor, (Array, np.ndarray)):
        if factor.size != 1:
            raise TypeError(f"_make_nccl_premul_sum: a factor array must have one element, got "
                            f"{factor.size}")
        value = np.asarray(factor.numpy() if isinstance(factor, Array) else factor).reshape(-1)
        return _make_nccl_premul_sum(value[0])
    raise TypeError(f"_make_nccl_premul_sum: factor must be a number or a one-element array, "
                    f"got {type(factor).__name__}")


def _desc(a: Any) -> tuple[Any, Any]:
    """(dtype, shape) of an array for the debug fingerprint (checked later for the type)."""
    return (getattr(a, "dtype", None), getattr(a, "shape", None))


def _check_same(what: str, a: Any, b: Any) -> None:
    if a.dtype != b.dtype:
        raise AcceleratorValueError(f"{what}: arrays must have the same dtype, got "
                                    f"{a.dtype} and {b.dtype}")


def _size_check(what: str, out: Any, expect: int, got: int, fix: str) -> None:
    if expect != got:
        raise AcceleratorValueError(f"{what}: {fix} (expected {expect} elements, got {got})")


# ---------------------------------------------------------------------------- collectives
def all_reduce(tensor: Any, op: ReduceOp = ReduceOp.SUM, group: GroupArg = None,
               async_op: bool = False) -> Work | None:
    """Reduce ``tensor`` across the group, in place on every rank.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> a = acc.full((2,), 3, dtype="int64", device="cpu")
        >>> dist.all_reduce(a, op=dist.ReduceOp.MAX, async_op=True).wait()
        True
        >>> a.tolist(); dist.destroy_process_group()
        [3, 3]
    """
    g = _S.world if group is None else _group(group)
    if g is not None and type(tensor) is Array:
        # idle streams, host memory and a plan left by an earlier call: call MPI right here
        mem = tensor._mem
        plan = g.plans_ar.get((mem.ptr, mem.nbytes, tensor._dtype.num, op))
        if plan is not None and g.run_plan("all_reduce", plan):
            return Work.completed([tensor]) if async_op else None
        if type(op) is ReduceOp and g.all_reduce_fast(tensor, op):
            return Work.completed([tensor]) if async_op else None
    if g is None:
        if _S.world is None:
            _group(group)   # raises: not initialized
        _warn_not_member("all_reduce")
        return None
    red = _op(op)

    def call(eng: Engine, buf: Callable[[Any], Buf], stream: Any) -> None:
        eng.all_reduce(None, buf(tensor), red, stream)

    return g.run("all_reduce", [tensor], [tensor], [tensor], call, async_op,
                 (red.name,) + _desc(tensor), red, [tensor], alias="inplace")


def broadcast(tensor: Any, src: int | None = None, group: GroupArg = None,
              async_op: bool = False, group_src: int | None = None) -> Work | None:
    """Copy ``tensor`` of global rank ``src`` (or group rank ``group_src``: give exactly one)
    into ``tensor`` on every rank.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> a = acc.full((2,), 7.0, device="cpu")
        >>> dist.broadcast(a, src=0); a.tolist(); dist.destroy_process_group()
        [7.0, 7.0]
    """
    g = _S.world if group is None else _group(group)
    if g is None:
        if _S.world is None:
            _group(group)
        _warn_not_member("broadcast")
        return None
    if type(tensor) is Array and type(src) is int and group_src is None:
        mem = tensor._mem
        plan = g.plans_bc.get((mem.ptr, mem.nbytes, src))
        if plan is not None and g.run_plan("broadcast", plan):
            return Work.completed([tensor]) if async_op else None
    if (type(src) is int and group_src is None and 0 <= src < g._size
            and g.global_ranks[src] == src):
        root = src   # the world and groups that keep world ranks
    else:
        root = g.canonical_rank(src, group_src, "src")
    if g.broadcast_fast(tensor, root, g.global_ranks[root]):
        return Work.completed([tensor]) if async_op else None

    def call(eng: Engine, buf: Callable[[Any], Buf], stream: Any) -> None:
        eng.broadcast(buf(tensor), root, stream)

    return g.run("broadcast", [tensor], [tensor], [tensor], call, async_op,
                 (root,) + _desc(tensor), None, [tensor], alias="inplace")


def reduce(tensor: Any, dst: int | None = None, op: ReduceOp = ReduceOp.SUM,
           group: GroupArg = None, async_op: bool = False,
           group_dst: int | None = None) -> Work | None:
    """Reduce ``tensor`` across the group into ``tensor`` on global rank ``dst`` (or group rank
    ``group_dst``: give exactly one); other ranks' arrays are left as they were.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> a = acc.full((2,), 1.5, device="cpu")
        >>> dist.reduce(a, dst=0); a.tolist(); dist.destroy_process_group()
        [1.5, 1.5]
    """
    g = _group(group)
    if g is None:
        _warn_not_member("reduce")
        return None
    root = g.canonical_rank(dst, group_dst, "dst")
    red = _op(op)

    def call(eng: Engine, buf: Callable[[Any], Buf], stream: Any) -> None:
        eng.reduce(buf(tensor), red, root, stream)

    return g.run("reduce", [tensor], [tensor], [tensor], call, async_op,
                 (red.name, root) + _desc(tensor), red, [tensor], alias="inplace")


def all_gather_into_tensor(output_tensor: Any, input_tensor: Any, group: GroupArg = None,
                           async_op: bool = False) -> Work | None:
    """Gather every rank's ``input_tensor`` into ``output_tensor`` (world_size times as many
    elements), in rank order.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = acc.empty((1, 2), device="cpu")
        >>> dist.all_gather_into_tensor(out, acc.full((2,), 4.0, device="cpu"))
        >>> out.tolist(); dist.destroy_process_group()
        [[4.0, 4.0]]
    """
    g = _S.world if group is None else _group(group)
    if g is not None and type(input_tensor) is Array and type(output_tensor) is Array:
        mem, omem = input_tensor._mem, output_tensor._mem
        plan = g.plans_ag.get((mem.ptr, omem.ptr, mem.nbytes, omem.nbytes))
        if (plan is not None and input_tensor._dtype is output_tensor._dtype
                and g.run_plan("all_gather_into_tensor", plan)):
            return Work.completed([output_tensor]) if async_op else None
        if g.all_gather_fast(output_tensor, input_tensor):
            return Work.completed([output_tensor]) if async_op else None
    g = _group(group)
    if g is None:
        _warn_not_member("all_gather_into_tensor")
        return None
    _check_same("all_gather_into_tensor", output_tensor, input_tensor)
    if not isinstance(output_tensor, (Array, np.ndarray)):
        raise TypeError(f"all_gather_into_tensor: expected an accelrt.Array, got "
                        f"{type(output_tensor).__name__}")
    _size_check("all_gather_into_tensor", output_tensor, g.size() * input_tensor.size,
                output_tensor.size, "output tensor size must be equal to world_size times "
                "input tensor size")

    def call(eng: Engine, buf: Callable[[Any], Buf], stream: Any) -> None:
        eng.all_gather(buf(input_tensor), buf(output_tensor), stream)

    arrays = [input_tensor, output_tensor]
    return g.run("all_gather_into_tensor", arrays, [input_tensor], [output_tensor], call,
                 async_op, _desc(input_tensor), None, [output_tensor], alias="gather")


def all_gather(tensor_list: list[Any], tensor: Any, group: GroupArg = None,
               async_op: bool = False) -> Work | None:
    """Gather every rank's ``tensor`` into ``tensor_list`` (one array per rank).

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> outs = [acc.empty((2,), device="cpu")]
        >>> dist.all_gather(outs, acc.full((2,), 5.0, device="cpu"))
        >>> outs[0].tolist(); dist.destroy_process_group()
        [5.0, 5.0]
    """
    g = _group(group)
    if g is None:
        _warn_not_member("all_gather")
        return None
    if not isinstance(tensor_list, (list, tuple)) or len(tensor_list) != g.size():
        raise AcceleratorValueError(f"all_gather: tensor_list must be a list of "
                                    f"{g.size()} arrays (one per rank)")
    g.check_args("all_gather", [tensor], tensor_list, alias="staged")
    for t in tensor_list:
        _check_same("all_gather", t, tensor)
        _size_check("all_gather", t, tensor.size, t.size,
                    "every array of tensor_list must have the input's size")
    n, size = g.size(), tensor.size
    stage = _temp_like(tensor, n * size)

    def call(eng: Engine, buf: Callable[[Any], Buf], stream: Any) -> None:
        eng.all_gather(buf(tensor), buf(stage), stream)

    w = g.run("all_gather", [tensor, stage], [tensor], [stage], call, True, _desc(tensor))
    return _split_out(g, "all_gather", w, stage, list(tensor_list), async_op)


def reduce_scatter_tensor(output: Any, input: Any, op: ReduceOp = ReduceOp.SUM,
                          group: GroupArg = None, async_op: bool = False) -> Work | None:
    """Reduce ``input`` (world_size times ``output``'s elements) across ranks and leave rank
    k's share, the k-th block, in ``output``.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = acc.empty((2,), device="cpu")
        >>> dist.reduce_scatter_tensor(out, acc.full((2,), 6.0, device="cpu"))
        >>> out.tolist(); dist.destroy_process_group()
        [6.0, 6.0]
    """
    g = _group(group)
    if g is None:
        _warn_not_member("reduce_scatter_tensor")
        return None
    _check_same("reduce_scatter_tensor", output, input)
    _size_check("reduce_scatter_tensor", input, g.size() * output.size, input.size,
                "input tensor must be the same size as output size times world size")
    red = _op(op)

    def call(eng: Engine, buf: Callable[[Any], Buf], stream: Any) -> None:
        eng.reduce_scatter(buf(input), buf(output), red, stream)

    return g.run("reduce_scatter_tensor", [input, output], [input], [output], call, async_op,
                 (red.name,) + _desc(output), red, [output], alias="scatter")


def gather(tensor: Any, gather_list: list[Any] | None = None, dst: int | None = None,
           group: GroupArg = None, async_op: bool = False,
           group_dst: int | None = None) -> Work | None:
    """Gather every rank's ``tensor`` into ``gather_list`` on global rank ``dst`` (or group
    rank ``group_dst``; neither: global rank 0); None elsewhere.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> outs = [acc.empty((2,), device="cpu")]
        >>> dist.gather(acc.full((2,), 8.0, device="cpu"), outs, dst=0)
        >>> outs[0].tolist(); dist.destroy_process_group()
        [8.0, 8.0]
    """
    g = _group(group)
    if g is None:
        _warn_not_member("gather")
        return None
    root = g.canonical_rank(dst, group_dst, "dst", default=0)
    n = g.size()
    if g.rank() == root:
        if not isinstance(gather_list, (list, tuple)) or len(gather_list) != n:
            raise AcceleratorValueError(f"gather: gather_list must be a list of {n} arrays "
                                        "on the destination rank")
        g.check_args("gather", [tensor], gather_list, alias="staged")
        for t in gather_list:
            _check_same("gather", t, tensor)
            _size_check("gather", t, tensor.size, t.size,
                        "every array of gather_list must have the input's size")
        stage: Any = _temp_like(tensor, n * tensor.size)
    else:
        if gather_list:
            raise ValueError("Argument ``gather_list`` must NOT be specified on "
                             "non-destination ranks.")
        stage = None

    def call(eng: Engine, buf: Callable[[Any], Buf], stream: Any) -> None:
        eng.gather(buf(tensor), None if stage is None else buf(stage), root, stream)

    arrays = [tensor] if stage is None else [tensor, stage]
    w = g.run("gather", arrays, [tensor], arrays[1:], call, True, (root,) + _desc(tensor))
    if stage is None:
        assert w is not None
        if async_op:
            return w
        w.wait()   # later work on the current stream may overwrite the input
        return None
    assert gather_list is not None
    return _split_out(g, "gather", w, stage, list(gather_list), async_op)


def scatter(tensor: Any, scatter_list: list[Any] | None = None, src: int | None = None,
            group: GroupArg = None, async_op: bool = False,
            group_src: int | None = None) -> Work | None:
    """Send ``scatter_list[k]`` of global rank ``src`` (or group rank ``group_src``; neither:
    global rank 0) into ``tensor`` on group rank k.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = acc.empty((2,), device="cpu")
        >>> dist.scatter(out, [acc.full((2,), 9.0, device="cpu")], src=0)
        >>> out.tolist(); dist.destroy_process_group()
        [9.0, 9.0]
    """
    g = _group(group)
    if g is None:
        _warn_not_member("scatter")
        return None
    root = g.canonical_rank(src, group_src, "src", default=0)
    n = g.size()
    stage: Any = None
    if g.rank() == root:
        if not isinstance(scatter_list, (list, tuple)) or len(scatter_list) != n:
            raise AcceleratorValueError(f"scatter: scatter_list must be a list of {n} arrays "
                                        "on the source rank")
        g.check_args("scatter", scatter_list, [tensor], alias="staged")
        for t in scatter_list:
            _check_same("scatter", t, tensor)
            _size_check("scatter", t, tensor.size, t.size,
                        "every array of scatter_list must have the output's size")
        stage = _temp_like(tensor, n * tensor.size)
        _pack(stage, list(scatter_list))
    elif scatter_list:
        raise ValueError("Argument ``scatter_list`` must NOT be specified on non-source ranks.")

    def call(eng: Engine, buf: Callable[[Any], Buf], stream: Any) -> None:
        eng.scatter(None if stage is None else buf(stage), buf(tensor), root, stream)

    arrays = [tensor] if stage is None else [stage, tensor]
    ins = [] if stage is None else [stage]
    return g.run("scatter", arrays, ins, [tensor], call, async_op, (root,) + _desc(tensor),
                 None, [tensor])


def all_to_all_single(output: Any, input: Any, output_split_sizes: Sequence[int] | None = None,
                      input_split_sizes: Sequence[int] | None = None, group: GroupArg = None,
                      async_op: bool = False) -> Work | None:
    """Split ``input`` along dim 0 (equally, or by ``input_split_sizes``), send block k to
    rank k, and concatenate the blocks received, in rank order, into ``output``.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = acc.empty((3,), dtype="int32", device="cpu")
        >>> dist.all_to_all_single(out, acc.asarray([1, 2, 3], device="cpu", dtype="int32"))
        >>> out.tolist(); dist.destroy_process_group()
        [1, 2, 3]
    """
    g = _group(group)
    if g is None:
        _warn_not_member("all_to_all_single")
        return None
    _check_same("all_to_all_single", output, input)
    n = g.size()

    def counts(arr: Any, splits: Sequence[int] | None, name: str) -> list[int]:
        rows = arr.shape[0] if arr.ndim else 1
        per_row = arr.size // rows if rows else 0
        if splits is None or len(splits) == 0:
            if rows % n:
                raise AcceleratorValueError(f"all_to_all_single: {name} dim 0 ({rows}) must be "
                                            f"divisible by the world size ({n}) without "
                                            "split sizes")
            return [rows // n * per_row] * n
        if len(splits) != n or any(int(s) < 0 for s in splits) or sum(splits) != rows:
            raise AcceleratorValueError(f"all_to_all_single: {name}_split_sizes must be {n} "
                                        f"non-negative ints summing to dim 0 ({rows}), got "
                                        f"{list(splits)}")
        return [int(s) * per_row for s in splits]

    sc = counts(input, input_split_sizes, "input")
    rc = counts(output, output_split_sizes, "output")

    def call(eng: Engine, buf: Callable[[Any], Buf], stream: Any) -> None:
        eng.all_to_all(buf(input), buf(output), sc, rc, stream)

    # split sizes (and so the shapes) legitimately differ between ranks: the debug
    # fingerprint compares the dtype
    return g.run("all_to_all_single", [input, output], [input], [output], call, async_op,
                 (getattr(input, "dtype", None),), None, [output])


def all_to_all(output_tensor_list: list[Any], input_tensor_list: list[Any],
               group: GroupArg = None, async_op: bool = False) -> Work | None:
    """Send ``input_tensor_list[k]`` to group rank k and receive rank k's array into
    ``output_tensor_list[k]`` (sizes may differ per rank; one dtype and device throughout).

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = [acc.empty((2,), device="cpu")]
        >>> dist.all_to_all(out, [acc.full((2,), 1.5, device="cpu")])
        >>> out[0].tolist(); dist.destroy_process_group()
        [1.5, 1.5]
    """
    g = _group(group)
    if g is None:
        _warn_not_member("all_to_all")
        return None
    n = g.size()
    for name, lst in (("output_tensor_list", output_tensor_list),
                      ("input_tensor_list", input_tensor_list)):
        if not isinstance(lst, (list, tuple)) or len(lst) != n:
            raise AcceleratorValueError(f"all_to_all: {name} must be a list of {n} arrays "
                                        "(one per rank)")
    g.check_args("all_to_all", input_tensor_list, output_tensor_list, alias="staged")
    first = input_tensor_list[0]
    for t in list(output_tensor_list) + list(input_tensor_list):
        _check_same("all_to_all", t, first)
    sc = [t.size for t in input_tensor_list]
    rc = [t.size for t in output_tensor_list]
    send_stage = _temp_like(first, sum(sc))
    recv_stage = _temp_like(first, sum(rc))
    _pack(send_stage, list(input_tensor_list))

    def call(eng: Engine, buf: Callable[[Any], Buf], stream: Any) -> None:
        eng.all_to_all(buf(send_stage), buf(recv_stage), sc, rc, stream)

    # sizes legitimately differ between ranks: the debug fingerprint compares the dtype
    w = g.run("all_to_all", [send_stage, recv_stage], [send_stage], [recv_stage], call, True,
              (getattr(first, "dtype", None),))
    return _split_out(g, "all_to_all", w, recv_stage, list(output_tensor_list), async_op)


def reduce_scatter(output: Any, input_list: list[Any], op: ReduceOp | PremulSum = ReduceOp.SUM,
                   group: GroupArg = None, async_op: bool = False) -> Work | None:
    """Reduce ``input_list[k]`` across ranks into ``output`` of group rank k (the list form
    of :func:`reduce_scatter_tensor`; every array has ``output``'s size and dtype).

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = acc.empty((2,), device="cpu")
        >>> dist.reduce_scatter(out, [acc.full((2,), 2.5, device="cpu")])
        >>> out.tolist(); dist.destroy_process_group()
        [2.5, 2.5]
    """
    g = _group(group)
    if g is None:
        _warn_not_member("reduce_scatter")
        return None
    n = g.size()
    if not isinstance(input_list, (list, tuple)) or len(input_list) != n:
        raise AcceleratorValueError(f"reduce_scatter: input_list must be a list of {n} arrays "
                                    "(one per rank)")
    g.check_args("reduce_scatter", input_list, [output], alias="staged")
    for t in input_list:
        _check_same("reduce_scatter", t, output)
        _size_check("reduce_scatter", t, output.size, t.size,
                    "every array of input_list must have the output's size")
    red = _op(op)
    stage = _temp_like(output, n * output.size)
    _pack(stage, list(input_list))

    def call(eng: Engine, buf: Callable[[Any], Buf], stream: Any) -> None:
        eng.reduce_scatter(buf(stage), buf(output), red, stream)

    return g.run("reduce_scatter", [stage, output], [stage], [output], call, async_op,
                 (red.name,) + _desc(output), red, [output])


def all_gather_single(output_tensor: Any, input_tensor: Any, group: GroupArg = None,
                      async_op: bool = False) -> Work | None:
    """torch 2.14's name of :func:`all_gather_into_tensor` (same arguments and behaviour;
    ``all_gather_into_tensor`` is not deprecated here).

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = acc.empty((2,), device="cpu")
        >>> dist.all_gather_single(out, acc.full((2,), 4.0, device="cpu"))
        >>> out.tolist(); dist.destroy_process_group()
        [4.0, 4.0]
    """
    return all_gather_into_tensor(output_tensor, input_tensor, group, async_op)


def reduce_scatter_single(output: Any, input: Any, op: ReduceOp = ReduceOp.SUM,
                          group: GroupArg = None, async_op: bool = False) -> Work | None:
    """torch 2.14's name of :func:`reduce_scatter_tensor` (same arguments and behaviour).

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = acc.empty((2,), device="cpu")
        >>> dist.reduce_scatter_single(out, acc.full((2,), 6.0, device="cpu"))
        >>> out.tolist(); dist.destroy_process_group()
        [6.0, 6.0]
    """
    return reduce_scatter_tensor(output, input, op, group, async_op)


def gather_single(tensor: Any, gather_tensor: Any = None, dst: int | None = None,
                  group: GroupArg = None, async_op: bool = False,
                  group_dst: int | None = None) -> Work | None:
    """Gather every rank's ``tensor`` into one array, ``gather_tensor`` (world_size times its
    elements, rank order; a flat or stacked shape), on global rank ``dst`` or group rank
    ``group_dst`` (neither: global rank 0); ``gather_tensor`` is ignored elsewhere. Unlike
    :func:`gather` the engine writes it directly (no staging copy).

    Raises:
        ValueError: no ``gather_tensor`` on the destination rank, or its size or dtype differ.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = acc.empty((1, 2), device="cpu")
        >>> dist.gather_single(acc.full((2,), 8.0, device="cpu"), out, dst=0)
        >>> out.tolist(); dist.destroy_process_group()
        [[8.0, 8.0]]
    """
    g = _group(group)
    if g is None:
        _warn_not_member("gather_single")
        return None
    root = g.canonical_rank(dst, group_dst, "dst", default=0)
    out = None
    if g.rank() == root:
        if gather_tensor is None:
            raise ValueError("gather_tensor must be specified on the destination rank")
        _check_same("gather_single", gather_tensor, tensor)
        _size_check("gather_single", gather_tensor, g.size() * tensor.size, gather_tensor.size,
                    "gather_tensor must hold world_size times the input's elements")
        out = gather_tensor

    def call(eng: Engine, buf: Callable[[Any], Buf], stream: Any) -> None:
        eng.gather(buf(tensor), None if out is None else buf(out), root, stream)

    arrays = [tensor] if out is None else [tensor, out]
    w = g.run("gather_single", arrays, [tensor], arrays[1:], call, True,
              (root,) + _desc(tensor), None, arrays[1:])
    assert w is not None
    if async_op:
        return w
    w.wait()
    return None


def gather_into_tensor(tensor: Any, gather_tensor: Any = None, dst: int | None = None,
                       group: GroupArg = None, async_op: bool = False,
                       group_dst: int | None = None) -> Work | None:
    """torch 2.14's other name of :func:`gather_single`.

    Example::

        >>> import accelrt.distributed as dist
        >>> callable(dist.gather_into_tensor)
        True
    """
    return gather_single(tensor, gather_tensor, dst, group, async_op, group_dst)


def _array_list(arrays: Any, what: str, op: str) -> list[Any]:
    if isinstance(arrays, (Array, np.ndarray)):
        return [arrays]
    if not isinstance(arrays, (list, tuple)) or not arrays or not all(
            isinstance(a, (Array, np.ndarray)) for a in arrays):
        raise TypeError(f"{op}: Invalid function argument. Expected parameter `{what}` of "
                        "type List[accelrt.Array] with at least one array")
    first = arrays[0]
    for a in arrays:
        if a.dtype != first.dtype:
            raise AcceleratorValueError(f"{op}: Invalid usage of arrays with different dtypes "
                                        f"Found {first.dtype} and  {a.dtype}")
    return list(arrays)


def all_reduce_coalesced(tensors: Any, op: ReduceOp = ReduceOp.SUM, group: GroupArg = None,
                         async_op: bool = False) -> Work | None:
    """Reduce each array of ``tensors`` (one dtype, one device; or one array) across the
    group, in place, as one collective: the arrays are packed into one buffer, reduced once,
    and copied back. As in torch, shapes are not compared across ranks.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> a, b = acc.full((2,), 1.0, device="cpu"), acc.full((3,), 2.0, device="cpu")
        >>> dist.all_reduce_coalesced([a, b])
        >>> a.tolist(), b.tolist(); dist.destroy_process_group()
        ([1.0, 1.0], [2.0, 2.0, 2.0])
    """
    arrays = _array_list(tensors, "tensor", "all_reduce_coalesced")
    g = _group(group)
    if g is None:
        _warn_not_member("all_reduce_coalesced")
        return None
    g.check_args("all_reduce_coalesced", arrays, arrays, alias="staged")
    red = _op(op)
    stage = _temp_like(arrays[0], sum(a.size for a in arrays))
    _pack(stage, arrays)

    def call(eng: Engine, buf: Callable[[Any], Buf], stream: Any) -> None:
        eng.all_reduce(None, buf(stage), red, stream)

    w = g.run("all_reduce_coalesced", [stage], [stage], [stage], call, True,
              (red.name, arrays[0].dtype, tuple(a.shape for a in arrays)), red, [stage],
              alias="inplace")
    return _split_out(g, "all_reduce_coalesced", w, stage, arrays, async_op)


def all_gather_coalesced(output_tensor_lists: list[list[Any]], input_tensor_list: list[Any],
                         group: GroupArg = None, async_op: bool = False) -> Work | None:
    """Gather every rank's ``input_tensor_list`` as one collective:
    ``output_tensor_lists[k][i]`` receives array ``i`` of group rank k (each output list
    matches the inputs' sizes; one dtype and device throughout).

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = [[acc.empty((2,), device="cpu"), acc.empty((1,), device="cpu")]]
        >>> dist.all_gather_coalesced(out, [acc.full((2,), 3.0, device="cpu"),
        ...                                 acc.full((1,), 4.0, device="cpu")])
        >>> [o.tolist() for o in out[0]]; dist.destroy_process_group()
        [[3.0, 3.0], [4.0]]
    """
    g = _group(group)
    if g is None:
        _warn_not_member("all_gather_coalesced")
        return None
    ins = _array_list(input_tensor_list, "input_tensor_list", "all_gather_coalesced")
    if not isinstance(output_tensor_lists, list):
        raise TypeError("Invalid function argument: output_tensor_lists should be a list")
    n = g.size()
    if len(output_tensor_lists) != n:
        raise AcceleratorValueError(f"all_gather_coalesced: output_tensor_lists must hold {n} "
                                    "lists (one per rank)")
    outs: list[Any] = []
    for lst in output_tensor_lists:
        lst = _array_list(lst, "output_tensor_lists", "all_gather_coalesced")
        if [o.size for o in lst] != [i.size for i in ins]:
            raise AcceleratorValueError(
                f"all_gather_coalesced: each output list must match the inputs' sizes "
                f"{[i.size for i in ins]}, got {[o.size for o in lst]}")
        outs += lst
    g.check_args("all_gather_coalesced", ins, outs, alias="staged")
    for o in outs:
        _check_same("all_gather_coalesced", o, ins[0])
    total = sum(i.size for i in ins)
    send = _temp_like(ins[0], total)
    recv = _temp_like(ins[0], n * total)
    _pack(send, ins)

    def call(eng: Engine, buf: Callable[[Any], Buf], stream: Any) -> None:
        eng.all_gather(buf(send), buf(recv), stream)

    w = g.run("all_gather_coalesced", [send, recv], [send], [recv], call, True,
              (ins[0].dtype, tuple(i.shape for i in ins)))
    return _split_out(g, "all_gather_coalesced", w, recv, outs, async_op)


def _temp_like(a: Any, count: int) -> Any:
    if isinstance(a, np.ndarray):
        return np.empty(count, a.dtype)
    from .._array import empty
    return empty((count,), dtype=a.dtype, device=a.device)


def _copy(dst: Any, dst_off: int, src: Any, src_off: int, nbytes: int) -> None:
    """Copy bytes between two arrays of one device, in order on its current stream."""
    if nbytes == 0:
        return
    if isinstance(dst, np.ndarray):
        d = dst.reshape(-1).view(np.uint8)
        s = src.reshape(-1).view(np.uint8)
        d[dst_off:dst_off + nbytes] = s[src_off:src_off + nbytes]
        return
    from .._stream import _current
    b, index = dst._b, dst._index
    cur = _current(b, index)
    dptr, sptr = dst.data_ptr() + dst_off, src.data_ptr() + src_off
    if b.host_accessible(index):   # cpu arrays may borrow host memory: copy in stream order
        import ctypes

        from ..comm._transfer import run_on_stream
        def move() -> None:
            ctypes.memmove(dptr, sptr, nbytes)

        run_on_stream(cur, move)
    else:
        b.memcpy(index, dptr, sptr, nbytes, "d2d", cur._handle)


def _pack(stage: Any, parts: list[Any]) -> None:
    """Copy ``parts`` back to back into ``stage``."""
    off = 0
    for p in parts:
        _copy(stage, off, p, 0, p.nbytes)
        off += p.nbytes


def _split_out(g: ProcessGroup, op: str, w: Work | None, stage: Any, outs: list[Any],
               async_op: bool) -> Work | None:
    """Copy the blocks of ``stage`` into ``outs`` after ``w`` (stream-ordered)."""
    assert w is not None
    w.wait()
    off = 0
    for o in outs:
        _copy(o, 0, stage, off, o.nbytes)
        off += o.nbytes
    return Work.completed(outs) if async_op else None


# ---------------------------------------------------------------------------- point-to-point
def isend(tensor: Any, dst: int | None = None, group: GroupArg = None, tag: int = 0,
          group_dst: int | None = None) -> Work | None:
    """Start sending ``tensor`` to global rank ``dst`` (or group rank ``group_dst``: give
    exactly one); ``wait()`` on the result.

    Example::

        >>> import accelrt.distributed as dist
        >>> callable(dist.isend)
        True
    """
    return _p2p("isend", tensor, dst, group_dst, group, tag, send=True, blocking=False)


def irecv(tensor: Any, src: int | None = None, group: GroupArg = None, tag: int = 0,
          group_src: int | None = None) -> Work | None:
    """Start receiving into ``tensor`` from global rank ``src`` or group rank ``group_src``
    (neither: any rank, MPI only).

    Example::

        >>> import accelrt.distributed as dist
        >>> callable(dist.irecv)
        True
    """
    return _p2p("irecv", tensor, src, group_src, group, tag, send=False, blocking=False)


def send(tensor: Any, dst: int | None = None, group: GroupArg = None, tag: int = 0,
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


def recv(tensor: Any, src: int | None = None, group: GroupArg = None, tag: int = 0,
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
            g.canonical_rank(rank, group_rank, "dst" if send else "src"))
    return g.p2p(op, tensor, peer, int(tag), send, blocking)


@dataclass
class P2POp:
    """One operation for :func:`batch_isend_irecv`: ``P2POp(dist.isend, array, peer)``, or
    ``P2POp(dist.irecv, array, group=g, group_peer=k)`` (a rank of ``g``); exactly one of
    ``peer`` and ``group_peer``.

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
        # torch's P2POp names its peer by exactly one of peer and group_peer (the ranks are
        # resolved against the group by batch_isend_irecv's argument check)
        if self.peer is not None and self.group_peer is not None:
            raise ValueError("Can't specify both group_rank and global_rank: pass peer= (a "
                             "global rank) or group_peer= (a rank of the group), not both")
        if self.peer is None and self.group_peer is None:
            raise ValueError("Must specify global_rank or group_rank: pass peer= (a global "
                             "rank) or group_peer= (a rank of the group)")


def batch_isend_irecv(p2p_op_list: list[P2POp]) -> list[Work]:
    """Post every send and receive of ``p2p_op_list``; returns their work handles.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.batch_isend_irecv([])
        []
    """
    if not isinstance(p2p_op_list, list) or not all(isinstance(p, P2POp) for p in p2p_op_list):
        raise TypeError("Invalid ``p2p_op_list``. Each op is expected to to be of type "
                        "``torch.distributed.P2POp``.")
    if not p2p_op_list:
        return []
    groups = {id(_group(p.group)) for p in p2p_op_list}
    if len(groups) != 1:
        raise ValueError("All ops need to use the same group.")
    g = _group(p2p_op_list[0].group)
    if g is not None:   # every operation's arguments, before any is posted
        for p in p2p_op_list:
            send = p.op is isend
            g.canonical_rank(p.peer, p.group_peer, "peer")
            g.check_args("isend" if send else "irecv", (p.tensor,) if send else (),
                         () if send else (p.tensor,))
    ctx = None
    nccl = [] if g is None else [e for e in g._engines.values() if e.name == "nccl"]
    if nccl:
        import importlib
        ctx = importlib.import_module("nccl.core").group()
    works: list[Work] = []
    if ctx is not None:
        ctx.__enter__()
    try:
        for p in p2p_op_list:
            w = p.op(p.tensor, p.peer, p.group, p.tag, p.group_peer)
            if w is not None:
                works.append(w)
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
    if ctx is not None and g is not None:
        # NCCL launches the grouped sends and receives at the group's end (through a
        # background thread on a non-blocking communicator): the done events recorded inside
        # the group covered nothing. Wait until the group reached the streams, then record
        # them again.
        from ._nccl import settle
        for e in nccl:
            settle(e.comm, g.timeout,  # type: ignore[attr-defined]
                   "batch_isend_irecv")
        for w in works:
            if w._event is not None and w._stream_of is not None:
                w._event = g.dev_ctx(*w._stream_of).stream.record_event()
    return works


# ---------------------------------------------------------------------------- barriers
def barrier(group: GroupArg = None, async_op: bool = False,
            device_ids: Sequence[int] | None = None, timeout: Any = None) -> Work | None:
    """Block until every rank of the group reached the barrier (after the group's queued
    communication ran).

    Args:
        device_ids: the CUDA device of an NCCL-only group's barrier (its first item; an
            all_reduce of one element there, as ProcessGroupNCCL's barrier).
        timeout: a ``datetime.timedelta`` or seconds (torch 2.14's ``timeout``): a rank that
            has not arrived by then makes this rank raise :class:`DistTimeoutError`, and the
            group keeps that error (its barrier is still in flight: destroy the group).
            None: the group's timeout, past which the watchdog ends the job.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi"); dist.barrier(timeout=30)
        >>> dist.destroy_process_group()
    """
    g = _group(group)
    if g is None:
        _warn_not_member("barrier")
        return None
    if device_ids is not None and (not isinstance(device_ids, (list, tuple)) or not device_ids
                                   or not all(isinstance(d, int) for d in device_ids)):
        raise TypeError(f"device_ids must be a list of device indices, got {device_ids!r}")
    limit = None if timeout is None else _seconds(timeout, g.timeout)
    g._raise_kept()
    g.drain()
    seq = g.next_seq()
    comm = g.control()
    if comm is not None:
        if limit is None:
            g._inline("barrier", seq, comm.Barrier)
        else:
            from ._work import wait_until
            req = comm.Ibarrier()
            ms = int(limit * 1000)

            def late() -> DistTimeoutError:
                return DistTimeoutError(
                    f"[Rank {g.global_rank}]: barrier (sequence number {seq}) on group "
                    f"{g.name!r} timed out after {ms} ms: a rank of the group did not reach "
                    "it (monitored_barrier names the missing ranks). The group keeps this "
                    "error: destroy it", rank=g.global_rank, op="barrier", seq=seq)

            try:
                wait_until(req.Test, limit, late)
            except DistTimeoutError as err:
                g._keep(err)   # the barrier is still in flight on the group's communicator
                raise
    else:   # NCCL only (env://): a one-element all_reduce, then wait for it
        from .._array import zeros
        if device_ids is not None:
            index = int(device_ids[0])
        else:
            index = g._engines and next(iter(g._engines))[1] or 0
        one = zeros((1,), dtype="float32", device=f"cuda:{index}")
        w = all_reduce(one, group=g, async_op=True)
        assert w is not None
        if limit is not None:
            w.wait(timeout=limit)
        from .._stream import current_stream
        w.wait()
        current_stream(f"cuda:{index}").synchronize()
    return Work.completed() if async_op else None


def monitored_barrier(group: GroupArg = None, timeout: Any = None,
                      wait_all_ranks: bool = False) -> None:
    """A barrier that names the ranks that did not arrive within ``timeout`` (rank 0 raises
    :class:`DistTimeoutError`; host-side, needs MPI).

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi"); dist.monitored_barrier(timeout=5)
        >>> dist.destroy_process_group()
    """
    g = _group(group)
    if g is None:
        _warn_not_member("monitored_barrier")
        return
    g._raise_kept()
    comm = g.control()
    if comm is None:
        raise DistError("monitored_barrier needs MPI (launch through mpiexec)",
                        rank=g.global_rank)
    g.drain()
    seq = g.next_seq()
    limit = _seconds(timeout, g.timeout)
    from ._work import wait_until
    from ._mpi import mpi
    mpi()    # raises a clear error without mpi4py
    tag = 0x7ACC
    token = np.zeros(1, np.int64)
    ms = int(limit * 1000)
    if g.rank() == 0:
        bufs = {r: np.zeros(1, np.int64) for r in range(1, g.size())}
        reqs = {r: comm.Irecv(bufs[r], r, tag) for r in bufs}

        def arrived() -> bool:
            for r in list(reqs):
                if reqs[r].Test():
                    del reqs[r]
            return not reqs

        def missing() -> DistTimeoutError:
            names = [g.global_ranks[r] for r in sorted(reqs)]
            if wait_all_ranks:
                msg = (f"[Rank 0]: Ranks {', '.join(map(str, names))} failed to pass "
                       f"monitoredBarrier in {ms} ms")
            else:
                msg = f"[Rank 0]: Rank {names[0]} failed to pass monitoredBarrier in {ms} ms"
            return DistTimeoutError(msg, rank=g.global_rank, op="monitored_barrier", seq=seq)

        wait_until(arrived, limit, missing)
        for r in range(1, g.size()):
            comm.Send(token, r, tag + 1)
        return
    comm.Send(token, 0, tag)
    req = comm.Irecv(token, 0, tag + 1)
    wait_until(req.Test, limit + 5.0, lambda: DistTimeoutError(
        f"[Rank {g.global_rank}]: rank 0 did not release the monitored barrier in {ms} ms",
        rank=g.global_rank, op="monitored_barrier", seq=seq))


# ---------------------------------------------------------------------------- objects
class _HostOnlyPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        from .._array import Array
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


def _obj_comm(op: str, group: GroupArg) -> tuple[ProcessGroup | None, Any]:
    g = _group(group)
    if g is None:
        _warn_not_member(op)
        return None, None
    g._raise_kept()
    comm = g.control()
    if comm is None:
        raise DistError(f"{op} needs MPI (launch through mpiexec)", rank=g.global_rank)
    return g, comm


def _obj_call(g: ProcessGroup, op: str, fn: Callable[[], Any]) -> Any:
    """Run an object collective's MPI call ``fn`` after the group's queued work, under the
    group's sequence number and timeout (:meth:`ProcessGroup._inline`); returns its result.
    Arguments are checked and objects pickled before: nothing here raises for them."""
    g.drain()
    seq = g.next_seq()
    box: list[Any] = []
    g._inline(op, seq, lambda: box.append(fn()))
    return box[0]


def broadcast_object_list(object_list: list[Any], src: int | None = None,
                          group: GroupArg = None, device: Any = None,
                          group_src: int | None = None, weights_only: bool = False) -> None:
    """Replace ``object_list``'s items on every rank with those (pickled) of global rank
    ``src`` or group rank ``group_src`` (neither: global rank 0). With ``weights_only=True``
    the receivers unpickle only plain data and numpy arrays (else ``pickle.UnpicklingError``),
    as torch's ``weights_only``; the same holds for every ``*_object*`` collective.

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
    data = _dumps(list(object_list)) if g.rank() == root else None
    data = _obj_call(g, "broadcast_object_list", lambda: comm.bcast(data, root=root))
    object_list[:] = _loads(data, weights_only)


def all_gather_object(object_list: list[Any], obj: Any, group: GroupArg = None,
                      weights_only: bool = False) -> None:
    """Fill ``object_list`` (one slot per rank) with every rank's ``obj``.

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
    if len(object_list) != g.size():
        raise ValueError(f"all_gather_object: object_list must have {g.size()} slots")
    data = _dumps(obj)
    got = _obj_call(g, "all_gather_object", lambda: comm.allgather(data))
    object_list[:] = [_loads(x, weights_only) for x in got]


def gather_object(obj: Any, object_gather_list: list[Any] | None = None,
                  dst: int | None = None, group: GroupArg = None,
                  group_dst: int | None = None, weights_only: bool = False) -> None:
    """Gather every rank's ``obj`` into ``object_gather_list`` on global rank ``dst`` or group
    rank ``group_dst`` (neither: global rank 0).

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
    if g.rank() == root and (object_gather_list is None
                             or len(object_gather_list) != g.size()):
        raise ValueError(f"gather_object: object_gather_list must have {g.size()} slots on "
                         "the destination rank")
    data = _dumps(obj)
    got = _obj_call(g, "gather_object", lambda: comm.gather(data, root=root))
    if g.rank() == root:
        assert object_gather_list is not None
        object_gather_list[:] = [_loads(x, weights_only) for x in got]


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
    items = None
    if g.rank() == root:
        if scatter_object_input_list is None or len(scatter_object_input_list) != g.size():
            raise ValueError(f"scatter_object_list: the source rank needs {g.size()} input "
                             "objects")
        items = [_dumps(x) for x in scatter_object_input_list]
    mine = _obj_call(g, "scatter_object_list", lambda: comm.scatter(items, root=root))
    scatter_object_output_list[0] = _loads(mine, weights_only)


_OBJ_TAG = 0x7AD0   # on the group's private control communicator: never a user tag


def send_object_list(object_list: list[Any], dst: int | None = None, group: GroupArg = None,
                     device: Any = None, group_dst: int | None = None, use_batch: bool = False,
                     weights_only: bool = False) -> None:
    """Send the (pickled, host-only) objects of ``object_list`` to global rank ``dst`` (or
    group rank ``group_dst``), which receives them with :func:`recv_object_list` into a list
    of the same length. ``use_batch`` (torch: send its size and data messages through
    ``batch_isend_irecv``) changes nothing here: the objects travel as one MPI message either
    way. ``weights_only`` is the receiver's (:func:`recv_object_list`).

    Raises:
        ValueError: no destination, both ``dst`` and ``group_dst``, or this rank itself.
        TypeError: an object holds an accelrt array (send ``array.numpy()``).

    Example::

        >>> import accelrt.distributed as dist
        >>> callable(dist.send_object_list)
        True
    """
    g, comm = _obj_comm("send_object_list", group)
    if g is None:
        return
    peer = g.canonical_rank(dst, group_dst, "dst")
    g.check_args("send_object_list", peer=peer, peer_role="destination")
    data = _dumps(list(object_list))
    _obj_call(g, "send_object_list", lambda: comm.send(data, dest=peer, tag=_OBJ_TAG))


def recv_object_list(object_list: list[Any], src: int | None = None, group: GroupArg = None,
                     device: Any = None, group_src: int | None = None, use_batch: bool = False,
                     weights_only: bool = False) -> int:
    """Receive :func:`send_object_list`'s objects from global rank ``src`` or group rank
    ``group_src`` (neither: any rank, an accelrt addition: torch asks for one) into
    ``object_list`` (same length as the sender's); returns the sender's global rank (-1 if
    this rank is not in ``group``). ``use_batch`` changes nothing (see
    :func:`send_object_list`); ``weights_only=True`` unpickles only plain data and numpy
    arrays (else ``pickle.UnpicklingError``).

    Raises:
        ValueError: the sender's list has another length (``object_list`` is left as it was).

    Example::

        >>> import accelrt.distributed as dist
        >>> callable(dist.recv_object_list)
        True
    """
    g, comm = _obj_comm("recv_object_list", group)
    if g is None:
        return -1
    peer = (None if src is None and group_src is None else
            g.canonical_rank(src, group_src, "src"))
    if peer is not None:
        g.check_args("recv_object_list", peer=peer, peer_role="source")
    from ._mpi import mpi
    MPI = mpi()
    status = MPI.Status()
    data = _obj_call(g, "recv_object_list", lambda: comm.recv(
        source=MPI.ANY_SOURCE if peer is None else peer, tag=_OBJ_TAG, status=status))
    sender = g.global_ranks[int(status.Get_source())]
    got = _loads(data, weights_only)
    if len(got) != len(object_list):
        raise ValueError(f"recv_object_list: rank {sender} sent {len(got)} objects but "
                         f"object_list has {len(object_list)} slots; pass a list of the "
                         "sender's length")
    object_list[:] = got
    return sender

