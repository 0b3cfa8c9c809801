"""The cpu backend's device memory raises its libc failures without a traceback cycle: an
error kept in a local of the raising frame (error -> traceback -> frame -> error) kept the
frame, and the ``DeviceMemory`` it held, alive until the garbage collector ran (s32)."""

from __future__ import annotations

import ctypes
import errno
import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from accelrt.backends.cpu import _memory
from accelrt.backends.cpu._memory import VM_GRANULARITY, DeviceMemory


class _Libc:
    """libc with ``mprotect`` failing with ``fail`` (an errno) while it is set."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.fail = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def mprotect(self, ptr: int, size: int, prot: int) -> int:
        if self.fail:
            ctypes.set_errno(self.fail)
            return -1
        return int(self._real.mprotect(ptr, size, prot))


@pytest.fixture
def libc(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Libc]:
    fake = _Libc(_memory._get_libc())
    monkeypatch.setattr(_memory, "_libc", fake)
    gc.collect()
    gc.disable()
    try:
        yield fake
    finally:
        gc.enable()


def test_a_failed_vm_map_leaves_no_cycle(libc: _Libc) -> None:
    mem = DeviceMemory(index=0, budget=4 * VM_GRANULARITY)
    ptr = mem.vm_reserve(VM_GRANULARITY)
    libc.fail = errno.ENOMEM                     # no memory for page tables: False, no error
    assert mem.vm_map(ptr, VM_GRANULARITY) is False
    libc.fail = errno.EACCES
    with pytest.raises(OSError, match="mprotect failed") as info:
        mem.vm_map(ptr, VM_GRANULARITY)
    assert info.value.errno == errno.EACCES
    del info
    libc.fail = 0
    assert mem.used == 0
    mem.vm_release(ptr, VM_GRANULARITY)
    ref = weakref.ref(mem)
    del mem
    assert ref() is None
