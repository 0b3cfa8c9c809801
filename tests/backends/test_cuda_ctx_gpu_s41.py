"""On a GPU: the CUDA runtime's current device (``cudaGetDevice``, what PyTorch, CuPy and Numba
read) agrees with accelrt's current cuda device after each call that changes it or works on
another device (session 41). The same steps run without a GPU over the stand-in libcuda
(tests/backends/test_cuda_ctx_s41.py); here the driver answers. ``scripts/gpu_check.sh`` runs
this file in its ``changed`` phase. Each test skips, with the reason, without two GPUs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import accelrt as acc

from helpers.cuda_gpu import two_gpus

pytestmark = two_gpus


def runtime_device() -> int:
    """The thread's current device as the CUDA runtime answers it (``cudaGetDevice``), or as
    the driver does (the device of the current context) where ``cuda.bindings.runtime`` is
    missing."""
    try:
        from cuda.bindings import runtime
    except ImportError:
        from cuda.bindings import driver
        err, dev = driver.cuCtxGetDevice()
        assert int(err) == 0, err
        return int(dev)
    err, dev = runtime.cudaGetDevice()
    assert int(err) == 0, err
    return int(dev)


def agrees(step: str) -> None:
    cur = acc.cuda.current_device()
    got = runtime_device()
    assert got == cur, f"{step}: cudaGetDevice() is {got}, accelrt's current device {cur}"


@pytest.fixture
def cuda() -> Iterator[Any]:
    acc.set_current_accelerator("cuda")
    acc.cuda.init()                    # device 0's context, as any earlier test made it
    acc.empty(1, dtype="uint8", device="cuda:1")   # and device 1's
    acc.cuda.set_device(0)
    yield acc.cuda
    acc.cuda.set_device(0)
    acc.cuda.synchronize()


def test_gpu_set_device_and_device_contexts(cuda: Any) -> None:
    agrees("start")
    cuda.set_device(1)
    agrees("set_device(1)")
    acc.set_device_index(0)
    agrees("set_device_index(0)")
    with cuda.device(1):
        agrees("device(1)")
        with acc.device_index(0):
            agrees("device(1) > device_index(0)")
        agrees("back in device(1)")
    agrees("after device(1)")
    with pytest.raises(KeyError):
        with cuda.device(1):
            raise KeyError("inside")
    agrees("after device(1) left by an exception")
    x = acc.empty(4, dtype="float32", device="cuda:1")
    with cuda.device_of(x):
        agrees("device_of(cuda:1 array)")
    agrees("after device_of")


def test_gpu_streams_and_work_on_another_device(cuda: Any) -> None:
    s1 = acc.cuda.Stream(1)
    agrees("a stream made on cuda:1")
    with cuda.stream(s1):
        agrees("stream(cuda:1 stream)")
        acc.ones(256, dtype="float32", device="cuda:1").fill_(2.0)
    agrees("after the stream block")
    acc.set_stream(s1)
    agrees("set_stream(cuda:1 stream)")
    acc.set_stream(acc.current_stream("cuda:0"))
    agrees("set_stream(cuda:0 stream)")
    x = acc.ones(1 << 16, dtype="float32", device="cuda:1")
    agrees("ones on cuda:1")
    x.fill_(3.0)
    e = cuda.Event()
    e.record(s1)
    e.synchronize()
    cuda.synchronize(1)
    assert float(x.numpy()[0]) == 3.0
    agrees("work on cuda:1, its results read back")
    del x
    cuda.empty_cache()
    agrees("a cuda:1 array freed, the cache emptied")


def test_gpu_a_new_thread(cuda: Any) -> None:
    seen: list[str] = []

    def run() -> None:
        try:
            acc.empty(8, dtype="uint8", device="cuda:1")
            agrees("a new thread after an array on cuda:1")
            with acc.cuda.device(1):
                agrees("a new thread in device(1)")
            agrees("a new thread after device(1)")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            seen.append(f"{type(exc).__name__}: {exc}")
    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    assert not t.is_alive() and not seen, seen
    agrees("the main thread after it")


def test_gpu_a_device_block_creates_no_context_on_device_0() -> None:
    """A fresh process: ``with acc.cuda.device(1)`` makes device 1's context, not device 0's
    (torch's MaybeExchangeDevice on the exit), and an array on cuda:1 neither."""
    code = textwrap.dedent("""
        import accelrt as acc
        from cuda.bindings import driver as d
        with acc.cuda.device(1):
            pass
        acc.empty(8, dtype="uint8", device="cuda:1")
        err, dev = d.cuDeviceGet(0)
        err, flags, active = d.cuDevicePrimaryCtxGetState(dev)
        assert int(err) == 0 and not active, (err, active)
        acc.cuda.set_device(0)   # no change: still no context on device 0
        err, flags, active = d.cuDevicePrimaryCtxGetState(dev)
        assert not active
        acc.cuda.set_device(1)
        acc.cuda.set_device(0)   # torch's SetDevice(0): device 0's context, current
        err, flags, active = d.cuDevicePrimaryCtxGetState(dev)
        assert active
        err, cur = d.cuCtxGetDevice()
        assert int(cur) == 0, cur
        print("ok")
    """)
    import accelrt
    env = dict(os.environ, ACCELRT_ACCELERATOR="cuda",
               PYTHONPATH=str(Path(accelrt.__file__).resolve().parents[1]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
