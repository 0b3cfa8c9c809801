"""Threads on the paths s28 compiled: ``Stream()``'s pooled handles and the finaliser that gives
them back, ``wait_stream``/``wait_event`` (``_wait_raw``, which skips the backend while its
``streams_idle`` hint holds), ``Event`` create/record/synchronize/destroy and
``Stream.synchronize``, in the synchronous and asynchronous modes of the cpu backend. Eight
threads start together (a barrier); afterwards every handle they made is given back and every
ordering they asked for held."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

import accelrt as acc
from accelrt.backends.cpu import CpuBackend

THREADS, ROUNDS = 8, 60


@pytest.fixture(params=[False, True], ids=["sync", "async"])
def backend(request: pytest.FixtureRequest) -> Iterator[tuple[str, CpuBackend]]:
    name = f"cpu_s28t{int(request.param)}"
    b = CpuBackend(num_devices=2, async_streams=request.param, name=name)
    acc.backends.register(name, lambda: b)
    try:
        yield name, b
    finally:
        acc.memory.empty_cache()
        acc.backends.unregister(name)
        b.close()


def test_streams_events_and_waits_under_threads(backend: tuple[str, CpuBackend]) -> None:
    name, b = backend
    gate = threading.Barrier(THREADS, timeout=60)
    errors: list[BaseException] = []
    before = b.live_handles()

    def work(t: int) -> None:
        try:
            dev = f"{name}:{t % 2}"
            gate.wait()
            for r in range(ROUNDS):
                s1, s2 = acc.Stream(dev), acc.Stream(dev)
                with s1:
                    x = acc.full((64,), float(t), device=dev)
                    x.fill_(float(r))              # both queued on s1
                s2.wait_stream(s1)                 # s2's work after s1's fill
                with s2:
                    y = x.to(dev, non_blocking=True)   # a copy ordered after the fill
                e = s2.record_event()
                s1.wait_event(e)
                e.synchronize()
                s1.synchronize()
                assert float(y.numpy()[0]) == float(r), (t, r)
                ev = acc.Event(dev)
                ev.record(s1)
                ev.synchronize()
                assert ev.query()
                del s1, s2, e, ev, x, y                # streams back to the pool, events freed
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            gate.abort()

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not any(th.is_alive() for th in threads), "a thread hung"
    assert not errors, errors[:3]
    acc.synchronize(f"{name}:0")
    acc.synchronize(f"{name}:1")
    after = b.live_handles()
    assert after["events"] == before["events"], (before, after)
    # pooled streams stay made (reused by later Stream()s): never more than the threads held
    assert after["streams"] - before["streams"] <= 2 * THREADS * 2, (before, after)
