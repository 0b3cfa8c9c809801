"""accelrt.distributed in one process: lazy engines, argument checks, backend strings, the
registry, a singleton world, and the GPU paths (skipped without a GPU)."""

from __future__ import annotations

import datetime
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import accelrt as acc
import accelrt.distributed as dist
from accelrt.distributed._engine import parse_backend

ROOT = Path(__file__).resolve().parents[2]
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")


def _has_cuda_device() -> bool:
    try:
        from accelrt import backends
        return backends.get_backend("cuda").device_count() > 0
    except Exception:
        return False


def test_import_loads_no_engine() -> None:
    code = ("import sys, accelrt.distributed as d; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mpi4py', 'nccl')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, check=True)
    assert out.stdout.strip() == "[]"


def test_calls_before_init_raise() -> None:
    assert not dist.is_initialized() and dist.is_available()
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        dist.get_rank()
    with pytest.raises(ValueError, match="has not been initialized"):
        dist.all_reduce(np.zeros(2))


def test_backend_strings() -> None:
    assert parse_backend("mpi") == {"cpu": "mpi", "opencl": "mpi", "cuda": "mpi"}
    assert parse_backend("NCCL") == {"cuda": "nccl"}
    assert parse_backend("cpu:mpi,cuda:nccl") == {"cpu": "mpi", "cuda": "nccl"}
    assert parse_backend(None)["cuda"] == "nccl"
    with pytest.raises(ValueError, match="Invalid backend: 'nosuch'"):
        parse_backend("nosuch")
    with pytest.raises(ValueError, match="does not serve 'cpu'"):
        parse_backend("cpu:nccl")
    with pytest.raises(ValueError, match="device:engine"):
        parse_backend("cpu:mpi,nccl")
    assert dist.Backend("MPI") == "mpi" and dist.Backend.NCCL == "nccl"


def test_register_backend_checks() -> None:
    with pytest.raises(TypeError, match="callable"):
        dist.register_backend("x1", 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already registered"):
        dist.register_backend("mpi", lambda ctx: None)  # type: ignore[arg-type,return-value]
    dist.Backend.register_backend("thirdparty", lambda ctx: None,  # type: ignore[arg-type,return-value]
                                  devices=["cpu"])
    try:
        assert parse_backend("thirdparty") == {"cpu": "thirdparty"}
        assert dist.Backend.THIRDPARTY == "thirdparty"  # type: ignore[attr-defined]
    finally:
        dist.Backend._unregister("thirdparty")  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        dist.Backend("thirdparty")


def test_init_argument_errors() -> None:
    with pytest.raises(TypeError, match="store must be an accelrt.distributed.Store"):
        dist.init_process_group("mpi", store=object(), rank=0, world_size=1)
    with pytest.raises(ValueError, match="Cannot specify both init_method and store"):
        dist.init_process_group("mpi", init_method="env://", store=dist.HashStore())
    with pytest.raises(ValueError, match="world_size must be positive if using store"):
        dist.init_process_group("mpi", store=dist.HashStore(), rank=0)
    with pytest.raises(ValueError, match="rank must be non-negative if using store"):
        dist.init_process_group("mpi", store=dist.HashStore(), world_size=2)
    with pytest.raises(ValueError, match="udp://.* is not supported"):
        dist.init_process_group("mpi", init_method="udp://127.0.0.1:1234")
    with pytest.raises(ValueError, match="tcp:// rendezvous: rank parameter missing"):
        dist.init_process_group("mpi", init_method="tcp://127.0.0.1:1234")
    with pytest.raises(TypeError, match="timedelta"):
        dist.init_process_group("mpi", timeout="5")
    with pytest.raises(ValueError, match="positive"):
        dist.init_process_group("mpi", timeout=0)
    # torch 2.14's _ranks / enable_reconfigure, positionally as torch orders them
    with pytest.raises(ValueError, match="enable_reconfigure=True is not supported"):
        dist.init_process_group("mpi", None, None, -1, -1, None, "", None, None, None, True)
    with pytest.raises(TypeError, match="enable_reconfigure must be a bool"):
        dist.init_process_group("mpi", enable_reconfigure=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="_ranks must be a list of ints"):
        dist.init_process_group("mpi", _ranks="01")  # type: ignore[arg-type]
    assert not dist.is_initialized()


@needs_mpi
def test_init_takes_torchs_ranks_and_reconfigure_off() -> None:
    dist.init_process_group("cpu:mpi", timeout=30, _ranks=[0], enable_reconfigure=False)
    try:
        assert dist.get_world_size() == 1 and dist.get_rank() == 0
    finally:
        dist.destroy_process_group()


def test_env_init_needs_its_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(ValueError, match="environment variable RANK expected"):
        dist.init_process_group("nccl", init_method="env://")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ValueError, match="environment variable MASTER_ADDR expected"):
        dist.init_process_group("mpi", init_method="env://")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")   # nothing listens: the check comes first
    with pytest.raises(dist.DistBackendError, match="mpiexec -n N"):
        dist.init_process_group("mpi", init_method="env://")
    monkeypatch.delenv("MASTER_ADDR")
    with pytest.raises(ValueError, match="environment variable MASTER_ADDR expected"):
        dist.init_process_group("nccl", init_method="env://")
    assert not dist.is_initialized()


def test_p2pop_and_errors_tree() -> None:
    with pytest.raises(ValueError, match="Invalid ``op``"):
        dist.P2POp(dist.send, np.zeros(1), 0)  # type: ignore[arg-type]
    assert issubclass(dist.DistTimeoutError, dist.DistError)
    assert issubclass(dist.DistBackendError, acc.AcceleratorError)
    assert issubclass(dist.DistError, RuntimeError)


@needs_mpi
def test_singleton_world(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCELRT_DISTRIBUTED_BACKEND", raising=False)
    dist.init_process_group(timeout=datetime.timedelta(seconds=30))
    try:
        assert (dist.get_rank(), dist.get_world_size()) == (0, 1)
        assert dist.get_backend() == "cpu:mpi,opencl:mpi,cuda:nccl"
        a = acc.full((3,), 2, dtype="int32", device="cpu")
        w = dist.all_reduce(a, op=dist.ReduceOp.PRODUCT, async_op=True)
        assert w.wait() and w.is_completed() and w.exception() is None
        assert a.tolist() == [2, 2, 2]
        x = np.arange(4.0)
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
        with pytest.raises(ValueError, match="twice"):
            dist.init_process_group("mpi")
        with pytest.raises(ValueError, match="world_size times input"):
            dist.all_gather_into_tensor(acc.empty((2,), dtype="int32", device="cpu"), a)
        g = dist.new_group([0])
        assert dist.get_world_size(g) == 1
        with pytest.raises(ValueError, match="ranks must be distinct world ranks"):
            dist.new_group([0, 1])
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


def test_nccl_all_to_all_plan() -> None:
    """The per-peer element offsets and counts the NCCL all_to_all sends and receives (the
    GPU run of cases.py checks the data)."""
    from accelrt.distributed._nccl import a2a_plan
    assert a2a_plan([2], [2]) == [(0, 0, 2, 0, 2)]          # one rank: a copy to itself
    assert a2a_plan([1, 1], [1, 1]) == [(0, 0, 1, 0, 1), (1, 1, 1, 1, 1)]
    # uneven splits: offsets are running sums of the counts, in elements (not bytes)
    assert a2a_plan([3, 0, 1], [0, 2, 5]) == [(0, 0, 3, 0, 0), (1, 3, 0, 0, 2),
                                              (2, 3, 1, 2, 5)]
    assert a2a_plan([0, 0], [0, 0]) == []
    with pytest.raises(ValueError, match="2 send counts but 3 receive counts"):
        a2a_plan([1, 1], [1, 1, 1])
    with pytest.raises(ValueError, match="negative count for peer 1"):
        a2a_plan([1, -1], [1, 1])


class _ScriptedComm:
    """Answers get_async_error() with a fixed sequence of NCCL results."""

    def __init__(self, *results: int) -> None:
        self.results = list(results)
        self.polls = 0

    def get_async_error(self) -> int:
        self.polls += 1
        return self.results.pop(0) if len(self.results) > 1 else self.results[0]


def test_nccl_settle_polls_until_enqueued() -> None:
    """A non-blocking communicator answers ncclInProgress (7) while a background thread
    enqueues a group; the engine must not record its done event before ncclSuccess (0)."""
    from accelrt.distributed._nccl import settle
    c = _ScriptedComm(0)
    settle(c, 5.0, "x")
    assert c.polls == 1
    c = _ScriptedComm(7, 7, 7, 0)
    settle(c, 5.0, "x")
    assert c.polls == 4
    with pytest.raises(RuntimeError, match="did not finish enqueueing all_to_all within"):
        settle(_ScriptedComm(7), 0.01, "all_to_all")


def test_launch_keeps_the_callers_pythonpath(monkeypatch: pytest.MonkeyPatch) -> None:
    """Engines installed with pip --target reach the launched ranks (the GPU machine's
    nccl4py was lost when the harness replaced PYTHONPATH)."""
    from test_distributed import _env
    monkeypatch.setenv("PYTHONPATH", "/opt/site-extra")
    parts = _env({})["PYTHONPATH"].split(os.pathsep)
    assert parts == [str(ROOT / "src"), "/opt/site-extra"]


@needs_mpi
def test_direct_call_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """The small-message path: a second call on the same array runs the plan the first left;
    plans are dropped when debug flags change, an error is kept or the group is destroyed."""
    import importlib
    gm = importlib.import_module("accelrt.distributed._group")
    monkeypatch.setenv("ACCELRT_CPU_STREAMS", "sync")
    monkeypatch.delenv("ACCELRT_DISTRIBUTED_DEBUG", raising=False)
    dist.init_process_group("cpu:mpi", timeout=30)
    try:
        w = dist.group.WORLD
        assert w is not None and dist.GroupMember.WORLD is w
        a = acc.full((4,), 3.0, device="cpu")
        out = acc.empty((4,), device="cpu")
        for _ in range(3):
            dist.all_reduce(a, op=dist.ReduceOp.AVG)
            dist.broadcast(a, src=0)
            dist.all_gather_into_tensor(out, a)
        assert len(w.plans_ar) == len(w.plans_bc) == len(w.plans_ag) == 1
        assert a.tolist() == out.tolist() == [3.0] * 4
        seq = w._seq
        dist.all_reduce(a)
        assert w._seq == seq + 1 and a.tolist() == [3.0] * 4
        # a plan is per dtype and op: another op takes the checked path first
        with pytest.raises(ValueError, match="integer or bool"):
            dist.all_reduce(a, op=dist.ReduceOp.BAND)
        monkeypatch.setenv("ACCELRT_DISTRIBUTED_DEBUG", "DETAIL")
        gm.read_debug_level()
        assert not w.plans_ar and not w.plans_bc and not w.plans_ag
        dist.all_reduce(a)
        assert not w.plans_ar   # debug checks run on every call
        monkeypatch.delenv("ACCELRT_DISTRIBUTED_DEBUG")
        gm.read_debug_level()
        g = dist.new_group([0])
        b = acc.full((2,), 1.0, device="cpu")
        dist.all_reduce(b, group=g)
        dist.all_reduce(b, group=g)
        assert isinstance(g, dist.ProcessGroup) and g.plans_ar
        dist.destroy_process_group(g)
        with pytest.raises(dist.DistError, match="was destroyed"):
            dist.all_reduce(b, group=g)
        g._keep(RuntimeError("kept"))   # a kept error drops the plans too
        assert not g.plans_ar
    finally:
        dist.destroy_process_group()
        gm.read_debug_level()


@needs_mpi
def test_singleton_new_apis() -> None:
    dist.init_process_group("cpu:mpi", timeout=30)
    try:
        a = acc.full((3,), 2.0, device="cpu")
        dist.all_reduce(a, op=dist._make_nccl_premul_sum(acc.full((1,), 1.5, device="cpu")))
        assert a.tolist() == [3.0] * 3
        x = np.arange(3.0)
        dist.reduce(x, 0, op=dist._make_nccl_premul_sum(np.float32(2)))
        assert x.tolist() == [0.0, 2.0, 4.0]
        outs = [np.zeros(2, np.int32)]
        dist.all_to_all(outs, [np.array([5, 6], np.int32)])
        assert outs[0].tolist() == [5, 6]
        with pytest.raises(ValueError, match="same dtype"):
            dist.all_to_all([np.zeros(2)], [np.zeros(2, np.float32)])
        with pytest.raises(TypeError, match="bool"):
            dist._make_nccl_premul_sum(True)
        with pytest.raises(ValueError, match="Must specify global_rank or group_rank: pass dst="):
            dist.send_object_list([1])
        with pytest.raises(ValueError, match="Can't specify both group_rank and global_rank"):
            dist.recv_object_list([None], src=0, group_src=0)
        with pytest.raises(ValueError, match="NON_GROUP_MEMBER is not registered"):
            dist.get_process_group_ranks(dist.GroupMember.NON_GROUP_MEMBER)
        # torch 2.14 splits any group's ranks (issue 23: was refused)
        sub, _ = dist.new_subgroups(1, group=dist.new_group([0]))
        assert dist.get_process_group_ranks(sub) == [0]
        if not _has_cuda_device():
            with pytest.raises(ValueError, match="only takes effect when CUDA/XPU is available"):
                dist.new_subgroups()
    finally:
        dist.destroy_process_group()
    assert dist.group.WORLD is None


@pytest.mark.skipif(not _has_cuda_device(), reason="needs a CUDA device")
@pytest.mark.skipif(not dist.is_nccl_available(), reason="needs nccl4py[cu12] or [cu13]")
@needs_mpi
def test_nccl_one_rank_communicator_on_the_gpu() -> None:
    """NCCL with one GPU: a one-rank communicator, every op on cuda arrays, through
    mpiexec -n 1 (unique id over MPI)."""
    from test_distributed import _check_cases, launch
    rc, out, _ = launch(1, "cases.py", "ops,objects,groups,batch",
                        env={"CASES_DEVICE": "cuda", "CASES_BACKEND": "cuda:nccl,cpu:mpi"},
                        timeout=300)
    _check_cases(1, out, rc)


@pytest.mark.skipif(not _has_cuda_device(), reason="needs a CUDA device")
@pytest.mark.skipif(not dist.is_nccl_available(), reason="needs nccl4py[cu12] or [cu13]")
@needs_mpi
def test_nccl_env_rendezvous_on_the_gpu() -> None:
    """env:// for NCCL: rank 0 serves a TCPStore at MASTER_ADDR:MASTER_PORT and NCCL's
    unique id goes through it (as torch), no MPI exchange."""
    from test_distributed import _check_cases, launch
    rc, out, _ = launch(1, "cases.py", "ops", env={
        "CASES_DEVICE": "cuda", "CASES_BACKEND": "cuda:nccl,cpu:mpi", "CASES_INIT": "env://",
        "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29561",
        "NCCL_SOCKET_IFNAME": "lo"}, timeout=300)
    _check_cases(1, out, rc)


@pytest.mark.skipif(not _has_cuda_device(), reason="needs a CUDA device")
@pytest.mark.skipif(not dist.is_nccl_available(), reason="needs nccl4py[cu12] or [cu13]")
@needs_mpi
def test_nccl_tcp_store_rendezvous_on_the_gpu() -> None:
    """tcp://host:port?rank=&world_size= for NCCL: the unique id through a TCPStore."""
    from test_distributed import _check_cases, launch
    rc, out, _ = launch(1, "cases.py", "ops", env={
        "CASES_DEVICE": "cuda", "CASES_BACKEND": "cuda:nccl,cpu:mpi",
        "CASES_INIT": "tcp://127.0.0.1:29562?rank=0&world_size=1",
        "NCCL_SOCKET_IFNAME": "lo"}, timeout=300)
    _check_cases(1, out, rc)


@pytest.mark.skipif(not _has_cuda_device(), reason="needs a CUDA device")
@needs_mpi
def test_cuda_arrays_staged_through_mpi_on_the_gpu() -> None:
    """Two ranks on one GPU over the MPI engine: device memory staged through pinned host
    memory (the pip MPI wheels are not CUDA-aware)."""
    from test_distributed import _check_cases, launch
    rc, out, _ = launch(2, "cases.py", "ops,p2p,groups,objects",
                        env={"CASES_DEVICE": "cuda", "CASES_BACKEND": "cuda:mpi,cpu:mpi"},
                        timeout=300)
    _check_cases(2, out, rc)


@needs_mpi
def test_per_device_engines_are_declared_at_registration() -> None:
    """One engine per device where the registration says so (NCCL's communicators are bound
    to a device), else one per device type: decided by the engine, never by a device type's
    name."""
    from accelrt.distributed._mpi import MpiEngine
    dist.init_process_group("cpu:mpi", timeout=30)
    dist.register_backend("perdev", MpiEngine.create, devices=["cpu"], per_device=True)
    try:
        w = dist.group.WORLD
        assert w is not None
        assert w.engine("cpu", 0) is w.engine("cpu", 1)        # mpi: one per type
        g = dist.new_group([0], backend="cpu:perdev")
        assert isinstance(g, dist.ProcessGroup)
        e0, e1 = g.engine("cpu", 0), g.engine("cpu", 1)
        assert e0 is not e1 and g.engine("cpu", 0) is e0 and g.engine("cpu", 1) is e1
        assert dist.Backend._registry["nccl"].per_device
        assert not dist.Backend._registry["mpi"].per_device
    finally:
        dist.destroy_process_group()
        dist.Backend._unregister("perdev")


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with nccl4py installed but no CUDA GPU (the CI machine has neither)."""
    import importlib
    eng = importlib.import_module("accelrt.distributed._engine")
    # raising=False: before the fix these did not exist, and the tests failed on the
    # behaviour (init succeeded), not on the patch
    monkeypatch.setattr(eng, "_nccl_available", lambda: True, raising=False)
    monkeypatch.setattr(eng, "cuda_device_count", lambda: 0, raising=False)
    monkeypatch.delenv("ACCELRT_DISTRIBUTED_BACKEND", raising=False)


@needs_mpi
@pytest.mark.parametrize("backend", ["nccl", "cpu:gloo,cuda:nccl", "cpu:mpi,cuda:nccl"])
def test_nccl_without_a_gpu_fails_at_init(no_gpu: None, backend: str) -> None:
    """torch constructs every backend of the map at init, and ProcessGroupNCCL refuses a
    machine without GPUs there; accelrt initialised and failed at the first collective."""
    with pytest.raises(ValueError, match=r"ProcessGroupNCCL is only supported with GPUs, no "
                                         r"GPUs found! .*backend='mpi'") as info:
        dist.init_process_group(backend, timeout=30)
    assert isinstance(info.value, RuntimeError)   # torch < 2.6 raised RuntimeError
    assert not dist.is_initialized()
    # nothing was left behind: the world starts, and new_group checks a named engine too
    dist.init_process_group(timeout=30)   # backend=None: NCCL is started when first used
    try:
        a = np.ones(2)
        dist.all_reduce(a)
        with pytest.raises(ValueError, match="no GPUs found"):
            dist.new_group([0], backend="nccl")
        g = dist.new_group([0], backend="cpu:gloo")
        dist.all_reduce(a, group=g)
        assert a.tolist() == [1.0, 1.0]
    finally:
        dist.destroy_process_group()


@needs_mpi
def test_nccl_without_nccl4py_fails_at_init(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    eng = importlib.import_module("accelrt.distributed._engine")
    monkeypatch.setattr(eng, "_nccl_available", lambda: False, raising=False)
    with pytest.raises(dist.DistBackendError, match="Distributed package doesn't have NCCL "
                                                    "built in: .*accelrt\\[nccl-cu12\\]"):
        dist.init_process_group("cpu:mpi,cuda:nccl", timeout=30)
    assert not dist.is_initialized()


@pytest.mark.skipif(_has_cuda_device() and dist.is_nccl_available(),
                    reason="NCCL can start on this machine")
@needs_mpi
def test_nccl_fails_at_init_on_this_machine() -> None:
    with pytest.raises(RuntimeError, match="NCCL built in|no GPUs found"):
        dist.init_process_group("nccl", timeout=30)
    assert not dist.is_initialized()


def test_env_init_checks_nccl_after_the_rendezvous_variables(
        no_gpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": "29599"}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match="no GPUs found"):
        dist.init_process_group("nccl", init_method="env://")
    assert not dist.is_initialized()


@needs_mpi
def test_gloo_names_the_host_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """backend="gloo" (what every CPU port of torch code says) runs on MPI and keeps its
    name; the availability queries and the default engine per device are torch's."""
    assert parse_backend("gloo") == {"cpu": "gloo", "opencl": "gloo", "cuda": "gloo"}
    assert parse_backend("cpu:gloo,cuda:nccl") == {"cpu": "gloo", "cuda": "nccl"}
    assert dist.Backend("GLOO") == dist.Backend.GLOO == "gloo"
    assert "gloo" in dist.Backend.backend_list
    with pytest.raises(ValueError, match="cannot be unregistered"):
        dist.Backend._unregister("gloo")  # type: ignore[attr-defined]
    assert dist.is_gloo_available() is dist.is_mpi_available() is True
    assert dist.is_backend_available("gloo") and dist.is_backend_available("MPI")
    assert dist.is_backend_available("nccl") is dist.is_nccl_available()
    assert dist.is_backend_available("cpu:gloo,cuda:nccl") is dist.is_nccl_available()
    assert dist.is_backend_available("cpu:gloo")
    assert not dist.is_backend_available("ucc") and not dist.is_backend_available("cpu:ucc")
    assert dist.get_default_backend_for_device("cpu") == "mpi"
    assert dist.get_default_backend_for_device("cuda:1") == "nccl"
    assert dist.get_default_backend_for_device(acc.device("opencl", 0)) == "mpi"
    assert dist.get_default_backend_for_device(0) in ("mpi", "nccl")
    with pytest.raises(ValueError, match="Default backend not registered for device : xla"):
        dist.get_default_backend_for_device("xla")
    monkeypatch.delenv("ACCELRT_DISTRIBUTED_BACKEND", raising=False)
    dist.init_process_group("gloo", timeout=30)
    try:
        assert dist.get_backend() == "gloo"
        w = dist.group.WORLD
        assert w is not None and w.engine("cpu", 0).name == "mpi"
        a = acc.full((3,), 2.0, device="cpu")
        dist.all_reduce(a)
        x = np.arange(3.0)
        dist.broadcast(x, src=0)
        assert a.tolist() == [2.0] * 3 and x.tolist() == [0.0, 1.0, 2.0]
    finally:
        dist.destroy_process_group()


@needs_mpi
def test_group_src_and_group_dst_in_a_world_of_one() -> None:
    """torch 2.14's group_src/group_dst/group_peer keywords on every rooted and
    point-to-point operation (a world of one: rank 0 of every group is global rank 0; the
    launches of cases.py check groups whose ranks differ)."""
    dist.init_process_group("cpu:mpi", timeout=30)
    try:
        w = dist.group.WORLD
        assert w is not None
        g = dist.new_group([0])
        before = w._seq
        x = np.ones(2)
        refused = {
            "send to itself": (lambda: dist.send(x, group_dst=0), "Invalid destination rank"),
            "recv from itself": (lambda: dist.recv(x, group_src=0), "Invalid source rank"),
            "send neither": (lambda: dist.send(x), "Must specify global_rank or group_rank"),
            "isend neither": (lambda: dist.isend(x), "Must specify global_rank or group_rank"),
            "send both": (lambda: dist.send(x, 0, group_dst=0), "Can't specify both"),
            "irecv both": (lambda: dist.irecv(x, 0, group_src=0), "Can't specify both"),
            "broadcast neither": (lambda: dist.broadcast(x), r"pass src= \(a global rank\)"),
            "broadcast both": (lambda: dist.broadcast(x, 0, group_src=0), "Can't specify both"),
            "reduce neither": (lambda: dist.reduce(x), "Must specify global_rank"),
            "gather both": (lambda: dist.gather(x, [x], 0, group_dst=0), "Can't specify both"),
            "scatter both": (lambda: dist.scatter(x, [x], 0, group_src=0), "Can't specify"),
            "group rank out of range": (lambda: dist.broadcast(x, group=g, group_src=1),
                                        "Group rank 1 is not part of group"),
            "object both": (lambda: dist.broadcast_object_list([1], 0, group_src=0),
                            "Can't specify both"),
            "gather_object both": (lambda: dist.gather_object(1, [None], 0, group_dst=0),
                                   "Can't specify both"),
            "scatter_object_list both": (
                lambda: dist.scatter_object_list([None], [1], 0, group_src=0), "Can't"),
            "send_object_list to itself": (lambda: dist.send_object_list([1], group_dst=0),
                                           "Invalid destination rank"),
            "batch: group_peer out of range": (lambda: dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, x, group=g, group_peer=3)]), "not part of group"),
        }
        for name, (fn, text) in refused.items():
            with pytest.raises(ValueError, match=text):
                fn()
            assert w._seq == before, name   # nothing moved: the group stays usable
        with pytest.raises(ValueError, match="Must specify global_rank or group_rank"):
            dist.P2POp(dist.isend, x)
        with pytest.raises(ValueError, match="Can't specify both"):
            dist.P2POp(dist.irecv, x, 0, group_peer=0)
        for grp in (None, g):
            a = np.array([5.0, 6.0])
            dist.broadcast(a, group=grp, group_src=0)
            dist.reduce(a, group=grp, group_dst=0)
            outs = [np.zeros(2)]
            dist.gather(a, outs, group=grp, group_dst=0)
            dist.gather(a, outs, group=grp)              # neither: global rank 0
            got = np.zeros(2)
            dist.scatter(got, [a], group=grp, group_src=0)
            assert outs[0].tolist() == got.tolist() == a.tolist() == [5.0, 6.0]
            r = np.zeros(2)
            ws = dist.isend(a, group=grp, group_dst=0, tag=4)
            wr = dist.irecv(r, group=grp, group_src=0, tag=4)
            assert ws is not None and wr is not None
            wr.wait()
            ws.wait()
            assert r.tolist() == [5.0, 6.0]
            r2 = np.zeros(2)
            for work in dist.batch_isend_irecv([
                    dist.P2POp(dist.isend, a + 1, group=grp, group_peer=0, tag=5),
                    dist.P2POp(dist.irecv, r2, group=grp, group_peer=0, tag=5)]):
                work.wait()
            assert r2.tolist() == [6.0, 7.0]
            objs = ["x"]
            dist.broadcast_object_list(objs, group=grp, group_src=0)
            lst: list[object] = [None]
            dist.gather_object("y", lst, group=grp, group_dst=0)
            out: list[object] = [None]
            dist.scatter_object_list(out, ["z"], group=grp, group_src=0)
            assert (objs, lst, out) == (["x"], ["y"], ["z"])
    finally:
        dist.destroy_process_group()


@needs_mpi
def test_a_kept_error_raised_again_and_again_keeps_no_frames() -> None:
    # a broken group raises its kept error on every later call; re-raising the one exception
    # object added each call's frames to its traceback (four per call, without bound), which
    # kept every call's arrays alive with the group
    import gc
    import traceback
    import weakref
    dist.init_process_group("cpu:mpi", timeout=30)
    try:
        g = dist.new_group([0])
        work = importlib.import_module("accelrt.distributed._work")
        w = work.Work(g, "all_reduce", 1)   # (a handle of the group's, not yet waited)
        g._keep(dist.DistError("engine failed", rank=0))
        depths, arrays = [], []
        for _ in range(6):
            a = acc.full((2,), 1.0, device="cpu")
            arrays.append(weakref.ref(a))
            with pytest.raises(dist.DistError, match="engine failed") as info:
                dist.all_reduce(a, group=g)
            depths.append(len(traceback.extract_tb(info.value.__traceback__)))
            del a, info
        assert len(set(depths)) == 1, depths
        gc.disable()   # (freed by reference counts, not by a collection)
        try:
            assert sum(r() is not None for r in arrays) <= 1   # the last call's, at most
        finally:
            gc.enable()
        for _ in range(3):   # a Work of the broken group raises it afresh too
            with pytest.raises(dist.DistError) as info:
                w.wait()
            depths.append(len(traceback.extract_tb(info.value.__traceback__)))
        assert depths[-1] == depths[-2] == depths[-3], depths
    finally:
        with pytest.raises(dist.DistError, match="engine failed") as info:
            dist.destroy_process_group()
        assert len(traceback.extract_tb(info.value.__traceback__)) <= 2
