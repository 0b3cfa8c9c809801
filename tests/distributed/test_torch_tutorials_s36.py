"""PyTorch's distributed tutorial, "Writing Distributed Applications with PyTorch"
(pytorch/tutorials ``intermediate_source/dist_tuto.rst``), ported to ``accelrt.distributed``
and checked to do what the tutorial says: its launch template, blocking and non-blocking
point-to-point, the all-reduce over ``new_group([0, 1])``, the six collectives in the
positional forms the tutorial lists, gradient averaging by hand and its ring all-reduce.
Tensors become ``acc.Array``s on the cpu backend; the tutorial's arithmetic (``tensor += 1``,
``accum[:] += recv_buff[:]``, ``grad /= size``) is done in numpy.

The expected behaviour is the tutorial's text and torch 2.15.0's (its CPU build, gloo, run on
the same programs where it can run: ``backend="mpi"`` needs a torch built with MPI, so its
warning was read from ``torch/distributed/distributed_c10d.py`` and observed up to the
"doesn't have MPI built in" error). The rank checks run in one ``mpiexec -n 4`` launch (one
``OK``/``FAIL`` line per case and rank, under a hard timeout); the launch template's checks
run in this process (MPI's singleton world).

Fixed here (each failed before): a ``send``/``recv`` between two ranks as the first operation
of a larger group hung (the MPI engine started on first use, by duplicating the group's
communicator, a collective the other ranks never joined; torch constructs gloo at
``init_process_group``/``new_group``); ``init_process_group("mpi", rank=0, world_size=0)``,
the tutorial's MPI variant, raised ``ValueError`` (torch 2.15 warns that both are ignored and
takes the MPI runtime's); the tutorial's ``Process``-per-rank template without ``mpiexec``
raised a ``ValueError`` that did not say how to launch.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import accelrt.distributed as dist

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")


@pytest.fixture
def no_world() -> Iterator[None]:
    """Destroys the default group a test made (the launch-template tests make their own)."""
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


@needs_mpi
def test_mpi_backend_ignores_rank_and_world_size_with_a_warning(no_world: None) -> None:
    """mirrors dist_tuto.rst "MPI Backend": ``init_process(0, 0, run, backend='mpi')`` under
    ``mpirun`` calls ``init_process_group('mpi', rank=0, world_size=0)``; torch 2.15 warns
    that both are ignored (distributed_c10d.py, ``backend == Backend.MPI``) and takes the
    ranks from the MPI runtime (here MPI's singleton world of one rank)."""
    with pytest.warns(UserWarning, match=re.escape(
            "For MPI backend, world_size (0) and rank (0) are ignored since they are assigned "
            "by the MPI runtime.")) as caught:
        dist.init_process_group("mpi", rank=0, world_size=0, timeout=30)
    assert caught[0].filename == __file__   # the caller's line, as torch's stacklevel=2
    assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, "mpi")


@needs_mpi
def test_gloo_template_without_a_launcher_names_the_fix(
        no_world: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """mirrors dist_tuto.rst "Setup": the template starts one ``Process`` per rank, each
    calling ``init_process_group('gloo', rank=rank, world_size=size)`` with ``MASTER_ADDR``
    and ``MASTER_PORT`` set. accelrt's gloo is its MPI engine, which joins ranks started by
    ``mpiexec`` only (docs/differences.md section 7): each rank refuses at once, saying how to
    launch, and a world of one rank still starts (size 1 needs no launcher)."""
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    for v in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(ValueError, match=r"world_size=2 but the MPI launcher started 1 "
                                         r"ranks \(no MPI launcher .*mpiexec -n N"):
        dist.init_process_group("gloo", rank=0, world_size=2, timeout=30)
    assert not dist.is_initialized()
    dist.init_process_group("gloo", rank=0, world_size=1, timeout=30)
    assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, "gloo")


_RANKS = r'''
import sys, traceback, warnings
import numpy as np
import accelrt as acc
import accelrt.distributed as dist

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    # the tutorial's MPI variant: init_process(0, 0, run, backend='mpi') under mpirun
    dist.init_process_group("mpi", rank=0, world_size=0, timeout=20)
rank, size = dist.get_rank(), dist.get_world_size()

from rank_cases import Cases
case = Cases(rank, after=dist.barrier)

def zeros1():
    return acc.zeros(1, device="cpu")

@case
def blocking_p2p_first():   # "Blocking point-to-point communication" (the group's first op)
    tensor = zeros1()
    if rank == 0:
        tensor.copy_(tensor.numpy() + 1)
        dist.send(tensor=tensor, dst=1)
    elif rank == 1:
        dist.recv(tensor=tensor, src=0)
    assert tensor.tolist() == ([1.0] if rank < 2 else [0.0]), tensor.tolist()

@case
def mpi_warning_and_world():   # ranks from the MPI runtime, torch 2.15's warning
    words = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert words == ["For MPI backend, world_size (0) and rank (0) are ignored since they "
                     "are assigned by the MPI runtime."], words
    assert size == 4 and dist.get_backend() == "mpi"

@case
def non_blocking_p2p():   # "Non-blocking point-to-point communication"
    tensor = zeros1()
    req = None
    if rank == 0:
        tensor.fill_(1.0)
        req = dist.isend(tensor=tensor, dst=1)
    elif rank == 1:
        req = dist.irecv(tensor=tensor, src=0)
    if req is not None:
        assert isinstance(req, dist.Work)
        req.wait()
        assert req.is_completed()
    # after wait() the value is guaranteed to be 1.0
    assert tensor.tolist() == ([1.0] if rank < 2 else [0.0]), tensor.tolist()

@case
def all_reduce_on_a_new_group():   # "All-Reduce example": new_group([0, 1]), ReduceOp.SUM
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        group = dist.new_group([0, 1])
        tensor = acc.ones(1, device="cpu")
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    # members hold 2.0; the others keep 1.0 and are warned (torch 2.15's _warn_not_in_group)
    assert tensor.tolist() == ([2.0] if rank < 2 else [1.0]), tensor.tolist()
    texts = [str(x.message) for x in w]
    assert texts == ([] if rank < 2 else [f"Running all_reduce on global rank {rank} which "
                                          "does not belong to the given group."]), texts

@case
def p2p_first_on_a_new_group():   # a send/recv as a new group's first operation
    group = dist.new_group([0, 1])
    if rank < 2:
        t = acc.full((3,), float(rank + 5), device="cpu")
        if rank == 0:
            dist.send(t, 1, group=group)
        else:
            dist.recv(t, 0, group=group)
        assert t.tolist() == [5.0] * 3, t.tolist()

@case
def the_four_operators():   # SUM, PRODUCT, MAX, MIN, element-wise
    R = dist.ReduceOp
    want = {R.SUM: [10.0, -10.0], R.PRODUCT: [24.0, 24.0], R.MAX: [4.0, -1.0],
            R.MIN: [1.0, -4.0]}
    for op, expected in want.items():
        t = acc.asarray(np.array([rank + 1.0, -(rank + 1.0)], dtype=np.float32), device="cpu")
        dist.all_reduce(t, op=op)
        assert t.tolist() == expected, (op, t.tolist())

@case
def six_collectives_positional():   # the list of collectives, in the tutorial's forms
    t = acc.full((2,), float(rank), device="cpu")
    dist.broadcast(t, 2, None)                       # broadcast(tensor, src, group)
    assert t.tolist() == [2.0, 2.0], t.tolist()
    t = acc.full((2,), float(rank + 1), device="cpu")
    dist.reduce(t, 3, dist.ReduceOp.SUM, None)       # reduce(tensor, dst, op, group)
    if rank == 3:
        assert t.tolist() == [10.0, 10.0], t.tolist()
    t = acc.empty(2, device="cpu")
    chunks = ([acc.full((2,), 10.0 * i, device="cpu") for i in range(size)]
              if rank == 1 else None)
    dist.scatter(t, chunks, 1, None)                 # scatter(tensor, scatter_list, src, group)
    assert t.tolist() == [10.0 * rank] * 2, t.tolist()
    t = acc.full((2,), float(rank * rank), device="cpu")
    got = [acc.empty(2, device="cpu") for _ in range(size)] if rank == 0 else None
    dist.gather(t, got, 0, None)                     # gather(tensor, gather_list, dst, group)
    if rank == 0:
        assert [g.tolist() for g in got] == [[float(i * i)] * 2 for i in range(size)]
    out = [acc.empty(2, device="cpu") for _ in range(size)]
    dist.all_gather(out, acc.full((2,), rank + 0.5, device="cpu"), None)
    assert [o.tolist() for o in out] == [[i + 0.5] * 2 for i in range(size)]
    dist.barrier(None)                               # barrier(group)
    sub = dist.new_group([1, 2, 3])
    if rank > 0:
        dist.barrier(sub)

@case
def average_gradients():   # "Gradient averaging": all_reduce(SUM), then divide by the size
    grads = [acc.asarray(np.arange(4, dtype=np.float32) * (rank + 1), device="cpu"),
             acc.full((2, 2), float(rank), device="cpu")]
    world = float(dist.get_world_size())
    for g in grads:
        dist.all_reduce(g, op=dist.ReduceOp.SUM)
        g.copy_(g.numpy() / world)
    assert grads[0].tolist() == [0.0, 2.5, 5.0, 7.5], grads[0].tolist()
    assert grads[1].tolist() == [[1.5, 1.5], [1.5, 1.5]], grads[1].tolist()

def ring_allreduce(send, recv):   # "Our Own Ring-Allreduce" (isend right, recv left)
    me, n = dist.get_rank(), dist.get_world_size()
    send_buff, recv_buff = send.to(copy=True), send.to(copy=True)
    accum = send.numpy().copy()
    left, right = (me - 1 + n) % n, (me + 1) % n
    for i in range(n - 1):
        if i % 2 == 0:
            send_req = dist.isend(send_buff, right)
            dist.recv(recv_buff, left)
            accum += recv_buff.numpy()
        else:
            send_req = dist.isend(recv_buff, right)
            dist.recv(send_buff, left)
            accum += send_buff.numpy()
        send_req.wait()
    recv.copy_(accum)

@case
def ring_allreduce_sums():
    send = acc.asarray(np.array([rank, 10 * rank, 1], dtype=np.float64), device="cpu")
    recv = acc.empty(3, dtype="float64", device="cpu")
    ring_allreduce(send, recv)
    assert recv.tolist() == [6.0, 60.0, 4.0], recv.tolist()
    assert send.tolist() == [rank, 10.0 * rank, 1.0]   # the input is left alone

case.done()
dist.destroy_process_group()
'''


def test_dist_tuto_over_four_ranks(tmp_path: Path) -> None:
    """mirrors dist_tuto.rst: "Blocking point-to-point communication", "Non-blocking
    point-to-point communication", "All-Reduce example", the four reduce operators, the list
    of six collectives (positional forms), "Gradient averaging" and "Our Own Ring-Allreduce",
    launched as its "MPI Backend" section says (``mpirun -n 4``, ``backend='mpi'``, rank and
    world size 0)."""
    from test_distributed import MPIEXEC, _check_cases, launch
    if not HAVE_MPI or MPIEXEC is None:
        pytest.skip("needs mpi4py and mpiexec (pip install 'accelrt[mpi]')")
    from rank_cases import write_script
    script = write_script(tmp_path, _RANKS)
    rc, out, _ = launch(4, str(script), timeout=60)
    assert _check_cases(4, out, rc) == 9, out[-3000:]
