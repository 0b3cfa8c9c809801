"""PyTorch's own multiprocessing tests (test/test_multiprocessing.py and
test/test_multiprocessing_spawn.py), checked on ``accelrt.multiprocessing``.

Each test names the PyTorch test it mirrors; the checks are written anew for accelrt:
``torch.cuda`` becomes the cpu backend with ``ACCELRT_CPU_SHARED_MEMORY=1`` (its memory is
shared through memfds, as CUDA's through IPC handles), tensors become ``acc.Array`` objects.
Behaviour that needs tensor kernels (autograd, ``Parameter``, views, ``add_``) is out of
scope; the arithmetic the tests do on shared memory is done on the host through ``numpy()``.

Scenarios with other processes run in subprocesses with a hard timeout (``_scenario``): one
interpreter per batch of scenarios with the same environment imports this module and calls
its ``_s_*`` functions in turn, and each test checks its scenario's result; the children run
the ``_c_*`` functions of ``torch_suite_mp_children_s35.py`` (importable, so the ``spawn``
start method works, and without pytest, which the children need not import). Where
torch's test spawns only because CUDA cannot fork, the cheaper ``fork`` is used: the arrays
still travel through the queues' pickles. Every wait has a timeout and
ordering uses queues, pipes and events, never sleeps. The SimulatedBackend cannot share memory
or events with another process (no IPC handles), so these tests run on the cpu backend only.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import sys
import threading
from typing import Any

import numpy as np
import pytest

import accelrt as acc
import accelrt.multiprocessing as amp

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
if TESTS not in sys.path:       # in the scenarios' interpreters (pytest's conftest adds it)
    sys.path.insert(0, TESTS)
from helpers.registry import module_backends  # noqa: E402

from accelrt.backends.cpu import CpuBackend  # noqa: E402
from torch_suite_mp_children_s35 import (  # noqa: E402 - the children's functions (no pytest)
    _c_abort_first, _c_actor, _c_exit_12, _c_exit_first, _c_fill_first, _c_forever,
    _c_forward_copies, _c_import_and_synchronize, _c_keyboard_interrupt, _c_learner,
    _c_mixed_types, _c_multiply_two, _c_nothing, _c_pool_fill, _c_put_index, _c_raise_all,
    _c_raise_in, _c_record_imported, _c_report_on_device_1, _c_send_and_delete,
    _c_send_reductions, _c_send_twice, _c_succeed_first_then_raise, _c_sum_received,
    _c_synchronize, _c_use_cpu, _c_use_opencl, _host_func)

# a cpu backend of shared memory for the tests that share within this process; closed and
# unregistered after the module
_backends = module_backends({"cpushm_s35": lambda: CpuBackend(shared_memory=True,
                                                               name="cpushm_s35")})
MODULE = os.path.splitext(os.path.basename(__file__))[0]
T = 30.0   # seconds for any single wait in a scenario


#: the scenarios of each batch (one interpreter per batch, with that batch's environment);
#: ``name:arg`` calls ``_s_name("arg")``
_BATCHES: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "sync": ({"ACCELRT_CPU_DEVICES": "2"}, (
        "small_arrays_two_devices", "event_handle_two_devices", "sharing:fork",
        "sharing:spawn", "pool:fork", "inherit", "memory_allocation", "ipc_no_deadlock",
        "send_many", "mixed_types", "rebuild", "fork_after_init", "opencl_fork_after_init")),
    "async": ({"ACCELRT_CPU_STREAMS": "async"}, (
        "event_orders_two_processes", "event_as_argument", "event_handle_importer",
        "event_handle_exporter", "fork_after_init")),
    "launch": ({}, ("start_processes:fork", "start_processes:spawn", "spawn_only")),
}
_results: dict[str, dict[str, str]] = {}


def _batch_main(names: list[str]) -> None:
    """Run each scenario in turn (in the subprocess), printing ``name<TAB>ok`` or
    ``name<TAB>`` and its traceback, escaped on one line."""
    import traceback
    for name in names:
        func, _, arg = name.partition(":")
        try:
            if func == "opencl_fork_after_init" and not acc.opencl.is_available():
                result = "skip: no OpenCL device"
            else:
                globals()[f"_s_{func}"](*([arg] if arg else []))
                result = "ok"
        except BaseException:
            result = traceback.format_exc()
        print(f"{name}\t{result!r}", flush=True)


def _scenario(batch: str, name: str) -> None:
    """Check scenario ``name`` of ``batch``: its batch runs once per session, in a fresh
    interpreter with shared cpu memory and a hard timeout (under pytest-timeout's 120 s)."""
    if batch not in _results:
        env, names = _BATCHES[batch]
        from helpers.cpu_script import run_scenario_batch
        _results[batch] = run_scenario_batch([HERE, TESTS], MODULE, list(names), env)
    result = _results[batch][name]
    if result.startswith("skip: "):
        pytest.skip(result[6:])
    assert result == "ok", result




def _shm_names() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


# ------------------------------------------------------------------ sharing arrays (children)



def _s_sharing(method: str) -> None:
    ctx = amp.get_context(method)
    before = _shm_names()
    for _ in range(2 if method == "fork" else 1):
        # the child's writes reach the parent's array
        x = acc.zeros((5, 5), device="cpu")
        q, filled = ctx.Queue(), ctx.Event()
        q.put([x, x])
        p = ctx.Process(target=_c_fill_first, args=(q, filled), daemon=True)
        p.start()
        assert filled.wait(T)
        assert (x.numpy() == 4).all()
        p.join(T)
        assert p.exitcode == 0
        # the parent receives the child's memory; one array sent twice is one memory here
        q, done = ctx.Queue(), ctx.Event()
        p = ctx.Process(target=_c_send_twice, args=(q, done), daemon=True)
        p.start()
        t1, t2 = q.get(timeout=T), q.get(timeout=T)
        assert (t1.numpy() == 1).all() and (t2.numpy() == 1).all()
        assert t1.data_ptr() == t2.data_ptr() and t1.dtype == t2.dtype
        del t1, t2
        gc.collect()
        done.set()
        p.join(T)
        assert p.exitcode == 0
    assert not any("accelrt" in n for n in _shm_names() - before), _shm_names() - before



def _s_pool(method: str) -> None:
    ctx = amp.get_context(method)
    with ctx.Pool(2) as pool:
        buffers = [acc.zeros((2, 2), device="cpu") for _ in range(4)]
        results = pool.map(_c_pool_fill, buffers, 1)
        assert len(results) == len(buffers)
        assert all((r.numpy() == 5).all() for r in results)
        assert all((b.numpy() == 4).all() for b in buffers)


class _AddThree(amp.Process):
    """A Process subclass that keeps an array as an attribute (the default start method)."""

    def __init__(self, a: acc.Array) -> None:
        super().__init__(daemon=True)
        self.a = a

    def run(self) -> None:
        self.a.copy_(self.a.numpy() + 3)
        acc.synchronize("cpu")


def _s_inherit() -> None:
    a = acc.zeros((5, 5), device="cpu")
    p = _AddThree(a)
    p.start()
    p.join(T)
    assert p.exitcode == 0
    assert (a.numpy() == 3).all()



def _s_memory_allocation() -> None:
    ctx = amp.get_context("fork")
    q, done = ctx.Queue(), ctx.Event()
    p = ctx.Process(target=_c_send_and_delete, args=(q, done, 5, 5, "int32"))
    p.start()
    got = [q.get(timeout=T) for _ in range(5)]
    for i, t in enumerate(got):
        assert t.dtype == np.int32 and (t.numpy() == i).all()
    done.set()
    p.join(T)
    assert p.exitcode == 0
    # on cpu, as for torch's CPU tensors, what was received stays valid after the producer
    # exited (a CUDA producer's exit would invalidate it: docs/multiprocessing.md)
    assert [t.numpy().tolist() for t in got] == [[i] * 5 for i in range(5)]




def _s_ipc_no_deadlock() -> None:
    ctx = amp.get_context("fork")
    q, actor_done = ctx.Queue(1), ctx.Event()
    procs = [ctx.Process(target=_c_actor, args=(q, actor_done, 100)),
             ctx.Process(target=_c_learner, args=(q, actor_done, 100))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(T)
    assert [p.exitcode for p in procs] == [0, 0]




def _s_send_many() -> None:
    n, size = 40, 5
    ctx = amp.get_context("fork")
    q1, q2, q3 = ctx.Queue(), ctx.Queue(), ctx.Queue()
    e1, e2, e3 = ctx.Event(), ctx.Event(), ctx.Event()
    procs = [ctx.Process(target=_c_send_and_delete, args=(q1, e1, n, size, "int64")),
             ctx.Process(target=_c_forward_copies, args=(q1, q2, e2, n)),
             ctx.Process(target=_c_sum_received, args=(q2, q3, e3, n, size))]
    for p in procs:
        p.start()
    result = q3.get(timeout=T)
    assert result.numpy().tolist() == [n * (n - 1) // 2] * size
    del result
    gc.collect()
    for e in (e1, e2, e3):
        e.set()
    for p in procs:
        p.join(T)
        assert p.exitcode == 0



def _s_small_arrays_two_devices() -> None:
    assert acc.cpu.device_count() == 2
    ctx = amp.get_context("fork")
    arrays = [acc.asarray(np.arange(i * 5.0, (i + 1) * 5.0, dtype=np.float32),
                          device=f"cpu:{i % 2}", copy=True) for i in range(5)]
    inq, outq = ctx.Queue(), ctx.Queue()
    inq.put(arrays)
    p = ctx.Process(target=_c_report_on_device_1, args=(inq, outq))
    p.start()
    results = [outq.get(timeout=T) for _ in range(5)]
    p.join(T)
    assert p.exitcode == 0
    for i, (total, index, numel) in enumerate(results):
        assert total == float(np.arange(i * 5.0, (i + 1) * 5.0).sum())
        assert index == i % 2 and numel == 5
    del arrays
    gc.collect()
    assert amp.ipc_collect() == 0          # every consumer released what it received
    assert acc.memory.memory_allocated("cpu:0") == 0
    assert acc.memory.memory_allocated("cpu:1") == 0



def _s_mixed_types() -> None:
    ctx = amp.get_context("fork")
    q, acks = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_c_mixed_types, args=(q, acks))
    p.start()
    for _ in range(10):
        floats, bytes_ = q.get(timeout=T), q.get(timeout=T)
        assert floats.dtype == np.float32 and (floats.numpy() == 1).all()
        assert bytes_.dtype == np.uint8 and (bytes_.numpy() == 0).all()
        del floats, bytes_
        acks.put(True)
    p.join(T)
    assert p.exitcode == 0



def _s_rebuild() -> None:
    ctx = amp.get_context("fork")
    q, done = ctx.Queue(), ctx.Event()
    p = ctx.Process(target=_c_send_reductions, args=(q, done))
    p.start()
    rebuilt = [amp.reductions.rebuild_array(*spec) for spec in q.get(timeout=T)]
    assert [a.numpy().tolist() for a in rebuilt] == [[1.0], [1.0]]
    del rebuilt
    gc.collect()
    done.set()
    p.join(T)
    assert p.exitcode == 0


def _s_fork_after_init() -> None:
    # the cpu backend works in a child forked after the parent used it (docs/multiprocessing.md)
    a = acc.full((4,), 1.0, device="cpu")
    ctx = amp.get_context("fork")
    out = ctx.SimpleQueue()
    p = ctx.Process(target=_c_use_cpu, args=(out,))
    p.start()
    assert out.get() == [2.0] * 4
    p.join(T)
    assert p.exitcode == 0 and (a.numpy() == 1).all()



def _s_opencl_fork_after_init() -> None:
    acc.zeros((4,), device="opencl")          # the parent initialises OpenCL
    ctx = amp.get_context("fork")
    out = ctx.SimpleQueue()
    p = ctx.Process(target=_c_use_opencl, args=(out,))
    p.start()
    is_runtime_error, message = out.get()
    p.join(T)
    assert is_runtime_error, message
    assert "Cannot re-initialize OpenCL in forked subprocess" in message, message



# ------------------------------------------------------------------ events between processes


def _s_event_orders_two_processes() -> None:
    ctx = amp.get_context("spawn")
    q, ready, done = ctx.Queue(), ctx.Event(), ctx.Event()
    p = ctx.Process(target=_c_multiply_two, args=(q, ready, done))
    p.start()
    assert ready.wait(T)
    s = acc.Stream("cpu")
    gate = threading.Event()
    with acc.cpu.stream(s):
        a = acc.full((4,), 1.0, device="cpu")
        s.synchronize()
        _host_func(s, lambda: gate.wait(T))   # holds the producer's work back
        ev = acc.cpu.Event(interprocess=True)
        a.fill_(2.0)                          # torch: add_(1) after a sleep kernel
        ev.record()
        q.put((ev, a))
        assert done.wait(T)                   # the consumer queued its work behind ev
        gate.set()
        ev.synchronize()                      # the consumer's record, after its doubling
        assert a.numpy().tolist() == [4.0] * 4
    p.join(T)
    assert p.exitcode == 0



def _s_event_as_argument() -> None:
    ev = acc.cpu.Event(enable_timing=False, interprocess=True)
    assert ev.query()
    ctx = amp.get_context("spawn")
    p2c, c2p = ctx.SimpleQueue(), ctx.SimpleQueue()
    p = ctx.Process(target=_c_synchronize, args=(ev, p2c, c2p))
    p.start()
    c2p.get()
    gate = threading.Event()
    _host_func(acc.cpu.current_stream(), lambda: gate.wait(T))
    ev.record()
    p2c.put(0)
    assert not ev.query()
    gate.set()
    assert c2p.get() is True               # the child's synchronize waited for the record
    assert ev.query()
    p.join(T)
    assert p.exitcode == 0



def _s_event_handle_importer() -> None:
    e0 = acc.cpu.Event(enable_timing=False, interprocess=True)
    assert e0.query()
    ctx = amp.get_context("spawn")
    p2c, c2p = ctx.SimpleQueue(), ctx.SimpleQueue()
    p = ctx.Process(target=_c_import_and_synchronize, args=(e0.ipc_handle(), p2c, c2p))
    p.start()
    c2p.get()
    gate = threading.Event()
    _host_func(acc.cpu.current_stream(), lambda: gate.wait(T))
    e0.record()
    p2c.put(0)
    assert not e0.query()
    gate.set()
    assert c2p.get() is True
    assert e0.query()
    p2c.put(1)
    p.join(T)
    assert p.exitcode == 0



def _s_event_handle_exporter() -> None:
    e0 = acc.cpu.Event(enable_timing=False, interprocess=True)
    ctx = amp.get_context("spawn")
    p2c, c2p = ctx.SimpleQueue(), ctx.SimpleQueue()
    p = ctx.Process(target=_c_record_imported, args=(e0.ipc_handle(), p2c, c2p))
    p.start()
    c2p.get()                               # the child recorded e0 on its stream
    assert not e0.query()
    p2c.put("seen pending")
    e0.synchronize()
    assert e0.query()
    p2c.put("done")
    p.join(T)
    assert p.exitcode == 0


def _s_event_handle_two_devices() -> None:
    assert acc.cpu.device_count() == 2
    with acc.cpu.device(0):
        e0 = acc.cpu.Event(enable_timing=False, interprocess=True)
    with acc.cpu.device(1):
        h0 = e0.ipc_handle()                # an event not recorded yet, another device
    with acc.cpu.device(0):
        e1 = acc.cpu.Event(enable_timing=False, interprocess=True)
        stream = acc.cpu.Stream()
        e1.record(stream)
    with acc.cpu.device(1):
        h1 = e1.ipc_handle()                # a recorded one, from another device
    assert isinstance(h0, bytes) and isinstance(h1, bytes) and h0 != h1
    assert e1.device.index == 0


# ------------------------------------------------------------------ spawn / start_processes












def _raises(exc_type: type[BaseException], pattern: str, fn: Any, *args: Any,
            **kwargs: Any) -> Any:
    try:
        fn(*args, **kwargs)
    except exc_type as exc:
        assert re.search(pattern, str(exc)), (pattern, str(exc))
        return exc
    raise AssertionError(f"{fn.__name__} did not raise {exc_type.__name__}")


def _s_start_processes(method: str) -> None:
    run = amp.start_processes
    # spawn repeats only the cases whose arguments travel differently (pickled, not forked);
    # the failure reports are the same code for both (spawn's own are in _s_spawn_only)
    full = method == "fork"
    # test_success, test_success_non_blocking
    assert run(_c_nothing, nprocs=2, start_method=method) is None
    context = run(_c_nothing, nprocs=2, join=False, start_method=method)
    assert isinstance(context, amp.ProcessContext)
    assert len(context.pids()) == 2 and all(isinstance(pid, int) for pid in context.pids())
    context.join(timeout=None)
    context.join(timeout=None)
    assert context.join(timeout=None) is True
    # test_first_argument_index
    q = amp.get_context(method).SimpleQueue()
    run(_c_put_index, args=(q,), nprocs=2, start_method=method)
    assert sorted([q.get(), q.get()]) == [0, 1]
    if not full:
        return
    # test_exception_single
    for i in range(2):
        exc = _raises(amp.ProcessRaisedException,
                      f"\nValueError: legitimate exception from process {i}$",
                      run, _c_raise_in, args=(i,), nprocs=2, start_method=method)
        assert exc.error_index == i and isinstance(exc.error_pid, int)
        assert str(exc).startswith(f"\n\n-- Process {i} terminated with the following error:\n")
    # test_exception_all
    _raises(amp.ProcessRaisedException,
            "\nValueError: legitimate exception from process (0|1)$",
            run, _c_raise_all, nprocs=2, start_method=method)
    # test_terminate_signal
    exc = _raises(amp.ProcessExitedException, "process 0 terminated with signal (SIGABRT|SIGIOT)",
                  run, _c_abort_first, nprocs=2, start_method=method)
    assert exc.exit_code == -signal.SIGABRT and exc.signal_name in ("SIGABRT", "SIGIOT")
    assert exc.error_index == 0
    # test_terminate_exit
    exc = _raises(amp.ProcessExitedException, "process 0 terminated with exit code 123",
                  run, _c_exit_first, args=(123,), nprocs=2, start_method=method)
    assert exc.exit_code == 123 and exc.signal_name is None
    # test_success_first_then_exception
    _raises(amp.ProcessRaisedException, "ValueError: legitimate exception",
            run, _c_succeed_first_then_raise, args=(123,), nprocs=2, start_method=method)
    # torch 2.15: a KeyboardInterrupt while the parent lives is a failure (exit 130)
    exc = _raises(amp.ProcessRaisedException, "KeyboardInterrupt",
                  run, _c_keyboard_interrupt, nprocs=1, start_method=method)
    assert exc.error_index == 0


def _s_spawn_only() -> None:
    # SpawnTest.test_exception_raises: fn(i) without its second argument raises TypeError
    _raises(amp.ProcessRaisedException, "TypeError", amp.spawn,
            _c_succeed_first_then_raise, args=(), nprocs=1)
    # SpawnTest.test_signal_raises
    context = amp.spawn(_c_forever, args=(), nprocs=1, join=False)
    assert context is not None
    for pid in context.pids():
        os.kill(pid, signal.SIGTERM)
    exc = _raises(amp.ProcessExitedException, "process 0 terminated with signal SIGTERM",
                  context.join)
    assert exc.exit_code == -signal.SIGTERM and exc.signal_name == "SIGTERM"
    # SpawnTest._test_process_exited (its exit-code check, which torch's test never reaches)
    exc = _raises(amp.ProcessExitedException, "process 0 terminated with exit code 12",
                  amp.spawn, _c_exit_12, args=(), nprocs=1)
    assert exc.exit_code == 12 and exc.error_index == 0


# ------------------------------------------------------------------ the tests

@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_sharing_both_ways(method: str) -> None:
    """mirrors test_multiprocessing.py test_fd_sharing (fork, the default context) and
    test_cuda_simple (spawn): a child's fill of a queued array reaches the parent; an array a
    child sends twice is one memory in the parent; no file is left in /dev/shm."""
    _scenario("sync", f"sharing:{method}")


def test_pool_map_shares_arguments_and_results() -> None:
    """mirrors test_multiprocessing.py test_fd_pool: Pool.map's workers write into the
    arrays passed to them, and the arrays they return arrive with their contents."""
    _scenario("sync", "pool:fork")


def test_process_subclass_inherits_an_array() -> None:
    """mirrors test_multiprocessing.py test_inherit_tensor: a Process subclass holding an array
    writes to it in the child and the parent sees the write."""
    _scenario("sync", "inherit")


def test_received_arrays_outlive_the_producers_references() -> None:
    """mirrors test_multiprocessing.py test_cuda_memory_allocation: arrays a producer deleted
    right after queueing them arrive whole (and, on cpu, outlive the producer)."""
    _scenario("sync", "memory_allocation")


def test_bounded_queue_of_array_dicts_does_not_deadlock() -> None:
    """mirrors test_multiprocessing.py test_cuda_ipc_deadlock (dicts of arrays for the LSTM's
    state dict): a learner fills a one-slot queue whenever it is not full, an actor empties
    it whenever it is not empty; both end."""
    _scenario("sync", "ipc_no_deadlock")


def test_send_many_through_three_processes() -> None:
    """mirrors test_multiprocessing.py test_cuda_send_many (fewer arrays): producer, copier
    and summing consumer chained by queues."""
    _scenario("sync", "send_many")


def test_small_arrays_on_two_devices() -> None:
    """mirrors test_multiprocessing.py test_cuda_small_tensors: small arrays of two devices
    (sharing segments) arrive on their own devices in a consumer whose current device is 1;
    ipc_collect then frees everything."""
    _scenario("sync", "small_arrays_two_devices")


def test_mixed_dtypes_from_one_segment() -> None:
    """mirrors test_multiprocessing.py test_mixed_types_cuda_sharing: float32 and uint8 blocks
    of one segment, sent in turn, keep their contents and dtypes."""
    _scenario("sync", "mixed_types")


def test_rebuild_from_reduced_fields() -> None:
    """mirrors test_multiprocessing.py test_rebuild_cuda_tensor: the fields a producer's
    reduction makes, sent as plain data, rebuild the arrays with
    ``reductions.rebuild_array``."""
    _scenario("sync", "rebuild")


@pytest.mark.parametrize("streams", ["sync", "async"])
def test_fork_after_the_cpu_backend_is_initialised(streams: str) -> None:
    """mirrors test_multiprocessing.py test_cuda_bad_call / test_wrong_cuda_fork for the cpu
    backend, with synchronous and asynchronous (worker-thread) streams: as
    docs/multiprocessing.md documents, a forked child uses it normally (CUDA's "Cannot
    re-initialize CUDA in forked subprocess" needs a GPU)."""
    _scenario(streams, "fork_after_init")


def test_opencl_refuses_a_forked_child_as_torch_refuses_cuda() -> None:
    """mirrors test_multiprocessing.py test_cuda_bad_call on OpenCL (PoCL's CPU device): a
    child forked after the parent initialised OpenCL gets a RuntimeError with torch's words."""
    _scenario("sync", "opencl_fork_after_init")


def test_event_orders_work_of_two_processes() -> None:
    """mirrors test_multiprocessing.py test_event: an interprocess event sent with an array
    orders the consumer's doubling after the producer's write, and the consumer's record of it
    is what the producer's synchronize waits for."""
    _scenario("async", "event_orders_two_processes")


def test_event_passed_as_process_argument() -> None:
    """mirrors test_multiprocessing.py test_event_multiprocess."""
    _scenario("async", "event_as_argument")


def test_event_handle_importer() -> None:
    """mirrors test_multiprocessing.py test_event_handle_importer."""
    _scenario("async", "event_handle_importer")


def test_event_handle_exporter() -> None:
    """mirrors test_multiprocessing.py test_event_handle_exporter: the child records the
    parent's event on its own stream; the parent sees it pending, then synchronizes on it."""
    _scenario("async", "event_handle_exporter")


def test_event_handle_on_another_device() -> None:
    """mirrors test_multiprocessing.py test_event_handle_multi_gpu: the handle of an event
    of device 0, recorded or not, is taken while device 1 is current."""
    _scenario("sync", "event_handle_two_devices")


def test_preserve_sharing_within_one_process() -> None:
    """mirrors test_multiprocessing.py test_fd_preserve_sharing: a list holding one array twice,
    put in a queue and got back in the same process, holds the same memory (one mapping for
    both), equal to the original and changed by writes to it."""
    x = acc.randn((5, 5), device="cpushm_s35:0")
    q = amp.Queue()
    try:
        q.put([x, x])
        new = q.get(timeout=T)
        assert [a.numpy().tolist() for a in new] == [x.numpy().tolist()] * 2
        assert new[0].data_ptr() == new[1].data_ptr()
        x.fill_(7)
        acc.synchronize("cpushm_s35:0")
        assert (new[0].numpy() == 7).all() and (new[1].numpy() == 7).all()
        del new
    finally:
        q.close()
        q.join_thread()
        del x
        gc.collect()
        amp.ipc_collect()       # the shares' entries go back to the allocator


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_empty_array_through_a_queue(dtype: str) -> None:
    """mirrors test_multiprocessing.py test_empty_tensor_sharing (private cpu memory: an
    empty array needs no shared memory)."""
    q = amp.Queue()
    try:
        empty = acc.empty((0,), dtype=dtype, device="cpu")
        q.put(empty)
        out = q.get(timeout=T)
        assert out.shape == (0,) and out.dtype == np.dtype(dtype) and out.device == empty.device
    finally:
        q.close()
        q.join_thread()


def test_sharing_strategy_set_and_invalid() -> None:
    """mirrors test_multiprocessing.py's strategy use (fs_sharing's set/restore): every
    strategy of get_all_sharing_strategies() can be set and read back; an invalid one raises
    torch 2.15's AssertionError("invalid sharing strategy ...")."""
    before = amp.get_sharing_strategy()
    assert before in amp.get_all_sharing_strategies()
    try:
        for strategy in sorted(amp.get_all_sharing_strategies()):
            amp.set_sharing_strategy(strategy)
            assert amp.get_sharing_strategy() == strategy
        for bad in ("bogus", None):
            with pytest.raises(AssertionError, match="invalid sharing strategy"):
                amp.set_sharing_strategy(bad)  # type: ignore[arg-type]
    finally:
        amp.set_sharing_strategy(before)


def test_ipc_collect_without_shares() -> None:
    """mirrors test_multiprocessing.py's tearDown (torch.cuda.ipc_collect between tests):
    the device modules' ipc_collect runs with nothing shared."""
    assert acc.cpu.ipc_collect() is None
    assert amp.ipc_collect() >= 0


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_start_processes_suite(method: str) -> None:
    """mirrors test_multiprocessing_spawn.py's _TestMultiProcessing (SpawnTest and ForkTest):
    test_success, test_success_non_blocking, test_first_argument_index,
    test_exception_single, test_exception_all, test_terminate_signal, test_terminate_exit,
    test_success_first_then_exception, plus torch 2.15's KeyboardInterrupt rule."""
    _scenario("launch", f"start_processes:{method}")


def test_spawn_specific_cases() -> None:
    """mirrors test_multiprocessing_spawn.py SpawnTest.test_exception_raises,
    test_signal_raises and _test_process_exited."""
    _scenario("launch", "spawn_only")
