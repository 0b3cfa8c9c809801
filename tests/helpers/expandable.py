"""Switching expandable segments on in a test (shared by the torch-suite memory tests), and
the once-per-backend fallback warning."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from accelrt import backends
from accelrt.memory import _config


def switch_on_or_skip(m: Any) -> None:
    """``expandable_segments:True`` on device module ``m`` (test_cuda_expandable_segments.py's
    setting), checked: device 0 of ``m``'s backend then uses expandable segments. The option is
    process-wide; an open allocator of a backend without virtual memory (OpenCL, opened by an
    earlier test) keeps ordinary segments and warns once, which is not this test's concern.
    Skips only where ``m``'s own device has no virtual memory (the cpu backend off Linux)."""
    name = _backend_name(m)
    if not backends.get(name).capabilities(0).virtual_memory:
        pytest.skip(f"the {name} backend has no virtual memory here: expandable segments "
                    "fall back to ordinary ones")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", _config.EXPANDABLE_FALLBACK, UserWarning)
        m.set_allocator_settings("expandable_segments:True")


def _backend_name(m: Any) -> str:
    """The backend name of device module ``m``: ``backends.device_module(name)``'s ``name``,
    or the module ``acc.cpu``'s last dotted part."""
    for attr in ("name", "__name__"):
        value = getattr(m, attr, None)
        if isinstance(value, str):
            return value.rsplit(".", 1)[-1]
    raise AssertionError(f"cannot tell the backend of {m!r}")


@contextlib.contextmanager
def fresh_fallback_warnings() -> Iterator[None]:
    """Forget which backends were warned about falling back to ordinary segments, so that the
    next fallback warns again (the warning is once per backend per process); restored after."""
    with _config._fallback_lock:
        saved = set(_config._fallback_warned)
        _config._fallback_warned.clear()
    try:
        yield
    finally:
        with _config._fallback_lock:
            _config._fallback_warned.clear()
            _config._fallback_warned.update(saved)
