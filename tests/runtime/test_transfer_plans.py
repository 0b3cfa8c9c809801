"""Transfer plans are data: what a copy will do is decided, and can be asserted, before any
byte moves (accelrt._transfer); executing the plan does the copy, and a staged step whose
pinned block cannot be had runs its planned fallback."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.staging import RecordingNoHostCpu

import accelrt as acc
from accelrt import backends
from accelrt._transfer import (
    Barrier,
    Copy,
    Hold,
    HostCopy,
    Place,
    Plan,
    RecordHost,
    Stage,
    Sync,
    Upload,
    execute,
    plan_array_copy,
    plan_download,
    plan_runs,
    plan_upload,
)
from accelrt.backends.cpu import CpuBackend

backends.register("plancpu", lambda: CpuBackend(num_devices=2, async_streams=True,
                                                name="plancpu"), replace=True)
backends.register("plannohost", lambda: RecordingNoHostCpu(num_devices=2, async_streams=True,
                                                           name="plannohost"), replace=True)


def kinds(plan: Plan) -> list[str]:
    return [type(s).__name__ for s in plan.steps]


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
