"""Shared fixtures. Helpers live in ``tests/helpers`` (nothing imports from this file)."""

from __future__ import annotations

import gc
import importlib.util
import os
import sys
from collections.abc import Generator, Iterator

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))  # make ``helpers`` importable

# CI machines are small and shared: no per-example deadline, no "too slow" health check, and
# a fixed example sequence (set HYPOTHESIS_PROFILE=dev locally for fresh random examples).
settings.register_profile("ci", deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

from helpers import registry  # noqa: E402
from helpers.ids import ADDRESS, UNSTABLE  # noqa: E402
from helpers.params import backend_params  # noqa: E402

from accelrt import _device  # noqa: E402
from accelrt.memory import _config  # noqa: E402
from accelrt.testing import _leaks as leaks  # noqa: E402


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
        collector: pytest.Collector) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """Fail the collection of a test module whose import changed the backend registry (and
    put the registry back).

    Every module is imported before any test runs, so what one registers at import is
    registered for the whole session: a later module's parametrisation over ``registered()``
    collects it, and later tests meet it after its own module closed it. A module registers
    its backends with :func:`helpers.registry.module_backends`, for its own tests only."""
    if not isinstance(collector, pytest.Module):
        return (yield)
    before = registry.snapshot()
    report = yield
    changed = registry.differences(before)
    if changed:
        registry.restore(before)
        report.outcome = "failed"
        report.longrepr = (
            f"importing {collector.nodeid} changed the backend registry:\n  "
            + "\n  ".join(changed) + "\nregister a module's backends with "
            "helpers.registry.module_backends({name: factory}) (a module-scoped fixture), "
            "not at import")
    return report


#: the most pytest-xdist workers ``-n auto`` starts: each worker collects the whole suite
#: (~10,000 tests) before it runs one, and the multi-rank tests start processes of their own
_MOST_WORKERS = 6


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (the README's test command): one worker per CPU this process may run on,
    at most :data:`_MOST_WORKERS`."""
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else os.cpu_count() or 1, _MOST_WORKERS))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the collected test ids that hold a memory address (``ids=repr`` of an
    ``object()``): pytest-xdist's workers would collect different ids and refuse to run.
    tests/package/test_test_ids.py fails on them; ``helpers.ids.shown`` is the fix."""
    config.stash[UNSTABLE] = [item.nodeid for item in items if ADDRESS.search(item.nodeid)]


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


@pytest.fixture(scope="module", autouse=True)
def _registry_unchanged_by_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test module whose module- or class-scoped fixtures leave the backend registry
    changed after its last test (a backend registered and not unregistered, a registered
    instance closed), and put the registry back for the modules after it."""
    before = registry.snapshot()
    yield
    changed = registry.differences(before)
    if changed:
        registry.restore(before)
        pytest.fail(f"{request.node.nodeid} left the backend registry changed:\n  "
                    + "\n  ".join(changed) + "\nregister its backends with "
                    "helpers.registry.module_backends, which puts the registry back",
                    pytrace=False)


@pytest.fixture(autouse=True)
def _restore_backend_registry() -> Iterator[None]:
    """Put the backend registry back after each test: a test may register, replace and
    unregister backends freely (what it registered is closed and forgotten). Closing an
    instance the registry held before the test fails the test: later tests would get it
    closed.

    Torn down after :func:`_leak_check` (which requests it): the leak check skips closed
    backends, so it must look before the test's backends are closed."""
    before = registry.snapshot()
    yield
    closed = [n for n, b in before.instances.items() if b.closed]
    registry.restore(before)
    if closed:
        pytest.fail(f"the test closed the registry's instance of {', '.join(map(repr, closed))}"
                    ", which later tests use: close an instance it made itself (register one "
                    "under a name of its own)", pytrace=False)


@pytest.fixture(autouse=True)
def _leak_check(request: pytest.FixtureRequest,
                _restore_backend_registry: None) -> Iterator[None]:
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
    saved = _config.get_config()
    yield
    if _config.get_config() != saved:
        # the options themselves, not the last string: set_allocator_settings("") after
        # "expandable_segments:True" keeps expandable segments on (keys left out stay)
        with _config._set_lock:
            _config._install(saved)


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


@pytest.fixture
def staged() -> Iterator[None]:
    """Receives into accelrt arrays land through a pinned staging block
    (``ACCELRT_MPI_STAGE=1``): their work has a landing to run (``Work._finish``)."""
    from accelrt.distributed._group import read_debug_level
    before = os.environ.get("ACCELRT_MPI_STAGE")
    os.environ["ACCELRT_MPI_STAGE"] = "1"
    read_debug_level()
    try:
        yield
    finally:
        if before is None:
            del os.environ["ACCELRT_MPI_STAGE"]
        else:
            os.environ["ACCELRT_MPI_STAGE"] = before
        read_debug_level()


@pytest.fixture
def one_rank_world() -> Iterator[None]:
    """A default group of one rank on the MPI engine (MPI's singleton world: no launcher),
    destroyed afterwards if the test left it; the test is skipped without mpi4py."""
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not installed (pip install 'accelrt[mpi]')")
    import accelrt.distributed as dist
    dist.init_process_group("cpu:mpi", timeout=30)
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
