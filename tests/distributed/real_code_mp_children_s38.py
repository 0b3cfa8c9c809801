"""The child processes' functions of ``test_real_code_mp_s38.py``'s scenarios (the ``_c_*``
functions, credited there beside the scenario that starts them), in a module of their own:
a ``spawn`` or ``forkserver`` child imports the module of the function it runs, and this one
leaves out the test module's pytest (about a third of a child's start-up here).
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from typing import Any

import numpy as np

import accelrt as acc

T = 30.0          # seconds for any single wait in a scenario


def _c_hogwild_train(rank: int, seed: int, params: list[acc.Array], lock: Any, steps: int,
                     seeds: Any) -> None:
    acc.manual_seed(seed + rank)
    seeds.put((rank, acc.initial_seed()))
    for _ in range(steps):
        with lock:
            for p in params:
                p.copy_(p.numpy() - 0.5)      # p -= lr * grad, grad = 1, lr = 0.5
        acc.synchronize("cpu")


def _c_consumer(q: Any, results: Any, done: Any) -> None:
    total = 0.0
    while True:
        x = q.get(timeout=T)
        if x is None:
            break
        total += float(x.numpy().sum())
        x.fill_(-1.0)                     # the producer sees the consumer's write
        del x
    acc.synchronize("cpu")
    results.put(total)
    done.wait(T)                          # the producer decides when we may go


def _c_wait_then_put(i: int, go: Any, out: Any, shared: acc.Array) -> None:
    assert go.wait(T)
    out.put((i, float(shared.numpy()[i])))


def _c_fail(i: int, how: str) -> None:
    if i != 1:
        return
    if how == "raise":
        raise ValueError(f"bad rank {i}")
    if how == "exit":
        sys.exit(3)
    os.kill(os.getpid(), signal.SIGKILL)


def _c_double(i: int, arrays: list[acc.Array], done: Any) -> None:
    arrays[i].copy_(arrays[i].numpy() * 2)
    acc.synchronize("cpu")
    done.put(i)


def _c_verl_receiver(conn: Any) -> None:
    func, args = pickle.loads(conn.recv_bytes())
    buffer = func(*args)
    assert buffer.dtype == np.uint8
    conn.send(b"")
    got = {}
    while True:
        meta = conn.recv()
        raw = buffer.numpy()
        for name, (shape, dtype, offset) in meta["bucket_meta"].items():
            size = np.dtype(dtype).itemsize * int(np.prod(shape))
            got[name] = raw[offset:offset + size].view(dtype).reshape(shape).copy()
        acc.synchronize("cpu")
        conn.send(b"")
        if meta["is_last"]:
            break
    del buffer
    acc.cpu.ipc_collect()
    conn.send({k: v.tolist() for k, v in got.items()})


def _c_loader_worker(worker_id: int, base_seed: int, index_q: Any, data_q: Any,
                     table: acc.Array) -> None:
    seed = base_seed + worker_id
    acc.manual_seed(seed)
    np.random.seed(acc.initial_seed() % 2**32)        # a typical worker_init_fn
    rows = table.numpy()
    while True:
        idx = index_q.get(timeout=T)
        if idx is None:
            break
        data_q.put((worker_id, idx, acc.initial_seed(), float(rows[idx].sum())))


def _c_compute_batch(args: tuple[Any, ...]) -> tuple[acc.Array, tuple[int, int]]:
    q, k, metric, (i, j) = args
    assert metric == "dot"
    shard = acc.asarray(q.numpy() @ k.numpy().T, device="cpu", copy=True)
    acc.synchronize("cpu")
    return shard, (i, j)


def _c_raise_or_wait(i: int, go: Any) -> None:
    if i == 1:
        raise RuntimeError("rank 1 failed")
    go.wait(T)


class _SafeUnpickler(pickle.Unpickler):
    ALLOWED = ("accelrt.", "numpy", "builtins", "collections", "copyreg", "_codecs")

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith(self.ALLOWED):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"blocked {module}.{name}")


def _serialize(obj: Any, output_str: bool = False) -> Any:
    import base64
    import io
    from multiprocessing.reduction import ForkingPickler
    buf = io.BytesIO()
    ForkingPickler(buf).dump(obj)
    data = buf.getvalue()
    return base64.b64encode(data).decode("utf-8") if output_str else data


def _deserialize(data: Any) -> Any:
    import base64
    import io
    if isinstance(data, str):
        data = base64.b64decode(data, validate=True)
    return _SafeUnpickler(io.BytesIO(data)).load()


def _c_tp_rank(rank: int, payloads: Any, sums: Any, held: Any, done: Any) -> None:
    named = _deserialize(payloads.get(timeout=T))
    got = {name: float(a.numpy().sum()) for name, a in named}
    held.put(rank)
    assert done.wait(T)
    del named
    sums.put((rank, got))
