"""Side-effect-free CUDA discovery: is the backend usable, and how many devices are visible.

Rules (see ``docs/cuda.md``):

1. ``cuda-bindings`` must be importable, else "not installed".
2. NVML (``pynvml``) is asked first: it never creates a CUDA context and never makes ``fork``
   unsafe. It gives the device count, each device's UUID (to map ``CUDA_VISIBLE_DEVICES``
   the way PyTorch does) and the CUDA version the driver supports.
3. Only when NVML is missing (``nvidia-ml-py`` not installed or ``libnvidia-ml`` not loadable)
   or cannot answer (MIG UUIDs in ``CUDA_VISIBLE_DEVICES``), the driver is asked with
   ``cuInit`` + ``cuDeviceGetCount``. That initialises the driver but creates no context.
4. A driver older than the major CUDA version the bindings were built for is reported as such.

Example::

    >>> from accelrt.backends.cuda import _discovery
    >>> _discovery.parse_visible_devices("1,0,GPU-x")
    [1, 0]
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..._fork import reinit_after_fork
from . import _cu

__all__ = [
    "Probe",
    "bindings_cuda_version",
    "parse_visible_devices",
    "driver_initialised",
    "probe",
    "reset",
]

ENV = "CUDA_VISIBLE_DEVICES"

NOT_INSTALLED = ("the NVIDIA CUDA Python bindings (cuda-bindings) are not installed; install "
                 f"them with: {_cu.INSTALL_HINT}")
NO_DRIVER = ("no NVIDIA driver was found ({what} could not be loaded); install the NVIDIA "
             "driver for your GPU (check with nvidia-smi), or use another backend such as 'cpu'")
DRIVER_NOT_LOADED = ("the NVIDIA driver is installed but its kernel module is not loaded; load "
                     "it (e.g. reboot or modprobe nvidia) and check with nvidia-smi")
TOO_OLD = ("the NVIDIA driver supports CUDA {driver} but the installed cuda-bindings {bindings} "
           "needs a CUDA {need}.x driver; upgrade the NVIDIA driver, or install bindings that "
           "match it: pip install \"cuda-bindings=={have}.*\"")
NO_GPU = ("no NVIDIA GPU is visible to this process ({detail}); check nvidia-smi and the "
          "CUDA_VISIBLE_DEVICES environment variable")
DRIVER_FAILED = ("the CUDA driver failed to initialise: {name}{desc}; check nvidia-smi and "
                 "dmesg, or use another backend such as 'cpu'")


@dataclass(frozen=True)
class Probe:
    """What discovery found.

    Attributes:
        count: visible CUDA devices (0 when unusable).
        reason: why the backend is unusable, or ``None``.
        source: ``"nvml"``, ``"driver"`` or ``"none"``: who answered.
        driver_version: the CUDA version the driver supports (e.g. ``12040``), if known.
        nvml_indices: NVML index of each visible CUDA ordinal (empty when NVML did not answer).
    """

    count: int
    reason: str | None
    source: str
    driver_version: int | None = None
    nvml_indices: tuple[int, ...] = ()


def _fmt_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def bindings_cuda_version(drv: ModuleType) -> int:
    """The CUDA version ``cuda.bindings`` was generated for, e.g. ``13000``."""
    return int(getattr(drv, "CUDA_VERSION", 0))


def _bindings_version_str() -> str:
    try:
        from importlib.metadata import version
        return version("cuda-bindings")
    except Exception:  # noqa: BLE001 - metadata is only for the message
        return "(unknown version)"


def _too_old(drv: ModuleType, driver_version: int) -> str | None:
    need = bindings_cuda_version(drv) // 1000
    if need and driver_version // 1000 < need:
        return TOO_OLD.format(driver=_fmt_version(driver_version),
                              bindings=_bindings_version_str(), need=need,
                              have=max(driver_version // 1000, 11))
    return None


def _leading_int(tok: str) -> int | None:
    """The number ``tok`` starts with (an optional sign, then ASCII digits, as ``strtol``
    reads it), or ``None`` when it starts with none."""
    sign = tok[:1] if tok[:1] in ("+", "-") else ""
    digits = ""
    for ch in tok[len(sign):]:
        if not "0" <= ch <= "9":      # ASCII only, as the CUDA runtime
            break
        digits += ch
    return int(sign + digits) if digits else None


def parse_visible_devices(value: str) -> list[int | str]:
    """Parse ``CUDA_VISIBLE_DEVICES`` as PyTorch's ``torch.cuda._parse_visible_devices`` does.

    A value that starts with ``GPU-`` or ``MIG-`` is a list of UUID prefixes, taken as they
    are written (a space after a comma makes the next entry no UUID) up to the first entry
    without that prefix. Anything else is a list of device ordinals: each entry, stripped, is
    read as ``strtol`` reads it (a sign, then the digits it starts with: ``"1gpu"`` is 1,
    ``"+3"`` is 3, ``"-0"`` is 0), up to the first entry that is negative or starts with no
    number. A repeated entry makes the whole list empty, since CUDA then exposes no device.

    Args:
        value: the variable's value.

    Returns:
        Ordinals (``int``) and UUID prefixes (``str``), in order.

    Example::

        >>> from accelrt.backends.cuda._discovery import parse_visible_devices
        >>> parse_visible_devices("2, +3, -0 ,-1,1")
        [2, 3, 0]
        >>> parse_visible_devices("0,0")
        []
        >>> parse_visible_devices("GPU-ab12,GPU-cd,1")
        ['GPU-ab12', 'GPU-cd']
        >>> parse_visible_devices("GPU-ab12, GPU-cd")
        ['GPU-ab12']
    """
    for prefix in ("GPU-", "MIG-"):
        if value.startswith(prefix):
            uuids: list[int | str] = []
            for tok in value.split(","):
                if not tok.startswith(prefix):
                    break
                if tok in uuids:
                    return []
                uuids.append(tok)
            return uuids
    out: list[int | str] = []
    for tok in value.split(","):
        n = _leading_int(tok.strip())
        if n is None or n < 0:
            break
        if n in out:
            return []
        out.append(n)
    return out


def _map_visible(entries: list[int | str], uuids: list[str]) -> list[int] | None:
    """NVML indices of the visible devices, or ``None`` if only the driver can tell (MIG)."""
    result: list[int] = []
    for item in entries:
        if isinstance(item, int):
            if item >= len(uuids):
                break
            idx = item
        else:
            if item.startswith("MIG-"):
                return None
            matches = [i for i, u in enumerate(uuids) if u.startswith(item)]
            if len(matches) != 1:
                break
            idx = matches[0]
        if idx in result:
            return []
        result.append(idx)
    return result


def _nvml_str(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _probe_nvml(drv: ModuleType, nvml: ModuleType) -> Probe | None:
    """Ask NVML; ``None`` means "NVML cannot answer, ask the driver"."""
    err_cls = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except err_cls as exc:
        if getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", -1):
            return Probe(0, DRIVER_NOT_LOADED, "nvml")
        return None   # library not found, no permission, ...: let the driver decide
    try:
        try:
            version = int(nvml.nvmlSystemGetCudaDriverVersion())
        except err_cls:
            version = 0
        if version:
            reason = _too_old(drv, version)
            if reason:
                return Probe(0, reason, "nvml", version)
        total = int(nvml.nvmlDeviceGetCount())
        env = os.environ.get(ENV)
        if env is None:
            indices = list(range(total))
        else:
            entries = parse_visible_devices(env)
            uuids: list[str] = []
            if any(isinstance(e, str) for e in entries):
                uuids = [_nvml_str(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)))
                         for i in range(total)]
            else:
                uuids = [""] * total
            mapped = _map_visible(entries, uuids)
            if mapped is None:
                return None
            indices = mapped
        if not indices:
            detail = (f"NVML reports {total} GPU(s), none of them selected by "
                      f"{ENV}={env!r}" if env is not None and total else "NVML reports 0 GPUs")
            return Probe(0, NO_GPU.format(detail=detail), "nvml", version or None)
        return Probe(len(indices), None, "nvml", version or None, tuple(indices))
    except err_cls:
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutdown failures change nothing here
            pass


def _probe_driver(drv: ModuleType, nvml_missing: str) -> Probe:
    """Ask the driver: ``cuInit`` and ``cuDeviceGetCount`` (no context is created)."""
    try:
        (err,) = drv.cuInit(0)
    except Exception:  # noqa: BLE001 - libcuda could not be loaded (the type varies by version)
        return Probe(0, NO_DRIVER.format(what=nvml_missing + "libcuda"), "none")
    res = drv.CUresult
    if err == res.CUDA_ERROR_NO_DEVICE:
        env = os.environ.get(ENV)
        detail = "the driver reports 0 devices" + (f" with {ENV}={env!r}" if env is not None
                                                  else "")
        return Probe(0, NO_GPU.format(detail=detail), "driver")
    if err != res.CUDA_SUCCESS:
        version = 0
        try:
            e2, version = drv.cuDriverGetVersion()
            version = int(version) if int(e2) == 0 else 0
        except Exception:  # noqa: BLE001
            version = 0
        # The driver API has no "insufficient driver" result (that is the runtime's
        # cudaErrorInsufficientDriver): any failure of cuInit with a driver older than the
        # bindings' CUDA major version is reported as that, the likelier cause.
        if version:
            reason = _too_old(drv, version)
            if reason:
                return Probe(0, reason, "driver", version)
        name, desc = _cu.error_text(err, drv)
        return Probe(0, DRIVER_FAILED.format(name=name, desc=f" ({desc})" if desc else ""),
                     "driver", version or None)
    e2, version = drv.cuDriverGetVersion()
    version = int(version) if int(e2) == 0 else 0
    if version:
        reason = _too_old(drv, version)
        if reason:
            return Probe(0, reason, "driver", version)
    e3, count = drv.cuDeviceGetCount()
    count = int(count) if int(e3) == 0 else 0
    if count <= 0:
        return Probe(0, NO_GPU.format(detail="the driver reports 0 devices"), "driver",
                     version or None)
    return Probe(count, None, "driver", version or None)


def _probe_uncached() -> Probe:
    drv = _cu.load_driver()
    if drv is None:
        return Probe(0, NOT_INSTALLED, "none")
    nvml = _cu.load_nvml()
    missing = "nvidia-ml-py is not installed and " if nvml is None else "libnvidia-ml and "
    if nvml is not None:
        found = _probe_nvml(drv, nvml)
        if found is not None:
            return found
    return _probe_driver(drv, missing)


_lock = reinit_after_fork(threading.Lock())
_cached: Probe | None = None      # guarded by _lock
_cached_env: str | None = None    # guarded by _lock: CUDA_VISIBLE_DEVICES when _cached was made
_frozen = False                   # guarded by _lock: cuInit ran, the driver read the variable


def _stale(p: Probe | None, env: str | None) -> bool:
    """Whether ``p`` must be made again: none yet, or ``CUDA_VISIBLE_DEVICES`` changed while
    the driver, which reads it once at ``cuInit``, has not been initialised."""
    return p is None or (env != _cached_env and not _frozen and p.source != "driver")


def probe() -> Probe:
    """Discovery result. As ``torch.cuda.device_count``, it is not cached before CUDA is
    initialised: a change of ``CUDA_VISIBLE_DEVICES`` before then is seen by the next call.
    Once the driver is initialised (:func:`driver_initialised`, or discovery had to ask the
    driver itself), the answer is kept for the process (see :func:`reset`).

    Example::

        >>> from accelrt.backends.cuda import _discovery
        >>> p = _discovery.probe()
        >>> (p.reason is None) == (p.count > 0)
        True
    """
    global _cached, _cached_env
    p = _cached
    if p is not None and (_frozen or p.source == "driver"):
        return p   # kept for the process: the variable is not read again (every index check)
    if _stale(p, os.environ.get(ENV)):
        with _lock:
            env = os.environ.get(ENV)
            if _stale(_cached, env):
                _cached = _probe_uncached()
                _cached_env = env
            p = _cached
    assert p is not None
    return p


def driver_initialised() -> None:
    """Record that this process is calling ``cuInit``: the driver reads ``CUDA_VISIBLE_DEVICES``
    now and never again, so the answer for the variable's present value is kept from here on.

    Example::

        >>> from accelrt.backends.cuda import _discovery
        >>> _discovery.driver_initialised()
        >>> _discovery.probe() is _discovery.probe()
        True
        >>> _discovery.reset()
    """
    global _frozen
    probe()
    with _lock:
        _frozen = True


def reset() -> None:
    """Forget the cached result and that the driver was initialised (tests that change the
    environment or modules call this)."""
    global _cached, _cached_env, _frozen
    with _lock:
        _cached = None
        _cached_env = None
        _frozen = False
