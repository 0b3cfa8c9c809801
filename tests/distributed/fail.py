"""Failure modes of accelrt.distributed, one per launch (run by tests/distributed/test_distributed.py).

Usage: mpiexec -n N python [-m accelrt.distributed.run] tests/distributed/fail.py MODE

Every mode must end the job within seconds: with a clear error on the surviving ranks where
one can be raised, otherwise through the launcher's abort with a non-zero exit status.
"""

from __future__ import annotations

import os
import sys
import threading

import accelrt as acc
import accelrt.distributed as dist

MODE = sys.argv[1]
TIMEOUT = float(os.environ.get("FAIL_TIMEOUT", "2"))


def stuck() -> None:
    """A peer that stops communicating (no sleep: it waits on an event nobody sets; the
    launcher kills it when the job is aborted)."""
    threading.Event().wait(60)
    os._exit(7)


if MODE == "init_stuck":
    from mpi4py import MPI
    if MPI.COMM_WORLD.Get_rank() == 1:
        stuck()
    dist.init_process_group("cpu:mpi", timeout=TIMEOUT)
    raise SystemExit("rank 0 passed init without rank 1")

# init and the first collective wait up to 30 s, so that a loaded machine's start-up skew
# between the ranks (imports taking seconds) is not mistaken for a stuck peer; the modes'
# own calls then have the short TIMEOUT (the world's, from set_timeout)
from mpi4py import MPI  # noqa: E402

MPI.COMM_WORLD.Barrier()
dist.init_process_group("cpu:mpi", timeout=max(TIMEOUT, 30.0))
R, N = dist.get_rank(), dist.get_world_size()
a = acc.full((4,), 1.0, device="cpu")
dist.all_reduce(a)   # sequence number 1: everyone is here
dist.set_timeout(TIMEOUT)

if MODE == "ok":
    print(f"OK {R} {a.tolist()}", flush=True)
elif MODE == "raise":
    if R == 1:
        raise ValueError("boom on rank 1")
    dist.all_reduce(a)
elif MODE == "die":
    if R == 1:
        os._exit(3)
    dist.all_reduce(a)
elif MODE == "stuck":
    if R == 1:
        stuck()
    # sequence number 2: rank 1 never joins (FAIL_OP: an object collective, rank 1 its source)
    if os.environ.get("FAIL_OP") == "broadcast_object_list":
        dist.broadcast_object_list([None], src=1)
    else:
        dist.all_reduce(a)
elif MODE == "mismatch":
    # rank N-1 differs: float64[2] (dtype: same bytes) or float32[8] (shape)
    kind = os.environ["FAIL_KIND"]
    if R == N - 1:
        x = (acc.full((2,), 1.0, dtype="float64", device="cpu") if kind == "dtype"
             else acc.full((8,), 1.0, device="cpu"))
    else:
        x = acc.full((4,), 1.0, device="cpu")
    try:
        dist.all_reduce(x)
    except dist.DistError as e:
        print(f"CAUGHT {R} {type(e).__name__}: {e}", flush=True)
        dist.barrier()   # still in step: the check ran before any data moved
        dist.destroy_process_group()
        raise SystemExit(0) from None
    print(f"NOT CAUGHT {R} {x.tolist()}", flush=True)
elif MODE == "monitored":
    if R == 1:
        stuck()
    dist.monitored_barrier(timeout=TIMEOUT)
elif MODE == "monitored_late":
    # rank 0 times out and goes on; rank 1 arrives afterwards (gated by a message): its token
    # must stay unmatched (the timed-out receive was cancelled, not left posted on a freed
    # buffer), so rank 0's probe finds it and the next monitored barrier takes it
    from accelrt.distributed._world import _group
    comm = _group(None).control()
    if R == 0:
        try:
            dist.monitored_barrier(timeout=TIMEOUT)
        except dist.DistTimeoutError as e:
            print(f"TIMED OUT {e}", flush=True)
        comm.send("go", 1, 4242)
        comm.Probe(source=1, tag=0x7ACC)    # blocks for ever if a stale receive took it
        print("PROBED", flush=True)
        dist.monitored_barrier(timeout=30)
    else:
        comm.recv(source=0, tag=4242)
        dist.monitored_barrier(timeout=30)
    print(f"DONE {R}", flush=True)
elif MODE == "monitored_unreleased":
    if R == 0:
        stuck()
    # rank 1 waits its timeout and this grace for rank 0's release (5 s by default)
    from accelrt.distributed import _collectives
    _collectives.MONITORED_RELEASE_GRACE = 0.5
    dist.monitored_barrier(timeout=TIMEOUT)
elif MODE == "two_ranks_one_gpu":
    # the GPU machine: both ranks ask for cuda:0 under NCCL
    dist.destroy_process_group()
    dist.init_process_group("cuda:nccl", timeout=TIMEOUT)
    acc.set_device_index("cuda:0")
    try:
        dist.all_reduce(acc.full((4,), 1.0, device="cuda:0"))
    except dist.DistError as e:
        print(f"CAUGHT {R} {e}", flush=True)
        raise SystemExit(0) from None
else:
    raise SystemExit(f"unknown mode {MODE}")
dist.destroy_process_group()
