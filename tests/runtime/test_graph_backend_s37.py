"""``accelrt.graph`` (the generic context manager) with a device module's graph: it captures on
that graph's backend, not on the current accelerator's (session 37; a user found that
``acc.graph(acc.mydev.Graph())`` refused with "use accelrt.Graph")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt.testing import SimulatedBackend

SIM = "simgraphbackend37"
_backends = module_backends({SIM: lambda: SimulatedBackend(name=SIM)})


@pytest.fixture
def sim_current() -> Iterator[str]:
    """A backend that cannot capture as the current accelerator; cpu synchronized after."""
    acc.set_current_accelerator(SIM)
    try:
        yield SIM
    finally:
        acc.set_current_accelerator("cpu")
        acc.synchronize("cpu")


def test_generic_graph_captures_a_device_module_graph_on_its_backend(sim_current: str) -> None:
    """The capture runs on a cpu side stream although the current accelerator cannot capture;
    the replay repeats the captured fill."""
    g = acc.cpu.Graph()
    x = acc.zeros(4, device="cpu:0")
    ctx = acc.graph(g)
    assert ctx.capture_stream.device_type == "cpu"
    with ctx:
        x.fill_(3.0)
    x.fill_(0.0)
    acc.synchronize("cpu")
    g.replay()
    acc.synchronize("cpu")
    assert x.tolist() == [3.0] * 4
    assert acc.current_accelerator() == acc.device(SIM)   # not switched by the capture


def test_generic_graph_of_an_unbound_graph_follows_the_current_accelerator(
        sim_current: str) -> None:
    """``acc.Graph()`` stays the current accelerator's: here one that cannot capture."""
    with pytest.raises(acc.CaptureNotSupportedError, match="cannot capture graphs"):
        with acc.graph(acc.Graph()):
            pass


def test_device_module_graph_refuses_another_modules_graph() -> None:
    """``acc.cpu.graph`` still refuses a graph bound to another backend."""
    other = acc.backends.device_module(SIM)
    with pytest.raises(ValueError, match="captures cpu work"):
        acc.cpu.graph(other.Graph())
