"""Starting and ending the job: availability of the engines, :func:`init_process_group`
(MPI launchers, ``env://`` and store rendezvous, NCCL worlds) and
:func:`destroy_process_group`.

Example::

    >>> import accelrt.distributed as dist
    >>> dist.init_process_group("mpi"); dist.is_initialized()
    True
    >>> dist.destroy_process_group(); dist.is_initialized()
    False
"""

from __future__ import annotations

import datetime
import os
import sys
import warnings
from typing import TYPE_CHECKING, Any

from .._errors import (AcceleratorIndexError, AcceleratorTypeError, AcceleratorValueError,
                       type_shown)
from .._typing import DeviceSpec
from ._engine import Backend, EngineContext, ReduceOp
from ._engine import parse_backend as _parse_backend
from ._engine import require_engines as _require_engines
from ._errors import (DistBackendError, DistError, DistTimeoutError, _AssertValueError,
                      _DeviceRangeError)
from ._group import DEFAULT_TIMEOUT, ProcessGroup
from ._filestore import FileStore
from ._store import PrefixStore, Store, _int
from ._tcpstore import TCPStore
from ._world import (
    _S,
    GroupArg,
    GroupMember,
    TimeoutArg,
    _group,
    _GroupNS,
    _NonMember,
    _seconds,
)

if TYPE_CHECKING:
    from .._backend import Backend as DeviceBackend
    from .._device import device

DEFAULT_INIT_TIMEOUT = 300.0


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
    from ._engine import _mpi_available   # the registry's check of the "mpi" engine
    return _mpi_available()


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
        raise TypeError(f"backend must be a string, got {type_shown(backend)}")
    names = [part.partition(":")[2] if ":" in part else part
             for part in backend.lower().split(",")]
    for name in names:
        reg = Backend._registry.get(name.strip())
        if reg is None or (reg.available is not None and not reg.available()):
            return False
    return True


def get_default_backend_for_device(device: DeviceSpec) -> str:
    """The engine ``init_process_group(backend=None)`` uses for arrays of ``device`` (a device
    type, ``"cuda:1"``, an :class:`accelrt.device`, or an index of the current accelerator):
    ``"mpi"`` for cpu and OpenCL, ``"nccl"`` for CUDA (torch answers ``"gloo"`` for cpu: that
    is the MPI engine here).

    Raises:
        AcceleratorValueError: a device string torch's parser refuses (``"cuda:x"``), or no
            default engine for that device type: a ``RuntimeError`` as torch 2.15 raises for a
            type it does not know (``"bogus"``), and a ``ValueError`` as it raises for a type
            it knows without a default engine (``"meta"``).

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.get_default_backend_for_device("cuda:0"), dist.get_default_backend_for_device("cpu")
        ('nccl', 'mpi')
    """
    if isinstance(device, str):
        from .._device import _parse
        kind = _parse(device)[0]     # torch.device(device): "cuda:x" is a RuntimeError
    elif isinstance(device, int) and not isinstance(device, bool):
        from .. import current_accelerator
        acc_dev = current_accelerator()
        kind = "cpu" if acc_dev is None else acc_dev.type
    elif isinstance(getattr(device, "type", None), str):   # accelrt.device, torch.device
        kind = str(getattr(device, "type"))  # noqa: B009  (the attribute checked above)
    else:
        raise TypeError(f"device must be a device string, an accelrt.device or an int, got "
                        f"{type_shown(device)}")
    backend = Backend.default_device_backend_map.get(kind)
    if backend is None:
        msg = f"Default backend not registered for device : {device}"
        if kind not in _TORCH_DEVICE_TYPES and not isinstance(device, int):
            # torch.device() refuses the string before the map is read (a RuntimeError)
            msg += (f" (Expected one of {', '.join(_TORCH_DEVICE_TYPES)} device type at start "
                    f"of device string: {device})")
        raise AcceleratorValueError(msg)
    return backend


#: the device types torch 2.15's ``torch.device`` parses (c10/core/DeviceType.cpp), in its order
_TORCH_DEVICE_TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip",
                       "ve", "fpga", "maia", "xla", "lazy", "vulkan", "mps", "meta", "hpu",
                       "mtia", "privateuseone")


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

        >>> import os
        >>> import accelrt.distributed as dist
        >>> dist.is_torchelastic_launched() == ("TORCHELASTIC_RUN_ID" in os.environ)
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


# ---------------------------------------------------------------------------- init
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


def _check_serves_some(backend: str | None, engine_map: dict[str, str]) -> None:
    """Raise torch 2.15's ``RuntimeError`` when ``backend`` names an engine that serves no
    device type (registered with ``devices=[]``): its ``init_process_group`` fails there
    ("Could not find the default backend type ... for Process Group"), and the world would
    have no engine for any array."""
    if backend is not None and not engine_map:
        raise RuntimeError(f"Could not find the default backend for the process group: "
                           f"backend {backend!r} serves no device type (it was registered "
                           "with devices=[]); register it with the device types it serves "
                           "(register_backend(..., devices=['cpu'])) or pass "
                           "'device:engine' pairs of other engines")


def init_process_group(backend: str | None = None, init_method: str | None = None,
                       timeout: TimeoutArg = None, world_size: int = -1, rank: int = -1,
                       store: Store | None = None, group_name: str = "", pg_options: object = None,
                       device_id: DeviceSpec | None = None, _ranks: list[int] | None = None,
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
        world_size, rank: must agree with the launcher's when given (``backend="mpi"``:
            ignored with torch's ``UserWarning``).
        store: a :class:`Store` the ranks share (with ``rank`` and ``world_size``), instead
            of ``init_method``.
        group_name, pg_options: accepted for compatibility.
        device_id: the device this rank binds to, with an index (``"cuda:1"``,
            ``"cpu:0"``: torch 2.15 binds a CPU device too), or an int (an index of the
            current accelerator): made current and kept as the group's
            ``bound_device_id``; on a cuda device the NCCL engine starts eagerly.
        _ranks: torch's ranks whose hash names the world: a non-empty list makes its
            ``group_name`` torch 2.15's SHA-1 of the ranks (else ``"0"``).
        enable_reconfigure: must be ``False``: torch 2.14's fault-tolerance regime (the
            communicator waits for ``ProcessGroup.reconfigure``) has no accelrt engine.

    Raises:
        ValueError: called twice, both a store and an init method, a store without rank
            and world_size, an unknown init method, or world_size or rank disagree with the
            launcher's; ``"nccl"`` named on a machine without a
            CUDA GPU (``AcceleratorValueError``: torch's "ProcessGroupNCCL is only supported
            with GPUs, no GPUs found!"); a ``device_id`` without an index, or with one its
            backend does not have (torch 2.15's messages; the second is also an
            ``IndexError``).
        BackendUnavailableError: ``device_id`` is on a backend that is not available.
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
    world_size, rank = _check_init_args(init_method, world_size, rank, store, _ranks,
                                        enable_reconfigure)
    if backend is None:
        backend = os.environ.get("ACCELRT_DISTRIBUTED_BACKEND") or None
    engine_map = _parse_backend(backend)
    _check_serves_some(backend, engine_map)
    backend_str = (",".join(f"{d}:{e}" for d, e in engine_map.items())
                   if backend is None or ":" in str(backend) else str(Backend(str(backend))))
    # the engines a backend string names must be able to start (torch constructs each backend
    # of the map at init: "nccl" without a GPU fails there); the defaults of backend=None
    # are not required: NCCL starts when first used, and only for arrays that exist (the MPI
    # engines of an MPI world start at init: ProcessGroup.start_mpi_engines)
    named = {} if backend is None else engine_map
    op_timeout = _seconds(timeout, DEFAULT_TIMEOUT)
    init_timeout = min(op_timeout, DEFAULT_INIT_TIMEOUT) if timeout is None else op_timeout
    # the bound device, resolved once: (device, its backend, its index), and the index NCCL
    # serves when it is CUDA memory (a device in host memory leaves NCCL its own choice)
    bound = None if device_id is None else _resolve_bound(device_id)
    nccl_index = (bound[2] if bound is not None
                  and bound[1].capabilities(bound[2]).cuda_array_interface else None)
    method = "store" if store is not None else _init_method(init_method)
    if method.startswith("mpi://"):
        if backend_str == "mpi":
            world_size, rank = _mpi_ranks_ignored(world_size, rank)
        group = _init_mpi(engine_map, backend_str, op_timeout, init_timeout, world_size, rank,
                          named)
    else:
        from ._rendezvous import RendezvousPlan, custom_handler, plan, rendezvous
        if store is None and custom_handler(method):
            # a handler of register_rendezvous_handler makes the store (as torch's
            # init_process_group asks rendezvous())
            store, rank, world_size = next(rendezvous(
                method, rank, world_size, timeout=datetime.timedelta(seconds=init_timeout)))
        where: Store | RendezvousPlan = (store if store is not None
                                         else plan(method, rank, world_size))
        r, n = (rank, world_size) if isinstance(where, Store) else (where.rank,
                                                                     where.world_size)
        group = _init_store(engine_map, backend_str, op_timeout, init_timeout, n, r,
                            nccl_index, named, where)
    if bound is not None:
        from .._device import _set_index
        dev, b, index = bound
        # made current on its own backend (set_device_index would refuse a device of another
        # backend than the current accelerator: torch 2.15 binds cpu:0 on a CUDA machine)
        _set_index(b, index)
        group.bound_device_id = dev
        if nccl_index is not None:
            # CUDA device memory (what NCCL serves): start its engine now, as PyTorch's
            # device_id makes the communicator eagerly
            group.engine(b.name, index)
    from ._group import read_debug_level
    read_debug_level()
    _S.world = group
    GroupMember.WORLD = group
    _GroupNS.WORLD = group
    _S.groups = [group]
    from ._groups import _group_name   # torch's name of the world: "0", or _ranks' SHA-1
    group._group_name, _S.pg_count = _group_name(_ranks or None, count=0), 1
    _S.nonmember_ranks = None


def _bound_device(device_id: DeviceSpec, group: bool = False) -> device:
    """The device ``init_process_group(device_id=)`` binds the world to: the device of
    :func:`_resolve_bound` (``new_group(device_id=)``'s with ``group``)."""
    return _resolve_bound(device_id, group)[0]


def _resolve_bound(device_id: DeviceSpec,
                   group: bool = False) -> tuple[device, DeviceBackend, int]:
    """The device ``init_process_group(device_id=)`` binds the world to, with its backend and
    index (resolved once: init uses all three), checked before anything starts, as torch
    2.15 checks it: an int is an index of the current accelerator;
    a device of any backend (``"cpu:0"`` too: torch 2.15 binds a CPU device with an index)
    must have an index, and one its backend has. ``group``: ``new_group(device_id=)``'s
    device in an unbound world, refused without an index by torch's group check only.

    Raises:
        ValueError: the device has no index (torch 2.15's two messages: its group rule for
            cpu devices and for every device of a group, its accelerator rule for the
            others); the index is not one of the backend's devices (also an ``IndexError``,
            as accelrt's device checks).
        BackendUnavailableError: the backend is not available here.
    """
    from .._device import _get_device
    from .._device import device as _device
    dev = None   # an int: an index of the current accelerator (torch's int device_id)
    if not isinstance(device_id, int) or isinstance(device_id, bool):
        dev = _device(device_id)
        if dev.index is None:
            if group or _in_host_memory(dev.type):   # torch's CPU device: its c10d rule
                raise ValueError("init_process_group device_id parameter must be a device "
                                 "with a valid index, e.g. cpu:0 or cuda:0")
            raise ValueError("Please use a device_id with index.")   # its accelerator rule
    try:
        b, index = _get_device(device_id if dev is None else dev)
    except AcceleratorIndexError as exc:
        from .._backend import get_backend
        from .._device import current_accelerator
        name = dev.type if dev is not None else str(current_accelerator())
        count = get_backend(name).device_count()
        raise _DeviceRangeError(
            f"device_id {name}:{dev.index if dev is not None else device_id} is out of "
            f"range. Please use a device index less than the number of accelerators "
            f"available: {count}. ({exc})") from None
    return _device(b.name, index), b, index


def _in_host_memory(backend: str) -> bool:
    """Whether ``backend``'s devices keep their memory in the host's (``host_accessible``, as
    the cpu backend's): what torch's CPU device is to its checks (False when unavailable)."""
    from .._backend import get_backend
    try:
        return bool(get_backend(backend).capabilities(0).host_accessible)
    except Exception:  # noqa: BLE001 - an unavailable backend is an accelerator's to torch
        return False


def _check_init_args(init_method: str | None, world_size: int, rank: int, store: Store | None,
                     _ranks: list[int] | None, enable_reconfigure: bool) -> tuple[int, int]:
    """init_process_group's argument checks (before anything starts); ``(world_size,
    rank)`` as ints."""
    if _ranks is not None and (isinstance(_ranks, (str, bytes)) or not all(
            isinstance(r, int) and not isinstance(r, bool) for r in _ranks)):
        raise TypeError(f"_ranks must be a list of ints or None, got {_ranks!r:.60}")
    if not isinstance(enable_reconfigure, bool):
        raise TypeError(f"enable_reconfigure must be a bool, got "
                        f"{type_shown(enable_reconfigure)}")
    if enable_reconfigure:
        raise ValueError("enable_reconfigure=True is not supported: accelrt's engines (MPI, "
                         "NCCL) have no reconfigure regime (ProcessGroup.reconfigure); pass "
                         "enable_reconfigure=False (the default)")
    try:
        world_size, rank = _int(world_size, "world_size"), _int(rank, "rank")
    except TypeError as e:   # torch: RuntimeError: `rank` must be an integer
        raise AcceleratorTypeError(str(e)) from None
    if init_method is not None and not isinstance(init_method, str):
        raise TypeError(f"init_method must be a str such as 'env://' or 'tcp://host:port', "
                        f"got {type_shown(init_method)}")
    if store is not None:
        if init_method is not None:
            raise _AssertValueError("Cannot specify both init_method and store.")
        if not isinstance(store, Store):
            raise TypeError(f"store must be an accelrt.distributed.Store, got "
                            f"{type_shown(store)}")
        if not world_size > 0:
            raise _AssertValueError("world_size must be positive if using store")
        if not rank >= 0:
            raise _AssertValueError("rank must be non-negative if using store")
        if not rank < world_size:
            raise ValueError(f"rank {rank} is out of range for world size {world_size}: a "
                             "store's ranks are 0 .. world_size - 1")
    return world_size, rank


def _mpi_ranks_ignored(world_size: int, rank: int) -> tuple[int, int]:
    """torch 2.15's ``backend="mpi"``: the ranks are the MPI runtime's; a ``rank`` or
    ``world_size`` given is ignored with its warning (dist_tuto.rst's ``init_process(0, 0,
    run, backend='mpi')`` under ``mpirun``). ``(-1, -1)``."""
    if world_size != -1 or rank != -1:
        warnings.warn(f"For MPI backend, world_size ({world_size}) and rank ({rank}) are "
                      "ignored since they are assigned by the MPI runtime.", stacklevel=3)
    return -1, -1


def _init_method(init_method: str | None) -> str:
    """The rendezvous of ``init_method=None``: the MPI launcher's, else torchrun's
    environment (``RANK``/``WORLD_SIZE``), else MPI when mpi4py is there."""
    if init_method is not None:
        return init_method
    if _under_mpi_launcher():
        return "mpi://"
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return "env://"
    return "mpi://" if is_mpi_available() else "env://"


def _init_mpi(engine_map: dict[str, str], backend_str: str, op_timeout: float,
              init_timeout: float, world_size: int, rank: int,
              named: dict[str, str]) -> ProcessGroup:
    from ._mpi import mpi
    from ._work import WATCHDOG
    try:
        MPI = mpi()
    except ImportError as exc:
        raise DistBackendError("init_method='mpi://' needs mpi4py and an MPI: pip install "
                               "'accelrt[mpi]' (mpi4py and the mpich wheel)") from exc
    world = MPI.COMM_WORLD
    r, n = world.Get_rank(), world.Get_size()
    if world_size not in (-1, n):
        msg = f"world_size={world_size} but the MPI launcher started {n} ranks"
        if n == 1 and world_size > 1 and not _under_mpi_launcher():
            # torch's template (dist_tuto.rst): Process(target=init_process) per rank with
            # init_process_group("gloo", rank=rank, world_size=size) and MASTER_ADDR/PORT
            msg += (f" (no MPI launcher started this process): "
                    f"{_mpi_needs_launcher(world_size)}")
        raise ValueError(msg)
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
    group.start_mpi_engines()
    return group


def _mpi_needs_launcher(n: int) -> DistBackendError:
    return DistBackendError(
        f"the 'mpi' engine (backend 'mpi' or 'gloo') cannot join {n} processes that no MPI "
        "launcher started: MPICH's singleton MPI_Comm_connect/MPI_Comm_accept, which would "
        "join them through the store, fails (pmodels/mpich#7805). Launch with mpiexec -n N "
        "python -m accelrt.distributed.run script.py (init_method='mpi://'), or use "
        "backend='nccl' for CUDA arrays")


def _init_store(engine_map: dict[str, str], backend_str: str, op_timeout: float,
                init_timeout: float, n: int, r: int, nccl_index: int | None,
                named: dict[str, str], where: Any) -> ProcessGroup:
    """A world met through a store (``store=``, ``env://``, ``tcp://``, ``file://``): the
    rendezvous ``where`` is a :class:`Store` or a plan to make one; ``nccl_index`` is the
    bound CUDA device's index (None: no device_id, or one in host memory)."""
    launched = n > 1 and _under_mpi_launcher()
    if ((n == 1 or launched) and is_mpi_available()
            and "nccl" not in named.values()
            and ("nccl" not in engine_map.values() or not _cuda_count())):
        # one rank: a singleton MPI world serves every engine map without a CUDA device; ranks
        # an MPI launcher started (torchvision's init_distributed_mode, env://, or
        # detectron2's tcp:// under mpiexec) are its MPI world, which must be the store's
        # world (_init_mpi: the same size, each process the same rank). The rendezvous still
        # makes its store, as torch's does: an unwritable file:// path or a tcp:// port that
        # cannot be served fails here instead of being ignored
        if launched:
            _meet_launched(n, r, init_timeout)
        base = (where if isinstance(where, Store)
                else where.connect(datetime.timedelta(seconds=init_timeout)))
        try:
            group = _init_mpi(engine_map, backend_str, op_timeout, init_timeout, n, r, named)
        except BaseException:
            if base is not where and isinstance(base, (TCPStore, FileStore)):
                base.close()
            raise
        _S.store = base
        return group
    _require_engines(named)   # before the rendezvous: no rank waits for one that failed
    if n > 1 and any(e in ("mpi", "gloo") for e in named.values()):
        raise _mpi_needs_launcher(n)
    if "nccl" not in engine_map.values() or (not named and not _cuda_count()):
        raise _mpi_needs_launcher(n)
    base = (where if isinstance(where, Store)
            else where.connect(datetime.timedelta(seconds=init_timeout)))
    try:
        group = _init_nccl_world(engine_map, backend_str, op_timeout, init_timeout, n, r,
                                 nccl_index, PrefixStore("default_pg", base))
    except BaseException:
        if base is not where and isinstance(base, (TCPStore, FileStore)):
            base.close()
        raise
    _S.store = base   # a TCPStore master serves the others as long as the world lives
    return group


def _meet_launched(n: int, r: int, timeout: float) -> None:
    """A store-based init of ranks an MPI launcher started: check that the store's world is
    the launcher's (``world_size`` and this process's ``rank``; a ``ValueError`` before any
    rank waits on the store), then wait (at most ``timeout`` s) until every rank reached
    ``init_process_group``. Rank 0 has then dropped the store of an earlier world on the
    same port (``destroy_process_group``, then ``env://`` again), which the other ranks
    would otherwise join, and lose when rank 0 closes it."""
    from ._mpi import mpi
    from ._work import wait_until
    world = mpi().COMM_WORLD
    if world.Get_size() != n:
        raise ValueError(f"world_size={n} but the MPI launcher started {world.Get_size()} "
                         "ranks: a store-based init of ranks mpiexec started joins the "
                         "launcher's world (leave world_size out, or give the -n of mpiexec)")
    if world.Get_rank() != r:
        raise ValueError(f"rank={r} but the MPI launcher made this process rank "
                         f"{world.Get_rank()} (accelrt.distributed.run sets RANK to it)")
    # an Ibarrier cannot be cancelled: one that timed out stays posted, and a later init
    # waits on it instead of posting another, which the late ranks' one barrier would never
    # match (theirs completes the old one: the retry would time out while they went on)
    global _MEET
    req = _MEET if _MEET is not None else world.Ibarrier()
    _MEET = req
    wait_until(req.Test, timeout, lambda: DistTimeoutError(
        f"rank {r}: init_process_group: not every rank of the MPI launcher's world reached "
        f"init_process_group within {timeout:g} s", rank=r, op="init_process_group"))
    _MEET = None


#: the Ibarrier of a store-based init under an MPI launcher that timed out (_meet_launched)
_MEET: Any = None


def _init_nccl_world(engine_map: dict[str, str], backend_str: str, op_timeout: float,
                     init_timeout: float, n: int, r: int, nccl_index: int | None,
                     store: Store) -> ProcessGroup:
    """The world of a store-based init: NCCL's unique id made by rank 0 and shared through
    ``store`` (as torch's ProcessGroupNCCL does); a singleton MPI world for host arrays. NCCL
    serves device ``nccl_index`` (the bound CUDA device), else ``LOCAL_RANK``'s (or the
    rank's) modulo the CUDA devices."""
    from ._rendezvous import share
    mpi_comm = None
    if n == 1 and is_mpi_available():   # a singleton MPI world serves host arrays
        from ._mpi import mpi
        mpi_comm = mpi().COMM_WORLD.Dup()
    group = ProcessGroup("WORLD", r, n, list(range(n)), engine_map, backend_str, op_timeout,
                         mpi_comm, r)
    if nccl_index is not None:
        index = nccl_index
    else:
        count = _cuda_count()
        if count == 0:
            raise DistError("init_process_group with NCCL needs a CUDA device; none found",
                            rank=r)
        index = int(os.environ.get("LOCAL_RANK", r)) % count
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


#: the point-to-point work of destroyed groups that had not completed (see
#: :func:`destroy_process_group`)
_ABANDONED: list[Any] = []


def destroy_process_group(group: GroupArg = None) -> None:
    """Destroy ``group`` (None: every group, then the world). Every rank must call it, in the
    same order. Re-raises an error kept from queued communication of the group.

    A destroyed group is forgotten as torch forgets it: :func:`get_rank`, :func:`get_backend`
    and the rank translations refuse it (``ValueError``), while :func:`get_world_size` still
    answers its size; destroying it again raises ``ValueError("Invalid process group
    specified")``. Without a default group, ``destroy_process_group()`` raises torch's
    ``AssertionError("Process group cannot be None")``, also a ``ValueError``.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> dist.destroy_process_group()
        >>> dist.is_initialized()
        False
    """
    if isinstance(group, _NonMember):
        return            # as torch's, before any default group is looked up
    if group is None and _S.world is None:
        # torch 2.14.1: AssertionError("Process group cannot be None"), a ValueError here too
        raise _AssertValueError("Process group cannot be None (Default process group has not "
                                "been initialized, please make sure to call "
                                "init_process_group.)")
    g = group if isinstance(group, ProcessGroup) else _group(group)
    assert g is not None
    if g.destroyed:       # torch: no longer in _world.pg_map
        raise ValueError("Invalid process group specified")
    targets = list(_S.groups) if group is None or g is _S.world else [g]
    kept: BaseException | None = None
    for pg in targets:
        try:
            pg.drain()
        except BaseException as exc:   # a kept stream error; re-raised after cleanup
            kept = kept or exc
        kept = kept or pg._error
        # point-to-point work the group holds: the completed is finished and forgotten; a
        # send or receive that never completed keeps its arrays for the process's life
        # (the engine may still read or write them)
        _ABANDONED.extend(pg._abandon_in_flight())
        for eng in pg._engines.values():
            try:
                eng.destroy()
            except Exception as exc:
                kept = kept or DistBackendError(f"destroying {pg._label!r}: {exc}")
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
        _S.nonmember_ranks = None
    if kept is not None:
        raise kept.with_traceback(None)   # (afresh: see ProcessGroup._raise_kept)
