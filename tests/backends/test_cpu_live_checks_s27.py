"""The cpu backend's fast handle checks (``backends/cpu/_live``, compiled in the compiled build)
answer as the general checks did: hostile arguments to ``event_record``, ``event_query`` and
``stream_query`` raise the same errors in the same order, in both stream modes, and a negative
device index never reaches another device's table (the live-stream table is a list by index).

The expectations are the outcomes of d8587d3, before the fast paths moved there.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import IntSubclass, cpu_handles

_NOT_LIVE = "is not a live event of cpu:{}; use a handle from event_create that was not destroyed"
_RANGE = "cpu device index {} is out of range; this backend has 2 device(s)"


@pytest.mark.parametrize("async_streams", [False, True])
def test_hostile_handles_get_the_general_checks_errors(async_streams: bool) -> None:
    with cpu_handles(async_streams) as (b, s1, e0, e1, dead):
        cases: list[tuple[Any, type[Exception], str]] = [
            # a negative index is refused, never read as the last device's table
            (lambda: b.event_record(-1, e1, s1), IndexError, _RANGE.format(-1)),
            (lambda: b.stream_query(-1, s1), IndexError, _RANGE.format(-1)),
            (lambda: b.event_query(-1, e1), IndexError, _RANGE.format(-1)),
            (lambda: b.event_record(2, e1, s1), IndexError, _RANGE.format(2)),
            (lambda: b.event_record(True, e0, 0), TypeError, "device index must be an int, got bool"),
            (lambda: b.event_record(np.int64(0), e0, 0), TypeError,
             "device index must be an int, got numpy.int64"),
            (lambda: b.event_record(0, True, 0), TypeError, "event handle must be an int, got bool"),
            (lambda: b.event_record(0, None, 0), TypeError,
             "event handle must be an int, got NoneType"),
            # an int subclass or a numpy integer is no live handle (the event is checked first)
            (lambda: b.event_record(0, IntSubclass(e0), 0), ValueError, f"event handle {e0} " + _NOT_LIVE.format(0)),
            (lambda: b.event_record(0, e0, True), TypeError, "stream handle must be an int, got bool"),
            (lambda: b.event_record(0, e0, np.int64(0)), TypeError,
             "stream handle must be an int, got numpy.int64"),
            (lambda: b.event_record(0, e0, s1), ValueError, f"stream handle {s1} is not a live stream of cpu:0"),
            (lambda: b.event_record(0, dead, 0), ValueError, f"event handle {dead} " + _NOT_LIVE.format(0)),
            (lambda: b.event_record(1, e0, s1), ValueError, f"event handle {e0} " + _NOT_LIVE.format(1)),
            (lambda: b.event_query(0, np.int64(e0)), TypeError, "event handle must be an int, got numpy.int64"),
            (lambda: b.event_query(1, e0), ValueError, f"event handle {e0} " + _NOT_LIVE.format(1)),
            (lambda: b.stream_query(0, True), TypeError, "stream handle must be an int, got bool"),
            (lambda: b.stream_query(0, s1), ValueError, f"stream handle {s1} is not a live stream of cpu:0"),
        ]
        for call, kind, words in cases:
            with pytest.raises(kind) as info:
                call()
            assert str(info.value).startswith(words), (words, str(info.value))
        # and the live handles still record and answer
        b.event_record(0, e0, 0)
        b.event_record(1, e1, s1)
        b.event_synchronize(0, e0)   # (async streams: e0's record runs on device 0's worker)
        b.event_synchronize(1, e1)
        assert b.event_query(0, e0) and b.event_query(1, e1) and b.stream_query(1, s1)
        assert b.event_elapsed_time(1, e1, e1) == 0.0
