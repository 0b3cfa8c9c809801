"""Receives from any source on MPI, across simulated nodes.

MPICH 5.0's ch4 device, when ranks reach each other both through shared memory and through
the network (``MPIR_CVAR_NUM_CLIQUES=2``: four ranks as two nodes of two, the setting of
docs/DISTRIBUTED.md's multi-node tests), could leave a posted ``MPI_Irecv(MPI_ANY_SOURCE)``
waiting for ever for a message that had arrived: rank 0's ``recv()`` without ``src`` after a
ring exchange, the other ranks in the next barrier (DeepSpeed's ``TorchBackend.recv``
defaults ``src=None``; tests/distributed/test_real_code2_dist_s38.py hung that way about one
run in ten under load). The MPI engine matches such a receive with a probe
(``MPI_Improbe``/``MPI_Mprobe``) and receives the message it matched; before, this test hung
within its rounds (raw mpi4py with the same pattern hangs in nearly every run).
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None

RANKS = textwrap.dedent('''
    import numpy as np
    import accelrt as acc
    import accelrt.distributed as dist
    from rank_cases import Cases

    dist.init_process_group("mpi")
    rank, n = dist.get_rank(), dist.get_world_size()
    case = Cases(rank, after=dist.barrier)

    @case
    def any_source_rounds():
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        for it in range(60):
            out = acc.empty((2,), dtype="int64", device="cpu")
            reqs = [dist.irecv(out, src=prv), dist.isend(acc.asarray(np.array([rank, it])), nxt)]
            for r in reqs:
                r.wait()
            assert out.numpy().tolist() == [prv, it]
            if rank == 0:
                got = acc.empty((1,), dtype="int64", device="cpu")
                srcs = sorted(dist.recv(got) for _ in range(n - 1))
                assert srcs == list(range(1, n)), srcs
            else:
                dist.send(acc.asarray(np.array([rank])), 0)
            dist.barrier()

    @case
    def any_source_irecv_then_wait():
        # irecv without src: its source is read when the work completes; is_completed polls
        if rank == 0:
            bufs = [acc.empty((1,), dtype="int64", device="cpu") for _ in range(n - 1)]
            works = [dist.irecv(b) for b in bufs]
            for w in works:
                w.wait()
            assert sorted(int(b.numpy()[0]) for b in bufs) == [10 * r for r in range(1, n)]
        else:
            dist.send(acc.asarray(np.array([10 * rank])), 0)

    case.done()
    dist.destroy_process_group()
''')


def test_any_source_receives_across_simulated_nodes(tmp_path: Path) -> None:
    if not HAVE_MPI:
        pytest.skip("needs mpi4py and mpiexec (pip install 'accelrt[mpi]')")
    from rank_cases import write_script
    from test_distributed import MPIEXEC, _check_cases, launch
    if MPIEXEC is None:
        pytest.skip("needs mpiexec (pip install 'accelrt[mpi]')")
    script = write_script(tmp_path, RANKS)
    for _ in range(2):
        rc, out, _ = launch(4, str(script), env={"MPIR_CVAR_NUM_CLIQUES": "2"}, timeout=60)
        assert _check_cases(4, out, rc) == 2, out[-3000:]
