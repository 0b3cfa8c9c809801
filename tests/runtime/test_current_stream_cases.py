"""``current_stream``'s common cases (``_stream_core._current_hit``, compiled in the compiled
build) against the general path (``_get_device`` then ``_current``) in every state a program
can put the per-thread tables in: streams set and entered, current devices changed, backends
registered again, other threads, arguments of every kind (good and bad)."""

from __future__ import annotations

import threading

import pytest
from helpers import register_toy
from hypothesis import given
from hypothesis import strategies as st

import accelrt as acc
from accelrt import _device, _stream, _stream_core
from accelrt.testing import SimulatedBackend


def _general(device: object) -> object:
    """What the general path returns or raises for ``device``."""
    try:
        # -1 is the current device (torch.accelerator's reading, session 26)
        b, index = _device._get_device(device, minus_one=True)  # type: ignore[arg-type]
        return _stream._current(b, index)
    except Exception as exc:   # noqa: BLE001 - compared by type and message
        return (type(exc), str(exc))


def _public(device: object) -> object:
    try:
        return acc.current_stream(device)  # type: ignore[arg-type]
    except Exception as exc:   # noqa: BLE001 - compared by type and message
        return (type(exc), str(exc))


def _arguments(name: str) -> list[object]:
    return [None, 0, 1, 2, -1, 10**20, True, 1.0, "0", name, f"{name}:0", f"{name}:1",
            f"{name}:7", acc.device(name, 1), acc.device(name), [0], "cpu:0", "nonexistent:0"]


def _release(name: str, streams: list[acc.Stream], entered: list[acc.Stream]) -> None:
    """Leave the ``with`` blocks, make the default streams current again, close the rest."""
    while entered:
        entered.pop().__exit__(None, None, None)
    b = acc.backends.get_backend(name)
    for index in range(2):
        acc.set_stream(_stream._default(b, (name, index)))
    for s in streams:
        s.close()
    streams.clear()


def _check_all(name: str) -> None:
    for device in _arguments(name):
        hit = _stream_core._current_hit(device)
        expected = _general(device)
        if hit is not None:
            assert hit is expected, device
        assert _public(device) == expected or _public(device) is expected, device


def _check_model(name: str, model: dict[int, acc.Stream], device: int) -> None:
    """Each argument naming a device of backend ``name`` gives the thread's current stream of
    that device as the model has it: the stream set or entered last, else the default stream,
    of the backend's present instance (an independent oracle: the general path shares the
    lookup with the fast one)."""
    b = acc.backends.get_backend(name)
    for arg, index in [(None, device), (0, 0), (1, 1), (f"{name}:0", 0), (f"{name}:1", 1),
                       (acc.device(name, 1), 1), (name, device)]:
        s = acc.current_stream(arg)  # type: ignore[arg-type]
        assert s._b is b and s.device_index == index, arg
        if index in model:
            assert s is model[index], arg
        else:
            assert s.stream_id == b.default_stream(index), arg


@given(st.lists(st.tuples(st.sampled_from(["set_stream", "set_device", "enter", "new_stream",
                                           "reregister"]),
                          st.integers(0, 1)), max_size=12))
def test_current_stream_matches_the_general_path(steps: list[tuple[str, int]]) -> None:
    name, _ = register_toy(num_devices=2)
    previous = acc.current_accelerator()
    acc.set_current_accelerator(name)
    streams: list[acc.Stream] = []
    entered: list[acc.Stream] = []
    model: dict[int, acc.Stream] = {}   # device index -> the current stream set or entered
    undo: list[tuple[int, acc.Stream | None, int]] = []   # per entered stream
    device = 0
    try:
        _check_all(name)
        _check_model(name, model, device)
        for op, index in steps:
            if op == "set_stream":
                s = acc.Stream(f"{name}:{index}")
                streams.append(s)
                acc.set_stream(s)
                model[index], device = s, index
            elif op == "set_device":
                acc.set_device_index(index)
                device = index
            elif op == "enter":
                s = acc.Stream(f"{name}:{index}")
                streams.append(s)
                s.__enter__()
                entered.append(s)
                undo.append((index, model.get(index), device))
                model[index], device = s, index
            elif op == "new_stream":
                streams.append(acc.Stream(f"{name}:{index}"))
            else:   # the same name, a new backend instance: no stream of the old one holds
                while entered:
                    entered.pop().__exit__(None, None, None)
                    index_, before, device = undo.pop()
                    if before is None:
                        model.pop(index_, None)
                    else:
                        model[index_] = before
                acc.backends.register(name, lambda: SimulatedBackend(
                    device_count=2, auto_complete=False, name=name), replace=True)
                acc.set_current_accelerator(name)
                model.clear()
            _check_all(name)
            _check_model(name, model, device)
    finally:
        _release(name, streams, entered)
        acc.set_current_accelerator(str(previous))


def test_another_threads_current_stream_is_not_seen() -> None:
    name, _ = register_toy(num_devices=2)
    mine = acc.Stream(f"{name}:1")
    acc.set_stream(mine)
    seen: dict[str, object] = {}
    gate = threading.Barrier(2)

    def other() -> None:
        gate.wait()
        seen["string"] = acc.current_stream(f"{name}:1")
        seen["device"] = acc.current_stream(acc.device(name, 1))

    t = threading.Thread(target=other)
    t.start()
    gate.wait()
    t.join(30)
    assert acc.current_stream(f"{name}:1") is mine
    assert seen["string"] is not mine and seen["device"] is not mine
    assert seen["string"] is seen["device"]
    acc.set_stream(_stream._default(acc.backends.get_backend(name), (name, 1)))
    mine.close()


@pytest.mark.parametrize("bad", [-2, 7, True, 1.5, [0], "cpu:nope"])  # -1 is current (s26)
def test_bad_arguments_raise_what_the_general_path_raises(bad: object) -> None:
    name, _ = register_toy(num_devices=2)
    previous = acc.current_accelerator()
    acc.set_current_accelerator(name)
    try:
        assert _stream_core._current_hit(bad) is None
        expected = _general(bad)
        assert isinstance(expected, tuple)
        with pytest.raises(expected[0]) as info:
            acc.current_stream(bad)  # type: ignore[arg-type]
        assert str(info.value) == expected[1]
    finally:
        acc.set_current_accelerator(str(previous))
