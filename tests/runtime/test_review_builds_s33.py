"""What tests/package/test_builds_agree.py found where the compiled and the pure build
answered the public API differently, fixed (session 33): each test runs on whichever build
is installed (``.ci/run`` runs this file on both) and failed on both before the fix.

- ``device_index.idx`` / ``prev_idx`` (and the device modules' ``device``): the compiled core
  typed them ``int``, so assigning a float raised mypyc's ``TypeError: int or None object
  expected; got float``; the pure build took it and entered device "1.5". torch's are plain
  attributes, read (and refused) on entry.
- ``copy``/``pickle`` of a captured ``Graph``: ``copy.copy`` shared its graph and pool (both
  objects released them); ``deepcopy`` and ``pickle`` failed on an internal object, with a lock
  in the message of the pure build and a compiled class's ``__init__`` in the other.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import pytest
from helpers import builds_probe
from helpers.registry import module_backends

import accelrt as acc
from accelrt.backends.cpu import CpuBackend

B = "s33agree"   # a cpu backend of two devices, for index 1
_backends = module_backends({B: lambda: CpuBackend(num_devices=2, name=B)})


@pytest.mark.parametrize("kind", ["device_index", "device"])
def test_device_index_attributes_take_any_value_and_are_checked_on_entry(kind: str) -> None:
    # the compiled build refused d.idx = 1.5 with mypyc's "int or None object expected; got
    # float"; the pure build took it and made 1.5 the current device index inside the block
    acc.set_current_accelerator(B)   # (the conftest puts the previous one back)
    mod = acc.backends.device_module(B)
    d = acc.device_index(0) if kind == "device_index" else mod.device(0)
    d.idx, d.prev_idx = 1.5, "anything"   # plain attributes, as torch's
    assert (d.idx, d.prev_idx) == (1.5, "anything")
    with pytest.raises(TypeError, match=rf"^{kind}\.idx takes an int or None, got float$"):
        with d:
            pass
    with pytest.raises(RuntimeError, match=rf"^{kind}\.idx takes an int or None, got bool"):
        with _with(d, True):
            pass
    assert mod.current_device() == 0
    for value in (np.int64(1), builds_probe.IntEq(1), builds_probe.Index()):
        with _with(d, value):   # an integer counts by its value, as the constructor reads it
            assert mod.current_device() == 1
            assert type(acc.current_device_index()) is int
        assert mod.current_device() == 0
    assert d.prev_idx == 0
    with _with(d, None):
        assert mod.current_device() == 0
    if kind == "device":   # a device module's device stands for its index as an argument
        with pytest.raises(TypeError, match=r"^device\.idx takes an int or None, got str$"):
            mod.current_stream(_with(d, "1"))
        assert mod.current_stream(_with(d, np.int64(1))).device_index == 1


def _with(d: Any, idx: object) -> Any:
    d.idx = idx
    return d


@pytest.mark.parametrize("make", [acc.Graph, acc.cpu.Graph])
@pytest.mark.parametrize("how", [copy.copy, copy.deepcopy, pickle.dumps])
def test_a_graph_cannot_be_copied_or_pickled(make: Any, how: Any) -> None:
    # copy.copy() shared the captured graph and its pool (both objects released them);
    # deepcopy and pickle failed inside, with other messages in each build
    g = make()
    with acc.Stream("cpu:0"):
        g.capture_begin()
        acc.zeros(2, device="cpu:0").fill_(1.0)
        g.capture_end()
    with pytest.raises(TypeError, match=r"^cannot copy or pickle <accelrt\.Graph captured on "
                                        r"cpu:0>: a Graph is work captured in this process"):
        how(g)
    g.replay()
    g.reset()
    with pytest.raises(TypeError, match=r"^cannot copy or pickle <accelrt\.Graph empty>"):
        how(make())
