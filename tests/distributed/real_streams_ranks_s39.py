"""Stream and event choreography of real distributed code, re-written short (each credits its
source), run on every rank as ``OK``/``FAIL`` cases (tests/distributed/rank_cases.py) under
``mpiexec -n N python -m accelrt.distributed.run`` with asynchronous cpu streams, two simulated
devices per rank (rank r uses device r % 2): PyTorch FSDP2's all-gather / copy-in /
reduce-scatter streams and events (``torch/distributed/fsdp/_fully_shard/``), DeepSpeed
ZeRO-3's prefetch overlap, Megatron-LM's overlapped grad reduce. ``torch.cuda`` becomes
``accelrt.cpu`` (as ``cuda``), ``torch.distributed`` ``accelrt.distributed``, tensors arrays.

Ordering is checked with gates (a host function that holds a stream until opened), never
sleeps: a stream held back makes every consumer that is correctly ordered after it see the
held values only once the gate opens.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import deque

import numpy as np

import accelrt as acc
import accelrt.distributed as dist
from accelrt import cpu as cuda       # was: import torch.cuda as cuda

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from helpers.gates import open_when_blocked  # noqa: E402
from rank_cases import Cases  # noqa: E402

dist.init_process_group("mpi")
rank, n = dist.get_rank(), dist.get_world_size()
case = Cases(rank, after=dist.barrier)
cuda.set_device(rank % cuda.device_count())
DEV = acc.device("cpu", cuda.current_device())
B = acc.backends.get_backend("cpu")


class Gate:
    """Holds ``stream`` (a host function waiting on a threading.Event) until :meth:`open`."""

    def __init__(self, stream) -> None:
        self.ev = threading.Event()
        B.launch_host_func(stream.device_index, lambda: self.ev.wait(60), stream.stream_id)

    def open(self) -> None:
        self.ev.set()


def arr(values, dtype="float32"):
    """device memory from the caching allocator (acc.asarray would borrow the numpy memory on
    the cpu backend, and a blocking copy from borrowed host memory waits as torch's
    host-to-device copy does)"""
    host = np.asarray(values, dtype=dtype)
    return acc.empty(host.shape, dtype=dtype, device=DEV).copy_(host)


# ------------------------------------------------------------------------------------------
# PyTorch FSDP2, torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py FSDPCommContext
# (lazy_init: the streams), _fsdp_collectives.py foreach_all_gather /
# foreach_all_gather_copy_out / foreach_reduce, and FSDPParamGroup.unshard/wait_for_unshard/
# post_backward's event handling; the copy-in and the split/copy-out are array copies
class FSDPCommContext:
    def lazy_init(self, device):
        self.device_handle = getattr(acc, device.type)     # _get_device_handle
        high_priority = -1
        self.all_gather_copy_in_stream = self.device_handle.Stream(priority=high_priority)
        self.all_gather_stream = self.device_handle.Stream(priority=high_priority)
        self.reduce_scatter_stream = self.device_handle.Stream(priority=high_priority)
        self.all_reduce_stream = self.device_handle.Stream()
        self._last_post_reduce_events: dict = {}

    def get_all_gather_streams(self, async_op, training_state_is_forward=True):
        if not async_op and training_state_is_forward:
            return self.all_gather_copy_in_stream, self.all_gather_stream
        current_stream = self.device_handle.current_stream()
        return current_stream, current_stream

    def wait_all_gather_streams_on_event(self, event):
        if event is None:
            return
        self.all_gather_copy_in_stream.wait_event(event)
        self.all_gather_stream.wait_event(event)


def foreach_all_gather(shard, group, async_op, copy_in_stream, all_gather_stream,
                       device_handle, held=None):
    world_size = group.size()
    with device_handle.stream(copy_in_stream):
        # all_gather_copy_in (one flat parameter here: arrays have no views to copy into)
        all_gather_input = acc.empty(shard.size, device=DEV)
        if held is not None:            # the test holds the copy-in stream
            held.append(Gate(copy_in_stream))
        all_gather_input.copy_(shard)
        all_gather_output = acc.empty(shard.size * world_size, device=DEV)
    all_gather_stream.wait_stream(copy_in_stream)
    with device_handle.stream(all_gather_stream):
        all_gather_work = dist.all_gather_single(
            output_tensor=all_gather_output, input_tensor=all_gather_input, group=group,
            async_op=async_op)
        all_gather_event = all_gather_stream.record_event()
        return all_gather_output, all_gather_event, all_gather_work


def wait_for_unshard(result, device_handle):
    output, event, work = result
    if event is not None:          # sync op
        device_handle.current_stream().wait_event(event)
    if isinstance(work, dist.distributed_c10d.Work):   # async op
        work.wait()
    # the copy-out of the per-rank shards runs on the current stream
    return output


def foreach_reduce(grads, reduce_scatter_group, reduce_scatter_stream, device_handle,
                   comm_ctx, held=None):
    world_size = reduce_scatter_group.size()
    current_stream = device_handle.current_stream()
    reduce_scatter_input = acc.empty(grads.size, device=DEV)
    reduce_scatter_input.copy_(grads)          # foreach_reduce_scatter_copy_in, current stream
    reduce_scatter_stream.wait_stream(current_stream)
    with device_handle.stream(reduce_scatter_stream):
        reduce_output = acc.empty(grads.size // world_size, device=DEV)
        dist.reduce_scatter_single(reduce_output, reduce_scatter_input,
                                   op=dist.ReduceOp.SUM, group=reduce_scatter_group)
        reduce_scatter_event = reduce_scatter_stream.record_event()
        post_reduce_stream = reduce_scatter_stream
    with device_handle.stream(post_reduce_stream):
        # record_grad_output_stream(reduce_output, current_stream): a no-op by default
        reduce_output.record_stream(current_stream)
        post_reduce_event = post_reduce_stream.record_event()
    # FSDPParamGroup.post_backward: the last post-reduce event per stream
    comm_ctx._last_post_reduce_events[post_reduce_stream] = post_reduce_event
    return reduce_scatter_input, reduce_scatter_event, post_reduce_event, reduce_output


@case
def fsdp2_all_gather_streams() -> None:
    ctx = FSDPCommContext()
    ctx.lazy_init(DEV)
    assert ctx.device_handle is cuda
    assert ctx.all_gather_stream.priority == -1 and ctx.all_reduce_stream.priority == 0
    assert ctx.all_gather_stream.device == DEV
    group = dist.group.WORLD
    shard = arr(np.repeat([10.0 * rank, 10.0 * rank + 1], 4))
    want = [float(10 * r + k) for r in range(n) for k in range(2) for _ in range(4)]
    for async_op in (False, True):
        held: list = []
        result = foreach_all_gather(shard, group, async_op,
                                    *ctx.get_all_gather_streams(async_op, True),
                                    ctx.device_handle, held)
        if not async_op:
            # the copy-in stream is held: the all-gather stream, and so the event, wait for it
            assert not result[1].query() and not ctx.all_gather_stream.query()
        out = wait_for_unshard(result, ctx.device_handle)
        # the copy-out on the current stream, ordered after the all-gather by the event
        # (sync) or by Work.wait() (async: current stream == the streams used)
        copy = acc.empty(out.size, device=DEV).copy_(out)
        if held:
            held[0].open()
        assert copy.tolist() == want, (async_op, copy.tolist())
        # the next unshard's all-gather streams wait for this copy-out
        copy_out_event = ctx.device_handle.Event()
        copy_out_event.record()
        ctx.wait_all_gather_streams_on_event(copy_out_event)
        ctx.wait_all_gather_streams_on_event(None)
    # world size 1 path: FSDP stores Event().record() (None in torch) as the all-gather event
    assert ctx.device_handle.Event().record() is None
    cuda.synchronize()


@case
def fsdp2_reduce_scatter_streams() -> None:
    ctx = FSDPCommContext()
    ctx.lazy_init(DEV)
    group = dist.group.WORLD
    grads = acc.empty(4 * n, device=DEV)
    produced = arr(np.arange(4 * n) + rank)
    gate = Gate(cuda.current_stream())     # the backward's last kernel: held
    grads.copy_(produced)
    _, rs_event, post_event, out = foreach_reduce(grads, group, ctx.reduce_scatter_stream,
                                                  ctx.device_handle, ctx)
    # everything downstream of the held current stream is pending
    assert not rs_event.query() and not post_event.query()
    # FSDPState._root_post_backward_final_callback: wait on the last post-reduce events
    for event in ctx._last_post_reduce_events.values():
        ctx.device_handle.current_stream().wait_event(event)
    got = acc.empty(4, device=DEV).copy_(out)    # the optimizer step reads it
    gate.open()
    S = sum(range(n))
    assert got.tolist() == [float(n * (4 * rank + k) + S) for k in range(4)], got.tolist()
    post_event.synchronize()
    assert post_event.query() and rs_event.query()
    # the reduce-scatter stream is a dict key (torch.Stream hashes by (id, device, type))
    assert list(ctx._last_post_reduce_events) == [ctx.reduce_scatter_stream]
    assert ctx._last_post_reduce_events.get(cuda.Stream(stream_id=ctx.reduce_scatter_stream
                                                        .stream_id, device_index=DEV.index,
                                                        device_type=DEV.type)) is post_event


# ------------------------------------------------------------------------------------------
# DeepSpeed ZeRO-3, deepspeed/runtime/zero/partitioned_param_coordinator.py
# PartitionedParameterCoordinator: __all_gather_params launches the all-gathers under
# `with get_accelerator().stream(self.__allgather_stream)` (async handles kept in
# __inflight_param_registry); fetch_sub_module then, per param, in the same stream context,
# drops completed events (query()), applies backpressure (popleft().synchronize() past
# __max_ongoing_fetch_events), waits on the handle and records an Event() on the all-gather
# stream, and finally current_stream().wait_stream(self.__allgather_stream)
@case
def deepspeed_zero3_fetch_sub_module() -> None:
    allgather_stream = cuda.Stream()
    max_ongoing_fetch_events = 1
    ongoing_fetch_events: deque = deque()
    names = ("w1", "w2", "w3")
    params = {name: arr(np.full(3, 100 * i + rank)) for i, name in enumerate(names)}
    inflight, full = {}, {}
    gate = Gate(allgather_stream)           # the fetches are held back
    with cuda.stream(allgather_stream):     # __all_gather_params
        for name, p in params.items():
            full[name] = acc.empty(3 * n, device=DEV)
            inflight[name] = dist.all_gather_into_tensor(full[name], p, async_op=True)
    backpressure_waited = False
    for name in names:                      # fetch_sub_module
        with cuda.stream(allgather_stream):
            while ongoing_fetch_events and ongoing_fetch_events[0].query():
                ongoing_fetch_events.popleft()
            if len(ongoing_fetch_events) > max_ongoing_fetch_events:
                with open_when_blocked(gate):      # opened only once the host waits here
                    ongoing_fetch_events.popleft().synchronize()
                backpressure_waited = True
            inflight.pop(name).wait()
            event = cuda.Event()
            event.record()
            ongoing_fetch_events.append(event)
    assert backpressure_waited
    cuda.current_stream().wait_stream(allgather_stream)
    uses = {name: acc.empty(3 * n, device=DEV).copy_(full[name]) for name in names}
    for i, name in enumerate(names):
        assert uses[name].tolist() == [float(100 * i + r) for r in range(n) for _ in range(3)]
    allgather_stream.synchronize()
    assert all(e.query() for e in ongoing_fetch_events)


# ------------------------------------------------------------------------------------------
# Megatron-LM, megatron/core/distributed/param_and_grad_buffer.py _ParamAndGradBucketGroup:
# start_grad_sync issues the bucket's reduce with async_op=True while the backward goes on
# (overlap_grad_reduce), optionally on a communication stream that waits for the current
# one (self.communication_stream.wait_stream(torch.cuda.current_stream()) then
# `with torch.cuda.stream(...)`); finish_grad_sync calls self.grad_reduce_handle.wait() and,
# with a separate stream, torch.cuda.current_stream().wait_stream(self.communication_stream)
@case
def megatron_overlapped_grad_reduce() -> None:
    communication_stream = cuda.Stream(priority=-1)
    grad_data = arr(np.arange(6) + rank)
    produced = arr(np.arange(6) * (rank + 1))
    other = arr(np.zeros(6))
    gate = Gate(cuda.current_stream())     # the backward that produced the grads: held
    grad_data.copy_(produced)
    communication_stream.wait_stream(cuda.current_stream())
    with cuda.stream(communication_stream):
        handle = dist.all_reduce(grad_data, op=dist.ReduceOp.SUM, async_op=True)
    assert handle is not None and not communication_stream.query()
    # more of the backward, overlapped: work on the (held) current stream
    other.fill_(7.0)
    # finish_grad_sync
    handle.wait()
    cuda.current_stream().wait_stream(communication_stream)
    seen = acc.empty(6, device=DEV).copy_(grad_data)
    gate.open()
    T = sum(range(1, n + 1))
    assert seen.tolist() == [float(k * T) for k in range(6)], seen.tolist()
    assert other.tolist() == [7.0] * 6
    cuda.synchronize()


case.done()
dist.destroy_process_group()
