"""A pytest plugin that writes each test's result to a JSON-lines file as the run goes.

pytest writes ``--junitxml`` only when the session ends, so a run that is killed (a time
budget ran out, a test hung the process) leaves nothing. With this plugin a line is appended,
and flushed, when each test starts and when it ends: whatever finished is on disk when the
process dies, and a test that started but never ended names the one that hung. Under
pytest-xdist only the controller writes (the workers' reports reach it there). Used by
``scripts/gpu_check.py``; usage::

    PYTHONPATH=tests python -m pytest -p helpers.results_log \\
        --results-log results.jsonl --results-phase suite tests

Lines (one JSON object each; ``phase`` is ``--results-phase``):

* ``{"event": "session", "phase", "pid", "time"}`` when the session starts;
* ``{"event": "start", "phase", "nodeid", "time"}`` when a test starts;
* ``{"event": "test", "phase", "nodeid", "outcome", "duration", "message"}`` when it ends:
  ``outcome`` is ``passed``, ``failed`` (the test), ``error`` (its setup or teardown),
  ``skipped``, ``xfailed`` or ``xpassed``; ``message`` is the failure's one-line cause or the
  skip reason (empty for passes);
* ``{"event": "end", "phase", "exitstatus", "time"}`` when the session ends.
"""

from __future__ import annotations

import json
import os
import time
from typing import IO, Any

import pytest

MESSAGE_CHARS = 2000


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("results-log", "one JSON line per test, written as the run goes")
    group.addoption("--results-log", metavar="PATH", default=None,
                    help="append a line when each test starts and ends to PATH")
    group.addoption("--results-phase", metavar="NAME", default="",
                    help="the phase name written on every line (default: empty)")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("results_log")
    if path and not hasattr(config, "workerinput"):   # xdist workers: the controller writes
        config.pluginmanager.register(ResultsLog(path, config.getoption("results_phase")),
                                      "results-log-writer")


def _message(report: pytest.TestReport) -> str:
    """The one-line cause of a failure, or the reason of a skip."""
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:   # a skip: (path, line, reason)
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) or str(longrepr)
    return text[-MESSAGE_CHARS:]


def outcome(reports: list[pytest.TestReport]) -> tuple[str, str]:
    """``(outcome, message)`` of one test from its setup, call and teardown reports, as
    junitxml counts them: a failed setup or teardown is an ``error``, a failed call a
    ``failure``."""
    by_when = {r.when: r for r in reports}
    setup, call, teardown = by_when.get("setup"), by_when.get("call"), by_when.get("teardown")
    other = [r for r in reports if r.when not in ("setup", "call", "teardown")]
    if setup is not None and setup.failed:
        return "error", _message(setup)
    if call is not None and call.failed:
        return "failed", _message(call)
    for r in other:   # xdist's report for a test whose worker crashed
        if r.failed:
            return "failed", _message(r)
    if teardown is not None and teardown.failed:
        return "error", _message(teardown)
    for maybe in (setup, call):
        if maybe is not None and maybe.skipped:
            return ("xfailed" if hasattr(maybe, "wasxfail") else "skipped"), _message(maybe)
    if call is not None and hasattr(call, "wasxfail"):
        return "xpassed", ""
    return "passed", ""


class ResultsLog:
    """Writes the lines; one instance per session, in the controlling process."""

    def __init__(self, path: str, phase: str) -> None:
        self.phase = phase
        self.file: IO[str] = open(path, "a", encoding="utf-8")   # noqa: SIM115 - closed at session end
        self.reports: dict[str, list[pytest.TestReport]] = {}

    def write(self, event: str, **fields: Any) -> None:
        # one write() of a whole line, flushed: a kill never leaves half a line behind a later one
        self.file.write(json.dumps({"event": event, "phase": self.phase, **fields}) + "\n")
        self.file.flush()

    def finish(self, nodeid: str, complete: bool = True) -> None:
        reports = self.reports.pop(nodeid, None)
        if reports:
            result, message = outcome(reports)
            if not complete and result == "passed":
                result, message = "error", "did not finish: the session ended during the test"
            self.write("test", nodeid=nodeid, outcome=result,
                       duration=round(sum(r.duration for r in reports), 4), message=message)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.write("session", pid=os.getpid(), time=time.time())

    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        self.write("start", nodeid=nodeid, time=time.time())

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reports.setdefault(report.nodeid, []).append(report)
        if report.when not in ("setup", "call"):   # teardown (or a crashed worker's report)
            self.finish(report.nodeid)

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        self.finish(nodeid)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        for nodeid in list(self.reports):   # reports without a teardown: interrupted tests
            self.finish(nodeid, complete=False)
        self.write("end", exitstatus=int(exitstatus), time=time.time())
        self.file.close()
