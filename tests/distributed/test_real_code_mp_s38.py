"""Real code that drives ``torch.multiprocessing`` and shares device memory, ported to
``accelrt.multiprocessing`` by changing the import, on the cpu backend with shared memory
(``ACCELRT_CPU_SHARED_MEMORY=1``) and each start method the code allows.

The code is re-written short from (credited at each scenario):

* pytorch/examples ``mnist_hogwild/main.py`` and ``train.py``: parameters shared by every
  worker, ``mp.set_start_method(..., force=True)``, one ``mp.Process`` per rank, each seeding
  ``manual_seed(seed + rank)``, ``join``;
* PyTorch's "Multiprocessing best practices" (docs/source/notes/multiprocessing.rst): device
  arrays through a queue, the producer kept alive until the consumer is done (an
  ``mp.Event``), ``ipc_collect``;
* ``torch/multiprocessing/spawn.py`` as launchers call it (``spawn(join=False)`` and a
  ``ProcessContext.join(timeout)`` loop, the exceptions' fields, ``start_processes`` with
  ``fork``/``forkserver``, ``SpawnContext``);
* volcengine/verl ``verl/workers/rollout/.../bucketed_weight_transfer.py`` (the
  ``BucketedWeightSender``/``Receiver``: ``reduce_tensor(buffer)`` sent with a plain pickle,
  ``func(*args)`` in the receiver, weights packed into the shared bucket);
* ``torch/utils/data/_utils/pin_memory.py`` (``_pin_memory_loop``: ``_set_thread_name``,
  ``set_device_index`` in the pinning thread, ``pin_memory`` of nested batches) and
  ``torch/utils/data/_utils/worker.py`` (``seed = base_seed + worker_id``, ``manual_seed``,
  ``initial_seed()`` in ``worker_init_fn``).

Scenarios with other processes run in one subprocess per batch with a hard timeout; children
run the ``_c_*`` functions of ``real_code_mp_children_s38.py`` (importable, so ``spawn`` and
``forkserver`` work, and without pytest, which the children need not import). Waits
have timeouts; ordering uses events, queues and pipes, never sleeps.
"""

from __future__ import annotations

import collections
import copy
import os
import pickle
import queue
import signal
import sys
import threading
import warnings
from typing import Any

import numpy as np
import pytest

import accelrt as acc
import accelrt.multiprocessing as mp
from real_code_mp_children_s38 import (  # the children's functions (no pytest to import)
    _c_compute_batch, _c_consumer, _c_double, _c_fail, _c_hogwild_train, _c_loader_worker,
    _c_raise_or_wait, _c_tp_rank, _c_verl_receiver, _c_wait_then_put, _deserialize, _serialize)

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
MODULE = os.path.splitext(os.path.basename(__file__))[0]
T = 30.0          # seconds for any single wait in a scenario
METHODS = ("spawn", "fork", "forkserver")


# ------------------------------------------------------------------ batch runner

_BATCHES: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "hogwild": ({}, tuple(f"hogwild:{m}" for m in METHODS)),
    "practices": ({"ACCELRT_CPU_STREAMS": "async"},
                  tuple(f"best_practices:{m}" for m in METHODS)),
    "launch": ({}, ("spawn_join_loop", "spawn_failures", "start_processes:fork",
                    "start_processes:forkserver", "spawn_logs_termination",
                    "start_processes_parallel")),
    "verl": ({}, ("verl_bucket:spawn", "verl_bucket:forkserver", "sglang_serializer:spawn",
                  "sglang_serializer:fork")),
    "loader": ({"ACCELRT_CPU_DEVICES": "2"}, ("worker_seeding:fork", "worker_seeding:spawn")),
    "pool": ({}, ("pool_imap:fork", "pool_imap:spawn")),
}
_results: dict[str, dict[str, str]] = {}


def _batch_main(names: list[str]) -> None:
    """Run each scenario in turn (in the subprocess), printing ``name<TAB>repr(result)``."""
    import traceback
    for name in names:
        func, _, arg = name.partition(":")
        try:
            globals()[f"_s_{func}"](*([arg] if arg else []))
            result = "ok"
        except BaseException:
            result = traceback.format_exc()
        print(f"{name}\t{result!r}", flush=True)


def _scenario(batch: str, name: str) -> None:
    if batch not in _results:
        env, names = _BATCHES[batch]
        from helpers.cpu_script import run_scenario_batch
        _results[batch] = run_scenario_batch([HERE, TESTS], MODULE, list(names), env)
    result = _results[batch][name]
    assert result == "ok", result


def _cases(batch: str) -> list[Any]:
    return [pytest.param(batch, n, id=n) for n in _BATCHES[batch][1]]


@pytest.mark.parametrize(("batch", "name"), [*_cases("hogwild"), *_cases("practices"),
                                             *_cases("launch"), *_cases("verl"),
                                             *_cases("loader"), *_cases("pool")])
def test_real_code_scenario(batch: str, name: str) -> None:
    _scenario(batch, name)


# ------------------------------------------------------------------ mnist_hogwild
# pytorch/examples mnist_hogwild/main.py: ``mp.set_start_method('spawn', force=True)``,
# ``model.share_memory()``, ``mp.Process(target=train, args=(rank, args, model, ...))`` per
# rank, ``p.join()``; train.py: ``torch.manual_seed(args.seed + rank)`` then SGD steps on the
# shared parameters. The "model" is two shared arrays; a step reads, updates and writes them
# back under a lock (so the result is exact; Hogwild proper races on purpose).

def _s_hogwild(method: str) -> None:
    mp.set_start_method(method, force=True)
    acc.manual_seed(1)
    params = [acc.full((8, 4), 10.0, device="cpu"), acc.full((4,), 1.0, device="cpu")]
    lock, seeds = mp.Lock(), mp.Queue()
    processes = []
    for rank in range(2):
        p = mp.Process(target=_c_hogwild_train, args=(rank, 1, params, lock, 3, seeds))
        p.start()
        processes.append(p)
    got = dict(seeds.get(timeout=T) for _ in processes)
    for p in processes:
        p.join(T)
        assert p.exitcode == 0, (method, p.exitcode)
    assert got == {0: 1, 1: 2}, got
    assert (params[0].numpy() == 7.0).all(), params[0].numpy()     # 10 - 2 ranks * 3 * 0.5
    assert (params[1].numpy() == -2.0).all(), params[1].numpy()


# ------------------------------------------------------------------ best practices
# docs/source/notes/multiprocessing.rst ("Multiprocessing best practices", "CUDA in
# multiprocessing"): the producer sends device tensors through a queue and must keep them
# (and itself) alive as long as the consumer uses them; the consumer releases its copy
# ("del x") and the producer's ``torch.cuda.ipc_collect()`` frees it. With async streams the
# producer's queued fill is ordered before the consumer's read by the readiness event.

def _s_best_practices(method: str) -> None:
    ctx = mp.get_context(method)
    q, results, done = ctx.Queue(), ctx.Queue(), ctx.Event()
    p = ctx.Process(target=_c_consumer, args=(q, results, done))
    p.start()
    sent = []
    for i in range(4):
        x = acc.empty((256,), dtype="float32", device="cpu")
        x.fill_(float(i))                 # queued on the (async) current stream
        q.put(x)
        sent.append(x)
    q.put(None)
    total = results.get(timeout=T)
    assert total == 256.0 * (0 + 1 + 2 + 3), total
    for x in sent:
        assert (x.numpy() == -1.0).all()
    done.set()
    p.join(T)
    assert p.exitcode == 0, p.exitcode
    del sent, x
    assert mp.ipc_collect() == 0           # every consumer released: nothing kept
    acc.cpu.ipc_collect()


# ------------------------------------------------------------------ spawn / start_processes
# What launchers (torch.distributed.launcher, Lightning's MultiProcessingLauncher, fairseq)
# do with torch/multiprocessing/spawn.py: ``ctx = mp.spawn(fn, nprocs=n, join=False)``, then
# ``while not ctx.join(timeout): ...`` (Lightning polls), ``ctx.pids()``, and the fields of the
# exceptions.

def _s_spawn_join_loop() -> None:
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.SimpleQueue()
    shared = acc.asarray(np.arange(3, dtype=np.float32), device="cpu", copy=True)
    pc = mp.spawn(_c_wait_then_put, args=(go, out, shared), nprocs=3, join=False)
    assert isinstance(pc, mp.ProcessContext)
    assert all(isinstance(pid, int) for pid in pc.pids())
    assert pc.join(timeout=0.05) is False          # all still waiting for `go`
    go.set()
    while not pc.join(timeout=T):
        pass
    assert pc.join() is True                        # callable again once done
    assert sorted(out.get() for _ in range(3)) == [(0, 0.0), (1, 1.0), (2, 2.0)]


def _s_spawn_failures() -> None:
    try:
        mp.spawn(_c_fail, args=("raise",), nprocs=2)
    except mp.ProcessRaisedException as e:
        assert e.error_index == 1 and isinstance(e.error_pid, int), vars(e)
        assert "ValueError: bad rank 1" in str(e)
        assert str(e).startswith("\n\n-- Process 1 terminated with the following error:\n")
    else:
        raise AssertionError("no ProcessRaisedException")
    for how, code, sig in (("exit", 3, None), ("kill", -signal.SIGKILL, "SIGKILL")):
        try:
            mp.spawn(_c_fail, args=(how,), nprocs=2)
        except mp.ProcessExitedException as e:
            assert (e.error_index, e.exit_code, e.signal_name) == (1, code, sig), vars(e)
            assert isinstance(e.error_pid, int)
            assert pickle.loads(pickle.dumps(e)).exit_code == code
        else:
            raise AssertionError(f"no ProcessExitedException for {how}")


def _s_start_processes(method: str) -> None:
    arrays = [acc.full((16,), float(i + 1), device="cpu") for i in range(2)]
    done = mp.get_context(method).SimpleQueue()
    mp.start_processes(_c_double, args=(arrays, done), nprocs=2, start_method=method)
    assert sorted([done.get(), done.get()]) == [0, 1]
    assert (arrays[0].numpy() == 2).all() and (arrays[1].numpy() == 4).all()


def test_spawn_context_is_torchs_deprecated_alias() -> None:
    # torch/multiprocessing/spawn.py keeps ``SpawnContext`` (renamed ProcessContext in 1.4)
    # with a warning; older launchers still name it (isinstance checks, annotations).
    assert mp.spawn.__module__ == "accelrt.multiprocessing.spawn"
    from accelrt.multiprocessing import SpawnContext
    from accelrt.multiprocessing.spawn import SpawnContext as again
    assert again is SpawnContext and issubclass(SpawnContext, mp.ProcessContext)
    with pytest.warns(UserWarning, match="SpawnContext is renamed to ProcessContext"):
        ctx = SpawnContext([], [])
    assert ctx.join() is True and ctx.pids() == []
    assert mp.ENV_VAR_PARALLEL_START == "TORCH_MP_PARALLEL_START"


def test_sharing_strategies_and_context() -> None:
    # torch.multiprocessing's module functions, as training scripts call them at start
    # (e.g. ``torch.multiprocessing.set_sharing_strategy('file_system')`` in detectron2 /
    # mmcv's setup_multi_processes) and ``get_context`` for a start method.
    before = mp.get_sharing_strategy()
    try:
        assert mp.get_all_sharing_strategies() == {"file_descriptor", "file_system"}
        mp.set_sharing_strategy("file_system")
        assert mp.get_sharing_strategy() == "file_system"
        with pytest.raises(AssertionError, match="invalid sharing strategy 'bogus'"):
            mp.set_sharing_strategy("bogus")
        assert mp.get_sharing_strategy() == "file_system"
    finally:
        mp.set_sharing_strategy(before)
    for method in METHODS:
        ctx = mp.get_context(method)
        assert ctx.get_start_method() == method
    with pytest.raises(ValueError):
        mp.get_context("bogus")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mp.spawn(_c_fail, args=("raise",), nprocs=0) is None


# ------------------------------------------------------------------ verl bucketed weights
# volcengine/verl BucketedWeightSender._init_buffer: ``buffer = torch.empty(bucket_size,
# dtype=torch.uint8, device=...)``; ``handle = reduce_tensor(buffer)``;
# ``socket.send_pyobj(handle)`` (a plain pickle), and the receiver's ``rebuild_ipc``:
# ``func, args = handle; buffer = func(*args)``. Each bucket: the sender copies the weights
# into the buffer at offsets, synchronizes and sends the metadata; the receiver reads views
# of the buffer, then acknowledges; both ``ipc_collect()`` at the end.

def _s_verl_bucket(method: str) -> None:
    from accelrt.multiprocessing.reductions import reduce_tensor
    ctx = mp.get_context(method)
    mine, theirs = ctx.Pipe()
    p = ctx.Process(target=_c_verl_receiver, args=(theirs,))
    p.start()
    bucket = 64
    buffer = acc.empty((bucket,), dtype="uint8", device="cpu")
    mine.send_bytes(pickle.dumps(reduce_tensor(buffer)))
    mine.recv()
    weights = {"w": np.arange(6, dtype=np.float32).reshape(2, 3),
               "b": np.array([7, 8], dtype=np.int64),
               "v": np.full((5,), 2.5, dtype=np.float64)}
    offset, meta = 0, {}
    for name, w in weights.items():
        if offset + w.nbytes > bucket:
            acc.synchronize("cpu")
            mine.send({"bucket_meta": meta, "is_last": False})
            assert mine.recv() == b""
            offset, meta = 0, {}
        host = buffer.numpy()
        host[offset:offset + w.nbytes] = w.reshape(-1).view(np.uint8)
        buffer.copy_(host)
        meta[name] = (w.shape, w.dtype.str, offset)
        offset += w.nbytes
    acc.synchronize("cpu")
    mine.send({"bucket_meta": meta, "is_last": True})
    assert mine.recv() == b""
    got = mine.recv()
    p.join(T)
    assert p.exitcode == 0, p.exitcode
    assert got == {k: v.tolist() for k, v in weights.items()}, got
    del buffer
    acc.cpu.ipc_collect()
    assert mp.ipc_collect() == 0


def test_reduce_tensor_is_reduce_array() -> None:
    # torch.multiprocessing.reductions.reduce_tensor is what verl / vLLM / SGLang import.
    from accelrt.multiprocessing import reductions
    assert reductions.reduce_tensor is reductions.reduce_array
    with pytest.raises(AttributeError):
        reductions.reduce_tensor(None)


# ------------------------------------------------------------------ DataLoader internals
# torch/utils/data/_utils/pin_memory.py, ported: the pinning thread names itself, sets the
# loader's device (thread-local, as CUDA's current device) and pins every array of nested
# batches; the main thread's device is unchanged.

Point = collections.namedtuple("Point", "x y")


def _pin(data: Any, device: Any = None) -> Any:
    if isinstance(data, np.ndarray):
        return acc.pin_memory(data, device)
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, collections.abc.Mapping):
        clone = copy.copy(data)
        clone.update({k: _pin(v, device) for k, v in data.items()})
        return clone
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_pin(v, device) for v in data))
    if isinstance(data, collections.abc.Sequence):
        return type(data)([_pin(v, device) for v in data])
    return data


def _pin_memory_loop(in_queue: Any, out_queue: Any, device_id: int, done: Any,
                     device: Any, seen: list[Any]) -> None:
    mp._set_thread_name("pt_data_pin")
    acc.set_device_index(device_id)
    seen.append((mp._get_thread_name(), acc.current_device_index()))
    while not done.is_set():
        try:
            idx, data = in_queue.get(timeout=0.05)
        except queue.Empty:
            continue
        out_queue.put((idx, _pin(data, device)))


def test_pin_memory_thread() -> None:
    in_q: queue.Queue[Any] = queue.Queue()
    out_q: queue.Queue[Any] = queue.Queue()
    done, seen = threading.Event(), []
    main_index = acc.current_device_index()
    target = acc.device_count() - 1
    t = threading.Thread(target=_pin_memory_loop, args=(in_q, out_q, target, done, "cpu", seen),
                         daemon=True)
    t.start()
    batch = {"img": np.ones((2, 3), np.float32), "meta": ["a", Point(np.arange(3), b"k")]}
    in_q.put((0, batch))
    idx, pinned = out_q.get(timeout=T)
    done.set()
    t.join(T)
    assert seen == [("pt_data_pin", target)]
    assert acc.current_device_index() == main_index
    assert idx == 0 and acc.is_pinned(pinned["img"], "cpu") and pinned["meta"][0] == "a"
    assert isinstance(pinned["meta"][1], Point) and acc.is_pinned(pinned["meta"][1].x, "cpu")
    assert pinned["meta"][1].y == b"k" and (pinned["img"] == 1).all()
    assert not acc.is_pinned(batch["img"], "cpu")


# torch/utils/data/_utils/worker.py: each worker seeds ``base_seed + worker_id`` and the
# user's worker_init_fn seeds numpy from ``torch.initial_seed()``; workers see the shared
# arrays the main process sends them.

def _s_worker_seeding(method: str) -> None:
    ctx = mp.get_context(method)
    table = acc.asarray(np.arange(12, dtype=np.float32).reshape(4, 3), device="cpu", copy=True)
    base_seed = 1234
    queues = [ctx.Queue() for _ in range(2)]
    data_q = ctx.Queue()
    workers = [ctx.Process(target=_c_loader_worker,
                           args=(i, base_seed, queues[i], data_q, table), daemon=True)
               for i in range(2)]
    for w in workers:
        w.start()
    for idx in range(4):
        queues[idx % 2].put(idx)
    got = sorted(data_q.get(timeout=T) for _ in range(4))
    for q in queues:
        q.put(None)
    for w in workers:
        w.join(T)
        assert w.exitcode == 0, w.exitcode
    assert got == [(0, 0, 1234, 3.0), (0, 2, 1234, 21.0), (1, 1, 1235, 12.0),
                   (1, 3, 1235, 30.0)], got


# ------------------------------------------------------------------ Pool.imap of device arrays
# A similarity-matrix helper found in the wild (``with torch.multiprocessing.Pool(
# torch.multiprocessing.cpu_count()) as pool: futures = pool.imap(compute_batch,
# args_of_workers)``, each argument ``(query[i:i+b].to(device), key[j:j+b].to(device),
# metric, (i, j))``, each result a device shard the parent writes into the full matrix). The
# shards are allocated in the pool's workers and outlive them: the ``with`` block terminates
# the workers before the parent reads them.

def _s_pool_imap(method: str) -> None:
    ctx = mp.get_context(method)
    rng = np.random.default_rng(0)
    query = rng.standard_normal((4, 3)).astype(np.float32)
    key = rng.standard_normal((6, 3)).astype(np.float32)
    b = 2
    work = [(acc.asarray(query[i:i + b], device="cpu", copy=True),
             acc.asarray(key[j:j + b], device="cpu", copy=True), "dot", (i, j))
            for i in range(0, 4, b) for j in range(0, 6, b)]
    out = np.zeros((4, 6), np.float32)
    with ctx.Pool(2) as pool:
        shards = list(pool.imap(_c_compute_batch, work))
    for shard, (i, j) in shards:           # the workers that made them are gone
        out[i:i + b, j:j + b] = shard.numpy()
    np.testing.assert_allclose(out, query @ key.T, rtol=1e-6)
    del shards, shard, work
    assert mp.ipc_collect() == 0


# ------------------------------------------------------------------ launcher details
# torch/multiprocessing/spawn.py logs the processes it terminates after a failure (logger
# ``torch.multiprocessing.spawn``; launchers' log configurations show it) and, with
# ``TORCH_MP_PARALLEL_START=1``, starts ``forkserver`` processes from a thread pool.

def _s_spawn_logs_termination() -> None:
    import logging
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("accelrt.multiprocessing.spawn")
    logger.addHandler(Keep())
    go = mp.get_context("spawn").Event()
    try:
        mp.spawn(_c_raise_or_wait, args=(go,), nprocs=2)
    except mp.ProcessRaisedException as e:
        assert e.error_index == 1 and "RuntimeError: rank 1 failed" in str(e)
    else:
        raise AssertionError("no ProcessRaisedException")
    msgs = [(r.levelname, r.getMessage()) for r in records]
    assert len(msgs) == 1 and msgs[0][0] == "WARNING", msgs
    assert msgs[0][1].startswith("Terminating process ") and "via signal SIGTERM" in msgs[0][1]


def _s_start_processes_parallel() -> None:
    from concurrent.futures import ThreadPoolExecutor
    spawn_module = sys.modules["accelrt.multiprocessing.spawn"]   # (``mp.spawn`` is the function)
    used = []

    class Recording(ThreadPoolExecutor):
        def __init__(self, max_workers: int) -> None:
            used.append(max_workers)
            super().__init__(max_workers=max_workers)

    os.environ[mp.ENV_VAR_PARALLEL_START] = "1"
    spawn_module.ThreadPoolExecutor = Recording  # type: ignore[misc]
    arrays = [acc.full((4,), float(i + 1), device="cpu") for i in range(3)]
    done = mp.get_context("forkserver").SimpleQueue()
    ctx = mp.start_processes(_c_double, args=(arrays, done), nprocs=3, join=False,
                             start_method="forkserver")
    assert ctx is not None
    while not ctx.join(T):
        pass
    assert used == [3]
    assert sorted(done.get() for _ in range(3)) == [0, 1, 2]
    assert [float(a.numpy()[0]) for a in arrays] == [2.0, 4.0, 6.0]
    used.clear()
    mp.start_processes(_c_double, args=(arrays, done), nprocs=1, start_method="fork")
    assert used == [] and done.get() == 0          # only forkserver starts in parallel


def test_thread_name_as_torch() -> None:
    # torch.multiprocessing._set_thread_name / _get_thread_name (c10::setThreadName): torch
    # 2.15 gives 'pt_data_pin', cuts 40 'a's to 15, takes bytes, ends a name at a NUL, and a
    # new thread starts with its creator's OS name.
    got: list[Any] = []

    def body() -> None:
        got.append(mp._get_thread_name())
        for name in ("pt_data_pin", "a" * 40, b"x", "a\x00b", ""):
            mp._set_thread_name(name)
            got.append(mp._get_thread_name())
        with pytest.raises(TypeError, match="takes a str"):
            mp._set_thread_name(3)  # type: ignore[arg-type]

    main = mp._get_thread_name()
    t = threading.Thread(target=body, name="not-the-os-name")
    t.start()
    t.join(T)
    assert got == [main, "pt_data_pin", "a" * 15, "x", "a", ""], got
    assert mp._get_thread_name() == main              # only the calling thread changed


# ------------------------------------------------------------------ SGLang serializer
# sgl-project/sglang python/sglang/srt/utils.py ``MultiprocessingSerializer``: ``serialize``
# dumps an object holding device tensors with ``ForkingPickler(buf).dump(obj)`` (base64 when
# ``output_str=True``, for HTTP); ``deserialize`` decodes and loads it with a ``SafeUnpickler``
# whose ``find_class`` allows listed module prefixes (torch's rebuild functions). verl's
# SGLang rollout serializes the named weights once per tensor-parallel rank
# (``[MultiprocessingSerializer.serialize(named_tensors, output_str=True) for _ in
# range(tp_size)]``) and each rank deserializes its own entry.

def _s_sglang_serializer(method: str) -> None:
    ctx = mp.get_context(method)
    named = [("embed", acc.full((4, 8), 0.5, device="cpu")),
             ("lm_head", acc.asarray(np.arange(8, dtype=np.float32), device="cpu", copy=True))]
    serialized = [_serialize(named, output_str=True) for _ in range(2)]
    assert all(isinstance(s, str) for s in serialized)
    payloads, sums, held, done = ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_c_tp_rank, args=(r, payloads, sums, held, done))
             for r in range(2)]
    for p in procs:
        p.start()
    for s in serialized:
        payloads.put(s)
    assert sorted(held.get(timeout=T) for _ in procs) == [0, 1]
    del named
    assert mp.ipc_collect() == 4           # 2 arrays x 2 pickles, held by the ranks
    done.set()
    got = dict(sums.get(timeout=T) for _ in procs)
    assert got == {r: {"embed": 16.0, "lm_head": 28.0} for r in range(2)}, got
    assert mp.ipc_collect() == 0           # both ranks released their pickles
    for p in procs:
        p.join(T)
        assert p.exitcode == 0, p.exitcode
    try:
        _deserialize(pickle.dumps(os.system))   # the allowlist still blocks the rest
    except pickle.UnpicklingError:
        pass
    else:
        raise AssertionError("not blocked")
