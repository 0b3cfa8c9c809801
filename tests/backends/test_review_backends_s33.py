"""What ``tests/helpers/builds_probe_ext.py`` (the compiled and pure builds compared on the
backend registry and the raw operations of the cpu, simulated and opencl backends) found,
fixed:

- ``CpuBackend(num_devices=2**31)`` (or ``ACCELRT_CPU_DEVICES=100000000``) made each device's
  state before the registry's limit of 1024 devices refused the count: minutes and all the
  memory; now ``ValueError`` at once;
- ``SimulatedBackend`` took a negative device index as Python's (``malloc(-1, n)`` allocated
  on the last device) and left the arguments of ``memcpy``/``memset``/``fill``/
  ``launch_host_func`` and of the stream operations unchecked (a test passed on it that a
  real backend fails): now the checks of the cpu backend, but the ranges (it holds no
  memory);
- ``backends.on_change(1)`` was kept, and broke every later ``register``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from accelrt import backends
from accelrt.backends.cpu import CpuBackend
from accelrt.testing import SimulatedBackend


@pytest.mark.parametrize("n", [1025, 2**31, 10**40])
def test_cpu_backend_refuses_more_devices_than_accelrt_supports(n: int) -> None:
    code = (f"from accelrt.backends.cpu import CpuBackend\n"
            f"try:\n    CpuBackend(num_devices={n})\n"
            f"except ValueError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == (f"num_devices={n} is more than the 1024 devices accelrt "
                                "supports per backend")


def test_cpu_backend_takes_1024_devices() -> None:
    b = CpuBackend(num_devices=1024, memory_limit=1 << 20)
    assert b.device_count() == 1024
    b.close()


@pytest.mark.parametrize("value", ["100000000", "1025"])
def test_the_cpu_device_count_variable_is_bounded(value: str) -> None:
    code = ("import accelrt as acc\n"
            "try:\n    acc.zeros(2, device='cpu:0')\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "ACCELRT_CPU_DEVICES": value})
    assert r.returncode == 0, r.stderr[-2000:]
    assert (f"ACCELRT_CPU_DEVICES={value!r} is invalid; set it to an integer from 1 to 1024"
            in r.stdout), r.stdout


@pytest.fixture
def sim() -> SimulatedBackend:
    return SimulatedBackend(capacity=1 << 30, device_count=2)


@pytest.mark.parametrize("index", [-1, 2, -3])
def test_simulated_refuses_a_device_index_out_of_range(sim: SimulatedBackend,
                                                       index: int) -> None:
    for op, args in (("malloc", (index, 512)), ("get_memory_info", (index,)),
                     ("stream_create", (index, 0)), ("capabilities", (index,)),
                     ("event_create", (index, False, False, False)), ("calls", (index,))):
        with pytest.raises(IndexError, match=f"simulated device index {index} is out of "
                                             "range; this backend has 2 device"):
            getattr(sim, op)(*args)
    assert sim.used == 0


@pytest.mark.parametrize("index", [1.5, True, "0", None])
def test_simulated_refuses_a_device_index_that_is_no_int(sim: SimulatedBackend,
                                                         index: object) -> None:
    with pytest.raises(TypeError, match="device index must be an int, got"):
        sim.malloc(index, 512)  # type: ignore[arg-type]


def test_simulated_checks_the_arguments_of_copies_and_fills(sim: SimulatedBackend) -> None:
    p = sim.malloc(0, 512)
    s = sim.stream_create(0, 0)
    cases = [
        (TypeError, "dst must be an int address, got float", "memcpy", (0, 1.5, p, 8, "d2d", s)),
        (ValueError, "src=-1 is not a valid address", "memcpy", (0, p, -1, 8, "d2d", s)),
        (ValueError, "memcpy kind 'x' must be one of", "memcpy", (0, p, p, 8, "x", s)),
        (ValueError, "nbytes=-1 must be >= 0", "memcpy", (0, p, p, -1, "d2d", s)),
        (TypeError, "memset value must be an int, got float", "memset", (0, p, 1.5, 8, s)),
        (ValueError, "memset value=256 must be a byte value", "memset", (0, p, 256, 8, s)),
        (TypeError, "fill pattern must be bytes, got str", "fill", (0, p, "ab", 2, s)),
        (ValueError, "fill pattern is 3 bytes long", "fill", (0, p, b"abc", 2, s)),
        (TypeError, "count must be an int, got float", "fill", (0, p, b"ab", 2.0, s)),
        (TypeError, "launch_host_func needs a callable, got int", "launch_host_func",
         (0, 7, s)),
        (TypeError, "stream handle must be an int, got float", "memset", (0, p, 1, 8, 1.5)),
        (ValueError, "stream handle -1 is not a live stream of simulated:0", "memset",
         (0, p, 1, 8, -1)),
        (TypeError, "stream handle must be an int, got float", "stream_query", (0, 1.5)),
        (TypeError, "stream handle must be an int, got str", "stream_synchronize", (0, "1")),
        (TypeError, "stream priority must be an int, got float", "stream_create", (0, 1.5)),
        (TypeError, "event handle must be an int, got float", "stream_wait_event",
         (0, s, 1.5)),
    ]
    before = sim.calls(0)
    for exc, message, op, args in cases:
        with pytest.raises(exc, match=message.replace("(", r"\(")):
            getattr(sim, op)(*args)
    assert sim.calls(0) == before   # nothing was counted (nor queued)
    # a destroyed stream's work may still be asked about and waited for, as before
    sim.memset(0, p, 1, 8, s)
    sim.stream_destroy(0, s)
    assert sim.stream_query(0, s) is True
    sim.stream_synchronize(0, s)
    with pytest.raises(ValueError, match="that was not destroyed"):
        sim.memset(0, p, 1, 8, s)
    sim.free(0, p)


def test_on_change_refuses_a_listener_that_is_not_callable() -> None:
    from accelrt import _backend_registry as reg
    n = len(reg._listeners)
    with pytest.raises(TypeError, match=r"on_change\(\) takes a callable listener\(name\), "
                                        "got int"):
        backends.on_change(1)  # type: ignore[arg-type]
    assert len(reg._listeners) == n
    backends.register("s33probe", lambda: CpuBackend(name="s33probe"))
    backends.unregister("s33probe")
