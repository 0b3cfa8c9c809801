"""The child processes' functions of ``test_torch_suite_mp_s35.py``'s scenarios (the ``_c_*``
functions, with the helpers they call), in a module of their own: a ``spawn`` child imports
the module of the function it runs, and this one leaves out the test module's pytest and
its module-scoped backend.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from typing import Any

import numpy as np

import accelrt as acc
import accelrt.multiprocessing as amp

T = 30.0   # seconds for any single wait in a scenario


def _host_view(a: acc.Array) -> np.ndarray:
    """A numpy view of a cpu array's memory that queues nothing and waits for nothing (what a
    host function on a stream may touch)."""
    buf = (ctypes.c_char * a.nbytes).from_address(a.data_ptr())
    return np.frombuffer(buf, dtype=a.dtype).reshape(a.shape)


def _host_func(stream: acc.Stream, fn: Any) -> None:
    stream._b.launch_host_func(stream.device_index, fn, stream.stream_id)  # type: ignore[attr-defined]


def _c_fill_first(q: Any, filled: Any) -> None:
    data = q.get(timeout=T)
    data[0].fill_(4)
    acc.synchronize("cpu")
    filled.set()


def _c_send_twice(q: Any, done: Any) -> None:
    a = acc.ones((5, 5), device="cpu")
    q.put(a)
    q.put(a)
    assert done.wait(T)


def _c_pool_fill(a: acc.Array) -> acc.Array:
    a.fill_(4)
    acc.synchronize("cpu")
    return acc.full((2, 2), 5.0, device="cpu")


def _c_send_and_delete(q: Any, done: Any, count: int, size: int, dtype: str) -> None:
    for i in range(count):
        t = acc.full((size,), i, dtype=dtype, device="cpu")
        q.put(t)
        del t
    assert done.wait(T)


def _c_learner(q: Any, actor_done: Any, n: int) -> None:
    for i in range(n):
        if not q.full():
            q.put({"weight": acc.full((4,), float(i), device="cpu"),
                   "bias": acc.zeros((1,), device="cpu")})
    assert actor_done.wait(T)       # a producer outlives what its consumers receive


def _c_actor(q: Any, actor_done: Any, n: int) -> None:
    for _ in range(n):
        if not q.empty():
            state = q.get(timeout=T)
            w = state["weight"].numpy()
            assert (w == w[0]).all() and (state["bias"].numpy() == 0).all()
            del state
    actor_done.set()


def _c_forward_copies(qin: Any, qout: Any, done: Any, count: int) -> None:
    for _ in range(count):
        t = qin.get(timeout=T)
        copy = acc.empty(t.shape, dtype=t.dtype, device=t.device)
        copy.copy_(t)
        qout.put(copy)
        del t, copy
    assert done.wait(T)


def _c_sum_received(qin: Any, qout: Any, done: Any, count: int, size: int) -> None:
    total = np.zeros(size, np.int64)
    for _ in range(count):
        total += qin.get(timeout=T).numpy()
    qout.put(acc.asarray(total, device="cpu", copy=True))
    assert done.wait(T)


def _c_report_on_device_1(inq: Any, outq: Any) -> None:
    with acc.cpu.device(1):
        for a in inq.get(timeout=T):
            outq.put((float(a.numpy().sum()), a.device.index, a.size))


def _c_mixed_types(q: Any, acks: Any) -> None:
    for _ in range(10):
        q.put(acc.ones((2, 2), dtype="float32", device="cpu"))
        q.put(acc.zeros((2, 2), dtype="uint8", device="cpu"))
        assert acks.get(timeout=T)


def _c_send_reductions(q: Any, done: Any) -> None:
    halves = [acc.ones((1,), device="cpu"), acc.ones((1,), device="cpu")]
    q.put([amp.reductions.reduce_array(a)[1] for a in halves])
    assert done.wait(T)


def _c_use_cpu(out: Any) -> None:
    acc.cpu.set_device(0)
    b = acc.full((4,), 2.0, device="cpu")
    out.put(b.numpy().tolist())


def _c_use_opencl(out: Any) -> None:
    try:
        acc.zeros((4,), device="opencl")
    except Exception as exc:
        out.put((isinstance(exc, RuntimeError), str(exc)))
    else:
        out.put((False, "no exception"))


def _c_multiply_two(q: Any, ready: Any, done: Any) -> None:
    ready.set()
    s = acc.Stream("cpu")
    with acc.cpu.stream(s):
        ev, a = q.get(timeout=T)
        ev.wait()                       # the current stream waits for the producer's record
        view = _host_view(a)
        _host_func(s, lambda: view.__imul__(2))
        ev.record()
        done.set()
    s.synchronize()


def _c_synchronize(event: Any, p2c: Any, c2p: Any) -> None:
    c2p.put(0)
    p2c.get()
    event.synchronize()
    c2p.put(event.query())


def _c_import_and_synchronize(handle: bytes, p2c: Any, c2p: Any) -> None:
    e1 = acc.cpu.Event.from_ipc_handle(0, handle)
    c2p.put(0)
    p2c.get()
    e1.synchronize()
    c2p.put(e1.query())
    p2c.get()


def _c_record_imported(handle: bytes, p2c: Any, c2p: Any) -> None:
    stream = acc.Stream("cpu")
    gate = threading.Event()
    with acc.cpu.stream(stream):
        e1 = acc.cpu.Event.from_ipc_handle(acc.cpu.current_device(), handle)
        _host_func(stream, lambda: gate.wait(T))
        e1.record()
        c2p.put(0)
        assert p2c.get() == "seen pending"
        gate.set()
        assert p2c.get() == "done"


def _idle() -> None:
    """Run until terminated (the parent's join ends the process)."""
    threading.Event().wait(T)


def _c_nothing(i: int) -> None:
    pass


def _c_put_index(i: int, q: Any) -> None:
    q.put(i)


def _c_raise_in(i: int, which: int) -> None:
    if i == which:
        raise ValueError(f"legitimate exception from process {i}")
    _idle()


def _c_raise_all(i: int) -> None:
    raise ValueError(f"legitimate exception from process {i}")


def _c_abort_first(i: int) -> None:
    if i == 0:
        os.kill(os.getpid(), signal.SIGABRT)
    _idle()


def _c_exit_first(i: int, code: int) -> None:
    if i == 0:
        sys.exit(code)
    _idle()


def _c_succeed_first_then_raise(i: int, arg: Any) -> None:
    if i == 0:
        return
    raise ValueError("legitimate exception")


def _c_forever(i: int) -> None:
    threading.Event().wait()


def _c_exit_12(i: int) -> None:
    sys.exit(12)


def _c_keyboard_interrupt(i: int) -> None:
    raise KeyboardInterrupt
