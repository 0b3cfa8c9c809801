"""Distributed helpers of widely used open-source projects, ported by changing the import
(``torch.distributed`` -> ``accelrt.distributed``) and run on 2 and 4 ranks with accelrt's
launcher (``mpiexec -n N python -m accelrt.distributed.run``): detectron2's
``utils/comm.py`` (and ``engine/launch.py``'s per-machine groups), torchvision's
``references/classification/utils.py`` (``init_distributed_mode``, ``SmoothedValue`` /
``MetricLogger``), Megatron-LM's ``core/parallel_state.py`` groups and tensor-parallel
mappings, HF accelerate's ``utils/operations.py`` and ``PartialState``, fairseq's
``distributed/utils.py`` and timm's ``utils/distributed.py``. The rank script
(``real_code_ranks_s38.py``) re-writes the helpers short, crediting each; it also runs
under torch 2.15.0's gloo (``REALCODE_TORCH=1``, one process per rank with torchrun's
variables), where every case passed on the same inputs: its assertions are torch's answers.

Fixed here (each test failed before):

* a store-based init of ranks an MPI launcher started (``init_method="env://"`` as
  torchvision's and timm's ``init_distributed_mode``, ``"tcp://..."`` with
  ``backend="GLOO"`` as detectron2's ``launch``, ``"file://..."``) raised ``DistBackendError``
  "cannot join N processes that no MPI launcher started": the store is now made as torch
  makes it and the world is the launcher's MPI world;
* ``python -m accelrt.distributed.run`` did not set ``MASTER_ADDR``/``MASTER_PORT``, so the
  ``env://`` of torchrun-style code raised "environment variable MASTER_ADDR expected": the
  runner now sets them where the launch did not (as torchrun does);
* ``init_process_group`` / ``destroy_process_group`` again on the same ``MASTER_PORT`` (a
  loop torch runs) failed on the other ranks, who joined rank 0's old store as it closed
  ("closed during hello" / "closed during add") or waited for ever on it: the ranks of a
  launched world now meet before joining the store, and a ``TCPStore`` client retries a
  connection closed during its greeting, as torch's retries "connect/validate".
"""

from __future__ import annotations

import importlib.util
import re
import socket
import threading
from pathlib import Path

import pytest

import accelrt.distributed as dist

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
HERE = Path(__file__).parent


def _launcher():
    from test_distributed import mpi_launcher
    return mpi_launcher()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("n, how", [(4, "torchvision"), (2, "detectron2"), (4, "detectron2")])
def test_real_distributed_helpers(n: int, how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """torchvision's init (``env://`` with RANK/WORLD_SIZE/LOCAL_RANK from the runner, and
    MASTER_ADDR/MASTER_PORT it now sets) or detectron2's (``backend="GLOO"``,
    ``tcp://127.0.0.1:port``, ``timeout=``, per-machine ``new_group``s), then the helpers of
    the six projects: seven cases per rank, every one torch 2.15 gloo's answer."""
    check, launch = _launcher()
    for v in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(v, raising=False)
    rc, out, _ = launch(n, str(HERE / "real_code_ranks_s38.py"), how, str(_free_port()),
                        timeout=90)
    assert check(n, out, rc) == 7, out[-3000:]


_LOOP = r'''
import os, sys
import accelrt as acc
import accelrt.distributed as dist

rank = int(os.environ["RANK"])


def say(line):
    # a file per rank: mpiexec merges the ranks' output, where two prints may interleave
    with open(f"{sys.argv[2]}.said{rank}", "a") as f:
        f.write(line + "\n")


say(f"master {rank} {os.environ.get('MASTER_ADDR')} {os.environ.get('MASTER_PORT')}")
port = int(sys.argv[1])
methods = ["env://"] * 3 + [f"tcp://127.0.0.1:{port}"] * 2 + [f"file://{sys.argv[2]}"] * 2
for k, method in enumerate(methods):
    kw = {} if method == "env://" else {"rank": rank, "world_size": int(os.environ["WORLD_SIZE"])}
    dist.init_process_group("gloo", init_method=method, **kw)
    a = acc.full((2,), float(dist.get_rank() + k), device="cpu")
    dist.all_reduce(a)
    n = dist.get_world_size()
    assert a.tolist() == [float(n * (n - 1) // 2 + n * k)] * 2, (method, a.tolist())
    say(f"ok {rank} {k} {method.split(':')[0]}")
    dist.destroy_process_group()
# a world size that is not the launcher's: a ValueError on every rank before any waits
try:
    dist.init_process_group("gloo", init_method="env://", world_size=5, rank=rank)
except ValueError as exc:
    say(f"refused {rank}: {exc}")
assert not dist.is_initialized()
'''


@pytest.mark.parametrize("cliques", ["1", "2"], ids=["one-node", "two-nodes"])
def test_store_based_init_under_the_launcher_again_and_again(
        tmp_path: Path, cliques: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``env://`` (three times on the runner's MASTER_PORT), ``tcp://`` and ``file://`` inits
    of a launched world, each destroyed before the next (torch 2.15's gloo runs the same
    loop): every one joins the launcher's ranks. The runner's MASTER_ADDR is loopback on one
    node, rank 0's host name over two (simulated) nodes, and the same on every rank."""
    check, launch = _launcher()
    for v in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(v, raising=False)
    script = tmp_path / "loop_s38.py"
    script.write_text(_LOOP)
    n = 4 if cliques == "2" else 2
    rc, out, _ = launch(n, str(script), str(_free_port()), str(tmp_path / "fstore"),
                        env={"MPIR_CVAR_NUM_CLIQUES": cliques}, timeout=90)
    assert rc == 0, out[-3000:]
    out = "".join((tmp_path / f"fstore.said{r}").read_text() for r in range(n))
    oks = re.findall(r"ok (\d) (\d) (env|tcp|file)", out)
    assert sorted(oks) == sorted((str(r), str(k), m) for r in range(n) for k, m in
                                 enumerate(["env"] * 3 + ["tcp"] * 2 + ["file"] * 2)), out
    masters = set(re.findall(r"master \d (\S+) (\d+)", out))
    assert len(masters) == 1, out
    addr = masters.pop()[0]
    assert addr == ("127.0.0.1" if cliques == "1" else socket.gethostname()), addr
    refused = re.findall(r"refused \d: world_size=5 but the MPI launcher started (\d) ranks",
                         out)
    assert refused == [str(n)] * n, out


def test_runner_keeps_master_addr_and_port_given(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    """MASTER_ADDR/MASTER_PORT set by the launch are left as they are."""
    check, launch = _launcher()
    script = tmp_path / "env_s38.py"
    # (each rank writes a file: mpiexec merges the ranks' output, and two prints may
    # interleave within one line)
    script.write_text("import os, pathlib\n"
                      f"pathlib.Path({str(tmp_path)!r}, 'env' + os.environ['RANK']).write_text("
                      "os.environ['MASTER_ADDR'] + ' ' + os.environ['MASTER_PORT'])\n")
    rc, out, _ = launch(2, str(script), env={"MASTER_ADDR": "localhost",
                                             "MASTER_PORT": "29512"})
    assert rc == 0, out
    assert [(tmp_path / f"env{r}").read_text() for r in range(2)] == ["localhost 29512"] * 2


def test_tcpstore_client_retries_a_connection_closed_during_its_greeting() -> None:
    """A client that reached a server closing as it came (rank 0's store of the world just
    destroyed) connects again until the master of the next world answers, within its timeout
    (torch's client retries "connect/validate"); before, it raised DistNetworkError "closed
    during hello" at once."""
    import datetime
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    made: dict[str, object] = {}

    def client() -> None:
        try:
            made["store"] = dist.TCPStore("127.0.0.1", port, is_master=False,
                                          timeout=datetime.timedelta(seconds=30))
        except Exception as exc:   # reported by the assertion below
            made["error"] = exc

    t = threading.Thread(target=client)
    t.start()
    conn, _ = listener.accept()   # the old master accepts the client, then goes away
    conn.close()
    listener.close()
    master = dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=30))
    t.join(60)
    assert "error" not in made, made.get("error")
    store = made["store"]
    assert isinstance(store, dist.TCPStore)
    store.set("k", "v")
    assert master.get("k") == b"v"
    store.close()
    master.close()
