"""The cpu backend's compiled common cases of ``event_synchronize``, ``stream_synchronize``,
``stream_wait_event``, ``event_create`` and ``event_destroy`` (``backends/cpu/_live``) answer
hostile arguments as the general checks do: the same errors, in both stream modes, and what
they make or forget is what the general path makes or forgets.

The expectations are the outcomes of 1fc80a8, before these fast paths (both builds).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import IntSubclass, cpu_handles

from accelrt.backends.cpu import CpuBackend
from accelrt.backends.cpu._live import CpuEvent




def _range(index: int) -> tuple[str, str]:
    # the helper's backend is made with num_devices=2: the variable would not change it
    return ("IndexError", (f"cpu device index {index} is out of range; this backend has 2 "
                           "device(s) (this instance was made with num_devices=2; make it "
                           "with CpuBackend(num_devices=N) for N devices)"))


_EVENT = "event handle {} is not a live event{}; use a handle from event_create that was not destroyed"
_STREAM = ("stream handle {} is not a live stream of cpu:0; use 0 (the default stream) or a "
           "handle from stream_create")


@pytest.mark.parametrize("async_streams", [False, True])
def test_hostile_arguments_get_the_general_checks_errors(async_streams: bool) -> None:
    with cpu_handles(async_streams) as (b, s1, e0, e1, dead):
        cases: list[tuple[Any, tuple[str, str]]] = [
            (lambda: b.event_synchronize(-1, e1), _range(-1)),
            (lambda: b.event_synchronize(1, e0), ("ValueError", _EVENT.format(e0, " of cpu:1"))),
            (lambda: b.event_synchronize(True, e0),
             ("TypeError", "device index must be an int, got bool")),
            (lambda: b.event_synchronize(0, IntSubclass(e0)),
             ("ValueError", _EVENT.format(e0, " of cpu:0"))),
            (lambda: b.event_synchronize(0, np.int64(e0)),
             ("TypeError", "event handle must be an int, got numpy.int64")),
            (lambda: b.event_synchronize(0, dead), ("ValueError", _EVENT.format(dead, " of cpu:0"))),
            (lambda: b.stream_synchronize(-1, s1), _range(-1)),
            (lambda: b.stream_synchronize(0, s1), ("ValueError", _STREAM.format(s1))),
            (lambda: b.stream_synchronize(0, True),
             ("TypeError", "stream handle must be an int, got bool")),
            (lambda: b.stream_synchronize(np.int64(0), 0),
             ("TypeError", "device index must be an int, got numpy.int64")),
            (lambda: b.stream_synchronize(0, IntSubclass(0)), ("ValueError", _STREAM.format(0))),
            (lambda: b.stream_wait_event(0, s1, e0), ("ValueError", _STREAM.format(s1))),
            (lambda: b.stream_wait_event(-1, s1, e0), _range(-1)),
            (lambda: b.stream_wait_event(0, 0, dead), ("ValueError", _EVENT.format(dead, ""))),
            (lambda: b.stream_wait_event(0, 0, True),
             ("TypeError", "event handle must be an int, got bool")),
            (lambda: b.stream_wait_event(0, 0, IntSubclass(e0)), ("ValueError", _EVENT.format(e0, ""))),
            (lambda: b.stream_wait_event(0, True, e0),
             ("TypeError", "stream handle must be an int, got bool")),
            (lambda: b.event_create(-1, False, False, False), _range(-1)),
            (lambda: b.event_create(2, False, False, False), _range(2)),
            (lambda: b.event_create(True, False, False, False),
             ("TypeError", "device index must be an int, got bool")),
            (lambda: b.event_create(np.int64(0), False, False, False),
             ("TypeError", "device index must be an int, got numpy.int64")),
            (lambda: b.event_create(0, True, False, True),
             ("ValueError", ("an interprocess event cannot have enable_timing=True (as "
                             "CUDA's); create it with enable_timing=False"))),
            (lambda: b.event_destroy(1, e0), ("ValueError", _EVENT.format(e0, " of cpu:1"))),
            (lambda: b.event_destroy(-1, e1), _range(-1)),
            (lambda: b.event_destroy(0, dead), ("ValueError", _EVENT.format(dead, " of cpu:0"))),
            (lambda: b.event_destroy(0, True), ("TypeError", "event handle must be an int, got bool")),
            (lambda: b.event_destroy(0, IntSubclass(e0)), ("ValueError", _EVENT.format(e0, " of cpu:0"))),
            (lambda: b.event_destroy(0, np.int64(e0)),
             ("TypeError", "event handle must be an int, got numpy.int64")),
        ]
        for call, (kind, words) in cases:
            with pytest.raises(Exception) as info:   # noqa: PT011 - the kind is checked below
                call()
            assert (type(info.value).__name__, str(info.value)) == (kind, words)
        # the failed calls changed nothing; live handles still answer
        assert b.live_handles() == {"streams": 1, "events": 2, "graphs": 0}
        b.stream_wait_event(1, s1, e0)                 # an event of another device: allowed
        b.event_synchronize(0, e0)
        b.stream_synchronize(1, s1)
        # an int subclass as the index takes the general path and still makes an event
        h = b.event_create(IntSubclass(0), False, False, False)
        made = b.event_create(1, True, False, False)   # the fast path's event: as the general
        ev = b._events[made]
        assert type(ev) is CpuEvent and (ev.device, ev.timing, ev.ipc) == (1, True, None)
        for handle, index in ((h, 0), (made, 1), (e0, 0), (e1, 1)):
            b.event_destroy(index, handle)
        assert b.live_handles() == {"streams": 1, "events": 0, "graphs": 0}


def test_a_foreign_exception_is_the_cause_in_both_builds() -> None:
    # mypyc drops ``raise ... from exc``: in the compiled build these had no __cause__ (the
    # backends' kept host-function errors once _common was compiled, _checked.call_raw before)
    from accelrt import DeviceError, _checked
    from accelrt.backends._common import KeptErrors

    boom = OSError(5, "I/O error")

    def fail() -> None:
        raise boom

    b = CpuBackend()
    try:
        with pytest.raises(DeviceError) as info:
            _checked.call_raw(b, "malloc", fail)
        assert info.value.__cause__ is boom
    finally:
        b.close()
    kept: KeptErrors[str] = KeptErrors()
    kept.keep("s", boom)
    with pytest.raises(DeviceError) as info:
        kept.raise_for(["s"], lambda key: f"work on {key} failed")
    assert info.value.__cause__ is boom and str(info.value) == (
        "work on s failed: OSError: [Errno 5] I/O error")
