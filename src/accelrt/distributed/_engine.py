"""The engine interface, reduction ops and the engine registry.

An *engine* moves bytes between the ranks of one group for one device type: ``"mpi"``
(mpi4py, host-readable memory) and ``"nccl"`` (nccl4py, CUDA memory on a stream) ship with
accelrt; third parties add theirs with :func:`register_backend`. Engines see plain
:class:`Buf` descriptors (address, element count, dtype); argument checks, stream ordering,
staging through pinned host memory, timeouts and error mapping are the process group's job
(:mod:`accelrt.distributed._group`), the same for every engine.

Example::

    >>> from accelrt.distributed import Backend, ReduceOp
    >>> ReduceOp.SUM.name, "mpi" in Backend.backend_list
    ('SUM', True)
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, NamedTuple, NoReturn

import numpy as np

from .._stream import Stream
from ._errors import _AssertValueError, _TypeValueError
from .._errors import _WrongKindError, type_shown

__all__ = ["Backend", "Buf", "DirectPlan", "Engine", "EngineCapabilities", "EngineContext",
           "EngineRegistration", "PremulSum", "RedOp", "ReduceOp", "Request", "register_backend",
           "registered", "registration", "unregister_backend"]


class _ReduceOpType(enum.EnumMeta):
    """``ReduceOp``'s metaclass: a :class:`PremulSum` (``_make_nccl_premul_sum(f)``,
    ``ReduceOp.PREMUL_SUM(f)``) is an instance of ``ReduceOp``, as torch's is."""

    def __instancecheck__(cls, obj: object) -> bool:
        return type(obj) is PremulSum or type.__instancecheck__(cls, obj)

    def __call__(cls, value: Any, *args: Any, **kwargs: Any) -> Any:
        # a member's number only (torch's constructor takes no float or bool at all): Enum's
        # lookup by value took 1.0 and True as PRODUCT
        if not args and not kwargs and (isinstance(value, bool) or
                                        not isinstance(value, (int, cls))):
            raise _TypeValueError(f"{value!r} is not a valid ReduceOp: pass a member "
                                  "(ReduceOp.SUM) or its int number")
        return super().__call__(value, *args, **kwargs)


class ReduceOp(enum.Enum, metaclass=_ReduceOpType):
    """Reduction operations (``torch.distributed.ReduceOp``'s members).

    As torch's (pybind enum values), a member compares equal to its number (an ``int``,
    not a ``float``) and converts with ``int()`` and ``operator.index()``:
    ``ReduceOp.PREMUL_SUM == 8``; it hashes as that number too. It is not an ``int``: no
    arithmetic (``ReduceOp.MAX + 1`` raises ``TypeError``) and no order
    (``ReduceOp.SUM < ReduceOp.MAX`` raises ``TypeError``), as torch's.
    ``ReduceOp.RedOpType`` names the members (torch's members are ``RedOpType`` values:
    ``ReduceOp.RedOpType.MAX is ReduceOp.MAX``, ``ReduceOp.RedOpType(4)``,
    ``isinstance(op, ReduceOp.RedOpType)`` for a member, not a ``PREMUL_SUM`` with its factor).
    As torch's, a member is unequal to anything but a member or an ``int``
    (``ReduceOp.SUM == np.int64(0)`` is False) and takes no format spec.

    ``AVG`` is floating or complex only on MPI (a sum, then a division); ``BAND``, ``BOR`` and
    ``BXOR`` are integer and bool only; complex arrays take ``SUM``, ``PRODUCT`` and ``AVG``.
    ``PREMUL_SUM`` needs its factor: pass ``op=dist._make_nccl_premul_sum(factor)`` or, as in
    torch, ``op=ReduceOp.PREMUL_SUM(factor)`` (each rank multiplies its input by its factor,
    then the results are summed; floating dtypes); the result is an instance of ``ReduceOp``.

    Example::

        >>> from accelrt.distributed import ReduceOp
        >>> [op.name for op in ReduceOp]
        ['SUM', 'AVG', 'PRODUCT', 'MIN', 'MAX', 'BAND', 'BOR', 'BXOR', 'PREMUL_SUM']
        >>> ReduceOp.PREMUL_SUM == 8, int(ReduceOp.MAX), str(ReduceOp.MAX)
        (True, 4, 'ReduceOp.MAX')
    """

    # torch's numbers and order (c10d's RedOpType): AVG is 1, MAX 4
    SUM = 0
    AVG = 1
    PRODUCT = 2
    MIN = 3
    MAX = 4
    BAND = 5
    BOR = 6
    BXOR = 7
    PREMUL_SUM = 8

    def __repr__(self) -> str:
        return f"<ReduceOp.{self.name}>"

    # the int mixin would print the number on some Python versions: messages name the op
    def __str__(self) -> str:
        return f"ReduceOp.{self.name}"

    def __format__(self, spec: str) -> str:
        # torch's members format as object does: str() for an empty spec, else TypeError
        if spec:
            raise TypeError(f"unsupported format string passed to ReduceOp.__format__: "
                            f"{spec!r} (ReduceOp members take no format spec, as torch's; "
                            f"format str(op) or int(op))")
        return str(self)

    def __bool__(self) -> bool:
        # every member is true, as torch's (pybind objects): SUM is 0 but `if op:` holds
        return True

    def __call__(self, factor: Any) -> PremulSum:
        """``ReduceOp.PREMUL_SUM(factor)``: the op with its factor, as torch's (the same as
        ``_make_nccl_premul_sum(factor)``); the other members take no factor (torch's
        ``RuntimeError``).

        Example::

            >>> from accelrt.distributed import ReduceOp
            >>> op = ReduceOp.PREMUL_SUM(0.5)
            >>> op, isinstance(op, ReduceOp), op.factor
            (<ReduceOp.PREMUL_SUM factor=0.5>, True, 0.5)
        """
        if self is not ReduceOp.PREMUL_SUM:
            raise RuntimeError(f"Only PREMUL_SUM supports calling with a factor, got "
                               f"ReduceOp.{self.name}")
        from ._collectives import _make_nccl_premul_sum
        return _make_nccl_premul_sum(factor)

    @classmethod
    def _missing_(cls, value: object) -> NoReturn:
        # torch 2.14.1's ReduceOp("sum") is a TypeError (incompatible constructor arguments);
        # Enum's is a ValueError: both
        raise _TypeValueError(f"{value!r} is not a valid ReduceOp")

    # torch 2.15's members are not ints (pybind enum values with __int__ and __index__):
    # ReduceOp.MAX + 1 is a TypeError and 0.0 == ReduceOp.SUM is False from either side,
    # where the int mixin did the arithmetic and let float.__eq__ compare the numbers
    def __int__(self) -> int:
        return self._value_

    def __index__(self) -> int:
        return self._value_

    # members compare as their numbers (torch's pybind enum): hash them the same way
    def __hash__(self) -> int:
        return hash(self._value_)

    def __eq__(self, other: object) -> bool:
        # torch 2.15: a member equals its number (and a bool of it), not a float
        # (ReduceOp.SUM == 0.0 is False), and not a PREMUL_SUM with its factor from this
        # side (ReduceOp.PREMUL_SUM == op is False while op == ReduceOp.PREMUL_SUM is True)
        # Anything else is unequal from this side, as torch's answers (never NotImplemented):
        # ReduceOp.SUM == np.int64(0) and np.int64(0) in {ReduceOp.SUM} are False there
        # (numpy's own np.int64(0) == ReduceOp.SUM is True, in torch too)
        if self is other:
            return True
        return isinstance(other, int) and self._value_ == other

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    # torch 2.15's members have no order (pybind enums define no <), nor has Enum: sorted(),
    # min() and SUM < MAX raise Python's own TypeError, against an int too


class _RedOpTypeMeta(type):
    """``ReduceOp.RedOpType``'s metaclass: its instances are ``ReduceOp``'s members, not a
    :class:`PremulSum` (torch's ``ReduceOp.PREMUL_SUM(f)`` is a ``ReduceOp``, not a
    ``RedOpType``); calling it is ``ReduceOp(value)``."""

    def __instancecheck__(cls, obj: object) -> bool:
        return type(obj) is ReduceOp

    def __call__(cls, value: Any) -> ReduceOp:
        return ReduceOp(value)


class RedOpType(metaclass=_RedOpTypeMeta):
    """``ReduceOp.RedOpType`` (torch's enum of the members): ``ReduceOp.RedOpType.MAX is
    ReduceOp.MAX``, ``ReduceOp.RedOpType(4)`` is ``ReduceOp.MAX``, and ``isinstance(op,
    ReduceOp.RedOpType)`` holds for a member and not for ``ReduceOp.PREMUL_SUM(factor)``.

    Example::

        >>> from accelrt.distributed import ReduceOp
        >>> T = ReduceOp.RedOpType
        >>> T.MAX is ReduceOp.MAX, T(4) is ReduceOp.MAX, list(T.__members__)[:2]
        (True, True, ['SUM', 'AVG'])
        >>> isinstance(ReduceOp.SUM, T), isinstance(ReduceOp.PREMUL_SUM(0.5), T)
        (True, False)
    """

    __slots__ = ()
    __members__ = ReduceOp.__members__


for _m in ReduceOp:
    setattr(RedOpType, _m.name, _m)
del _m
RedOpType.__qualname__ = "ReduceOp.RedOpType"
type.__setattr__(ReduceOp, "RedOpType", RedOpType)


class PremulSum:
    """``ReduceOp.PREMUL_SUM`` with its factor (``torch.distributed._make_nccl_premul_sum``):
    every rank multiplies its input by ``factor`` (a number), then the inputs are summed.
    Engines receive it in place of a :class:`ReduceOp`; ``op`` is ``ReduceOp.PREMUL_SUM``.

    Example::

        >>> from accelrt.distributed._engine import PremulSum
        >>> PremulSum(0.5)
        <ReduceOp.PREMUL_SUM factor=0.5>
    """

    __slots__ = ("factor",)
    op = ReduceOp.PREMUL_SUM
    name = "PREMUL_SUM"

    def __init__(self, factor: float | int | complex) -> None:
        self.factor = factor

    def __repr__(self) -> str:
        return f"<ReduceOp.PREMUL_SUM factor={self.factor!r}>"

    # torch's ReduceOp compares (and hashes) the kind of op only, not the factor: a copy,
    # a pickled round trip and ReduceOp.PREMUL_SUM itself compare equal
    def __eq__(self, other: object) -> bool:
        # (anything else is unequal, never NotImplemented, as torch's)
        return type(other) is PremulSum or other is ReduceOp.PREMUL_SUM

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(ReduceOp.PREMUL_SUM)


#: what engines' reduction methods receive
RedOp = ReduceOp | PremulSum


class Buf(NamedTuple):
    """``count`` elements of ``dtype`` at address ``ptr`` (host memory for host engines,
    device memory of ``device`` for device engines)."""

    ptr: int
    count: int  # type: ignore[assignment]  # (shadows tuple.count, unused here)
    dtype: np.dtype[Any]
    device: int = -1

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize

    def at(self, offset: int, count: int) -> Buf:
        """The ``count`` elements starting ``offset`` elements in."""
        return Buf(self.ptr + offset * self.dtype.itemsize, count, self.dtype, self.device)


class Request:
    """An engine's handle on a non-blocking point-to-point operation."""

    def test(self) -> bool:
        """True once the operation completed (raises the engine's error if it failed)."""
        raise NotImplementedError

    def wait(self) -> int:
        """Block until completion; returns the peer's group rank."""
        raise NotImplementedError


@dataclass
class EngineContext:
    """What an engine factory gets: this rank and the group's size, the group's global ranks,
    the device type, the device index (``-1`` for host memory), and the group's mpi4py
    communicator when the job was launched through MPI (``None`` otherwise)."""

    rank: int
    size: int
    global_ranks: list[int]
    device_type: str
    device_index: int
    timeout: float
    mpi_comm: Any = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineCapabilities:
    """What an engine declares it can do (:meth:`Engine.capabilities`); the process group
    reads these, never probes for methods.

    - ``host_memory``: the engine gets host addresses (device memory is staged through
      pinned host memory unless :meth:`Engine.device_aware` says it reads it itself);
    - ``stream_ordered``: the engine enqueues on the ``stream`` passed to each call and
      returns before the data moved (its point-to-point operations are :meth:`Engine.send_on`
      and :meth:`Engine.recv_on`);
    - ``direct_plans``: :meth:`Engine.plan_all_reduce`, :meth:`Engine.plan_broadcast` and
      :meth:`Engine.plan_all_gather` may stand in for ``all_reduce``, ``broadcast`` and
      ``all_gather`` on host memory (the small-message path: planned once, run many times);
    - ``grouped_p2p``: ``batch_isend_irecv`` posts the engine's sends and receives inside
      :meth:`Engine.p2p_group` (NCCL's ``ncclGroupStart``/``ncclGroupEnd``: the operations of
      a batch are launched together, or ranks waiting on each other deadlock), then calls
      :meth:`Engine.p2p_group_settle` before it records the works' done events.

    Example::

        >>> from accelrt.distributed._engine import Engine
        >>> Engine().capabilities()
        EngineCapabilities(host_memory=True, stream_ordered=False, direct_plans=False, grouped_p2p=False)
    """

    host_memory: bool = True
    stream_ordered: bool = False
    direct_plans: bool = False
    grouped_p2p: bool = False


class DirectPlan(NamedTuple):
    """One engine call on host memory, planned once and run many times by the process group:
    ``call(*args)``, then ``post()`` when not None (e.g. ``AVG``'s division).

    Example::

        >>> from accelrt.distributed._engine import DirectPlan
        >>> out = []
        >>> DirectPlan(out.append, (1,), None).call(1); out
        [1]
    """

    call: Callable[..., object]
    args: tuple[object, ...]
    post: Callable[[], None] | None = None


def _no_direct_plans(engine: Engine, what: str) -> NoReturn:
    raise NotImplementedError(f"the {engine.name!r} engine declares no direct plans "
                              f"(capabilities().direct_plans is False): no {what}")


class Engine:
    """Base class of engines. Ranks are group ranks. Each operation is called by every rank of
    the group in the same order (the group guarantees it).

    Every operation the process group may call is declared here; what an engine supports is
    declared by :meth:`capabilities` (from the class attributes ``host_memory`` and
    ``stream_ordered`` by default). ``host_memory`` engines get host addresses (device memory
    is staged through pinned host memory unless ``device_aware`` says the engine reads device
    memory itself); ``stream_ordered`` engines enqueue on the ``stream`` passed to each call
    (an :class:`accelrt.Stream`) and return before the data moved.
    """

    name = "engine"
    host_memory = True
    stream_ordered = False
    #: capabilities().grouped_p2p: batch_isend_irecv posts in :meth:`p2p_group`
    grouped_p2p = False
    #: the largest tag :meth:`isend`/:meth:`irecv` take (torch's bound: a C ``int``)
    max_tag = 2**31 - 1

    def capabilities(self) -> EngineCapabilities:
        """What this engine supports (see :class:`EngineCapabilities`); constant for the
        engine's life (the process group reads it once)."""
        return EngineCapabilities(self.host_memory, self.stream_ordered, False, self.grouped_p2p)

    # batch_isend_irecv's group (capabilities().grouped_p2p)
    def p2p_group(self) -> AbstractContextManager[object]:
        """The context ``batch_isend_irecv`` posts a batch's sends and receives in, once per
        engine class (``grouped_p2p`` engines; the default does nothing)."""
        return contextlib.nullcontext()

    def p2p_group_settle(self, timeout: float, what: str) -> None:
        """After :meth:`p2p_group` ended: wait (at most ``timeout`` seconds) until the
        batch's operations reached their streams, so done events recorded next cover them
        (``grouped_p2p`` engines; the default has nothing to wait for)."""

    # the direct plans (capabilities().direct_plans): host memory, in-place where so noted
    def plan_all_reduce(self, ptr: int, nbytes: int, dtype: np.dtype[Any],
                        op: ReduceOp) -> DirectPlan:
        """An in-place all-reduce of ``nbytes`` of host memory at ``ptr``."""
        _no_direct_plans(self, "plan_all_reduce")

    def plan_broadcast(self, ptr: int, nbytes: int, root: int) -> DirectPlan:
        """A broadcast of ``nbytes`` of host memory at ``ptr`` from group rank ``root``."""
        _no_direct_plans(self, "plan_broadcast")

    def plan_all_gather(self, sptr: int, rptr: int, nbytes: int) -> DirectPlan:
        """An all-gather of ``nbytes`` per rank from ``sptr`` into ``rptr`` (in place where
        ``sptr`` is this rank's block of ``rptr``)."""
        _no_direct_plans(self, "plan_all_gather")

    def device_aware(self, device_type: str) -> bool:
        """True if this engine may be given device addresses of ``device_type`` directly."""
        return False

    def supports(self, op: ReduceOp, dtype: np.dtype[Any]) -> str | None:
        """None if ``op`` works on ``dtype``, else the reason (``PREMUL_SUM`` stands for every
        :class:`PremulSum`; reductions receive the :class:`PremulSum` itself)."""
        return None

    def all_reduce(self, send: Buf | None, recv: Buf, op: RedOp, stream: Stream | None) -> None:
        raise NotImplementedError

    def broadcast(self, buf: Buf, root: int, stream: Stream | None) -> None:
        raise NotImplementedError

    def reduce(self, buf: Buf, op: RedOp, root: int, stream: Stream | None) -> None:
        raise NotImplementedError

    def all_gather(self, send: Buf, recv: Buf, stream: Stream | None) -> None:
        raise NotImplementedError

    def reduce_scatter(self, send: Buf, recv: Buf, op: RedOp, stream: Stream | None) -> None:
        raise NotImplementedError

    def gather(self, send: Buf, recv: Buf | None, root: int, stream: Stream | None) -> None:
        raise NotImplementedError

    def scatter(self, send: Buf | None, recv: Buf, root: int, stream: Stream | None) -> None:
        raise NotImplementedError

    def all_to_all(self, send: Buf, recv: Buf, send_counts: Sequence[int],
                   recv_counts: Sequence[int], stream: Stream | None) -> None:
        raise NotImplementedError

    def barrier(self) -> None:
        raise NotImplementedError

    def isend(self, buf: Buf, peer: int, tag: int) -> Request:
        raise NotImplementedError

    def irecv(self, buf: Buf, peer: int | None, tag: int) -> Request:
        raise NotImplementedError

    def send_on(self, buf: Buf, peer: int, stream: Stream | None) -> None:
        """A send enqueued on ``stream`` (``stream_ordered`` engines' point-to-point)."""
        raise NotImplementedError

    def recv_on(self, buf: Buf, peer: int, stream: Stream | None) -> None:
        """A receive enqueued on ``stream`` (``stream_ordered`` engines' point-to-point)."""
        raise NotImplementedError

    def split(self, color: int | None, key: int, ctx: EngineContext | None) -> Engine | None:
        """Collective over this engine's group: the sub-engine of the ranks with ``color``
        (``None``: this rank is not a member)."""
        raise NotImplementedError

    def async_error(self) -> BaseException | None:
        """An error of queued work, if the engine keeps any (NCCL)."""
        return None

    def abort(self) -> None:
        """End the job (or at least this communicator) after an unrecoverable error."""

    def destroy(self) -> None:
        """Free the engine's resources (called by every rank)."""


EngineFactory = Callable[[EngineContext], Engine]


@dataclass(frozen=True)
class EngineRegistration:
    """One entry of the engine registry (:func:`register_backend`, :func:`registration`)."""

    factory: EngineFactory
    devices: tuple[str, ...]
    #: one engine per device of a device type (its communicator is bound to one device, as
    #: NCCL's is), not one engine for all the devices of the type
    per_device: bool = False
    #: raises if the engine cannot start in this process at all (a missing package, no
    #: device): ``init_process_group``/``new_group`` call it for every engine the backend
    #: string names, so such a backend fails at init, as torch's does, not at first use
    require: Callable[[], None] | None = None
    #: ``is_<name>_available()``: the engine's package is importable (torch's meaning: built
    #: in, whether or not a device is present); None: always
    available: Callable[[], bool] | None = None


def cuda_memory(device_type: str) -> bool:
    """True if arrays of the backend ``device_type`` live in CUDA device memory (its
    capability ``cuda_array_interface``): the memory NCCL and a CUDA-aware MPI read."""
    from .._backend import get_backend
    try:
        return get_backend(device_type).capabilities(0).cuda_array_interface
    except Exception:   # not registered or not available: no arrays of it either
        return False


def _mpi_factory(ctx: EngineContext) -> Engine:
    from ._mpi import MpiEngine
    return MpiEngine.create(ctx)


def _nccl_factory(ctx: EngineContext) -> Engine:
    from ._nccl import NcclEngine
    return NcclEngine.create(ctx)


def _mpi_available() -> bool:
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


def _mpi_at_exit() -> None:
    """The MPI engine's interpreter exit (:func:`._mpi.at_exit`), if it was imported:
    registered when ``accelrt.distributed`` is imported (without importing the engine), so it
    runs after the exit hooks a program registers later, which may still use MPI (as they
    could before mpi4py's own finalization)."""
    mod = sys.modules.get(f"{__package__}._mpi")
    if mod is not None:
        mod.at_exit()


atexit.register(_mpi_at_exit)


def _nccl_available() -> bool:
    from ._nccl import nccl_available
    return nccl_available()


def cuda_device_count() -> int:
    """CUDA devices visible to this process (0 without the cuda backend or a driver)."""
    from .. import backends
    try:
        return int(backends.get_backend("cuda").device_count())
    except Exception:   # no driver, no cuda-bindings: no devices
        return 0


def _nccl_require() -> None:
    """What ProcessGroupNCCL's construction checks at torch's init: NCCL is there (torch:
    "Distributed package doesn't have NCCL built in") and so is a GPU."""
    from .._errors import AcceleratorValueError
    from ._errors import DistBackendError
    if not _nccl_available():
        raise DistBackendError(
            "Distributed package doesn't have NCCL built in: the 'nccl' engine needs nccl4py "
            "built for your CUDA major version: pip install 'accelrt[nccl-cu12]' or "
            "'accelrt[nccl-cu13]'; for host arrays use backend='mpi' (or 'gloo', the same "
            "engine)")
    if cuda_device_count() == 0:
        raise AcceleratorValueError(
            "ProcessGroupNCCL is only supported with GPUs, no GPUs found! The 'nccl' engine "
            "serves CUDA arrays only: on a machine without a CUDA GPU pass backend='mpi' (or "
            "'gloo', the same host engine), or 'cpu:mpi' for cpu arrays")


#: the engine registry, name -> registration (the built-ins below, then
#: :func:`register_backend`'s); ``Backend._registry`` is this dict
_ENGINES: dict[str, EngineRegistration] = {
    "mpi": EngineRegistration(_mpi_factory, ("cpu", "opencl", "cuda"),
                              available=_mpi_available),
    "nccl": EngineRegistration(_nccl_factory, ("cuda",), per_device=True,
                               require=_nccl_require, available=_nccl_available),
    # torch's CPU backend: here the host engine, MPI (accelrt has no gloo of its own;
    # docs/distributed.md "gloo"), serving what MPI serves, as torch's gloo serves cpu and
    # (copied through host memory) cuda tensors
    "gloo": EngineRegistration(_mpi_factory, ("cpu", "opencl", "cuda"),
                               available=_mpi_available),
}
_BUILTIN = frozenset(_ENGINES)


def registered() -> list[str]:
    """The registered engine names, built-ins first (``Backend.backend_list``'s order).

    Example::

        >>> from accelrt.distributed._engine import registered
        >>> registered()[:3]
        ['mpi', 'nccl', 'gloo']
    """
    return list(_ENGINES)


def registration(name: str) -> EngineRegistration | None:
    """The registry entry of engine ``name`` (lower case), or None.

    Example::

        >>> from accelrt.distributed._engine import registration
        >>> registration("nccl").per_device, registration("nope")
        (True, None)
    """
    return _ENGINES.get(name)


class Backend(str):
    """Engine names (``torch.distributed.Backend``): ``Backend("MPI") == "mpi"``.

    ``Backend.register_backend(name, func, extended_api=False, devices=None, *,
    per_device=False)`` adds an engine: ``func(ctx: EngineContext) -> Engine``; ``devices``
    lists the device types it serves (``"cpu"``, ``"cuda"``, ``"opencl"``; all by default);
    ``per_device=True`` makes one engine per device (``ctx.index``) instead of one per device
    type, for an engine whose communicator is bound to one device (as NCCL's is).

    ``"gloo"`` (torch's CPU backend) names the MPI engine here: ``backend="gloo"`` runs on
    MPI and ``get_backend()`` answers ``"gloo"``.

    Example::

        >>> from accelrt.distributed import Backend
        >>> Backend("NCCL"), Backend.default_device_backend_map["cpu"], Backend.GLOO
        ('nccl', 'mpi', 'gloo')
    """

    MPI = "mpi"
    NCCL = "nccl"
    GLOO = "gloo"
    UNDEFINED = "undefined"
    #: torch's view of the registry: the names, and ``Backend.<NAME>`` for each (kept in step
    #: by :func:`register_backend` and :func:`unregister_backend`)
    backend_list: list[str] = registered()
    default_device_backend_map: dict[str, str] = {"cpu": "mpi", "opencl": "mpi", "cuda": "nccl"}
    #: the device types each engine serves (torch's ``Backend.backend_capability``)
    backend_capability: dict[str, list[str]] = {name: list(reg.devices)
                                                for name, reg in _ENGINES.items()}
    _registry = _ENGINES

    def __new__(cls, name: str) -> Backend:
        if not isinstance(name, str):
            # torch 2.15: ValueError, these words (Backend(None), Backend(3), Backend(["gloo"]))
            raise ValueError("Backend constructor parameter must be string-ish; got "
                             f"{type(name).__name__} {name!r} (pass the backend's name, "
                             "e.g. 'gloo')")
        low = name.lower()
        if ":" in low:
            # torch 2.15: a "device:backend" string is lower-cased as it is
            # (Backend("cpu:gloo,cuda:NCCL") == "cpu:gloo,cuda:nccl"); its engines are checked
            # here as a single name is (parse_backend's ValueError)
            parse_backend(low)
            return super().__new__(cls, low)
        if low not in _ENGINES and low != "undefined":
            raise _AssertValueError(f"Invalid backend: '{name}'; known: "
                             f"{', '.join(sorted(_ENGINES))}")
        return super().__new__(cls, low)

    @classmethod
    def register_backend(cls, name: str, func: EngineFactory, extended_api: bool = False,
                         devices: str | Sequence[str] | None = None, *,
                         per_device: bool = False) -> None:
        """Register a third-party engine (see the class docstring)."""
        register_backend(name, func, devices=devices, per_device=per_device)

    @staticmethod
    def _unregister(name: str) -> None:
        unregister_backend(name)


def register_backend(name: str, func: EngineFactory,
                     devices: str | Sequence[str] | None = None,
                     per_device: bool = False) -> None:
    """Register engine ``name`` (lower-cased), made by ``func(ctx)`` for ``devices``: one
    engine per device type, or, with ``per_device=True``, one per device (``ctx.index``), for
    an engine whose communicator is bound to one device (as NCCL's is).

    ``devices`` given, the engine becomes the default engine of those of its device types
    that have none yet (``Backend.default_device_backend_map``), as in torch.

    Raises:
        TypeError: ``name`` is not a str (also an ``AttributeError``, torch 2.15's class:
            its ``name.lower()`` fails), or ``func`` is not callable.
        ValueError: ``name`` is already registered.

    Example::

        >>> from accelrt.distributed import register_backend
        >>> from accelrt.distributed._mpi import MpiEngine
        >>> register_backend("mympi", MpiEngine.create, devices=["cpu"])
        >>> from accelrt.distributed import Backend
        >>> Backend("MyMPI")
        'mympi'
        >>> Backend._unregister("mympi")
    """
    low = _engine_name(name, "register_backend")    # first, as torch's name.lower()
    if not callable(func):
        raise TypeError(f"register_backend() needs a callable factory, got "
                        f"{type_shown(func)}")
    if low in _ENGINES or low == "undefined":
        raise ValueError(f"backend {name!r} is already registered")
    # (None: every device type; an empty list serves none, as torch's)
    devs = ((devices,) if isinstance(devices, str) else
            ("cpu", "opencl", "cuda") if devices is None else tuple(devices))
    _ENGINES[low] = EngineRegistration(func, devs, bool(per_device))
    Backend.backend_list.append(low)
    Backend.backend_capability[low] = list(devs)
    setattr(Backend, low.upper(), low)   # torch's Backend.<NAME>
    if devices is not None:
        # torch 2.15: the engine becomes the default of the device types it names that have
        # none yet (get_default_backend_for_device, init_process_group(backend=None))
        for dev in devs:
            Backend.default_device_backend_map.setdefault(dev, low)


def _engine_name(name: object, fn: str) -> str:
    """``name`` lower-cased, or torch's ``AttributeError`` (its ``name.lower()``) as a
    ``TypeError`` naming the argument."""
    if not isinstance(name, str):
        raise _WrongKindError(f"{fn}(): name must be a str (the engine's name, such as "
                              f"'myengine'), got {type_shown(name)}")
    return name.lower()


def unregister_backend(name: str) -> None:
    """Remove engine ``name`` added by :func:`register_backend` (``Backend._unregister``).

    ``name`` is lower-cased first, as :func:`register_backend` stores it (``"MyEngine"``
    unregisters what ``register_backend("MyEngine", ...)`` registered).

    Raises:
        TypeError: ``name`` is not a str (also an ``AttributeError``, as
            :func:`register_backend`'s).
        ValueError: ``name`` is a built-in engine.
    """
    name = _engine_name(name, "unregister_backend")
    if name in _BUILTIN:
        raise ValueError("the built-in engines cannot be unregistered")
    _ENGINES.pop(name, None)
    if name in Backend.backend_list:
        Backend.backend_list.remove(name)
    Backend.backend_capability.pop(name, None)
    for dev in [d for d, n in Backend.default_device_backend_map.items() if n == name]:
        del Backend.default_device_backend_map[dev]
    if getattr(Backend, name.upper(), None) == name:
        delattr(Backend, name.upper())


def require_engines(engine_map: dict[str, str]) -> None:
    """Raise the first reason an engine of ``engine_map`` cannot start in this process (each
    engine's ``require``; the NCCL engine: nccl4py and a GPU)."""
    for name in dict.fromkeys(engine_map.values()):
        reg = _ENGINES.get(name)
        if reg is not None and reg.require is not None:
            reg.require()


def parse_backend(spec: str | None) -> dict[str, str]:
    """``"cpu:mpi,cuda:nccl"`` or ``"mpi"`` (every device type the engine serves) or None
    (the defaults) -> ``{device_type: engine}``."""
    out = dict(Backend.default_device_backend_map)
    if spec is None:
        return out
    if not isinstance(spec, str):
        raise TypeError(f"backend must be a string like 'mpi' or 'cpu:mpi,cuda:nccl', got "
                        f"{type_shown(spec)}")
    text = spec.strip().lower()
    if ":" not in text:
        name = str(Backend(text))
        devs = _ENGINES[name].devices
        return dict.fromkeys(devs, name)
    result: dict[str, str] = {}
    for part in text.split(","):
        pieces = [p.strip() for p in part.split(":")]
        if len(pieces) != 2 or not all(pieces):
            # (torch 2.15's BackendConfig: "Invalid device:backend pairing: ...")
            raise ValueError(f"Invalid device:backend pairing: {part.strip()!r}. The custom "
                             f"backend string argument is invalid: {spec!r}: expected "
                             "'device:engine' items separated by commas, e.g. "
                             "'cpu:mpi,cuda:nccl'")
        dev, name = pieces
        eng = str(Backend(name))
        if dev not in _ENGINES[eng].devices:
            raise ValueError(f"engine {eng!r} does not serve {dev!r} devices (it serves "
                             f"{', '.join(_ENGINES[eng].devices)})")
        if dev in result:
            # torch 2.15's BackendConfig refuses this (the last one won here)
            raise ValueError(f"Duplicate device type {dev} in backend string: {eng}. The "
                             f"custom backend string argument is invalid: {spec!r}: name each "
                             "device type once")
        result[dev] = eng
    return result
