"""Planners: where a copy runs, in which stream order, staged or direct, with what kept alive.

Ordering follows PyTorch's cross-device ``copy_``. Between two devices of one backend a copy runs
on the *source* device's current stream after a two-way barrier: the copy waits for the work
queued on the destination's stream (nobody still uses the destination memory) and the
destination's stream waits for the copy (later work there sees the data). Copies between
arrays and numpy memory are ordered on the array's current stream and wait for completion
unless ``non_blocking``; :func:`plan_runs` (``accelrt.comm``) copies that touch plain host memory
or cross backends are synchronous with respect to the host. Between host memory and device
memory the host cannot read, copies go through pinned blocks of the backend's host pool
(:class:`~accelrt._transfer.Stage`), with the direct copy as the fallback.

Example::

    >>> import numpy as np
    >>> import accelrt as acc
    >>> from accelrt._transfer import execute, plan_upload
    >>> a = acc.empty(2, dtype="int64", device="cpu:0")
    >>> plan = plan_upload(a, np.array([5, 6]), non_blocking=False, private=True)
    >>> [type(s).__name__ for s in plan.steps]
    ['Upload']
    >>> execute(plan); a.tolist()
    [5, 6]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, NamedTuple

import numpy as np

from .. import _pinned
from .. import _sync_debug as _sd
from .._device import _lazy_init
from .._errors import DeviceError
from .._stream import Stream, _current
from ._broadcast import Broadcast, Runs
from ._lifetime import held
from ._plan import (
    Barrier,
    Copy,
    CopyKind,
    FreeHost,
    Hold,
    HostCopy,
    Place,
    Plan,
    RecordHost,
    Stage,
    Step,
    Sync,
    Upload,
)

if TYPE_CHECKING:
    from .._array import Array
    from ..memory._host import HostCachingAllocator

__all__ = ["Staging", "barrier", "broadcast_on_device", "plan_array_copy", "plan_download",
           "plan_landing", "plan_runs", "plan_staged_collective", "plan_staged_p2p", "plan_upload",
           "stream_of"]

#: Above this many runs, a strided copy between host-readable places is one numpy copy (in
#: stream order) instead of one backend memcpy per run.
_INLINE_RUNS = 16

_Steps = tuple[Step, ...]


def stream_of(place: Place, override: Stream | None = None) -> Stream:
    """The stream work on ``place`` is ordered on: ``override`` when it belongs to that
    device, else the calling thread's current stream of the device."""
    b = place.backend
    assert b is not None
    if override is not None and override._b is b and override._index == place.index:
        return override
    return _current(b, place.index)


def _after(after: Stream, waiter: Stream) -> _Steps:
    """The barrier making ``waiter`` wait for ``after`` (none for the same stream)."""
    return () if after == waiter else (Barrier(after, waiter),)


def barrier(after: Stream, waiter: Stream) -> None:
    """Make future work on ``waiter`` wait for the work queued so far on ``after`` now (same
    backend; a no-op when they are the same stream)."""
    if after == waiter:
        return
    _lazy_init(after._b, after._index)
    _lazy_init(waiter._b, waiter._index)
    from ._execute import run_steps
    run_steps((Barrier(after, waiter),))


# ---------------------------------------------------------------------- arrays

def plan_upload(dst: Array, host: np.ndarray, non_blocking: bool, private: bool) -> Plan:
    """Copy the C-contiguous ``host`` (same dtype and size) into the array ``dst`` on its
    current stream (the caller checked the size and initialised the device).

    A pinned ``host`` (a block of the backend's pinned pool) is copied directly and, when
    ``non_blocking``, its block is marked used by the stream; otherwise memory the host cannot
    read is filled through a pinned staging block; the direct copy (the fallback) reads
    ``host`` at call time (``snapshot``) unless ``private`` says nobody else can write it, or
    a graph is being captured (the captured copy reads ``host`` at every replay).

    Raises:
        DeviceError: the stream is capturing a graph and ``host`` is not pinned (PyTorch's
            refusal: the graph would read pageable memory nobody keeps at every replay).
    """
    b, index, mem = dst._b, dst._index, dst._mem
    stream = _current(b, index)
    kind: CopyKind = "h2h" if mem.host else "h2d"
    n = mem.nbytes
    pool = _pinned.pinned_pool_of(b, host)
    capturing = b.stream_is_capturing(index, stream._handle)
    if capturing and pool is None:
        raise DeviceError(
            "Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the "
            "CPU tensor is pinned. Please use accelrt.pin_memory(array) or allocate the array "
            f"with pin_memory=True ({b.name}: stream {int(stream._handle)} of {b.name}:{index} "
            "is capturing a graph, whose copy would read the host memory at every replay)")
    if pool is not None and not capturing:
        ptr = host.ctypes.data      # read where a step needs it (``ctypes`` costs ~20 calls)
        copy = Copy(stream, kind, mem.ptr, ptr, n)
        if not non_blocking:
            return Plan((copy, Sync(stream, report=False)), (host,))
        return Plan((copy, RecordHost(pool, ptr, stream), Hold(stream, held(dst))), (host,))
    snapshot = non_blocking and not private and not capturing
    direct = Upload(stream, kind, mem.ptr, host, snapshot, non_blocking, (dst,))
    if dst._host_ok():
        return Plan((direct,))
    return Plan((Stage(stream, "h2d", mem.ptr, host.ctypes.data, n, non_blocking, (direct,)),),
                (host,))


def plan_download(src: Array, out: np.ndarray) -> Plan:
    """Copy the array ``src`` into the C-contiguous host array ``out`` and wait for it
    (through a pinned staging block when the host cannot read ``src``'s memory)."""
    b, index, mem = src._b, src._index, src._mem
    stream = _current(b, index)
    direct: _Steps = (Copy(stream, "h2h" if mem.host else "d2h", out.ctypes.data, mem.ptr,
                           mem.nbytes), Sync(stream, report=False))
    if src._host_ok():
        return Plan(direct, (out,))
    return Plan((Stage(stream, "d2h", out.ctypes.data, mem.ptr, mem.nbytes, False, direct),),
                (out,))


def plan_array_copy(dst: Array, src: Array, non_blocking: bool,
                    broadcast: Broadcast | None = None) -> Plan:
    """Copy the same-size array ``src`` into ``dst`` (one backend; devices initialised here),
    or, with ``broadcast`` (:func:`~accelrt._transfer.broadcast_runs`), a smaller ``src`` that
    broadcasts to ``dst``'s shape.

    On one device: a copy on the current stream. Across devices: borrowed host memory is
    uploaded on the destination's stream after the source's; device memory is peer-copied on
    the source's stream between the two barriers of the module docstring. A broadcast copies
    its scatter runs where the whole copy goes, then its fill runs inside ``dst`` on the
    destination's stream (across devices after the second barrier, and then held or waited
    for on that stream too)."""
    b, index, sindex = dst._b, dst._index, src._index
    dmem, smem = dst._mem, src._mem
    n = dmem.nbytes
    _lazy_init(b, index)
    _lazy_init(b, sindex)
    dst_stream = _current(b, index)
    keep = held(src, dst)
    fill: _Steps = ()
    scatter: Sequence[Runs] = ()
    inline = False      # the scatter runs are between memory the host reads
    if broadcast is not None:
        inline = dst._host_ok()
        fill = _run_steps(dst_stream, "h2h" if dmem.host else "d2d", dmem.ptr, dmem.ptr,
                          broadcast.fill, inline)
        scatter, inline = broadcast.scatter, inline and src._host_ok()
    if sindex == index:
        kind: CopyKind = ("h2" if smem.host else "d2") + ("h" if dmem.host else "d")  # type: ignore[assignment]
        if _sd.active and kind != "d2d" and not non_blocking:
            _sd.check(b.name)
        steps: _Steps = (Copy(dst_stream, kind, dmem.ptr, smem.ptr, n),) if broadcast is None \
            else _run_steps(dst_stream, kind, dmem.ptr, smem.ptr, scatter, inline) + fill
        if kind == "d2d" or non_blocking:   # nothing to hold: no step
            return Plan(steps + (Hold(dst_stream, keep),) if keep else steps)
        return Plan(steps + (Hold(dst_stream, keep, False),))
    src_stream = _current(b, sindex)
    if _sd.active and not non_blocking and (smem.host or dmem.host):
        _sd.check(b.name)
    if smem.host:   # borrowed host memory: an upload to the destination device
        up: CopyKind = "h2h" if dmem.host else "h2d"
        steps = (Copy(dst_stream, up, dmem.ptr, smem.ptr, n),) if broadcast is None else \
            _run_steps(dst_stream, up, dmem.ptr, smem.ptr, scatter, inline) + fill
        return Plan((Barrier(src_stream, dst_stream), *steps,
                     Hold(dst_stream, keep, non_blocking)))
    copy: _Steps
    if dmem.host:
        copy = ((Copy(src_stream, "d2h", dmem.ptr, smem.ptr, n),) if broadcast is None else
                _run_steps(src_stream, "d2h", dmem.ptr, smem.ptr, scatter, inline)) + \
            (Hold(src_stream, keep, non_blocking),)
    else:
        copy = (Copy(src_stream, "peer", dmem.ptr, smem.ptr, n, dst_device=index),) \
            if broadcast is None else \
            _run_steps(src_stream, "peer", dmem.ptr, smem.ptr, scatter, inline, index)
        if keep:
            copy += (Hold(src_stream, keep),)
    steps = (Barrier(dst_stream, src_stream), *copy, Barrier(src_stream, dst_stream))
    if fill:
        kept = held(dst)
        steps += (*fill, Hold(dst_stream, kept, non_blocking or not dmem.host)) \
            if kept or dmem.host else fill
    return Plan(steps)


#: A broadcast copy that would take more backend calls than this is better expanded once on
#: the host (a column broadcast, ``(n, 1)`` into ``(n, m)``, takes about ``n * (1 +
#: log2(m))`` calls where the host cannot read the memory: backends have no 2-D copies).
_MAX_BROADCAST_CALLS = 64


def broadcast_on_device(dst: Array, src: Array, broadcast: Broadcast) -> bool:
    """Whether :func:`plan_array_copy` should copy ``broadcast`` by runs on the device (or
    devices), rather than the caller expand the source once on the host and upload it: the
    runs take at most ``_MAX_BROADCAST_CALLS`` backend calls (a numpy copy in stream order
    counts one), or a graph is being captured (a host round trip cannot be captured)."""
    inline = dst._host_ok()
    calls = _calls(broadcast.scatter, inline and src._host_ok()) + _calls(broadcast.fill, inline)
    if calls <= _MAX_BROADCAST_CALLS:
        return True
    return any(a._b.stream_is_capturing(a._index, _current(a._b, a._index)._handle)
               for a in (dst, src))


def _calls(runs: Sequence[Runs], inline: bool) -> int:
    """The backend calls of :func:`_run_steps`' steps for ``runs``."""
    return sum(1 if _in_numpy(inline, r[3]) else r[3] for r in runs)


def _in_numpy(inline: bool, nruns: int) -> bool:
    """Whether ``nruns`` runs between memory the host reads (``inline``) are one numpy copy in
    stream order rather than a backend call each (see ``_INLINE_RUNS``)."""
    return inline and nruns > _INLINE_RUNS


def _run_steps(stream: Stream, kind: CopyKind, dst: int, src: int, runs: Sequence[Runs],
               inline: bool, dst_device: int = -1) -> _Steps:
    """One copy step on ``stream`` per entry of ``runs`` (offsets from ``dst`` and ``src``):
    a backend copy, or, for many runs between memory the host can read (``inline``), one
    numpy copy in stream order (as :func:`plan_runs` does)."""
    out: list[Step] = []
    for doff, soff, run, nruns, dpitch, spitch in runs:
        d, s = dst + doff, src + soff
        if _in_numpy(inline, nruns):
            out.append(HostCopy(d, s, run, nruns, dpitch, spitch, stream=stream))
        else:
            out.append(Copy(stream, kind, d, s, run, nruns, dpitch, spitch, dst_device))
    return tuple(out)


# ---------------------------------------------------------------------- byte runs (comm)

def _contiguous(run: int, count: int, pitch: int) -> bool:
    return count == 1 or pitch == run


def plan_runs(dst: Place, dst_ptr: int, src: Place, src_ptr: int, run: int, count: int = 1,
              dst_pitch: int = 0, src_pitch: int = 0, *, stream: Stream | None = None) -> Plan:
    """Copy ``count`` runs of ``run`` bytes; run ``k`` starts at ``ptr + k * pitch`` on each
    side. One ordering barrier covers all the runs (a strided region in one plan).

    Args:
        dst, src: places of the two buffers.
        dst_ptr, src_ptr: addresses.
        run, count, dst_pitch, src_pitch: the runs (``run * count`` bytes in all).
        stream: stands in for the current stream of its device (``scatter``'s ``streams``).
    """
    if run <= 0 or count <= 0:
        return Plan(())
    db, sb = dst.backend, src.backend
    if db is None and sb is None:
        return Plan((HostCopy(dst_ptr, src_ptr, run, count, dst_pitch, src_pitch),))
    for p in (dst, src):
        if p.backend is not None:
            _lazy_init(p.backend, p.index)
    r = (run, count, dst_pitch, src_pitch)
    if count > _INLINE_RUNS and dst.host_readable() and src.host_readable():
        return Plan(_strided_host(dst, dst_ptr, src, src_ptr, r, stream))
    if sb is not None and db is sb:
        dst_stream = stream_of(dst, stream)
        if src.index == dst.index:
            # a stream given for this device also waits for the device's current stream, where
            # the source's pending work is
            return Plan((*_after(_current(sb, src.index), dst_stream),
                         Copy(dst_stream, "d2d", dst_ptr, src_ptr, *r)))
        copy_stream = stream_of(src, stream)
        if sb.capabilities(src.index).peer_copies:
            return Plan((*_after(dst_stream, copy_stream),
                         Copy(copy_stream, "peer", dst_ptr, src_ptr, *r, dst_device=dst.index),
                         *_after(copy_stream, dst_stream)))
        return _bounce((), dst, dst_ptr, src, src_ptr, r, stream)   # no peer copies
    # host <-> device, or across two backends: synchronous with respect to the host
    if db is not None and sb is not None:
        first: _Steps = (Sync(stream_of(dst, stream)),)   # nothing may still use the destination
        if dst.host_readable():
            return Plan(first + _via_host(src, "d2h", dst_ptr, src_ptr, r, stream)[0])
        if src.host_readable():
            steps, bufs = _via_host(dst, "h2d", dst_ptr, src_ptr, r, stream)
            return Plan((*first, Sync(stream_of(src, stream)), *steps), bufs)
        return _bounce(first, dst, dst_ptr, src, src_ptr, r, stream)
    if db is None:
        return Plan(*_via_host(src, "d2h", dst_ptr, src_ptr, r, stream))
    return Plan(*_via_host(dst, "h2d", dst_ptr, src_ptr, r, stream))


_Runs = tuple[int, int, int, int]   # run, count, dst_pitch, src_pitch


def _strided_host(dst: Place, dst_ptr: int, src: Place, src_ptr: int, r: _Runs,
                  stream: Stream | None) -> _Steps:
    """Many runs between host-readable places: one numpy copy, in stream order on one
    backend, else after synchronizing both sides."""
    db, sb = dst.backend, src.backend
    if sb is not None and db is sb:
        dst_stream = stream_of(dst, stream)
        same = src.index == dst.index
        copy_stream = dst_stream if same else stream_of(src, stream)
        first = _after(_current(sb, src.index), dst_stream) if same else ()
        return (*first, *_after(dst_stream, copy_stream),
                HostCopy(dst_ptr, src_ptr, *r, stream=copy_stream),
                *_after(copy_stream, dst_stream))
    syncs = tuple(Sync(stream_of(p, stream)) for p in (dst, src) if p.backend is not None)
    return (*syncs, HostCopy(dst_ptr, src_ptr, *r))


def _via_host(dev: Place, kind: Literal["h2d", "d2h"], dst_ptr: int, src_ptr: int, r: _Runs,
              stream: Stream | None) -> tuple[_Steps, tuple[object, ...]]:
    """Runs between host-readable memory and memory of a backend (``dev``), complete when the
    steps have run: through pinned blocks where the host cannot read ``dev``'s memory."""
    run, count, dst_pitch, src_pitch = r
    up = kind == "h2d"
    s = stream_of(dev, stream)
    direct: _Steps = (Copy(s, kind, dst_ptr, src_ptr, *r), Sync(s))
    if dev.host_readable():
        return direct, ()
    total = run * count
    if not _contiguous(run, count, dst_pitch if up else src_pitch):
        # strided device memory: one staged copy per run, each falling back on its own;
        # uploads are enqueued (the pool reuses a block once its copy has run), then one sync
        wait: _Steps = () if up else (Sync(s),)
        per = tuple(Stage(s, kind, dst_ptr + k * dst_pitch, src_ptr + k * src_pitch, run, up,
                          (Copy(s, kind, dst_ptr + k * dst_pitch, src_ptr + k * src_pitch,
                                run), *wait))
                    for k in range(count))
        return ((*per, Sync(s)) if up else per), ()
    if _contiguous(run, count, src_pitch if up else dst_pitch):
        return (Stage(s, kind, dst_ptr, src_ptr, total, False, direct),), ()
    tmp = np.empty(total, dtype=np.uint8)      # one staged copy of the packed runs
    tp = tmp.ctypes.data
    if up:
        pack = HostCopy(tp, src_ptr, run, count, run, src_pitch)
        return (pack, Stage(s, kind, dst_ptr, tp, total, False, direct)), (tmp,)
    unpack = HostCopy(dst_ptr, tp, run, count, dst_pitch, run)
    return (Stage(s, kind, tp, src_ptr, total, False, direct, (unpack,)),), (tmp,)


def _bounce(first: _Steps, dst: Place, dst_ptr: int, src: Place, src_ptr: int, r: _Runs,
            stream: Stream | None) -> Plan:
    """Device to device through a host buffer: download, then upload."""
    run, count, dst_pitch, src_pitch = r
    tmp = np.empty(run * count, dtype=np.uint8)
    tp = tmp.ctypes.data
    down, b1 = _via_host(src, "d2h", tp, src_ptr, (run, count, run, src_pitch), stream)
    up, b2 = _via_host(dst, "h2d", dst_ptr, tp, (run, count, dst_pitch, run), stream)
    return Plan((*first, Sync(stream_of(dst, stream)), *down, *up), (tmp, *b1, *b2))


# ---------------------------------------------------------------------- host engines (distributed)

class Staging(NamedTuple):
    """An engine call that reads and writes host memory standing in for device memory it
    cannot read (:mod:`accelrt.distributed`'s MPI on CUDA or OpenCL buffers): run the steps
    of ``before`` (:func:`~accelrt._transfer.run_steps`), call the engine on the addresses of
    ``host``, run ``after``, and run ``release`` in any case (``finally``), last. Three step
    sequences, not three :class:`Plan` objects: a staged point-to-point call plans twice
    (post and landing), and each object is measurable there; ``buffers`` is what a plan's
    ``buffers`` would be.

    Attributes:
        host: ``id(array)`` -> the host address the engine uses in the array's place (0 for
            an array of no bytes); one block per array, however often it is passed.
        before: the downloads into the blocks, and what they wait for.
        after: the uploads from the blocks.
        release: :class:`FreeHost` of every pinned block the planner took.
        buffers: plain host memory standing in where the backend has no pinned pool (alive
            while the staging is).
    """

    host: dict[int, int]
    before: tuple[Step, ...]
    after: tuple[Step, ...]
    release: tuple[Step, ...]
    buffers: tuple[np.ndarray, ...] = ()


def plan_staged_collective(comm: Stream, caller: Stream, pool: HostCachingAllocator | None,
                           arrays: Sequence[Array], ins: Sequence[Array],
                           outs: Sequence[Array]) -> Staging:
    """Stage a collective of a host engine on the comm stream ``comm`` of device arrays.

    Every distinct array of ``arrays`` (by identity) gets a block of ``pool`` (taken now, in
    order; without a pool, a numpy buffer). ``before``: ``comm`` waits for the caller's
    stream, the distinct ``ins`` are downloaded into their blocks on ``comm``, and the host
    waits for ``comm`` (the engine runs on the host). ``after``: the distinct ``outs`` are
    uploaded from their blocks on ``comm``. ``release`` frees the blocks, reused once ``comm``
    has run the uploads. If a block cannot be had, those taken are released and the error
    raised.

    Example::

        >>> import accelrt as acc
        >>> from accelrt import backends
        >>> from accelrt._transfer import pinned_pool, plan_staged_collective, run_steps
        >>> a = acc.full((2,), 3.0, device="cpu:0")
        >>> comm, cur = acc.Stream("cpu:0"), acc.current_stream("cpu:0")
        >>> pool = pinned_pool(backends.get_backend("cpu"))
        >>> st = plan_staged_collective(comm, cur, pool, [a, a], [a], [a])
        >>> [type(s).__name__ for s in st.before], len(st.host)
        (['Barrier', 'Copy', 'Sync'], 1)
        >>> run_steps(st.before); run_steps(st.after); run_steps(st.release)
    """
    host: dict[int, int] = {}
    owned: list[Step] = []
    bufs: list[np.ndarray] = []
    try:
        for a in arrays:
            if id(a) in host:
                continue
            nbytes = a.nbytes
            if nbytes == 0:
                ptr = 0
            elif pool is not None:
                ptr = pool.malloc(nbytes)
                owned.append(FreeHost(pool, ptr, comm))
            else:
                h = np.empty(nbytes, np.uint8)
                bufs.append(h)
                ptr = h.ctypes.data
            host[id(a)] = ptr
    except BaseException:
        _release(owned)
        raise
    keep = tuple(bufs)
    return Staging(host, (*_after(caller, comm), *_block_copies(comm, "d2h", host, ins),
                          Sync(comm)),
                   _block_copies(comm, "h2d", host, outs), tuple(owned), keep)


def plan_staged_p2p(pool: HostCachingAllocator | None, array: Array, send: bool,
                    stream: Stream, wait: Stream | None = None) -> Staging:
    """Stage a point-to-point ``array`` of a host engine through one host block of ``pool``
    (taken now; without a pool or bytes, a numpy buffer of at least one byte, in ``buffers``).

    A send (``send``) downloads the array on ``stream`` (after the host waits for ``wait``, a
    busy comm stream) and waits for it in ``before``; its ``release`` frees the block at once
    (the engine has sent it). A receive has nothing ``before``; once the engine has received,
    :func:`plan_landing` plans the upload.

    Example::

        >>> import accelrt as acc
        >>> from accelrt import backends
        >>> from accelrt._transfer import pinned_pool, plan_landing, plan_staged_p2p, run_steps
        >>> a = acc.full((2,), 1.5, device="cpu:0")
        >>> cur = acc.current_stream("cpu:0")
        >>> st = plan_staged_p2p(pinned_pool(backends.get_backend("cpu")), a, True, cur)
        >>> [type(s).__name__ for s in st.before]
        ['Copy', 'Sync']
        >>> run_steps(st.before); run_steps(st.release)
        >>> [type(s).__name__ for s in plan_landing(st, a, cur).after]
        ['Copy']
    """
    nbytes = array.nbytes
    owned: tuple[Step, ...] = ()
    bufs: tuple[np.ndarray, ...] = ()
    if pool is not None and nbytes:
        ptr = pool.malloc(nbytes)
        owned = (FreeHost(pool, ptr),)
    else:
        h = np.empty(max(nbytes, 1), np.uint8)
        bufs, ptr = (h,), h.ctypes.data
    before: tuple[Step, ...] = ()
    if send and nbytes:
        before = (Copy(stream, "d2h", ptr, array.data_ptr(), nbytes), Sync(stream))
        if wait is not None:
            before = (Sync(wait), *before)
    return Staging({id(array): ptr if nbytes else 0}, before, (), owned, bufs)


def plan_landing(staged: Staging, array: Array, stream: Stream) -> Staging:
    """The end of a staged receive of ``array`` (:func:`plan_staged_p2p`) on ``stream`` (the
    current stream when the receive completes): ``after`` uploads the block into the array,
    ``release`` frees the block once ``stream`` has run the upload."""
    nbytes = array.nbytes
    up: tuple[Step, ...] = ()
    if nbytes:
        up = (Copy(stream, "h2d", array.data_ptr(), staged.host[id(array)], nbytes),)
    free: tuple[Step, ...] = ()
    for s in staged.release:   # the one block, if pinned
        assert isinstance(s, FreeHost)
        free = (FreeHost(s.pool, s.ptr, stream),)
    return Staging(staged.host, (), up, free, staged.buffers)


def _block_copies(comm: Stream, kind: Literal["h2d", "d2h"], host: dict[int, int],
                  arrays: Sequence[Array]) -> _Steps:
    """One copy on ``comm`` between each distinct array of ``arrays`` with bytes (by identity)
    and its host block: into the block (``"d2h"``) or out of it (``"h2d"``), in order."""
    seen: set[int] = set()
    steps: list[Step] = []
    for a in arrays:
        key, nbytes = id(a), a.nbytes
        if key in seen or not nbytes:
            continue
        seen.add(key)
        ptr, block = a.data_ptr(), host[key]
        steps.append(Copy(comm, kind, block, ptr, nbytes) if kind == "d2h"
                     else Copy(comm, kind, ptr, block, nbytes))
    return tuple(steps)


def _release(steps: Sequence[Step]) -> None:
    from ._execute import run_steps
    run_steps(steps)
