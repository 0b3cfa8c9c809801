"""The teardown leak check (``accelrt.testing.leak_check`` and the autouse fixture of
``tests/conftest.py``): it fails a block that leaves caching-allocator memory, streams, events
or graphs alive, and blames neither garbage in cycles nor accelrt's own caches."""

from __future__ import annotations

import datetime
import gc
import importlib.util
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.params import backend_params
from helpers.registry import module_backends

import accelrt as acc
from accelrt.backends.cpu import CpuBackend
from accelrt.testing import find_leaks, leak_check, snapshot

# closed (worker thread stopped) and unregistered after the module
_backends = module_backends(
    {"cpuleak": lambda: CpuBackend(num_devices=1, async_streams=True, name="cpuleak")})

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=backend_params(("cpu", "cpuleak", "opencl"), {"cpuleak": "cpu-async"},
                                     own=["cpuleak"]))
def dev(request: pytest.FixtureRequest) -> Iterator[str]:
    name: str = request.param
    acc.set_current_accelerator(name)
    yield f"{name}:0"
    acc.synchronize(f"{name}:0")


def _leaked(make: object) -> str:
    kept: list[object] = []
    with pytest.raises(AssertionError) as info, leak_check():
        kept.append(make())   # type: ignore[operator]
    for obj in kept:
        obj.close()           # type: ignore[attr-defined]
    return str(info.value)


def test_each_kind_of_leak_is_reported(dev: str) -> None:
    assert "byte(s) allocated inside are still allocated" in _leaked(
        lambda: acc.zeros(64, device=dev))
    assert "1 stream(s) made inside are still alive" in _leaked(lambda: acc.Stream(dev))
    event = _leaked(lambda: acc.current_stream(dev).record_event())
    assert "1 event(s) made inside are still alive" in event
    assert event.splitlines()[1].startswith(f"  {dev.split(':')[0]}: ")


def test_a_leaked_graph_is_reported() -> None:
    x = acc.zeros(4, device="cpu:0")

    def captured() -> acc.Graph:
        g = acc.Graph()
        with acc.graph(g, stream=s):
            _ = x.fill_(1.0)
        return g

    s = acc.Stream("cpu:0")
    assert "1 graph(s) made inside are still alive" in _leaked(captured)
    s.close()
    x.close()


def test_closed_or_dropped_objects_are_not_leaks(dev: str) -> None:
    with leak_check():
        with acc.zeros(64, device=dev) as a, acc.Event(dev) as e:
            _ = a.fill_(1.0)
            e.record()
        s = acc.Stream(dev)
        s.close()
        t = acc.Stream(dev)
        t.record_event()
        del t
        b = acc.empty(128, device=dev)
        b.record_stream(acc.Stream(dev))     # a stream-ordered free: its event is internal
        del b


def test_garbage_in_cycles_is_collected_before_blaming(dev: str) -> None:
    gc.disable()
    try:
        with leak_check():
            cycle: list[object] = [acc.zeros(64, device=dev), acc.Stream(dev),
                                   acc.current_stream(dev).record_event()]
            cycle.append(cycle)
            del cycle
    finally:
        gc.enable()


def test_accelrts_own_caches_are_not_leaks() -> None:
    """The side stream of acc.graph(), made at its first use, is accelrt's, not the test's."""
    acc.set_current_accelerator("cpuleak")
    from accelrt._graph import graph
    graph._default_streams.pop(("cpuleak", 0), None)
    x = acc.zeros(4, device="cpuleak:0")
    with leak_check():
        g = acc.Graph()
        with acc.graph(g):
            _ = x.fill_(2.0)
        g.replay()
        g.close()
    assert ("cpuleak", 0) in graph._default_streams
    x.close()


def test_find_leaks_is_empty_when_nothing_changed() -> None:
    before = snapshot()
    assert find_leaks(before) == []


_LEAKY_TESTS = '''
import accelrt as acc
import pytest

KEEP = []

def test_leaks_a_stream():
    KEEP.append(acc.Stream("cpu"))

def test_leaks_memory():
    KEEP.append(acc.zeros(1024, device="cpu"))

@pytest.mark.leaks_ok("kept on purpose")
def test_leaks_on_purpose():
    KEEP.append(acc.Stream("cpu"))

@pytest.mark.leaks_ok
def test_no_reason():
    pass

def test_clean():
    with acc.zeros(8, device="cpu") as a:
        a.fill_(1.0)
'''


def test_the_fixture_fails_leaking_tests(tmp_path: Path) -> None:
    """The autouse fixture of tests/conftest.py, run on a small suite in a subprocess."""
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "test_leaky.py").write_text(_LEAKY_TESTS)
    ini = tmp_path / "pytest.ini"
    ini.write_text(textwrap.dedent('''
        [pytest]
        markers =
            leaks_ok(reason): leaks on purpose
        '''))
    # the copied conftest imports the tests' helpers package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
           "ACCELRT_CPU_STREAMS": ""}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         "-c", str(ini), str(tmp_path / "test_leaky.py"), "-rE"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "ERROR test_leaky.py::test_leaks_a_stream" in text
    assert "cpu: 1 stream(s) made inside are still alive" in text
    assert "ERROR test_leaky.py::test_leaks_memory" in text
    assert "4096 byte(s) allocated inside" in text
    assert "ERROR test_leaky.py::test_no_reason" in text and "needs a reason" in text
    assert "test_leaks_on_purpose" not in text.split("short test summary")[-1]
    assert "4 passed, 3 errors" in text   # a teardown error follows a pass


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="mpi4py is not installed")
def test_destroy_process_group_closes_the_comm_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the comm stream of a destroyed group stayed alive (the watchdog keeps the
    group object until the next init_process_group)."""
    import accelrt.distributed as dist
    monkeypatch.delenv("ACCELRT_DISTRIBUTED_BACKEND", raising=False)
    with leak_check():
        dist.init_process_group(timeout=datetime.timedelta(seconds=30))
        try:
            a = acc.full((3,), 2, dtype="int32", device="cpu")
            dist.all_reduce(a, async_op=True).wait()
            a.close()
        finally:
            dist.destroy_process_group()
