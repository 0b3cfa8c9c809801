"""Review of the top-level ``torch.accelerator`` API, sync debug mode, ``Event.elapsed_time``
and pluggable allocators against PyTorch's behaviour (``torch/accelerator/__init__.py``,
``torch/accelerator/_utils.py``, ``torch/csrc/DeviceAccelerator.cpp``,
``torch.cuda.set_sync_debug_mode``, ``c10/core/impl/InlineEvent.h``,
``torch.cuda.memory.CUDAPluggableAllocator``) and hostile inputs: every argument form
(``None``, ints, numpy integers, bools, floats, strings, devices, negative and out-of-range
indices, other backends' devices), the ``device_index`` context manager nested, shared between
threads and left by an exception, the accepted and refused sync debug modes, the units and
errors of ``elapsed_time``, and pluggable libraries that are missing or lack their symbols."""

from __future__ import annotations

import ctypes
import itertools
import shutil
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.registry import DeviceLater, module_backends, resolve
from helpers.pluggable import numpy_allocator

import accelrt as acc
from helpers import run_in_thread
from accelrt import backends, memory
from accelrt.backends.cpu import CpuBackend

NAME = "rvacc25"     # four simulated devices; the current accelerator in the tests that ask
_backends = module_backends({NAME: lambda: CpuBackend(num_devices=4, name=NAME)})


@pytest.fixture
def four() -> str:
    acc.set_current_accelerator(NAME)
    return NAME




# ====================================================================== torch.accelerator

def test_device_count_availability_and_current_accelerator(four: str) -> None:
    assert acc.device_count() == 4
    assert acc.is_available() is True
    assert acc.current_accelerator() == acc.device(NAME)
    assert acc.current_accelerator().index is None  # type: ignore[union-attr]
    # torch reads check_available by its truth value (``if not check_available``)
    for flag in (True, 1, np.bool_(True), "yes", False, 0, None):
        assert acc.current_accelerator(flag) == acc.device(NAME)  # type: ignore[arg-type]
    assert acc.current_accelerator(check_available=True) == acc.device(NAME)
    with pytest.raises(TypeError):
        acc.device_count(0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        acc.is_available(NAME)  # type: ignore[call-arg]


@pytest.mark.parametrize(("arg", "index"), [
    (0, 0), (3, 3), (f"{NAME}:2", 2), (DeviceLater(NAME, 1), 1),
])
def test_set_device_index_takes_ints_strings_and_devices(four: str, arg: Any,
                                                        index: int) -> None:
    acc.set_device_index(resolve(arg))
    assert acc.current_device_index() == index
    assert run_in_thread(acc.current_device_index) == 0     # per thread, as CUDA's device


@pytest.mark.parametrize("arg", [-1, -5, -2**70])
def test_set_device_index_negative_is_a_no_op(four: str, arg: int) -> None:
    acc.set_device_index(2)
    acc.set_device_index(arg)
    assert acc.current_device_index() == 2


@pytest.mark.parametrize(("arg", "error", "match"), [
    (4, IndexError, r"^Device index value 4 is out of index range \[0, 4\)"),
    (2**70, IndexError, "out of index range"),
    (f"{NAME}:4", IndexError, "out of index range"),
    (None, ValueError, "^Expected a device with a specified index or an integer, but got: None$"),
    (NAME, ValueError, f"^Expected a device with a specified index or an integer, but got: {NAME}$"),
    (DeviceLater(NAME), ValueError, "with a specified index"),
    ("cpu:0", ValueError, f"^cpu doesn't match the current accelerator {NAME}\\.$"),
    (acc.device("cpu", 0), ValueError, "doesn't match the current accelerator"),
    ("opencl:0", ValueError, "doesn't match the current accelerator"),
    ("cuda:0", ValueError, "doesn't match the current accelerator"),
    ("", ValueError, "Device string must not be empty"),
    ("nope:0", acc.BackendUnavailableError, "Unknown backend 'nope'"),
])
def test_set_device_index_refusals_change_nothing(four: str, arg: Any, error: type,
                                                  match: str) -> None:
    acc.set_device_index(1)
    arg = resolve(arg)
    with pytest.raises(error, match=match):
        acc.set_device_index(arg)
    assert acc.current_device_index() == 1


@pytest.mark.parametrize("arg", [1.0, float("nan"), np.int64(1), np.int8(-1), True, False,
                                 np.bool_(True), [1], object()])
def test_set_device_index_of_another_type_is_a_type_and_value_error(four: str,
                                                                    arg: Any) -> None:
    """torch's ``_get_device_index(optional=False)`` raises ``ValueError`` ("Expected a
    torch.device with a specified index or an integer") for an argument that is neither an
    int, a str nor a device; accelrt's ``TypeError`` is that ``ValueError`` too."""
    acc.set_device_index(2)
    for call in (acc.set_device_index, acc.backends.device_module(NAME).set_device):
        with pytest.raises(TypeError, match="^expected a device, int, str or None, got") as info:
            call(arg)
        assert isinstance(info.value, ValueError)
    assert acc.current_device_index() == 2


def test_set_device_index_is_positional_only_and_the_aliases_warn(four: str) -> None:
    with pytest.raises(TypeError, match="positional"):
        acc.set_device_index(device=1)  # type: ignore[call-arg]
    with pytest.warns(FutureWarning, match="Use `set_device_index` instead"):
        acc.set_device_idx(3)
    with pytest.warns(FutureWarning, match="Use `current_device_index` instead"):
        assert acc.current_device_idx() == 3


@pytest.mark.parametrize("fn", [acc.synchronize, acc.current_stream, acc.memory_stats,
                                acc.memory_allocated, acc.max_memory_allocated,
                                acc.memory_reserved, acc.max_memory_reserved,
                                acc.reset_peak_memory_stats,
                                acc.reset_accumulated_memory_stats, acc.get_memory_info])
def test_device_functions_take_every_form_and_refuse_the_rest(four: str,
                                                              fn: Callable[..., Any]) -> None:
    acc.set_device_index(1)
    for ok in (None, 0, 3, f"{NAME}:2", NAME, acc.device(NAME, 3), acc.device(NAME),
               "cpu:0", "cpu", acc.device("cpu", 0), "opencl:0" if "opencl" in
               acc.backends.available() else "cpu"):
        fn(ok)                        # other backends' devices too: several live in a process
    with pytest.raises(TypeError, match="positional"):
        fn(device=0)
    for bad, error in ((-2, ValueError), (4, IndexError), (f"{NAME}:9", IndexError),
                       (1.0, TypeError), (True, TypeError), (np.int64(0), TypeError),
                       ("gpu:0", acc.BackendUnavailableError)):
        with pytest.raises(error):
            fn(bad)
    assert acc.current_device_index() == 1


def test_current_stream_of_each_form_is_that_devices_stream(four: str) -> None:
    acc.set_device_index(2)
    assert acc.current_stream().device == acc.device(NAME, 2)
    assert acc.current_stream(None) == acc.current_stream(2) == acc.current_stream(NAME)
    assert acc.current_stream(f"{NAME}:3").device_index == 3
    assert acc.current_stream("cpu:0").device_type == "cpu"


def test_synchronize_of_another_backends_device_waits_for_that_device(four: str) -> None:
    from helpers.gates import Gate
    other = "rvacc25a"
    backends.register(other, lambda: CpuBackend(num_devices=2, async_streams=True, name=other),
                      replace=True)
    s = acc.Stream(f"{other}:1")
    done = acc.Event(f"{other}:1")
    with Gate() as gate:
        acc.backends.get_backend(other).launch_host_func(1, gate, s.stream_id)
        done.record(s)
        assert not done.query()
        acc.synchronize(0)                  # the current accelerator's device: not waited for
        assert not done.query()
        gate.open()
        acc.synchronize(f"{other}:1")
        assert done.query()
    s.close()


def test_synchronize_is_a_no_op_on_a_device_never_initialised(four: str) -> None:
    from accelrt.testing import SimulatedBackend
    calls: list[tuple[str, int]] = []

    class Lazy(SimulatedBackend):
        name = "lazy25"

        def init_device(self, index: int) -> None:
            calls.append(("init", index))

        def synchronize(self, index: int) -> None:
            calls.append(("sync", index))

    backends.register("lazy25", lambda: Lazy(device_count=2), replace=True)
    try:
        acc.synchronize("lazy25:1")
        acc.set_current_accelerator("lazy25")
        acc.synchronize()
        assert calls == []                      # (torch: "no-op if not initialized")
        s = acc.Stream("lazy25:1")
        acc.synchronize("lazy25:1")
        assert calls == [("init", 1), ("sync", 1)]
        s.close()
    finally:
        backends.unregister("lazy25")


# ---------------------------------------------------------------------- device_index

@pytest.mark.parametrize("arg", [True, np.bool_(True), 1.0, np.float64(1.0), "1", f"{NAME}:1",
                                 DeviceLater(NAME, 1), [1]])
def test_device_index_refuses_what_is_not_an_int(four: str, arg: Any) -> None:
    arg = resolve(arg)
    # (torch's C++ DeviceIndex parameter also reads a bool by its value; accelrt refuses it,
    # as PyTorch's argument parser does for int arguments. A numpy integer is an int.)
    with pytest.raises(TypeError, match="^device_index\\(\\) takes an int or None, got"):
        acc.device_index(arg)


def test_device_index_none_negative_and_out_of_range(four: str) -> None:
    acc.set_device_index(2)
    for noop in (None, -1, -2**70):
        with acc.device_index(noop):
            assert acc.current_device_index() == 2
        assert acc.current_device_index() == 2
    with pytest.raises(IndexError, match="out of index range"):
        with acc.device_index(4):
            pytest.fail("entered an out-of-range device")
    with pytest.raises(TypeError, match="positional"):
        acc.device_index(device=1)  # type: ignore[call-arg]
    assert acc.current_device_index() == 2


def test_device_index_nested_and_left_by_exceptions(four: str) -> None:
    acc.set_device_index(1)
    with pytest.raises(KeyError):
        with acc.device_index(2):
            with acc.device_index(3):
                with acc.device_index(None):
                    assert acc.current_device_index() == 3
                raise KeyError("inner")
    assert acc.current_device_index() == 1
    with acc.device_index(0), pytest.raises(ZeroDivisionError):
        with acc.device_index(3):
            1 / 0  # noqa: B018
    assert acc.current_device_index() == 1


def test_device_index_in_threads_changes_only_that_thread(four: str) -> None:
    inside, leave = threading.Event(), threading.Event()
    seen: list[int] = []

    def worker() -> None:
        with acc.device_index(3):
            seen.append(acc.current_device_index())
            inside.set()
            leave.wait(30)
        seen.append(acc.current_device_index())

    t = threading.Thread(target=worker)
    acc.set_device_index(1)
    t.start()
    assert inside.wait(30)
    assert acc.current_device_index() == 1      # the worker's block leaves this thread alone
    leave.set()
    t.join(30)
    assert seen == [3, 0] and acc.current_device_index() == 1


def _shared_between_threads(ctx: Any) -> tuple[int, list[int]]:
    """Enter one context manager object in this thread (on device 1), then in a worker (on
    device 3) while it is still active here; leave it here first, then in the worker. Returns
    this thread's device afterwards and the worker's devices inside and afterwards."""
    main_in, worker_in, main_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[int] = []

    def worker() -> None:
        acc.set_device_index(3)
        main_in.wait(30)
        with ctx:
            seen.append(acc.current_device_index())
            worker_in.set()
            main_out.wait(30)
        seen.append(acc.current_device_index())

    t = threading.Thread(target=worker)
    t.start()
    acc.set_device_index(1)
    with ctx:
        main_in.set()
        assert worker_in.wait(30)
    main_out.set()
    t.join(30)
    return acc.current_device_index(), seen


def test_one_device_index_object_used_by_two_threads_restores_each_threads_device(
        four: str) -> None:
    # torch keeps one prev_idx per object, so the first thread to leave would get the other
    # thread's device back; each thread's entry restores that thread's own device here
    assert _shared_between_threads(acc.device_index(2)) == (1, [2, 3])


def test_one_device_module_context_used_by_two_threads_restores_each_threads_device(
        four: str) -> None:
    mod = acc.backends.device_module(NAME)
    assert _shared_between_threads(mod.device(2)) == (1, [2, 3])
    x = acc.zeros(1, device=f"{NAME}:2")
    assert _shared_between_threads(mod.device_of(x)) == (1, [2, 3])
    del x


@pytest.mark.parametrize("module", [False, True], ids=["device_index", "module_device"])
def test_one_context_object_hammered_by_many_threads_keeps_each_threads_device(
        four: str, module: bool) -> None:
    # threads switched every microsecond, entering and leaving one shared object: an entry
    # kept in fields shared by the threads was lost or taken by another thread (an exit then
    # restored the wrong device, or raised "without a matching __enter__")
    ctx = acc.backends.device_module(NAME).device(2) if module else acc.device_index(2)
    problems: list[tuple[Any, ...]] = []

    def worker(k: int) -> None:
        acc.set_device_index(k)
        try:
            for _ in range(6000):
                with ctx:
                    if acc.current_device_index() != 2:
                        problems.append(("inside", k, acc.current_device_index()))
                if acc.current_device_index() != k:
                    problems.append(("after", k, acc.current_device_index()))
                    acc.set_device_index(k)
        except Exception as exc:  # noqa: BLE001 - reported below
            problems.append(("raised", k, repr(exc)))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(k % 2 * 3,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert problems == [] and acc.current_device_index() == 0


def test_device_index_left_in_another_thread_changes_neither_thread(four: str) -> None:
    ctx = acc.device_index(2)
    acc.set_device_index(1)
    ctx.__enter__()
    run_in_thread(lambda: ctx.__exit__(None, None, None))   # no entry of that thread: no-op
    assert acc.current_device_index() == 2
    ctx.__exit__(None, None, None)
    assert acc.current_device_index() == 1
    ctx.__exit__(None, None, None)                        # exit without enter: no-op
    assert acc.current_device_index() == 1


def test_device_module_context_exit_without_enter_in_this_thread_is_an_error(
        four: str) -> None:
    ctx = acc.backends.device_module(NAME).device(2)
    ctx.__enter__()
    with pytest.raises(RuntimeError, match="without a matching __enter__"):
        run_in_thread(lambda: ctx.__exit__(None, None, None))
    ctx.__exit__(None, None, None)
    assert acc.current_device_index() == 0
    with acc.backends.device_module(NAME).device(-1):     # no-op, and its exit matches
        assert acc.current_device_index() == 0


def test_device_index_restores_the_backend_it_entered(four: str) -> None:
    acc.set_device_index(1)
    with acc.device_index(2):
        acc.set_current_accelerator("cpu")     # the current accelerator changes inside
    acc.set_current_accelerator(NAME)
    assert acc.current_device_index() == 1


# ====================================================================== sync debug mode

@pytest.fixture
def debug_mode() -> Iterator[None]:
    yield
    for name in ("cpu", NAME):
        acc.set_sync_debug_mode(0, name)


@pytest.mark.parametrize(("value", "mode"), [
    ("default", 0), ("warn", 1), ("error", 2), (0, 0), (1, 1), (2, 2), (np.int64(2), 2),
    (np.int8(1), 1),
])
def test_sync_debug_mode_accepted_forms(debug_mode: None, value: Any, mode: int) -> None:
    acc.set_sync_debug_mode(value, "cpu")
    assert acc.get_sync_debug_mode("cpu") == mode
    assert type(acc.get_sync_debug_mode("cpu")) is int


@pytest.mark.parametrize(("value", "error", "message"), [
    ("WARN", ValueError, "invalid value of debug_mode, expected one of `default`, `warn`, `error`"),
    ("", ValueError, "invalid value of debug_mode, expected one of `default`, `warn`, `error`"),
    ("warn ", ValueError, "invalid value of debug_mode, expected one of `default`, `warn`, `error`"),
    (3, ValueError, "invalid value of debug_mode, expected one of 0,1,2"),
    (-1, ValueError, "invalid value of debug_mode, expected one of 0,1,2"),
    (2**70, ValueError, "invalid value of debug_mode, expected one of 0,1,2"),
    (True, TypeError, "invalid argument to set_sync_debug_mode"),
    (np.bool_(False), TypeError, "invalid argument to set_sync_debug_mode"),
    (1.0, TypeError, "invalid argument to set_sync_debug_mode"),
    (None, TypeError, "invalid argument to set_sync_debug_mode"),
    (b"warn", TypeError, "invalid argument to set_sync_debug_mode"),
])
def test_sync_debug_mode_refusals_are_pytorchs_runtime_errors(debug_mode: None, value: Any,
                                                               error: type,
                                                               message: str) -> None:
    acc.set_sync_debug_mode("warn", "cpu")
    with pytest.raises(RuntimeError) as info:
        acc.set_sync_debug_mode(value, "cpu")
    assert str(info.value) == message and isinstance(info.value, error)
    assert acc.get_sync_debug_mode("cpu") == 1                # unchanged


def test_sync_debug_mode_device_type_checks(debug_mode: None) -> None:
    with pytest.raises(acc.BackendUnavailableError, match="Unknown backend 'nope'"):
        acc.set_sync_debug_mode(1, "nope")
    with pytest.raises(acc.BackendUnavailableError, match="Unknown backend 'cpu:0'"):
        acc.set_sync_debug_mode(1, "cpu:0")
    for bad in (0, acc.device("cpu")):
        with pytest.raises(TypeError, match="device_type must be a backend name"):
            acc.set_sync_debug_mode(1, bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="device_type must be a backend name"):
            acc.get_sync_debug_mode(bad)  # type: ignore[arg-type]
    assert acc.get_sync_debug_mode("cpu") == 0


@pytest.mark.parametrize("name", ["nope", "cpu:0", "CPU", ""])
def test_get_sync_debug_mode_of_an_unknown_backend_is_refused_as_set_refuses_it(
        name: str) -> None:
    # a typo must not read as "default"
    with pytest.raises(acc.BackendUnavailableError, match=f"Unknown backend {name!r}"):
        acc.get_sync_debug_mode(name)


def test_get_sync_debug_mode_of_a_registered_but_unusable_backend_is_0() -> None:
    """Reading the mode needs no device: a backend that cannot be used here (no driver) is
    in the default mode, and reading it does not raise."""
    from accelrt.testing import SimulatedBackend

    class Unusable(SimulatedBackend):
        name = "unusable25"

        @classmethod
        def unavailable_reason(cls) -> str | None:
            return "no driver"

    backends.register("unusable25", Unusable, replace=True)
    try:
        assert acc.get_sync_debug_mode("unusable25") == 0
        with pytest.raises(acc.BackendUnavailableError, match="no driver"):
            acc.set_sync_debug_mode(1, "unusable25")
    finally:
        backends.unregister("unusable25")


def test_sync_debug_mode_scope_per_backend_and_per_module(debug_mode: None, four: str) -> None:
    mod = acc.backends.device_module(NAME)
    mod.set_sync_debug_mode("warn")
    assert acc.get_sync_debug_mode() == 1                 # None: the current accelerator
    assert acc.get_sync_debug_mode(NAME) == mod.get_sync_debug_mode() == 1
    assert acc.get_sync_debug_mode("cpu") == acc.cpu.get_sync_debug_mode() == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc.Stream("cpu").synchronize()                   # cpu is in the default mode
    acc.set_sync_debug_mode("error")
    assert mod.get_sync_debug_mode() == 2
    acc.set_sync_debug_mode(0)
    assert mod.get_sync_debug_mode() == 0
    t = run_in_thread(lambda: (acc.set_sync_debug_mode(1, "cpu"), acc.get_sync_debug_mode("cpu")))
    assert t == (None, 1) and acc.get_sync_debug_mode("cpu") == 1   # process-wide


def test_sync_debug_warning_text_category_and_line(debug_mode: None) -> None:
    x = acc.zeros(2, device="cpu:0")
    acc.set_sync_debug_mode("warn", "cpu")
    with pytest.warns(UserWarning) as caught:
        x.tolist(); line = sys._getframe().f_lineno  # noqa: E702
    assert [str(w.message) for w in caught] == ["called a synchronizing CPU operation"]
    assert caught[0].filename == __file__ and caught[0].lineno == line
    acc.set_sync_debug_mode("error", "cpu")
    with pytest.raises(acc.AcceleratorError, match="^called a synchronizing CPU operation$"):
        x.numpy()
    acc.set_sync_debug_mode("default", "cpu")
    del x


def test_sync_debug_which_calls_synchronize(debug_mode: None) -> None:
    """torch.cuda checks stream synchronize and blocking host copies (``memcpy_and_sync``);
    accelrt adds device and event synchronize; queries, records, waits, device-to-device and
    non-blocking copies never wait."""
    x = acc.zeros(4, device="cpu:0")
    s = acc.Stream("cpu:0")
    e, unrecorded = acc.Event("cpu"), acc.Event("cpu")
    host = np.ones(4, np.float32)
    waits: dict[str, Callable[[], Any]] = {
        "synchronize()": acc.synchronize, "synchronize(cpu:0)": lambda: acc.synchronize("cpu:0"),
        "Stream.synchronize": s.synchronize, "Event.synchronize": e.synchronize,
        "numpy": x.numpy, "tolist": x.tolist, "np.asarray": lambda: np.asarray(x),
        "copy_ from numpy": lambda: x.copy_(host),
        "asarray copy": lambda: acc.asarray(host, device="cpu:0", copy=True),
    }
    silent: dict[str, Callable[[], Any]] = {
        "Stream.query": s.query, "Event.query": e.query, "Event.record": lambda: e.record(s),
        "Event.wait": lambda: e.wait(s), "wait_stream": lambda: s.wait_stream(s),
        "unrecorded Event.synchronize": unrecorded.synchronize,
        "to same device": lambda: x.to("cpu:0"), "fill_": lambda: x.fill_(1.0),
        "copy_ non_blocking": lambda: x.copy_(host, non_blocking=True),
        "zeros": lambda: acc.zeros(2, device="cpu:0"), "empty_cache": acc.empty_cache,
        "memory_stats": lambda: acc.memory_stats("cpu:0"),
    }
    e.record(s)
    acc.set_sync_debug_mode("warn", "cpu")
    for call in waits.values():
        with pytest.warns(UserWarning, match="synchronizing CPU operation"):
            call()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for call in silent.values():
            call()
    acc.set_sync_debug_mode("default", "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for call in waits.values():
            call()
    s.close()


# ====================================================================== Event.elapsed_time

def test_elapsed_time_is_float_milliseconds_of_the_host_interval() -> None:
    # the cpu backend's default stream runs work at once, so each record stamps the time of
    # the call: the interval lies between the busy loop's and the two calls' host intervals
    a, b = acc.Event("cpu", enable_timing=True), acc.Event("cpu", enable_timing=True)
    t0 = time.perf_counter()
    a.record()
    u0 = time.perf_counter()
    while time.perf_counter() - u0 < 0.02:
        pass
    u1 = time.perf_counter()
    b.record()
    t1 = time.perf_counter()
    b.synchronize()
    ms = a.elapsed_time(b)
    assert type(ms) is float
    assert (u1 - u0) * 1e3 <= ms <= (t1 - t0) * 1e3
    assert b.elapsed_time(a) == -ms and a.elapsed_time(a) == 0.0


@pytest.mark.skipif("opencl" not in acc.backends.available(), reason="no usable OpenCL device")
def test_elapsed_time_on_opencl_is_milliseconds() -> None:
    s = acc.Stream("opencl:0")
    a, b = acc.Event("opencl", enable_timing=True), acc.Event("opencl", enable_timing=True)
    t0 = time.perf_counter()
    a.record(s)
    b.record(s)
    b.synchronize()
    t1 = time.perf_counter()
    ms = a.elapsed_time(b)
    assert type(ms) is float and 0.0 <= ms <= (t1 - t0) * 1e3
    s.close()


def _recorded(device: str, stream: acc.Stream | None = None) -> acc.Event:
    e = acc.Event(device, enable_timing=True)
    e.record(stream)
    e.synchronize()
    return e


def test_elapsed_time_errors_in_pytorchs_order_and_classes(four: str) -> None:
    timed, plain = acc.Event(NAME, enable_timing=True), acc.Event(NAME)
    other = _recorded("cpu")
    # 1. device type (RuntimeError; accelrt's is a ValueError too)
    with pytest.raises(RuntimeError, match=f"^Event device type {NAME} does not match other's "
                                           "device type cpu\\.$"):
        timed.elapsed_time(other)
    # 2. timing (ValueError), before "recorded": neither is recorded here
    with pytest.raises(ValueError, match=r"^Both events must be created with argument "
                                         r"'enable_timing=True'\.$"):
        timed.elapsed_time(plain)
    # 3. recorded (ValueError)
    with pytest.raises(ValueError, match=r"^Both events must be recorded before calculating "
                                         r"elapsed time\.$"):
        timed.elapsed_time(acc.Event(NAME, enable_timing=True))
    # 4. devices of one backend (RuntimeError and ValueError)
    on0, on1 = _recorded(f"{NAME}:0"), _recorded(f"{NAME}:1", acc.current_stream(f"{NAME}:1"))
    with pytest.raises(RuntimeError, match="same device") as info:
        on0.elapsed_time(on1)
    assert isinstance(info.value, ValueError)
    # 5. wrong types (TypeError; torch's C++ would read any object as an event)
    for bad in (None, 0, 1.5, "e", acc.Stream(NAME), [on0]):
        with pytest.raises(TypeError, match=r"^elapsed_time\(\) takes an accelrt\.Event"):
            on0.elapsed_time(bad)  # type: ignore[arg-type]
    assert on0.elapsed_time(end_event=on0) == 0.0


def test_elapsed_time_of_events_not_completed_is_a_runtime_error() -> None:
    from helpers.gates import Gate
    name = "rvacc25b"
    backends.register(name, lambda: CpuBackend(num_devices=1, async_streams=True, name=name),
                      replace=True)
    s = acc.Stream(f"{name}:0")
    a = _recorded(f"{name}:0", s)
    b = acc.Event(f"{name}:0", enable_timing=True)
    with Gate() as gate:
        acc.backends.get_backend(name).launch_host_func(0, gate, s.stream_id)
        b.record(s)
        for pair in ((a, b), (b, a), (b, b)):
            with pytest.raises(RuntimeError, match=r"^Both events must be completed before "
                                                   r"calculating elapsed time\."):
                pair[0].elapsed_time(pair[1])
        gate.open()
        b.synchronize()
    assert a.elapsed_time(b) >= 0.0
    s.close()


def test_elapsed_time_of_interprocess_and_closed_events() -> None:
    ipc = acc.Event("cpu", interprocess=True)
    ipc.ipc_handle()                                      # created on the backend, not recorded
    timed = _recorded("cpu")
    with pytest.raises(ValueError, match="enable_timing=True"):
        timed.elapsed_time(ipc)
    with pytest.raises(ValueError, match="interprocess event cannot have enable_timing"):
        acc.Event("cpu", enable_timing=True, interprocess=True).record()
    closed = _recorded("cpu")
    closed.close()
    for a, b in ((timed, closed), (closed, timed)):
        with pytest.raises(acc.ClosedError):
            a.elapsed_time(b)


# ====================================================================== pluggable allocators

_names = itertools.count()


def _fresh_backend() -> str:
    """A new one-device cpu backend whose allocator is not initialized yet."""
    name = f"rvplug25_{next(_names)}"
    backends.register(name, lambda: CpuBackend(num_devices=1, name=name), replace=True)
    return name


C_SOURCE = r"""
#include <stdlib.h>
#include <sys/types.h>
static long live;
void *p25_alloc(ssize_t size, int device, void *stream) { live++; return malloc(size); }
void p25_free(void *ptr, ssize_t size, int device, void *stream) { live--; free(ptr); }
long p25_live(void) { return live; }
int p25_data = 1;
"""


@pytest.fixture(scope="module")
def plug_lib(tmp_path_factory: pytest.TempPathFactory) -> str:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the test allocator library")
    d = tmp_path_factory.mktemp("plug25")
    src, so = d / "p25.c", d / "libp25.so"
    src.write_text(C_SOURCE)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(so), str(src)], check=True,
                   capture_output=True, timeout=120)
    return str(so)


def test_a_missing_library_raises_pytorchs_oserror(tmp_path: Path) -> None:
    """torch's ``CUDAPluggableAllocator`` loads the library with ``ctypes.CDLL``, which raises
    ``OSError``; accelrt's ``ValueError`` (with the fix in its message) is that ``OSError``."""
    for path in (tmp_path / "missing.so", str(tmp_path / "missing.so"), "libnope25.so",
                 str(tmp_path)):
        with pytest.raises(OSError, match="cannot load the pluggable allocator library") as info:
            memory.PluggableAllocator(path, "p25_alloc", "p25_free")
        assert isinstance(info.value, ValueError)
    (tmp_path / "text.so").write_text("not a library")
    with pytest.raises(OSError, match="cannot load"):
        memory.PluggableAllocator(tmp_path / "text.so", "p25_alloc", "p25_free")


@pytest.mark.parametrize("path", ["", "lib\0x.so"])
def test_an_empty_path_or_one_with_a_nul_is_refused(path: str) -> None:
    # ctypes.CDLL("") would load the program itself (dlopen(NULL)), whose malloc/free then
    # pass for an allocator; a NUL would end the path early
    with pytest.raises(OSError, match="cannot load the pluggable allocator library") as info:
        memory.PluggableAllocator(path, "malloc", "free")
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(("alloc", "free", "what"), [
    ("nope", "p25_free", "alloc"), ("p25_alloc", "nope", "free"), ("", "p25_free", "alloc"),
    ("__init__", "p25_free", "alloc"), ("_handle", "p25_free", "alloc"),
    ("p25_alloc", "_name", "free"), ("__getattr__", "p25_free", "alloc"),
])
def test_a_missing_symbol_raises_pytorchs_attributeerror(plug_lib: str, alloc: str, free: str,
                                                         what: str) -> None:
    """torch looks the functions up with ``getattr(CDLL, name)``: ``AttributeError``. Names
    of the ``CDLL`` object's own attributes (``_handle``, ``__init__``) are symbols too."""
    with pytest.raises(AttributeError, match=f"has no {what} function") as info:
        memory.PluggableAllocator(plug_lib, alloc, free)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(("alloc", "free"), [("p25_alloc\0x", "p25_free"),
                                             ("p25_alloc", "p25_free\0")])
def test_a_function_name_with_a_nul_is_refused_not_cut_short(plug_lib: str, alloc: str,
                                                             free: str) -> None:
    # dlsym would read "p25_alloc\0x" as "p25_alloc" and find it
    with pytest.raises(ValueError, match="NUL"):
        memory.PluggableAllocator(plug_lib, alloc, free)


def _has_dladdr1() -> bool:
    """glibc's ``dladdr1`` (which reads a symbol's ELF type) is there, in a 64-bit process."""
    for lib in (None, "libdl.so.2"):
        try:
            ctypes.CDLL(lib)["dladdr1"]
        except (OSError, AttributeError):
            continue
        return ctypes.sizeof(ctypes.c_void_p) == 8
    return False


def test_a_variable_named_as_a_function_is_refused_instead_of_crashing(plug_lib: str) -> None:
    """torch would call a variable's address as ``alloc`` and crash the process (SIGSEGV); the
    name is refused when the library is loaded (the check runs in a subprocess: before it,
    the allocation below killed the interpreter)."""
    if not _has_dladdr1():
        pytest.skip("this C library cannot tell variables from functions (no dladdr1)")
    code = f"""
import accelrt as acc
from accelrt import backends, memory
from accelrt.backends.cpu import CpuBackend
backends.register("var25", lambda: CpuBackend(name="var25"), replace=True)
for names in (("p25_data", "p25_free"), ("p25_alloc", "p25_data")):
    try:
        plug = memory.PluggableAllocator({plug_lib!r}, *names)
    except ValueError as exc:
        print("refused:", exc)
        continue
    memory.change_current_allocator(plug, "var25")
    x = acc.zeros(4, device="var25:0")
    del x
    print("allocated")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert out.stdout.splitlines() == [
        f"refused: 'p25_data' in the pluggable allocator library {plug_lib!r} is a variable, "
        f"not a function: calling it would crash the process; pass the name of its {what} "
        "function" for what in ("alloc", "free")]


def test_a_library_allocator_replaces_and_then_cannot_be_swapped(plug_lib: str) -> None:
    name = _fresh_backend()
    plug = memory.PluggableAllocator(plug_lib, "p25_alloc", "p25_free")
    live = ctypes.CDLL(plug_lib).p25_live
    memory.change_current_allocator(plug, name)
    assert memory.get_allocator_backend(name) == "pluggable"
    with pytest.raises(RuntimeError, match="^Can't swap an already initialized allocator$"):
        memory.change_current_allocator(plug, name)
    before = live()
    x = acc.full(8, 3, dtype="int32", device=f"{name}:0")
    assert live() == before + 1 and x.tolist() == [3] * 8
    del x
    assert live() == before


def test_change_current_allocator_after_the_allocator_was_used_is_refused(
        plug_lib: str) -> None:
    name = _fresh_backend()
    memory.caching_allocator_delete(memory.caching_allocator_alloc(64, f"{name}:0"))
    plug = memory.PluggableAllocator(plug_lib, "p25_alloc", "p25_free")
    with pytest.raises(RuntimeError, match="^Can't swap an already initialized allocator$"):
        memory.change_current_allocator(plug, name)
    assert memory.get_allocator_backend(name) == "native"
    assert memory.memory_stats(f"{name}:0")["num_device_alloc"] == 1   # still the caching one


def test_memory_functions_under_a_pluggable_allocator_answer_as_pytorchs() -> None:
    """Before the first allocation the statistics are empty (torch: nothing initialized);
    afterwards they raise ``CUDAPluggableAllocator``'s "does not yet support" errors;
    ``empty_cache`` and the memory fraction setter do nothing; ``get_memory_info`` asks the
    device."""
    plug, held = numpy_allocator()
    name = _fresh_backend()
    dev = f"{name}:0"
    memory.change_current_allocator(plug, name)
    assert memory.memory_stats(dev) == {} and memory.memory_allocated(dev) == 0
    assert memory.max_memory_reserved(dev) == 0
    x = acc.zeros(16, device=dev)
    for fn, what in ((memory.memory_stats, "getDeviceStats"),
                     (memory.memory_allocated, "getDeviceStats"),
                     (memory.max_memory_allocated, "getDeviceStats"),
                     (memory.memory_reserved, "getDeviceStats"),
                     (memory.memory_summary, "getDeviceStats"),
                     (memory.reset_peak_memory_stats, "resetPeakStats"),
                     (memory.reset_accumulated_memory_stats, "resetAccumulatedStats")):
        with pytest.raises(RuntimeError, match=f"does not yet support {what}\\. If you need it"):
            fn(dev)
    memory.set_per_process_memory_fraction(0.5, dev)
    acc.backends.device_module(name).empty_cache()
    free, total = memory.get_memory_info(dev)
    assert 0 < free <= total
    assert len(held) == 1 and x.data_ptr() in held
    del x
    assert held == {}
