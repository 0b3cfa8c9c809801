"""The list collectives whose blocks differ in size from rank to rank: ``all_gather`` (as
torch's NCCL, its all_gather_v) and ``reduce_scatter`` (as torch's gloo). Each is one
collective over a packed buffer; :mod:`._collectives` calls them when a list holds arrays of
several sizes.

Example::

    >>> import accelrt as acc, accelrt.distributed as dist
    >>> dist.init_process_group("mpi")
    >>> outs = [acc.empty((3,), device="cpu")]
    >>> dist.all_gather(outs, acc.full((3,), 2.0, device="cpu"))
    >>> outs[0].tolist(); dist.destroy_process_group()
    [2.0, 2.0, 2.0]
"""

from __future__ import annotations

from typing import Any

from .._stream import Stream
from ._argchecks import _check_same, _size_check
from ._collectives import _copy, _op, _pack, _split_out, _temp_like
from ._engine import Engine
from ._group import BufOf, ProcessGroup, Work

__all__ = ["_all_gather_uneven", "_reduce_scatter_uneven"]


def _all_gather_uneven(g: ProcessGroup, outs: list[Any], tensor: Any,
                       async_op: bool) -> Work | None:
    """:func:`all_gather` of blocks of several sizes (torch's NCCL: one broadcast per rank):
    this rank's input at its offset of a packed buffer, every block broadcast from its rank."""
    what, r = "all_gather", g.rank()
    g.check_args(what, [tensor], outs, alias="staged")
    for t in outs:
        _check_same(what, t, tensor)
    _size_check(what, tensor, outs[r].size, tensor.size,
                f"invalid tensor size at index {r}: tensor_list[{r}], this rank's block, must "
                "have the input's size")
    sizes = [t.size for t in outs]
    stage = _temp_like(tensor, sum(sizes))
    _copy(stage, sum(t.nbytes for t in outs[:r]), tensor, 0, tensor.nbytes)

    def call(eng: Engine, buf: BufOf, stream: Stream | None) -> None:
        whole, off = buf(stage), 0
        for root, count in enumerate(sizes):
            eng.broadcast(whole.at(off, count), root, stream)
            off += count

    w = g.run(what, [stage], [stage], [stage], call, True, (tensor.dtype, tuple(sizes)),
              None, [stage], alias="inplace")   # (the fingerprint compares the sizes)
    return _split_out(g, what, w, stage, outs, async_op)


def _reduce_scatter_uneven(g: ProcessGroup, output: Any, inputs: list[Any], op: Any,
                           async_op: bool) -> Work | None:
    """:func:`reduce_scatter` whose blocks differ in size between ranks (torch's gloo takes
    them): one all-reduce of the packed list, then this rank's block into ``output``."""
    what, r = "reduce_scatter", g.rank()
    g.check_args(what, inputs, [output], alias="staged")
    for t in inputs:
        _check_same(what, output, t)
    _size_check(what, output, inputs[r].size, output.size,
                f"output must have the size of input_list[{r}], this rank's block")
    red = _op(op)
    stage = _temp_like(output, sum(t.size for t in inputs))
    _pack(stage, inputs)

    def call(eng: Engine, buf: BufOf, stream: Stream | None) -> None:
        eng.all_reduce(None, buf(stage), red, stream)

    # (the fingerprint compares the list's sizes: the same on every rank)
    w = g.run(what, [stage], [stage], [stage], call, True,
              (red.name, output.dtype, tuple(t.size for t in inputs)), red, [stage],
              alias="inplace")
    assert w is not None
    w.wait()
    _copy(output, 0, stage, sum(t.nbytes for t in inputs[:r]), output.nbytes)
    return Work.completed([output]) if async_op else None
