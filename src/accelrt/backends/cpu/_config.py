"""Settings of the cpu backend: number of simulated devices, memory budget, stream mode.

Each setting comes from a constructor argument or, when that is ``None``, from an environment
variable:

=========================  ===========================================  ====================
variable                   form                                         default
=========================  ===========================================  ====================
``ACCELRT_CPU_DEVICES``    an integer >= 1                              ``1``
``ACCELRT_CPU_MEMORY``     bytes, or a number with a unit (``8GiB``)    physical memory
``ACCELRT_CPU_STREAMS``    ``sync`` or ``async``                        ``sync``
``ACCELRT_CPU_SHARED_``    ``1``/``0`` (``true``/``false``): allocate   ``0``
``MEMORY``                 from POSIX shared memory so arrays can be
                           shared with other processes
                           (:mod:`accelrt.multiprocessing`)
=========================  ===========================================  ====================

Example::

    >>> from accelrt.backends.cpu._config import parse_memory_size
    >>> parse_memory_size("1.5KiB"), parse_memory_size("2GB"), parse_memory_size("1000")
    (1536, 2000000000, 1000)
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..._backend_registry import MAX_DEVICE_COUNT
from ..._properties import derived_uuid
from ._memory import VM_GRANULARITY, vm_available
from ..._errors import type_shown

__all__ = [
    "CpuConfig",
    "budget_advice",
    "config_error",
    "device_properties",
    "format_memory_size",
    "human_size",
    "l2_cache_size",
    "parse_memory_size",
    "physical_memory",
    "processor_name",
    "resolve_config",
]

ENV_DEVICES = "ACCELRT_CPU_DEVICES"
ENV_MEMORY = "ACCELRT_CPU_MEMORY"
ENV_STREAMS = "ACCELRT_CPU_STREAMS"
ENV_SHARED = "ACCELRT_CPU_SHARED_MEMORY"

_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "k": 1 << 10, "kib": 1 << 10, "kb": 10**3,
    "m": 1 << 20, "mib": 1 << 20, "mb": 10**6,
    "g": 1 << 30, "gib": 1 << 30, "gb": 10**9,
    "t": 1 << 40, "tib": 1 << 40, "tb": 10**12,
}
_SIZE_RE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*", re.ASCII)
_DIGITS_RE = re.compile(r"[0-9]+", re.ASCII)
_MEMORY_FORM = ("a byte count or a number with a unit, e.g. 8GiB, 512MiB, 1.5GB or 1000000 "
                "(units: B, KB, MB, GB, TB = powers of 1000; KiB, MiB, GiB, TiB = powers of 1024)")


@dataclass(frozen=True, kw_only=True)
class CpuConfig:
    """Resolved settings of one :class:`~accelrt.backends.cpu.CpuBackend`.

    Attributes:
        num_devices: number of simulated devices (1 to 1024, the most accelrt supports per
            backend).
        memory_limit: memory budget of each device in bytes (>= 1).
        async_streams: True if stream work runs on worker threads.
        shared_memory: True if device memory comes from POSIX shared memory (shareable with
            other processes through :mod:`accelrt.multiprocessing`).

    Example::

        >>> from accelrt.backends.cpu._config import CpuConfig
        >>> CpuConfig(num_devices=2, memory_limit=1 << 20, async_streams=False).num_devices
        2
    """

    num_devices: int
    memory_limit: int
    async_streams: bool
    shared_memory: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.num_devices, int) or isinstance(self.num_devices, bool):
            raise TypeError(f"num_devices must be an int, got {type_shown(self.num_devices)}")
        if self.num_devices < 1:
            raise ValueError(f"num_devices={self.num_devices} must be at least 1")
        if self.num_devices > MAX_DEVICE_COUNT:
            # (the backend makes each device's state up front: a count beyond the registry's
            # limit would take minutes and all memory before get_backend refused it)
            raise ValueError(f"num_devices={self.num_devices} is more than the "
                             f"{MAX_DEVICE_COUNT} devices accelrt supports per backend")
        if not isinstance(self.memory_limit, int) or isinstance(self.memory_limit, bool):
            raise TypeError(f"memory_limit must be an int, got {type_shown(self.memory_limit)}")
        if self.memory_limit < 1:
            raise ValueError(f"memory_limit={self.memory_limit} must be at least 1 byte")
        if not isinstance(self.async_streams, bool):
            raise TypeError(
                f"async_streams must be a bool, got {type_shown(self.async_streams)}")
        if not isinstance(self.shared_memory, bool):
            raise TypeError(
                f"shared_memory must be a bool, got {type_shown(self.shared_memory)}")


def parse_memory_size(text: str) -> int:
    """Parse a memory size such as ``"8GiB"``, ``"512MiB"``, ``"1.5GB"`` or ``"1000000"``.

    Args:
        text: a byte count, or a number followed by a unit (case-insensitive): ``B``,
            ``KB``/``MB``/``GB``/``TB`` (powers of 1000), ``KiB``/``MiB``/``GiB``/``TiB`` or
            ``K``/``M``/``G``/``T`` (powers of 1024).

    Returns:
        The size in bytes, rounded down to an integer.

    Raises:
        TypeError: ``text`` is not a str.
        ValueError: the text is not a size, or it is smaller than one byte.

    Example::

        >>> from accelrt.backends.cpu._config import parse_memory_size
        >>> parse_memory_size("512MiB") == 512 * 2**20
        True
    """
    if not isinstance(text, str):
        raise TypeError(f"memory size must be a str, got {type_shown(text)}")
    match = _SIZE_RE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a memory size; use {_MEMORY_FORM}")
    number = match.group(1)
    if "." in number:
        whole, _, frac = number.partition(".")
        # exact decimal arithmetic: 1.5GB is exactly 1500000000 bytes
        scale: int = 10 ** len(frac)
        size = (int(whole or "0") * scale + int(frac or "0")) * _UNITS[unit] // scale
    else:
        size = int(number) * _UNITS[unit]
    if size < 1:
        raise ValueError(f"{text!r} is less than one byte; use {_MEMORY_FORM}")
    return size


def format_memory_size(n: int) -> str:
    """``n`` bytes as a size :func:`parse_memory_size` reads back: the largest binary unit that
    divides it, else whole MiB rounded up (for messages that suggest a value).

    Example::

        >>> from accelrt.backends.cpu._config import format_memory_size
        >>> format_memory_size(16 << 20), format_memory_size(3 << 30), format_memory_size(1000)
        ('16MiB', '3GiB', '1MiB')
    """
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{-(-n // (1 << 20))}MiB"


def human_size(n: int) -> str:
    """``n`` bytes for people, e.g. ``"23.4 GiB"``.

    Example::

        >>> from accelrt.backends.cpu._config import human_size
        >>> human_size(8 << 20), human_size(int(1.5 * 2**30)), human_size(100)
        ('8.0 MiB', '1.5 GiB', '100 B')
    """
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _known_physical_memory() -> int | None:
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        page_size = os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    if pages <= 0 or page_size <= 0:
        return None
    return int(pages) * int(page_size)


def _check_budget(mem: int, what: str) -> None:
    """Refuse a per-device budget larger than the machine's memory (when it is known)."""
    phys = _known_physical_memory()
    if phys is not None and mem > phys:
        raise ValueError(f"{what} asks for a budget of {human_size(mem)} per device, more than "
                         f"this machine's physical memory ({human_size(phys)}); set it to at "
                         f"most {format_memory_size(phys - phys % (1 << 20))}, or leave it "
                         "unset for the physical memory")


def physical_memory() -> int:
    """Physical memory of this machine in bytes (``os.sysconf``), or 16 GiB if unknown.

    Example::

        >>> from accelrt.backends.cpu._config import physical_memory
        >>> physical_memory() > 0
        True
    """
    phys = _known_physical_memory()
    return 16 << 30 if phys is None else phys


def l2_cache_size() -> int:
    """Bytes of L2 cache of the first core (Linux sysfs, else ``os.sysconf``), or 0 if
    unknown.

    Example::

        >>> from accelrt.backends.cpu._config import l2_cache_size
        >>> l2_cache_size() >= 0
        True
    """
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        entries = []
    for entry in entries:
        try:
            with open(f"{base}/{entry}/level", encoding="ascii") as f:
                level = f.read().strip()
            with open(f"{base}/{entry}/size", encoding="ascii") as f:
                size = f.read().strip()
        except OSError:
            continue
        if level == "2":
            try:
                return parse_memory_size(size)      # "512K"
            except ValueError:
                break
    try:
        return max(0, int(os.sysconf("SC_LEVEL2_CACHE_SIZE")))
    except (AttributeError, ValueError, OSError):
        return 0


_processor_name: str | None = None


def processor_name() -> str:
    """The processor model (``/proc/cpuinfo``'s ``model name``, else :mod:`platform`'s).

    Example::

        >>> from accelrt.backends.cpu._config import processor_name
        >>> isinstance(processor_name(), str) and processor_name() != ""
        True
    """
    global _processor_name
    if _processor_name is not None:
        return _processor_name
    name = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip().lower() in ("model name", "hardware", "cpu model"):
                    name = value.strip()
                    if name:
                        break
    except OSError:
        pass
    if not name:
        name = platform.processor() or platform.machine() or "cpu"
    _processor_name = name
    return name


#: /proc/cpuinfo flags (x86 ``flags``, Arm ``Features``) of bfloat16 arithmetic instructions.
_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
_bf16: bool | None = None


def cpu_has_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True if the processor has bfloat16 arithmetic instructions (x86 AVX512-BF16 or
    AMX-BF16, Arm BF16), per ``/proc/cpuinfo``; False where that cannot be read.

    Example::

        >>> from accelrt.backends.cpu._config import cpu_has_bf16
        >>> cpu_has_bf16("/nonexistent")
        False
    """
    global _bf16
    default = cpuinfo == "/proc/cpuinfo"
    if default and _bf16 is not None:
        return _bf16
    found = False
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip().lower() in ("flags", "features"):
                    found = not _BF16_FLAGS.isdisjoint(value.split())
                    break
    except OSError:
        found = False
    if default:
        _bf16 = found
    return found


def _env_devices(env: Mapping[str, str]) -> int:
    raw = env.get(ENV_DEVICES)
    if raw is None or raw.strip() == "":
        return 1
    text = raw.strip()
    # ASCII digits only: int() would also take '+4', '1_0' and '٤' (Arabic-Indic four)
    value = int(text) if _DIGITS_RE.fullmatch(text) and len(text) <= 18 else 0
    if not 1 <= value <= MAX_DEVICE_COUNT:
        raise ValueError(f"{ENV_DEVICES}={raw!r} is invalid; set it to an integer from 1 to "
                         f"{MAX_DEVICE_COUNT} (the number of simulated cpu devices), e.g. "
                         f"{ENV_DEVICES}=4")
    return value


def _env_memory(env: Mapping[str, str]) -> int:
    raw = env.get(ENV_MEMORY)
    if raw is None or raw.strip() == "":
        return physical_memory()
    try:
        mem = parse_memory_size(raw)
    except ValueError:
        raise ValueError(f"{ENV_MEMORY}={raw!r} is invalid; set it to {_MEMORY_FORM}") from None
    _check_budget(mem, f"{ENV_MEMORY}={raw!r}")
    return mem


def _env_streams(env: Mapping[str, str]) -> bool:
    raw = env.get(ENV_STREAMS)
    if raw is None or raw.strip() == "":
        return False
    value = raw.strip().lower()
    if value not in ("sync", "async"):
        raise ValueError(f"{ENV_STREAMS}={raw!r} is invalid; set it to 'sync' (stream work "
                         "runs inline) or 'async' (one worker thread per stream)")
    return value == "async"


def _env_shared(env: Mapping[str, str]) -> bool:
    raw = env.get(ENV_SHARED)
    if raw is None or raw.strip() == "":
        return False
    value = raw.strip().lower()
    if value not in ("0", "1", "true", "false"):
        raise ValueError(f"{ENV_SHARED}={raw!r} is invalid; set it to 1 (device memory comes "
                         "from shared memory, shareable with other processes) or 0")
    return value in ("1", "true")


def resolve_config(num_devices: int | None = None, memory_limit: int | str | None = None,
                   async_streams: bool | None = None,
                   env: Mapping[str, str] | None = None, *,
                   shared_memory: bool | None = None) -> CpuConfig:
    """Combine constructor arguments with the environment; arguments win.

    Args:
        num_devices: number of devices, or ``None`` for ``ACCELRT_CPU_DEVICES``.
        memory_limit: bytes (int) or a size string, or ``None`` for ``ACCELRT_CPU_MEMORY``.
        async_streams: stream mode, or ``None`` for ``ACCELRT_CPU_STREAMS``.
        env: the environment to read (default :data:`os.environ`).
        shared_memory: allocate from shared memory, or ``None`` for
            ``ACCELRT_CPU_SHARED_MEMORY``.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: an argument or an environment variable is malformed, or asks for a
            per-device budget larger than the machine's physical memory; the message names
            the variable and the expected form.

    Example::

        >>> from accelrt.backends.cpu._config import resolve_config
        >>> resolve_config(num_devices=3, memory_limit="1MiB", async_streams=True, env={})
        CpuConfig(num_devices=3, memory_limit=1048576, async_streams=True, shared_memory=False)
    """
    env = os.environ if env is None else env
    n = _env_devices(env) if num_devices is None else num_devices
    if memory_limit is None:
        mem: int = _env_memory(env)
    elif isinstance(memory_limit, str):
        mem = parse_memory_size(memory_limit)
        _check_budget(mem, f"memory_limit={memory_limit!r}")
    else:
        mem = memory_limit  # type checked by CpuConfig
        if isinstance(mem, int) and not isinstance(mem, bool):
            _check_budget(mem, f"memory_limit={memory_limit!r}")
    mode = _env_streams(env) if async_streams is None else async_streams
    shared = _env_shared(env) if shared_memory is None else shared_memory
    return CpuConfig(num_devices=n, memory_limit=mem, async_streams=mode, shared_memory=shared)


def config_error(env: Mapping[str, str] | None = None) -> str | None:
    """Return a sentence describing the first malformed cpu backend variable, or ``None``.

    Example::

        >>> from accelrt.backends.cpu._config import config_error
        >>> config_error({"ACCELRT_CPU_DEVICES": "0"}).startswith("ACCELRT_CPU_DEVICES='0'")
        True
        >>> config_error({}) is None
        True
    """
    try:
        resolve_config(env=env)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def device_properties(config: CpuConfig, name: str, index: int) -> dict[str, Any]:
    """``get_device_properties`` of device ``index`` of a cpu backend registered as ``name``
    with settings ``config`` (see :meth:`CpuBackend.get_device_properties
    <accelrt.backends.cpu.CpuBackend.get_device_properties>`).

    Example::

        >>> from accelrt.backends.cpu._config import device_properties, resolve_config
        >>> device_properties(resolve_config(memory_limit=1000), "cpu", 0)["total_memory"]
        1000
    """
    return {
        "name": processor_name(),
        "total_memory": config.memory_limit,
        "multi_processor_count": os.cpu_count() or 1,
        "uuid": str(derived_uuid(name, index)),   # this machine + backend + index
        "L2_cache_size": l2_cache_size(),
        "is_integrated": True,                       # device memory is host memory
        "warp_size": 1,
        "max_threads_per_multi_processor": 1,
        "async_streams": config.async_streams,
        "vm_supported": vm_available(),
        "vm_granularity": VM_GRANULARITY,
        "host_accessible": True,
        "has_bfloat16": cpu_has_bf16(),   # AVX512-BF16 / AMX-BF16 / Arm BF16 instructions
        "has_tf32": False,                # no CPU has TF32 matrix units
    }


def budget_advice(name: str, budget: int, source: str) -> str:
    """The sentence an out-of-memory error of a cpu backend ``name`` ends with: the budget,
    where it came from (``source``: ``"memory_limit=..."``, ``"env"`` or ``"default"``) and
    how to raise it.

    Example::

        >>> from accelrt.backends.cpu._config import budget_advice
        >>> budget_advice("cpu", 2**30, "memory_limit='1GiB'").split(";")[0]
        "The cpu backend's memory budget is 1.0 GiB per device (memory_limit='1GiB' given to CpuBackend)"
    """
    size = human_size(budget)
    bigger = format_memory_size(budget * 2)
    if source.startswith("memory_limit="):
        return (f"The {name} backend's memory budget is {size} per device "
                f"({source} given to CpuBackend); pass a larger memory_limit, "
                f"e.g. memory_limit={bigger!r}, for more.")
    if source == "env":
        where = f"{ENV_MEMORY}={os.environ.get(ENV_MEMORY, '').strip()}"
    else:
        where = f"{ENV_MEMORY} is not set, so the machine's physical memory"
    return (f"The {name} backend's memory budget is {size} per device ({where}); "
            f"set {ENV_MEMORY} to a larger size, e.g. {ENV_MEMORY}={bigger}, for more.")
