"""scripts/gpu_check.sh (the GPU session's one command) on a machine without a GPU, and its
pytest plugins (tests/helpers/results_log.py, tests/helpers/no_nvrtc.py).

Each run of the script or of pytest is a subprocess with a timeout, so a hang fails the test
instead of stopping the suite.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from accelrt import _backend

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
NO_GPU = _backend.unavailable_reason("cuda")
needs_no_gpu = pytest.mark.skipif(NO_GPU is None, reason="checks the run without a GPU")


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod   # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def gc() -> ModuleType:
    return _load(ROOT / "scripts" / "gpu_check.py", "gpu_check_under_test")


@pytest.fixture
def runner(gc: ModuleType, tmp_path: Path) -> Iterator[Any]:
    r = gc.Runner(out=tmp_path / "out", work=tmp_path / "work", deadline=60, workers=1,
                  offline=True, force=False)
    yield r
    r.close()


def _script(*args: str, out: Path | None = None, timeout: float = 120
            ) -> tuple[subprocess.CompletedProcess[str], float]:
    env = dict(os.environ, PYTHON=sys.executable)
    env.pop("OUT", None)
    cmd = ["bash", str(SCRIPT), *args]
    if out is not None:
        cmd += ["--out", str(out / "out"), "--work", str(out / "work")]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)
    return proc, time.monotonic() - t0


def _pytest(tmp: Path, *args: str, log: Path | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
           "--rootdir", str(tmp)]
    if log is not None:
        cmd += ["-p", "helpers.results_log", f"--results-log={log}", "--results-phase=p"]
    return cmd + list(args)


def _env() -> dict[str, str]:
    """The environment of a pytest run of a plugin under test: this tree first, and no
    plugins of the installed packages (hypothesis, xdist, ...: the runs test ours, named with
    ``-p``; loading the others was two thirds of each run's time)."""
    return dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in path.read_text().splitlines()]


# ---------------------------------------------------------------------- the script

@needs_no_gpu
def test_without_a_gpu_it_fails_clearly_and_quickly(tmp_path: Path) -> None:
    proc, secs = _script(out=tmp_path)
    out = tmp_path / "out"
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"gpu_check: no GPU: {NO_GPU}" in proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1] == f"exit status 3: no GPU: {NO_GPU}"
    assert secs < 60, secs
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] and summary["exit"] == 3
    assert summary["gpu"]["available"] is False and summary["gpu"]["reason"] == NO_GPU
    first, *rest = summary["phases"]
    assert first["name"] == "preflight" and first["status"] == "fail"
    assert first["note"] == f"no GPU: {NO_GPU}"
    assert rest and all(p["status"] == "skip" and p["note"] == "no GPU" for p in rest)
    info = json.loads((out / "info.json").read_text())   # accelrt info --json, kept
    assert info["backends"][0]["name"] == "cuda" and info["backends"][0]["reason"] == NO_GPU


def test_list_prints_the_phases_and_runs_nothing(tmp_path: Path, gc: ModuleType) -> None:
    proc, _ = _script("--list", out=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for phase in gc.phases():
        assert f"\n{phase.name} " in proc.stdout
    assert "tests/distributed/test_multiprocessing_cuda.py" in proc.stdout
    assert "-k 'not on_the_gpu'" in proc.stdout
    assert not (tmp_path / "out").exists()
    proc, _ = _script("--list", "--only", "bench,nccl")
    names = [ln.split()[0] for ln in proc.stdout.splitlines()[2:] if not ln.startswith(" ")]
    assert names == ["preflight", "deps", "nccl", "nccl-refusal", "bench-replay",
                     "bench-calls", "bench-bandwidth", "bench-rand"]


def test_unknown_phase_is_refused() -> None:
    proc, _ = _script("--only", "suite,gpu-burn")
    assert proc.returncode == 2
    assert "unknown phase gpu-burn; the phases are: preflight, deps," in proc.stderr


@needs_no_gpu
def test_forced_run_writes_results_junit_and_summary(tmp_path: Path) -> None:
    """--force runs the phases without a GPU (their GPU tests skip): the plumbing end to end."""
    proc, _ = _script("--force", "--offline", "--only", "cuda-ipc", out=tmp_path, timeout=180)
    out = tmp_path / "out"
    assert proc.returncode == 3, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    phases = {p["name"]: p for p in summary["phases"]}
    assert list(phases) == ["preflight", "deps", "cuda-ipc"]
    assert phases["deps"]["status"] == "pass"
    ipc = phases["cuda-ipc"]
    assert ipc["status"] == "skip" and ipc["skipped"] == 2 and ipc["passed"] == 0
    assert ipc["note"].startswith("every test skipped: cuda backend unavailable")
    suites = ET.parse(out / "junit.xml").getroot()
    assert [s.get("name") for s in suites] == ["cuda-ipc"]
    assert suites[0].get("tests") == "2" and suites[0].get("skipped") == "2"
    ended = [ln for ln in _lines(out / "results.jsonl") if ln["event"] == "test"]
    assert {ln["phase"] for ln in ended} == {"cuda-ipc"} and len(ended) == 2
    assert re.search(r"^cuda-ipc +skip +0 +0 +0 +2 ", proc.stdout, re.MULTILINE), proc.stdout
    assert "\nmissing: " in proc.stdout


def test_a_command_past_its_budget_is_stopped(tmp_path: Path, gc: ModuleType,
                                              runner: Any) -> None:
    hang = "import threading; print('hanging', flush=True); threading.Event().wait()"
    res = runner.run_cmd([sys.executable, "-c", hang], 0.5)
    assert res.timed_out and res.rc is None and res.seconds < gc.GRACE + 5
    assert "ran past its budget of 0 s: SIGINT, then SIGKILL" in \
        (tmp_path / "out" / "gpu_check.log").read_text()


@pytest.mark.parametrize("on_sigint", ["exits", "ignores"])
def test_stopping_a_command_takes_its_children_along(tmp_path: Path, gc: ModuleType,
                                                     on_sigint: str) -> None:
    """A command that leaves a child running (mpiexec's ranks, xdist's workers) is stopped
    with its whole process group: SIGINT first (a command that handles it, as pytest does,
    ends there), SIGKILL after the grace time for one that ignores it."""
    pids = tmp_path / "pids"
    child = ("import os, signal, threading; signal.signal(signal.SIGINT, signal.SIG_IGN); "
             f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n'); threading.Event().wait()")
    handler = "signal.SIG_IGN" if on_sigint == "ignores" else "lambda *a: sys.exit(7)"
    parent = (f"import subprocess, sys, signal; signal.signal(signal.SIGINT, {handler}); "
              f"subprocess.Popen([sys.executable, '-c', {child!r}]).wait()")
    proc = subprocess.Popen([sys.executable, "-c", parent], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (pids.exists() and pids.read_text().endswith("\n")):   # gate: child is up
            assert proc.poll() is None and time.monotonic() < deadline, "no child started"
            time.sleep(0.05)
        grandchild = int(pids.read_text())
        t0 = time.monotonic()
        gc.stop_group(proc, 1.0)
        took = time.monotonic() - t0
    finally:
        gc._killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if on_sigint == "exits":
        assert proc.returncode == 7 and took < 1.0
    else:
        assert proc.returncode == -signal.SIGKILL and took >= 1.0
    deadline = time.monotonic() + 30
    while _alive(grandchild):   # the SIGKILL reached it; init reaps it
        assert time.monotonic() < deadline, "the child outlived the stop"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def _fake(clock: list[float], seen: dict[str, float], name: str, spend: float,
          raises: type[BaseException] | None = None) -> Any:
    def run(runner: Any, budget: float) -> dict[str, Any]:
        seen[name] = budget
        clock[0] += spend
        if raises is not None:
            raise raises("stop")
        return {"status": "pass"}
    return run


def test_budgets_leave_the_later_phases_their_minimum(gc: ModuleType, runner: Any) -> None:
    """A phase gets its budget, less what the later phases need at least; one that ran long
    squeezes the later ones, which are skipped (not started) below their minimum."""
    clock = [0.0]
    seen: dict[str, float] = {}
    runner.elapsed = lambda: clock[0]
    runner.deadline = 100.0
    chosen = [gc.Phase(name, budget, minimum, name, _fake(clock, seen, name, spend))
              for name, budget, minimum, spend in (
                  ("preflight", 45, 10, 5), ("deps", 90, 15, 5), ("a", 80, 20, 70),
                  ("b", 50, 20, 1), ("c", 30, 25, 1))]
    assert gc.run_all(runner, chosen) == gc.EXIT_OK
    # preflight: 100 left, 15 + 20 + 20 + 25 kept back; deps: 95 - 65; a: 90 - 45
    assert seen == {"preflight": 20, "deps": 30, "a": 45}
    status = {p["name"]: (p["status"], p.get("note")) for p in runner.summary["phases"]}
    assert status["a"] == ("pass", None)
    assert status["b"] == status["c"] == ("skip", "no time left (20 s to the deadline)")


def test_an_interrupted_run_still_writes_its_summary(gc: ModuleType, runner: Any) -> None:
    clock = [0.0]
    seen: dict[str, float] = {}
    runner.elapsed = lambda: clock[0]
    chosen = [gc.Phase("preflight", 45, 10, "", _fake(clock, seen, "preflight", 1)),
              gc.Phase("deps", 45, 10, "", _fake(clock, seen, "deps", 1, gc.Interrupted)),
              gc.Phase("later", 45, 10, "", _fake(clock, seen, "later", 1))]
    assert gc.run_all(runner, chosen) == gc.EXIT_INTERRUPTED
    summary = json.loads((runner.out / "summary.json").read_text())
    assert summary["interrupted"] and not summary["finished"]
    assert [(p["status"], p.get("note")) for p in summary["phases"]] == [
        ("pass", None), ("error", "interrupted (SIGTERM/SIGINT)"), ("skip", "interrupted")]


def test_junit_report_is_completed_from_the_results_log(gc: ModuleType) -> None:
    """pytest's own report of an interrupted phase lacks the tests that were running: they
    are added as errors, nothing is counted twice."""
    suite = ET.fromstring(
        '<testsuite name="x" tests="1" failures="0" errors="0" skipped="0">'
        '<testcase classname="tests.memory.test_a.TestM" name="test_one[p/q-1]" time="1"/>'
        '</testsuite>')
    tests = {
        "tests/memory/test_a.py::TestM::test_one[p/q-1]": {"outcome": "passed", "message": ""},
        "tests/memory/test_a.py::test_two": {"outcome": "error", "duration": 2,
                                             "message": "did not finish: the session ended"},
    }
    out = gc.junit_from_results("x", tests, ["tests/memory/test_b.py::test_hung"], suite)
    cases = {(c.get("classname"), c.get("name")): c for c in out.iter("testcase")}
    assert list(cases) == [("tests.memory.test_a.TestM", "test_one[p/q-1]"),
                           ("tests.memory.test_a", "test_two"),
                           ("tests.memory.test_b", "test_hung")]
    assert (out.get("tests"), out.get("errors"), out.get("failures")) == ("3", "2", "0")
    assert cases[("tests.memory.test_b", "test_hung")].find("error") is not None


def test_work_folder_of_someone_else_is_refused_and_old_results_go(tmp_path: Path,
                                                                     gc: ModuleType) -> None:
    """--work is emptied first: only a folder an earlier run made (or an empty one) is
    taken. The results an earlier run left in the output folder are removed, not counted
    again; other files there stay."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(SystemExit, match="is not empty and not a folder of an earlier run"):
        gc.Runner(out=tmp_path / "out", work=tmp_path / "mine", deadline=60, workers=1,
                  offline=True, force=False)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_text('{"event": "test"}\n')
    (out / "other.txt").write_text("keep")
    for _ in range(2):   # the second run reuses the first's work folder
        r = gc.Runner(out=out, work=tmp_path / "work", deadline=60, workers=1, offline=True,
                      force=False)
        r.close()
    assert not (out / "results.jsonl").exists() and (out / "other.txt").exists()


def test_gpu_read_from_accelrt_info(gc: ModuleType) -> None:
    """The preflight's reading of ``accelrt info --json`` on a GPU, with the cpu backend's
    real output standing in for cuda's (same structure)."""
    from accelrt import cli
    info = cli.collect_info(self_check=True, backends=["cpu"])
    info["backends"][0]["name"] = "cuda"
    gpu = gc.gpu_from_info(json.loads(json.dumps(info, default=str)))
    assert gpu["available"] and gpu["reason"] is None and gpu["info_ok"] is True
    first = gpu["devices"][0]
    assert first["device"] == "cpu:0" and first["name"] and first["total_memory"] > 0
    assert first["self_check_ok"] is True and first["error"] is None
    info["backends"][0]["devices"][0]["self_check"]["ok"] = False
    assert gc.gpu_from_info(info)["devices"][0]["self_check_ok"] is False
    assert gc.gpu_from_info({"backends": []}) == {
        "available": False, "reason": None, "devices": [], "info_ok": None, "accelrt": None,
        "allocator_build": None}


def test_compiled_build_follows_setup_py(gc: ModuleType) -> None:
    from helpers.builds import compiled_module_names
    modules, options = gc.compiled_config()
    assert [m.removesuffix(".py").replace("/", ".") for m in modules] == compiled_module_names()
    assert options == {"opt_level": "3", "debug_level": "0", "group_name": "accelrt",
                       "multi_file": True}


def test_tools_venv_sees_the_callers_packages(tmp_path: Path, gc: ModuleType) -> None:
    """The peers' virtual environment: its own site-packages first, then every package of
    the Python that made it (the GPU machine's torch lives in a virtual environment)."""
    py, purelib = gc.make_tools_venv(sys.executable, tmp_path / "tools")
    code = "import sys, numpy, pytest; print(sys.prefix); print(numpy.__file__)"
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    prefix, numpy_file = out.stdout.split()
    assert Path(prefix) == tmp_path / "tools" and purelib.is_relative_to(tmp_path / "tools")
    import numpy
    assert numpy_file == numpy.__file__


def test_summary_table_marks_missing_peers(gc: ModuleType, tmp_path: Path) -> None:
    bench = {"replay": [{"trace": "t.json.gz", "allocator": "accelrt", "us_per_op": 4.5,
                         "peak_reserved": 1 << 20},
                        {"trace": "t.json.gz", "allocator": "torch", "error": "no torch"}],
             "calls_us": {"stream create": {"accelrt": 1.5, "cupy": 5.25}},
             "rand": {"1048576": {"accelrt": {"ms": 0.08, "gbs": 52.4}}}}
    lines = gc.format_bench(bench)
    assert any("accelrt" in ln and "4.500" in ln and "1,048,576" in ln for ln in lines)
    assert not any("no torch" in ln for ln in lines)
    assert [ln.split() for ln in lines if "stream create" in ln] == [
        ["stream", "create", "1.500", "|", "-", "|", "5.250"]]
    assert [ln.split() for ln in lines if "1,048,576" in ln and "|" in ln] == [
        ["1,048,576", "0.080", "(52)", "|", "-"]]


def test_summary_fits_the_device_tools_output_tail(gc: ModuleType, tmp_path: Path) -> None:
    """The device tool returns the last 12000 characters of the output: the closing summary
    stays shorter, however many phases failed, so its phase table always comes back."""
    long = "x" * 400
    phases = [{"name": p.name, "status": "fail", "passed": 1000, "failed": 100, "errors": 9,
               "skipped": 99, "duration_s": 99.0, "budget_s": 100.0, "note": long,
               "failures": [f"tests/a.py::test_{i} - {long}" for i in range(100)],
               "unfinished": [f"tests/a.py::test_{i}[{long}]" for i in range(10)],
               "gpu_tests_skipped": [f"tests/a.py::test_gpu_{i} - {long}" for i in range(50)]}
              for p in gc.phases()]
    summary = {"phases": phases, "deadline_s": 470, "elapsed_s": 470, "exit": 1,
               "gpu": {"devices": [{"name": "NVIDIA H200"}], "nvidia_smi": long[:200]},
               "missing": dict.fromkeys(("nvtx", "nccl", "torch", "cupy", "mpiexec", "xdist",
                                         "mypy", "nvrtc", "websocket"), long)}
    rows = [{"trace": f"trace_{t}.json.gz", "allocator": f"accelrt [{long[:40]}]",
             "us_per_op": 1.0, "peak_reserved": 1 << 40} for t in range(2) for _ in range(7)]
    bench = {"replay": rows, "replay_compiled": rows[:6],
             "calls_us": {w: {"accelrt": 1.0, "torch": 1.0, "cupy": 1.0} for w in "abcde"},
             "bandwidth_gbs": {"d2d": {"accelrt": 1.0, "torch": 1.0}},
             "rand": {"1048576": {"accelrt": {"ms": 1.0, "gbs": 1.0}}}}
    (tmp_path / "summary.json").write_text("{}")
    text = gc.format_summary(summary, bench, tmp_path)
    assert len(text) < 11000, len(text)
    assert text.rstrip().endswith("exit status 1: a phase failed, timed out or could not run")


def test_bench_parts_the_script_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_cuda.py's ``--peers`` and its ``rand`` part (run here on the cpu backend: the
    function takes the device)."""
    import argparse
    bench = _load(ROOT / "bench" / "bench_cuda.py", "bench_cuda_under_test")
    assert bench._peers("none") == () and bench._peers("") == ()
    assert bench._peers("torch, cupy") == ("torch", "cupy")
    with pytest.raises(argparse.ArgumentTypeError, match="unknown peer tor: choose from"):
        bench._peers("tor")
    monkeypatch.setattr(bench, "RAND_SIZES", (1 << 12,))
    monkeypatch.setattr(bench, "RAND_CALLS", 2)
    out = bench.accelrt_rand("cpu:0")
    assert list(out) == ["4096"] and out["4096"]["ms"] > 0
    assert out["4096"]["gbs"] == pytest.approx(4 * 4096 / out["4096"]["ms"] / 1e6)


# ---------------------------------------------------------------------- the pytest plugins

HANGS = '''
import threading
import pytest

def test_passes():
    pass

def test_fails():
    assert 1 == 2, "boom"

@pytest.mark.skip(reason="not here")
def test_skipped():
    pass

def test_hangs():
    threading.Event().wait()

def test_never_reached():
    pass
'''


def test_results_log_keeps_finished_tests_when_the_run_is_killed(tmp_path: Path,
                                                                 gc: ModuleType,
                                                                 runner: Any) -> None:
    (tmp_path / "test_hangs.py").write_text(HANGS)
    log = tmp_path / "results.jsonl"
    proc = subprocess.Popen(_pytest(tmp_path, "test_hangs.py", log=log), cwd=tmp_path,
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while '"test_hangs.py::test_hangs"' not in (log.read_text() if log.exists() else ""):
            assert proc.poll() is None, "pytest ended before the hanging test"
            assert time.monotonic() < deadline, "the hanging test never started"
            time.sleep(0.05)
    finally:
        proc.kill()   # SIGKILL: no session end, no junitxml
        proc.wait(30)
    lines = _lines(log)
    ended = {ln["nodeid"].split("::")[1]: ln for ln in lines if ln["event"] == "test"}
    assert {k: v["outcome"] for k, v in ended.items()} == {
        "test_passes": "passed", "test_fails": "failed", "test_skipped": "skipped"}
    assert "AssertionError: boom" in ended["test_fails"]["message"]
    assert ended["test_skipped"]["message"] == "not here"
    assert lines[-1]["event"] == "start" and lines[-1]["nodeid"].endswith("::test_hangs")
    assert not any(ln["event"] == "end" for ln in lines)
    # what gpu_check makes of it: the hung test named, and an error in the rebuilt junit
    runner.results = log
    tests, unfinished = runner.results_of("p")
    assert unfinished == ["test_hangs.py::test_hangs"]
    suite = gc.junit_from_results("p", tests, unfinished)
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"),
            suite.get("skipped")) == ("4", "1", "1", "1")


OUTCOMES = '''
import pytest

@pytest.fixture
def broken_setup():
    raise RuntimeError("setup broke")

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown broke")

def test_setup_error(broken_setup):
    pass

def test_teardown_error(broken_teardown):
    pass

@pytest.mark.xfail(reason="known")
def test_xfailed():
    assert 0

@pytest.mark.xfail(reason="known")
def test_xpassed():
    pass

def test_skip_inside():
    pytest.skip("decided at run time")
'''


def test_results_log_outcomes_match_junit(tmp_path: Path) -> None:
    (tmp_path / "test_outcomes.py").write_text(OUTCOMES)
    log = tmp_path / "results.jsonl"
    proc = subprocess.run(_pytest(tmp_path, "test_outcomes.py", f"--junitxml={tmp_path}/j.xml",
                                  log=log), cwd=tmp_path, env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = _lines(log)
    assert lines[0]["event"] == "session" and lines[-1] == {
        "event": "end", "phase": "p", "exitstatus": 1, "time": lines[-1]["time"]}
    ended = {ln["nodeid"].split("::")[1]: (ln["outcome"], ln["message"])
             for ln in lines if ln["event"] == "test"}
    assert ended == {
        "test_setup_error": ("error", "RuntimeError: setup broke"),
        "test_teardown_error": ("error", "RuntimeError: teardown broke"),
        "test_xfailed": ("xfailed", ended["test_xfailed"][1]),
        "test_xpassed": ("xpassed", ""),
        "test_skip_inside": ("skipped", "decided at run time"),
    }
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("errors") == "2"


def test_results_log_is_inert_without_its_option(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    cmd = _pytest(tmp_path, "-p", "helpers.results_log", "test_one.py")
    proc = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test_one.py"]


NVRTC = '''
from accelrt.backends.cuda import _cu, _kernels

class FakeNvrtc:
    @staticmethod
    def nvrtcVersion():
        return (0, 12, 4)

def test_version(monkeypatch):
    monkeypatch.setattr(_cu, "load_nvrtc", lambda: FakeNvrtc)
    print("NVRTC", _kernels.nvrtc_version())
'''


@pytest.mark.parametrize("plugin, seen", [((), "(12, 4)"), (("-p", "helpers.no_nvrtc"), "None")],
                         ids=["as-is", "no_nvrtc"])
def test_no_nvrtc_plugin_hides_the_library(tmp_path: Path, plugin: tuple[str, ...],
                                           seen: str) -> None:
    (tmp_path / "test_nvrtc.py").write_text(NVRTC)
    proc = subprocess.run(_pytest(tmp_path, "-s", *plugin, "test_nvrtc.py"), cwd=tmp_path,
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"NVRTC {seen}" in proc.stdout


def test_torch_allocator_phase_builds_the_shim_or_skips(runner: Any, gc: ModuleType) -> None:
    """The torch-allocator phase (issue 24 §4) skips with the reason without a CUDA PyTorch,
    and builds the shim from source (the tree's src has none) into a copy that loads."""
    import ctypes
    import shutil
    runner.probe = {"modules": {},
                    "errors": {"torch": "ImportError: No module named 'torch'"}}
    runner.tools_probe = runner.probe
    res = runner.torch_allocator(30.0)
    assert res == {"status": "skip",
                   "note": "no PyTorch with CUDA: ImportError: No module named 'torch'"}
    if not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("no C++ compiler here")
    src, why = runner.build_torch_shim(60.0)
    assert src is not None, why
    (lib,) = (src / "accelrt" / "interop" / "_lib").glob("_torch_shim*.so")
    assert ctypes.cast(ctypes.CDLL(str(lib)).accelrt_torch_malloc, ctypes.c_void_p).value
    assert "torch-allocator" in [p.name for p in gc.phases()]
