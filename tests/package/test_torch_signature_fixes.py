"""Behaviour of the signature fixes that tests/package/test_torch_signatures.py asked for
(issue 23 §5): torch 2.15's call forms work and mean what they mean in torch."""

from __future__ import annotations

import datetime
import importlib.util
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import accelrt as acc
import accelrt.comm as comm
import accelrt.distributed as dist
import accelrt.multiprocessing as amp

ROOT = Path(__file__).resolve().parents[2]
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
_LOCAL_MPIEXEC = Path(sys.executable).parent / "mpiexec"
MPIEXEC = str(_LOCAL_MPIEXEC) if _LOCAL_MPIEXEC.exists() else shutil.which("mpiexec")


def test_accelerator_random_takes_the_device_positionally_as_torch() -> None:
    # torch.accelerator.initial_seed(device=None, /) and get_rng_state(device=None, /)
    saved = acc.random.get_rng_state("cpu:0")
    try:
        acc.cpu.manual_seed(1234)
        with acc.device("cpu:0"):
            assert acc.random.initial_seed("cpu:0") == 1234
            assert acc.random.initial_seed(acc.device("cpu:0")) == 1234
        assert acc.random.get_rng_state("cpu:0")[:8].tobytes() == (1234).to_bytes(8, "little")
        with pytest.raises(TypeError):
            acc.random.get_rng_state(device="cpu:0")  # type: ignore[call-arg]
    finally:
        acc.random.set_rng_state(saved, "cpu:0")


def test_comm_takes_torch_parameter_names() -> None:
    a = acc.asarray(np.arange(4, dtype=np.float32).reshape(2, 2), device="cpu:0", copy=True)
    (b,) = comm.broadcast(tensor=a, devices=["cpu:0"])
    assert b is a
    pieces = comm.scatter(tensor=a, devices=["cpu:0"])
    assert comm.gather(tensors=pieces, destination=-1).tolist() == [[0, 1], [2, 3]]
    ((c,),) = comm.broadcast_coalesced(tensors=[a], devices=["cpu:0"])
    assert c is a


def test_backend_register_backend_per_device_is_keyword_only() -> None:
    # torch's fourth positional parameter is `devices`; an accelrt addition is keyword-only
    with pytest.raises(TypeError):
        dist.Backend.register_backend("kwonly", lambda ctx: None,  # type: ignore[arg-type,return-value,misc]
                                      False, ["cpu"], True)
    with pytest.raises(ValueError):
        dist.Backend("kwonly")


@pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")
def test_object_collectives_take_weights_only_and_use_batch() -> None:
    dist.init_process_group("cpu:mpi", timeout=datetime.timedelta(seconds=30))
    try:
        out: list[object] = [None]
        data = {"step": 3, "w": np.arange(3.0), "tags": {"a", "b"}}
        dist.all_gather_object(out, data, weights_only=True)
        assert out[0]["step"] == 3 and out[0]["w"].tolist() == [0.0, 1.0, 2.0]  # type: ignore[index]
        with pytest.raises(pickle.UnpicklingError, match="weights_only=True does not allow"):
            dist.all_gather_object(out, datetime.timedelta(seconds=1), weights_only=True)
        dist.all_gather_object(out, datetime.timedelta(seconds=1), weights_only=False)
        assert out == [datetime.timedelta(seconds=1)]
        # the source of a broadcast keeps its own objects (torch 2.15 unpickles only on the
        # other ranks), so weights_only=True refuses nothing there
        day = datetime.date(2024, 1, 1)
        objs: list[object] = [day]
        dist.broadcast_object_list(objs, src=0, weights_only=True)
        assert objs[0] is day
        with pytest.raises(pickle.UnpicklingError, match="datetime.date"):
            dist.all_gather_object(objs, day, weights_only=True)
        gathered: list[object] = [None]
        dist.gather_object([1, 2], gathered, dst=0, weights_only=True)
        assert gathered == [[1, 2]]
        scattered: list[object] = [None]
        dist.scatter_object_list(scattered, [(1, 2.5)], src=0, weights_only=True)
        assert scattered == [(1, 2.5)]
        with pytest.raises(ValueError, match="should not be the same as the rank"):
            dist.send_object_list([1], dst=0, use_batch=True, weights_only=True)
    finally:
        dist.destroy_process_group()


_SORT_RANKS = textwrap.dedent("""
    import accelrt.distributed as dist
    import numpy as np
    dist.init_process_group("cpu:mpi", timeout=60)
    me = dist.get_rank()
    g = dist.new_group([1, 0], sort_ranks=False)   # group rank 0 is global rank 1
    assert dist.get_rank(g) == 1 - me, (me, dist.get_rank(g))
    assert dist.get_process_group_ranks(g) == [1, 0]
    x = np.array([float(me)])
    dist.broadcast(x, group_src=0, group=g)        # from group rank 0: global rank 1
    assert x.tolist() == [1.0], x
    s = dist.new_group([1, 0])                     # sorted by default, as torch
    assert dist.get_rank(s) == me
    dist.destroy_process_group()
    print(f"ok{me}", flush=True)
""")


@pytest.mark.skipif(not HAVE_MPI or MPIEXEC is None, reason="needs mpi4py and mpiexec")
def test_new_group_sort_ranks_false_keeps_the_given_order(tmp_path: Path) -> None:
    script = tmp_path / "sort_ranks.py"
    script.write_text(_SORT_RANKS)
    assert MPIEXEC is not None
    env = {"PYTHONPATH": str(ROOT / "src"), "ACCELRT_ACCELERATOR": "cpu"}
    import os
    proc = subprocess.run([MPIEXEC, "-iface", "lo", "-n", "2", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env}, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok0" in proc.stdout and "ok1" in proc.stdout, proc.stdout


_GRACE = textwrap.dedent("""
    import os, sys
    import accelrt.multiprocessing as amp

    def work(i, gate, marker):
        if i == 0:
            gate.set()
            raise RuntimeError("fails on purpose")
        gate.wait()                       # rank 0 has failed (or is about to)
        with open(marker, "w") as f:      # a clean shutdown that needs the grace period
            f.write("clean")

    if __name__ == "__main__":
        import multiprocessing
        ctx = multiprocessing.get_context("fork")
        gate = ctx.Event()
        marker = sys.argv[1]
        pc = amp.start_processes(work, args=(gate, marker), nprocs=2, join=False,
                                 start_method="fork")
        try:
            while not pc.join(grace_period=60):
                pass
        except amp.ProcessRaisedException as exc:
            assert exc.error_index == 0 and exc.error_pid == pc.processes[0].pid
            assert pc.processes[1].exitcode == 0, pc.processes[1].exitcode
            assert open(marker).read() == "clean"
            print("ok")
""")


def test_process_context_join_grace_period_and_error_pid(tmp_path: Path) -> None:
    script = tmp_path / "grace.py"
    script.write_text(_GRACE)
    import os
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "marker")],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src"),
                               "ACCELRT_ACCELERATOR": "cpu"}, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
    exc = amp.ProcessExitedException("gone", 1, 42, 3)
    again = pickle.loads(pickle.dumps(exc))
    assert (again.error_index, again.error_pid, again.exit_code) == (1, 42, 3)
