"""Real code whose runtime use is streams, events, pinned memory, asynchronous copies and
overlap (s39), ported by changing the import and run on the cpu backend with asynchronous
streams (``ACCELRT_CPU_STREAMS=async``: each stream a worker thread, so missing ordering
shows), two devices.

``torch.cuda`` becomes ``accelrt.cpu`` (as ``cuda``), ``torch.accelerator`` ``accelrt``,
``torch.device("cuda", i)`` ``acc.device("cpu", i)``, tensors arrays, CPU tensors numpy arrays
(``pin_memory()`` is ``acc.pin_memory``). Ordering is checked with gates (host functions that
hold a stream until opened; ``tests/helpers/gates.py``), never sleeps. The multi-rank ports
(FSDP2, DeepSpeed ZeRO-3, Megatron-LM) are in
``tests/distributed/test_real_streams_dist_s39.py``. tests/runtime/test_real_code_s38.py and
test_real_code2_s38.py port other parts of DeepSpeed, accelerate, vLLM and others; this file
does not repeat them. torch's answers were read in torch 2.15's sources
(``torch/cuda/__init__.py`` ``StreamContext``, ``torch/cuda/streams.py``,
``c10/cuda/CUDAEvent.h``, ``torch/accelerator/__init__.py``) or observed with torch 2.15.0
on this machine (no GPU: the positional-only ``device`` of ``torch.accelerator``), as each
comment says.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.cpu_script import run_cpu_script

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str) -> list[str]:
    return run_cpu_script(script, ACCELRT_CPU_STREAMS="async", ACCELRT_CPU_DEVICES="2",
                          PYTHONPATH=str(ROOT))


# ------------------------------------------------------------------ diffusers

_DIFFUSERS_SCRIPT = '''
    import numpy as np
    import accelrt as acc
    from tests.helpers.gates import Gate, open_when_blocked

    B = acc.backends.get_backend("cpu")
    def hold(stream):
        """a gate holding ``stream`` back until opened (or until the caller blocks on it)"""
        g = Gate(); B.launch_host_func(stream.device_index, g, stream.stream_id); return g

    class Param:                      # a torch.nn.Parameter: only .data matters here
        def __init__(self, data): self.data = data
        @property
        def device(self): return self.data.device if isinstance(self.data, acc.Array) else "host"

    # diffusers, src/diffusers/hooks/group_offloading.py: ModuleGroup's stream path
    # (_init_cpu_param_dict, _pinned_memory_tensors, _transfer_tensor_to_device,
    # _onload_from_memory, _offload_to_memory) and apply_group_offloading's stream
    class ModuleGroup:
        def __init__(self, params, onload_device, stream, record_stream, low_cpu_mem_usage,
                     non_blocking=False):
            self.params = params
            self.onload_device = onload_device
            self.non_blocking = non_blocking or stream is not None
            self.stream, self.record_stream = stream, record_stream
            self.low_cpu_mem_usage = low_cpu_mem_usage
            self.cpu_param_dict = {p: (p.data if low_cpu_mem_usage else acc.pin_memory(p.data))
                                   for p in params} if stream is not None else {}
            # getattr(torch, torch.accelerator.current_accelerator().type)
            self._torch_accelerator_module = getattr(acc, acc.current_accelerator().type)

        def _pinned_memory_tensors(self):
            return {p: t if acc.is_pinned(t) else acc.pin_memory(t)
                    for p, t in self.cpu_param_dict.items()}

        def _transfer_tensor_to_device(self, tensor, source):
            # tensor.data = source.to(self.onload_device, non_blocking=self.non_blocking)
            tensor.data = acc.empty(source.shape, dtype=source.dtype,
                                    device=self.onload_device).copy_(source, self.non_blocking)
            if self.record_stream:
                tensor.data.record_stream(self._torch_accelerator_module.current_stream())

        def onload_(self):
            if self.stream is not None:
                self.stream.synchronize()        # wait for the previous host->device transfer
            M = self._torch_accelerator_module
            context = M.stream(self.stream)     # nullcontext() without a stream
            with context:
                pinned = self._pinned_memory_tensors()
                for p in self.params:
                    self._transfer_tensor_to_device(p, pinned[p])
                pinned = None

        def offload_(self):
            if not self.record_stream:
                self._torch_accelerator_module.current_stream().synchronize()
            for p in self.params:
                p.data = self.cpu_param_dict[p]

    onload = acc.device("cpu:1")
    acc.set_device_index(1)
    M = getattr(acc, acc.current_accelerator().type)
    assert M is acc.cpu
    stream = M.Stream()                 # apply_group_offloading: torch.cuda.Stream()
    assert stream.device == onload
    weights = [np.full(4096, float(i + 1), dtype=np.float32) for i in range(4)]

    class HeldGroup(ModuleGroup):
        """the test's hold: the transfer stream waits on a gate just before the group's copies
        are queued (inside the stream context, after onload_'s synchronize)"""
        def _pinned_memory_tensors(self):
            self.gate = hold(self.stream)
            return super()._pinned_memory_tensors()

    for low_cpu_mem_usage in (False, True):
        for record_stream in (False, True):
            groups = [HeldGroup([Param(w.copy())], onload, stream, record_stream,
                                low_cpu_mem_usage) for w in weights]
            assert all(acc.is_pinned(g.cpu_param_dict[g.params[0]]) != low_cpu_mem_usage
                       for g in groups)
            outs = [acc.zeros(4096, device=onload) for _ in groups]
            # GroupOffloadingHook.pre_forward with prefetching (the lazy-prefetch order): group
            # 0 onloads itself, each group's leader onloads the next group (whose onload_ starts
            # with stream.synchronize()), the last group synchronizes the stream (should_synchronize);
            # post_forward offloads
            groups[0].onload_()
            assert not stream.query()            # its copies are queued behind the gate
            # low_cpu_mem_usage: the pinned copies were dropped with copies still queued; new
            # pinned memory of that size must not get their blocks (written over at once)
            junk = [acc.pin_memory(np.full(4096, -1.0, dtype=np.float32)) for _ in range(4)]
            for i, g in enumerate(groups):
                with open_when_blocked(g.gate):     # opened only once the host waits on it
                    if i + 1 < len(groups):
                        groups[i + 1].onload_()
                    else:
                        stream.synchronize()
                assert g.params[0].device == onload
                outs[i].copy_(g.params[0].data)   # "forward" on the current (default) stream
                if record_stream:
                    # (the test's wait: with record_stream=True diffusers records the current
                    # stream inside `with stream(self.stream)`, the transfer stream itself, and
                    # offload_ does not synchronize, so nothing orders this default-stream read
                    # before the block's reuse by a later onload on the transfer stream; torch's
                    # allocator, like accelrt's, lets that stream reuse the block at once)
                    M.current_stream().synchronize()
                g.offload_()
                assert g.params[0].device == "host"
            M.synchronize()
            got = [o.numpy() for o in outs]
            assert all((got[i] == i + 1).all() for i in range(4)), [x[:2] for x in got]
            del junk
    print("diffusers ok")'''


def test_diffusers_group_offloading_with_a_transfer_stream() -> None:
    """diffusers' block-level group offloading with ``use_stream=True``: pinned CPU copies
    (made once, or on the fly with ``low_cpu_mem_usage``), non-blocking copies on the transfer
    stream, ``record_stream`` or not, the next group prefetched while the current one is used,
    ``stream.synchronize()`` before each onload; each group's copies are held by a gate that
    only the host's wait opens, and the values the "forward" copies on the default stream are
    the weights (dropped pinned sources are not handed out again before their copies ran)."""
    assert _run(_DIFFUSERS_SCRIPT) == ["diffusers ok"]


# ------------------------------------------------------------------ torch's stream and event forms

_FORMS_SCRIPT = '''
    import threading
    import accelrt as acc
    from accelrt import cpu as cuda           # was: import torch.cuda as cuda
    from tests.helpers.gates import Gate, open_when_blocked

    B = acc.backends.get_backend("cpu")
    s0, s1 = cuda.Stream(0), cuda.Stream(1)

    # torch.cuda.stream(s) nested across devices (torch/cuda/__init__.py StreamContext: the
    # stream's device becomes current, the other device's current stream is kept, both are
    # restored on exit); StreamContext(None) and stream(None) are no-ops returning None
    with cuda.stream(s1):
        assert cuda.current_device() == 1 and cuda.current_stream() == s1
        assert cuda.current_stream(0) == cuda.default_stream(0)
        with cuda.stream(s0):
            assert cuda.current_device() == 0 and cuda.current_stream() == s0
            assert cuda.current_stream(1) == s1
        assert cuda.current_device() == 1 and cuda.current_stream() == s1
    assert cuda.current_device() == 0 and cuda.current_stream() == cuda.default_stream(0)
    assert cuda.current_stream(1) == cuda.default_stream(1)
    for ctx in (cuda.StreamContext(None), cuda.stream(None)):
        with ctx as x:
            assert x is None and cuda.current_stream() == cuda.default_stream()
    # an accelrt.Stream (torch.Stream) in torch.cuda.stream, as diffusers passes one on XPU
    with cuda.stream(acc.Stream("cpu:1")) as x:
        assert cuda.current_device() == 1
    assert cuda.current_device() == 0

    # torch.accelerator.current_stream / synchronize: positional-only device forms
    d1 = acc.device("cpu", 1)
    assert acc.current_stream() == cuda.default_stream(0)
    assert acc.current_stream(1) == acc.current_stream("cpu:1") == acc.current_stream(d1)
    assert acc.current_stream(-1) == acc.current_stream("cpu") == acc.current_stream(None)
    for bad in (lambda: acc.current_stream(device=1), lambda: acc.synchronize(device=1)):
        try:
            bad()
            raise AssertionError("keyword device accepted")
        except TypeError as e:
            assert "positional-only arguments passed as keyword arguments: 'device'" in str(e)
    for form in ((), (0,), ("cpu:1",), (d1,), ("cpu",), (None,)):
        acc.synchronize(*form)
    cuda.synchronize(device=1)      # torch.cuda.synchronize takes it by keyword

    # Event(enable_timing=True).elapsed_time across two streams of one device: an error
    # while the end is pending (torch: "Both events must be completed ..."), a number after
    gate = Gate()
    start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
    start.record(s0)
    B.launch_host_func(0, gate, cuda.Stream(0).stream_id)
    other = cuda.Stream(0)
    other.wait_event(start)                  # Stream.wait_event
    B.launch_host_func(0, gate, other.stream_id)
    end.record(other)
    try:
        start.elapsed_time(end)
        raise AssertionError("elapsed_time of a pending event")
    except RuntimeError as e:
        assert "Both events must be completed before calculating elapsed time" in str(e)
    with open_when_blocked(gate):
        end.synchronize()
    assert start.elapsed_time(end) >= 0.0
    for a, b, cls, msg in (
            (cuda.Event(), cuda.Event(), ValueError, "created with argument 'enable_timing=True'"),
            (cuda.Event(enable_timing=True), end, ValueError, "must be recorded before")):
        try:
            a.elapsed_time(b)
            raise AssertionError(msg)
        except cls as e:
            assert msg in str(e), e

    # Event.wait(stream) on another device's stream orders that stream after the record
    held, seen = Gate(), []
    e0 = cuda.Event()
    B.launch_host_func(0, held, s0.stream_id)
    e0.record(s0)
    e0.wait(s1)
    B.launch_host_func(1, lambda: seen.append(e0.query()), s1.stream_id)
    assert not s1.query()
    held.open()
    s1.synchronize()
    assert seen == [True]
    # an unrecorded event: wait and wait_event are no-ops, as CUDA's
    cuda.Event().wait(s1)
    s1.wait_event(cuda.Event())
    # Event.record(stream) of another device's stream: torch's "Event device 0 does not
    # match recording stream's device 1." (RuntimeError); record_event(event) alike
    for rec in (lambda: e0.record(s1), lambda: s1.record_event(e0)):
        try:
            rec()
            raise AssertionError("recorded across devices")
        except RuntimeError as e:
            assert "Event device 0 does not match recording stream's device 1" in str(e)
    # record() returns None (FSDP2 stores Event().record() as its world-size-1 event);
    # Stream.record_event() returns the event it recorded
    assert cuda.Event().record() is None
    ev = s1.record_event()
    assert isinstance(ev, cuda.Event) and ev.device == d1
    print("forms ok")
'''


def test_stream_and_event_forms_real_code_uses() -> None:
    """The forms of torch.cuda / torch.accelerator stream and event calls that overlapping
    code makes, with torch's answers and errors: ``torch.cuda.stream`` nested across
    devices, ``StreamContext(None)``, ``current_stream``/``synchronize`` device forms,
    ``elapsed_time`` across streams (pending, done, untimed, unrecorded),
    ``Event.wait(stream)`` of another device, ``Stream.wait_event``, ``Event.record`` on
    another device's stream, ``record()``'s and ``record_event()``'s results."""
    assert _run(_FORMS_SCRIPT) == ["forms ok"]
