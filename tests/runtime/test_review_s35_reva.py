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


def test_eager_record_after_a_captured_record_does_not_fork_the_capture(cpu: Any) -> None:
    """An event recorded in an open capture and then recorded again eagerly (on a stream
    that is not capturing) is an ordinary event, as CUDA's: a stream that waits on it waits
    eagerly and its work runs. The event kept its capture mark: the waiting stream joined
    the capture, its work was captured instead of run, and the capture's end raised the
    unjoined-fork error."""
    g = acc.Graph()
    s, eager, third = cpu.Stream(), cpu.Stream(), cpu.Stream()
    buf = acc.zeros(3, device=CPU)
    ev = acc.Event()
    with cpu.stream(s):
        g.capture_begin()
        ev.record(s)                   # a record node of the capture
        ev.record(eager)               # an eager record: the event leaves the capture
        third.wait_event(ev)
        assert not third.is_capturing()
        with cpu.stream(third):
            buf.fill_(4.0)             # eager work
        g.capture_end()
    third.synchronize()
    assert buf.tolist() == [4.0] * 3
    g.reset()
