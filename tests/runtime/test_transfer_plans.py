"""Transfer plans are data: what a copy will do is decided, and can be asserted, before any
byte moves (accelrt._transfer); executing the plan does the copy, and a staged step whose
pinned block cannot be had runs its planned fallback."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from helpers.registry import module_backends
from helpers.staging import RecordingNoHostCpu

import accelrt as acc
from accelrt import backends
from accelrt._transfer import (
    Barrier,
    Copy,
    FreeHost,
    Hold,
    HostCopy,
    Place,
    Plan,
    RecordHost,
    Stage,
    Step,
    Sync,
    Upload,
    execute,
    host_view,
    pinned_pool,
    plan_array_copy,
    plan_download,
    plan_landing,
    plan_runs,
    plan_staged_collective,
    plan_staged_p2p,
    plan_upload,
    run_steps,
)
from accelrt.backends.cpu import CpuBackend

# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({
    "plancpu": lambda: CpuBackend(num_devices=2, async_streams=True, name="plancpu"),
    "plannohost": lambda: RecordingNoHostCpu(num_devices=2, async_streams=True,
                                             name="plannohost"),
})


def kinds(plan: Plan) -> list[str]:
    return names(plan.steps)


def names(steps: Sequence[Step]) -> list[str]:
    return [type(s).__name__ for s in steps]


def test_peer_copy_plan_orders_both_streams() -> None:
    a = acc.full((4,), 2.0, device="plancpu:0")
    b = acc.zeros((4,), device="plancpu:1")
    plan = plan_array_copy(b, a, non_blocking=False)
    assert kinds(plan) == ["Barrier", "Copy", "Barrier"]   # allocator memory: nothing held
    first, copy, last = plan.steps
    assert isinstance(first, Barrier) and isinstance(last, Barrier)
    assert isinstance(copy, Copy) and copy.kind == "peer" and copy.dst_device == 1
    assert copy.stream == acc.current_stream("plancpu:0")           # the source's stream
    assert (first.after, first.waiter) == (last.waiter, last.after)  # two-way barrier
    assert b.numpy().tolist() == [0.0] * 4                           # nothing moved yet
    execute(plan)
    assert b.numpy().tolist() == [2.0] * 4


def test_runs_plans_by_place() -> None:
    a = acc.full((2, 3), 1.0, device="plancpu:0")
    here = Place.of(a)
    assert kinds(plan_runs(here, 0, here, a.data_ptr(), 0)) == []
    same = plan_runs(here, a.data_ptr(), here, a.data_ptr(), 4, 2, 12, 12)
    assert kinds(same) == ["Copy"] and same.steps[0].nruns == 2
    host = np.zeros(6, np.float32)
    down = plan_runs(Place.of(host), host.ctypes.data, here, a.data_ptr(), a.nbytes)
    assert kinds(down) == ["Copy", "Sync"]           # host-readable: direct, then wait
    execute(down)
    assert host.tolist() == [1.0] * 6
    many = plan_runs(here, a.data_ptr(), here, a.data_ptr(), 1, 20, 1, 1)
    assert isinstance(many.steps[-1], HostCopy)      # many runs: one numpy copy in order


def test_non_host_readable_memory_is_staged_with_a_direct_fallback() -> None:
    a = acc.empty((4,), dtype="int64", device="plannohost:0")
    up = plan_upload(a, np.arange(4), non_blocking=True, private=False)
    (stage,) = up.steps
    assert isinstance(stage, Stage) and stage.kind == "h2d"
    (direct,) = stage.fallback
    assert isinstance(direct, Upload) and direct.snapshot   # pageable memory read at call
    execute(up)
    out = np.empty(4, np.int64)
    down = plan_download(a, out)
    assert kinds(down) == ["Stage"]
    execute(down)
    assert out.tolist() == [0, 1, 2, 3]


def test_stage_fallback_runs_when_staging_does_not_apply(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    from accelrt._transfer import _execute
    monkeypatch.setattr(_execute, "stage", lambda *args: False)
    a = acc.empty((3,), dtype="int16", device="plannohost:0")
    execute(plan_upload(a, np.array([7, 8, 9], np.int16), non_blocking=False, private=True))
    assert a.numpy().tolist() == [7, 8, 9]


def test_pinned_source_is_copied_directly_and_recorded() -> None:
    a = acc.empty((4,), device="cpu:0")      # pin_memory pins for the current accelerator
    pinned = acc.empty(4, pin_memory=True)
    pinned[:] = 5.0
    plan = plan_upload(a, pinned, non_blocking=True, private=False)
    assert kinds(plan) == ["Copy", "RecordHost", "Hold"]
    assert isinstance(plan.steps[1], RecordHost) and plan.steps[1].ptr == pinned.ctypes.data
    execute(plan)
    assert a.numpy().tolist() == [5.0] * 4
    blocking = plan_upload(a, pinned, non_blocking=False, private=False)
    assert isinstance(blocking.steps[-1], Sync) and not isinstance(blocking.steps[-1], Hold)


def test_staged_collective_plan_takes_one_block_per_array_and_orders_its_steps() -> None:
    b = backends.get_backend("plannohost")
    assert isinstance(b, RecordingNoHostCpu)
    pool = pinned_pool(b)
    assert pool is not None
    x = acc.full((4,), 2.0, device="plannohost:0")
    y = acc.zeros((2,), device="plannohost:0")
    empty = acc.zeros((0,), device="plannohost:0")
    comm, cur = acc.Stream("plannohost:0"), acc.current_stream("plannohost:0")
    acc.synchronize("plannohost:0")
    pool.empty_cache()       # the blocks other tests cached would be taken instead of new ones
    before, ncopies = set(b.pinned), len(b.copies)
    st = plan_staged_collective(comm, cur, pool, [x, y, x, empty], [x, x, empty], [y, x, y])
    # de-duplicated by identity: one block per distinct array with bytes, taken in order
    assert set(st.host) == {id(x), id(y), id(empty)} and st.host[id(empty)] == 0
    assert len(b.pinned - before) == 2 and st.host[id(x)] != st.host[id(y)]
    # before the engine: the comm stream waits for the caller's, downloads once, then the
    # host waits
    assert names(st.before) == ["Barrier", "Copy", "Sync"]
    wait, down, sync = st.before
    assert isinstance(wait, Barrier) and (wait.after, wait.waiter) == (cur, comm)
    assert isinstance(down, Copy) and (down.kind, down.stream) == ("d2h", comm)
    assert (down.dst, down.src, down.run) == (st.host[id(x)], x.data_ptr(), x.nbytes)
    assert isinstance(sync, Sync) and sync.stream == comm
    # after: each written array uploaded once; every block freed, reused after comm's work
    assert names(st.after) == ["Copy", "Copy"]
    assert st.after == (Copy(comm, "h2d", y.data_ptr(), st.host[id(y)], y.nbytes),
                              Copy(comm, "h2d", x.data_ptr(), st.host[id(x)], x.nbytes))
    assert st.release == (FreeHost(pool, st.host[id(x)], comm),
                                FreeHost(pool, st.host[id(y)], comm))
    assert len(b.copies) == ncopies                    # nothing moved yet
    run_steps(st.before)
    host_view(st.host[id(y)], (2,), np.dtype(np.float32))[:] = 3.0   # the engine writes y
    run_steps(st.after)
    run_steps(st.release)
    comm.synchronize()
    assert y.numpy().tolist() == [3.0, 3.0] and x.numpy().tolist() == [2.0] * 4


def test_staged_collective_plan_without_a_pinned_pool_uses_host_buffers() -> None:
    x = acc.full((3,), 1.0, device="plannohost:0")
    comm, cur = acc.Stream("plannohost:0"), acc.current_stream("plannohost:0")
    st = plan_staged_collective(comm, cur, None, [x], [x], [x])
    assert len(st.buffers) == 1 and st.host[id(x)] == st.buffers[0].ctypes.data
    assert names(st.release) == []
    run_steps(st.before)
    assert st.buffers[0].view(np.float32).tolist() == [1.0] * 3
    st.buffers[0].view(np.float32)[:] = 5.0        # the engine writes the host copy
    run_steps(st.after)
    comm.synchronize()
    assert x.numpy().tolist() == [5.0] * 3


def test_staged_collective_plan_releases_its_blocks_when_one_cannot_be_had() -> None:
    class Pool:
        def __init__(self) -> None:
            self.live: set[int] = set()
            self.recorded: list[int] = []

        def malloc(self, n: int) -> int:
            if self.live:
                raise acc.OutOfMemoryError("no more")
            self.live.add(1000)
            return 1000

        def record_event(self, ptr: int, stream: object) -> None:
            self.recorded.append(ptr)

        def free(self, ptr: int) -> None:
            self.live.remove(ptr)

    pool = Pool()
    x, y = acc.zeros((2,), device="plancpu:0"), acc.zeros((2,), device="plancpu:0")
    comm, cur = acc.Stream("plancpu:0"), acc.current_stream("plancpu:0")
    with pytest.raises(acc.OutOfMemoryError):
        plan_staged_collective(comm, cur, pool, [x, y], [x], [y])  # type: ignore[arg-type]
    assert pool.live == set() and pool.recorded == [1000]


def test_staged_p2p_plans_a_send_and_the_landing_of_a_receive() -> None:
    b = backends.get_backend("plannohost")
    pool = pinned_pool(b)
    assert pool is not None
    x = acc.full((2,), 7.0, device="plannohost:0")
    cur, busy = acc.current_stream("plannohost:0"), acc.Stream("plannohost:0")
    send = plan_staged_p2p(pool, x, True, cur, busy)
    ptr = send.host[id(x)]
    assert names(send.before) == ["Sync", "Copy", "Sync"]     # busy comm stream, download
    assert send.before[0] == Sync(busy) and send.before[2] == Sync(cur)
    assert send.release == (FreeHost(pool, ptr),)       # freed at once after the send
    run_steps(send.before)
    assert host_view(ptr, (2,), np.dtype(np.float32)).tolist() == [7.0, 7.0]
    y = acc.zeros((2,), device="plannohost:0")
    recv = plan_staged_p2p(pool, y, False, cur)
    assert names(recv.before) == [] and recv.buffers == ()
    landed = plan_landing(recv, y, cur)
    (up,) = landed.after
    assert isinstance(up, Copy) and (up.kind, up.dst, up.src) == ("h2d", y.data_ptr(),
                                                                   recv.host[id(y)])
    assert landed.release == (FreeHost(pool, recv.host[id(y)], cur),)
    run_steps(send.release)
    run_steps(landed.after)
    run_steps(landed.release)
    none = plan_staged_p2p(pool, acc.zeros((0,), device="plannohost:0"), True, cur)
    assert names(none.before) == [] and names(none.release) == [] and len(none.buffers) == 1
