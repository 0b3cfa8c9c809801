"""A group broken by an engine failure keeps the error for every later call, but not the
failed call's frames (nor, through them, the arrays it was given): the kept error is a copy
without traceback whose cause is a copy without traceback too, while the first raise shows the
user the full traceback and the engine's exception as its cause. One process, a singleton MPI
world (as tests/distributed/test_distributed_api.py); the failing engines are MpiEngine
subclasses, as in tests/distributed/cases.py."""

from __future__ import annotations

import gc
import importlib.util
import traceback
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import accelrt as acc
import accelrt.distributed as dist

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                                reason="mpi4py is not installed (pip install 'accelrt[mpi]')")


def _engines() -> dict[str, Callable[[Any], Any]]:
    from accelrt.distributed._engine import DirectPlan
    from accelrt.distributed._mpi import MpiEngine

    def refuse(*_: object) -> None:
        raise RuntimeError("engine refused")

    class Inline(MpiEngine):      # its all_reduce runs on the group's full (inline) path
        name = "refuse_inline"

        def all_reduce(self, send: Any, recv: Any, op: Any, stream: Any) -> None:
            refuse()

    class Direct(MpiEngine):      # the direct plans of small host collectives
        name = "refuse_direct"

        def plan_all_reduce(self, ptr: int, nbytes: int, dtype: Any, op: Any) -> DirectPlan:
            return DirectPlan(refuse, ())

    class Post(MpiEngine):        # a point-to-point post fails
        name = "refuse_post"

        def isend(self, buf: Any, peer: int, tag: int) -> Any:
            refuse()

    class Wait(MpiEngine):        # a point-to-point request fails when waited on
        name = "refuse_wait"

        def irecv(self, buf: Any, peer: int | None, tag: int) -> Any:
            class Failing:
                def test(self) -> bool:
                    refuse()
                    return False

                def wait(self) -> int:
                    refuse()
                    return 0
            return Failing()

    return {c.name: c.create for c in (Inline, Direct, Post, Wait)}


@pytest.fixture
def groups() -> Iterator[dict[str, dist.ProcessGroup]]:
    dist.init_process_group("cpu:mpi", timeout=30)
    made = {}
    try:
        for name, create in _engines().items():
            dist.register_backend(name, create, devices=["cpu"])
            g = dist.new_group([0], backend=f"cpu:{name}")
            assert isinstance(g, dist.ProcessGroup)
            made[name] = g
        yield made
    finally:
        for g in made.values():
            try:
                dist.destroy_process_group(g)
            except dist.DistError:
                pass        # (the kept error, raised once more)
        dist.destroy_process_group()
        for name in made:
            dist.Backend._unregister(name)


def _fail(kind: str, g: dist.ProcessGroup, a: acc.Array) -> None:
    if kind == "refuse_post":
        dist.isend(a, group=g, group_dst=0)
    elif kind == "refuse_wait":
        w = dist.irecv(a, group=g, group_src=0)
        assert w is not None
        w.wait()
    else:
        if kind == "refuse_direct":   # (a device's first call takes the full path)
            dist.all_reduce(acc.full((4,), 1.0, device="cpu"), group=g)
        dist.all_reduce(a, group=g)


@pytest.mark.parametrize("kind", ["refuse_inline", "refuse_direct", "refuse_post",
                                  "refuse_wait"])
def test_a_kept_engine_error_holds_no_frames_of_the_failed_call(
        groups: dict[str, dist.ProcessGroup], kind: str) -> None:
    g = groups[kind]
    gc.collect()
    gc.disable()   # (freed by reference counts: the kept error must not hold the array)
    try:
        a = acc.full((4,), 1.0, device="cpu")
        ref = weakref.ref(a)
        with pytest.raises(dist.DistBackendError, match="engine refused") as info:
            _fail(kind, g, a)
        first = info.value
        # the first raise shows the user everything: its frames, and the engine's error
        assert len(traceback.extract_tb(first.__traceback__)) > 1
        assert isinstance(first.__cause__, RuntimeError)
        assert first.__cause__.__traceback__ is not None
        del a, info, first
        assert ref() is None, "the group's kept error holds the failed call's array"
    finally:
        gc.enable()
    # the group stays broken: later calls raise a copy of the error, with the cause
    if kind != "refuse_wait":   # (a failed wait breaks the work, not the group)
        kept = g._error
        assert kept is not None and kept.__traceback__ is None
        assert kept.__cause__ is not None and kept.__cause__.__traceback__ is None
        for _ in range(2):
            b = acc.full((4,), 1.0, device="cpu")
            with pytest.raises(dist.DistBackendError, match="engine refused") as info:
                dist.all_reduce(b, group=g)
            assert info.value is not kept and isinstance(info.value.__cause__, RuntimeError)
            assert (info.value.rank, info.value.op, info.value.seq) == (
                kept.rank, kept.op, kept.seq)  # type: ignore[attr-defined]
            assert kept.__traceback__ is None   # raising it again attached nothing to it


def test_a_failed_works_error_holds_no_frames(groups: dict[str, dist.ProcessGroup]) -> None:
    g = groups["refuse_wait"]
    a = acc.full((4,), 1.0, device="cpu")
    w = dist.irecv(a, group=g, group_src=0)
    assert w is not None
    with pytest.raises(dist.DistBackendError, match="engine refused"):
        w.wait()
    kept = w.exception()
    assert kept is not None and kept.__traceback__ is None
    assert isinstance(kept.__cause__, RuntimeError) and kept.__cause__.__traceback__ is None
    with pytest.raises(dist.DistBackendError, match="engine refused") as info:
        w.wait()    # raised afresh: a copy, and the kept one gains no frames
    assert info.value is not kept and kept.__traceback__ is None
