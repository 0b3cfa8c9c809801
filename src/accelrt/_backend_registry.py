"""The lazy backend registry: names to backend factories and instances.

:func:`register` binds a name to a :class:`~accelrt._backend.Backend` subclass or factory;
:func:`get_backend` makes the instance on first use (outside the registry lock, so a slow
factory holds up only the callers waiting for the same backend), importing a built-in backend
lazily and loading third-party ones from the ``accelrt.backends`` entry-point group first.
:mod:`accelrt._backend`, which holds the contract, re-exports these names, and
:mod:`accelrt.backends` makes them public.

Example::

    >>> from accelrt._backend_registry import get_backend, registered
    >>> "cpu" in registered()
    True
    >>> get_backend("cpu") is get_backend("cpu")   # one instance per name
    True
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable
from typing import Any

from ._backend import _BUILTIN_MODULES, _INSTALL_HINTS, BACKENDS, Backend
from ._errors import BackendUnavailableError, type_shown
from ._fork import reinit_after_fork

__all__ = ["available", "entry_point_problems", "get", "get_all_backends",
           "get_available_backends", "get_backend", "on_change", "register", "registered",
           "unavailable_reason", "unregister"]

_lock = reinit_after_fork(threading.RLock())
_factories: dict[str, Callable[[], Backend]] = {}   # guarded by _lock
_instances: dict[str, Backend] = {}                  # guarded by _lock
_failures: dict[str, str] = {}                       # guarded by _lock
_entry_points_loaded = False                         # guarded by _lock
_entry_point_problems: list[str] = []                # guarded by _lock
#: names whose factory runs now, and the thread running it (creation happens outside _lock,
#: so a slow factory holds up only the callers that wait for the same backend)
_creating: dict[str, tuple[int, threading.Event]] = {}  # guarded by _lock
#: called with a backend's name after register()/unregister() changed what the name means
_listeners: list[Callable[[str], None]] = []         # appended under _lock


#: what a backend name may be: an ASCII lower-case identifier, the type of a device string
#: (``accelrt.device`` parses ASCII only, so ``"é"`` could never name a device)
_NAME_RE = re.compile(r"[a-z_][a-z0-9_]*", re.ASCII)
#: the most devices one backend may report; a larger count is a broken backend (PyTorch's
#: ``c10::DeviceIndex`` is an int8, so it has at most 128), and core loops over the devices
#: (RNG states, ``accelrt info``) would never end
MAX_DEVICE_COUNT = 1024


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"backend name must be a str, got {type_shown(name)}")
    if _NAME_RE.fullmatch(name) is None:
        raise ValueError(f"backend name {name!r} must be a lower-case identifier like "
                         "'cuda', in ASCII (letters a-z, digits and '_', not starting with a "
                         "digit)")
    return name


def _checked_device_count(name: str, backend: Backend) -> int:
    """``backend.device_count()`` if it is a plain count in 1..MAX_DEVICE_COUNT.

    Raises:
        BackendUnavailableError: it is not an int (a bool neither), is below 1 (no devices) or
            is above :data:`MAX_DEVICE_COUNT`; the message names the backend and the value.
    """
    n = backend.device_count()
    if not isinstance(n, int) or isinstance(n, bool):
        raise BackendUnavailableError(
            f"Backend {name!r} is not available: its device_count() returned {n!r} "
            f"({type_shown(n)}), not an int")
    if n <= 0:
        raise BackendUnavailableError(f"Backend {name!r} is not available: it reports no devices")
    if n > MAX_DEVICE_COUNT:
        raise BackendUnavailableError(
            f"Backend {name!r} is not available: its device_count() returned {n}, more than "
            f"the {MAX_DEVICE_COUNT} devices accelrt supports per backend")
    return n


def register(name: str, factory: Callable[[], Backend] | type[Backend], *,
             replace: bool = False) -> None:
    """Register a third-party backend.

    Args:
        name: device type string, a lower-case identifier (``"mydev"``).
        factory: a :class:`Backend` subclass or a zero-argument callable returning an instance.
        replace: allow replacing an already registered backend of that name.

    Raises:
        TypeError: ``factory`` is not callable.
        ValueError: the name is malformed, or taken and ``replace`` is False.

    Example::

        >>> from accelrt import backends
        >>> from accelrt.backends.cpu import CpuBackend
        >>> class MyDev(CpuBackend):
        ...     name = "mydev"
        >>> backends.register("mydev", MyDev, replace=True)
        >>> backends.get_backend("mydev").device_count() >= 1
        True
    """
    name = _check_name(name)
    if not callable(factory):
        raise TypeError(f"backend factory for {name!r} must be callable, got {factory!r}")
    with _lock:
        _load_entry_points()
        if not replace and (name in _factories or name in _BUILTIN_MODULES):
            raise ValueError(f"a backend named {name!r} is already registered; "
                             "pass replace=True to override it")
        _factories[name] = factory
        _instances.pop(name, None)
        _failures.pop(name, None)
    _notify(name)


def unregister(name: str) -> None:
    """Remove a backend added with :func:`register` (or the entry-point group), and its
    cached instance; the symmetric of :func:`register`.

    Raises:
        ValueError: ``name`` is a built-in backend, or no registered backend has that name.

    Example::

        >>> from accelrt import backends
        >>> from accelrt.backends.cpu import CpuBackend
        >>> backends.register("tmpdev", lambda: CpuBackend(name="tmpdev"))
        >>> backends.unregister("tmpdev")
        >>> "tmpdev" in backends.registered()
        False
    """
    name = _check_name(name)
    with _lock:
        _load_entry_points()
        if name in _BUILTIN_MODULES and name not in _factories:
            raise ValueError(f"{name!r} is a built-in backend and cannot be unregistered "
                             "(register(name, factory, replace=True) replaces it)")
        if name not in _factories:
            raise ValueError(f"no backend named {name!r} is registered; registered backends "
                             f"are {', '.join(repr(n) for n in registered())}")
        del _factories[name]
        _instances.pop(name, None)
        _failures.pop(name, None)
    _notify(name)


def on_change(listener: Callable[[str], None]) -> None:
    """Call ``listener(name)`` after :func:`register` or :func:`unregister` changed what
    ``name`` refers to (how the core forgets what it cached about a backend; a listener must
    not call back into the registry's writers).

    Raises:
        TypeError: ``listener`` is not callable (it would break every later ``register``).
    """
    if not callable(listener):
        raise TypeError(f"on_change() takes a callable listener(name), got "
                        f"{type_shown(listener)}")
    with _lock:
        _listeners.append(listener)


def _notify(name: str) -> None:
    # outside _lock: a listener may take its own lock, and that lock may be held by a thread
    # waiting for ours
    for listener in list(_listeners):
        listener(name)


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    try:
        from importlib.metadata import entry_points
        eps = entry_points(group="accelrt.backends")
    except Exception as exc:  # noqa: BLE001 - broken metadata must not break import
        _entry_point_problems.append(
            f"the 'accelrt.backends' entry points could not be read: {type(exc).__name__}: "
            f"{exc}")
        return
    for ep in eps:
        name = ep.name
        where = f"entry point {name!r} ({ep.value})"
        try:
            _check_name(name)
        except ValueError as exc:
            _entry_point_problems.append(f"{where} is ignored: {exc}")
            continue
        if name in _BUILTIN_MODULES:
            _entry_point_problems.append(
                f"{where} is ignored: {name!r} is a built-in backend (replace it with "
                f"accelrt.backends.register({name!r}, factory, replace=True))")
            continue
        if name in _factories:
            _entry_point_problems.append(f"{where} is ignored: {name!r} is already registered")
            continue

        def _factory(ep: Any = ep) -> Backend:
            try:
                obj = ep.load()
            except SystemExit as exc:   # a plugin's import must not end the process
                raise RuntimeError(f"importing entry point {ep.name!r} ({ep.value}) raised "
                                   f"SystemExit({exc.code!r})") from exc
            backend: Backend = obj() if callable(obj) else obj
            return backend

        _factories[name] = _factory


def entry_point_problems() -> list[str]:
    """Why entries of the ``accelrt.backends`` entry-point group were ignored (a malformed
    or built-in name, a name registered twice, unreadable metadata), one sentence each;
    ``accelrt info`` shows them. An entry point whose import fails is not here: it is
    registered, and :func:`unavailable_reason` says why it cannot be used.

    Example::

        >>> from accelrt import backends
        >>> isinstance(backends.entry_point_problems(), list)
        True
    """
    with _lock:
        _load_entry_points()
        return list(_entry_point_problems)


def registered() -> list[str]:
    """Names of all known backends (built-in first, in default order), usable or not."""
    with _lock:
        _load_entry_points()
        return list(BACKENDS) + sorted(n for n in _factories if n not in BACKENDS)


class _ReasonNow(Exception):
    """:func:`_make`: the class's ``unavailable_reason()`` refused it. Not kept as the name's
    failure: the reason may go away (``CUDA_VISIBLE_DEVICES`` changed before ``cuInit``, a
    malformed variable put right), so the next use asks again (cheap: discovery is cached)."""


def _make(name: str, factory: Callable[[], Backend] | None) -> Backend:
    if factory is not None:
        if isinstance(factory, type) and issubclass(factory, Backend):
            reason = factory.unavailable_reason()
            if reason:
                raise _ReasonNow(f"Backend {name!r} is not available: {reason}")
        backend = factory()
    elif name in _BUILTIN_MODULES:
        try:
            module = importlib.import_module(_BUILTIN_MODULES[name])
        except ImportError as exc:
            raise BackendUnavailableError(
                f"Backend {name!r} is not available: {exc}; {_INSTALL_HINTS[name]}") from exc
        cls = module.backend_class
        reason = cls.unavailable_reason()
        if reason:
            raise _ReasonNow(f"Backend {name!r} is not available: {reason}")
        backend = cls()
    else:
        known = ", ".join(repr(n) for n in registered())
        raise BackendUnavailableError(
            f"Unknown backend {name!r}; known backends are {known}. Third-party backends "
            "register with accelrt.backends.register() or the 'accelrt.backends' entry point.")
    if not isinstance(backend, Backend):
        raise TypeError(f"backend factory for {name!r} returned {type_shown(backend)}, "
                        "not an accelrt.backends.Backend")
    if backend.name != name:
        # per-backend state (current device, streams, allocators) is keyed by the name
        raise BackendUnavailableError(
            f"Backend {name!r} is not available: its factory returned a backend named "
            f"{backend.name!r}, not {name!r}; set the class attribute name = {name!r} (or "
            f"pass name={name!r} to CpuBackend)")
    _checked_device_count(name, backend)
    return backend


def get_backend(name: str) -> Backend:
    """Return the (cached) backend instance for ``name`` (also spelled :func:`get`). A failure
    is kept too, except the reason a backend class's ``unavailable_reason()`` gives: that is
    asked again at the next call, since it may go away (``CUDA_VISIBLE_DEVICES`` changed before
    CUDA is initialised, as ``torch.cuda.device_count()`` sees).

    Raises:
        BackendUnavailableError: unknown name, or the backend cannot be used here; the message
            says why and what to install.
    """
    try:
        backend = _instances.get(name)
    except TypeError:       # unhashable (a list): the check below says what a name is
        backend = None
    if backend is not None:
        return backend
    if not isinstance(name, str):
        raise TypeError(f"backend name must be a str, got {type_shown(name)}")
    while True:
        with _lock:
            _load_entry_points()
            backend = _instances.get(name)
            if backend is not None:
                return backend
            if name in _failures:
                raise BackendUnavailableError(_failures[name])
            busy = _creating.get(name)
            if busy is None:
                factory = _factories.get(name)
                done = threading.Event()
                _creating[name] = (threading.get_ident(), done)
                break
            if busy[0] == threading.get_ident():
                raise BackendUnavailableError(
                    f"Backend {name!r} is not available: its factory asked for the {name!r} "
                    "backend while creating it (a factory must not call get_backend of its "
                    "own name)")
        busy[1].wait()   # another thread creates it: use its result
    try:
        backend = _make(name, factory)
    except _ReasonNow as exc:   # asked again next time: nothing is kept
        _finish(name, factory, done, None, None)
        raise BackendUnavailableError(str(exc)) from None
    except BackendUnavailableError as exc:
        _finish(name, factory, done, None, str(exc))
        raise
    except Exception as exc:  # a broken backend is reported, not fatal
        msg = f"Backend {name!r} is not available: {type(exc).__name__}: {exc}"
        _finish(name, factory, done, None, msg)
        raise BackendUnavailableError(msg) from exc
    except BaseException:
        _finish(name, factory, done, None, None)
        raise
    kept = _finish(name, factory, done, backend, None)
    return kept if kept is not None else get_backend(name)   # the name changed meaning


def _finish(name: str, factory: Callable[[], Backend] | None, done: threading.Event,
            backend: Backend | None, failure: str | None) -> Backend | None:
    """End the creation :func:`get_backend` began: keep the instance or the failure unless
    ``register``/``unregister`` changed what the name means meanwhile, and wake the threads
    waiting for it. Returns the instance to hand out when it is kept, else None."""
    with _lock:
        del _creating[name]
        done.set()
        if _factories.get(name) is not factory:    # re-registered while the factory ran
            return None
        if backend is not None:
            _instances[name] = backend
        elif failure is not None and (name in _BUILTIN_MODULES or name in _factories):
            _failures[name] = failure
        return backend


def unavailable_reason(name: str) -> str | None:
    """Why backend ``name`` cannot be used (``None`` if it can).

    Example::

        >>> from accelrt import backends
        >>> backends.unavailable_reason("cpu") is None
        True
    """
    try:
        get_backend(name)
    except BackendUnavailableError as exc:
        return str(exc)
    return None


def available() -> list[str]:
    """Names of the usable backends, in the default preference order."""
    return [n for n in registered() if unavailable_reason(n) is None]


def get_available_backends() -> list[Backend]:
    """Instances of every usable backend."""
    return [get_backend(n) for n in available()]


def get_all_backends() -> list[str]:
    """Alias of :func:`registered`: every known backend name."""
    return registered()


#: The backend instance for ``name``: :func:`get_backend` under the registry's short name
#: (``registered()``/``available()``/``get()``, ``register()``/``unregister()``).
get = get_backend


def _reset_for_tests(name: str) -> None:
    """Forget a cached instance or failure (tests that change the environment use this)."""
    with _lock:
        _instances.pop(name, None)
        _failures.pop(name, None)
