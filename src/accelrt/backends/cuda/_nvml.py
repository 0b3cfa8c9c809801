"""NVML device monitoring for ``accelrt.cuda`` (utilisation, temperature, power, clocks,
processes). None of it creates a CUDA context.

A CUDA device index is mapped to an NVML device through ``CUDA_VISIBLE_DEVICES`` exactly as
discovery did (ordinals and UUID prefixes), or, when only the driver answered discovery, by
the device's UUID.

Example::

    >>> from accelrt.backends.cuda import _nvml
    >>> _nvml.format_processes(0, [(1234, 256 * 1024 * 1024)])
    'GPU:0\\nprocess       1234 uses      256.000 MB GPU memory'
"""

from __future__ import annotations

import threading
from typing import Any

from ..._errors import BackendUnavailableError, DeviceError
from ..._fork import reinit_after_fork
from . import _cu, _discovery

__all__ = [
    "clock_rate",
    "format_processes",
    "handle",
    "list_gpu_processes",
    "memory_usage",
    "memory_used",
    "power_draw",
    "temperature",
    "utilization",
]

_lock = reinit_after_fork(threading.Lock())
_inited = False   # guarded by _lock; NVML stays initialised once monitoring is used


def _nvml() -> Any:
    global _inited
    nvml = _cu.load_nvml()
    if nvml is None:
        raise BackendUnavailableError(
            "NVML monitoring needs the nvidia-ml-py package (import pynvml); install it with: "
            f"{_cu.INSTALL_HINT}")
    with _lock:
        if not _inited:
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as exc:
                raise BackendUnavailableError(
                    f"NVML could not be initialised ({exc}); install the NVIDIA driver and "
                    "check nvidia-smi") from exc
            _inited = True
    return nvml


def _call(nvml: Any, what: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except nvml.NVMLError as exc:
        raise DeviceError(f"cuda: NVML {what} failed: {exc}") from exc


def handle(index: int, uuid: str | None = None) -> Any:
    """The NVML device handle of CUDA device ``index`` (``uuid``: its CUDA UUID, used when
    discovery did not go through NVML)."""
    nvml = _nvml()
    indices = _discovery.probe().nvml_indices
    if indices:
        if not 0 <= index < len(indices):
            raise IndexError(f"cuda device index {index} is out of range; {len(indices)} "
                             "device(s) are visible")
        return _call(nvml, "nvmlDeviceGetHandleByIndex", nvml.nvmlDeviceGetHandleByIndex,
                     indices[index])
    if uuid is None:
        raise DeviceError("cuda: cannot map the device to NVML without its UUID")
    return _call(nvml, "nvmlDeviceGetHandleByUUID", nvml.nvmlDeviceGetHandleByUUID,
                 f"GPU-{uuid}")


def utilization(h: Any) -> int:
    """Percent of the last sample period during which a kernel was running."""
    nvml = _nvml()
    return int(_call(nvml, "utilization", nvml.nvmlDeviceGetUtilizationRates, h).gpu)


def memory_usage(h: Any) -> int:
    """Percent of the last sample period during which device memory was read or written."""
    nvml = _nvml()
    return int(_call(nvml, "memory utilization", nvml.nvmlDeviceGetUtilizationRates, h).memory)


def memory_used(h: Any) -> int:
    """Bytes of device memory in use by every process (``nvidia-smi``'s "used")."""
    nvml = _nvml()
    return int(_call(nvml, "memory info", nvml.nvmlDeviceGetMemoryInfo, h).used)


def temperature(h: Any) -> int:
    """GPU core temperature in degrees Celsius."""
    nvml = _nvml()
    return int(_call(nvml, "temperature", nvml.nvmlDeviceGetTemperature, h,
                     nvml.NVML_TEMPERATURE_GPU))


def power_draw(h: Any) -> int:
    """Power draw in milliwatts."""
    nvml = _nvml()
    return int(_call(nvml, "power usage", nvml.nvmlDeviceGetPowerUsage, h))


def clock_rate(h: Any) -> int:
    """Current SM clock in MHz."""
    nvml = _nvml()
    return int(_call(nvml, "clock info", nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM))


def format_processes(index: int, procs: list[tuple[int, int | None]]) -> str:
    """``torch.cuda.list_gpu_processes``-style text for ``(pid, used_bytes)`` pairs."""
    lines = [f"GPU:{index}"]
    if not procs:
        lines.append("no processes are running")
    for pid, used in procs:
        mem = "unknown" if used is None else f"{used / (1024 * 1024):12.3f}"
        lines.append(f"process {pid:>10d} uses {mem} MB GPU memory")
    return "\n".join(lines)


def list_gpu_processes(index: int, h: Any) -> str:
    """Running compute processes of the device and their memory, one line each."""
    nvml = _nvml()
    procs = _call(nvml, "running processes", nvml.nvmlDeviceGetComputeRunningProcesses, h)
    pairs = []
    for p in procs:
        used = getattr(p, "usedGpuMemory", None)
        pairs.append((int(p.pid), None if used in (None, getattr(nvml, "NVML_VALUE_NOT_AVAILABLE",
                                                                   -1)) else int(used)))
    return format_processes(index, pairs)
