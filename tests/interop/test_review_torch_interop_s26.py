"""DLPack between accelrt arrays and PyTorch CPU tensors, checked against torch 2.14.1 by
running both (s26): what a tensor's own export gets wrong (a lazily negated view, a tensor
whose storage is swapped while a consumer holds its memory) is refused or kept valid by
accelrt's importers (``acc.asarray``, ``accelrt.interop.torch.from_torch``).

PyTorch is an optional extra: these tests skip without it. Anything that could crash the
interpreter runs in a subprocess with a timeout."""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import re
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt import _dlpack, backends
from accelrt.backends.cpu import CpuBackend
from accelrt.interop._dlpack_in import from_dlpack
from accelrt.testing import leak_check

HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH,
                                 reason="torch is not installed (an optional extra)")


@needs_torch
def test_a_negative_bit_view_is_refused_never_read_unnegated() -> None:
    # observed on torch 2.14.1: x.conj().imag (and x._neg_view()) is a view with the negative
    # bit set; its own __dlpack__ exports the memory without the negation, so
    # np.from_dlpack(view) and torch.from_dlpack(view) read [1.0, 2.0] for tensor([-1., -2.]),
    # while view.numpy() refuses ("Can't call numpy() on Tensor that has negative bit set");
    # the conjugate bit's export is refused by torch itself ("Can't export tensors with the
    # conjugate bit set", a BufferError). accelrt read the unnegated values.
    import torch

    from accelrt.interop.torch import from_torch
    z = torch.tensor([1 + 1j, 2 + 2j])
    for view in (torch.tensor([1.0, 2.0])._neg_view(), z.conj().imag):
        assert view.is_neg() and view.tolist() == [-1.0, -2.0]
        for importer in (from_torch, lambda t: acc.asarray(t, device="cpu:0")):
            with pytest.raises(BufferError, match=r"negative bit set.*resolve_neg\(\)"):
                importer(view)
        assert acc.asarray(view.resolve_neg(), device="cpu:0").numpy().tolist() == [-1, -2]
    with pytest.raises(BufferError, match="Can't export tensors with the conjugate bit set"):
        from_torch(z.conj())
    # a tensor that requires grad is still PyTorch's refusal (never detached behind its back)
    with pytest.raises(BufferError, match=r"Can't export tensors that require gradient"):
        acc.asarray(torch.ones(2, requires_grad=True), device="cpu:0")


_SWAPPED_STORAGE = r"""
import gc, sys
import numpy as np
import torch
import accelrt as acc
from accelrt.interop.torch import from_torch

for swap in ("set_", "data"):
    for importer in (from_torch, lambda t: acc.asarray(t, device="cpu:0")):
        t = torch.full((1 << 20,), 7.0)        # 4 MiB: freed memory is unmapped at once
        a = importer(t)
        if swap == "set_":
            t.set_(torch.zeros(1))             # t's storage goes (a holds t's export)
        else:
            t.data = torch.zeros(1)
        gc.collect()
        junk = [torch.full((1 << 20,), 9.0) for _ in range(4)]
        print(swap, sorted(set(np.unique(a.numpy()[::4096]).tolist())))
"""


@needs_torch
def test_memory_stays_valid_when_the_tensor_swaps_its_storage() -> None:
    # observed on torch 2.14.1: the capsule of t.__dlpack__() holds t itself, so t.set_(...)
    # or t.data = ... frees the exported memory while the consumer still reads it (numpy's
    # np.from_dlpack(t) then crashes with SIGSEGV); accelrt's arrays did the same
    proc = subprocess.run([sys.executable, "-c", _SWAPPED_STORAGE], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.splitlines() == ["set_ [7.0]"] * 2 + ["data [7.0]"] * 2


class _Returns:
    """A producer whose ``__dlpack__`` returns ``value`` and ``__dlpack_device__`` ``device``
    as they are."""

    def __init__(self, value: Any, device: tuple[int, int] = (1, 0)) -> None:
        self.value, self.device = value, device

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.value

    def __dlpack_device__(self) -> Any:
        return self.device


def test_a_capsule_consumed_already_or_no_capsule_is_a_buffer_error() -> None:
    # observed on torch 2.14.1: torch.from_dlpack(capsule) a second time, or of a producer
    # returning no capsule, raises RuntimeError("from_dlpack received an invalid capsule. Note
    # that DLTensor capsules can be consumed only once, ..."); accelrt's host path let numpy
    # raise ValueError("PyCapsule_GetPointer called with incorrect name") (its device path
    # raised BufferError): now BufferError on both paths, saying so
    a = acc.full(3, 2.0, device="cpu:0")
    with leak_check():
        cap = a.__dlpack__()
        np.from_dlpack(_Returns(cap))                      # consumed once
        for value, got in ((cap, "a capsule named b'used_dltensor'"),
                           (42, "an object of type int")):
            for call, who in ((lambda p: from_dlpack(p), "from_dlpack()"),
                              (lambda p: acc.asarray(p, device="cpu:0"), "asarray()")):
                with pytest.raises(BufferError, match=re.escape(
                        f"{who}: got {got}, not an unused DLPack capsule "
                        "(a capsule can be consumed only once)")):
                    call(_Returns(value))
        del cap
        gc.collect()


class _Device(_Returns):
    """A producer whose ``__dlpack_device__`` returns ``device`` as it is."""

    def __init__(self, device: Any) -> None:
        super().__init__(np.zeros(2).__dlpack__(), device)


def test_a_malformed_dlpack_device_is_a_type_error_saying_so() -> None:
    # accelrt raised int()'s "ValueError: invalid literal for int() with base 10: 'x'" or
    # "TypeError: cannot unpack non-iterable NoneType object" (torch 2.14.1 reads the
    # device type only to pick a stream, and took ("x", 0) for a CPU tensor)
    for device in (("x", 0), None, (1,), (1, 0, 0)):
        for call in (from_dlpack, lambda p: acc.asarray(p, device="cpu:0")):
            with pytest.raises(TypeError, match=re.escape(
                    f"__dlpack_device__() of _Device returned {device!r}, not a "
                    "(device_type, device_id) pair of ints")):
                call(_Device(device))
    assert from_dlpack(_Device(("1", 0))).numpy().tolist() == [0.0, 0.0]   # int() as before


class _Hidden(CpuBackend):
    """A cpu backend whose memory counts as device memory (DLPack's ctypes-built capsules)."""

    def capabilities(self, index: int) -> Any:
        return dataclasses.replace(super().capabilities(index), host_accessible=False)


def test_device_capsules_unconsumed_or_consumed_twice_leak_nothing() -> None:
    backends.register("s26dev", lambda: _Hidden(num_devices=1, name="s26dev"), replace=True)
    for kw in ({}, {"max_version": (1, 0)}, {"copy": True, "max_version": (1, 0)},
               {"dl_device": (1, 0)}):
        with leak_check():                         # a capsule never consumed
            a = acc.full(1000, 1.0, device="s26dev:0")
            cap = a.__dlpack__(**kw)
            del a, cap
            gc.collect()
    with leak_check():
        a = acc.full(1000, 2.0, device="s26dev:0")
        cap = a.__dlpack__()
        b = from_dlpack(_Returns(cap, a.__dlpack_device__()), device="s26dev:0")
        with pytest.raises(BufferError, match=r"capsule named b'used_dltensor'.*only once"):
            from_dlpack(_Returns(cap, a.__dlpack_device__()), device="s26dev:0")
        del a, cap
        gc.collect()
        assert b.numpy().sum() == 2000.0           # the producer's array is gone, not its memory
        del b
        gc.collect()
    assert _dlpack.live_capsules() == 0


def test_a_dlpack_capsule_itself_is_taken_as_torch_takes_it() -> None:
    # observed on torch 2.14.1: torch.asarray(capsule) and torch.from_dlpack(capsule) take a
    # legacy or versioned capsule (sharing its memory); accelrt raised "Could not infer dtype
    # of PyCapsule" / "from_dlpack() takes a DLPack producer"
    backends.register("s26dev", lambda: _Hidden(num_devices=1, name="s26dev"), replace=True)
    with leak_check():
        for max_version in (None, (1, 0)):
            host = np.arange(4.0)
            for call in (from_dlpack, lambda c: acc.asarray(c, device="cpu:0")):
                b = call(host.__dlpack__(max_version=max_version))
                assert b.data_ptr() == host.ctypes.data and b.numpy().tolist() == [0, 1, 2, 3]
        a = acc.full(3, 2.5, device="cpu:0")
        cap = a.__dlpack__()
        assert acc.asarray(cap, device="cpu:0").data_ptr() == a.data_ptr()
        with pytest.raises(BufferError, match=r"asarray\(\): got a capsule named "
                                              r"b'used_dltensor', not an unused"):
            acc.asarray(cap, device="cpu:0")
        d = acc.full(3, 1.5, device="s26dev:0")                # device memory: shared too
        assert from_dlpack(d.__dlpack__(), device="s26dev:0").data_ptr() == d.data_ptr()
        del a, cap, d, b
        gc.collect()
