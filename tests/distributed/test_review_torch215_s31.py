"""``accelrt.multiprocessing`` and ``accelrt.distributed`` brought to torch 2.15.0's behaviour.

Expectations were observed by running torch 2.15.0 (CPU build, gloo, world size 1) and are
written here as literals (no torch in the test environment):

- ``spawn``/``start_processes``: a child's ``KeyboardInterrupt`` while its parent lives is a
  failure (``ProcessRaisedException`` with its traceback, exit code 128 + SIGINT);
- the reduction of an interprocess event rebuilds the event's own class in the receiver;
- ``init_process_group(device_id=)`` binds a cpu device with an index and refuses a device
  without one with torch 2.15's messages;
- ``ProcessGroup.supports_abort_hooks`` / ``supports_completion_hooks`` (False for gloo).

Children run inside one subprocess per test, with a hard timeout, so a hang fails the test
instead of the suite.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import accelrt as acc
import accelrt.distributed as dist

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")

# ---------------------------------------------------------------------- spawn

_INTERRUPTED = r"""
import os, signal, sys
import accelrt.multiprocessing as amp

def child(i, how):
    if i != 1:
        return
    if how == "raise":
        raise KeyboardInterrupt
    os.kill(os.getpid(), signal.SIGINT)      # a SIGINT the parent did not die of
    signal.pause()                            # (the handler raises KeyboardInterrupt first)

if __name__ == "__main__":
    try:
        amp.start_processes(child, args=(sys.argv[1],), nprocs=2, start_method=sys.argv[2])
        print("no error")
    except amp.ProcessRaisedException as exc:
        text = str(exc)
        print(type(exc).__name__, exc.error_index, exc.error_pid is not None,
              text.startswith("\n\n-- Process 1 terminated with the following error:\n"
                              "Traceback"),
              text.endswith("KeyboardInterrupt\n"))
"""


@pytest.mark.parametrize(("how", "method"), [("raise", "fork"), ("signal", "fork"),
                                              ("raise", "spawn")])
def test_a_keyboard_interrupt_while_the_parent_lives_is_a_failure(how: str, method: str,
                                                                   tmp_path: Path) -> None:
    # observed on torch 2.15.0: mp.spawn of a child raising KeyboardInterrupt raises
    # ProcessRaisedException(error_index=1), "\n\n-- Process 1 terminated with the following
    # error:\nTraceback ... KeyboardInterrupt\n"; torch 2.14.1 (and accelrt before) counted
    # the child as a success and returned None
    script = tmp_path / "interrupted.py"   # spawn re-imports __main__ from a file
    script.write_text(_INTERRUPTED)
    proc = subprocess.run([sys.executable, str(script), how, method],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["ProcessRaisedException", "1", "True", "True", "True"]


_EXIT_CODE = r"""
import multiprocessing as mp
from accelrt.multiprocessing.spawn import _wrap

def child(i):
    raise KeyboardInterrupt

reader, writer = mp.Pipe(duplex=False)
p = mp.get_context("fork").Process(target=_wrap, args=(child, 0, (), writer))
p.start(); writer.close()
report = reader.recv()
p.join()
print(p.exitcode, report.rstrip().endswith("KeyboardInterrupt"))
"""


def test_the_interrupted_child_exits_with_128_plus_sigint() -> None:
    # torch 2.15.0's _wrap: sys.exit(128 + signal.SIGINT) after writing the traceback
    proc = subprocess.run([sys.executable, "-c", _EXIT_CODE], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["130", "True"]


# ---------------------------------------------------------------------- events

_EVENTS = r"""
import multiprocessing as mp
import accelrt as acc
import accelrt.multiprocessing as amp

def child(q, r):
    e = q.get()
    e.synchronize()
    r.put((type(e).__module__, type(e).__qualname__, str(e.device), e.query()))

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    for make in (lambda: acc.Event("cpu:0", interprocess=True),
                 lambda: acc.cpu.Event(interprocess=True)):
        e = make()
        e.record()
        q, r = ctx.Queue(), ctx.Queue()
        p = ctx.Process(target=child, args=(q, r))
        p.start()
        q.put(e)
        print(*r.get(timeout=60))
        p.join(60)
        print(p.exitcode)
"""


def test_an_event_crosses_processes_as_its_own_class(tmp_path: Path) -> None:
    # torch 2.15.0 reduces an event to (_rebuild_event, (device, handle, type(event))) for
    # each IPC event class (torch.cuda.Event, torch.xpu.Event): it rebuilds as its class.
    # accelrt's reduction (registered for acc.Event and each device module's Event) does the
    # same; here across two processes on the cpu backend
    script = tmp_path / "events.py"   # spawn re-imports __main__ from a file
    script.write_text(_EVENTS)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["accelrt._event Event cpu:0 True", "0",
                                        "accelrt.cpu Event cpu:0 True", "0"]


# ---------------------------------------------------------------------- device_id

@pytest.mark.parametrize("device_id", [acc.device("cpu"), "cpu"])
def test_a_cpu_device_without_an_index_is_refused(device_id: object) -> None:
    # observed on torch 2.15.0: init_process_group("gloo", device_id=torch.device("cpu"))
    # raises ValueError with this text (2.14.1: "... must be an accelerator with an index")
    with pytest.raises(ValueError, match=r"^init_process_group device_id parameter must be "
                       r"a device with a valid index, e\.g\. cpu:0 or cuda:0$"):
        dist.init_process_group("cpu:mpi", store=dist.HashStore(), rank=0, world_size=1,
                                device_id=device_id)  # type: ignore[arg-type]
    assert not dist.is_initialized()


def test_an_accelerator_device_without_an_index_is_refused() -> None:
    # observed on torch 2.15.0: device_id=torch.device("cuda") raises ValueError("Please use
    # a device_id with index."), whether or not a GPU is there (accelrt: before it looks for
    # the backend)
    with pytest.raises(ValueError, match=r"^Please use a device_id with index\.$"):
        dist.init_process_group("cpu:mpi", store=dist.HashStore(), rank=0, world_size=1,
                                device_id="cuda")
    assert not dist.is_initialized()


def test_an_index_the_backend_lacks_is_refused() -> None:
    # observed on torch 2.15.0: device_id=torch.device("cuda:0") without GPUs raises
    # ValueError("device_id cuda:0 is out of range. Please use a device index less than the
    # number of accelerators available: 0."); accelrt's cpu has simulated devices, so an
    # index beyond them is refused the same way (and is still an IndexError, as before)
    n = acc.cpu.device_count()
    with pytest.raises(ValueError, match=rf"^device_id cpu:{n} is out of range\. Please use "
                       rf"a device index less than the number of accelerators available: "
                       rf"{n}\.") as info:
        dist.init_process_group("cpu:mpi", store=dist.HashStore(), rank=0, world_size=1,
                                device_id=f"cpu:{n}")
    assert isinstance(info.value, IndexError)
    assert not dist.is_initialized()


@needs_mpi
@pytest.mark.parametrize("device_id", [acc.device("cpu", 0), "cpu:0", 0])
def test_a_cpu_device_with_an_index_is_bound(device_id: object) -> None:
    # observed on torch 2.15.0: device_id=torch.device("cpu:0") is accepted and becomes
    # dist.group.WORLD.bound_device_id (cpu:0); torch 2.14.1 refused it with ValueError
    dist.init_process_group("cpu:mpi", store=dist.HashStore(), rank=0, world_size=1,
                            device_id=device_id)  # type: ignore[arg-type]
    try:
        world = dist.group.WORLD
        assert world is not None
        assert world.bound_device_id == acc.device("cpu", 0)
        assert acc.cpu.current_device() == 0
        a = acc.full((2,), 1.0, device="cpu")
        dist.all_reduce(a)
        assert a.tolist() == [1.0, 1.0]
        # torch 2.15's split_group needs no bound device (2.14 refused without one), and
        # split and new groups keep the parent's (split_pg.bound_device_id = parent's)
        assert dist.split_group(split_ranks=[[0]]).bound_device_id == acc.device("cpu", 0)
        assert dist.new_group([0]).bound_device_id == acc.device("cpu", 0)
    finally:
        dist.destroy_process_group()


@needs_mpi
@pytest.mark.parametrize("device_id", [acc.device("cpu", 0), "cpu:0", 0])
def test_the_bound_device_is_resolved_once(device_id: object,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # regression: init_process_group(device_id=) resolved the device three times (its
    # checks, the NCCL world's index, making it current); once now, with the same checks
    from accelrt import _device
    resolved: list[object] = []
    real = _device._get_device

    def counting(dev: object, *args: object, **kwargs: object) -> object:
        resolved.append(dev)
        return real(dev, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_device, "_get_device", counting)
    dist.init_process_group("cpu:mpi", store=dist.HashStore(), rank=0, world_size=1,
                            device_id=device_id)  # type: ignore[arg-type]
    try:
        assert resolved == [device_id if type(device_id) is int else acc.device("cpu", 0)]
        world = dist.group.WORLD
        assert world is not None and world.bound_device_id == acc.device("cpu", 0)
        assert acc.cpu.current_device() == 0
    finally:
        dist.destroy_process_group()


@needs_mpi
def test_new_group_device_id_as_torch_2_15() -> None:
    # torch 2.15's new_group(device_id=): the world's bound device by default; another device
    # is an AssertionError "Mismatched bound device between new pg and the default pg."
    dist.init_process_group("cpu:mpi", store=dist.HashStore(), rank=0, world_size=1,
                            device_id="cpu:0")
    try:
        assert dist.new_group([0], device_id="cpu:0").bound_device_id == acc.device("cpu", 0)
        world = dist.group.WORLD
        assert world is not None
        world.bound_device_id = acc.device("opencl", 0)   # a world bound elsewhere (1 cpu here)
        with pytest.raises(AssertionError, match="^Mismatched bound device between new pg "
                                                 "and the default pg.$"):
            dist.new_group([0], device_id="cpu:0")
        # torch 2.15 compares before it checks: a device without an index is a mismatch in a
        # bound world (ValueError only in an unbound one: tests/runtime/test_review_s31.py)
        with pytest.raises(AssertionError, match="^Mismatched bound device"):
            dist.new_group([0], device_id="cpu")
    finally:
        dist.destroy_process_group()


@needs_mpi
def test_new_group_binds_its_own_device_in_an_unbound_world(one_rank_world: None) -> None:
    assert dist.new_group([0]).bound_device_id is None
    assert dist.new_group([0], device_id="cpu:0").bound_device_id == acc.device("cpu", 0)


@needs_mpi
def test_a_world_without_device_id_has_no_bound_device(one_rank_world: None) -> None:
    world = dist.group.WORLD
    assert world is not None and world.bound_device_id is None
    assert dist.split_group(split_ranks=[[0]]).bound_device_id is None


# ---------------------------------------------------------------------- ProcessGroup

@needs_mpi
def test_process_group_hook_support_is_reported(one_rank_world: None) -> None:
    # observed on torch 2.15.0 (gloo): pg.supports_abort_hooks and pg.supports_completion_hooks
    # are both False; no accelrt engine runs abort or completion hooks
    world = dist.group.WORLD
    assert world is not None
    assert world.supports_abort_hooks is False
    assert world.supports_completion_hooks is False
    sub = dist.new_group([0])
    assert sub.supports_abort_hooks is False and sub.supports_completion_hooks is False
