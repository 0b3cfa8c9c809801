"""Collectives on arrays: reductions, broadcasts, gathers, scatters, all-to-all, their
coalesced and single-array forms, and barriers. Each checks its arguments, then hands the
engine call to the group (:meth:`~accelrt.distributed.ProcessGroup.run`); ``all_reduce``,
``broadcast`` and ``all_gather_into_tensor`` first try the group's direct plans (the
small-message path).

Example::

    >>> import accelrt as acc, accelrt.distributed as dist
    >>> dist.init_process_group("mpi")
    >>> a = acc.full((2,), 3.0, device="cpu")
    >>> dist.all_reduce(a); a.tolist()
    [3.0, 3.0]
    >>> dist.destroy_process_group()
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._array import Array
from .._errors import AcceleratorError, AcceleratorValueError, type_shown
from .._stream import Stream
from .._transfer import Copy, HostCopy, run_steps
from ._coalescing import COALESCING, record
from ._argchecks import (_bool_arg, _check_length, _check_list, _check_same,
                         _check_self_pair, _check_single, _size_check, _split_sizes)
from ._engine import Engine, PremulSum, RedOp, ReduceOp
from ._errors import DistError, DistTimeoutError, _EmptyListError
from . import _group as _group_mod
from ._debug import PeerCounts
from ._group import DEFAULT_TIMEOUT, BufOf, ProcessGroup, Work
from ._world import _S, ArrayArg, GroupArg, TimeoutArg, _group, _member, _seconds, _warn_not_member


# ---------------------------------------------------------------------------- helpers
def _op(op: Any) -> RedOp:
    if type(op) is PremulSum:
        return op
    if not isinstance(op, ReduceOp):
        raise TypeError(f"op must be a ReduceOp, got {op!r}")
    if op is ReduceOp.PREMUL_SUM:
        raise AcceleratorValueError("ReduceOp.PREMUL_SUM needs its factor: pass "
                                    "op=accelrt.distributed._make_nccl_premul_sum(factor)")
    return op


def _make_nccl_premul_sum(factor: Any) -> PremulSum:
    """``ReduceOp.PREMUL_SUM`` with ``factor`` (torch.distributed's name): each rank multiplies
    its input by ``factor`` (a number or a one-element array, read once here), then the
    inputs are summed. For :func:`all_reduce`, :func:`reduce`, :func:`reduce_scatter` and
    :func:`reduce_scatter_tensor` on floating (MPI: or complex) arrays. MPI scales on the host
    before a sum; NCCL uses its own ``ncclRedOpCreatePreMulSum``.

    Raises:
        TypeError: ``factor`` is not a number or a one-element array.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> a = acc.full((2,), 3.0, device="cpu")
        >>> dist.all_reduce(a, op=dist._make_nccl_premul_sum(0.5)); a.tolist()
        [1.5, 1.5]
        >>> dist.destroy_process_group()
    """
    if isinstance(factor, (bool, np.bool_)):
        raise TypeError("_make_nccl_premul_sum: factor must be a number, got a bool")
    if isinstance(factor, (int, float, complex, np.number)):
        return PremulSum(factor.item() if isinstance(factor, np.number) else factor)
    if isinstance(factor, (Array, np.ndarray)):
        if factor.size != 1:
            raise TypeError(f"_make_nccl_premul_sum: a factor array must have one element, got "
                            f"{factor.size}")
        value = np.asarray(factor.numpy() if isinstance(factor, Array) else factor).reshape(-1)
        return _make_nccl_premul_sum(value[0])
    raise TypeError(f"_make_nccl_premul_sum: factor must be a number or a one-element array, "
                    f"got {type_shown(factor)}")


def _desc(a: Any) -> tuple[Any, Any]:
    """(dtype, shape) of an array for the debug fingerprint (checked later for the type)."""
    return (getattr(a, "dtype", None), getattr(a, "shape", None))


# ---------------------------------------------------------------------------- collectives
def all_reduce(tensor: ArrayArg, op: ReduceOp | PremulSum = ReduceOp.SUM, group: GroupArg = None,
               async_op: bool = False) -> Work | None:
    """Reduce ``tensor`` across the group, in place on every rank.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> a = acc.full((2,), 3, dtype="int64", device="cpu")
        >>> dist.all_reduce(a, op=dist.ReduceOp.MAX, async_op=True).wait()
        True
        >>> a.tolist(); dist.destroy_process_group()
        [3, 3]
    """
    g = _S.world if group is None else _group(group)
    if COALESCING and g in COALESCING:   # inside _coalescing_manager: recorded, not run
        return record(g, "all_reduce", tensor, None, op, async_op)
    # (only a ReduceOp itself, whose number keys its plan: a plain 1 or True would find
    # the AVG plan; torch refuses them with a TypeError)
    if g is not None and type(tensor) is Array and type(op) is ReduceOp:
        # idle streams, host memory and a plan left by an earlier call: call MPI right here
        mem = tensor._mem
        plan = g.plans_ar.get((mem.ptr, mem.nbytes, tensor._dtype.num, op._value_))
        if plan is not None and g.run_plan("all_reduce", plan):
            return Work.completed([tensor]) if async_op else None
        if g.all_reduce_fast(tensor, op):
            return Work.completed([tensor]) if async_op else None
    if g is None:
        if _S.world is None:
            _group(group)   # raises: not initialized
        _warn_not_member("all_reduce")
        return None
    red = _op(op)

    def call(eng: Engine, buf: BufOf, stream: Stream | None) -> None:
        eng.all_reduce(None, buf(tensor), red, stream)

    return g.run("all_reduce", [tensor], [tensor], [tensor], call, async_op,
                 (red.name,) + _desc(tensor), red, [tensor], alias="inplace")


def broadcast(tensor: ArrayArg, src: int | None = None, group: GroupArg = None,
              async_op: bool = False, group_src: int | None = None) -> Work | None:
    """Copy ``tensor`` of global rank ``src`` (or group rank ``group_src``: give exactly one)
    into ``tensor`` on every rank.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> a = acc.full((2,), 7.0, device="cpu")
        >>> dist.broadcast(a, src=0); a.tolist(); dist.destroy_process_group()
        [7.0, 7.0]
    """
    g = _S.world if group is None else _group(group)
    if g is None:
        if _S.world is None:
            _group(group)
        _warn_not_member("broadcast")
        return None
    if type(tensor) is Array and type(src) is int and group_src is None:
        mem = tensor._mem
        plan = g.plans_bc.get((mem.ptr, mem.nbytes, src))
        if plan is not None and g.run_plan("broadcast", plan):
            return Work.completed([tensor]) if async_op else None
    if (type(src) is int and group_src is None and 0 <= src < g._size
            and g.global_ranks[src] == src):
        root = src   # the world and groups that keep world ranks
    else:
        root = g.canonical_rank(src, group_src, "src")
    if g.broadcast_fast(tensor, root, g.global_ranks[root]):
        return Work.completed([tensor]) if async_op else None

    def call(eng: Engine, buf: BufOf, stream: Stream | None) -> None:
        eng.broadcast(buf(tensor), root, stream)

    return g.run("broadcast", [tensor], [tensor], [tensor], call, async_op,
                 (root,) + _desc(tensor), None, [tensor], alias="inplace")


def reduce(tensor: ArrayArg, dst: int | None = None, op: ReduceOp | PremulSum = ReduceOp.SUM,
           group: GroupArg = None, async_op: bool = False,
           group_dst: int | None = None) -> Work | None:
    """Reduce ``tensor`` across the group into ``tensor`` on global rank ``dst`` (or group rank
    ``group_dst``: give exactly one); other ranks' arrays are left as they were.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> a = acc.full((2,), 1.5, device="cpu")
        >>> dist.reduce(a, dst=0); a.tolist(); dist.destroy_process_group()
        [1.5, 1.5]
    """
    g = _member(group, "reduce")
    if g is None:
        return None
    root = g.canonical_rank(dst, group_dst, "dst")
    red = _op(op)

    def call(eng: Engine, buf: BufOf, stream: Stream | None) -> None:
        eng.reduce(buf(tensor), red, root, stream)

    return g.run("reduce", [tensor], [tensor], [tensor], call, async_op,
                 (red.name, root) + _desc(tensor), red, [tensor], alias="inplace")


def all_gather_into_tensor(output_tensor: ArrayArg, input_tensor: ArrayArg, group: GroupArg = None,
                           async_op: bool = False) -> Work | None:
    """Gather every rank's ``input_tensor`` into ``output_tensor`` (world_size times as many
    elements), in rank order. :func:`all_gather_single` is the same function under the name
    torch prefers for new code; torch 2.15 keeps this one as a plain alias, without a warning.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = acc.empty((1, 2), device="cpu")
        >>> dist.all_gather_into_tensor(out, acc.full((2,), 4.0, device="cpu"))
        >>> out.tolist(); dist.destroy_process_group()
        [[4.0, 4.0]]
    """
    if type(input_tensor) is not Array or type(output_tensor) is not Array:
        # (torch checks the arrays' types before its group membership and coalescing tests)
        _check_single("all_gather_into_tensor", input_tensor, "input_tensor")
        _check_single("all_gather_into_tensor", output_tensor, "output_tensor")
    g = _S.world if group is None else _group(group)
    if COALESCING and g in COALESCING:   # inside _coalescing_manager: recorded, not run
        return record(g, "all_gather_single", input_tensor, output_tensor, None, async_op)
    if g is not None and type(input_tensor) is Array and type(output_tensor) is Array:
        mem, omem = input_tensor._mem, output_tensor._mem
        plan = g.plans_ag.get((mem.ptr, omem.ptr, mem.nbytes, omem.nbytes))
        if (plan is not None and input_tensor._dtype is output_tensor._dtype
                and g.run_plan("all_gather_into_tensor", plan)):
            return Work.completed([output_tensor]) if async_op else None
        if g.all_gather_fast(output_tensor, input_tensor):
            return Work.completed([output_tensor]) if async_op else None
    g = _member(group, "all_gather_into_tensor")
    if g is None:
        return None
    _check_same("all_gather_into_tensor", output_tensor, input_tensor,
                "output tensor must have the same type as input tensor")
    _size_check("all_gather_into_tensor", output_tensor, g.size() * input_tensor.size,
                output_tensor.size, "output tensor size must be equal to world_size times "
                "input tensor size")

    def call(eng: Engine, buf: BufOf, stream: Stream | None) -> None:
        eng.all_gather(buf(input_tensor), buf(output_tensor), stream)

    arrays = [input_tensor, output_tensor]
    return g.run("all_gather_into_tensor", arrays, [input_tensor], [output_tensor], call,
                 async_op, _desc(input_tensor), None, [output_tensor], alias="gather")


def all_gather(tensor_list: Sequence[ArrayArg], tensor: ArrayArg, group: GroupArg = None,
               async_op: bool = False) -> Work | None:
    """Gather every rank's ``tensor`` into ``tensor_list`` (one array per rank).

    As torch's NCCL (all_gather_v; gloo refuses them), the arrays may differ in size:
    ``tensor_list[k]`` has group rank k's input size (the same list sizes on every rank).

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> outs = [acc.empty((2,), device="cpu")]
        >>> dist.all_gather(outs, acc.full((2,), 5.0, device="cpu"))
        >>> outs[0].tolist(); dist.destroy_process_group()
        [5.0, 5.0]
    """
    g = _member(group, "all_gather")
    if g is None:
        return None
    _check_length("all_gather", tensor_list, "tensor_list", g.size(), "(one per rank)")
    if len({getattr(t, "size", None) for t in tensor_list}) > 1:   # blocks of several sizes
        from ._uneven import _all_gather_uneven
        return _all_gather_uneven(g, list(tensor_list), tensor, async_op)
    _check_list("all_gather", g, tensor_list, "tensor_list", tensor, "(one per rank)",
                inputs=False, list_first=True)
    n, size = g.size(), tensor.size
    stage = _temp_like(tensor, n * size)

    def call(eng: Engine, buf: BufOf, stream: Stream | None) -> None:
        eng.all_gather(buf(tensor), buf(stage), stream)

    w = g.run("all_gather", [tensor, stage], [tensor], [stage], call, True, _desc(tensor))
    return _split_out(g, "all_gather", w, stage, list(tensor_list), async_op)


def reduce_scatter_tensor(output: ArrayArg, input: ArrayArg,
                          op: ReduceOp | PremulSum = ReduceOp.SUM, group: GroupArg = None,
                          async_op: bool = False) -> Work | None:
    """Reduce ``input`` (world_size times ``output``'s elements) across ranks and leave rank
    k's share, the k-th block, in ``output``. :func:`reduce_scatter_single` is the same
    function under the name torch prefers for new code; torch 2.15 keeps this one as a plain
    alias, without a warning.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = acc.empty((2,), device="cpu")
        >>> dist.reduce_scatter_tensor(out, acc.full((2,), 6.0, device="cpu"))
        >>> out.tolist(); dist.destroy_process_group()
        [6.0, 6.0]
    """
    _check_single("reduce_scatter_tensor", output, "output")   # (before membership: torch's)
    _check_single("reduce_scatter_tensor", input, "input")
    g = _member(group, "reduce_scatter_tensor")
    if g is None:
        return None
    if COALESCING and g in COALESCING:   # inside _coalescing_manager: recorded, not run
        return record(g, "reduce_scatter_single", input, output, op, async_op)
    _check_same("reduce_scatter_tensor", output, input,
                "input tensor must be the same type as the output tensor.")
    _size_check("reduce_scatter_tensor", input, g.size() * output.size, input.size,
                "input tensor must be the same size as output size times world size")
    red = _op(op)

    def call(eng: Engine, buf: BufOf, stream: Stream | None) -> None:
        eng.reduce_scatter(buf(input), buf(output), red, stream)

    return g.run("reduce_scatter_tensor", [input, output], [input], [output], call, async_op,
                 (red.name,) + _desc(output), red, [output], alias="scatter")


def gather(tensor: ArrayArg, gather_list: Sequence[ArrayArg] | None = None, dst: int | None = None,
           group: GroupArg = None, async_op: bool = False,
           group_dst: int | None = None) -> Work | None:
    """Gather every rank's ``tensor`` into ``gather_list`` on global rank ``dst`` (or group
    rank ``group_dst``; neither: global rank 0); None elsewhere.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> outs = [acc.empty((2,), device="cpu")]
        >>> dist.gather(acc.full((2,), 8.0, device="cpu"), outs, dst=0)
        >>> outs[0].tolist(); dist.destroy_process_group()
        [8.0, 8.0]
    """
    g = _member(group, "gather")
    if g is None:
        return None
    root = g.canonical_rank(dst, group_dst, "dst", default=0)
    n = g.size()
    if g.rank() == root:
        _check_list("gather", g, gather_list, "gather_list", tensor, "on the destination rank",
                    inputs=False)
        stage: Any = _temp_like(tensor, n * tensor.size)
    else:
        if gather_list:
            raise ValueError("Argument ``gather_list`` must NOT be specified on "
                             "non-destination ranks.")
        stage = None

    def call(eng: Engine, buf: BufOf, stream: Stream | None) -> None:
        eng.gather(buf(tensor), None if stage is None else buf(stage), root, stream)

    arrays = [tensor] if stage is None else [tensor, stage]
    w = g.run("gather", arrays, [tensor], arrays[1:], call, True, (root,) + _desc(tensor))
    if stage is None:
        assert w is not None
        if async_op:
            return w
        w.wait()   # later work on the current stream may overwrite the input
        return None
    assert gather_list is not None
    return _split_out(g, "gather", w, stage, list(gather_list), async_op)


def scatter(tensor: ArrayArg, scatter_list: Sequence[ArrayArg] | None = None,
            src: int | None = None, group: GroupArg = None, async_op: bool = False,
            group_src: int | None = None) -> Work | None:
    """Send ``scatter_list[k]`` of global rank ``src`` (or group rank ``group_src``; neither:
    global rank 0) into ``tensor`` on group rank k.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = acc.empty((2,), device="cpu")
        >>> dist.scatter(out, [acc.full((2,), 9.0, device="cpu")], src=0)
        >>> out.tolist(); dist.destroy_process_group()
        [9.0, 9.0]
    """
    g = _member(group, "scatter")
    if g is None:
        return None
    root = g.canonical_rank(src, group_src, "src", default=0)
    n = g.size()
    stage: Any = None
    if g.rank() == root:
        inputs = _check_list("scatter", g, scatter_list, "scatter_list", tensor,
                             "on the source rank", inputs=True)
        stage = _temp_like(tensor, n * tensor.size)
        _pack(stage, inputs)
    elif scatter_list:
        raise ValueError("Argument ``scatter_list`` must NOT be specified on non-source ranks.")

    def call(eng: Engine, buf: BufOf, stream: Stream | None) -> None:
        eng.scatter(None if stage is None else buf(stage), buf(tensor), root, stream)

    arrays = [tensor] if stage is None else [stage, tensor]
    ins = [] if stage is None else [stage]
    return g.run("scatter", arrays, ins, [tensor], call, async_op, (root,) + _desc(tensor),
                 None, [tensor])


def all_to_all_single(output: ArrayArg, input: ArrayArg,
                      output_split_sizes: Sequence[int] | None = None,
                      input_split_sizes: Sequence[int] | None = None, group: GroupArg = None,
                      async_op: bool = False) -> Work | None:
    """Split ``input`` along dim 0 (equally, or by ``input_split_sizes``), send block k to
    rank k, and concatenate the blocks received, in rank order, into ``output``.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = acc.empty((3,), dtype="int32", device="cpu")
        >>> dist.all_to_all_single(out, acc.asarray([1, 2, 3], device="cpu", dtype="int32"))
        >>> out.tolist(); dist.destroy_process_group()
        [1, 2, 3]
    """
    g = _member(group, "all_to_all_single")
    if g is None:
        return None
    _check_single("all_to_all_single", output, "output")   # (after membership: torch's)
    _check_single("all_to_all_single", input, "input")
    _check_same("all_to_all_single", output, input)
    n = g.size()

    def counts(arr: Any, splits: Sequence[int] | None, name: str) -> list[int]:
        rows = arr.shape[0] if arr.ndim else 1
        per_row = arr.size // rows if rows else 0
        if splits is not None:   # ints (numpy's too), as torch's: int() would truncate 1.5
            splits = _split_sizes(splits, name)
        if splits is None or len(splits) == 0:
            if rows % n:
                raise AcceleratorValueError(f"all_to_all_single: Tensor's dim 0 does not divide "
                                            f"equally across group size ({name} dim 0 ({rows}) "
                                            f"must be divisible by the world size ({n}) "
                                            "without split sizes)")
            return [rows // n * per_row] * n
        # torch 2.15's words (c10d's checkSplitSizes), in its order
        words = ("Number of tensor splits not equal to group size" if len(splits) != n else
                 "Split sizes must be non-negative" if any(int(s) < 0 for s in splits) else
                 "Split sizes doesn't match total dim 0 size" if sum(splits) != rows else None)
        if words is not None:
            raise AcceleratorValueError(f"all_to_all_single: {words} ({name}_split_sizes must "
                                        f"be {n} non-negative ints summing to dim 0 ({rows}), "
                                        f"got {list(splits)})")
        return [int(s) * per_row for s in splits]

    sc = counts(input, input_split_sizes, "input")
    rc = counts(output, output_split_sizes, "output")
    _check_self_pair("all_to_all_single", g, sc, rc, "the block of output it receives "
                     "from itself must have the size of the block of input it sends itself")

    def call(eng: Engine, buf: BufOf, stream: Stream | None) -> None:
        eng.all_to_all(buf(input), buf(output), sc, rc, stream)

    # split sizes (and so the shapes) legitimately differ between ranks: the debug
    # fingerprint compares the dtype, and the per-peer counts pairwise
    return g.run("all_to_all_single", [input, output], [input], [output], call, async_op,
                 (getattr(input, "dtype", None), PeerCounts(tuple(sc), tuple(rc))), None,
                 [output])


def all_to_all(output_tensor_list: Sequence[ArrayArg], input_tensor_list: Sequence[ArrayArg],
               group: GroupArg = None, async_op: bool = False) -> Work | None:
    """Send ``input_tensor_list[k]`` to group rank k and receive rank k's array into
    ``output_tensor_list[k]`` (sizes may differ per rank; one dtype and device throughout).

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = [acc.empty((2,), device="cpu")]
        >>> dist.all_to_all(out, [acc.full((2,), 1.5, device="cpu")])
        >>> out[0].tolist(); dist.destroy_process_group()
        [1.5, 1.5]
    """
    g = _member(group, "all_to_all")
    if g is None:
        return None
    n = g.size()
    for name, lst in (("output_tensor_list", output_tensor_list),
                      ("input_tensor_list", input_tensor_list)):
        _check_length("all_to_all", lst, name, n, "(one per rank)")
    g.check_args("all_to_all", input_tensor_list, output_tensor_list, alias="staged")
    first = input_tensor_list[0]
    for t in list(output_tensor_list) + list(input_tensor_list):   # torch's order
        _check_same("all_to_all", output_tensor_list[0], t)
    sc = [t.size for t in input_tensor_list]
    rc = [t.size for t in output_tensor_list]
    _check_self_pair("all_to_all", g, sc, rc, f"output_tensor_list[{g.rank()}] (what it "
                     f"receives from itself) must have the size of input_tensor_list"
                     f"[{g.rank()}] (what it sends itself)")
    send_stage = _temp_like(first, sum(sc))
    recv_stage = _temp_like(first, sum(rc))
    _pack(send_stage, list(input_tensor_list))

    def call(eng: Engine, buf: BufOf, stream: Stream | None) -> None:
        eng.all_to_all(buf(send_stage), buf(recv_stage), sc, rc, stream)

    # sizes legitimately differ between ranks: the debug fingerprint compares the dtype, and
    # the per-peer counts pairwise
    w = g.run("all_to_all", [send_stage, recv_stage], [send_stage], [recv_stage], call, True,
              (getattr(first, "dtype", None), PeerCounts(tuple(sc), tuple(rc))))
    return _split_out(g, "all_to_all", w, recv_stage, list(output_tensor_list), async_op)


def reduce_scatter(output: ArrayArg, input_list: Sequence[ArrayArg],
                   op: ReduceOp | PremulSum = ReduceOp.SUM, group: GroupArg = None,
                   async_op: bool = False) -> Work | None:
    """Reduce ``input_list[k]`` across ranks into ``output`` of group rank k (the list form
    of :func:`reduce_scatter_tensor`; every array has ``output``'s dtype).

    As torch's gloo, the blocks may differ in size from rank to rank: ``input_list[k]`` has
    group rank k's output size (every rank passes lists of the same sizes), so
    ``input_list[rank]`` has ``output``'s. Equal blocks run the engine's reduce-scatter;
    uneven ones an all-reduce of the packed list, from which each rank keeps its block.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = acc.empty((2,), device="cpu")
        >>> dist.reduce_scatter(out, [acc.full((2,), 2.5, device="cpu")])
        >>> out.tolist(); dist.destroy_process_group()
        [2.5, 2.5]
    """
    g = _member(group, "reduce_scatter")
    if g is None:
        return None
    n = g.size()
    _check_length("reduce_scatter", input_list, "input_list", n, "(one per rank)")
    if len({getattr(t, "size", None) for t in input_list}) > 1:   # blocks of several sizes
        from ._uneven import _reduce_scatter_uneven
        return _reduce_scatter_uneven(g, output, list(input_list), op, async_op)
    inputs = _check_list("reduce_scatter", g, input_list, "input_list", output,
                         "(one per rank)", inputs=True)
    red = _op(op)
    stage = _temp_like(output, n * output.size)
    _pack(stage, inputs)

    def call(eng: Engine, buf: BufOf, stream: Stream | None) -> None:
        eng.reduce_scatter(buf(stage), buf(output), red, stream)

    return g.run("reduce_scatter", [stage, output], [stage], [output], call, async_op,
                 (red.name,) + _desc(output), red, [output])


def all_gather_single(output_tensor: ArrayArg, input_tensor: ArrayArg, group: GroupArg = None,
                      async_op: bool = False) -> Work | None:
    """:func:`all_gather_into_tensor` under the name torch prefers for new code (same
    arguments and behaviour; the other name is an alias, not deprecated, as in torch 2.15).

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = acc.empty((2,), device="cpu")
        >>> dist.all_gather_single(out, acc.full((2,), 4.0, device="cpu"))
        >>> out.tolist(); dist.destroy_process_group()
        [4.0, 4.0]
    """
    return all_gather_into_tensor(output_tensor, input_tensor, group, async_op)


def reduce_scatter_single(output: ArrayArg, input: ArrayArg,
                          op: ReduceOp | PremulSum = ReduceOp.SUM, group: GroupArg = None,
                          async_op: bool = False) -> Work | None:
    """:func:`reduce_scatter_tensor` under the name torch prefers for new code (same
    arguments and behaviour; the other name is an alias, not deprecated, as in torch 2.15).

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = acc.empty((2,), device="cpu")
        >>> dist.reduce_scatter_single(out, acc.full((2,), 6.0, device="cpu"))
        >>> out.tolist(); dist.destroy_process_group()
        [6.0, 6.0]
    """
    return reduce_scatter_tensor(output, input, op, group, async_op)


def gather_single(tensor: ArrayArg, gather_tensor: ArrayArg | None = None, dst: int | None = None,
                  group: GroupArg = None, async_op: bool = False,
                  group_dst: int | None = None) -> Work | None:
    """Gather every rank's ``tensor`` into one array, ``gather_tensor`` (world_size times its
    elements, rank order; a flat or stacked shape), on global rank ``dst`` or group rank
    ``group_dst`` (neither: global rank 0); ``gather_tensor`` is ignored elsewhere. Unlike
    :func:`gather` the engine writes it directly (no staging copy).

    Raises:
        ValueError: no ``gather_tensor`` on the destination rank, or its size or dtype differ.

    Example::

        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = acc.empty((1, 2), device="cpu")
        >>> dist.gather_single(acc.full((2,), 8.0, device="cpu"), out, dst=0)
        >>> out.tolist(); dist.destroy_process_group()
        [[8.0, 8.0]]
    """
    _check_single("gather_single", tensor, "tensor")   # (before membership: torch's)
    g = _member(group, "gather_single")
    if g is None:
        return None
    root = g.canonical_rank(dst, group_dst, "dst", default=0)
    out = None
    if g.rank() == root:
        if gather_tensor is None:
            raise ValueError("gather_tensor must be specified on the destination rank")
        _check_single("gather_single", gather_tensor, "gather_tensor")
        _check_same("gather_single", tensor, gather_tensor)
        _size_check("gather_single", gather_tensor, g.size() * tensor.size, gather_tensor.size,
                    "gather_tensor must hold world_size times the input's elements")
        out = gather_tensor

    def call(eng: Engine, buf: BufOf, stream: Stream | None) -> None:
        eng.gather(buf(tensor), None if out is None else buf(out), root, stream)

    arrays = [tensor] if out is None else [tensor, out]
    w = g.run("gather_single", arrays, [tensor], arrays[1:], call, True,
              (root,) + _desc(tensor), None, arrays[1:])
    assert w is not None
    if async_op:
        return w
    w.wait()
    return None


def gather_into_tensor(tensor: ArrayArg, gather_tensor: ArrayArg | None = None,
                       dst: int | None = None, group: GroupArg = None, async_op: bool = False,
                       group_dst: int | None = None) -> Work | None:
    """An alias of :func:`gather_single` (same arguments and behaviour), kept, as torch 2.15
    keeps it, for code written against it; not deprecated. New code may call
    :func:`gather_single`.

    Example::

        >>> import accelrt.distributed as dist
        >>> callable(dist.gather_into_tensor)
        True
    """
    return gather_single(tensor, gather_tensor, dst, group, async_op, group_dst)


def _array_list(arrays: Any, what: str, op: str) -> list[Any]:
    if isinstance(arrays, (Array, np.ndarray)):
        return [arrays]
    if not isinstance(arrays, (list, tuple)) or not arrays or not all(
            isinstance(a, (Array, np.ndarray)) for a in arrays):
        raise TypeError(f"{op}: Invalid function argument. Expected parameter `{what}` of "
                        "type List[accelrt.Array] with at least one array")
    first = arrays[0]
    for a in arrays:
        if a.dtype != first.dtype:
            raise AcceleratorValueError(f"{op}: Invalid usage of tensors with different dtypes "
                                        f"Found {first.dtype} and  {a.dtype} (the arrays must "
                                        "have the same dtype)")
    return list(arrays)


def _will_be_deprecated(name: str, instead: str) -> None:
    """torch 2.15's ``FutureWarning`` of the coalesced collectives (``@deprecated`` on
    ``torch.distributed.all_reduce_coalesced`` and ``all_gather_coalesced``), at the caller."""
    warnings.warn(f"`accelrt.distributed.{name}` will be deprecated, as "
                  f"`torch.distributed.{name}` is (torch 2.15 warns the same): {instead}",
                  FutureWarning, stacklevel=3)


def all_reduce_coalesced(tensors: ArrayArg | Sequence[ArrayArg],
                         op: ReduceOp | PremulSum = ReduceOp.SUM, group: GroupArg = None,
                         async_op: bool = False) -> Work | None:
    """Reduce each array of ``tensors`` (one dtype, one device; or one array) across the
    group, in place, as one collective: the arrays are packed into one buffer, reduced once,
    and copied back. As in torch, shapes are not compared across ranks. Warns
    ``FutureWarning`` as torch 2.15 does: it will be deprecated.

    Example::

        >>> import warnings
        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> a, b = acc.full((2,), 1.0, device="cpu"), acc.full((3,), 2.0, device="cpu")
        >>> with warnings.catch_warnings(record=True) as seen:
        ...     warnings.simplefilter("always")
        ...     dist.all_reduce_coalesced([a, b])
        >>> a.tolist(), b.tolist(), seen[0].category.__name__; dist.destroy_process_group()
        ([1.0, 1.0], [2.0, 2.0, 2.0], 'FutureWarning')
    """
    _will_be_deprecated("all_reduce_coalesced", "call all_reduce on each array, or on one "
                        "array they are packed into")
    arrays = _array_list(tensors, "tensor", "all_reduce_coalesced")
    g = _member(group, "all_reduce_coalesced")
    if g is None:
        return None
    g.check_args("all_reduce_coalesced", arrays, arrays, alias="staged")
    red = _op(op)
    stage = _temp_like(arrays[0], sum(a.size for a in arrays))
    _pack(stage, arrays)

    def call(eng: Engine, buf: BufOf, stream: Stream | None) -> None:
        eng.all_reduce(None, buf(stage), red, stream)

    w = g.run("all_reduce_coalesced", [stage], [stage], [stage], call, True,
              (red.name, arrays[0].dtype, tuple(a.shape for a in arrays)), red, [stage],
              alias="inplace")
    return _split_out(g, "all_reduce_coalesced", w, stage, arrays, async_op)


def all_gather_coalesced(output_tensor_lists: Sequence[Sequence[ArrayArg]],
                         input_tensor_list: Sequence[ArrayArg], group: GroupArg = None,
                         async_op: bool = False) -> Work | None:
    """Gather every rank's ``input_tensor_list`` as one collective:
    ``output_tensor_lists[k][i]`` receives array ``i`` of group rank k (each output list
    matches the inputs' sizes; one dtype and device throughout). Warns ``FutureWarning`` as
    torch 2.15 does: it will be deprecated.

    Example::

        >>> import warnings
        >>> import accelrt as acc, accelrt.distributed as dist
        >>> dist.init_process_group("mpi")
        >>> out = [[acc.empty((2,), device="cpu"), acc.empty((1,), device="cpu")]]
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", FutureWarning)
        ...     dist.all_gather_coalesced(out, [acc.full((2,), 3.0, device="cpu"),
        ...                                     acc.full((1,), 4.0, device="cpu")])
        >>> [o.tolist() for o in out[0]]; dist.destroy_process_group()
        [[3.0, 3.0], [4.0]]
    """
    _will_be_deprecated("all_gather_coalesced", "call all_gather for each input array")
    g = _member(group, "all_gather_coalesced")
    if g is None:
        return None
    ins = _array_list(input_tensor_list, "input_tensor_list", "all_gather_coalesced")
    if not isinstance(output_tensor_lists, list):
        raise TypeError("Invalid function argument: output_tensor_lists should be a list")
    n = g.size()
    for lst in output_tensor_lists:
        if not isinstance(lst, (list, tuple)):   # torch's check, before the count's
            raise TypeError("all_gather_coalesced: Invalid function argument. Expected "
                            "parameter `output_tensor_lists` of type List[List[accelrt.Array]]"
                            f", but one of its items is {type_shown(lst)}")
    if len(output_tensor_lists) != n:
        raise AcceleratorValueError(f"all_gather_coalesced: output lists should be equal to "
                                    f"world size: output_tensor_lists must hold {n} lists (one "
                                    f"per rank), got {len(output_tensor_lists)}")
    outs: list[Any] = []
    for lst in output_tensor_lists:
        lst = _array_list(lst, "output_tensor_lists", "all_gather_coalesced")
        if [o.size for o in lst] != [i.size for i in ins]:
            bad = next((k for k, (o, i) in enumerate(zip(lst, ins)) if o.size != i.size),
                       min(len(lst), len(ins)))
            raise AcceleratorValueError(
                f"all_gather_coalesced: invalid size of output tensor at index {bad}: each "
                f"output list must match the inputs' sizes {[i.size for i in ins]}, got "
                f"{[o.size for o in lst]}")
        outs += lst
    g.check_args("all_gather_coalesced", ins, outs, alias="staged")
    for o in outs:
        _check_same("all_gather_coalesced", o, ins[0])
    total = sum(i.size for i in ins)
    send = _temp_like(ins[0], total)
    recv = _temp_like(ins[0], n * total)
    _pack(send, ins)

    def call(eng: Engine, buf: BufOf, stream: Stream | None) -> None:
        eng.all_gather(buf(send), buf(recv), stream)

    w = g.run("all_gather_coalesced", [send, recv], [send], [recv], call, True,
              (ins[0].dtype, tuple(i.shape for i in ins)))
    return _split_out(g, "all_gather_coalesced", w, recv, outs, async_op)


def _temp_like(a: Any, count: int) -> Any:
    if isinstance(a, np.ndarray):
        return np.empty(count, a.dtype)
    from .._array import empty
    return empty((count,), dtype=a.dtype, device=a.device)


def _copy(dst: Any, dst_off: int, src: Any, src_off: int, nbytes: int) -> None:
    """Copy bytes between two arrays of one device, in order on its current stream."""
    if nbytes == 0:
        return
    if isinstance(dst, np.ndarray):
        d = dst.reshape(-1).view(np.uint8)
        s = src.reshape(-1).view(np.uint8)
        d[dst_off:dst_off + nbytes] = s[src_off:src_off + nbytes]
        return
    from .._stream import _current
    b, index = dst._b, dst._index
    cur = _current(b, index)
    dptr, sptr = dst.data_ptr() + dst_off, src.data_ptr() + src_off
    # cpu arrays may borrow host memory: copy by numpy in stream order
    step = (HostCopy(dptr, sptr, nbytes, 1, 0, 0, cur) if b.capabilities(index).host_accessible
            else Copy(cur, "d2d", dptr, sptr, nbytes))
    run_steps((step,))


def _pack(stage: Any, parts: list[Any]) -> None:
    """Copy ``parts`` back to back into ``stage``."""
    off = 0
    for p in parts:
        _copy(stage, off, p, 0, p.nbytes)
        off += p.nbytes


def _split_out(g: ProcessGroup, op: str, w: Work | None, stage: Any, outs: list[Any],
               async_op: bool) -> Work | None:
    """Copy the blocks of ``stage`` into ``outs`` after ``w`` (stream-ordered)."""
    assert w is not None
    w.wait()
    off = 0
    for o in outs:
        _copy(o, 0, stage, off, o.nbytes)
        off += o.nbytes
    return Work.completed(outs) if async_op else None


# ---------------------------------------------------------------------------- barriers
def barrier(group: GroupArg = None, async_op: bool = False,
            device_ids: Sequence[int] | None = None, timeout: TimeoutArg = None) -> Work | None:
    """Block until every rank of the group reached the barrier (after the group's queued
    communication ran).

    Args:
        device_ids: the CUDA device of an NCCL-only group's barrier (its first item; an
            all_reduce of one element there, as ProcessGroupNCCL's barrier); a value that
            is not a list (a tuple too) is ignored, as torch's, and an empty list is
            torch's ``IndexError`` (also a ``TypeError``, as accelrt raised before).
        timeout: a ``datetime.timedelta`` or seconds (torch 2.14's ``timeout``): a rank that
            has not arrived by then makes this rank raise :class:`DistTimeoutError`, and the
            group keeps that error (its barrier is still in flight: destroy the group).
            None: the group's timeout, past which the watchdog ends the job.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi"); dist.barrier(timeout=30)
        >>> dist.destroy_process_group()
    """
    g = _member(group, "barrier")
    if g is None:
        return None
    # torch 2.15 reads device_ids only when it is a list (a tuple too is ignored), and then
    # its first item: [] is its IndexError; numpy ints are indices there too (not bools)
    if isinstance(device_ids, list):
        if not all(isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_))
                   for d in device_ids):
            raise TypeError(f"device_ids must be a list of device indices, got {device_ids!r}")
        if not device_ids:
            raise _EmptyListError("list index out of range: barrier(device_ids=[]) reads its "
                                  "first item; pass one device index (device_ids=[0]) or None")
        if device_ids[0] < 0:
            raise AcceleratorError(f"Device index must not be negative, got {device_ids[0]} "
                                   "in barrier(device_ids=...)")
    limit = None if timeout is None else _seconds(timeout, g.timeout)
    g._raise_kept()
    g.drain()
    if _group_mod.DETAIL:   # torch's ProcessGroupWrapper checks barriers too
        g.fingerprint(None, g.collective_desc("barrier"))
    seq = g.next_seq()
    comm = g.control()
    if comm is not None:
        if limit is None:
            g._inline("barrier", seq, comm.Barrier)
        else:
            from ._work import wait_until
            req = comm.Ibarrier()
            ms = int(limit * 1000)

            def late() -> DistTimeoutError:
                return DistTimeoutError(
                    f"[Rank {g.global_rank}]: barrier (sequence number {seq}) on group "
                    f"{g._label!r} timed out after {ms} ms: a rank of the group did not reach "
                    "it (monitored_barrier names the missing ranks). The group keeps this "
                    "error: destroy it", rank=g.global_rank, op="barrier", seq=seq)

            try:
                wait_until(req.Test, limit, late)
            except DistTimeoutError as err:
                g._keep(err)   # the barrier is still in flight on the group's communicator
                raise
    else:   # NCCL only (env://): a one-element all_reduce, then wait for it
        from .._array import zeros
        if isinstance(device_ids, list):
            index = int(device_ids[0])
        else:
            index = g._engines and next(iter(g._engines))[1] or 0
        one = zeros((1,), dtype="float32", device=f"cuda:{index}")
        w = all_reduce(one, group=g, async_op=True)
        assert w is not None
        if limit is not None:
            w.wait(timeout=limit)
        from .._stream import current_stream
        w.wait()
        current_stream(f"cuda:{index}").synchronize()
    return Work.completed() if async_op else None


#: seconds a rank other than 0 waits in :func:`monitored_barrier`, past its timeout, for rank 0
#: to release it (rank 0 names the late ranks first; torch's gloo waits the timeout only)
MONITORED_RELEASE_GRACE = 5.0


def monitored_barrier(group: GroupArg = None, timeout: TimeoutArg = None,
                      wait_all_ranks: bool = False) -> None:
    """A barrier that names the ranks that did not arrive within ``timeout`` (rank 0 raises
    :class:`DistTimeoutError`; host-side, needs MPI). Without ``timeout``, the default
    timeout (``default_pg_timeout``, or ``ACCELRT_DISTRIBUTED_TIMEOUT``), not the group's,
    as torch 2.15's; ``ProcessGroup.monitored_barrier()`` waits the group's own.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.init_process_group("mpi"); dist.monitored_barrier(timeout=5)
        >>> dist.destroy_process_group()
    """
    g = _member(group, "monitored_barrier")
    if g is None:
        return
    g._raise_kept()
    comm = g.control()
    if comm is None:
        raise DistError("monitored_barrier needs MPI (launch through mpiexec)",
                        rank=g.global_rank)
    limit = _seconds(timeout, DEFAULT_TIMEOUT)
    all_ranks = _bool_arg("monitored_barrier", wait_all_ranks, "wait_all_ranks")
    g.drain()
    seq = g.next_seq()
    from ._mpi import mpi
    from ._work import wait_until
    mpi()    # raises a clear error without mpi4py
    tag = 0x7ACC
    token = np.zeros(1, np.int64)
    ms = int(limit * 1000)
    if g.rank() == 0:
        bufs = {r: np.zeros(1, np.int64) for r in range(1, g.size())}
        reqs = {r: comm.Irecv(bufs[r], r, tag) for r in bufs}

        def arrived() -> bool:
            for r in list(reqs):
                if reqs[r].Test():
                    del reqs[r]
            return not reqs

        def missing() -> DistTimeoutError:
            names = [g.global_ranks[r] for r in sorted(reqs)]
            if all_ranks:
                msg = (f"[Rank 0]: Ranks {', '.join(map(str, names))} failed to pass "
                       f"monitoredBarrier in {ms} ms")
            else:
                msg = f"[Rank 0]: Rank {names[0]} failed to pass monitoredBarrier in {ms} ms"
            return DistTimeoutError(msg, rank=g.global_rank, op="monitored_barrier", seq=seq)

        try:
            wait_until(arrived, limit, missing)
        except BaseException:
            _cancel(list(reqs.values()))   # a late arrival must not land in a freed buffer
            raise
        for r in range(1, g.size()):
            comm.Send(token, r, tag + 1)
        return
    comm.Send(token, 0, tag)
    req = comm.Irecv(token, 0, tag + 1)
    # torch's gloo words (user code matches "successfully reached monitoredBarrier"), then
    # what happened here
    grace = MONITORED_RELEASE_GRACE
    try:
        wait_until(req.Test, limit + grace, lambda: DistTimeoutError(
        f"Rank {g.global_rank} successfully reached monitoredBarrier, but received errors "
        "while waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.\n"
        f" Original exception: \n[Rank {g.global_rank}]: rank 0 did not release the monitored "
        f"barrier in {ms} ms (and {ms + int(grace * 1000)} ms passed)",
        rank=g.global_rank, op="monitored_barrier", seq=seq))
    except BaseException:
        _cancel([req])
        raise


def _cancel(reqs: list[Any]) -> None:
    """Cancel MPI receives a timed-out :func:`monitored_barrier` leaves posted (and wait for
    each to end): a caller that catches the timeout goes on, and a rank arriving late would
    otherwise deliver into a buffer already freed; its message stays unmatched instead."""
    for req in reqs:
        try:
            req.Cancel()
            req.Wait()
        except Exception:  # noqa: BLE001, S110 - cleanup under an error being raised
            pass
