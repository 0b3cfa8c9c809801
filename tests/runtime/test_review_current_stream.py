"""Review of ``current_stream``'s fast cases (``_stream_core._current_hit``) and of the thread's
current-stream lookup (``_current``/``_current_in``) against a model of PyTorch's semantics,
written without accelrt's code: per thread and per device, the stream ``set_stream`` or ``with
stream:`` made current (else the device's default stream); ``None`` and an ``int`` mean the
current accelerator (its current device for ``None``); a string or ``accelrt.device`` names its
own backend (its current device without an index); ``set_default_device`` and ``with
acc.device(...)`` change neither; a backend registered again under the same name starts with
its default streams. Every argument kind is checked in every state, twice (the second call
may be served by a cache), in this thread and in a fresh one."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends
from hypothesis import given, settings
from hypothesis import strategies as st

import accelrt as acc
from accelrt import _device
from accelrt.testing import SimulatedBackend

NAMES = ("rvcs_a", "rvcs_b")
COUNT = 2


def _factory(name: str) -> Callable[[], SimulatedBackend]:
    return lambda: SimulatedBackend(device_count=COUNT, name=name)


def _register(name: str) -> None:
    acc.backends.register(name, _factory(name), replace=True)


# closed and unregistered after the module (what a test registers again is put back after it)
_backends = module_backends({name: _factory(name) for name in NAMES})


class Model:
    """What the calling thread's current streams are, by PyTorch's rules."""

    def __init__(self) -> None:
        self.accel = NAMES[0]
        self.device = dict.fromkeys(NAMES, 0)
        self.stream: dict[tuple[str, int], acc.Stream] = {}   # absent: the default stream

    def expect(self, arg: object) -> tuple[str, int] | type[BaseException]:
        """``(backend, index)`` whose current stream ``current_stream(arg)`` returns, or the
        exception class it raises."""
        if arg is None or arg == -1:   # -1: the current device, as torch.accelerator (s26)
            return self.accel, self.device[self.accel]
        if type(arg) is int:
            if arg < 0:
                return ValueError
            return (self.accel, arg) if arg < COUNT else IndexError
        if isinstance(arg, str):
            name, _, index = arg.partition(":")
            if name not in NAMES:
                return acc.BackendUnavailableError if name.isidentifier() else ValueError
            arg = acc.device(name, int(index)) if index else acc.device(name)
        if isinstance(arg, acc.device):
            if arg.index is None:
                return arg.type, self.device[arg.type]
            return (arg.type, arg.index) if arg.index < COUNT else IndexError
        return TypeError


def _arguments() -> list[object]:
    args: list[object] = [None, 0, 1, COUNT, -1, -2, 10**30, True, False, np.int64(1), 1.0, "0",
                          [0], acc.cpu.device(0), "nonexistent:0"]
    for name in NAMES:
        args += [name, f"{name}:0", f"{name}:1", f"{name}:{COUNT}", acc.device(name),
                 acc.device(name, 1), acc.device(name, COUNT)]
    return args


def _check(model: Model, streams: dict[tuple[str, int], acc.Stream]) -> None:
    for arg in _arguments():
        want = model.expect(arg)
        for _ in range(2):
            if isinstance(want, type):
                with pytest.raises(want):
                    acc.current_stream(arg)  # type: ignore[arg-type]
                continue
            got = acc.current_stream(arg)  # type: ignore[arg-type]
            name, index = want
            expected = streams.get(want)
            if expected is not None:
                assert got is expected, (arg, got, expected)
            else:
                b = acc.backends.get_backend(name)
                assert (got.device_type, got.device_index) == want, arg
                assert got.stream_id == b.default_stream(index), arg
                assert got is acc.current_stream(f"{name}:{index}")
                assert got._b is b   # the backend registered now, not a replaced one


def _in_fresh_thread(model: Model) -> None:
    """A new thread sees the default streams of device 0 of every backend (the current
    accelerator is process-wide)."""
    fresh = Model()
    fresh.accel = model.accel
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def body() -> None:
        start.wait()
        try:
            _check(fresh, {})
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    t = threading.Thread(target=body)
    t.start()
    start.wait()
    t.join(60)
    assert not t.is_alive()
    if errors:
        raise errors[0]


OPS = st.sampled_from(["set_stream", "enter", "exit", "set_device", "device_index",
                       "accelerator", "reregister", "default_device", "thread"])


@settings(max_examples=50)
@given(st.lists(st.tuples(OPS, st.sampled_from(NAMES), st.integers(0, COUNT - 1)),
                max_size=10))
def test_current_stream_follows_pytorchs_rules(steps: list[tuple[str, str, int]]) -> None:
    model = Model()
    previous = acc.current_accelerator()
    for name in reversed(NAMES):   # device 0 of each backend current, NAMES[0] current
        acc.set_current_accelerator(name)
        acc.set_device_index(0)
    made: list[acc.Stream] = []
    #: open blocks: (context object, backend name, device key or None, what exiting restores)
    entered: list[tuple[Any, str, tuple[str, int] | None, acc.Stream | None, int]] = []

    def leave() -> None:
        ctx, name, key, stream, device = entered.pop()
        ctx.__exit__(None, None, None)
        model.device[name] = device
        if key is not None:
            if stream is None:
                model.stream.pop(key, None)
            else:
                model.stream[key] = stream

    try:
        _check(model, model.stream)
        for op, name, index in steps:
            if op in ("set_stream", "enter"):
                s = acc.Stream(f"{name}:{index}")
                made.append(s)
                key = (name, index)
                if op == "set_stream":
                    acc.set_stream(s)
                else:
                    entered.append((s, name, key, model.stream.get(key), model.device[name]))
                    s.__enter__()
                model.stream[key] = s
                model.device[name] = index
            elif op == "device_index":
                ctx = acc.device_index(index)
                entered.append((ctx, model.accel, None, None, model.device[model.accel]))
                ctx.__enter__()
                model.device[model.accel] = index
            elif op == "exit":
                if entered:
                    leave()
            elif op == "set_device":
                acc.set_device_index(index)
                model.device[model.accel] = index
            elif op == "accelerator":
                acc.set_current_accelerator(name)
                model.accel = name
            elif op == "default_device":
                acc.set_default_device(f"{name}:{index}")
            elif op == "thread":
                _in_fresh_thread(model)
            else:   # the same name, a new instance: none of the old instance's streams holds
                while entered:
                    leave()
                _register(name)
                model.stream = {k: v for k, v in model.stream.items() if k[0] != name}
            _check(model, model.stream)
    finally:
        while entered:
            entered.pop()[0].__exit__(None, None, None)
        acc.set_default_device(None)
        for name in NAMES:
            for index in range(COUNT):
                _device._tls.stream.pop((name, index), None)
        for s in made:
            s.close()
        acc.set_current_accelerator(str(previous))


@pytest.mark.parametrize("arg", [True, False, np.int64(0), np.int32(1), 0.0, "1", b"rvcs_a:0",
                                 acc.cpu.device(0), object()])
def test_non_index_arguments_raise_clear_errors(arg: object) -> None:
    # PyTorch's _get_device_index silently takes the current device for arguments it does not
    # know (a numpy int, a float, a torch.cuda.device in torch.accelerator); accelrt refuses
    # them with a TypeError or ValueError that names the argument's type or text
    acc.set_current_accelerator(NAMES[0])
    with pytest.raises((TypeError, ValueError)):
        acc.current_stream(arg)  # type: ignore[arg-type]
