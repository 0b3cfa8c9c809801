"""Regression tests of the s35 adversarial review (reva) of the changes merged on s35."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt.backends.cpu import CpuBackend

CPU = "s35revacpu"
MB = 1 << 20

_backends = module_backends({
    CPU: lambda: CpuBackend(num_devices=1, async_streams=False, name=CPU),
})


@pytest.fixture
def cpu() -> Iterator[Any]:
    """The cpu backend's device module, current, device 0 current; caches emptied after."""
    mod: Any = acc.backends.device_module(CPU)
    acc.set_current_accelerator(CPU)
    mod.set_device(0)
    yield mod
    mod.synchronize()
    mod.empty_cache()


def _unjoined_capture(cpu: Any, g: Any, side: Any, buf: Any) -> None:
    """A capture on ``g`` whose side stream allocates from the private pool and is never
    joined back: its end raises (CUDA's cudaErrorStreamCaptureUnjoined)."""
    with pytest.raises(RuntimeError, match="fork that was not joined"):
        with cpu.graph(g):
            side.wait_stream(cpu.current_stream())
            with cpu.stream(side):
                tmp = acc.zeros(MB // 4, device=CPU)   # 1 MiB from the capture's pool
                buf.fill_(1.0)
                del tmp


def test_failed_capture_end_releases_the_private_pool(cpu: Any) -> None:
    """A capture whose end raised (an unjoined fork) keeps no graph, and no private pool
    either: capturing again on the same object without ``reset()`` (which it accepts) left
    the first capture's pool referenced by nobody, its segment reserved for good."""
    buf = acc.zeros(3, device=CPU)
    cpu.empty_cache()
    base = cpu.memory_reserved()
    g, side = cpu.CUDAGraph(), cpu.Stream()
    _unjoined_capture(cpu, g, side, buf)
    with cpu.graph(g):                 # a second capture, without reset()
        buf.fill_(5.0)
    g.replay()
    cpu.synchronize()
    assert buf.tolist() == [5.0] * 3
    g.reset()
    gc.collect()
    cpu.empty_cache()
    assert cpu.memory_reserved() == base
    # the failed capture alone, then reset(): nothing kept either
    g2 = cpu.CUDAGraph()
    _unjoined_capture(cpu, g2, side, buf)
    cpu.empty_cache()
    assert cpu.memory_reserved() == base
    with pytest.raises(RuntimeError, match="pool"):
        g2.pool()                      # no successful capture
    g2.reset()
