"""Backends registered from tests through the public registry, and device-specific modules
(``accelrt.cpu`` and ``accelrt.backends.device_module``)."""

from __future__ import annotations

import gc
import inspect
import uuid
import weakref

import pytest
from helpers import register_toy

import accelrt as acc
from accelrt import _backend, _runtime
from accelrt.backends.cpu import CpuBackend
from accelrt._stream_core import _POOL_MAX
from accelrt.testing import SimulatedBackend, leak_check


class _Unusable(SimulatedBackend):
    name = "unusable_dev"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return "no driver installed; install the frobnicator"


def test_registered_lists_builtins_first() -> None:
    names = acc.backends.registered()
    assert names[:3] == ["cuda", "opencl", "cpu"]
    assert "cpu" in acc.backends.available()


def test_register_validation() -> None:
    with pytest.raises(TypeError, match="must be a str"):
        acc.backends.register(3, CpuBackend)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lower-case identifier"):
        acc.backends.register("Bad-Name", CpuBackend)
    with pytest.raises(TypeError, match="must be callable"):
        acc.backends.register("okname", 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already registered"):
        acc.backends.register("cpu", CpuBackend)


def test_backend_registered_under_another_name_than_its_own_is_refused() -> None:
    # a "misnamed" instance would hand out objects of another device type ("cpu:0" for
    # "wrongname:0") and share that backend's per-name state (allocators, current device)
    acc.backends.register("wrongname", lambda: CpuBackend(), replace=True)
    try:
        with pytest.raises(acc.BackendUnavailableError,
                           match="named 'cpu', not 'wrongname'.*name='wrongname'"):
            acc.backends.get_backend("wrongname")
        with pytest.raises(acc.BackendUnavailableError):
            acc.Stream("wrongname:0")
    finally:
        _backend._factories.pop("wrongname", None)
        _backend._reset_for_tests("wrongname")


def test_unknown_backend_names_the_known_ones() -> None:
    with pytest.raises(acc.BackendUnavailableError, match="known backends are 'cuda'"):
        acc.backends.get_backend("nosuch")
    with pytest.raises(LookupError):
        acc.Stream("nosuch")


def test_cpu_subclass_under_another_name_runs_the_runtime() -> None:
    class Mine(CpuBackend):
        name = "mine"

    acc.backends.register("mine", lambda: Mine(num_devices=2, name="mine"), replace=True)
    acc.set_current_accelerator("mine")
    assert acc.current_accelerator() == acc.device("mine") and acc.device_count() == 2
    s = acc.Stream(1)
    with s:
        assert acc.current_device_index() == 1 and acc.current_stream() == s
        e = acc.Event(enable_timing=True)
        e.record()
    assert e.device == acc.device("mine", 1)
    acc.synchronize(1)
    assert e.query()
    assert acc.current_device_index() == 0


def test_replacing_a_backend_invalidates_cached_default_streams() -> None:
    name, first = register_toy()
    d1 = acc.current_stream(f"{name}:0")
    second = type(first)(name=name)
    acc.backends.register(name, lambda: second, replace=True)
    d2 = acc.current_stream(f"{name}:0")
    assert d2._b is second and d1 != d2


def test_replacing_the_current_accelerator_takes_effect_for_int_and_none_devices() -> None:
    name, first = register_toy()
    acc.set_current_accelerator(name)
    assert acc.Stream()._b is first
    second = type(first)(name=name)
    acc.backends.register(name, lambda: second, replace=True)
    assert acc.current_accelerator() == acc.device(name)
    assert acc.Stream()._b is second and acc.Event(0)._b is second
    assert acc.current_stream()._b is second and acc.current_stream(0)._b is second
    assert acc.Stream(f"{name}:0")._b is second


def test_unusable_backend_reports_reason() -> None:
    acc.backends.register("unusable_dev", _Unusable, replace=True)
    reason = acc.backends.unavailable_reason("unusable_dev")
    assert reason is not None and "frobnicator" in reason
    assert "unusable_dev" not in acc.backends.available()
    with pytest.raises(acc.BackendUnavailableError, match="frobnicator"):
        acc.set_current_accelerator("unusable_dev")


def test_device_module_on_unusable_backend() -> None:
    acc.backends.register("unusable_dev", _Unusable, replace=True)
    m = acc.backends.device_module("unusable_dev")
    assert m.is_available() is False
    assert m.device_count() == 0
    assert m.is_initialized() is False
    assert "frobnicator" in (m.unavailable_reason() or "")
    for fn in (m.current_stream, m.current_device, m.synchronize, m.get_device_properties,
               m.get_device_capability, m.Stream, m.init):
        with pytest.raises(acc.BackendUnavailableError, match="frobnicator"):
            fn()
    with pytest.raises(acc.BackendUnavailableError, match="frobnicator"):
        m.set_device(0)
    with pytest.raises(acc.BackendUnavailableError, match="frobnicator"), m.device(0):
        pass
    with m.device(None), m.device(-1):  # no-ops never touch the backend
        pass


def test_device_module_checks_its_argument() -> None:
    with pytest.raises(TypeError, match="takes a backend name"):
        acc.backends.device_module(1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no backend named 'nope'"):
        acc.backends.device_module("nope")
    assert acc.backends.device_module("cpu") is acc.backends.device_module("cpu")
    with pytest.raises(TypeError, match="backend_name must be a str"):
        _runtime.DeviceModule(1, "x", stream=acc.cpu.Stream,  # type: ignore[arg-type]
                               external_stream=acc.cpu.ExternalStream, event=acc.cpu.Event, stream_context=acc.cpu.StreamContext,
                               device=acc.cpu.device, device_of=acc.cpu.device_of,
                               device_index=acc.cpu.device_index, graph_class=acc.cpu.Graph,
                               graph=acc.cpu.graph)


def test_bound_functions_ignore_current_accelerator() -> None:
    name, _toy = register_toy(num_devices=3)
    acc.set_current_accelerator(name)
    acc.set_device_index(2)
    assert acc.cpu.current_device_index() == 0
    acc.cpu.set_device_index(0)
    assert acc.current_device_index() == 2
    assert acc.cpu.current_stream().device_type == "cpu"
    assert acc.cpu.Stream().device == acc.device("cpu", 0)
    ev = acc.cpu.Event()
    assert ev.device is None  # no device until recorded (PyTorch); then a cpu one
    ev.record()
    assert ev.device == acc.device("cpu", 0)
    with acc.cpu.device_index(0):
        assert acc.current_device_index() == 2
    with pytest.raises(IndexError):
        acc.cpu.Stream(acc.cpu.device_count())  # a cpu index, whatever the current accelerator
    with pytest.raises(ValueError, match=f"Expected a cpu device, but got: {name}:0"):
        acc.cpu.current_stream(f"{name}:0")
    with pytest.raises(ValueError, match="takes a cpu stream"):
        acc.cpu.set_stream(acc.Stream())
    with pytest.raises(TypeError):
        acc.cpu.set_stream(3)  # type: ignore[arg-type]


def test_acc_cpu_module_api() -> None:
    assert acc.cpu.is_available() is True and acc.cpu.unavailable_reason() is None
    assert acc.cpu.device_count() >= 1
    s = acc.cpu.Stream()
    assert isinstance(s, acc.Stream)
    with s:
        assert acc.cpu.current_stream() == s
    acc.cpu.set_stream(s)
    assert acc.current_stream("cpu") == s
    acc.cpu.synchronize()
    acc.cpu.synchronize(0)
    assert acc.cpu.memory_limit() == acc.cpu.get_device_properties(0)["total_memory"]
    assert "float32" in acc.cpu.get_device_capability("cpu:0")["supported_dtypes"]
    acc.cpu.set_device_index(-5)  # no-op
    with pytest.raises(ValueError, match="Expected a device with a specified index"):
        acc.cpu.set_device_index(None)
    with pytest.raises(ValueError, match="Expected a cpu device, but got: cuda:0"):
        acc.cpu.memory_limit("cuda:0")
    with pytest.raises(TypeError):
        acc.cpu.memory_limit(0.5)
    for n in acc.cpu.__all__:
        assert getattr(acc.cpu, n).__doc__, n


def test_acc_cpu_memory_limit_from_env_in_subprocess() -> None:
    import os
    import subprocess
    import sys
    code = "import accelrt as acc; print(acc.cpu.memory_limit(1), acc.cpu.device_count())"
    env = {**os.environ, "ACCELRT_CPU_MEMORY": "3MiB", "ACCELRT_CPU_DEVICES": "2"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,  # noqa: PLW1510
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(3 << 20), "2"]


def test_memory_functions_with_device_are_bound_in_acc_cpu() -> None:
    try:
        import accelrt.memory as mem
    except ImportError:  # pragma: no cover - memory package missing
        pytest.skip("accelrt.memory is not importable")
    for n in getattr(mem, "__all__", []):
        fn = getattr(mem, n, None)
        if inspect.isfunction(fn) and "device" in inspect.signature(fn).parameters:
            assert n in acc.cpu.__all__, n


def test_acc_cpu_docstring_examples_run() -> None:
    import doctest
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    ran = 0
    for n in acc.cpu.__all__:
        for t in finder.find(getattr(acc.cpu, n), f"accelrt.cpu.{n}", globs={}):
            if t.examples:
                ran += 1
                result = runner.run(t, out=lambda s: None)
                assert result.failed == 0, f"accelrt.cpu.{n} example failed"
    assert ran >= 12


@pytest.mark.parametrize("candidate", [True, False])
def test_default_choice_skips_backends_that_opt_out(monkeypatch, candidate):
    # A CPU-only OpenCL platform opts out of the default choice this way; an explicit
    # ACCELRT_ACCELERATOR still selects it.
    from accelrt import _backend, _device

    class OptOut(CpuBackend):
        def default_candidate(self) -> bool:
            return candidate

    acc.backends.register("optoutdev", lambda: OptOut(name="optoutdev"), replace=True)
    try:
        monkeypatch.delenv("ACCELRT_ACCELERATOR", raising=False)
        monkeypatch.setattr(_backend, "BACKENDS", ("optoutdev", "cpu"))
        assert _device._choose_default() == ("optoutdev" if candidate else "cpu")
        monkeypatch.setenv("ACCELRT_ACCELERATOR", "optoutdev")
        assert _device._choose_default() == "optoutdev"
    finally:
        _backend._factories.pop("optoutdev", None)
        _backend._reset_for_tests("optoutdev")


def test_unregister_is_the_symmetric_of_register() -> None:
    from accelrt.backends.cpu import CpuBackend
    name = "unreg" + uuid.uuid4().hex[:8]
    acc.backends.register(name, lambda: CpuBackend(name=name))
    assert name in acc.backends.registered() and acc.backends.get(name).name == name
    acc.backends.unregister(name)
    assert name not in acc.backends.registered()
    with pytest.raises(acc.BackendUnavailableError, match="Unknown backend"):
        acc.backends.get(name)
    with pytest.raises(ValueError, match="no backend named"):
        acc.backends.unregister(name)
    acc.backends.register(name, lambda: CpuBackend(name=name))   # the name is free again
    assert acc.backends.get_backend(name).device_count() >= 1
    acc.backends.unregister(name)


@pytest.mark.parametrize("use", ["current_stream", "stream", "event", "array"])
@pytest.mark.parametrize("how", ["unregister", "replace"])
def test_an_instance_the_name_no_longer_refers_to_is_not_kept_alive(how: str, use: str) -> None:
    # regression: the core's tables of default stream objects (_stream_core._defaults, by
    # name), of stream pools and of held events (by instance) kept every instance ever
    # registered under a name alive after unregister() or register(replace=True)
    name = "gone" + uuid.uuid4().hex[:8]
    dev = f"{name}:0"
    acc.backends.register(name, lambda: CpuBackend(name=name))
    b = acc.backends.get(name)
    assert acc.current_stream(dev)._b is b                 # its default stream object
    if use == "stream":
        s = acc.Stream(dev)
        with s:
            acc.zeros(4, device=dev).numpy()
        s.close()                                          # its handle: free in the pool
        del s
    elif use == "event":
        e = acc.Event(dev)
        e.record()
        e.synchronize()
        del e
    elif use == "array":
        x = acc.full((8,), 2.0, device=dev)
        assert x.numpy().tolist() == [2.0] * 8
        del x
    gone = weakref.ref(b)
    del b
    if how == "unregister":
        acc.backends.unregister(name)
    else:
        acc.backends.register(name, lambda: CpuBackend(name=name), replace=True)
    gc.collect()
    assert gone() is None
    if how == "replace":   # the name's new instance makes its own
        new = acc.backends.get(name)
        assert acc.current_stream(dev)._b is new
        assert acc.Stream(dev)._b is new


def test_an_unregistered_instance_still_in_use_keeps_working() -> None:
    # what the core forgets of an old instance is only what kept it alive: streams and
    # events a user still holds keep working on it
    name = "held" + uuid.uuid4().hex[:8]
    dev = f"{name}:0"
    acc.backends.register(name, lambda: CpuBackend(name=name))
    default = acc.current_stream(dev)
    s = acc.Stream(dev)
    e = acc.Event(dev)
    x = acc.full((4,), 1.0, device=dev)
    acc.backends.unregister(name)
    e.record(s)
    s.wait_event(e)
    default.synchronize()
    s.synchronize()
    assert e.query() and x.numpy().tolist() == [1.0] * 4
    s.close()
    assert s.is_closed
    del x, e, s, default
    gc.collect()


@pytest.mark.parametrize("how", ["same instance", "new instance", "unregister"])
def test_a_stream_open_across_a_change_of_its_name_is_destroyed_when_closed(how: str) -> None:
    # regression: register(replace=True)/unregister() dropped the name's stream pools while
    # streams taken from them were open; closing such a stream later put its handle in the
    # dropped pool's list, where nothing ever destroyed or reused it. An instance registered
    # again under its name (a factory returning the same object) leaked a backend stream at
    # every open stream and every registration; a pool filled that way re-created the old
    # instance's pool (_stream._pool), keeping the instance alive
    name = "again" + uuid.uuid4().hex[:8]
    dev = f"{name}:0"
    b = SimulatedBackend(name=name)
    acc.backends.register(name, lambda: b)
    acc.Stream(dev).close()                                # a free handle in the pool
    with leak_check():
        for _ in range(3):
            s = acc.Stream(dev)
            if how == "same instance":
                acc.backends.register(name, lambda: b, replace=True)
            elif how == "new instance":
                acc.backends.register(name, lambda: SimulatedBackend(name=name),
                                      replace=True)
            else:
                acc.backends.unregister(name)
            assert s.query() and s._b is b                # still works on its instance
            if how == "unregister":
                del s                                      # (its finaliser gives it back)
            else:
                s.close()
            assert b.live_handles()["streams"] == 0        # destroyed, not left in a list
            if how != "same instance":   # b again, for the next round
                acc.backends.register(name, lambda: b, replace=True)
        assert acc.backends.get(name) is b
    if how == "new instance":   # more open streams than a pool keeps, closed after the change
        streams = [acc.Stream(dev) for _ in range(_POOL_MAX + 1)]
        acc.backends.register(name, lambda: SimulatedBackend(name=name), replace=True)
        for s in streams:
            s.close()
        assert b.live_handles()["streams"] == 0
        gone = weakref.ref(b)
        del b, s, streams
        gc.collect()
        assert gone() is None
    acc.backends.unregister(name)


def test_builtin_backends_cannot_be_unregistered() -> None:
    with pytest.raises(ValueError, match="built-in"):
        acc.backends.unregister("cpu")
    assert "cpu" in acc.backends.available()


def test_register_tells_listeners_instead_of_reaching_into_modules() -> None:
    from accelrt.backends.cpu import CpuBackend
    name = "listen" + uuid.uuid4().hex[:8]
    seen: list[str] = []
    acc.backends.on_change(seen.append)
    try:
        acc.backends.register(name, lambda: CpuBackend(name=name))
        acc.backends.unregister(name)
    finally:
        from accelrt import _backend
        _backend._listeners.remove(seen.append)
    assert seen == [name, name]


def test_a_reason_that_goes_away_is_asked_again() -> None:
    """A class's ``unavailable_reason()`` is asked again at the next use (it may change:
    CUDA_VISIBLE_DEVICES before cuInit, a malformed variable put right); a factory that
    raised stays failed (s35 review: the first reason was kept for the process)."""
    state = {"reason": "the frobnicator is unplugged"}

    class Later(CpuBackend):
        name = "s35later_dev"

        @classmethod
        def unavailable_reason(cls) -> str | None:
            return state["reason"]

    acc.backends.register("s35later_dev", Later, replace=True)
    try:
        with pytest.raises(acc.BackendUnavailableError, match="frobnicator is unplugged"):
            acc.backends.get_backend("s35later_dev")
        assert "s35later_dev" not in acc.backends.available()
        state["reason"] = "the frobnicator is off"
        assert "frobnicator is off" in (acc.backends.unavailable_reason("s35later_dev") or "")
        state["reason"] = None
        assert acc.backends.unavailable_reason("s35later_dev") is None
        assert acc.backends.get_backend("s35later_dev").device_count() >= 1

        def broken() -> CpuBackend:
            calls.append(1)
            raise RuntimeError("no frobnicator driver")

        calls: list[int] = []
        acc.backends.register("s35broken_dev", broken, replace=True)
        for _ in range(2):
            with pytest.raises(acc.BackendUnavailableError, match="no frobnicator driver"):
                acc.backends.get_backend("s35broken_dev")
        assert calls == [1]   # a factory that failed is not run again
    finally:
        for n in ("s35later_dev", "s35broken_dev"):
            if n in acc.backends.registered():
                acc.backends.unregister(n)
