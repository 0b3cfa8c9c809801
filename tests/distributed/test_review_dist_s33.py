"""What ``tests/helpers/builds_probe_ext.py`` (the compiled and pure builds compared on the
distributed, multiprocessing and store APIs) found, fixed; and torch 2.15.0's behaviour where
accelrt mirrors it, observed with its CPU build (gloo, world size 1) and written here as
literals (no torch in the test environment):

- ``all_to_all``/``all_to_all_single`` whose block for this rank itself has another size in
  the output than in the input: MPI waited for ever on the short receive (the group's
  watchdog then ended the process); now ``AcceleratorValueError`` before any communication
  (torch's gloo raises ``RuntimeError`` "input and output tensors must have the same size");
- an ``isend`` whose work handle the caller dropped: its array was freed, and its memory
  reused, while MPI still read it (an ``irecv`` into the reused block crashed MPICH with
  "memcpy argument memory ranges overlap"); the group now keeps the work until it completes;
- ``Work.source_rank()`` after ``is_completed()`` answered -2 (MPI's empty status);
- ``Store.barrier(key, world_size)`` with a non-int world size waited out the timeout;
- ``multi_set(keys, "ab")`` took the str as a list of values (torch: ``TypeError``);
- ``TCPStore(is_master="False")`` made a master (torch: ``TypeError``; its other flags take
  what has a truth value of its own, and refuse a str or a list);
- ``rebuild_array`` of a malformed pickle (an offset of 1.5) made an array at a float
  address.

Tests that could hang or crash run in a subprocess with a timeout.
"""

from __future__ import annotations

import datetime
import importlib.util
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import accelrt as acc
import accelrt.distributed as dist

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")


def _run(code: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **env})


# ---------------------------------------------------------------------- all_to_all

_ALL_TO_ALL = """
import accelrt as acc, accelrt.distributed as dist
dist.init_process_group("mpi", timeout=20)
for call in (lambda: dist.all_to_all([acc.zeros(0)], [acc.ones(4)]),
             lambda: dist.all_to_all([acc.zeros(2)], [acc.ones(4)]),
             lambda: dist.all_to_all_single(acc.zeros(2), acc.ones(4))):
    try:
        call()
        print("returned")
    except Exception as e:
        print(type(e).__name__, isinstance(e, ValueError), isinstance(e, RuntimeError), e)
out = [acc.zeros(4)]
dist.all_to_all(out, [acc.full((4,), 2.0)])
print(out[0].tolist())
dist.destroy_process_group()
"""


@needs_mpi
def test_all_to_all_refuses_a_block_to_itself_of_another_size() -> None:
    r = _run(_ALL_TO_ALL)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert len(lines) == 4, r.stdout
    for line in lines[:3]:
        # AcceleratorValueError: a ValueError and a RuntimeError (torch's class)
        assert line.startswith("AcceleratorValueError True True "), line
    assert ("output_tensor_list[0] (what it receives from itself) must have the size of "
            "input_tensor_list[0] (what it sends itself) (expected 4 elements, got 0)"
            in lines[0])
    assert "(expected 4 elements, got 2)" in lines[1] and "all_to_all_single" in lines[2]
    assert lines[3] == "[2.0, 2.0, 2.0, 2.0]"


# ---------------------------------------------------------------------- point-to-point

_DROPPED_ISEND = """
import gc, accelrt as acc, accelrt.distributed as dist
dist.init_process_group("mpi", timeout=20)
a = acc.full((4,), 5.0)
p = a.data_ptr()
dist.isend(a, dst=0)          # the work handle is dropped at once
del a
gc.collect()
b = acc.zeros(4)
print("reused" if b.data_ptr() == p else "kept")
dist.irecv(b, src=0).wait()
print(b.tolist())
dist.destroy_process_group()
"""


@needs_mpi
def test_a_dropped_isend_keeps_its_array_until_sent() -> None:
    r = _run(_DROPPED_ISEND)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["kept", "[5.0, 5.0, 5.0, 5.0]"]


@needs_mpi
def test_the_source_rank_survives_is_completed(one_rank_world: None) -> None:
    got = acc.zeros(3)
    w = dist.irecv(got)
    sent = dist.isend(acc.full((3,), 7.0), dst=0)
    while not w.is_completed():
        pass
    assert w.source_rank() == 0 and w.wait() and got.tolist() == [7.0] * 3
    assert sent.wait()


@needs_mpi
def test_the_group_forgets_completed_point_to_point_work(one_rank_world: None) -> None:
    g = dist.group.WORLD
    for _ in range(3):
        out = acc.zeros(2)
        dist.isend(acc.ones(2), dst=0)
        dist.irecv(out, src=0).wait()
    dist.isend(acc.ones(2), dst=0)   # (its post reaps the completed ones before it)
    assert len(g._in_flight) <= 2
    dist.irecv(acc.zeros(2), src=0).wait()


# ---------------------------------------------------------------------- stores

@pytest.mark.parametrize("world_size", [1.5, "2", None, True, np.float64(1.0)])
def test_store_barrier_refuses_a_world_size_that_is_no_int(world_size: object) -> None:
    s = dist.HashStore()
    s.set_timeout(datetime.timedelta(seconds=30))   # (it waited this long before)
    with pytest.raises(TypeError, match="world_size must be an int, got"):
        s.barrier("b", world_size)  # type: ignore[arg-type]


@pytest.mark.parametrize("world_size", [0, -1])
def test_store_barrier_refuses_a_world_size_below_one(world_size: int) -> None:
    with pytest.raises(ValueError, match="world_size must be at least 1"):
        dist.HashStore().barrier("b", world_size)


def test_store_barrier_of_one() -> None:
    s = dist.HashStore()
    s.barrier("b", np.int64(1))  # type: ignore[arg-type]
    assert s.check(["b/last_member"])


@pytest.mark.parametrize("values", ["ab", b"ab", {"a": 1}, 7])
def test_multi_set_refuses_values_that_are_no_list(values: object, tmp_path: object) -> None:
    # torch 2.15: TypeError (incompatible function arguments) for each
    for store in (dist.HashStore(), dist.PrefixStore("p/", dist.HashStore())):
        with pytest.raises(TypeError, match="values must be a list of str or bytes"):
            store.multi_set(["a", "b"], values)  # type: ignore[arg-type]
        assert not store.check(["a"])


@pytest.mark.parametrize("is_master", ["False", "", 1, 0.0, None, [1], np.int64(1)])
def test_tcpstore_is_master_must_be_a_bool(is_master: object) -> None:
    # torch 2.15: TypeError (incompatible constructor arguments); True, False and numpy
    # bools are taken
    with pytest.raises(TypeError, match="is_master must be a bool, got"):
        dist.TCPStore("127.0.0.1", 0, 1, is_master,  # type: ignore[arg-type]
                      datetime.timedelta(seconds=5), wait_for_workers=False)


@pytest.mark.parametrize("flag", ["wait_for_workers", "multi_tenant", "use_libuv"])
@pytest.mark.parametrize("value", ["1", "", b"1", [1], (1,), object()])
def test_tcpstore_flags_refuse_what_has_no_truth_value_of_its_own(flag: str,
                                                                   value: object) -> None:
    with pytest.raises(TypeError, match=f"{flag} must be a bool, got"):
        dist.TCPStore("127.0.0.1", 0, 1, True, datetime.timedelta(seconds=5),
                      **{"wait_for_workers": False, flag: value})


@pytest.mark.parametrize("value", [None, 0, 1, 2.5, np.True_])
def test_tcpstore_flags_take_numbers_and_none_as_torch(value: object) -> None:
    s = dist.TCPStore("127.0.0.1", 0, 1, np.True_, datetime.timedelta(seconds=5),
                      wait_for_workers=False, multi_tenant=value, use_libuv=value)
    s.set("k", b"v")
    assert s.get("k") == b"v"
    s.close()


# ---------------------------------------------------------------------- rebuild_array

_REBUILD = """
import accelrt as acc
from accelrt.multiprocessing import reductions as red

a = acc.full((4,), 3.0)

def fresh():
    return red.reduce_array(a)[1]

def case(change):
    version, meta, shared = fresh()
    try:
        b = red.rebuild_array(*change(version, list(meta), list(shared)))
        print("returned", b.tolist())
    except Exception as e:
        print(type(e).__name__, e)
    finally:
        try:   # the reduction's pickle, consumed (else it stays in flight)
            red.rebuild_array(version, meta, shared)
        except Exception:
            pass

def shared_with(i, value):
    def change(version, meta, shared):
        shared[i] = value
        return version, tuple(meta), tuple(shared)
    return change

def meta_with(i, value):
    def change(version, meta, shared):
        meta[i] = value
        return version, tuple(meta), tuple(shared)
    return change

case(shared_with(2, 1.5))          # offset
case(shared_with(2, float("nan")))
case(shared_with(1, float("inf")))  # segment size
case(shared_with(7, 7))            # event handle
case(shared_with(6, "token"))
case(meta_with(2, "<U1"))          # dtype
case(meta_with(1, (4.0,)))         # shape
case(lambda v, m, s: (True, tuple(m), tuple(s)))
case(lambda v, m, s: (v, tuple(m), tuple(s)))
"""


def test_rebuild_array_refuses_a_malformed_pickle() -> None:
    r = _run(_REBUILD, ACCELRT_CPU_SHARED_MEMORY="1")
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert len(lines) == 9, r.stdout
    want = ["its offset is 1.5, not an int", "its offset is nan, not an int",
            "its segment size is inf, not an int", "its event handle is 7, not bytes or None",
            "its token is 'token', not bytes", "dtype <U1 is not supported",
            "its shape is tuple, not a tuple of non-negative ints"]
    for line, text in zip(lines, want):
        assert line.startswith("ValueError malformed shared-array pickle: "), line
        assert text in line, (line, text)
    assert lines[7] == ("ValueError not an accelrt shared-array pickle (version True); the "
                        "sender and receiver must run the same accelrt")
    assert lines[8] == "returned [3.0, 3.0, 3.0, 3.0]"
