"""Session 38 review of two merges (s38-distreal: store-based inits under the MPI launcher and
the TCPStore greeting retry; s38-pgname: ``ProcessGroup.name()``/``group_name``).

Fixed here (each test failed before):

* a ``TCPStore`` client of a server that is no TCPStore (an HTTP server on ``MASTER_PORT``,
  a server answering a frame header and then nothing) read the greeting's answer with no
  bound on time or size and hung for ever; torch 2.15's client fails at once with
  ``DistNetworkError`` "Ping failed, invalid value returned from server". Run in a
  subprocess with a timeout;
* ``init_process_group(_ranks=[...])`` named the world ``"0"``; torch 2.15 names it by the
  SHA-1 of the ranks and the group count (``_process_group_name(_ranks,
  use_hashed_name=True)``), the value checked below under torch 2.15 gloo on one rank.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import accelrt.distributed as dist

ROOT = Path(__file__).resolve().parents[2]

_CLIENT = textwrap.dedent("""
    import datetime, socket, sys, threading, time
    import accelrt.distributed as dist
    answer = bytes.fromhex(sys.argv[1])
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    kept = []
    def serve():
        while True:
            c, _ = srv.accept()
            c.sendall(answer)   # then nothing more, the connection left open
            kept.append(c)
    threading.Thread(target=serve, daemon=True).start()
    t0 = time.monotonic()
    try:
        dist.TCPStore("127.0.0.1", srv.getsockname()[1], 2, False,
                      timeout=datetime.timedelta(seconds=2))
        print("CONNECTED")
    except dist.DistNetworkError as e:
        print("RAISED", f"{time.monotonic() - t0:.2f}", e)
""")


@pytest.mark.parametrize("answer, words", [
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "is not an accelrt TCPStore"),   # 1.2 GB announced
    (b"\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x10", "is not an accelrt TCPStore"),
    (b"\x00\x00\x00\x10", "did not answer hello in time"),   # a frame begun, never ended
], ids=["http", "long-frame-header", "silent-after-header"])
def test_tcpstore_client_of_a_server_of_another_protocol_fails_in_time(
        answer: bytes, words: str) -> None:
    try:
        proc = subprocess.run([sys.executable, "-c", _CLIENT, answer.hex()],
                              capture_output=True, text=True, timeout=60,
                              env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""})
    except subprocess.TimeoutExpired:
        pytest.fail("the TCPStore client hung on a server that is no TCPStore")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and out.startswith("RAISED"), out
    assert words in out, out
    assert float(out.split()[1]) < 5.0, out   # the greeting is bounded by the 2 s timeout


needs_mpi = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                               reason="mpi4py is not installed (pip install 'accelrt[mpi]')")


@needs_mpi
def test_init_process_group_ranks_name_the_world_as_torch() -> None:
    """torch 2.15 (gloo, one rank): ``init_process_group(..., _ranks=[0])`` names the world
    'b97094b56f0e21151085fe3cd1636cbd0b0bc48b' (SHA-1 of '0_0'); ``_ranks=[]`` or none
    names it '0'; the next group is '1' either way."""
    hashed = hashlib.sha1(b"0_0").hexdigest()
    assert hashed == "b97094b56f0e21151085fe3cd1636cbd0b0bc48b"
    for ranks, name in (([0], hashed), ([], "0"), (None, "0")):
        dist.init_process_group("cpu:mpi", timeout=30, _ranks=ranks)
        try:
            world = dist.group.WORLD
            assert world is not None and world.group_name == name
            assert dist._get_process_group_name(world) == name
            assert dist.distributed_c10d._resolve_process_group(name) is world
            assert dist.get_pg_count() == 1
            g = dist.new_group([0])
            assert isinstance(g, dist.ProcessGroup) and g.group_name == "1"
        finally:
            dist.destroy_process_group()
