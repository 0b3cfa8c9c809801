"""The backend registry as the tests found it: snapshots, differences and putting it back, and
the backends a test module registers for its own tests only.

pytest imports every test module at collection, before any test runs, so a backend that a
module registers at its top level is registered for the whole session: a later module's
parametrisation over ``registered()`` collects it, and its tests run on it after the module that
owns it closed it. A module registers its backends with :func:`module_backends` instead: they
exist from the module's first test to the end of its last, and are closed and forgotten then.
``tests/conftest.py`` fails the collection of a module whose import changes the registry, puts
the registry back after each test (a test may register what it likes), and fails a module that
leaves its fixtures' registrations behind.

The registry's private tables are read and written here, under its lock, because its public API
cannot put back an instance (``register(name, factory, replace=True)`` forgets the instance,
and the core's caches about a name hold that instance); the core is told of every name put back,
as ``register``/``unregister`` tell it.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import pytest

import accelrt as acc
from accelrt import _backend_registry as _reg
from accelrt._backend import _BUILTIN_MODULES, Backend

__all__ = ["DeviceLater", "Snapshot", "differences", "malloc_async", "malloc_async_backend",
           "module_backends", "resolve", "restore",
           "snapshot"]

Factory = Callable[[], Backend] | type[Backend]
T = TypeVar("T")


class Snapshot(NamedTuple):
    """The registry's tables at one moment (copies; the factories and instances themselves)."""

    factories: dict[str, Callable[[], Backend]]
    instances: dict[str, Backend]
    failures: dict[str, str]


def snapshot() -> Snapshot:
    """What the registry holds now."""
    with _reg._lock:
        _reg._load_entry_points()
        return Snapshot(dict(_reg._factories), dict(_reg._instances), dict(_reg._failures))


def _changed_names(before: Snapshot, now: Snapshot) -> list[str]:
    """Names registered, unregistered or registered again since ``before``, and names whose
    instance of ``before`` was closed or replaced. An instance or a failure made since then for
    a name that is unchanged (a backend's first use) is not a change."""
    names = {n for n in before.factories.keys() | now.factories.keys()
             if before.factories.get(n) is not now.factories.get(n)}
    names.update(n for n, b in before.instances.items()
                 if now.instances.get(n) is not b or b.closed)
    return sorted(names)


def differences(before: Snapshot) -> list[str]:
    """One line per name whose registration or instance differs from ``before``."""
    now = snapshot()
    lines = []
    for name in _changed_names(before, now):
        was, new = before.factories.get(name), now.factories.get(name)
        old_inst = before.instances.get(name)
        if was is None and new is not None and name in _BUILTIN_MODULES:
            lines.append(f"the built-in {name!r} was replaced (replace=True) and not put back")
        elif was is None and new is not None:
            lines.append(f"{name!r} was registered and not unregistered")
        elif new is None and was is not None:
            lines.append(f"{name!r} was unregistered and not registered again")
        elif was is not new:
            lines.append(f"{name!r} was registered again (replace=True) and not put back")
        elif old_inst is not None and old_inst.closed:
            lines.append(f"the registry's {name!r} instance was closed (every later user of "
                         f"{name!r} gets a closed backend)")
        else:
            lines.append(f"the registry's {name!r} instance was forgotten or replaced")
    return lines


def restore(before: Snapshot, *, close: bool = True) -> list[str]:
    """Put the registry back as it was at ``before`` and return the names put back.

    An instance made since then for a name put back is closed first (``close=False`` keeps it
    open); ``close()`` runs its queued work and stops an asynchronous backend's worker threads. An instance of ``before`` that was closed since cannot be reopened: it is put back
    closed, and :func:`differences` reports it.
    """
    now = snapshot()
    names = _changed_names(before, now)
    if not names:
        return []
    kept = {id(b) for b in before.instances.values()}
    for name in names:
        inst = now.instances.get(name)
        if close and inst is not None and id(inst) not in kept:
            inst.close()   # idempotent; runs the queued work first
    with _reg._lock:
        for name in names:
            _put_back(_reg._factories, before.factories, name)
            _put_back(_reg._instances, before.instances, name)
            _put_back(_reg._failures, before.failures, name)
    for name in names:
        _reg._notify(name)   # the core forgets what it cached about the name's other instance
    return names


def _put_back(table: dict[str, T], saved: dict[str, T], name: str) -> None:
    if name in saved:
        table[name] = saved[name]
    else:
        table.pop(name, None)


def module_backends(factories: Mapping[str, Factory], *,
                    name: str = "_module_backends") -> Any:
    """A module-scoped autouse fixture that registers ``factories`` (name to backend factory)
    for the module's tests; at the end of the module it synchronizes and closes the instances
    they made and puts the registry back.

    Assign it to a module global (``_backends = module_backends({...})``); a module-scoped
    fixture of the module that needs the backends requests it by ``name``. A name taken when
    the module starts is an error (no module may replace another's backend).
    """
    table = dict(factories)

    @pytest.fixture(scope="module", autouse=True, name=name)
    def _fixture() -> Iterator[None]:
        before = snapshot()
        try:
            for backend_name, factory in table.items():
                acc.backends.register(backend_name, factory)
            yield
        finally:
            gc.collect()   # what the tests left to the collector goes back before the close
            restore(before)

    return _fixture


@dataclass(frozen=True)
class DeviceLater:
    """``accelrt.device(type, index)`` made when the test runs, for a parametrisation that
    names a device of a backend its module registers with :func:`module_backends` (at
    collection that backend is not registered yet, and ``accelrt.device`` refuses the name)."""

    type: str
    index: int | None = None

    def make(self) -> acc.device:
        return acc.device(self.type) if self.index is None else acc.device(self.type, self.index)


def resolve(arg: object) -> Any:
    """``arg.make()`` for a :class:`DeviceLater`, else ``arg`` itself."""
    return arg.make() if isinstance(arg, DeviceLater) else arg


@contextmanager
def malloc_async() -> Iterator[None]:
    """The process's allocator option set to ``backend:cudaMallocAsync`` (the other settings
    kept), and put back after."""
    from accelrt.memory import _config
    saved = _config.get_config()
    _config._reset_for_tests(_config.parse_config("backend:cudaMallocAsync", saved))
    try:
        yield
    finally:
        _config._reset_for_tests(saved)


@contextmanager
def malloc_async_backend(name: str, factory: Factory) -> Iterator[str]:
    """``factory`` registered under ``name``, under ``backend:cudaMallocAsync``
    (:func:`malloc_async`); unregistered after (its allocators no longer bind the process's
    option)."""
    acc.backends.register(name, factory)
    try:
        with malloc_async():
            yield name
    finally:
        acc.backends.unregister(name)
