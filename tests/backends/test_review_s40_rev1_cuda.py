"""Review of the s40 merges (rev1): on CUDA's stand-in driver, a host function run by the
driver's thread (the trampoline) has its waits for streams refused, and the error is kept
for the stream's next synchronization; calls that do not wait still work there."""

from __future__ import annotations

from typing import Any

import pytest
from test_cuda_backend import fake  # noqa: F401 (the stand-in driver's fixture)

import accelrt as acc
from accelrt.backends.cuda import _streams


@pytest.mark.parametrize("call, what", [
    (lambda b, s, ev: b.synchronize(0), "synchronize()"),
    (lambda b, s, ev: b.synchronize(1), "synchronize()"),   # another device's too
    (lambda b, s, ev: b.stream_synchronize(0, 0), "stream_synchronize()"),
    (lambda b, s, ev: b.event_synchronize(0, ev), "event_synchronize()"),
], ids=["synchronize", "synchronize-other-device", "stream", "event"])
def test_the_trampoline_refuses_waits_for_streams(fake: Any, call: Any,  # noqa: F811
                                                  what: str) -> None:
    b, drv = fake
    s = b.stream_create(0, 0)
    ev = b.event_create(0, False, False, False)
    done: list[object] = []

    def host_function() -> None:
        assert b.stream_query(0, s) in (True, False)   # a query does not wait: allowed
        done.append("queried")
        call(b, s, ev)
        done.append("waited")
    b.launch_host_func(0, host_function, s)
    _streams._HOST_TRAMPOLINE(drv.calls[-1][1][2])     # the driver's thread runs it
    assert done == ["queried"]
    with pytest.raises(acc.DeviceError) as info:
        b.stream_synchronize(0, s)
    cause = info.value.__cause__
    assert type(cause) is acc.DeviceError and str(cause).startswith(
        f"{what} is not permitted in a host function running in stream order on stream "
        f"{s:#x} of cuda:0"), str(cause)
    b.synchronize(0)                                   # outside a host function: works
