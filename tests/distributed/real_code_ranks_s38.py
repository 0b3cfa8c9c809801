"""Distributed helpers of widely used projects, re-written short (each credits its source), run
on every rank as ``OK``/``FAIL`` cases (tests/distributed/rank_cases.py).

The same file runs under torch 2.15's gloo (``REALCODE_TORCH=1``, one process per rank with
torchrun's variables) and under ``accelrt.distributed`` (``mpiexec -n N python -m
accelrt.distributed.run``): the expected values asserted below are the ones torch gave. The
helpers call ``dist`` exactly as the projects do; tensors are made by the small ``T``/``empty``
shim (``torch.from_numpy`` or ``acc.asarray``), and their arithmetic is numpy on ``N(t)`` (a
view of the tensor's memory in both).

``argv[1]``: ``torchvision`` (init as references/classification/utils.py's
``init_distributed_mode``: ``env://``, ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``) or
``detectron2`` (init as detectron2/engine/launch.py's ``_distributed_worker``: ``backend="GLOO"``,
``init_method="tcp://127.0.0.1:<port>"`` from ``argv[2]``, ``world_size``, ``rank``, ``timeout``).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import pickle
import struct
import sys
from collections import OrderedDict, defaultdict, deque
from types import SimpleNamespace

import numpy as np

TORCH = bool(os.environ.get("REALCODE_TORCH"))
if TORCH:
    import torch
    import torch.distributed as dist

    def T(a: np.ndarray):
        return torch.from_numpy(np.array(a, copy=True))

    def empty(shape, dtype):
        return torch.from_numpy(np.empty(shape, dtype=dtype))
else:
    import accelrt as acc
    import accelrt.distributed as dist

    def T(a: np.ndarray):
        return acc.asarray(np.array(a, copy=True), device="cpu")

    def empty(shape, dtype):
        return acc.empty(shape, dtype=dtype, device="cpu")


def N(t) -> np.ndarray:
    """A numpy view of a cpu tensor/array (both share the memory)."""
    return t if isinstance(t, np.ndarray) else t.numpy()


def zeros_like(t):
    return T(np.zeros_like(N(t)))


MODE = sys.argv[1]


# ------------------------------------------------------------------------------------------
# torchvision references/classification/utils.py (pytorch/vision)
def is_dist_avail_and_initialized() -> bool:
    if not dist.is_available():
        return False
    return dist.is_initialized()


def tv_get_world_size() -> int:
    return dist.get_world_size() if is_dist_avail_and_initialized() else 1


def tv_get_rank() -> int:
    return dist.get_rank() if is_dist_avail_and_initialized() else 0


def init_distributed_mode(args: SimpleNamespace) -> None:
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        args.rank = int(os.environ["RANK"])
        args.world_size = int(os.environ["WORLD_SIZE"])
        args.gpu = int(os.environ["LOCAL_RANK"])
    else:
        args.distributed = False
        return
    args.distributed = True
    args.dist_backend = "gloo"           # the reference says "nccl" (and set_device(args.gpu))
    dist.init_process_group(backend=args.dist_backend, init_method=args.dist_url,
                            world_size=args.world_size, rank=args.rank)
    dist.barrier()


class SmoothedValue:
    def __init__(self, window_size: int = 20) -> None:
        self.deque: deque[float] = deque(maxlen=window_size)
        self.total, self.count = 0.0, 0

    def update(self, value: float, n: int = 1) -> None:
        self.deque.append(value)
        self.count += n
        self.total += value * n

    def synchronize_between_processes(self) -> None:
        if not is_dist_avail_and_initialized():
            return
        t = T(np.array([self.count, self.total], dtype=np.float64))   # device="cuda" there
        dist.barrier()
        dist.all_reduce(t)
        t = t.tolist()
        self.count = int(t[0])
        self.total = t[1]

    @property
    def global_avg(self) -> float:
        return self.total / self.count


class MetricLogger:
    def __init__(self) -> None:
        self.meters: defaultdict[str, SmoothedValue] = defaultdict(SmoothedValue)

    def update(self, **kwargs: float) -> None:
        for k, v in kwargs.items():
            self.meters[k].update(v)

    def synchronize_between_processes(self) -> None:
        for meter in self.meters.values():
            meter.synchronize_between_processes()


# torchvision references/detection/utils.py: reduce_dict (all_reduce of the stacked values)
def tv_reduce_dict(input_dict: dict, average: bool = True) -> dict:
    world_size = tv_get_world_size()
    if world_size < 2:
        return input_dict
    names = sorted(input_dict.keys())
    values = T(np.stack([N(input_dict[k]) for k in names], axis=0))
    dist.all_reduce(values)
    if average:
        N(values)[...] /= world_size
    return {k: float(v) for k, v in zip(names, N(values))}


# ------------------------------------------------------------------------------------------
# detectron2/utils/comm.py and detectron2/engine/launch.py (facebookresearch/detectron2)
_LOCAL_PROCESS_GROUP = None


def d2_init(port: str) -> None:
    """launch.py's _distributed_worker: per-machine groups made by new_group on every rank."""
    global _LOCAL_PROCESS_GROUP
    world_size, global_rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    dist.init_process_group(backend="GLOO", init_method=f"tcp://127.0.0.1:{port}",
                            world_size=world_size, rank=global_rank,
                            timeout=datetime.timedelta(minutes=2))
    num_gpus_per_machine = 2
    num_machines = world_size // num_gpus_per_machine
    machine_rank = global_rank // num_gpus_per_machine
    for i in range(num_machines):
        ranks_on_i = list(range(i * num_gpus_per_machine, (i + 1) * num_gpus_per_machine))
        pg = dist.new_group(ranks_on_i)
        if i == machine_rank:
            _LOCAL_PROCESS_GROUP = pg
    synchronize()


def d2_get_local_rank() -> int:
    assert _LOCAL_PROCESS_GROUP is not None
    return dist.get_rank(group=_LOCAL_PROCESS_GROUP)


def d2_get_local_size() -> int:
    return dist.get_world_size(group=_LOCAL_PROCESS_GROUP)


def synchronize() -> None:
    if not dist.is_available() or not dist.is_initialized():
        return
    if dist.get_world_size() == 1:
        return
    if dist.get_backend() == dist.Backend.NCCL:
        dist.barrier(device_ids=[0])
    else:
        dist.barrier()


def _get_global_gloo_group():
    if dist.get_backend() == "nccl":
        return dist.new_group(backend="gloo")
    return dist.group.WORLD


def _serialize_to_tensor(data: object, group: object):
    backend = dist.get_backend(group)
    assert backend in ["gloo", "nccl"], backend
    return T(np.frombuffer(pickle.dumps(data), dtype=np.uint8))


def _pad_to_largest_tensor(tensor, group):
    world_size = dist.get_world_size(group=group)
    local_size = T(np.array([N(tensor).size], dtype=np.int64))
    size_list = [T(np.zeros([1], dtype=np.int64)) for _ in range(world_size)]
    dist.all_gather(size_list, local_size, group=group)
    sizes = [int(N(size)[0]) for size in size_list]
    max_size = max(sizes)
    if N(local_size)[0] != max_size:
        tensor = T(np.concatenate([N(tensor), np.zeros(max_size - N(tensor).size, np.uint8)]))
    return sizes, tensor


def d2_all_gather(data: object, group: object = None) -> list:
    if dist.get_world_size() == 1:
        return [data]
    if group is None:
        group = _get_global_gloo_group()
    if dist.get_world_size(group) == 1:
        return [data]
    tensor = _serialize_to_tensor(data, group)
    size_list, tensor = _pad_to_largest_tensor(tensor, group)
    max_size = max(size_list)
    tensor_list = [empty((max_size,), np.uint8) for _ in size_list]
    dist.all_gather(tensor_list, tensor, group=group)
    return [pickle.loads(N(t).tobytes()[:size]) for size, t in zip(size_list, tensor_list)]


def d2_gather(data: object, dst: int = 0, group: object = None) -> list:
    if dist.get_world_size() == 1:
        return [data]
    if group is None:
        group = _get_global_gloo_group()
    if dist.get_world_size(group=group) == 1:
        return [data]
    rank = dist.get_rank(group=group)
    tensor = _serialize_to_tensor(data, group)
    size_list, tensor = _pad_to_largest_tensor(tensor, group)
    if rank == dst:
        max_size = max(size_list)
        tensor_list = [empty((max_size,), np.uint8) for _ in size_list]
        dist.gather(tensor, tensor_list, dst=dst, group=group)
        return [pickle.loads(N(t).tobytes()[:size]) for size, t in zip(size_list, tensor_list)]
    dist.gather(tensor, [], dst=dst, group=group)
    return []


def shared_random_seed() -> int:
    ints = np.random.randint(2**31)
    return d2_all_gather(ints)[0]


def d2_reduce_dict(input_dict: dict, average: bool = True) -> dict:
    world_size = dist.get_world_size()
    names = sorted(input_dict.keys())
    values = T(np.stack([N(input_dict[k]) for k in names], axis=0))
    dist.reduce(values, dst=0)
    if dist.get_rank() == 0 and average:
        N(values)[...] /= world_size
    return {k: float(v) for k, v in zip(names, N(values))}


def d2_differentiable_all_reduce_forward(x):
    """comm._AllReduce.forward: all_gather instead of all_reduce, async_op=False."""
    input_list = [zeros_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(input_list, x, async_op=False)
    return np.stack([N(t) for t in input_list], axis=0).sum(axis=0)


# ------------------------------------------------------------------------------------------
# Megatron-LM megatron/core/parallel_state.py (NVIDIA/Megatron-LM): create_group and the
# tensor/pipeline/data groups of initialize_model_parallel (every rank makes every group)
_TP = _PP = _DP = _DP_GLOO = _MP = None
_TP_RANKS: list[int] = []
_PP_RANKS: list[int] = []
_DP_RANKS: list[int] = []


def create_group(ranks=None, timeout=None, backend=None, pg_options=None,
                 use_local_synchronization=False, group_desc=None):
    kwargs = {"ranks": ranks, "timeout": timeout, "backend": backend, "pg_options": pg_options,
              "use_local_synchronization": use_local_synchronization, "group_desc": group_desc}
    return dist.new_group(**kwargs)


def initialize_model_parallel(tp: int, pp: int, distributed_timeout_minutes: int = 30) -> None:
    global _TP, _PP, _DP, _DP_GLOO, _MP, _TP_RANKS, _PP_RANKS, _DP_RANKS
    assert dist.is_initialized()
    world_size = dist.get_world_size()
    if world_size % (tp * pp) != 0:
        raise RuntimeError(f"world_size ({world_size}) is not divisible by {tp} x {pp}")
    dp = world_size // (tp * pp)
    rank = dist.get_rank()
    timeout = datetime.timedelta(minutes=distributed_timeout_minutes)
    num_pp_groups = world_size // pp
    # data-parallel groups: stride tp inside each pipeline stage
    for i in range(pp):
        start, end = i * num_pp_groups, (i + 1) * num_pp_groups
        for j in range(tp):
            ranks = list(range(start + j, end, tp))
            group = create_group(ranks, timeout=timeout, group_desc="DATA_PARALLEL_GROUP")
            group_gloo = create_group(ranks, timeout=timeout, backend="gloo",
                                      group_desc="DATA_PARALLEL_GROUP_GLOO")
            if rank in ranks:
                _DP, _DP_GLOO, _DP_RANKS = group, group_gloo, ranks
    # model-parallel groups: tp * pp consecutive... (stride dp)
    for i in range(dp):
        ranks = [r for r in range(world_size) if (r % num_pp_groups) // tp == i]
        group = create_group(ranks, timeout=timeout, group_desc="MODEL_PARALLEL_GROUP")
        if rank in ranks:
            _MP = group
    # tensor-parallel groups: tp consecutive ranks
    for i in range(world_size // tp):
        ranks = list(range(i * tp, (i + 1) * tp))
        group = create_group(ranks, timeout=timeout, pg_options=None,
                             group_desc="TENSOR_MODEL_PARALLEL_GROUP")
        if rank in ranks:
            _TP, _TP_RANKS = group, ranks
    # pipeline groups: stride num_pp_groups
    for i in range(num_pp_groups):
        ranks = list(range(i, world_size, num_pp_groups))
        group = create_group(ranks, timeout=timeout, group_desc="PIPELINE_MODEL_PARALLEL_GROUP")
        if rank in ranks:
            _PP, _PP_RANKS = group, ranks


def get_tensor_model_parallel_rank() -> int:
    return dist.get_rank(group=_TP)


def get_tensor_model_parallel_world_size() -> int:
    return dist.get_world_size(group=_TP)


def get_tensor_model_parallel_src_rank() -> int:
    global_rank = dist.get_rank()
    local_world_size = get_tensor_model_parallel_world_size()
    return (global_rank // local_world_size) * local_world_size


def get_data_parallel_rank() -> int:
    return dist.get_rank(group=_DP)


def get_pipeline_model_parallel_rank() -> int:
    return dist.get_rank(group=_PP)


# megatron/core/tensor_parallel/mappings.py: _reduce, _gather_along_first_dim,
# _reduce_scatter_along_first_dim (all_gather_into_tensor / reduce_scatter_tensor on a group)
def mg_reduce(input_):
    if get_tensor_model_parallel_world_size() == 1:
        return input_
    dist.all_reduce(input_.contiguous() if TORCH else input_, group=_TP)
    return input_


def mg_gather_along_first_dim(input_):
    world_size = get_tensor_model_parallel_world_size()
    shape = list(N(input_).shape)
    shape[0] *= world_size
    output = empty(tuple(shape), N(input_).dtype)
    dist.all_gather_into_tensor(output, input_, group=_TP)
    return output


def mg_reduce_scatter_along_first_dim(input_):
    world_size = get_tensor_model_parallel_world_size()
    shape = list(N(input_).shape)
    assert shape[0] % world_size == 0
    shape[0] //= world_size
    output = empty(tuple(shape), N(input_).dtype)
    dist.reduce_scatter_tensor(output, input_, group=_TP)
    return output


# ------------------------------------------------------------------------------------------
# HF accelerate src/accelerate/utils/operations.py and state.py (huggingface/accelerate)
class PartialState:
    def __init__(self) -> None:
        self.backend = dist.get_backend()
        self.num_processes = dist.get_world_size()
        self.process_index = dist.get_rank()
        self.is_main_process = self.process_index == 0

    def wait_for_everyone(self) -> None:
        dist.barrier()

    @contextlib.contextmanager
    def _goes_first(self, is_main: bool):
        if not is_main:
            self.wait_for_everyone()
        yield
        if is_main:
            self.wait_for_everyone()

    @contextlib.contextmanager
    def main_process_first(self):
        with self._goes_first(self.is_main_process):
            yield


def acc_gather_one(tensor, state: PartialState, into_tensor: bool):
    """_gpu_gather_one: all_gather_into_tensor (a backend other than gloo) or all_gather. The
    output is (world * dim 0, ...) as Megatron's (accelerate's flat one is NCCL's form: torch
    2.15's gloo refuses it, "invalid tensor size")."""
    if N(tensor).ndim == 0:
        tensor = T(N(tensor)[None])
    if into_tensor:
        shape = N(tensor).shape
        output = empty((state.num_processes * shape[0], *shape[1:]), N(tensor).dtype)
        dist.all_gather_into_tensor(output, tensor)
        return N(output).reshape(-1, *shape[1:])
    output_tensors = [T(np.empty_like(N(tensor))) for _ in range(state.num_processes)]
    dist.all_gather(output_tensors, tensor)
    return np.concatenate([N(t) for t in output_tensors], axis=0)


def acc_gather_object(obj: object, state: PartialState) -> list:
    output_objects = [None for _ in range(state.num_processes)]
    dist.all_gather_object(output_objects, obj)
    return [x for y in output_objects for x in y]


def acc_broadcast(data: dict, from_process: int = 0) -> dict:
    for t in data.values():
        dist.broadcast(t, src=from_process)
    return data


def acc_broadcast_object_list(object_list: list, from_process: int = 0) -> list:
    dist.broadcast_object_list(object_list, src=from_process)
    return object_list


def acc_reduce(tensor, state: PartialState, reduction: str = "mean"):
    cloned_tensor = T(N(tensor))
    dist.all_reduce(cloned_tensor, dist.ReduceOp.SUM)
    if reduction == "mean":
        N(cloned_tensor)[...] /= state.num_processes
    return cloned_tensor


def acc_pad_across_processes(tensor, state: PartialState, dim: int = 0,
                             pad_index: int = 0, pad_first: bool = False):
    if dim >= N(tensor).ndim:
        return tensor
    size = T(np.array(N(tensor).shape, dtype=np.int64)[None])
    sizes = acc_gather_one(size, state, into_tensor=False)
    max_size = max(s[dim] for s in sizes)
    if max_size == N(tensor).shape[dim]:
        return tensor
    old_size = N(tensor).shape
    new_size = list(old_size)
    new_size[dim] = max_size
    new_tensor = np.zeros(tuple(new_size), dtype=N(tensor).dtype) + pad_index
    if pad_first:
        indices = tuple(slice(max_size - old_size[dim], max_size) if i == dim else slice(None)
                        for i in range(len(new_size)))
    else:
        indices = tuple(slice(0, old_size[dim]) if i == dim else slice(None)
                        for i in range(len(new_size)))
    new_tensor[indices] = N(tensor)
    return T(new_tensor)


# ------------------------------------------------------------------------------------------
# fairseq/distributed/utils.py (facebookresearch/fairseq)
def fs_all_reduce(tensor, group, op: str = "sum"):
    if op == "sum":
        op = dist.ReduceOp.SUM
    elif op == "max":
        op = dist.ReduceOp.MAX
    else:
        raise NotImplementedError
    dist.all_reduce(tensor, op=op, group=group)
    return tensor


def fs_all_gather(tensor, group):
    """The rank's own slot of the output list is the input tensor itself."""
    world_size = dist.get_world_size(group=group)
    rank = dist.get_rank(group=group)
    tensor_list = [tensor if i == rank else zeros_like(tensor) for i in range(world_size)]
    dist.all_gather(tensor_list, tensor, group=group)
    return tensor_list


def fs_all_to_all(tensor, group):
    split_count = dist.get_world_size(group=group)
    assert N(tensor).ndim == 1 and N(tensor).size % split_count == 0
    output = zeros_like(tensor)
    dist.all_to_all_single(output, tensor, group=group)
    return output


def fs_all_gather_list(data: object, group: object = None, max_size: int = 16384) -> list:
    rank = dist.get_rank(group=group)
    world_size = dist.get_world_size(group=group)
    buffer = T(np.zeros(max_size * world_size, dtype=np.uint8))   # a cuda ByteTensor there
    enc = pickle.dumps(data)
    enc_size = len(enc)
    header_size = 4
    size = header_size + enc_size
    if size > max_size:
        raise ValueError(f"encoded data size ({size}) exceeds max_size ({max_size})")
    start = rank * max_size
    N(buffer)[start:start + size] = np.frombuffer(struct.pack(">I", enc_size) + enc, np.uint8)
    fs_all_reduce(buffer, group=group)
    out = N(buffer)
    result = []
    for i in range(world_size):
        out_buffer = out[i * max_size:(i + 1) * max_size]
        (enc_size,) = struct.unpack(">I", out_buffer[:header_size].tobytes())
        if enc_size > 0:
            result.append(pickle.loads(out_buffer[header_size:header_size + enc_size].tobytes()))
    return result


def fs_all_reduce_dict(data: dict, group: object) -> OrderedDict:
    buf = T(np.concatenate([np.asarray(v, dtype=np.float64).reshape(-1) for v in data.values()]))
    fs_all_reduce(buf, group=group)
    sizes = np.cumsum([np.asarray(v).size for v in data.values()])[:-1]
    return OrderedDict(zip(data.keys(), [a.tolist() for a in np.split(N(buf).copy(), sizes)]))


def fs_broadcast_object_slow(obj: object, src_rank: int, group: object) -> object:
    if dist.get_rank(group) == src_rank:
        buffer = T(np.frombuffer(pickle.dumps(obj), dtype=np.uint8))   # torch.save there
        length = T(np.array([N(buffer).size], dtype=np.int64))
        dist.broadcast(length, src=src_rank, group=group)
        dist.broadcast(buffer, src=src_rank, group=group)
        return obj
    length = T(np.array([0], dtype=np.int64))
    dist.broadcast(length, src=src_rank, group=group)
    buffer = empty((int(N(length)[0]),), np.uint8)
    dist.broadcast(buffer, src=src_rank, group=group)
    return pickle.loads(N(buffer).tobytes())


# ------------------------------------------------------------------------------------------
# timm/utils/distributed.py (huggingface/pytorch-image-models)
def reduce_tensor(tensor, n: int):
    rt = T(N(tensor))
    dist.all_reduce(rt, op=dist.ReduceOp.SUM)
    N(rt)[...] /= n
    return rt


def distribute_bn(buffers: dict, world_size: int, reduce: bool = False) -> None:
    for bn_name, bn_buf in buffers.items():
        if ("running_mean" in bn_name) or ("running_var" in bn_name):
            if reduce:
                dist.all_reduce(bn_buf, op=dist.ReduceOp.SUM)
                N(bn_buf)[...] /= float(world_size)
            else:
                dist.broadcast(bn_buf, 0)


# ==========================================================================================
if MODE == "torchvision":
    args = SimpleNamespace(dist_url="env://")
    init_distributed_mode(args)
    assert args.distributed and args.rank == dist.get_rank()
else:
    d2_init(sys.argv[2])

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rank_cases import Cases, raises  # noqa: E402

rank, n = dist.get_rank(), dist.get_world_size()
case = Cases(rank, after=dist.barrier)
S = n * (n - 1) // 2   # sum of the ranks


@case
def torchvision_world_and_meters() -> None:
    assert is_dist_avail_and_initialized()
    assert (tv_get_rank(), tv_get_world_size()) == (rank, n)
    logger = MetricLogger()
    for step in range(rank + 1):
        logger.update(loss=float(rank + step), acc1=100.0 * rank)
    logger.synchronize_between_processes()
    # counts 1 + 2 + ... + n; totals sum over ranks of (rank + 0 + ... + rank + rank)
    count = n * (n + 1) // 2
    loss_total = sum(r * (r + 1) + r * (r + 1) // 2 for r in range(n))
    assert logger.meters["loss"].count == count
    assert logger.meters["loss"].total == float(loss_total)
    assert logger.meters["acc1"].total == sum(100.0 * r * (r + 1) for r in range(n))
    red = tv_reduce_dict({"loss_a": T(np.float32(rank)), "loss_b": T(np.float32(2.0))})
    assert red == {"loss_a": S / n, "loss_b": 2.0}, red


@case
def detectron2_comm() -> None:
    if MODE == "detectron2":
        assert (d2_get_local_rank(), d2_get_local_size()) == (rank % 2, 2)
    synchronize()
    objs = d2_all_gather({"rank": rank, "pad": "x" * (7 * rank)})
    assert objs == [{"rank": r, "pad": "x" * (7 * r)} for r in range(n)], objs
    got = d2_gather(("r", rank, list(range(rank))), dst=0)
    assert got == ([("r", r, list(range(r))) for r in range(n)] if rank == 0 else []), got
    np.random.seed(1000 + rank)
    seed = shared_random_seed()
    np.random.seed(1000)
    assert seed == np.random.randint(2**31), seed
    red = d2_reduce_dict({"b": T(np.float32(rank + 1)), "a": T(np.float32(10.0))})
    if rank == 0:
        assert red == {"a": 10.0, "b": (S + n) / n}, red
    x = T(np.array([rank, 1.0], dtype=np.float32))
    assert d2_differentiable_all_reduce_forward(x).tolist() == [float(S), float(n)]


@case
def detectron2_gather_on_a_subgroup() -> None:
    # comm.gather(data, dst, group) on the per-machine group: dst is a group rank there
    if MODE != "detectron2":
        return
    base = rank - rank % 2
    if base == 0:
        got = d2_gather({"g": rank}, dst=0, group=_LOCAL_PROCESS_GROUP)
        assert got == ([{"g": base}, {"g": base + 1}] if rank % 2 == 0 else []), got
    else:   # dst is a global rank in dist.gather: 0 is not in the second machine's group
        raises(ValueError, "Global rank 0 is not part of group",
               lambda: d2_gather({"g": rank}, dst=0, group=_LOCAL_PROCESS_GROUP))
    assert d2_all_gather(rank * 3, group=_LOCAL_PROCESS_GROUP) == [base * 3, base * 3 + 3]


@case
def megatron_parallel_state() -> None:
    initialize_model_parallel(tp=2, pp=1)
    tp_rank, dp_rank = get_tensor_model_parallel_rank(), get_data_parallel_rank()
    assert (tp_rank, get_tensor_model_parallel_world_size()) == (rank % 2, 2)
    assert dp_rank == rank // 2 and dist.get_world_size(group=_DP) == n // 2
    assert get_pipeline_model_parallel_rank() == 0 and dist.get_world_size(group=_PP) == 1
    assert dist.get_process_group_ranks(_TP) == _TP_RANKS == [rank - tp_rank, rank - tp_rank + 1]
    assert dist.get_process_group_ranks(_DP) == _DP_RANKS == list(range(tp_rank, n, 2))
    assert dist.get_global_rank(_TP, 1) == _TP_RANKS[1]
    assert dist.get_group_rank(_DP, rank) == dp_rank
    assert dist.get_backend(_DP_GLOO) == "gloo"
    # the embedding/position-embedding style broadcast from the tp group's first rank
    w = T(np.full(3, float(rank), dtype=np.float32))
    dist.broadcast(w, get_tensor_model_parallel_src_rank(), group=_TP)
    assert w.tolist() == [float(rank - tp_rank)] * 3, w.tolist()
    y = mg_reduce(T(np.array([rank, 1.0], dtype=np.float32)))
    assert y.tolist() == [float(2 * rank - 2 * tp_rank + 1), 2.0], y.tolist()
    g = mg_gather_along_first_dim(T(np.full((1, 2), float(rank), dtype=np.float32)))
    base = float(rank - tp_rank)
    assert g.tolist() == [[base, base], [base + 1, base + 1]], g.tolist()
    rs = mg_reduce_scatter_along_first_dim(T(np.arange(4, dtype=np.float32).reshape(2, 2)))
    assert rs.tolist() == [[2.0 * (2 * tp_rank), 2.0 * (2 * tp_rank + 1)]], rs.tolist()
    # DDP grad sync: async all_reduce on the data-parallel group, then Work.wait()
    grad = T(np.full(4, float(rank + 1), dtype=np.float32))
    handle = dist.all_reduce(grad, group=_DP, async_op=True)
    handle.wait()
    assert grad.tolist() == [float(sum(r + 1 for r in _DP_RANKS))] * 4, grad.tolist()
    # distributed optimizer: async reduce_scatter_tensor of the grad buffer on the DP group
    m = len(_DP_RANKS)
    buf = T(np.arange(2 * m, dtype=np.float32) + rank)
    shard = empty((2,), np.float32)
    work = dist.reduce_scatter_tensor(shard, buf, op=dist.ReduceOp.SUM, group=_DP,
                                      async_op=True)
    work.wait()
    want = [float(sum(2 * dp_rank + k + r for r in _DP_RANKS)) for k in range(2)]
    assert shard.tolist() == want, (shard.tolist(), want)
    obj = [None]
    if dp_rank == 0:
        obj = [{"iteration": 7, "tp": tp_rank}]
    dist.broadcast_object_list(obj, src=_DP_RANKS[0], group=_DP_GLOO)
    assert obj == [{"iteration": 7, "tp": tp_rank}], obj
    dist.barrier(group=_MP)


@case
def accelerate_operations() -> None:
    state = PartialState()
    order = []
    with state.main_process_first():
        order.append(rank)
    assert order == [rank]
    x = T(np.array([[rank, rank + 0.5]], dtype=np.float32))
    for into in (False, True):
        got = acc_gather_one(x, state, into_tensor=into)
        assert got.tolist() == [[r, r + 0.5] for r in range(n)], got.tolist()
    assert acc_gather_one(T(np.int64(rank)), state, True).tolist() == list(range(n))
    assert acc_gather_object([{"i": rank}], state) == [{"i": r} for r in range(n)]
    data = {"a": T(np.full(2, float(rank), dtype=np.float64)), "b": T(np.array([rank]))}
    acc_broadcast(data, from_process=n - 1)
    assert data["a"].tolist() == [n - 1.0] * 2 and data["b"].tolist() == [n - 1]
    objs = acc_broadcast_object_list(["seed", rank] if rank == 0 else [None, None])
    assert objs == ["seed", 0], objs
    red = acc_reduce(T(np.array([rank, 2.0], dtype=np.float32)), state)
    assert red.tolist() == [S / n, 2.0], red.tolist()
    assert acc_reduce(T(np.array([rank])), state, "sum").tolist() == [S]
    t = T(np.full((rank + 1, 2), rank + 1, dtype=np.int64))
    padded = acc_pad_across_processes(t, state, pad_index=-1)
    want = [[rank + 1] * 2] * (rank + 1) + [[-1, -1]] * (n - rank - 1)
    assert N(padded).tolist() == want, N(padded).tolist()
    first = acc_pad_across_processes(t, state, pad_first=True)
    assert N(first).tolist() == [[0, 0]] * (n - rank - 1) + [[rank + 1] * 2] * (rank + 1)
    # every rank gathers the padded tensors (the reason pad_across_processes exists)
    allp = acc_gather_one(padded, state, into_tensor=False)
    assert allp.shape == (n * n, 2)


@case
def fairseq_utils() -> None:
    world = dist.group.WORLD
    assert fs_all_gather_list({"r": rank, "s": "y" * rank}) == [
        {"r": r, "s": "y" * r} for r in range(n)]
    red = fs_all_reduce_dict(OrderedDict(loss=float(rank), nll=[1.0, rank]), group=world)
    assert red == OrderedDict(loss=[float(S)], nll=[float(n), float(S)]), red
    x = T(np.array([rank, -rank], dtype=np.int32))
    out = fs_all_gather(x, group=world)
    assert [o.tolist() for o in out] == [[r, -r] for r in range(n)]
    assert out[rank] is x
    a2a = fs_all_to_all(T(np.arange(n * 2, dtype=np.float32) + 100 * rank), group=world)
    assert a2a.tolist() == [float(100 * r + 2 * rank + k) for r in range(n) for k in range(2)]
    assert fs_all_reduce(T(np.array([rank], dtype=np.int64)), world, "max").tolist() == [n - 1]
    obj = fs_broadcast_object_slow({"cfg": list(range(5))} if rank == 1 else None, 1, world)
    assert obj == {"cfg": list(range(5))}, obj


@case
def timm_distributed() -> None:
    rt = reduce_tensor(T(np.array([rank * 2.0], dtype=np.float32)), n)
    assert rt.tolist() == [2.0 * S / n], rt.tolist()
    bufs = {"bn1.running_mean": T(np.full(3, float(rank), dtype=np.float32)),
            "bn1.running_var": T(np.full(3, float(rank + 1), dtype=np.float32)),
            "bn1.num_batches_tracked": T(np.array(rank, dtype=np.int64))}
    distribute_bn(bufs, n, reduce=True)
    assert bufs["bn1.running_mean"].tolist() == [S / n] * 3
    assert bufs["bn1.running_var"].tolist() == [(S + n) / n] * 3
    assert bufs["bn1.num_batches_tracked"].tolist() == rank
    bufs["bn1.running_mean"] = T(np.full(2, float(rank), dtype=np.float32))
    distribute_bn(bufs, n, reduce=False)
    assert bufs["bn1.running_mean"].tolist() == [0.0, 0.0]


case.done()
dist.destroy_process_group()
