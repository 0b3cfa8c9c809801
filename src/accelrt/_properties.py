"""Device properties with attribute access, as PyTorch's ``_CudaDeviceProperties``.

:func:`accelrt.get_device_properties` returns a :class:`DeviceProperties`: a ``dict`` (so item
access, ``in``, iteration, ``json.dumps`` and ``==`` keep working) whose common keys are also
typed, read-only attributes. Every backend reports the same common attributes, with neutral
values where the notion does not apply (a CPU has no warps: ``warp_size`` is 1), and a stable
:attr:`~DeviceProperties.uuid`. A backend's extras (``async_streams`` on cpu, ``vendor`` on
opencl, ``clock_rate`` on cuda, ...) are items and, at run time, attributes too; type checkers
know only the common attributes, so typed code reads extras by item (``props["vendor"]``).

Example::

    >>> import accelrt as acc
    >>> props = acc.get_device_properties("cpu:0")
    >>> props.total_memory == props["total_memory"] > 0
    True
    >>> props.uuid == acc.get_device_properties("cpu:0").uuid
    True
"""

from __future__ import annotations

import functools
import socket
import uuid as _uuid
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar, overload

__all__ = ["DeviceProperties", "DeviceUUID", "derived_uuid", "host_id", "make_properties"]

_T = TypeVar("_T")


class DeviceUUID(str):
    """A device UUID: the canonical string (``"xxxxxxxx-xxxx-..."``), with :attr:`bytes`
    (16 bytes) like the ``uuid`` of PyTorch's device properties.

    Example::

        >>> from accelrt._properties import DeviceUUID
        >>> u = DeviceUUID("00010203-0405-0607-0809-0a0b0c0d0e0f")
        >>> u == "00010203-0405-0607-0809-0a0b0c0d0e0f", list(u.bytes[:3])
        (True, [0, 1, 2])
    """

    __slots__ = ()

    def __new__(cls, value: str | _uuid.UUID) -> DeviceUUID:
        return super().__new__(cls, str(_uuid.UUID(str(value))))

    @property
    def bytes(self) -> bytes:
        """The 16 bytes of the UUID (big-endian, as ``uuid.UUID.bytes``)."""
        return _uuid.UUID(self).bytes


#: Namespace of the UUIDs accelrt derives for devices that have none of their own.
_NAMESPACE = _uuid.UUID("5b0f2c1e-6a53-5a4e-9d4b-616363656c72")


@functools.lru_cache(maxsize=1)
def host_id() -> str:
    """A stable identity of this machine: ``/etc/machine-id`` (systemd, dbus), else the host
    name. The same in every process and across reboots.

    Example::

        >>> from accelrt._properties import host_id
        >>> host_id() == host_id() != ""
        True
    """
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text:
            return text
    return socket.gethostname() or "localhost"


def derived_uuid(*parts: object) -> DeviceUUID:
    """A UUID (version 5) derived from this machine's :func:`host_id` and ``parts``: the same
    value for the same device in every process, different for different devices.

    Example::

        >>> from accelrt._properties import derived_uuid
        >>> derived_uuid("cpu", 0) == derived_uuid("cpu", 0) != derived_uuid("cpu", 1)
        True
    """
    name = "/".join([host_id(), *(str(p) for p in parts)])
    return DeviceUUID(_uuid.uuid5(_NAMESPACE, name))


class _Key(Generic[_T]):
    """A read-only attribute that reads the dict item of the same name."""

    __slots__ = ("_key",)

    def __init__(self) -> None:
        self._key = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._key = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> _Key[_T]: ...
    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> _T: ...

    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        try:
            return obj[self._key]  # type: ignore[index]
        except KeyError:
            raise AttributeError(f"device properties have no {self._key!r}") from None

    def __set__(self, obj: object, value: NoReturn) -> NoReturn:   # read-only, also for mypy
        raise AttributeError("device properties are read-only attributes; copy them with "
                             "dict(props) to change values")


class DeviceProperties(dict[str, Any]):
    """Properties of one device: a dict of every property, with the common ones also as
    typed, read-only attributes (PyTorch's ``_CudaDeviceProperties`` names).

    Example::

        >>> import accelrt as acc
        >>> p = acc.get_device_properties("cpu:0")
        >>> p.name == p["name"], p.type, p.index, p.warp_size
        (True, 'cpu', 0, 1)
        >>> repr(p).startswith("DeviceProperties(name=")
        True
    """

    __slots__ = ()

    name: _Key[str] = _Key()
    """The device's name (the processor model on cpu)."""
    total_memory: _Key[int] = _Key()
    """Memory of the device in bytes (the budget of a simulated cpu device)."""
    multi_processor_count: _Key[int] = _Key()
    """Streaming multiprocessors (CUDA), compute units (OpenCL) or logical CPUs."""
    major: _Key[int] = _Key()
    """Compute capability, major (0 where there is none)."""
    minor: _Key[int] = _Key()
    """Compute capability, minor (0 where there is none)."""
    uuid: _Key[DeviceUUID] = _Key()
    """A UUID that stays the same for this device across calls and processes."""
    L2_cache_size: _Key[int] = _Key()
    """Bytes of L2 cache (0 if unknown)."""
    is_integrated: _Key[bool] = _Key()
    """True if the device shares memory with the host."""
    is_multi_gpu_board: _Key[bool] = _Key()
    """True if the device is on a board with several GPUs."""
    warp_size: _Key[int] = _Key()
    """Threads that execute in lock step (1 on a CPU)."""
    max_threads_per_multi_processor: _Key[int] = _Key()
    """Resident threads per multiprocessor / compute unit."""
    regs_per_multiprocessor: _Key[int] = _Key()
    """32-bit registers per multiprocessor (0 where not applicable)."""
    gcnArchName: _Key[str] = _Key()  # noqa: N815 - PyTorch's name
    """AMD's architecture name on ROCm; the device name elsewhere (as in PyTorch)."""
    max_threads_per_block: _Key[int] = _Key()
    """Threads per block / work-group (``max_threads_per_multi_processor`` where the backend
    reports no other limit)."""
    shared_memory_per_block: _Key[int] = _Key()
    """Bytes of shared (OpenCL: local) memory a block can use (0 where there is none)."""
    shared_memory_per_block_optin: _Key[int] = _Key()
    """Bytes of shared memory a block can opt in to (CUDA; 0 elsewhere)."""
    shared_memory_per_multiprocessor: _Key[int] = _Key()
    """Bytes of shared memory per multiprocessor (CUDA; 0 elsewhere)."""
    clock_rate: _Key[int] = _Key()
    """Peak clock of the cores in kHz, as PyTorch's (0 if unknown)."""
    memory_clock_rate: _Key[int] = _Key()
    """Peak memory clock in kHz (CUDA; 0 elsewhere)."""
    memory_bus_width: _Key[int] = _Key()
    """Width of the memory bus in bits (CUDA; 0 elsewhere)."""
    pci_bus_id: _Key[int] = _Key()
    """PCI bus of the device (CUDA; 0 elsewhere)."""
    pci_device_id: _Key[int] = _Key()
    """PCI device (slot) of the device (CUDA; 0 elsewhere)."""
    pci_domain_id: _Key[int] = _Key()
    """PCI domain of the device (CUDA; 0 elsewhere)."""
    type: _Key[str] = _Key()
    """The backend, e.g. ``"cpu"``."""
    index: _Key[int] = _Key()
    """The device index."""

    if not TYPE_CHECKING:      # hidden from type checkers: typos and assignments stay errors
        def __getattr__(self, key: str) -> Any:     # extras; typed code uses props["key"]
            try:
                return self[key]
            except KeyError:
                raise AttributeError(f"{type(self).__name__} has no attribute {key!r}; the "
                                     f"keys are {', '.join(self)}") from None

        def __setattr__(self, key: str, value: object) -> None:
            raise AttributeError("device properties are read-only attributes; copy them with "
                                 "dict(props) to change values")

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | {k for k in self if k.isidentifier()})

    def __repr__(self) -> str:
        mib = 1 << 20
        return (f"DeviceProperties(name={self.name!r}, major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // mib}MB, "
                f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid}, "
                f"L2_cache_size={self.L2_cache_size // mib}MB, type={self.type!r}, "
                f"index={self.index})")

    def __reduce__(self) -> tuple[Any, ...]:
        return (DeviceProperties, (dict(self),))


#: torch 2.14's ``_CudaDeviceProperties`` attributes that are 0 where a backend does not know
#: them (or the notion does not apply).
_ZERO_IF_UNKNOWN = ("shared_memory_per_block", "shared_memory_per_block_optin",
                    "shared_memory_per_multiprocessor", "clock_rate", "memory_clock_rate",
                    "memory_bus_width", "pci_bus_id", "pci_device_id", "pci_domain_id")


def make_properties(backend: str, index: int, raw: dict[str, Any]) -> DeviceProperties:
    """Build :class:`DeviceProperties` from a backend's property dict, filling in the common
    attributes the backend left out and deriving a stable UUID if it reports none.

    Example::

        >>> from accelrt._properties import make_properties
        >>> p = make_properties("toy", 1, {"name": "Toy", "total_memory": 1 << 20,
        ...                                "multi_processor_count": 1})
        >>> p.major, p.warp_size, p.gcnArchName, p.uuid == make_properties("toy", 1, p).uuid
        (0, 1, 'Toy', True)
    """
    props = dict(raw)
    name = str(props.get("name", backend))
    props.setdefault("name", name)
    props.setdefault("total_memory", 0)
    props.setdefault("multi_processor_count", 1)
    for key, default in (("major", 0), ("minor", 0), ("L2_cache_size", 0),
                         ("is_integrated", False), ("is_multi_gpu_board", False),
                         ("warp_size", 1), ("max_threads_per_multi_processor", 1),
                         ("regs_per_multiprocessor", 0), ("gcnArchName", name),
                         ("type", backend), ("index", index),
                         *((k, 0) for k in _ZERO_IF_UNKNOWN)):
        if props.get(key) is None:
            props[key] = default
    if props.get("max_threads_per_block") is None:
        props["max_threads_per_block"] = props["max_threads_per_multi_processor"]
    raw_uuid = props.get("uuid")
    try:
        props["uuid"] = DeviceUUID(raw_uuid) if raw_uuid else derived_uuid(backend, index, name)
    except (TypeError, ValueError):       # a backend's malformed UUID: derive one instead
        props["uuid"] = derived_uuid(backend, index, name, raw_uuid)
    return DeviceProperties(props)
