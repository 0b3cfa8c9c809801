"""Second pass of distributed helpers of widely used projects, re-written short (each credits
its source), run on every rank as ``OK``/``FAIL`` cases (tests/distributed/rank_cases.py):
torchmetrics, PyTorch Lightning (fabric), DeepSpeed (``comm/torch.py``'s ``TorchBackend``,
``comm/comm.py``, ``utils/groups.py``) and fairscale's model-parallel groups.

As ``real_code_ranks_s38.py``, the same file runs under torch 2.15's gloo (``REALCODE_TORCH=1``,
started by ``torchrun``) and under ``accelrt.distributed`` (``mpiexec -n N python -m
accelrt.distributed.run``): the values asserted are the ones torch gave. Tensors are made by the
``T``/``empty`` shim; their arithmetic is numpy on ``N(t)``.

``argv[1]``: ``lightning`` (init as fabric's ``_init_dist_connection``: MASTER_ADDR/MASTER_PORT
from the cluster environment, ``init_process_group("gloo", rank=, world_size=, timeout=)``) or
``deepspeed`` (init as ``TorchBackend.__init__``: ``init_method=None``, ``rank=-1``,
``world_size=-1``).
"""

from __future__ import annotations

import datetime
import os
import sys
from typing import Any

import numpy as np

TORCH = bool(os.environ.get("REALCODE_TORCH"))
if TORCH:
    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import get_global_rank as c10d_get_global_rank

    def T(a: Any):
        return torch.from_numpy(np.array(a, copy=True))

    def empty(shape, dtype):
        return torch.from_numpy(np.empty(shape, dtype=dtype))
else:
    import accelrt as acc
    import accelrt.distributed as dist
    from accelrt.distributed.distributed_c10d import get_global_rank as c10d_get_global_rank

    def T(a: Any):
        return acc.asarray(np.array(a, copy=True), device="cpu")

    def empty(shape, dtype):
        return acc.empty(shape, dtype=dtype, device="cpu")


def N(t) -> np.ndarray:
    return t if isinstance(t, np.ndarray) else t.numpy()


def zeros_like(t):
    return T(np.zeros_like(N(t)))


MODE = sys.argv[1]


# ------------------------------------------------------------------------------------------
# torchmetrics src/torchmetrics/utilities/distributed.py (Lightning-AI/torchmetrics):
# gather_all_tensors (sizes gathered, padded, gathered, trimmed) and Metric._sync_dist
def tm_simple_gather_all_tensors(result, group, world_size: int) -> list:
    gathered_result = [zeros_like(result) for _ in range(world_size)]
    dist.all_gather(gathered_result, result, group)   # group positional, as there
    gathered_result[dist.get_rank(group)] = result
    return gathered_result


def tm_gather_all_tensors(result, group=None) -> list:
    if group is None:
        group = dist.group.WORLD
    world_size = dist.get_world_size(group)
    dist.barrier(group=group)
    if N(result).ndim == 0:
        return tm_simple_gather_all_tensors(result, group, world_size)
    local_size = T(np.array(N(result).shape, dtype=np.int64))
    local_sizes = [zeros_like(local_size) for _ in range(world_size)]
    dist.all_gather(local_sizes, local_size, group=group)
    max_size = np.stack([N(s) for s in local_sizes]).max(axis=0)
    if all((N(ls) == max_size).all() for ls in local_sizes):
        return tm_simple_gather_all_tensors(result, group, world_size)
    pad_by = max_size - N(local_size)   # F.pad(result, pad_dims) there
    result_padded = T(np.pad(N(result), [(0, int(p)) for p in pad_by]))
    gathered_result = [zeros_like(result_padded) for _ in range(world_size)]
    dist.all_gather(gathered_result, result_padded, group)
    for idx, item_size in enumerate(local_sizes):
        gathered_result[idx] = N(gathered_result[idx])[tuple(slice(int(d)) for d in
                                                            N(item_size))]
    gathered_result[dist.get_rank(group)] = result
    return gathered_result


class TmMetric:
    """Metric's add_state / sync: a "sum" state and a "cat" list state, each tensor gathered
    by ``dist_sync_fn(tensor, group=...)`` then reduced (dim_zero_sum / dim_zero_cat)."""

    def __init__(self, process_group=None) -> None:
        self.process_group = process_group
        self.total = T(np.float64(0.0))
        self.preds: list = []

    def update(self, x: np.ndarray) -> None:
        self.total = T(N(self.total) + x.sum())
        self.preds.append(T(x))

    def sync(self, dist_sync_fn=None, process_group=None) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            return
        dist_sync_fn = dist_sync_fn or tm_gather_all_tensors
        group = process_group or self.process_group
        preds = [T(np.concatenate([N(p) for p in self.preds]))] if len(self.preds) > 1 else \
            self.preds
        totals = dist_sync_fn(self.total, group=group)
        gathered = [g for p in preds for g in dist_sync_fn(p, group=group)]
        self.total = T(np.stack([N(t) for t in totals]).sum(axis=0))
        self.preds = [T(np.concatenate([N(g) for g in gathered]))]


# ------------------------------------------------------------------------------------------
# PyTorch Lightning src/lightning/fabric/utilities/distributed.py and
# src/lightning/pytorch/strategies/ddp.py (Lightning-AI/pytorch-lightning)
ReduceOp = dist.ReduceOp


def _distributed_is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def _init_dist_connection(main_address: str, main_port: int, backend: str, global_rank: int,
                          world_size: int, **kwargs: Any) -> None:
    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available.")
    if dist.is_initialized():
        return
    os.environ["MASTER_ADDR"] = main_address
    os.environ["MASTER_PORT"] = str(main_port)
    dist.init_process_group(backend, rank=global_rank, world_size=world_size, **kwargs)


def pl_sync_ddp(result, group=None, reduce_op=None):
    divide_by_world_size = False
    group = dist.group.WORLD if group is None else group
    if isinstance(reduce_op, str):
        reduce_op = "avg" if reduce_op == "mean" else reduce_op
        if reduce_op.lower() == "avg" and dist.get_backend(group) == "gloo":
            op = ReduceOp.SUM
            divide_by_world_size = True
        else:
            op = getattr(ReduceOp, reduce_op.upper())
    else:
        op = reduce_op
    dist.barrier(group=group)
    dist.all_reduce(result, op=op, group=group, async_op=False)
    world_size = dist.get_world_size(group)
    if not divide_by_world_size:
        return result
    if not np.issubdtype(N(result).dtype, np.floating):   # result.copy_(result / world_size)
        N(result)[...] = (N(result) / world_size).astype(N(result).dtype)
        return result
    N(result)[...] /= world_size                           # result.div_(world_size)
    return result


def pl_gather_all_tensors(result, group=None) -> list:
    """As torchmetrics', without putting the local tensor back."""
    if group is None:
        group = dist.group.WORLD
    world_size = dist.get_world_size(group)
    dist.barrier(group=group)
    if N(result).ndim == 0:
        out = [zeros_like(result) for _ in range(world_size)]
        dist.all_gather(out, result, group)
        return out
    return [N(g) for g in tm_gather_all_tensors(result, group)]


class PlDDPStrategy:
    def __init__(self) -> None:
        self.world_size = dist.get_world_size()
        self.global_rank = dist.get_rank()
        self.is_global_zero = self.global_rank == 0

    def barrier(self, *args: Any, **kwargs: Any) -> None:
        if not _distributed_is_initialized():
            return
        if dist.get_backend() == "nccl":
            dist.barrier(device_ids=[0])
        else:
            dist.barrier()

    def broadcast(self, obj: object, src: int = 0) -> object:
        if not _distributed_is_initialized():
            return obj
        objs = [obj]
        dist.broadcast_object_list(objs, src, group=dist.group.WORLD)
        return objs[0]

    def reduce(self, tensor, group=None, reduce_op="mean"):
        return pl_sync_ddp(tensor, group=group, reduce_op=reduce_op)

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        t = T(np.int64(int(decision)))
        t = self.reduce(t, reduce_op=ReduceOp.SUM)
        return bool(N(t) == self.world_size) if all else bool(N(t))

    def all_gather(self, tensor, group=None):
        return np.stack(pl_gather_all_tensors(tensor, group))


class PlInfiniteBarrier:
    """fabric's _InfiniteBarrier: a gloo group with a very long timeout whose
    ``monitored_barrier`` is the barrier, destroyed on exit."""

    def __init__(self) -> None:
        self.group = None
        self.barrier = lambda: None

    def __enter__(self) -> PlInfiniteBarrier:
        if _distributed_is_initialized():
            self.group = dist.new_group(backend="gloo", timeout=datetime.timedelta(days=10000))
            self.barrier = self.group.monitored_barrier
        return self

    def __call__(self) -> None:
        self.barrier()

    def __exit__(self, *exc: Any) -> None:
        self.barrier()
        if self.group is not None:
            dist.destroy_process_group(self.group)


# ------------------------------------------------------------------------------------------
# DeepSpeed deepspeed/comm/torch.py (TorchBackend), deepspeed/comm/comm.py and
# deepspeed/utils/groups.py (deepspeedai/DeepSpeed). The defaults below are evaluated when
# the class is made, before any init, as there.
def has_coalescing_manager() -> bool:
    has_c10d = hasattr(dist, "distributed_c10d")
    return has_c10d and hasattr(dist.distributed_c10d, "_coalescing_manager")


def has_all_reduce_coalesced() -> bool:
    return hasattr(dist, "all_reduce_coalesced")


class TorchBackend:
    def __init__(self, backend, timeout, init_method, rank=-1, world_size=-1) -> None:
        self.has_all_reduce_coalesced = has_all_reduce_coalesced()
        self.has_coalescing_manager = has_coalescing_manager()
        self.all_gather_function = self.get_all_gather_function()
        self.reduce_scatter_function = self.get_reduce_scatter_function()
        self.init_process_group(backend, timeout, init_method, rank, world_size)

    @classmethod
    def get_all_gather_function(cls):
        if hasattr(dist, "all_gather_into_tensor"):
            return dist.all_gather_into_tensor
        if hasattr(dist, "_all_gather_base"):
            return dist._all_gather_base
        return None

    @classmethod
    def get_reduce_scatter_function(cls):
        if hasattr(dist, "reduce_scatter_tensor"):
            return dist.reduce_scatter_tensor
        if hasattr(dist, "_reduce_scatter_base"):
            return dist._reduce_scatter_base
        return None

    def init_process_group(self, backend, timeout, init_method, rank, world_size) -> None:
        if not dist.is_initialized():
            dist.init_process_group(backend, timeout=timeout, init_method=init_method,
                                    rank=rank, world_size=world_size)
        self.using_mpi = dist.get_backend() == "mpi"

    def _reduce_op(self, op):
        if not isinstance(op, dist.ReduceOp):
            op = getattr(dist.ReduceOp, str(op).upper())   # DeepSpeed maps its own enum
        return op

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        return dist.all_reduce(tensor=tensor, op=self._reduce_op(op), group=group,
                               async_op=async_op)

    def all_reduce_coalesced(self, tensors, op=dist.ReduceOp.SUM, group=None, async_op=False):
        return dist.all_reduce_coalesced(tensors=tensors, op=self._reduce_op(op), group=group,
                                         async_op=async_op)

    def reduce(self, tensor, dst, op=dist.ReduceOp.SUM, group=None, async_op=False):
        return dist.reduce(tensor=tensor, dst=dst, op=self._reduce_op(op), group=group,
                           async_op=async_op)

    def reduce_scatter(self, output, input_list, op=dist.ReduceOp.SUM, group=None,
                       async_op=False):
        return dist.reduce_scatter(output=output, input_list=input_list,
                                   op=self._reduce_op(op), group=group, async_op=async_op)

    def broadcast(self, tensor, src, group=None, async_op=False):
        return dist.broadcast(tensor=tensor, src=src, group=group, async_op=async_op)

    def broadcast_object_list(self, object_list, src, group=None, device=None):
        return dist.broadcast_object_list(object_list=object_list, src=src, group=group,
                                          device=device)

    def all_gather(self, tensor_list, tensor, group=None, async_op=False):
        return dist.all_gather(tensor_list=tensor_list, tensor=tensor, group=group,
                               async_op=async_op)

    def all_gather_into_tensor(self, output_tensor, input_tensor, group=None, async_op=False):
        return self.all_gather_function(output_tensor=output_tensor, input_tensor=input_tensor,
                                        group=group, async_op=async_op)

    def all_gather_coalesced(self, output_tensors, input_tensors, group=None, async_op=False):
        reqs = []
        with dist.distributed_c10d._coalescing_manager(group, device=None, async_ops=async_op):
            for output, inp in zip(output_tensors, input_tensors):
                handle = dist.distributed_c10d.all_gather_into_tensor(output, inp, group=group,
                                                                      async_op=True)
                reqs.append(handle)
        return reqs

    def all_gather_object(self, object_list, obj, group=None):
        return dist.all_gather_object(object_list=object_list, obj=obj, group=group)

    def reduce_scatter_tensor(self, output_tensor, input_tensor, op=dist.ReduceOp.SUM,
                              group=None, async_op=False):
        return self.reduce_scatter_function(output_tensor, input_tensor,
                                            op=self._reduce_op(op), group=group,
                                            async_op=async_op)

    def all_to_all_single(self, output, input, output_split_sizes=None,
                          input_split_sizes=None, group=None, async_op=False):
        return dist.all_to_all_single(output=output, input=input,
                                      output_split_sizes=output_split_sizes,
                                      input_split_sizes=input_split_sizes, group=group,
                                      async_op=async_op)

    def all_to_all(self, output_tensor_list, input_tensor_list, group=None, async_op=False):
        return dist.all_to_all(output_tensor_list, input_tensor_list, group=group,
                               async_op=async_op)

    def send(self, tensor, dst, group=None, tag=0):
        return dist.send(tensor=tensor, dst=dst, group=group, tag=tag)

    def recv(self, tensor, src=None, group=None, tag=0):
        return dist.recv(tensor=tensor, src=src, group=group, tag=tag)

    def isend(self, tensor, dst, group=None, tag=0):
        return dist.isend(tensor=tensor, dst=dst, group=group, tag=tag)

    def irecv(self, tensor, src=None, group=None, tag=0):
        return dist.irecv(tensor=tensor, src=src, group=group, tag=tag)

    def gather(self, tensor, gather_list=None, dst=0, group=None, async_op=False):
        return dist.gather(tensor=tensor, gather_list=gather_list, dst=dst, group=group,
                           async_op=async_op)

    def scatter(self, tensor, scatter_list=None, src=0, group=None, async_op=False):
        return dist.scatter(tensor=tensor, scatter_list=scatter_list, src=src, group=group,
                            async_op=async_op)

    def barrier(self, group=dist.GroupMember.WORLD, async_op=False, device_ids=None):
        if group is None:
            group = dist.GroupMember.WORLD
        return dist.barrier(group=group, async_op=async_op, device_ids=device_ids)

    def monitored_barrier(self, group=dist.GroupMember.WORLD, timeout=None,
                          wait_all_ranks=False):
        if group is None:
            group = dist.GroupMember.WORLD
        return dist.monitored_barrier(group=group, timeout=timeout,
                                      wait_all_ranks=wait_all_ranks)

    def get_rank(self, group=None):
        return dist.get_rank(group=group)

    def get_world_size(self, group=None):
        return dist.get_world_size(group=group)

    def get_backend(self, group=None):
        return dist.get_backend(group=group)

    def new_group(self, ranks):
        return dist.new_group(ranks)

    def get_global_rank(self, group, group_rank):
        return c10d_get_global_rank(group, group_rank)

    def get_world_group(self):
        return dist.group.WORLD

    def destroy_process_group(self, group=None):
        return dist.destroy_process_group(group=group)


BACKEND_DEFAULTS = (TorchBackend.barrier.__defaults__, TorchBackend.monitored_barrier.__defaults__)


def ds_get_all_ranks_from_group(cdb: TorchBackend, group=None) -> list:
    """deepspeed/comm/comm.py: global ranks until get_global_rank raises."""
    rank = 0
    group_ranks = []
    try:
        while True:
            group_ranks.append(cdb.get_global_rank(group, rank))
            rank += 1
    except (RuntimeError, ValueError):
        pass
    return group_ranks


def ds_create_expert_and_data_parallel(ep: int) -> tuple:
    """groups.py: expert data-parallel groups (stride ep) and expert groups (ep consecutive),
    made from ``range`` objects, as there."""
    world_size, rank = dist.get_world_size(), dist.get_rank()
    assert world_size % ep == 0
    edp = ep_group = None
    for i in range(ep):
        ranks = range(i, world_size, ep)
        group = dist.new_group(ranks)
        if i == rank % ep:
            edp = group
    for i in range(world_size // ep):
        ranks = range(i * ep, (i + 1) * ep)
        group = dist.new_group(ranks)
        if i == rank // ep:
            ep_group = group
    return edp, ep_group


def ds_clone_world_group():
    return dist.new_group(ranks=range(dist.get_world_size()))


# ------------------------------------------------------------------------------------------
# fairscale fairscale/nn/model_parallel/initialize.py (facebookresearch/fairscale)
def fs_initialize_model_parallel(model_parallel_size: int, pipeline_length: int = 1, *,
                                 ddp_backend=None, model_parallel_backend=None,
                                 pipeline_backend=None) -> dict:
    assert dist.is_initialized()
    world_size = dist.get_world_size()
    model_parallel_size = int(min(model_parallel_size, world_size))
    rank = dist.get_rank()
    dps = int(world_size / (model_parallel_size * pipeline_length))
    groups = np.arange(world_size).reshape(dps, pipeline_length, 1, model_parallel_size)
    found = [int(x[0]) for x in np.where(groups == rank)]
    out: dict = {}
    for i in range(pipeline_length):
        for k in range(model_parallel_size):
            group = dist.new_group(groups[:, i, 0, k].tolist(), backend=ddp_backend)
            if i == found[1] and k == found[3]:
                out["data"] = group
    for i in range(dps):
        for j in range(pipeline_length):
            group = dist.new_group(groups[i, j, 0, :].tolist(), backend=model_parallel_backend)
            if i == found[0] and j == found[1]:
                out["model"] = group
    for i in range(dps):
        for k in range(model_parallel_size):
            ranks = groups[i, :, 0, k].tolist()
            group = dist.new_group(ranks, backend=pipeline_backend)
            if i == found[0] and k == found[3]:
                out["pipeline"], out["pipeline_ranks"] = group, ranks
    return out


# ==========================================================================================
if MODE == "lightning":
    _init_dist_connection(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), "gloo",
                          int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                          timeout=datetime.timedelta(seconds=1800))
    CDB = None
else:
    CDB = TorchBackend("gloo", datetime.timedelta(minutes=30), None)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rank_cases import Cases, raises  # noqa: E402

rank, n = dist.get_rank(), dist.get_world_size()
case = Cases(rank, after=dist.barrier)
S = n * (n - 1) // 2


@case
def torchmetrics_gather_all_tensors() -> None:
    got = tm_gather_all_tensors(T(np.float32(rank)))
    assert [float(N(g)) for g in got] == [float(r) for r in range(n)], got
    same = tm_gather_all_tensors(T(np.full((2, 3), rank, dtype=np.int64)))
    assert [N(g).tolist() for g in same] == [[[r] * 3] * 2 for r in range(n)]
    x = np.arange((rank + 1) * (3 - rank % 2), dtype=np.float64).reshape(rank + 1, -1) + rank
    got = tm_gather_all_tensors(T(x))
    want = [(np.arange((r + 1) * (3 - r % 2)).reshape(r + 1, -1) + r).tolist() for r in range(n)]
    assert [N(g).tolist() for g in got] == want, [N(g).tolist() for g in got]
    # on a group of every rank made by new_group
    world2 = dist.new_group(list(range(n)))
    got = tm_gather_all_tensors(T(np.arange(rank + 1, dtype=np.int32)), group=world2)
    assert [N(g).tolist() for g in got] == [list(range(r + 1)) for r in range(n)]


@case
def torchmetrics_metric_sync() -> None:
    m = TmMetric()
    for k in range(rank + 1):
        m.update(np.array([rank, k], dtype=np.float64))
    m.sync()
    assert float(N(m.total)) == float(sum(2 * r * (r + 1) // 2 + r * (r + 1) // 2
                                          for r in range(n))), N(m.total)
    want = [v for r in range(n) for k in range(r + 1) for v in (r, k)]
    assert N(m.preds[0]).tolist() == want, N(m.preds[0]).tolist()
    # a custom dist_sync_fn and a process_group given to sync
    pairs = [dist.new_group([r, r + 1]) for r in range(0, n - 1, 2)]
    pg = pairs[rank // 2]
    m2 = TmMetric()
    m2.update(np.array([float(rank)]))
    calls = []

    def sync_fn(t, group=None):
        calls.append(group is pg)
        return tm_gather_all_tensors(t, group)

    m2.sync(dist_sync_fn=sync_fn, process_group=pg)
    base = rank - rank % 2
    assert calls == [True, True] and N(m2.preds[0]).tolist() == [base, base + 1.0]


@case
def lightning_sync_ddp() -> None:
    strategy = PlDDPStrategy()
    assert _distributed_is_initialized()
    strategy.barrier()
    t = pl_sync_ddp(T(np.array([rank, 1.0], dtype=np.float32)), reduce_op="mean")
    assert N(t).tolist() == [S / n, 1.0], N(t).tolist()
    t = pl_sync_ddp(T(np.array([rank + 1], dtype=np.int64)), reduce_op="avg")
    assert N(t).tolist() == [(S + n) // n], N(t).tolist()
    assert N(pl_sync_ddp(T(np.array([rank])), reduce_op="max")).tolist() == [n - 1]
    assert N(pl_sync_ddp(T(np.array([rank + 2])), reduce_op="min")).tolist() == [2]
    assert N(pl_sync_ddp(T(np.array([rank])), reduce_op="sum")).tolist() == [S]
    assert N(pl_sync_ddp(T(np.array([rank])), reduce_op=ReduceOp.SUM)).tolist() == [S]
    assert N(pl_sync_ddp(T(np.array([rank + 1])),
                         reduce_op=ReduceOp.PRODUCT)).tolist() == [int(np.prod(range(1, n + 1)))]
    # reduce_op=None (the default of _sync_ddp_if_available): op=None reaches all_reduce
    raises(TypeError, "", lambda: pl_sync_ddp(T(np.array([rank])), reduce_op=None))
    assert strategy.reduce_boolean_decision(True) is True
    assert strategy.reduce_boolean_decision(rank == 0) is False
    assert strategy.reduce_boolean_decision(rank == 0, all=False) is True
    assert strategy.broadcast({"ckpt": "/tmp/x", "r": rank}) == {"ckpt": "/tmp/x", "r": 0}
    assert strategy.broadcast(rank, src=n - 1) == n - 1
    g = strategy.all_gather(T(np.array([rank, -rank], dtype=np.int32)))
    assert g.tolist() == [[r, -r] for r in range(n)], g.tolist()
    un = pl_gather_all_tensors(T(np.full(rank + 1, rank, dtype=np.float32)))
    assert [u.tolist() for u in un] == [[float(r)] * (r + 1) for r in range(n)]


@case
def lightning_infinite_barrier() -> None:
    with PlInfiniteBarrier() as barrier:
        barrier()
    assert barrier.group is not None


@case
def deepspeed_torch_backend() -> None:
    cdb = CDB or TorchBackend("gloo", datetime.timedelta(minutes=30), None)
    assert BACKEND_DEFAULTS == ((None, False, None), (None, None, False)), BACKEND_DEFAULTS
    assert cdb.has_all_reduce_coalesced and cdb.has_coalescing_manager and not cdb.using_mpi
    assert cdb.all_gather_function is dist.all_gather_into_tensor
    assert cdb.reduce_scatter_function is dist.reduce_scatter_tensor
    assert cdb.get_world_group() is dist.group.WORLD and cdb.get_backend() == "gloo"
    x = T(np.array([rank, 1.0], dtype=np.float32))
    assert cdb.all_reduce(x) is None and N(x).tolist() == [S, n]
    w = cdb.all_reduce(x, op="max", async_op=True)
    w.wait()
    assert N(x).tolist() == [S, n] and w.is_completed()
    mixed = [T(np.array([rank], dtype=np.int64)), T(np.array([1.0, rank], dtype=np.float64))]
    raises(ValueError, "different dtypes", lambda: cdb.all_reduce_coalesced(mixed))
    ts = [T(np.array([rank], dtype=np.float64)), T(np.array([1.0, rank], dtype=np.float64))]
    cdb.all_reduce_coalesced(ts)
    assert N(ts[0]).tolist() == [S] and N(ts[1]).tolist() == [n, S]
    y = T(np.array([rank + 1.0]))
    cdb.reduce(y, dst=n - 1, op=dist.ReduceOp.PRODUCT)
    if rank == n - 1:
        assert N(y).tolist() == [float(np.prod(range(1, n + 1)))]
    out = empty((1,), np.float32)
    cdb.reduce_scatter(out, [T(np.array([rank + r], dtype=np.float32)) for r in range(n)])
    assert N(out).tolist() == [S + n * rank]
    b = T(np.array([rank, rank], dtype=np.int32))
    cdb.broadcast(b, 1)
    assert N(b).tolist() == [1, 1]
    objs = [rank, {"a": rank}] if rank == 0 else [None, None]
    cdb.broadcast_object_list(objs, 0)
    assert objs == [0, {"a": 0}]
    lst = [empty((2,), np.float64) for _ in range(n)]
    cdb.all_gather(lst, T(np.array([rank, 2.0 * rank])))
    assert [N(v).tolist() for v in lst] == [[r, 2.0 * r] for r in range(n)]
    flat = empty((2 * n,), np.float32)
    h = cdb.all_gather_into_tensor(flat, T(np.array([rank, -rank], dtype=np.float32)),
                                   async_op=True)
    h.wait()
    assert N(flat).tolist() == [v for r in range(n) for v in (r, -r)]
    ol = [None] * n
    cdb.all_gather_object(ol, ("r", rank))
    assert ol == [("r", r) for r in range(n)]
    shard = empty((2,), np.float32)
    cdb.reduce_scatter_tensor(shard, T(np.arange(2 * n, dtype=np.float32) + rank), op="sum")
    assert N(shard).tolist() == [float(n * (2 * rank + k) + S) for k in range(2)]
    # all_to_all_single with uneven splits (MoE token dispatch): rank r sends r + 1 items to
    # each peer
    send = T(np.concatenate([np.full(rank + 1, 10 * rank + p, dtype=np.float32)
                             for p in range(n)]))
    recv = empty((sum(r + 1 for r in range(n)),), np.float32)
    h = cdb.all_to_all_single(recv, send, output_split_sizes=[r + 1 for r in range(n)],
                              input_split_sizes=[rank + 1] * n, async_op=True)
    h.wait()
    assert N(recv).tolist() == [float(10 * r + rank) for r in range(n) for _ in range(r + 1)]
    outs = [empty((1,), np.int64) for _ in range(n)]
    cdb.all_to_all(outs, [T(np.array([100 * rank + p])) for p in range(n)])
    assert [int(N(o)[0]) for o in outs] == [100 * r + rank for r in range(n)]
    gl = [empty((1,), np.int32) for _ in range(n)] if rank == 0 else None
    cdb.gather(T(np.array([rank * 3], dtype=np.int32)), gather_list=gl, dst=0)
    if rank == 0:
        assert [int(N(v)[0]) for v in gl] == [3 * r for r in range(n)]
    sc = empty((2,), np.float32)
    cdb.scatter(sc, [T(np.array([r, r], dtype=np.float32)) for r in range(n)]
                if rank == n - 1 else None, src=n - 1)
    assert N(sc).tolist() == [rank, rank]
    assert cdb.barrier() is None
    w = cdb.barrier(group=None, async_op=True)
    w.wait()
    cdb.monitored_barrier(timeout=datetime.timedelta(seconds=60), wait_all_ranks=True)


@case
def deepspeed_p2p_ring() -> None:
    # pipeline-engine style: blocking send/recv with tag=, then isend/irecv with wait()
    cdb = CDB or TorchBackend("gloo", datetime.timedelta(minutes=30), None)
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    buf = empty((3,), np.float32)
    if rank % 2 == 0:
        cdb.send(T(np.full(3, rank, dtype=np.float32)), nxt, tag=7)
        src = cdb.recv(buf, prv, tag=7)
    else:
        src = cdb.recv(buf, prv, tag=7)
        cdb.send(T(np.full(3, rank, dtype=np.float32)), nxt, tag=7)
    assert src == prv and N(buf).tolist() == [float(prv)] * 3
    out = empty((2,), np.int64)
    reqs = [cdb.irecv(out, src=prv), cdb.isend(T(np.array([rank, 5 * rank])), nxt)]
    for r in reqs:
        r.wait()
    assert N(out).tolist() == [prv, 5 * prv]
    # recv from any source (src=None, the default in TorchBackend.recv)
    if rank == 0:
        got = empty((1,), np.int64)
        srcs = sorted(cdb.recv(got) for _ in range(n - 1))
        assert srcs == list(range(1, n)), srcs
    else:
        cdb.send(T(np.array([rank])), 0)


@case
def deepspeed_groups() -> None:
    cdb = CDB or TorchBackend("gloo", datetime.timedelta(minutes=30), None)
    ep = 2
    edp, epg = ds_create_expert_and_data_parallel(ep)
    assert dist.get_process_group_ranks(edp) == list(range(rank % ep, n, ep))
    assert dist.get_process_group_ranks(epg) == [rank - rank % ep, rank - rank % ep + 1]
    assert ds_get_all_ranks_from_group(cdb, edp) == list(range(rank % ep, n, ep))
    assert ds_get_all_ranks_from_group(cdb, epg) == [rank - rank % ep, rank - rank % ep + 1]
    world = ds_clone_world_group()
    assert ds_get_all_ranks_from_group(cdb, world) == list(range(n))
    assert dist.get_global_rank(world, 0) == 0   # _get_broadcast_src_rank
    assert dist.get_global_rank(edp, 0) == rank % ep   # _get_expert_broadcast_src_rank
    raises(ValueError, "is not part of group",
           lambda: dist.get_global_rank(epg, 2))
    # expert all_to_all on the expert group, expert grads all_reduce on the expert-dp group
    a = T(np.array([10 * rank, 10 * rank + 1], dtype=np.float32))
    o = zeros_like(a)
    dist.all_to_all_single(o, a, group=epg)
    b0 = rank - rank % ep
    assert N(o).tolist() == [10 * b0 + rank % ep, 10 * (b0 + 1) + rank % ep]
    g = T(np.array([1.0 + rank]))
    w = dist.all_reduce(g, group=edp, async_op=True)
    w.wait()
    assert N(g).tolist() == [float(sum(1 + r for r in range(rank % ep, n, ep)))]
    # coalesced all-gathers (partition_parameters' all_gather_coalesced)
    outs = [empty((len(range(rank % ep, n, ep)) * k,), np.float32) for k in (1, 2)]
    ins = [T(np.full(k, rank, dtype=np.float32)) for k in (1, 2)]
    reqs = cdb.all_gather_coalesced(outs, ins, group=edp, async_op=False)
    assert len(reqs) == 2
    try:
        reqs[-1].wait()
        print(f"[{rank}] coalesced wait ok {type(reqs[-1]).__name__}", flush=True)
    except Exception as exc:
        print(f"[{rank}] coalesced wait {type(exc).__name__}: {exc}", flush=True)
    members = list(range(rank % ep, n, ep))
    assert N(outs[0]).tolist() == [float(r) for r in members], N(outs[0]).tolist()
    assert N(outs[1]).tolist() == [float(r) for r in members for _ in range(2)]
    cdb.destroy_process_group(group=epg)


@case
def fairscale_model_parallel() -> None:
    groups = fs_initialize_model_parallel(2, 1 if n == 2 else 2, ddp_backend="gloo")
    mp, dp, pp = groups["model"], groups["data"], groups["pipeline"]
    assert dist.get_rank(group=mp) == rank % 2 and dist.get_world_size(group=mp) == 2
    assert (dist.get_world_size(group=dp), dist.get_world_size(group=pp)) == (
        (1, 1) if n == 2 else (1, 2))
    assert groups["pipeline_ranks"] == ([rank] if n == 2 else [rank % 2, rank % 2 + 2])
    assert dist.get_backend(dp) == "gloo" and dist.get_backend(mp) == "gloo"
    src = (rank // 2) * 2   # get_model_parallel_src_rank
    w = T(np.array([rank], dtype=np.float32))
    dist.broadcast(w, src, group=mp)
    assert N(w).tolist() == [float(src)]
    t = T(np.array([1.0]))
    dist.all_reduce(t, group=pp)
    assert N(t).tolist() == [float(dist.get_world_size(group=pp))]


case.done()
dist.destroy_process_group()
