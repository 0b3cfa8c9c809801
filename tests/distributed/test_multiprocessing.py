"""accelrt.multiprocessing: sharing arrays and interprocess events between processes.

In-process tests pickle with ``ForkingPickler`` and unpickle in the same process (the
consumer path still maps the producer's segment a second time through ``/proc/<pid>/fd``, so
the two arrays are distinct mappings of one memory). Tests that need two processes run a
script in a subprocess with a hard timeout (``tests/helpers/mp_scripts.py``), so a hang fails
the test instead of the suite. CUDA IPC tests are in ``tests/distributed/test_multiprocessing_cuda.py``.
"""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
import accelrt.multiprocessing as amp
from accelrt import _backend
from accelrt.backends.cpu import CpuBackend
from accelrt.multiprocessing import _refs, reductions

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tests/
SCRIPTS = os.path.join(HERE, "helpers", "mp_scripts.py")


# cpu backends with the shared-memory option, one per stream mode (allocators are per backend
# name, so each mode keeps its own name); closed and unregistered after the module
_backends = module_backends({
    f"cpushm_{mode}": (lambda mode=mode: CpuBackend(shared_memory=True,
                                                     async_streams=mode == "async",
                                                     name=f"cpushm_{mode}"))
    for mode in ("sync", "async")})
_BASE = [0]


def _kept() -> int:
    """Entries this process still keeps for consumers, beyond those at the test's start."""
    return amp.ipc_collect() - _BASE[0]


@pytest.fixture(params=["sync", "async"])
def shm(request: pytest.FixtureRequest) -> Iterator[str]:
    """Device 0 of ``cpushm_sync`` or ``cpushm_async``, the module's shared-memory backends."""
    name = f"cpushm_{request.param}"
    gc.collect()
    _BASE[0] = amp.ipc_collect()      # entries other tests left in flight (never received)
    yield f"{name}:0"
    gc.collect()
    amp.ipc_collect()


def _roundtrip(obj: Any) -> Any:
    return pickle.loads(ForkingPickler.dumps(obj))


def _allocated(dev: str) -> int:
    return int(acc.memory.memory_allocated(dev))


# ---------------------------------------------------------------------- contents and lifetime

def test_shared_array_is_the_same_memory(shm: str) -> None:
    a = acc.asarray(np.arange(1000, dtype=np.int32), device=shm, copy=True)
    b = _roundtrip(a)
    assert b.shape == a.shape and b.dtype == a.dtype and b.device == a.device
    assert b.data_ptr() != a.data_ptr()                 # another mapping ...
    np.testing.assert_array_equal(b.numpy(), np.arange(1000))
    b.fill_(5)                                          # ... of the same memory
    acc.synchronize(shm)
    assert (a.numpy() == 5).all()
    a.copy_(np.full(1000, 9, np.int32))
    acc.synchronize(shm)
    assert (b.numpy() == 9).all()


def test_block_inside_a_segment_is_shared_at_its_offset(shm: str) -> None:
    first = acc.zeros(64, dtype="uint8", device=shm)     # same small segment
    second = acc.asarray(np.arange(64, dtype=np.uint8), device=shm, copy=True)
    got = _roundtrip(second)
    np.testing.assert_array_equal(got.numpy(), np.arange(64))
    assert (first.numpy() == 0).all()
    seg = second._mem.alloc.segment_of(second.data_ptr())
    assert seg is not None and second.data_ptr() - seg[0] > 0


def test_producer_memory_lives_while_a_consumer_holds_it(shm: str) -> None:
    base = _allocated(shm)
    a = acc.asarray(np.arange(256, dtype=np.float64), device=shm, copy=True)
    ptr = a.data_ptr()
    b = _roundtrip(a)
    del a
    gc.collect()
    assert _kept() == 1                       # still held by the consumer
    assert _allocated(shm) > base                       # not returned to the allocator
    np.testing.assert_array_equal(b.numpy(), np.arange(256))
    del b
    gc.collect()
    assert _kept() == 0                       # consumer released: freed
    assert _allocated(shm) == base
    again = acc.empty(256, dtype="float64", device=shm)  # the caching allocator reuses it
    assert again.data_ptr() == ptr


def test_unreceived_pickle_keeps_memory_until_received(shm: str) -> None:
    a = acc.full((16,), 1, device=shm)
    data = ForkingPickler.dumps(a)
    del a
    gc.collect()
    assert _kept() == 1                       # a pickle is in flight
    b = pickle.loads(data)
    assert (b.numpy() == 1).all()
    c = pickle.loads(data)                              # loading it twice holds it twice
    del b
    gc.collect()
    assert _kept() == 1
    assert (c.numpy() == 1).all()
    del c
    gc.collect()
    assert _kept() == 0
    with pytest.raises(ValueError, match="already released"):
        pickle.loads(data)                              # the producer freed it


def test_received_array_can_be_shared_again(shm: str) -> None:
    a = acc.asarray(np.arange(8, dtype=np.int64), device=shm, copy=True)
    b = _roundtrip(a)
    data = ForkingPickler.dumps(b)                      # pass it on: one more in flight
    del a, b
    gc.collect()
    assert _kept() == 1
    c = pickle.loads(data)
    np.testing.assert_array_equal(c.numpy(), np.arange(8))
    del c
    gc.collect()
    assert _kept() == 0


def test_one_mapping_per_segment_in_a_consumer(shm: str) -> None:
    a = acc.zeros(16, device=shm)
    b = acc.full((16,), 1, device=shm)                        # same segment as a
    ra, rb = _roundtrip(a), _roundtrip(b)
    assert ra._mem.base.opened is rb._mem.base.opened
    assert (rb.numpy() == 1).all() and (ra.numpy() == 0).all()


def test_empty_array_round_trips(shm: str) -> None:
    a = acc.empty(0, device=shm)
    b = _roundtrip(a)
    assert b.shape == (0,) and b.device == a.device


def test_plain_pickle_still_copies(shm: str) -> None:
    a = acc.full((4,), 1, device=shm)
    b = pickle.loads(pickle.dumps(a))
    b.fill_(3)
    acc.synchronize(shm)
    assert (a.numpy() == 1).all()


def test_ipc_collect_of_device_modules_collects(shm: str) -> None:
    a = acc.full((4,), 1, device=shm)
    r = _roundtrip(a)
    del a, r
    gc.collect()
    assert _refs.pending_count() == _BASE[0] + 1
    acc.cpu.ipc_collect()                               # torch.cuda.ipc_collect's place
    assert _refs.pending_count() == _BASE[0]


# ---------------------------------------------------------------------- cost of a share

class _CountingOs:
    """``os`` for :mod:`accelrt.multiprocessing._refs`, counting its reads of slots (every
    look at an entry reads its in-flight count)."""

    def __init__(self) -> None:
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def pread(self, fd: int, n: int, off: int) -> bytes:
        self.reads += 1
        return os.pread(fd, n, off)


def _received(made: list[tuple[bytes, int, bytes]]) -> None:
    """Unpickle and drop each of ``made`` (what a consumer that received them does)."""
    for ref, slot, token in made:
        _refs.claim(ref, slot, token).release()


def test_a_share_looks_at_a_bounded_number_of_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    # regression: every share walked every entry never received (N shares: N**2 / 2 reads,
    # 36 ms a share at 16,000 entries); now the last shares' entries and a few older ones
    base = amp.ipc_collect()
    counting = _CountingOs()
    monkeypatch.setattr(_refs, "os", counting)
    n = 1000
    made = [_refs.share(object()) for _ in range(n)]      # never received
    assert counting.reads <= 40 * n                     # _YOUNG + _STEP = 32 a share at most
    assert _refs.pending_count() == base + n
    counting.reads = 0
    assert amp.ipc_collect() == base + n                # ipc_collect still looks at all ...
    assert n <= counting.reads <= 2 * (base + n)        # ... once each
    _received(made)
    assert amp.ipc_collect() == base                    # ... and frees them all at once


def test_a_share_frees_what_consumers_released(shm: str) -> None:
    # the memory of a received and released share returns at the next share, however many
    # entries were never received, as when every share walked them all
    never = [_refs.share(object()) for _ in range(300)]
    kept = _refs.pending_count()
    base = _allocated(shm)
    try:
        for _ in range(40):
            a = acc.full((64,), 1.0, device=shm)
            b = pickle.loads(ForkingPickler.dumps(a))
            assert _refs.pending_count() == kept + 1
            del a, b
            gc.collect()
            assert _allocated(shm) > base                # the registry keeps it ...
            never.append(_refs.share(object()))         # ... until the next share
            assert _allocated(shm) == base
            kept += 1
    finally:
        _received(never)


def test_older_entries_released_later_are_freed_by_later_shares() -> None:
    # an entry older than the last _YOUNG shares is looked at _STEP at a time, in turn: one
    # released after many later shares is freed within len(old) / _STEP shares, without
    # ipc_collect()
    base = amp.ipc_collect()
    made = [_refs.share(object()) for _ in range(200)]
    _received(made)                                     # all released, none freed yet
    assert _refs.pending_count() == base + 200
    rounds = -(-(base + 200) // _refs._STEP) + 1
    more = [_refs.share(object()) for _ in range(rounds)]
    assert _refs.pending_count() <= base + len(more)
    _received(more)
    assert amp.ipc_collect() == base


def test_an_interrupted_ipc_collect_leaves_the_shares_working(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # regression: ipc_collect() interrupted (KeyboardInterrupt, an OSError) after freeing some
    # entries left them in the shares' lines, and a later share raised KeyError from its walk
    base = amp.ipc_collect()
    made = [_refs.share(object()) for _ in range(40)]
    _received(made)                                     # released, not freed yet
    real = _refs._free_if_released
    calls = [0]

    def interrupted(p: Any, slot: int) -> bool:
        calls[0] += 1
        if calls[0] == 5:
            raise KeyboardInterrupt
        return real(p, slot)

    monkeypatch.setattr(_refs, "_free_if_released", interrupted)
    with pytest.raises(KeyboardInterrupt):
        amp.ipc_collect()
    monkeypatch.setattr(_refs, "_free_if_released", real)
    more = [_refs.share(object()) for _ in range(80)]   # walks the lines: no KeyError
    _received(more)
    assert amp.ipc_collect() == base
    p = _refs._producer
    assert sorted([*p.young, *p.old]) == sorted(p.entries)


def test_a_share_interrupted_in_its_walk_loses_no_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    # a share interrupted while it looked at an entry took that entry out of the lines the
    # shares walk: released later, it was freed only by ipc_collect()
    base = amp.ipc_collect()
    made = [_refs.share(object()) for _ in range(40)]
    real = _refs._free_if_released

    def interrupted(p: Any, slot: int) -> bool:
        raise KeyboardInterrupt

    monkeypatch.setattr(_refs, "_free_if_released", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _refs.share(object())
    monkeypatch.setattr(_refs, "_free_if_released", real)
    p = _refs._producer
    assert sorted([*p.young, *p.old]) == sorted(p.entries)    # every entry still in a line
    _received(made)
    assert amp.ipc_collect() == base


_MAPPING_BEING_CLOSED = r"""
import gc, pickle
from multiprocessing.reduction import ForkingPickler
import accelrt as acc
import accelrt.multiprocessing
from accelrt.backends.cpu import CpuBackend

acc.backends.register("shmgate", lambda: CpuBackend(shared_memory=True, name="shmgate"))
b = acc.backends.get("shmgate")
first = acc.full((16,), 1.0, device="shmgate:0")
second = acc.full((16,), 2.0, device="shmgate:0")      # a block of the same segment
got = pickle.loads(ForkingPickler.dumps(first))
pickled = ForkingPickler.dumps(second)
received = []
close = b.ipc_close_mem_handle

def closing(index, base):
    # while the segment's last array is unmapped (here: by its finaliser), an array of the
    # same segment arrives (as on another thread of the consumer in the same moment)
    if not received:
        received.append(pickle.loads(pickled))
    close(index, base)

b.ipc_close_mem_handle = closing
del got
gc.collect()
x = received[0]
assert x.data_ptr() >= 1 << 16, hex(x.data_ptr())     # not address 0 plus its offset
assert x.numpy().tolist() == [2.0] * 16                # a mapping that is open
del x, received[:]
gc.collect()
print("ok")
"""


def test_an_array_received_while_its_segment_is_being_unmapped_gets_a_mapping() -> None:
    # regression: the mappings of received segments were in a WeakValueDictionary; an array
    # of a segment unpickled while the segment's last array's finaliser unmapped it (another
    # thread of the consumer) got that dying mapping back, already unmapped: the array
    # pointed at address 0 plus its offset, and reading it crashed the process
    proc = subprocess.run([sys.executable, "-c", _MAPPING_BEING_CLOSED], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr)


def test_sharing_strategies() -> None:
    # torch.multiprocessing on Linux: both strategies; accelrt records the choice (it shares
    # device arrays only, through descriptors or driver handles, whatever it is)
    assert amp.get_all_sharing_strategies() == {"file_descriptor", "file_system"}
    assert amp.get_sharing_strategy() == "file_descriptor"
    try:
        amp.set_sharing_strategy("file_system")
        assert amp.get_sharing_strategy() == "file_system"
    finally:
        amp.set_sharing_strategy("file_descriptor")
    assert amp.get_sharing_strategy() == "file_descriptor"
    assert amp.Queue is not None and amp.Process is not None   # the stdlib API


# ---------------------------------------------------------------------- events

def test_interprocess_event_pickles(shm: str) -> None:
    e = acc.Event(shm, interprocess=True)
    e.record()
    opened = _roundtrip(e)
    assert opened.device == e.device
    opened.synchronize()
    assert opened.query() and e.query()
    with pytest.raises(RuntimeError, match="interprocess=True"):
        ForkingPickler.dumps(acc.Event(shm))


def test_interprocess_event_orders_a_consumer_stream(shm: str) -> None:
    import threading
    b = acc.device(shm).type
    if not acc.backends.get_backend(b).config.async_streams:
        pytest.skip("needs async streams")
    gate = threading.Event()
    a = acc.zeros(1024, dtype="int32", device=shm)
    s = acc.current_stream(shm)
    acc.backends.get_backend(b).launch_host_func(0, gate.wait, s.stream_id)
    a.fill_(7)                                          # queued behind the gate
    b = _roundtrip(a)                                   # current stream waits on the event
    assert not acc.current_stream(shm).query()
    gate.set()
    np.testing.assert_array_equal(b.numpy(), np.full(1024, 7))


# ---------------------------------------------------------------------- refusals

def test_private_cpu_memory_refuses_with_the_fix() -> None:
    a = acc.zeros(4, device="cpu")
    if acc.backends.get_backend("cpu").config.shared_memory:
        pytest.skip("ACCELRT_CPU_SHARED_MEMORY is set for this run")
    with pytest.raises(ValueError, match="ACCELRT_CPU_SHARED_MEMORY=1"):
        ForkingPickler.dumps(a)


def test_borrowed_numpy_memory_refuses(shm: str) -> None:
    host = np.arange(4, dtype=np.float32)
    a = acc.asarray(host, device="cpu")
    assert a._mem.alloc is None
    with pytest.raises(ValueError, match="borrows memory.*copy=True"):
        ForkingPickler.dumps(a)


def test_expandable_segment_refuses() -> None:
    code = ("from multiprocessing.reduction import ForkingPickler\n"
            "import accelrt as acc, accelrt.multiprocessing\n"
            "a = acc.zeros(1 << 20, device='cpu')\n"
            "try:\n    ForkingPickler.dumps(a)\n"
            "except ValueError as exc:\n    print(exc)\n")
    env = dict(os.environ, ACCELRT_CPU_SHARED_MEMORY="1",
               ACCELRT_ALLOC_CONF="expandable_segments:True")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "expandable segment" in out.stdout and "expandable_segments:True" in out.stdout


def test_backend_without_ipc_refuses(shm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from helpers import register_toy
    name, toy = register_toy()
    with pytest.raises(ValueError, match=f"the {name} backend cannot share device memory"):
        toy.ipc_mem_handle(0, 4096)                     # the Backend contract's default
    b = acc.backends.get_backend(acc.device(shm).type)
    monkeypatch.setattr(b, "ipc_mem_handle",
                        lambda index, ptr: _backend.Backend.ipc_mem_handle(b, index, ptr))
    a = acc.zeros(4, device=shm)
    with pytest.raises(ValueError, match="cannot share memory between processes: the cpushm"):
        ForkingPickler.dumps(a)
    assert _kept() == 0                       # nothing registered


@pytest.mark.skipif(_backend.unavailable_reason("opencl") is not None,
                    reason="opencl backend unavailable")
def test_opencl_refuses() -> None:
    a = acc.zeros(4, device="opencl:0")
    with pytest.raises(ValueError, match="opencl backend cannot share device memory"):
        ForkingPickler.dumps(a)


# ---------------------------------------------------------------------- hostile inputs

def _args(a: Any) -> tuple[Any, ...]:
    fn, args = reductions.reduce_array(a)
    assert fn is reductions.rebuild_array
    return args


def _forge(args: tuple[Any, ...], **changes: Any) -> tuple[Any, ...]:
    names = ["seg", "seg_size", "offset", "size", "ref", "slot", "token", "ev"]
    shared = list(args[2])
    for k, v in changes.items():
        shared[names.index(k)] = v
    return (args[0], args[1], tuple(shared))


def test_forged_handles_are_refused(shm: str) -> None:
    a = acc.full((64,), 1, device=shm)
    args = _args(a)
    seg = args[2][0]
    # a segment handle naming a nonexistent fd of this process, and another process
    bad_fd = seg[:12] + (999_999).to_bytes(4, "little") + seg[16:]
    with pytest.raises(ValueError, match="does not exist any more"):
        reductions.rebuild_array(*_forge(args, seg=bad_fd))
    bad_pid = seg[:8] + (2**31 - 5).to_bytes(4, "little") + seg[12:]
    with pytest.raises(ValueError, match="does not exist any more"):
        reductions.rebuild_array(*_forge(args, seg=bad_pid))
    bad_token = seg[:-16] + bytes(16)                   # an fd of ours that is not the segment
    with pytest.raises(ValueError, match="does not exist any more"):
        reductions.rebuild_array(*_forge(args, seg=bad_token))
    with pytest.raises(ValueError, match="not a cpu shared-memory handle"):
        reductions.rebuild_array(*_forge(args, seg=b"junk"))
    # reference slots
    with pytest.raises(ValueError, match="already released|forged"):
        reductions.rebuild_array(*_forge(args, token=bytes(16)))
    with pytest.raises(ValueError, match="does not exist"):
        reductions.rebuild_array(*_forge(args, slot=10**6))
    with pytest.raises(ValueError, match="corrupt"):
        reductions.rebuild_array(*_forge(args, slot=-1))
    with pytest.raises(ValueError, match="exited|forged"):
        reductions.rebuild_array(*_forge(args, ref=bytes(24)))
    # the real pickle still works afterwards, once
    b = reductions.rebuild_array(*args)
    assert (b.numpy() == 1).all()


def test_wrong_sizes_are_refused(shm: str) -> None:
    a = acc.full((64,), 1, device=shm)
    args = _args(a)
    seg_size, offset = args[2][1], args[2][2]
    with pytest.raises(ValueError, match="inconsistent"):
        reductions.rebuild_array(*_forge(args, size=999))           # not the shape's bytes
    with pytest.raises(ValueError, match="inconsistent"):
        reductions.rebuild_array(*_forge(args, offset=seg_size))    # past the segment
    with pytest.raises(ValueError, match="inconsistent"):
        reductions.rebuild_array(*_forge(args, offset=-1))
    item = np.dtype(args[1][2]).itemsize
    n = seg_size // item + 1                            # one element more than the segment
    big = (args[0], (args[1][0], (n,), args[1][2]),
           _forge(args, size=n * item, seg_size=2 * seg_size, offset=offset)[2])
    with pytest.raises(ValueError, match="smaller than"):
        reductions.rebuild_array(*big)                  # claims a bigger segment than exists
    with pytest.raises(ValueError, match="same accelrt"):
        reductions.rebuild_array(99, args[1], args[2])
    b = reductions.rebuild_array(*args)                 # nothing leaked a hold or a mapping
    del b
    gc.collect()
    del a
    gc.collect()
    assert _kept() == 0


def test_forged_event_handles_are_refused(shm: str) -> None:
    with pytest.raises(ValueError, match="not a cpu interprocess event handle"):
        acc.Event.from_ipc_handle(shm, bytes(64))
    e = acc.Event(shm, interprocess=True)
    h = e.ipc_handle()
    with pytest.raises(ValueError, match="cannot open the interprocess event"):
        acc.Event.from_ipc_handle(shm, h[:-16] + bytes(16))
    a = acc.full((4,), 1, device=shm)
    args = _args(a)
    with pytest.raises(ValueError, match="cannot open|another kind"):
        acc.Event.from_ipc_handle(shm, b"ACCPUEVT" + args[2][0])   # memory, not an event
    reductions.rebuild_array(*args)                     # receive it: nothing stays in flight


# ---------------------------------------------------------------------- two processes

def _run(case: str, *, timeout: float = 60, **env: str) -> str:
    # the scripts' device-less calls (empty_cache) mean the cpu backend, also on a GPU machine
    full = dict(os.environ, ACCELRT_CPU_SHARED_MEMORY="1", ACCELRT_ACCELERATOR="cpu", PYTHONPATH=os.pathsep.join(
        [os.path.join(HERE, "helpers"), os.environ.get("PYTHONPATH", "")]), **env)
    out = subprocess.run([sys.executable, SCRIPTS, case], env=full, capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, f"{case} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def _shm_files() -> set[str]:
    """accelrt's files in /dev/shm (it makes none: its segments are memfds; other programs'
    files, such as multiprocessing's semaphores of parallel runs, are not looked at)."""
    try:
        return {n for n in os.listdir("/dev/shm") if "accelrt" in n}
    except OSError:
        return set()


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_share_between_processes(method: str) -> None:
    before = _shm_files()
    out = _run("share", METHOD=method)
    assert "ok" in out.splitlines()
    assert _shm_files() <= before                       # nothing left in /dev/shm


def test_consumer_crash_releases_its_hold() -> None:
    before = _shm_files()
    out = _run("crash")
    assert "ok" in out.splitlines()
    assert _shm_files() <= before


def test_readiness_event_with_async_streams() -> None:
    out = _run("ready", ACCELRT_CPU_STREAMS="async")
    assert "ok" in out.splitlines()


def test_producer_exit_fails_waits_instead_of_hanging() -> None:
    out = _run("producer_dies", ACCELRT_CPU_STREAMS="async")
    assert "ok" in out.splitlines()


def test_consumer_of_many_short_lived_producers_keeps_no_descriptor() -> None:
    # 24 producers, each exiting after the consumer received its arrays, under a limit of open
    # files 16 above the consumer's start: the consumer's descriptor and mappings of a producer
    # go with its last array (one descriptor kept per producer runs out)
    out = _run("many_producers")
    assert "ok" in out.splitlines()


def test_spawn_runs_and_reports_failures() -> None:
    out = _run("spawn")
    assert "ok" in out.splitlines()


_GC_IN_LOCKED_REGION = r"""
import gc
from accelrt.multiprocessing import _refs

c = _refs.Claim((b"r" * _refs.REF.size, 3), b"t" * 16)
box = [c]
box.append(box)        # garbage only a collection finds (then Claim.__del__ runs)
del c, box
probe = _refs.Claim((b"q" * _refs.REF.size, 4), b"t" * 16)
gc.disable()
with _refs._lock:      # a collection inside any locked region of the module, on this thread
    gc.collect()       # runs Claim.__del__ -> release(), which waited for ever on the lock
    probe.release()    # so did a release through weakref.finalize
    assert probe.key[1] == 4, "a release inside a locked region must wait for its end"
assert probe.key[1] == -1, "the queued release ran when the region ended"
print("ok")
"""


def test_a_claim_released_by_the_collector_inside_a_locked_region_does_not_hang() -> None:
    # regression: _refs._lock was a plain Lock, and a Claim's finaliser (run by a collection
    # that started inside a locked region of the same thread) took it again and hung
    proc = subprocess.run([sys.executable, "-c", _GC_IN_LOCKED_REGION], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
