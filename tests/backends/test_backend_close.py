"""Backend.close() and ``with`` (issue 11 §1): release, idempotence, clear errors after, and the
registry forgets a closed instance. The conformance suite checks the same on every backend."""

from __future__ import annotations

import uuid

import pytest

import accelrt as acc
from accelrt.backends import StreamHandle
from accelrt.backends.cpu import CpuBackend


def test_close_is_idempotent_and_operations_then_raise() -> None:
    b = CpuBackend(async_streams=True)
    done: list[int] = []
    b.launch_host_func(0, lambda: done.append(1), StreamHandle(0))
    b.close()
    assert done == [1]                       # queued work ran before the release
    b.close()                                # idempotent
    assert b.closed
    for call in (lambda: b.malloc(0, 16), lambda: b.stream_create(0, 0),
                 lambda: b.event_create(0, False, False, False), lambda: b.synchronize(0)):
        with pytest.raises(ValueError, match="closed"):
            call()


def test_with_block_closes() -> None:
    with CpuBackend() as b:
        p = b.malloc(0, 64)
        b.free(0, p)
    assert b.closed
    assert repr(b).startswith("<accelrt backend")


def test_closing_the_registry_instance_closes_the_backend_for_the_process() -> None:
    name = "close" + uuid.uuid4().hex[:8]
    acc.backends.register(name, lambda: CpuBackend(name=name))
    try:
        b = acc.backends.get(name)
        x = acc.zeros(4, device=f"{name}:0")
        assert x.numpy().tolist() == [0.0] * 4
        b.close()
        assert acc.backends.get(name) is b
        with pytest.raises(ValueError, match="closed"):
            acc.zeros(4, device=f"{name}:0").numpy()
    finally:
        acc.backends.unregister(name)


@pytest.mark.parametrize("factory", [lambda: CpuBackend(async_streams=True),
                                     lambda: acc.testing.SimulatedBackend()],
                         ids=["cpu", "simulated"])
def test_every_operation_checks_the_closed_flag(factory: object) -> None:
    """close() rebinds no method: each public operation (all but the questions about the
    devices) checks the flag first, so it raises the closed error whatever its arguments."""
    from accelrt._backend import _OPEN_AFTER_CLOSE
    b = factory()   # type: ignore[operator]
    b.close()
    methods = {k for k in dir(type(b)) if callable(getattr(type(b), k, None))}
    assert not methods & set(vars(b))   # no method shadowed on the instance
    for attr in dir(type(b)):
        member = getattr(type(b), attr)
        if attr.startswith("_") or attr in _OPEN_AFTER_CLOSE or not callable(member) \
                or isinstance(member, type) or isinstance(vars(type(b)).get(attr), classmethod):
            continue
        with pytest.raises(ValueError, match=f"instance is closed .* so {attr}\\(\\) cannot"):
            getattr(b, attr)(*([0] * 12)[:member.__code__.co_argcount - 1])
