"""torch.distributed's stores (HashStore, TCPStore, FileStore, PrefixStore), the rendezvous of
init_process_group through them, and a torchrun-style launch without mpiexec."""

from __future__ import annotations

import datetime
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import accelrt.distributed as dist

ROOT = Path(__file__).resolve().parents[2]
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
T = datetime.timedelta


@pytest.fixture(params=["hash", "tcp-master", "tcp-client", "file", "prefix"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dist.Store]:
    kind = request.param
    closers = []
    if kind == "hash":
        s: dist.Store = dist.HashStore()
    elif kind.startswith("tcp"):
        master = dist.TCPStore("127.0.0.1", 0, 1, True, T(seconds=30))
        closers.append(master)
        s = master
        if kind == "tcp-client":
            s = dist.TCPStore("127.0.0.1", master.port, None, False, T(seconds=30))
            closers.insert(0, s)
    elif kind == "file":
        fs = dist.FileStore(str(tmp_path / "store"), 1)
        closers.append(fs)
        s = fs
    else:
        s = dist.PrefixStore("job", dist.HashStore())
    yield s
    for c in closers:
        c.close()  # type: ignore[attr-defined]


def test_store_semantics(store: dist.Store) -> None:
    """torch 2.14's Store API, checked value by value against torch's own stores."""
    store.set_timeout(T(seconds=0.2))
    assert store.timeout == T(seconds=0.2)
    store.set("a", "x")
    store.set("b", b"\xff\x00")
    assert store.get("a") == b"x" and store.get("b") == b"\xff\x00"
    assert store.add("c", 3) == 3 and store.add("c", 4) == 7 and store.get("c") == b"7"
    with pytest.raises(ValueError, match="not a counter"):
        store.add("a", 1)
    assert store.compare_set("a", "y", "z") == b"x"      # mismatch: the current value
    assert store.compare_set("a", "x", "z") == b"z"
    assert store.compare_set("new", "", "v") == b"v"     # missing key, empty expected: set
    assert store.compare_set("new2", "q", "v") == b"q"   # missing key: expected, not set
    assert not store.check(["new2"])
    store.append("ap", "po")
    store.append("ap", "tato")
    assert store.get("ap") == b"potato"
    store.multi_set(["m1", "m2"], ["1", "2"])
    assert store.multi_get(["m1", "m2"]) == [b"1", b"2"]
    assert store.check(["a", "m1"]) and not store.check(["a", "zz"])
    assert {"a", "b", "c", "new", "ap", "m1", "m2"} <= set(store.list_keys())
    n = store.num_keys()
    assert store.delete_key("a") and not store.delete_key("a")
    assert store.num_keys() == n - 1
    store.barrier("bar", 1)
    for call in (lambda: store.get("nokey"), lambda: store.wait(["nokey"]),
                 lambda: store.multi_get(["m1", "zz"]),
                 lambda: store.wait(["nokey"], T(seconds=0.05))):
        # (each store's words are torch 2.15's: "Wait timeout" (HashStore, FileStore's
        # wait), "Timeout waiting for key" (FileStore's get), "wait timeout" (TCPStore))
        with pytest.raises(dist.DistStoreError,
                           match=r"(?i)(wait timeout after|timeout waiting for key).*(nokey|zz)"):
            call()
    with pytest.raises(TypeError, match="key must be a str"):
        store.set(1, "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="amount must be an int"):
        store.add("c", "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="timedelta"):
        store.set_timeout(5)  # type: ignore[arg-type]
    twin = store.clone()
    assert twin.get("c") == b"7"
    twin.set("from_twin", "1")
    assert store.get("from_twin") == b"1"
    if isinstance(twin, dist.TCPStore):
        twin.close()


def test_queues(store: dist.Store) -> None:
    if isinstance(store, dist.FileStore):
        pytest.skip("FileStore has no queues (as torch's: test_file_store_has_no_queues)")
    store.set_timeout(T(seconds=0.2))
    store.queue_push("q", "1")
    store.queue_push("q", b"2")
    assert store.queue_len("q") == 2 and store.check(["q"])
    assert store.queue_pop("q") == b"1" and store.queue_pop("q", False) == b"2"
    with pytest.raises(dist.QueueEmptyError, match="empty"):
        store.queue_pop("q", False)
    with pytest.raises(dist.DistStoreError, match="(?i)wait timeout"):
        store.queue_pop("q")


def test_file_store_has_no_queues(tmp_path: Path) -> None:
    s = dist.FileStore(str(tmp_path / "f"))
    with pytest.raises(NotImplementedError, match="queue support is not implemented"):
        s.queue_push("q", "1")
    assert not s.has_extended_api() and dist.HashStore().has_extended_api()
    s.close()


def test_error_tree() -> None:
    assert issubclass(dist.DistStoreError, dist.DistError)
    assert issubclass(dist.DistNetworkError, dist.DistError)
    assert issubclass(dist.QueueEmptyError, dist.DistStoreError)
    assert issubclass(dist.DistStoreError, RuntimeError)


def test_get_returns_a_value_set_later_by_another_thread() -> None:
    master = dist.TCPStore("127.0.0.1", 0, None, True, T(seconds=30))
    client = dist.TCPStore("127.0.0.1", master.port, None, False, T(seconds=30))
    got: list[bytes] = []
    asked = threading.Event()

    def reader() -> None:
        asked.set()
        got.append(client.get("late"))

    t = threading.Thread(target=reader)
    t.start()
    asked.wait()
    master.set("late", "v")
    t.join(30)
    assert got == [b"v"]
    client.close()
    master.close()


def test_tcp_store_errors() -> None:
    with pytest.raises(dist.DistStoreError, match="1/2 clients joined"):
        dist.TCPStore("127.0.0.1", 0, 2, True, T(seconds=0.2))
    master = dist.TCPStore("127.0.0.1", 0, None, True, T(seconds=30))
    with pytest.raises(dist.DistNetworkError, match="failed to listen"):
        dist.TCPStore("127.0.0.1", master.port, None, True, T(seconds=1))
    # multi-tenant masters of one process share the server
    m2 = dist.TCPStore("127.0.0.1", 0, None, True, T(seconds=30), multi_tenant=True)
    m3 = dist.TCPStore("127.0.0.1", m2.port, None, True, T(seconds=30), multi_tenant=True)
    m2.set("shared", "1")
    assert m3.get("shared") == b"1"
    m2.close()
    m3.close()
    client = dist.TCPStore("127.0.0.1", master.port, None, False, T(seconds=30))
    port = master.port
    master.close()
    with pytest.raises(dist.DistNetworkError, match="closed|did not answer"):
        client.get("x")
    client.close()
    with pytest.raises(dist.DistNetworkError, match="timed out after .* to connect"):
        dist.TCPStore("127.0.0.1", port, None, False, T(seconds=0.2))
    with pytest.raises(ValueError, match="port=0"):
        dist.TCPStore("127.0.0.1", 0)
    # torch 2.15's binding reads the port as a uint16: TypeError (s34; it was ValueError)
    with pytest.raises(TypeError, match="65535"):
        dist.TCPStore("127.0.0.1", 70000)


_WORKER = """
import datetime, sys
import accelrt.distributed as dist
kind, where, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
T = datetime.timedelta(seconds=30)
if kind == "tcp":
    s = dist.TCPStore("127.0.0.1", int(where), 4, False, T)
else:
    s = dist.FileStore(where, 4); s.set_timeout(T)
for _ in range(50):
    s.add("count", 1)
s.set(f"done/{rank}", str(rank))
s.barrier("end", 4)
print("ok", s.get("count").decode(), flush=True)
"""


def _run_workers(args: list[list[str]]) -> list[str]:
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, *a], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
             for a in args]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=60)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                os.killpg(q.pid, signal.SIGKILL)
            pytest.fail("store workers hung")
        assert p.returncode == 0, outs[-1]
    return outs


def test_tcp_store_across_processes() -> None:
    """Three client processes and the master (this process, rank 0) count and meet."""
    master = dist.TCPStore("127.0.0.1", 0, 4, True, T(seconds=60), wait_for_workers=False)
    result: list[bytes] = []
    t = threading.Thread(target=lambda: (master.barrier("end", 4),
                                         result.append(master.get("count"))))
    t.start()
    outs = _run_workers([["tcp", str(master.port), str(r)] for r in (1, 2, 3)])
    t.join(60)
    assert result == [b"150"] and all(o.strip() == "ok 150" for o in outs)
    assert sorted(master.multi_get([f"done/{r}" for r in (1, 2, 3)])) == [b"1", b"2", b"3"]
    master.close()


def test_file_store_across_processes(tmp_path: Path) -> None:
    """Four processes add to one counter of a FileStore: flock keeps every add."""
    path = str(tmp_path / "store")
    outs = _run_workers([["file", path, str(r)] for r in range(4)])
    assert all(o.strip() == "ok 200" for o in outs)
    assert not os.path.exists(path)   # the last of world_size stores removed the file


def test_rendezvous_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelrt.distributed._rendezvous import plan
    for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(v, raising=False)
    p = plan("tcp://localhost:23456?rank=1&world_size=3")
    assert (p.scheme, p.host, p.port, p.rank, p.world_size) == ("tcp", "localhost", 23456, 1, 3)
    p = plan("file:///tmp/x", rank=0, world_size=2)
    assert (p.path, p.rank, p.world_size) == ("/tmp/x", 0, 2)
    with pytest.raises(ValueError, match="file:// rendezvous: world size parameter missing"):
        plan("file:///tmp/x", rank=0)
    with pytest.raises(ValueError, match="tcp:// rendezvous: port number missing"):
        plan("tcp://localhost", rank=0, world_size=1)
    with pytest.raises(ValueError, match="env:// rendezvous: environment variable RANK"):
        plan("env://")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "h")
    monkeypatch.setenv("MASTER_PORT", "1")
    with pytest.raises(ValueError, match="rank 2 is out of range for world size 2"):
        plan("env://")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")
@pytest.mark.parametrize("how", ["tcp", "file", "store"])
def test_one_rank_world_through_a_store(how: str, tmp_path: Path) -> None:
    kwargs: dict[str, object] = {"rank": 0, "world_size": 1}
    if how == "tcp":
        kwargs["init_method"] = f"tcp://127.0.0.1:{_free_port()}"
    elif how == "file":
        kwargs["init_method"] = f"file://{tmp_path / 'rdzv'}"
    else:
        kwargs["store"] = dist.HashStore()
    dist.init_process_group("gloo", **kwargs)  # type: ignore[arg-type]
    try:
        assert dist.get_world_size() == 1 and dist.get_rank() == 0
    finally:
        dist.destroy_process_group()


def test_nccl_unique_id_goes_through_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 makes NCCL's unique id and publishes it in the store; rank 1 reads it there
    (torch's ProcessGroupNCCL); no NCCL_COMM_ID is set. The GPU steps are stand-ins."""
    from accelrt.distributed import _engine, _nccl

    made: list[bytes] = []
    given: list[bytes] = []

    class FakeCore:
        class UniqueId:
            def __init__(self, raw: bytes) -> None:
                self.raw = raw

            @staticmethod
            def from_bytes(raw: bytes) -> FakeCore.UniqueId:
                return FakeCore.UniqueId(raw)

            def __bytes__(self) -> bytes:
                return self.raw

        @staticmethod
        def get_unique_id() -> FakeCore.UniqueId:
            made.append(os.urandom(8))
            return FakeCore.UniqueId(made[-1])

    class FakeEngine:
        def destroy(self) -> None:
            pass

    def create(ctx: object) -> FakeEngine:
        given.append(bytes(ctx.options["unique_id"]))  # type: ignore[attr-defined]
        return FakeEngine()

    monkeypatch.setattr(_nccl, "_core", lambda: FakeCore)
    monkeypatch.setattr(_nccl.NcclEngine, "create", staticmethod(create))
    monkeypatch.setattr(_engine, "cuda_device_count", lambda: 1)
    monkeypatch.delenv("NCCL_COMM_ID", raising=False)
    monkeypatch.delenv("ACCELRT_DISTRIBUTED_BACKEND", raising=False)
    store = dist.HashStore()
    dist.init_process_group(store=store, rank=0, world_size=2, device_id=None)
    dist.destroy_process_group()
    assert store.get("default_pg/nccl/unique_id/0") == made[0] and given == made
    dist.init_process_group(store=store, rank=1, world_size=2)
    dist.destroy_process_group()
    assert len(made) == 1 and given == [made[0], made[0]]
    assert "NCCL_COMM_ID" not in os.environ


_RANK = """
import os, sys
import accelrt.distributed as dist
from accelrt.distributed._rendezvous import plan, share
import datetime
store = plan("env://").connect(datetime.timedelta(seconds=30))
rank = int(os.environ["RANK"])
uid = share(dist.PrefixStore("default_pg", store), "uid", rank, lambda: os.urandom(16))
store.barrier("met", int(os.environ["WORLD_SIZE"]))
print("uid", uid.hex(), flush=True)
try:
    dist.init_process_group(os.environ["BACKEND"] or None)
except dist.DistBackendError as exc:
    print("refused:", exc, flush=True)
else:
    print("world", dist.get_world_size(), flush=True)
    dist.destroy_process_group()
"""


@pytest.mark.parametrize("backend", ["gloo", ""])
def test_torchrun_style_launch_without_mpiexec(backend: str) -> None:
    """Three processes with torchrun's variables: they meet through rank 0's TCPStore at
    MASTER_ADDR:MASTER_PORT, and init_process_group on the cpu backend then refuses at once,
    on every rank, naming mpiexec (MPICH's singletons cannot connect), instead of hanging."""
    port = _free_port()
    procs = []
    for r in range(3):
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "RANK": str(r),
               "LOCAL_RANK": str(r), "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "BACKEND": backend, "ACCELRT_ACCELERATOR": "cpu",
               "CUDA_VISIBLE_DEVICES": ""}
        env.pop("ACCELRT_DISTRIBUTED_BACKEND", None)
        procs.append(subprocess.Popen([sys.executable, "-c", _RANK], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, start_new_session=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=90)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                os.killpg(q.pid, signal.SIGKILL)
            pytest.fail("the torchrun-style launch hung")
        assert p.returncode == 0, outs[-1]
    uids = {line for o in outs for line in o.splitlines() if line.startswith("uid ")}
    assert len(uids) == 1, outs
    for o in outs:
        assert "refused:" in o and "mpiexec -n N" in o, o


# ---------------------------------------------------------------------------- hostile inputs
def test_store_arguments_are_read_as_torch_reads_them(store: dist.Store) -> None:
    """Keys may be UTF-8 bytes, amounts any int64 integer (numpy, bool), timeouts a float of
    seconds, as torch's bindings accept; counters are parsed as ``std::stoll`` and wrap at
    int64 like torch's."""
    np = pytest.importorskip("numpy")
    store.set(b"bk", b"v")
    assert store.get("bk") == b"v" and store.check([b"bk"]) and store.delete_key(b"bk")
    assert store.add("n", np.int64(3)) == 3 and store.add("n", True) == 4
    with pytest.raises(TypeError, match="64-bit"):
        store.add("n", 2 ** 63)
    with pytest.raises(TypeError, match="int"):
        store.add("n", 1.5)
    for old, new in (("", 1), ("  -7xyz", -6), ("+3", 4), ("5.0", 6), ("1_0", 2),
                     (str(2 ** 63 - 1), -(2 ** 63))):
        store.set("c", old)
        assert store.add("c", 1) == new, old
    store.set("c", "abc")
    with pytest.raises(ValueError, match="not a counter"):
        store.add("c", 1)
    store.set_timeout(0.05)
    assert store.timeout == T(milliseconds=50)
    with pytest.raises(dist.DistStoreError):
        store.wait(["missing"], 0.05)
    with pytest.raises(ValueError, match="finite"):
        store.set_timeout(float("nan"))
    with pytest.raises(TypeError, match="timedelta"):
        store.set_timeout(None)  # type: ignore[arg-type]


def test_store_constructors_take_torch_arguments(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    with pytest.raises(ValueError, match="store argument cannot be None"):
        dist.PrefixStore("p", None)  # type: ignore[arg-type]
    assert dist.PrefixStore(b"p", dist.HashStore()).list_keys() == []  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="world size cannot be 0"):
        dist.TCPStore("127.0.0.1", 0, 0, True, T(seconds=5))
    with dist.TCPStore("127.0.0.1", np.int64(0), -1, True, 5.0) as master:  # type: ignore[arg-type]
        assert master.timeout == T(seconds=5)
        master.set_timeout(0.05)
        with pytest.raises(dist.DistStoreError):
            master.get("missing")
    fs = dist.FileStore(os.fsencode(tmp_path / "f"), np.int64(1))  # type: ignore[arg-type]
    fs.set("k", "v")
    assert fs.get("k") == b"v"
    fs.close()


def test_init_process_group_checks_rank_and_world_size_types() -> None:
    """A store's rank must lie in the world (it was silently made rank 0); rank, world size
    and init_method of the wrong type say so (instead of a comparison or attribute error)."""
    with pytest.raises(ValueError, match="rank 5 is out of range for world size 1"):
        dist.init_process_group("gloo", store=dist.HashStore(), rank=5, world_size=1)
    with pytest.raises(TypeError, match="rank must be an int, got float"):
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0.0,  # type: ignore[arg-type]
                                world_size=1)
    with pytest.raises(TypeError, match="world_size must be an int, got str"):
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0,
                                world_size="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="init_method must be a str"):
        dist.init_process_group("gloo", init_method=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite"):
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                                timeout=float("inf"))
    assert not dist.is_initialized()


def test_a_late_reply_never_answers_the_next_request() -> None:
    # a TCPStore client gave up on a request that the server answered late; that reply then
    # sat on the connection and was read as the answer to the client's next request
    import socket
    from multiprocessing.connection import Connection

    from accelrt.distributed import _tcpstore as st

    lsock = socket.create_server(("127.0.0.1", 0))
    lsock.settimeout(30)
    port = lsock.getsockname()[1]
    late, served = threading.Event(), threading.Event()

    def greet(conn: Connection) -> None:
        assert st._unpack(conn.recv_bytes()) == [b"hello"]
        conn.send_bytes(st._pack([b"ok", st._PROTOCOL]))

    def serve() -> None:
        c1 = Connection(lsock.accept()[0].detach())
        greet(c1)
        c1.recv_bytes()                    # the request it answers too late
        late.wait(30)
        try:
            c1.send_bytes(st._pack([b"ok", b"111"]))
        except OSError:
            pass
        try:
            c2 = Connection(lsock.accept()[0].detach())   # the client's reconnection
        except OSError:
            return
        greet(c2)
        c2.recv_bytes()
        served.set()                       # (before the answer: the client reads it next)
        c2.send_bytes(st._pack([b"ok", b"7"]))

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    table = st._RemoteTable("127.0.0.1", port, 0.05)
    try:
        with pytest.raises(dist.DistNetworkError, match="did not answer num_keys"):
            table.num_keys()
        late.set()
        assert table.num_keys() == 7 and served.is_set()
    finally:
        late.set()
        table.close()
        lsock.close()
        t.join(30)
