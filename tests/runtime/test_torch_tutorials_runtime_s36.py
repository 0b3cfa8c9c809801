"""PyTorch tutorials and notes of the runtime, ported to accelrt and checked to do what they
say: "A guide on good usage of ``non_blocking`` and ``pin_memory()``" (pytorch/tutorials
``intermediate_source/pinmem_nonblock.py``), the device-agnostic idiom of the tutorials
(``torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else
"cpu"``), the memory-snapshot recipe of "Understanding GPU memory" (record the history with a
bound, dump it to a pickle, stop recording) and the "Reuse buffers passed through a Queue"
advice of torch's ``docs/source/notes/multiprocessing.rst``. Tensors become ``acc.Array``s
(device) and numpy arrays (host); the tutorials' arithmetic is done in numpy.

What last session's tests/runtime/test_torch_docs_examples_s35.py (notes/cuda.md) and
test_torch_suite_streams_s35.py (test_copy_non_blocking) check is not repeated here.
``torch.cuda`` is a device module: a cpu backend whose streams run on worker threads (a
non-blocking copy is really pending until a synchronization) and a
:class:`~accelrt.testing.SimulatedBackend` for the snapshot recipe.
"""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt.backends.cpu import CpuBackend
from accelrt.testing import SimulatedBackend

ASYNC, SIM = "s36tuacpu", "s36tusim"

_backends = module_backends({
    ASYNC: lambda: CpuBackend(num_devices=1, async_streams=True, name=ASYNC),
    SIM: lambda: SimulatedBackend(device_count=1, name=SIM),
})


@pytest.fixture
def acpu() -> Iterator[Any]:
    """The asynchronous cpu backend's device module, the current accelerator, device 0."""
    mod: Any = acc.backends.device_module(ASYNC)
    acc.set_current_accelerator(ASYNC)
    mod.set_device(0)
    yield mod
    mod.synchronize()
    gc.collect()
    mod.empty_cache()


@pytest.fixture(params=[ASYNC, SIM])
def m(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Each backend's device module, current, device 0; history recording stopped after."""
    mod: Any = acc.backends.device_module(request.param)
    acc.set_current_accelerator(request.param)
    mod.set_device(0)
    try:
        yield mod
    finally:
        mod.memory._record_memory_history(enabled=None)
        mod.synchronize()
        gc.collect()
        mod.empty_cache()


# ---------------------------------------------------------------------------- pinmem_nonblock

def _to_device(host: np.ndarray, non_blocking: bool) -> acc.Array:
    """``tensor.to(device, non_blocking=...)`` for a host array."""
    out = acc.empty(host.shape, dtype=host.dtype)
    out.copy_(host, non_blocking=non_blocking)
    return out


def test_many_non_blocking_copies_then_one_synchronize(acpu: Any) -> None:
    """mirrors pinmem_nonblock.py ``copy_to_device`` / ``copy_to_device_nonblocking`` (pageable
    and pinned sources): one ``synchronize()`` after all the non-blocking copies makes every
    result equal to its source, as the blocking loop's results are."""
    rng = np.random.default_rng(0)
    pageable = [rng.standard_normal(1000).astype(np.float32) for _ in range(50)]
    pinned = [acc.pin_memory(t) for t in pageable]
    assert all(acc.is_pinned(p) for p in pinned) and not acc.is_pinned(pageable[0])
    blocking = [_to_device(t, False) for t in pageable]
    # a blocking copy is done when it returns: nothing is left on the stream
    assert acpu.current_stream().query()
    for sources in (pageable, pinned):
        results = [_to_device(t, True) for t in sources]
        acpu.synchronize()
        for src, got, ref in zip(sources, results, blocking):
            np.testing.assert_array_equal(got.numpy(), src)
            np.testing.assert_array_equal(got.numpy(), ref.numpy())
    del blocking, results


def test_pin_then_copy_and_pin_memory_is_blocking(acpu: Any) -> None:
    """mirrors pinmem_nonblock.py ``pin_copy_to_device`` / ``pin_copy_to_device_nonblocking``
    and its note that ``pin_memory()`` is blocking on the host: the pinned copy holds the data
    when it returns (a later write to the pageable source does not reach it), and the copies
    made from it, blocking or not, read those values."""
    src = np.arange(4096, dtype=np.float64)
    pinned = acc.pin_memory(src)
    src[:] = -1.0
    assert acc.is_pinned(pinned) and pinned[0] == 0.0 and pinned[-1] == 4095.0
    a = _to_device(pinned, False)
    b = _to_device(pinned, True)
    acpu.synchronize()
    assert a.tolist() == b.tolist() == list(np.arange(4096, dtype=np.float64))
    # a pinned array made by a factory: pin_memory=True, then sent to the device
    p = acc.randn(1000, pin_memory=True)
    assert isinstance(p, np.ndarray) and acc.is_pinned(p) and p.dtype == np.float32
    d = _to_device(p, True)
    acpu.synchronize()
    np.testing.assert_array_equal(d.numpy(), p)
    del a, b, d


def test_device_to_host_read_after_non_blocking_work(acpu: Any) -> None:
    """mirrors pinmem_nonblock.py "Other copy directions (GPU -> CPU)": the tutorial shows a
    non-blocking device-to-host copy read too early, and the fix, a synchronization before the
    read. accelrt's host read is ``numpy()``, which waits for the array's stream (torch's
    blocking ``to("cpu")``), so the mean of rows of 1..99999 (the tutorial's 100 rows of
    1..999999, made smaller) is 50000 every time, even right after non-blocking work that
    wrote them."""
    row = np.arange(1, 100_000, dtype=np.float64)
    a = acc.empty((20, 99_999), dtype="float64")
    for _ in range(3):
        a.fill_(0.0)
        a.copy_(row, non_blocking=True)          # broadcast into every row, still queued
        assert a.numpy().mean() == 50_000.0
    del a


# ---------------------------------------------------------------------------- accelerator idiom

def test_device_agnostic_idiom(acpu: Any) -> None:
    """mirrors the tutorials' ``device = torch.accelerator.current_accelerator().type if
    torch.accelerator.is_available() else "cpu"`` followed by ``.to(device)`` and factories
    with ``device=device``: the type names the current accelerator, and arrays made or moved
    with it land on its current device."""
    device = acc.current_accelerator().type if acc.is_available() else "cpu"
    assert device == ASYNC
    assert acc.current_accelerator(check_available=True) == acc.device(ASYNC)
    x = acc.zeros((2, 3), device=device)
    y = acc.asarray(np.ones((2, 3), dtype=np.float32)).to(device)
    assert x.device == y.device == acc.device(ASYNC, 0)
    with acc.device_index(0):
        z = acc.full((4,), 2.5, device=device)
    acc.synchronize()
    assert z.tolist() == [2.5] * 4 and y.tolist() == [[1.0] * 3] * 2
    del x, y, z


# ---------------------------------------------------------------------------- memory snapshots

def test_snapshot_recipe_record_dump_stop(m: Any, tmp_path: Path) -> None:
    """mirrors the "Understanding GPU memory" recipe (``start_record_memory_history``,
    ``export_memory_snapshot``, ``stop_record_memory_history``): record with
    ``max_entries``, dump to ``<prefix>.pickle``, stop with ``enabled=None``. The pickle holds
    ``segments`` and ``device_traces`` whose events name the line that allocated; the bound
    keeps the newest entries (torch's ring buffer); after the stop nothing more is recorded
    and the history is gone (torch clears its buffer when recording stops)."""
    m.memory._record_memory_history(max_entries=100_000)
    arrays = [acc.empty(1 << 18) for _ in range(3)]
    line = sys._getframe().f_lineno - 1
    del arrays[0]
    path = tmp_path / "s36_snapshot.pickle"
    m.memory._dump_snapshot(str(path))
    m.memory._record_memory_history(enabled=None)
    with path.open("rb") as f:
        snap = pickle.load(f)
    assert {"segments", "device_traces"} <= set(snap)
    trace = snap["device_traces"][0]
    actions = [e["action"] for e in trace]
    assert actions.count("alloc") == 3 and "free_requested" in actions
    alloc = next(e for e in trace if e["action"] == "alloc")
    assert alloc["size"] == 1 << 20
    assert (alloc["frames"][0]["filename"], alloc["frames"][0]["line"]) == (__file__, line)
    live = [b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    assert len(live) == 2
    more = acc.empty(16)
    assert m.memory._snapshot()["device_traces"][0] == []
    # a bound of 2 keeps the two newest events
    m.memory._record_memory_history(max_entries=2)
    extra = [acc.empty(1 << 10) for _ in range(3)]
    assert [e["action"] for e in m.memory._snapshot()["device_traces"][0]] == ["alloc"] * 2
    del arrays, more, extra


# ---------------------------------------------------------------------------- multiprocessing

def test_buffer_sent_back_through_a_simple_queue(tmp_path: Path) -> None:
    """mirrors notes/multiprocessing.rst "CUDA in multiprocessing" (a ``spawn`` context from
    ``get_context``), "Avoiding and fighting deadlocks" (``SimpleQueue``) and "Reuse buffers
    passed through a Queue": the consumer writes the producer's array in place (its memory is
    shared, not copied) and sends the buffer back, and the producer reads what it wrote."""
    code = textwrap.dedent("""
        import accelrt as acc
        import accelrt.multiprocessing as mp

        def consumer(inq, outq, done):
            a = inq.get()
            a.fill_(7.0)
            acc.synchronize()
            outq.put(a)
            done.wait()

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            inq, outq, done = ctx.SimpleQueue(), ctx.SimpleQueue(), ctx.Event()
            a = acc.zeros(16, device="cpu:0")
            p = ctx.Process(target=consumer, args=(inq, outq, done))
            p.start()
            inq.put(a)
            b = outq.get()
            print(a.tolist() == [7.0] * 16, b.tolist() == [7.0] * 16)
            del b
            done.set()
            p.join()
            print(p.exitcode)
    """)
    script = tmp_path / "queue_buffers.py"   # spawn imports the main module from its file
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELRT_")}
    env.update(ACCELRT_CPU_SHARED_MEMORY="1", ACCELRT_ACCELERATOR="cpu")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True", "True", "0"], r.stdout + r.stderr[-2000:]
