"""Shared fixtures. Helpers live in ``tests/helpers`` (nothing imports from this file)."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))  # make ``helpers`` importable

# CI machines are small and shared: no per-example deadline, no "too slow" health check, and
# a fixed example sequence (set HYPOTHESIS_PROFILE=dev locally for fresh random examples).
settings.register_profile("ci", deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

from accelrt import _device, memory  # noqa: E402
from accelrt.testing import _leaks as leaks  # noqa: E402
from helpers.params import backend_params  # noqa: E402


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collection made (every test module, its parameters, hypothesis's strategies,
    thousands of test items: most of the session's heap) out of the garbage collector's sight.

    Full collections are frequent in the suite (the tests' and the leak check's
    ``gc.collect()``, ``torch.cuda.graph``'s one on capture); each traversed that whole heap,
    0.5 to 1 s per call on a busy 2-core machine. The frozen objects stay alive and their
    references still count, so a cycle that runs through one of them is never collected (it
    would have lived for the session anyway: collection's objects are the modules and items).
    Objects the tests make are collected as before (but see
    :func:`pytest_runtest_logfinish`)."""
    gc.collect()
    gc.freeze()


#: tests run since the last collect-and-freeze of :func:`pytest_runtest_logfinish`
_since_freeze = 0
_FREEZE_EVERY = 100


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    """Every ``_FREEZE_EVERY`` tests (after a test's teardown), collect garbage and freeze
    what survives, as :func:`pytest_collection_finish` does once.

    What a session keeps alive grows with every test: pytest's reports (three per test, kept
    for the summary), hypothesis's and the modules' caches. Unfrozen, each full collection
    (the tests' ``gc.collect()``, the leak check's, the interpreter's own) traversed all of it,
    and late in the suite one cost half a second on a busy 2-core machine. The collection
    first frees the garbage of the tests just run, so only what is still reachable is frozen;
    a later cycle through it is never collected (what is reachable between tests lives for
    the session, or for a module: module-scoped fixtures close what they hold explicitly)."""
    global _since_freeze
    _since_freeze += 1
    if _since_freeze >= _FREEZE_EVERY:
        _since_freeze = 0
        gc.collect()
        gc.freeze()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    gc.unfreeze()


@pytest.fixture(params=backend_params())
def backend(request: pytest.FixtureRequest) -> str:
    """The name of each registered backend in turn; skipped (with the reason) where unusable.

    The test runs with that backend as the current accelerator.
    """
    name: str = request.param
    _device.set_current_accelerator(name)
    return name


@pytest.fixture(autouse=True)
def _leak_check(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that leaves caching-allocator memory, streams, events or graphs alive that
    it made (``accelrt.testing``'s check, run after the test's own fixtures are torn down).

    A test that leaks on purpose (leak detection, out-of-memory, fork) opts out with
    ``@pytest.mark.leaks_ok("why")``.
    """
    marker = request.node.get_closest_marker("leaks_ok")
    if marker is not None:
        if not marker.args or not isinstance(marker.args[0], str) or not marker.args[0]:
            pytest.fail("@pytest.mark.leaks_ok needs a reason: leaks_ok(\"why it leaks\")")
        yield
        return
    before = leaks.snapshot()
    yield
    problems = leaks.find_leaks(before)
    if problems:
        pytest.fail("the test left alive what it made (mark it "
                    "@pytest.mark.leaks_ok(\"why\") if that is on purpose):\n"
                    + "\n".join(problems), pytrace=False)


@pytest.fixture(autouse=True)
def _restore_allocator_settings() -> Iterator[None]:
    """Put the process-wide allocator settings back after each test that changed them, so a
    test that forgets cannot change what later tests replay or allocate with."""
    saved = memory.get_allocator_settings()
    yield
    if memory.get_allocator_settings() != saved:
        memory.set_allocator_settings(saved)


@pytest.fixture(autouse=True)
def _restore_runtime_state(_leak_check: None) -> Iterator[None]:
    """Restore the current accelerator and this thread's current devices/streams after each
    test, so tests can change them freely."""
    with _device._acc_lock:
        saved_acc = (_device._current_name, _device._current_backend)
    saved_dev = dict(_device._tls.device)
    saved_stream = dict(_device._tls.stream)
    yield
    with _device._acc_lock:
        _device._current_name, _device._current_backend = saved_acc
    _device._tls.device.clear()
    _device._tls.device.update(saved_dev)
    _device._tls.stream.clear()
    _device._tls.stream.update(saved_stream)
