"""accelrt.testing.SimulatedBackend, the one fake device: capacity, virtual memory switch and
granularity, call counting, completion on demand, host functions, handles, layout, names.

(Its raw contract is checked by tests/backends/test_conformance.py in both completion modes;
the replay-specific address tests stay in tests/tools/test_replay.py.)"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import pytest

from accelrt import DeviceError, backends
from accelrt.testing import _simulated
from accelrt.testing import CALL_NAMES, SimulatedBackend

MiB = 1 << 20


def test_the_package_path_and_the_public_name_are_one_class() -> None:
    assert _simulated.SimulatedBackend is SimulatedBackend
    assert set(_simulated.CALL_NAMES) == set(CALL_NAMES)


def test_event_stays_pending_until_its_stream_completes() -> None:
    b = SimulatedBackend(auto_complete=False)
    s, other = b.stream_create(0, 0), b.stream_create(0, 0)
    e = b.event_create(0, False, False, False)
    assert b.event_query(0, e) is True                  # never recorded
    b.launch_work(s)
    b.event_record(0, e, s)
    assert b.event_query(0, e) is False and b.stream_query(0, s) is False
    b.complete_stream(other)                            # another stream: nothing changes
    assert b.event_query(0, e) is False
    b.complete_stream(s)
    assert b.event_query(0, e) is True and b.stream_query(0, s) is True
    assert b.last_record(e) == (0, s)
    b.event_destroy(0, e)
    for h in (s, other):
        b.stream_destroy(0, h)


def test_event_synchronize_completes_only_up_to_the_event() -> None:
    b = SimulatedBackend(auto_complete=False)
    s = b.stream_create(0, 0)
    e = b.event_create(0, False, False, False)
    b.memcpy(0, 4096, 8192, 16, "d2d", s)
    b.event_record(0, e, s)
    b.memset(0, 4096, 0, 16, s)                          # queued after the event
    b.event_synchronize(0, e)
    assert b.event_query(0, e) is True
    assert b.stream_query(0, s) is False                 # the memset is still pending
    b.stream_synchronize(0, s)
    assert b.stream_query(0, s) is True
    b.event_destroy(0, e)
    b.stream_destroy(0, s)


def test_synchronize_completes_destroyed_streams_of_its_device_only() -> None:
    b = SimulatedBackend(device_count=2, auto_complete=False)
    s0, s1 = b.stream_create(0, 0), b.stream_create(1, 0)
    b.launch_work(s0, 0)
    b.launch_work(s1, 1)
    b.stream_destroy(0, s0)
    assert not b.stream_is_valid(0, s0) and b.stream_is_valid(1, s1)
    b.synchronize(0)
    assert b.stream_query(0, s0) is True and b.stream_query(1, s1) is False
    b.complete_all()
    assert b.stream_query(1, s1) is True
    b.stream_destroy(1, s1)


def test_auto_complete_finishes_everything_at_once() -> None:
    b = SimulatedBackend()
    s = b.stream_create(0, 0)
    e = b.event_create(0, False, False, False)
    b.launch_work(s)
    b.event_record(0, e, s)
    assert b.event_query(0, e) is True and b.stream_query(0, s) is True
    b.event_destroy(0, e)
    b.stream_destroy(0, s)


def test_host_functions_run_in_stream_order_when_the_work_completes() -> None:
    b = SimulatedBackend(auto_complete=False)
    s = b.stream_create(0, 0)
    ran: list[int] = []
    b.launch_work(s)
    b.launch_host_func(0, lambda: ran.append(1), s)
    e = b.event_create(0, False, False, False)
    b.event_record(0, e, s)
    b.launch_host_func(0, lambda: ran.append(2), s)
    assert ran == []                                     # nothing completed yet
    b.event_synchronize(0, e)
    assert ran == [1]                                    # the second one is after the event
    b.complete_stream(s)
    assert ran == [1, 2]
    b.event_destroy(0, e)
    b.stream_destroy(0, s)


def test_a_host_function_exception_is_raised_once_by_the_next_sync() -> None:
    b = SimulatedBackend(auto_complete=False)
    s = b.stream_create(0, 0)

    def boom() -> None:
        raise ValueError("first")

    b.launch_host_func(0, boom, s)
    b.launch_host_func(0, lambda: (_ for _ in ()).throw(KeyError("second")), s)
    with pytest.raises(DeviceError, match="ValueError: first") as info:
        b.stream_synchronize(0, s)
    assert isinstance(info.value.__cause__, ValueError)
    b.stream_synchronize(0, s)                            # raised once only
    b.synchronize(0)
    b.stream_destroy(0, s)


def test_calls_are_counted_per_device_and_operation() -> None:
    b = SimulatedBackend(capacity=4 * MiB, device_count=2)
    assert b.malloc(1, 8 * MiB) == 0                      # a failed call is not counted
    p = b.malloc(1, MiB)
    b.free(1, p)
    s = b.stream_create(1, 0)
    b.stream_synchronize(1, s)
    b.stream_destroy(1, s)
    assert b.calls(0) == dict.fromkeys(CALL_NAMES, 0)
    one = b.calls(1)
    assert (one["malloc"], one["free"], one["stream_create"], one["stream_synchronize"],
            one["stream_destroy"]) == (1, 1, 1, 1, 1)
    assert set(one) == set(CALL_NAMES)


def test_capacity_bytes_in_use_and_reservations() -> None:
    b = SimulatedBackend(capacity=8 * MiB, granularity=4 * MiB)
    assert b.vm_granularity(0) == 4 * MiB
    p = b.malloc(0, 3 * MiB)
    base = b.vm_reserve(0, 8 * MiB)
    assert b.reservations == {base: 8 * MiB} and base % (4 * MiB) == 0
    assert b.vm_map(0, base, 4 * MiB) is True
    assert b.used == 7 * MiB and b.get_memory_info(0) == (1 * MiB, 8 * MiB)
    assert b.vm_map(0, base + 4 * MiB, 4 * MiB) is False   # beyond the capacity
    with pytest.raises(ValueError, match="4194304-byte granularity"):
        b.vm_map(0, base + 2 * MiB, 2 * MiB)
    b.vm_unmap(0, base, 4 * MiB)
    b.vm_release(0, base, 8 * MiB)
    b.free(0, p)
    assert b.used == 0 and b.reservations == {}


def test_vm_switch_turns_virtual_memory_off() -> None:
    b = SimulatedBackend(vm=False)
    assert b.capabilities(0).virtual_memory is False and not b.vm_supported(0)
    for call in (lambda: b.vm_granularity(0), lambda: b.vm_reserve(0, 2 * MiB)):
        with pytest.raises(NotImplementedError, match="vm=False"):
            call()


def test_host_capacity_limits_pinned_memory() -> None:
    b = SimulatedBackend(host_capacity=4096)
    h = b.host_malloc(4096)
    assert h and b.host_malloc(1) == 0 and b.host_bytes() == 4096
    b.host_free(h)
    assert b.host_malloc(1) != 0


def test_the_address_layout_is_deterministic() -> None:
    def run() -> list[int]:
        b = SimulatedBackend(device_count=2)
        out = [b.malloc(i, n) for i in (0, 1) for n in (1, 1000, 3 * MiB)]
        b.free(0, out[1])
        out.append(b.malloc(0, 10))                       # the bump pointer goes on
        out.append(b.vm_reserve(1, 2 * MiB))
        return out

    first = run()
    assert first == run()
    assert first[:4] == [1 << 44, (1 << 44) + 512, (1 << 44) + 1536, 2 << 44]
    assert first[-1] == (2 << 44) + (1 << 43)


def test_pinned_host_memory_is_real_memory() -> None:
    """The core reads and writes pinned memory on the host (staging, ``numpy()``): fake
    addresses there crashed the interpreter."""
    b = SimulatedBackend()
    h = b.host_malloc(100)
    assert h % 512 == 0
    ctypes.memset(h, 0x5A, 100)
    assert ctypes.string_at(h, 100) == b"\x5a" * 100
    assert b.host_bytes() == 100
    b.host_free(h)
    assert b.host_bytes() == 0


def test_arrays_on_the_simulated_backend_never_crash_the_interpreter() -> None:
    code = (
        "import numpy as np, accelrt as acc\n"
        "from accelrt.testing import SimulatedBackend\n"
        "acc.backends.register('simcrash', lambda: SimulatedBackend(name='simcrash'))\n"
        "x = acc.zeros(1000, device='simcrash:0')\n"
        "assert x.numpy().shape == (1000,)\n"            # the device holds no data
        "x.copy_(np.arange(1000, dtype=np.float32))\n"
        "x.copy_(np.arange(1000, dtype=np.float32), non_blocking=True)\n"
        "assert x.to('cpu').shape == (1000,)\n"
        "assert len(acc.asarray(np.ones(10), device='simcrash:0').tolist()) == 10\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.returncode, out.stderr)


def test_live_handles_count_what_is_not_destroyed() -> None:
    b = SimulatedBackend()
    s = b.stream_create(0, 0)
    e = b.event_create(0, False, False, False)
    assert b.live_handles() == {"streams": 1, "events": 1, "graphs": 0}
    b.event_destroy(0, e)
    b.stream_destroy(0, s)
    assert b.live_handles() == {"streams": 0, "events": 0, "graphs": 0}
    with pytest.raises(ValueError, match="not a live event"):
        b.event_query(0, e)


def test_name_priorities_and_registration() -> None:
    b = SimulatedBackend(name="simnamed", device_count=2, priority_range=(0, -3))
    assert b.name == "simnamed" and SimulatedBackend.name == "simulated"
    assert b.stream_priority_range(0) == (0, -3)
    backends.register("simnamed", lambda: b, replace=True)
    try:
        assert backends.get_backend("simnamed") is b
    finally:
        backends.unregister("simnamed")


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"granularity": 3 * MiB}, ValueError, "power of two"),
    ({"granularity": "2MiB"}, TypeError, "granularity must be an int"),
    ({"vm": 1}, TypeError, "vm must be a bool"),
    ({"auto_complete": None}, TypeError, "auto_complete must be a bool"),
    ({"host_capacity": -1}, ValueError, "host_capacity must be at least 0"),
    ({"priority_range": (-1, 0)}, ValueError, "greatest <= least"),
    ({"name": "Bad Name"}, ValueError, "lower-case identifier"),
])
def test_bad_arguments_name_the_problem(kwargs: dict, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        SimulatedBackend(**kwargs)


# ---------------------------------------------------------------- vm_map / vm_unmap books
@pytest.mark.parametrize("bad", [1.0 * (4 * MiB), "4194304", None, True, [4 * MiB], b"x"])
def test_vm_map_and_unmap_refuse_a_non_int_address_or_size(bad: object) -> None:
    b = SimulatedBackend(granularity=4 * MiB)
    base = b.vm_reserve(0, 16 * MiB)
    for call in (b.vm_map, b.vm_unmap):
        name = call.__name__
        with pytest.raises(TypeError, match=f"{name}: ptr must be an int, got"):
            call(0, bad, 4 * MiB)
        with pytest.raises(TypeError, match=f"{name}: size must be an int, got"):
            call(0, base, bad)
    assert b.used == 0 and b.calls(0)["vm_map"] == 0


def test_vm_map_takes_integer_types_and_books_ints() -> None:
    np = pytest.importorskip("numpy")
    b = SimulatedBackend(granularity=4 * MiB)
    base = b.vm_reserve(0, 16 * MiB)
    assert b.vm_map(0, np.uint64(base), np.int64(4 * MiB)) is True
    dev = b._devices[0]
    assert [type(p) for p in dev.map_starts] == [int] and type(dev.used) is int
    b.vm_unmap(0, np.int64(base), np.uint32(4 * MiB))
    assert b.used == 0 and dev.mappings == {}


class _PageModel:
    """vm_map/vm_unmap as sets of mappings: what each call must answer."""

    def __init__(self, reservations: dict[int, int], page: int, capacity: int) -> None:
        self.res, self.page, self.capacity = reservations, page, capacity
        self.maps: dict[int, int] = {}

    def _check(self, what: str, p: int, n: int) -> str | None:
        if p % self.page or n % self.page or n <= 0:
            return "granularity"
        if not any(r <= p and p + n <= r + s for r, s in self.res.items()):
            return "not inside a reservation"
        return None

    def map(self, p: int, n: int) -> object:
        err = self._check("vm_map", p, n)
        if err:
            return err
        if any(q < p + n and p < q + s for q, s in self.maps.items()):
            return "overlaps mapped pages"
        if sum(self.maps.values()) + n > self.capacity:
            return False
        self.maps[p] = n
        return True

    def unmap(self, p: int, n: int) -> object:
        err = self._check("vm_unmap", p, n)
        if err:
            return err
        pages = range(p, p + n, self.page)
        if not all(any(q <= x < q + s for q, s in self.maps.items()) for x in pages):
            return "not entirely mapped"
        inside = [q for q, s in self.maps.items() if q < p + n and p < q + s]
        if min(inside) != p or max(q + self.maps[q] for q in inside) != p + n:
            return "cuts a mapping"
        for q in inside:
            del self.maps[q]
        return len(inside)


def test_vm_books_agree_with_a_model_of_whole_mappings() -> None:
    """Random maps and unmaps (aligned or not, inside a reservation or across its end) give
    the model's answer, error and bookkeeping, call after call."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    page = 2 * MiB
    op = st.tuples(st.booleans(), st.integers(-2, 21), st.integers(-1, 8),
                   st.sampled_from([0, 0, 0, 1, page // 2]))

    @hypothesis.settings(max_examples=150, deadline=None)
    @hypothesis.given(st.lists(op, max_size=60))
    def run(ops: list[tuple[bool, int, int, int]]) -> None:
        b = SimulatedBackend(capacity=12 * page, granularity=page)
        r1, r2 = b.vm_reserve(0, 8 * page), b.vm_reserve(0, 8 * page)
        model = _PageModel({r1: 8 * page, r2: 8 * page}, page, 12 * page)
        for is_map, at, pages, skew in ops:
            p = (r1 if at < 10 else r2 - 10 * page) + at * page + skew
            n = pages * page
            want = model.map(p, n) if is_map else model.unmap(p, n)
            unmapped = b.calls(0)["vm_unmapped_mappings"]
            try:
                got: object = b.vm_map(0, p, n) if is_map else b.vm_unmap(0, p, n)
            except ValueError as e:
                assert isinstance(want, str) and want in str(e), (want, str(e))
                continue
            if not is_map:
                got = b.calls(0)["vm_unmapped_mappings"] - unmapped
            assert got == want
            assert b._devices[0].mappings == model.maps
            assert b._devices[0].map_starts == sorted(model.maps)
            assert b.used == sum(model.maps.values())

    run()
