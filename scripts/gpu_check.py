"""GPU verification in one command: the whole suite and the CUDA checks within a time budget.

Run by ``scripts/gpu_check.sh`` (which picks the Python), on a machine with an NVIDIA GPU::

    bash scripts/gpu_check.sh                   # every phase; results under $OUT (or --out)
    bash scripts/gpu_check.sh --list            # the phases, their budgets and commands
    bash scripts/gpu_check.sh --only suite,bench --deadline 300
    bash scripts/gpu_check.sh --prepare         # here, with a network: fill .gpu_carry/

Every phase runs in its own process group under a time budget (killed when it runs out: first
SIGINT, so pytest still writes its reports, then SIGKILL), and the run as a whole keeps to
``--deadline`` seconds (default 470, inside 8 minutes): a phase gets at most its budget and
never eats the minimum that the phases after it need; one with less than its own minimum
left is skipped. Without a usable GPU the run stops after ``preflight`` with ``no GPU:
<reason>`` and exit status 3 (``--force`` runs the rest anyway: the GPU tests skip).

Written under the output folder (at most 8 files come back from the GPU machine):

* ``summary.json``: the environment, the packages found or missing, and each phase's status
  (``pass``, ``fail``, ``timeout``, ``error``: could not run, ``skip``), counts and duration,
  rewritten as each phase starts and ends;
* ``results.jsonl``: one line per test start and end, every pytest phase
  (``tests/helpers/results_log.py``): what finished survives a kill, and a test that started
  without ending is the one that hung;
* ``junit.xml``: every pytest phase's ``--junitxml`` in one ``<testsuites>``, rewritten after
  each phase (a phase that was killed is rebuilt from ``results.jsonl``);
* ``gpu_check.log``: everything every command printed; ``info.json``: ``accelrt info
  --backend cuda --json``; ``bench_cuda.json``: the benchmarks' results, part by part.

Exit status: 0 when no phase failed, 1 when one failed, timed out or could not run, 3 without
a GPU, 130 when interrupted.

The packages come from the machine (no network is assumed): ``.gpu_carry/wheels/*.whl``
(written by ``--prepare``) are installed first, with ``pip --no-index`` into a folder of
their own; for what is still missing ``pip install`` is tried once with short timeouts; what
cannot be had is reported in the summary and its phases or columns are skipped. PyTorch and
CuPy are the benchmarks' peers, never accelrt's dependencies: used from the machine's Python
when it has them, else installed (if a registry answers) into a separate virtual environment.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
CARRY = ROOT / ".gpu_carry"
DEADLINE = 470.0
EXIT_OK, EXIT_FAILED, EXIT_NO_GPU, EXIT_INTERRUPTED = 0, 1, 3, 130
OUT_FILES = ("summary.json", "results.jsonl", "junit.xml", "gpu_check.log", "info.json",
             "bench_cuda.json", "torch_allocator.json")
GRACE = 8.0          # seconds between SIGINT and SIGKILL when a budget runs out
PER_TEST = 90        # pytest-timeout per test inside the phases (the suite's own is 120)

#: wheels ``--prepare`` downloads for the GPU machine (not in its image, or needed there):
#: the NCCL engine, nvtx ranges, the viz tests' websocket client, MPI (mpiexec), and mypy
#: with what it needs for the compiled (mypyc) build
CARRY_WHEELS = ("nccl4py", "nvtx", "websocket-client", "mpich", "mypy", "librt",
                "ast-serialize", "pathspec")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
PEERS_BY_MODULE = {"torch": ("torch", "torch_expandable", "driverpool"), "cupy": ("cupy",)}
#: what ``pip install`` is tried for when missing (module -> requirement)
PIP_NAMES = {"nvtx": "nvtx", "nccl": "nccl4py", "websocket": "websocket-client",
             "xdist": "pytest-xdist", "pytest_timeout": "pytest-timeout",
             "hypothesis": "hypothesis"}
#: the compiled build's own packages (mypyc ships with mypy): installed apart from the
#: suite's, so that the suite's mypy tests keep skipping as they do without the build
BUILD_PACKAGES = ("mypy", "librt", "ast-serialize", "pathspec")

#: the GPU tests of the CUDA paths changed since the last GPU run, and the check of every call
#: site against the real packages (its NCCL part needs nccl4py): the ``changed`` phase
CHANGED_TESTS = ["tests/backends/test_cuda_gpu_s40.py", "tests/backends/test_cuda_ctx_gpu_s41.py",
                 "tests/backends/test_cuda_calls_s40.py", "tests/backends/test_cuda_capture_gpu_s41.py",
                 "tests/backends/test_cuda_ctx_s41.py"]

SUITE = {   # the whole suite in four pytest runs; the dedicated phases' tests are left out
    "suite-backends": ["tests/backends", *(f"--ignore={t}" for t in CHANGED_TESTS)],
    "suite-runtime": ["tests/runtime"],
    "suite-memory": ["tests/memory"],
    "suite-rest": ["tests/distributed", "tests/package", "tests/tools",
                   "--ignore=tests/distributed/test_multiprocessing_cuda.py",
                   "-k", "not on_the_gpu"],
}
PTX_TESTS = ["tests/backends/test_cuda_backend.py", "tests/backends/test_cuda_kernels.py",
             "tests/runtime/test_random.py", "tests/runtime/test_random_small.py",
             "tests/runtime/test_random_fast_path.py", "tests/runtime/test_comm.py",
             "-k", "gpu or cuda"]

PROBE = r'''
import importlib, importlib.metadata as md, importlib.util as iu, json, os, shutil, sys
import sysconfig
r = {"python": sys.version.split()[0], "executable": sys.executable, "versions": {},
     "modules": {}, "errors": {}}
for dist in ("numpy", "cuda-bindings", "cuda-core", "nvidia-ml-py", "nvtx", "nccl4py",
             "nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-cuda-nvrtc",
             "nvidia-cuda-nvrtc-cu12", "mpi4py", "mpich", "pytest", "pytest-xdist",
             "pytest-timeout", "hypothesis", "websocket-client", "torch", "cupy-cuda12x",
             "cupy-cuda13x", "mypy", "setuptools", "pyopencl"):
    try:
        r["versions"][dist] = md.version(dist)
    except md.PackageNotFoundError:
        pass
def check(name, fn):
    try:
        r["modules"][name] = fn()
    except BaseException as e:
        r["modules"][name] = None
        r["errors"][name] = f"{type(e).__name__}: {e}"[:300]
def has(mod):
    if iu.find_spec(mod) is None:
        raise ImportError(f"No module named {mod!r}")
    return True
def imp(mod):
    importlib.import_module(mod)
    return True
check("numpy", lambda: imp("numpy"))
check("cuda.bindings", lambda: imp("cuda.bindings.driver"))
check("pynvml", lambda: has("pynvml"))
check("nvtx", lambda: has("nvtx"))
check("websocket", lambda: has("websocket"))
check("xdist", lambda: has("xdist"))
check("pytest_timeout", lambda: has("pytest_timeout"))
check("hypothesis", lambda: has("hypothesis"))
check("mpi4py", lambda: has("mpi4py"))
check("mpiexec", lambda: shutil.which("mpiexec") or (
    os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.exists(os.path.join(os.path.dirname(sys.executable), "mpiexec")) else None))
def nvrtc():
    from accelrt.backends.cuda._kernels import nvrtc_version
    v = nvrtc_version()
    if v is None:
        raise ImportError("no NVRTC library (nvidia-cuda-nvrtc) can be loaded")
    return "%d.%d" % v
check("nvrtc", nvrtc)
def nccl():
    import accelrt.distributed as dist
    if not dist.is_nccl_available():
        from accelrt.distributed._nccl import _core
        _core()   # raises the reason
        raise ImportError("accelrt.distributed.is_nccl_available() is False")
    return True
check("nccl", nccl)
def torch():
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError(f"torch {torch.__version__} sees no GPU")
    return torch.__version__
check("torch", torch)
def cupy():
    import cupy
    n = cupy.cuda.runtime.getDeviceCount()
    if not n:
        raise RuntimeError("cupy sees no GPU")
    return cupy.__version__
check("cupy", cupy)
check("cc", lambda: shutil.which("cc") or shutil.which("gcc"))
def python_h():
    path = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} (Python's headers) is missing")
    return path
check("python_h", python_h)
print(json.dumps(r))
'''


class Interrupted(Exception):
    """The run got SIGTERM or SIGINT."""


@dataclass
class Phase:
    name: str
    budget: float          # seconds at most
    minimum: float         # skipped when less is left
    what: str              # one line for --list
    run: Callable[[Runner, float], dict[str, Any]]
    command: str = ""      # what it runs, for --list


@dataclass
class Cmd:
    rc: int | None
    timed_out: bool
    seconds: float
    output: str = ""


@dataclass
class Runner:
    out: Path
    work: Path
    deadline: float
    workers: int
    offline: bool
    force: bool
    python: str = sys.executable
    t0: float = field(default_factory=time.monotonic)
    summary: dict[str, Any] = field(default_factory=dict)
    probe: dict[str, Any] = field(default_factory=dict)
    tools_python: str = ""
    tools_probe: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    no_gpu: str | None = None
    compiled_build: subprocess.Popen[bytes] | None = None
    compiled_note: str = ""
    compiled_skip: bool = True   # the build was never started: skip, not an error
    peer_script: Path | None = None
    log: IO[str] = field(init=False)
    bench: dict[str, Any] = field(default_factory=dict)
    selected: tuple[str, ...] = ()   # the phases of this run (the build starts only for them)

    # ------------------------------------------------------------------ plumbing

    def __post_init__(self) -> None:
        marker = self.work / ".accelrt-gpu-check"
        if self.work.exists() and any(self.work.iterdir()) and not marker.exists():
            raise SystemExit(f"gpu_check: {self.work} is not empty and not a folder of an "
                             f"earlier run: pick another --work (it is emptied first)")
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True, exist_ok=True)
        marker.touch()
        self.out.mkdir(parents=True, exist_ok=True)
        for name in OUT_FILES:   # an earlier run's results would be counted again
            (self.out / name).unlink(missing_ok=True)
        self.log = open(self.out / "gpu_check.log", "a", encoding="utf-8")   # noqa: SIM115
        self.results = self.out / "results.jsonl"
        self.tools_python = self.python
        self.env = self.make_env(ROOT / "src")
        self.summary = {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "root": str(ROOT),
            "python": sys.version.split()[0], "executable": self.python,
            "cpus": os.cpu_count(), "deadline_s": self.deadline, "finished": False,
            "gpu": None, "packages": {}, "missing": {}, "phases": [],
        }

    def make_env(self, accelrt_path: Path) -> dict[str, str]:
        """The phases' environment: accelrt from ``accelrt_path``, ``tests`` (for the pytest
        plugins) and the carried packages on ``PYTHONPATH``."""
        env = dict(os.environ)
        paths = [str(accelrt_path), str(ROOT / "tests")]
        site = self.work / "site"
        if site.exists():
            paths.append(str(site))
        if os.environ.get("PYTHONPATH"):
            paths.append(os.environ["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        mpich = self.work / "mpich"
        if (mpich / "bin" / "mpiexec").exists():
            env["PATH"] = os.pathsep.join([str(mpich / "bin"), env.get("PATH", "")])
            lib = mpich / "lib" / "libmpi.so.12"
            if lib.exists():
                env["MPI4PY_LIBMPI"] = str(lib)
        env.setdefault("HYPOTHESIS_PROFILE", "ci")
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONFAULTHANDLER"] = "1"   # a crash prints every thread's Python stack
        if self.peer_script is not None:
            env["ACCELRT_SHARED"] = str(self.peer_script.parent.parent)
        return env

    def close(self) -> None:
        self.log.close()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def say(self, msg: str) -> None:
        print(msg, flush=True)
        self.log.write(msg + "\n")
        self.log.flush()

    def note(self, msg: str) -> None:
        """A line for the log only."""
        self.log.write(msg + "\n")
        self.log.flush()

    def write_json(self, name: str, data: Any) -> None:
        tmp = self.out / f".{name}.tmp"
        tmp.write_text(json.dumps(data, indent=1, default=str))
        os.replace(tmp, self.out / name)

    def save(self) -> None:
        self.summary["elapsed_s"] = round(self.elapsed(), 1)
        self.write_json("summary.json", self.summary)

    def run_cmd(self, cmd: list[str], budget: float, *, env: dict[str, str] | None = None,
                cwd: Path = ROOT, stdout: Path | None = None) -> Cmd:
        """Run ``cmd`` in its own process group for at most ``budget`` seconds, its output
        appended to the log (or stdout to ``stdout``, stderr to the log). On timeout the
        group gets SIGINT, then SIGKILL after :data:`GRACE` seconds; stragglers of the group
        are killed when the command ends either way."""
        self.note("$ " + shlex.join(a if len(a) < 300 else f"<{len(a)} characters>"
                                    for a in cmd))
        start = os.path.getsize(self.log.name)
        out_file = open(stdout, "w") if stdout else None   # noqa: SIM115
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env or self.env, stdin=subprocess.DEVNULL,
                                    stdout=out_file or self.log, stderr=self.log,
                                    start_new_session=True)
        except OSError as exc:
            if out_file:
                out_file.close()
            self.note(f"could not start: {exc}")
            return Cmd(None, False, 0.0, str(exc))
        timed_out = False
        try:
            try:
                rc: int | None = proc.wait(timeout=max(budget, 0.1))
            except subprocess.TimeoutExpired:
                timed_out = True
                self.note(f"--- ran past its budget of {budget:.0f} s: SIGINT, then SIGKILL")
                stop_group(proc, GRACE)
                rc = None
        finally:
            _killpg(proc.pid, signal.SIGKILL)   # whatever the command left running
            if proc.poll() is None:
                proc.wait()
            if out_file:
                out_file.close()
        with open(self.log.name, "rb") as f:
            f.seek(start)
            output = f.read().decode("utf-8", errors="replace")
        if stdout:
            output = stdout.read_text(errors="replace") + output
        return Cmd(rc, timed_out, time.monotonic() - t0, output)

    # ------------------------------------------------------------------ results

    def results_of(self, phase: str) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """``({nodeid: its "test" line}, [nodeids started but not ended])`` of ``phase``."""
        tests: dict[str, dict[str, Any]] = {}
        started: list[str] = []
        for line in _lines(self.results):
            if line.get("phase") != phase:
                continue
            if line.get("event") == "start":
                started.append(line["nodeid"])
            elif line.get("event") == "test":
                tests[line["nodeid"]] = line
        return tests, [n for n in dict.fromkeys(started) if n not in tests]

    def merge_junit(self) -> None:
        """``junit.xml``: every finished pytest phase's report; a killed phase's rebuilt from
        ``results.jsonl`` (its unfinished tests as errors)."""
        suites = ET.Element("testsuites")
        for ph in self.summary["phases"]:
            if ph.get("kind") != "pytest" or ph["status"] in ("pending", "running"):
                continue
            path = self.work / f"junit-{ph['name']}.xml"
            suite = None
            if path.exists():
                try:
                    root = ET.parse(path).getroot()
                    suite = root if root.tag == "testsuite" else root.find("testsuite")
                except ET.ParseError:
                    suite = None
            tests, unfinished = self.results_of(ph["name"])
            # the tests pytest's own report lacks: all of them when it was killed before
            # writing one, those interrupted by SIGINT when it did
            suite = junit_from_results(ph["name"], tests, unfinished, suite)
            suite.set("name", ph["name"])
            suites.append(suite)
        tmp = self.out / ".junit.xml.tmp"
        ET.ElementTree(suites).write(tmp, encoding="utf-8", xml_declaration=True)
        os.replace(tmp, self.out / "junit.xml")

    # ------------------------------------------------------------------ phases: generic

    def pytest_phase(self, name: str, budget: float, args: list[str], *, parallel: bool = False,
                     env: dict[str, str] | None = None, plugins: tuple[str, ...] = (),
                     per_test: int = PER_TEST) -> dict[str, Any]:
        junit = self.work / f"junit-{name}.xml"
        cmd = [self.python, "-m", "pytest", "-p", "helpers.results_log",
               f"--results-log={self.results}", f"--results-phase={name}",
               f"--junitxml={junit}", "-o", f"junit_suite_name={name}",
               "-p", "no:cacheprovider", "-p", "no:benchmark", "-q", "-rfEs"]
        for plugin in plugins:
            cmd += ["-p", plugin]
        if self.have("pytest_timeout"):
            cmd.append(f"--timeout={per_test}")
        if parallel and self.workers > 1 and self.have("xdist"):
            cmd += ["-n", str(self.workers)]
        res = self.run_cmd(cmd + args, budget, env=env)
        tests, unfinished = self.results_of(name)
        counts = dict.fromkeys(("passed", "failed", "errors", "skipped"), 0)
        for line in tests.values():
            key = {"error": "errors", "xfailed": "skipped", "xpassed": "passed"}.get(
                line["outcome"], line["outcome"])
            counts[key] = counts.get(key, 0) + 1
        result: dict[str, Any] = {"kind": "pytest", **counts}
        result["failures"] = [f"{n} - {t['message'].splitlines()[0] if t['message'] else ''}"
                              for n, t in tests.items() if t["outcome"] in ("failed", "error")]
        result["unfinished"] = unfinished
        result["gpu_tests_skipped"] = [f"{n} - {t['message']}" for n, t in tests.items()
                                       if t["outcome"] == "skipped" and "test_gpu_" in n]
        if res.timed_out:
            result["status"] = "timeout"
            result["note"] = (f"killed after {budget:.0f} s" +
                              (f"; still running: {unfinished[0]}" if unfinished else ""))
        elif res.rc is None:
            result["status"], result["note"] = "error", f"could not start: {res.output}"
        elif res.rc == 0:
            ran = counts["passed"] + counts["failed"] + counts["errors"]
            result["status"] = "pass" if ran else "skip"
            if not ran:
                reasons = sorted({t["message"] for t in tests.values()})
                result["note"] = "every test skipped" + (f": {reasons[0]}" if reasons else "")
        elif res.rc == 1:
            result["status"] = "fail"
        elif res.rc == 5:
            result["status"], result["note"] = "skip", "no test selected"
        else:
            result["status"] = "error"
            result["note"] = f"pytest exit status {res.rc}: " + _last_line(res.output)
        return result

    def have(self, module: str, probe: dict[str, Any] | None = None) -> bool:
        return bool((probe or self.probe).get("modules", {}).get(module))

    def why_not(self, module: str, probe: dict[str, Any] | None = None) -> str:
        return str((probe or self.probe).get("errors", {}).get(module, "not found"))

    # ------------------------------------------------------------------ the phases

    def preflight(self, budget: float) -> dict[str, Any]:
        end = time.monotonic() + budget
        smi = shutil.which("nvidia-smi")
        gpu: dict[str, Any] = {"nvidia_smi": None}
        if smi:
            r = self.run_cmd([smi, "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], min(20.0, budget / 3))
            gpu["nvidia_smi"] = r.output.strip()[:500] or None
        info_path = self.out / "info.json"
        r = self.run_cmd([self.python, "-m", "accelrt", "info", "--backend", "cuda", "--json"],
                         end - time.monotonic(), stdout=info_path)
        try:
            info = json.loads(info_path.read_text())
        except (OSError, ValueError):
            info = {}
        gpu.update(gpu_from_info(info))
        self.summary["gpu"] = gpu
        if r.timed_out:
            self.no_gpu = f"accelrt info did not answer within {budget:.0f} s"
        elif not info:
            self.no_gpu = "accelrt info failed: " + _last_line(r.output)
        elif not gpu["available"] or not gpu["devices"]:
            self.no_gpu = str(gpu["reason"] or "the cuda backend lists no device")
        if self.no_gpu is not None:
            self.say(f"gpu_check: no GPU: {self.no_gpu}")
            return {"status": "fail", "note": f"no GPU: {self.no_gpu}"}
        names = ", ".join(str(d["name"]) for d in gpu["devices"])
        bad = [d["device"] for d in gpu["devices"] if d["error"] or not d["self_check_ok"]]
        if bad or r.rc != 0:
            return {"status": "fail", "note": f"{names}: accelrt info's device query or "
                                              f"self-check failed on {', '.join(bad) or '?'} "
                                              f"(exit {r.rc}; info.json has the steps)"}
        return {"status": "pass", "note": names}

    def deps(self, budget: float) -> dict[str, Any]:
        end = time.monotonic() + budget
        notes: list[str] = []
        wheels = sorted((CARRY / "wheels").glob("*.whl"))
        if wheels:
            notes.append(self.install_carried(wheels, end))
            self.env = self.make_env(ROOT / "src")
        self.probe = self.run_probe(self.python, self.env, end)
        if not self.probe:
            return {"status": "error", "note": "the package probe failed (see the log)"}
        missing = [m for m in PIP_NAMES if not self.have(m)]
        if missing and not self.offline and time.monotonic() < end - 10:
            notes.append(self.pip_try([PIP_NAMES[m] for m in missing], self.work / "site", end))
            self.env = self.make_env(ROOT / "src")
            self.probe = self.run_probe(self.python, self.env, end) or self.probe
        if any(name.startswith("compiled-") for name in self.selected):
            self.check_mypyc(end, notes)
        self.tools(end, notes)
        self.find_peer_script()
        self.env = self.make_env(ROOT / "src")
        if any(name.startswith("compiled-") for name in self.selected):
            self.start_compiled_build()
        self.summary["packages"] = self.probe.get("versions", {})
        missing_now = {m: self.why_not(m) for m in
                       ("cuda.bindings", "pynvml", "nvtx", "nvrtc", "nccl", "mpi4py", "mpiexec",
                        "xdist", "pytest_timeout", "hypothesis", "websocket")
                       if not self.have(m)}
        if any(name.startswith("compiled-") for name in self.selected) and \
                not self.have("mypy"):
            missing_now["mypy"] = self.why_not("mypy")[:60] + "; the compiled build is skipped"
        for m in ("torch", "cupy"):
            if not self.have(m, self.tools_probe):
                missing_now[m] = self.why_not(m, self.tools_probe)[:60] + \
                    "; its benchmark columns are skipped"
        if self.peer_script is None:
            missing_now["replay_peer.py"] = ("not carried (bash scripts/gpu_check.sh --prepare "
                                             "copies it into .gpu_carry/); replay peers skipped")
        self.summary["missing"] = missing_now
        for m, why in missing_now.items():
            self.say(f"  missing: {m}: {why}")
        if not self.have("cuda.bindings"):
            return {"status": "fail", "note": "cuda-bindings not importable: "
                                              + self.why_not("cuda.bindings")}
        notes.append(f"{len(missing_now)} missing" if missing_now else "all found")
        return {"status": "pass", "note": "; ".join(n for n in notes if n)}

    def install_carried(self, wheels: list[Path], end: float) -> str:
        """The wheels of ``.gpu_carry/wheels``: mpich with ``--prefix`` (``--target`` drops
        its ``lib/``), the rest with ``--target``; no index, no dependencies."""
        pip = [self.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
               "--no-compile", "--no-cache-dir", "--disable-pip-version-check"]
        def name(w: Path) -> str:
            return w.name.split("-")[0].replace("_", "-").lower()
        target = ["--upgrade", "--target", str(self.work / "site")]
        build = ["--upgrade", "--target", str(self.work / "build-site")]
        prefix = ["--ignore-installed", "--prefix", str(self.work / "mpich")]
        mpich = [w for w in wheels if name(w) == "mpich"]
        for_build = [w for w in wheels if name(w) in BUILD_PACKAGES]
        rest = [w for w in wheels if w not in mpich and w not in for_build]
        failed: list[str] = []
        for batch, where in ((rest, target), (for_build, build), (mpich, prefix)):
            if not batch:
                continue
            r = self.run_cmd(pip + where + [str(w) for w in batch], end - time.monotonic())
            if r.rc != 0 and len(batch) > 1:   # one bad wheel stops a whole install: retry
                for w in batch:                 # one by one, to keep the others
                    if self.run_cmd(pip + where + [str(w)], end - time.monotonic()).rc != 0:
                        failed.append(name(w))
            elif r.rc != 0:
                failed.append(name(batch[0]))
        return (f"{len(wheels) - len(failed)} of {len(wheels)} carried wheels installed"
                + (f" ({', '.join(failed)} failed: see the log)" if failed else ""))

    def pip_try(self, names: list[str], target: Path, end: float) -> str:
        """One ``pip install`` of ``names`` into ``target`` from whatever index is
        configured, with short network timeouts (the GPU machine may have no network)."""
        r = self.run_cmd([self.python, "-m", "pip", "install", "-q", "--no-deps",
                          "--disable-pip-version-check", "--retries", "0", "--timeout", "5",
                          "--upgrade", "--target", str(target), *names],
                         min(60.0, end - time.monotonic() - 5))
        if r.rc == 0:
            return f"pip installed {' '.join(names)}"
        return f"pip could not install {' '.join(names)} (no registry reachable?)"

    def run_probe(self, python: str, env: dict[str, str], end: float) -> dict[str, Any]:
        r = self.run_cmd([python, "-c", PROBE], max(5.0, end - time.monotonic()), env=env,
                         stdout=self.work / "probe.json")
        try:
            return dict(json.loads((self.work / "probe.json").read_text()))
        except (OSError, ValueError):
            self.note(f"probe failed: {_last_line(r.output)}")
            return {}

    def tools(self, end: float, notes: list[str]) -> None:
        """PyTorch and CuPy for the benchmarks: the machine's own when its Python has them,
        else a virtual environment of their own (:func:`make_tools_venv`) that ``pip`` fills
        if a registry answers; never accelrt's dependencies."""
        self.tools_python, self.tools_probe = self.python, self.probe
        need = [m for m in ("torch", "cupy") if not self.have(m)]
        if not need or self.offline or time.monotonic() > end - 20:
            return
        venv = self.work / "tools"
        try:
            py, purelib = make_tools_venv(self.python, venv)
        except (OSError, subprocess.SubprocessError) as exc:
            notes.append(f"no virtual environment for torch/cupy: {exc}")
            return
        major = str(self.probe.get("versions", {}).get("cuda-bindings", "13")).split(".")[0]
        reqs = {"torch": "torch", "cupy": f"cupy-cuda{major}x"}
        self.run_cmd([self.python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                      "--retries", "0", "--timeout", "5", "--target", str(purelib),
                      *(reqs[m] for m in need)], min(180.0, end - time.monotonic() - 10))
        probe = self.run_probe(str(py), self.env, end)
        if probe and any(self.have(m, probe) for m in need):
            self.tools_python, self.tools_probe = str(py), probe
            notes.append(f"torch/cupy from {venv}")
        else:
            notes.append(f"pip could not install {' '.join(reqs[m] for m in need)}")

    def find_peer_script(self) -> None:
        """``replay_peer.py`` (the benchmark's peers): carried, in the checkout's ``shared``,
        or where ``ACCELRT_SHARED`` says."""
        candidates = [CARRY / "replay_peer.py", ROOT / "shared" / "tools" / "replay_peer.py",
                      ROOT.parent / "shared" / "tools" / "replay_peer.py"]
        if os.environ.get("ACCELRT_SHARED"):
            candidates.insert(0, Path(os.environ["ACCELRT_SHARED"]) / "tools" / "replay_peer.py")
        for path in candidates:
            if path.exists():
                if path.parent.name != "tools":   # bench_cuda.py looks in $ACCELRT_SHARED/tools
                    dst = self.work / "shared" / "tools" / "replay_peer.py"
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, dst)
                    path = dst
                self.peer_script = path
                return

    def build_env(self) -> dict[str, str]:
        """The compiled build's environment: its own packages first, then the carried ones
        (no accelrt on the path: mypyc reads the copy it builds)."""
        env = dict(self.env)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [str(self.work / "build-site"), str(self.work / "site"),
                        os.environ.get("PYTHONPATH", "")] if p)
        return env

    def check_mypyc(self, end: float, notes: list[str]) -> None:
        """Whether mypyc imports in the build's environment (``pip`` is tried once if not);
        recorded as the probe's ``mypy``."""
        code = "import mypyc.build, setuptools"
        r = self.run_cmd([self.python, "-c", code], min(60.0, end - time.monotonic()),
                         env=self.build_env())
        if r.rc != 0 and not self.offline and time.monotonic() < end - 10:
            notes.append(self.pip_try(list(BUILD_PACKAGES), self.work / "build-site", end))
            r = self.run_cmd([self.python, "-c", code], min(60.0, end - time.monotonic()),
                             env=self.build_env())
        self.probe.setdefault("modules", {})["mypy"] = r.rc == 0 or None
        if r.rc != 0:
            self.probe.setdefault("errors", {})["mypy"] = _last_line(r.output) or "not found"

    def start_compiled_build(self) -> None:
        """Start the mypyc build of setup.py's ``COMPILED`` modules in the background, in a
        copy of ``src/accelrt`` (built in place there; the tree's ``src`` stays pure)."""
        if not self.have("mypy"):
            self.compiled_note = "mypyc not importable: " + self.why_not("mypy")
            return
        for need in ("cc", "python_h"):
            if not self.have(need):
                self.compiled_note = f"no {need}: " + self.why_not(need)
                return
        modules, options = compiled_config()
        dst = self.work / "compiled"
        shutil.copytree(ROOT / "src" / "accelrt", dst / "accelrt",
                        ignore=shutil.ignore_patterns("__pycache__"))
        code = ("import sys\nfrom setuptools import setup\nfrom mypyc.build import mypycify\n"
                f"setup(name='accelrt-compiled', ext_modules=mypycify(sys.argv[1:], "
                f"**{options!r}), script_args=['build_ext', '--inplace'])\n")
        env = self.build_env()
        log = open(self.work / "compiled-build.log", "w")   # noqa: SIM115
        cmd = [self.python, "-c", code, f"--config-file={ROOT / 'pyproject.toml'}", *modules]
        self.note(f"$ (background, in {dst}) {shlex.join(cmd)}")
        self.compiled_build = subprocess.Popen(cmd, cwd=dst, env=env, stdout=log, stderr=log,
                                               stdin=subprocess.DEVNULL, start_new_session=True)
        self.compiled_skip = False
        log.close()

    def wait_compiled(self, budget: float) -> str | None:
        """``None`` when the compiled build is ready, else why not."""
        if self.compiled_build is None:
            return self.compiled_note or "not built"
        try:
            rc = self.compiled_build.wait(timeout=max(budget, 0.1))
        except subprocess.TimeoutExpired:
            _killpg(self.compiled_build.pid, signal.SIGKILL)
            self.compiled_build.wait()
            self.compiled_build = None
            self.compiled_note = f"the mypyc build did not finish within {budget:.0f} s"
            return self.compiled_note
        text = (self.work / "compiled-build.log").read_text(errors="replace")
        if rc != 0:
            self.note("--- compiled build log:\n" + text[-8000:])
            self.compiled_build = None
            self.compiled_note = "the mypyc build failed: " + _last_line(text)
            return self.compiled_note
        return None

    def conformance(self, budget: float) -> dict[str, Any]:
        # the backend contract on the GPU, and torch 2.14's graph API over it (keep_graph,
        # instantiate, raw handles, cuGraphDebugDotPrint)
        return self.pytest_phase("conformance", budget,
                                 ["tests/backends/test_conformance.py",
                                  "tests/runtime/test_graph_torch214.py", "-k", "cuda"])

    def changed(self, budget: float) -> dict[str, Any]:
        return self.pytest_phase("changed", budget, CHANGED_TESTS)

    def cuda_ipc(self, budget: float) -> dict[str, Any]:
        return self.pytest_phase("cuda-ipc", budget,
                                 ["tests/distributed/test_multiprocessing_cuda.py"])

    def nccl(self, budget: float) -> dict[str, Any]:
        # each case launches mpiexec (the tests' own limit is 300 s; the suite's 120 s)
        result = self.pytest_phase("nccl", budget, ["tests/distributed/test_distributed_api.py",
                                                    "tests/distributed/test_dist_extras.py",
                                                    "-k", "on_the_gpu"], per_test=120)
        if not self.have("nccl"):
            result["note"] = ("nccl4py missing (" + self.why_not("nccl") + "): the NCCL cases "
                              "skipped; " + result.get("note", "")).rstrip("; ")
        return result

    def nccl_refusal(self, budget: float) -> dict[str, Any]:
        for need in ("nccl", "mpi4py", "mpiexec"):
            if not self.have(need):
                return {"status": "skip", "note": f"{need} missing: {self.why_not(need)}"}
        env = dict(self.env, UCX_TLS="self,sm", FAIL_TIMEOUT="20", ACCELRT_CPU_STREAMS="sync")
        mpiexec = str(self.probe["modules"]["mpiexec"])
        r = self.run_cmd([mpiexec, "-iface", "lo", "-n", "2", self.python,
                          "tests/distributed/fail.py", "two_ranks_one_gpu"], budget, env=env)
        caught = all(f"CAUGHT {rank} " in r.output for rank in (0, 1))
        if r.timed_out:
            return {"status": "timeout", "note": f"killed after {budget:.0f} s"}
        if r.rc == 0 and caught and "same GPU" in r.output:
            return {"status": "pass", "passed": 1, "note": "two ranks on one GPU refused"}
        return {"status": "fail", "failed": 1, "failures": [
            f"mpiexec -n 2 fail.py two_ranks_one_gpu: exit {r.rc}, "
            f"{'a DistError' if caught else 'no DistError'} - " + _last_line(r.output)]}

    def ptx(self, budget: float) -> dict[str, Any]:
        if not self.have("nvrtc"):
            return {"status": "skip", "note": "no NVRTC here: the suite already ran on the "
                                              "committed PTX"}
        return self.pytest_phase("ptx", budget, PTX_TESTS, parallel=True,
                                 plugins=("helpers.no_nvrtc",))

    def run_bench(self, part: str, budget: float, env: dict[str, str], key: str,
                  peers: tuple[str, ...] | None = None) -> dict[str, Any]:
        dst = self.work / f"bench-{key}.json"
        cmd = [self.tools_python, "bench/bench_cuda.py", "--only", part, "--json", str(dst)]
        if part == "replay":
            if peers is None:
                peers = tuple(p for m, ps in PEERS_BY_MODULE.items()
                              if self.have(m, self.tools_probe) for p in ps)
                if self.peer_script is None:
                    peers = ()
            cmd += ["--peers", ",".join(peers) or "none"]
            if self.peer_script is not None:
                cmd += ["--peer-script", str(self.peer_script)]
        r = self.run_cmd(cmd, budget, env=env)
        if r.timed_out:
            return {"status": "timeout", "note": f"killed after {budget:.0f} s"}
        if r.rc != 0:
            return {"status": "fail", "failed": 1, "failures": [
                f"bench_cuda.py --only {part}: exit {r.rc} - {_last_line(r.output)}"]}
        if not dst.exists():
            return {"status": "skip", "note": _last_line(r.output)}
        data = json.loads(dst.read_text())
        self.bench["device"] = data.get("device")
        self.bench["missing_peers"] = {m: why for m, why in self.summary["missing"].items()
                                       if m in ("torch", "cupy", "replay_peer.py")}
        self.bench.update({("replay_compiled" if key == "compiled-replay" else k): v
                           for k, v in data.items() if k != "device"})
        self.write_json("bench_cuda.json", self.bench)
        errors = [f"{row['trace']} {row['allocator']}: {row['error']}"
                  for row in data.get("replay", []) if "error" in row]
        return {"status": "pass", "note": "; ".join(errors)[:300]}

    def build_torch_shim(self, budget: float) -> tuple[Path | None, str]:
        """A copy of ``src/accelrt`` with the PyTorch allocator shim built in it (the tree's
        ``src`` is used without installing, so it has no shim): ``(its parent, "")`` or
        ``(None, why not)``."""
        cxx = shutil.which("c++") or shutil.which("g++")
        if cxx is None:
            return None, "no C++ compiler (c++ or g++) on PATH"
        dst = self.work / "torchshim"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(ROOT / "src" / "accelrt", dst / "accelrt",
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        code = "import importlib.machinery as m; print(m.EXTENSION_SUFFIXES[0])"
        suffix = subprocess.run([self.tools_python, "-c", code], capture_output=True,
                                text=True, timeout=60, check=False).stdout.strip() or ".so"
        shim = dst / "accelrt" / "interop"
        (shim / "_lib").mkdir(exist_ok=True)
        r = self.run_cmd([cxx, "-shared", "-fPIC", "-O2",
                          "-o", str(shim / "_lib" / f"_torch_shim{suffix}"),
                          str(shim / "_torch_shim.cpp")], budget)
        if r.rc != 0:
            return None, "the shim did not compile: " + _last_line(r.output)
        return dst, ""

    def torch_allocator(self, budget: float) -> dict[str, Any]:
        """accelrt's allocator inside PyTorch (issue 24 §4): the shim's tests with a CUDA
        PyTorch, then a small training loop per allocator, each in its own process, into
        ``torch_allocator.json``."""
        end = time.monotonic() + budget
        if not self.have("torch", self.tools_probe):
            return {"status": "skip", "note": "no PyTorch with CUDA: "
                    + self.why_not("torch", self.tools_probe)}
        src, why = self.build_torch_shim(min(60.0, budget / 4))
        if src is None:
            return {"status": "skip", "note": why}
        env = self.make_env(src)
        saved, self.python = self.python, self.tools_python
        try:
            result = self.pytest_phase("torch-allocator", (end - time.monotonic()) * 0.4,
                                       ["tests/interop/test_torch_shim.py"], env=env)
        finally:
            self.python = saved
        runs: list[dict[str, Any]] = []
        for variant in ("native", "native_expandable", "accelrt", "accelrt_lowfrag"):
            left = end - time.monotonic()
            if left < 10:
                runs.append({"variant": variant, "error": "no time left"})
                continue
            dst = self.work / f"torch-{variant}.json"
            r = self.run_cmd([self.tools_python, "scripts/torch_allocator_run.py", variant,
                              "--json", str(dst)], left / 2 if variant != "accelrt_lowfrag"
                             else left, env=env)
            if r.rc == 0 and dst.exists():
                runs.append(json.loads(dst.read_text()))
            else:
                runs.append({"variant": variant, "error": ("timed out" if r.timed_out else
                                                           f"exit {r.rc}: " +
                                                           _last_line(r.output))})
        self.write_json("torch_allocator.json", {"runs": runs})
        errors = [f"{run['variant']}: {run['error']}" for run in runs if "error" in run]
        if errors:
            result.setdefault("failures", []).extend(errors)
            result["status"] = "fail"
        note = "; ".join(f"{run['variant']} {run['peak_reserved_bytes'] / 2**20:.0f} MiB "
                         f"{run['median_step_ms']:.1f} ms" for run in runs if "error" not in run)
        result["note"] = (result.get("note", "") + "; " + note).strip("; ")[:300]
        return result

    def compiled_tests(self, budget: float) -> dict[str, Any]:
        end = time.monotonic() + budget
        why = self.wait_compiled(budget * 0.6)
        if why is not None:
            return {"status": "skip" if self.compiled_skip else "error", "note": why}
        env = self.make_env(self.work / "compiled")
        check = self.run_cmd([self.python, "-c", ("import accelrt.memory as m; "
                              "print('compiled' if m.compiled else 'pure')")],
                             min(30.0, end - time.monotonic()), env=env)
        if "compiled" not in check.output.split():
            return {"status": "error", "note": "the compiled build does not load: "
                                               + _last_line(check.output)}
        return self.pytest_phase("compiled-tests", end - time.monotonic(), ["tests/memory"],
                                 parallel=True, env=env)

    def compiled_replay(self, budget: float) -> dict[str, Any]:
        why = self.wait_compiled(budget / 2)
        if why is not None:
            return {"status": "skip" if self.compiled_skip else "error", "note": why}
        return self.run_bench("replay", budget, self.make_env(self.work / "compiled"),
                              "compiled-replay", peers=())


def gpu_from_info(info: dict[str, Any]) -> dict[str, Any]:
    """What the summary keeps of ``accelrt info --json``: whether cuda is usable (or why
    not), and per device its name, memory, capability, self-check result or error."""
    cuda: dict[str, Any] = next(
        (b for b in info.get("backends", []) if b.get("name") == "cuda"), {})
    devices = []
    for d in cuda.get("devices", []):
        props = d.get("properties") or {}
        devices.append({
            "device": d.get("device"), "name": props.get("name"),
            "total_memory": props.get("total_memory"),
            "capability": (f"{props['major']}.{props['minor']}"
                           if "major" in props and "minor" in props else None),
            "self_check_ok": (d.get("self_check") or {}).get("ok"), "error": d.get("error")})
    return {"available": bool(cuda.get("available")), "reason": cuda.get("reason"),
            "devices": devices, "info_ok": info.get("ok"), "accelrt": info.get("version"),
            "allocator_build": info.get("allocator_build")}


def suite_phase(name: str) -> Callable[[Runner, float], dict[str, Any]]:
    def run(runner: Runner, budget: float) -> dict[str, Any]:
        return runner.pytest_phase(name, budget, SUITE[name], parallel=True)
    return run


def bench_phase(part: str) -> Callable[[Runner, float], dict[str, Any]]:
    def run(runner: Runner, budget: float) -> dict[str, Any]:
        return runner.run_bench(part, budget, runner.env, part)
    return run


def phases() -> list[Phase]:
    """Every phase in the order it runs, with its budget and minimum (seconds)."""
    pt = "python -m pytest -p helpers.results_log ..."
    out = [
        Phase("preflight", 45, 10, "nvidia-smi; accelrt info --backend cuda --json (the "
              "self-check) -> info.json; stops here without a GPU", Runner.preflight,
              "python -m accelrt info --backend cuda --json"),
        Phase("deps", 90, 15, "install .gpu_carry/wheels; probe the packages; pip for what is "
              "missing (short timeouts); torch/cupy for the benchmarks; start the mypyc "
              "build in the background", Runner.deps),
        Phase("conformance", 60, 20, "the backend contract (v2) on cuda", Runner.conformance,
              f"{pt} tests/backends/test_conformance.py tests/runtime/test_graph_torch214.py "
              "-k cuda"),
        Phase("changed", 45, 15, "the CUDA paths changed since the last GPU run (s40: a use "
              "on a destroyed or another device's stream, external events in a graph, the "
              "out-of-memory observer, the profiler, NCCL on cuda:1; s41: cudaGetDevice follows "
              "accelrt's current device) and every driver/NVRTC/"
              "NVML/NVTX/NCCL call site against the real packages", Runner.changed,
              f"{pt} " + shlex.join(CHANGED_TESTS)),
        Phase("cuda-ipc", 60, 20, "CUDA IPC between two processes on one GPU", Runner.cuda_ipc,
              f"{pt} tests/distributed/test_multiprocessing_cuda.py"),
        Phase("nccl", 150, 20, "one-rank NCCL communicator (MPI, env:// and tcp:// store rendezvous), cuda "
              "arrays staged over MPI (two ranks), split_group/barrier/coalesced on NCCL",
              Runner.nccl,
              f"{pt} tests/distributed/test_distributed_api.py "
              "tests/distributed/test_dist_extras.py -k on_the_gpu"),
        Phase("nccl-refusal", 45, 10, "two ranks on one GPU with NCCL are refused",
              Runner.nccl_refusal,
              "mpiexec -iface lo -n 2 python tests/distributed/fail.py two_ranks_one_gpu"),
    ]
    budgets = {"suite-backends": (100, 30), "suite-runtime": (100, 30),
               "suite-memory": (80, 25), "suite-rest": (80, 25)}
    for name, args in SUITE.items():
        out.append(Phase(name, *budgets[name], "the whole suite, part " + name.split("-")[1],
                         suite_phase(name),
                         f"{pt} -n N --timeout {PER_TEST} " + shlex.join(args)))
    out += [
        Phase("ptx", 45, 15, "the GPU kernel tests again with NVRTC hidden (committed PTX)",
              Runner.ptx, f"{pt} -p helpers.no_nvrtc " + shlex.join(PTX_TESTS)),
    ]
    out += [
        Phase("torch-allocator", 150, 40, "accelrt's allocator as PyTorch's (CUDAPluggable"
              "Allocator via the shim): the shim's tests with CUDA torch; a training loop "
              "per allocator (native, native expandable, accelrt, accelrt low-fragmentation) "
              "-> torch_allocator.json", Runner.torch_allocator,
              f"c++ -shared _torch_shim.cpp; {pt} tests/interop/test_torch_shim.py; "
              "python scripts/torch_allocator_run.py VARIANT"),
    ]
    for part, budget, minimum, what in (
            ("replay", 120, 30, ("trace replay on real memory vs torch/torch_expandable/cupy/"
                                "driverpool")),
            ("calls", 45, 15, "runtime-call latencies vs torch.cuda and CuPy"),
            ("bandwidth", 30, 10, "d2d and pinned h2d copy bandwidth vs torch"),
            ("rand", 30, 10, "uniform_ float32 1 Mi / 64 Mi elements vs torch")):
        out.append(Phase(f"bench-{part}", budget, minimum, what,
                         bench_phase(part),
                         f"python bench/bench_cuda.py --only {part} --json ..."))
    out += [
        Phase("compiled-tests", 60, 20, "tests/memory on the mypyc build (ACCELRT_COMPILE=1's "
              "modules)", Runner.compiled_tests, f"{pt} -n N tests/memory (compiled accelrt)"),
        Phase("compiled-replay", 45, 15, "bench replay rows of the mypyc build",
              Runner.compiled_replay, "python bench/bench_cuda.py --only replay --peers none"),
    ]
    return out


def select(all_phases: list[Phase], only: str | None) -> list[Phase]:
    """``--only``: names or prefixes (``suite``, ``bench``, ``compiled``); preflight and deps
    always run."""
    if not only:
        return all_phases
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    names = [p.name for p in all_phases]
    unknown = [w for w in wanted if not any(n == w or n.startswith(w + "-") for n in names)]
    if unknown:
        raise ValueError(f"unknown phase {', '.join(unknown)}; the phases are: "
                         + ", ".join(names))
    return [p for p in all_phases if p.name in ("preflight", "deps") or
            any(p.name == w or p.name.startswith(w + "-") for w in wanted)]


def run_all(runner: Runner, chosen: list[Phase]) -> int:
    summary = runner.summary
    runner.selected = tuple(p.name for p in chosen)
    summary["phases"] = [{"name": p.name, "status": "pending", "budget_s": p.budget}
                         for p in chosen]
    runner.save()
    current: dict[str, Any] | None = None
    try:
        for i, ph in enumerate(chosen):
            rec = summary["phases"][i]
            left = runner.deadline - runner.elapsed()
            budget = min(ph.budget, left - sum(p.minimum for p in chosen[i + 1:]))
            if runner.no_gpu is not None and not runner.force:
                rec.update(status="skip", note="no GPU")
                continue
            if ph.name in ("preflight", "deps"):   # always run: they decide the rest
                budget = max(budget, ph.minimum)
            elif budget < ph.minimum:
                rec.update(status="skip", note=f"no time left ({left:.0f} s to the deadline)")
                runner.say(f"[{runner.elapsed():6.1f}s] {ph.name}: skipped, no time left")
                continue
            rec.update(status="running", budget_s=round(budget, 1))
            current = rec
            runner.save()
            runner.say(f"[{runner.elapsed():6.1f}s] {ph.name}: {ph.what} (budget {budget:.0f} s)")
            t0 = time.monotonic()
            try:
                result = ph.run(runner, budget)
            except Interrupted:
                raise
            except Exception as exc:   # noqa: BLE001 - a broken phase must not stop the others
                result = {"status": "error", "note": f"{type(exc).__name__}: {exc}"}
                runner.note(f"--- {ph.name} raised:\n{_traceback()}")
            rec.update(result, duration_s=round(time.monotonic() - t0, 1))
            current = None
            if rec.get("kind") == "pytest":
                runner.merge_junit()
            runner.save()
            runner.say(f"[{runner.elapsed():6.1f}s] {ph.name}: {_line(rec)}")
            for failure in rec.get("failures", [])[:10]:
                runner.say(f"    FAILED {failure[:240]}")
            for nodeid in rec.get("unfinished", [])[:5]:
                runner.say(f"    UNFINISHED {nodeid}")
    except Interrupted:
        if current is not None:
            current.update(status="error", note="interrupted (SIGTERM/SIGINT)")
        for rec in summary["phases"]:
            if rec["status"] == "pending":
                rec.update(status="skip", note="interrupted")
        summary["interrupted"] = True
    summary["finished"] = not summary.get("interrupted", False)
    if runner.compiled_build is not None and runner.compiled_build.poll() is None:
        _killpg(runner.compiled_build.pid, signal.SIGKILL)
    if runner.no_gpu is not None:
        code = EXIT_NO_GPU
    elif summary.get("interrupted"):
        code = EXIT_INTERRUPTED
    elif any(r["status"] in ("fail", "timeout", "error") for r in summary["phases"]):
        code = EXIT_FAILED
    else:
        code = EXIT_OK
    summary["exit"] = code
    runner.save()
    if any(r.get("kind") == "pytest" for r in summary["phases"]):
        runner.merge_junit()
    runner.say(format_summary(summary, runner.bench, runner.out))
    return code


# ---------------------------------------------------------------------- reports

def format_summary(summary: dict[str, Any], bench: dict[str, Any], out: Path) -> str:
    """The closing report, kept under 11000 characters: the device tool returns the last
    12000 of the output, and the phase table must be among them."""
    gpu = summary.get("gpu") or {}
    devices = ", ".join(str(d.get("name")) for d in gpu.get("devices", [])) or "no GPU"
    smi = str(gpu.get("nvidia_smi") or "no nvidia-smi")[:120]
    lines = ["", (f"== gpu_check summary: {devices}; {smi}; "
                  f"{summary.get('elapsed_s', 0):.0f} s of {summary['deadline_s']:.0f} s ==")]
    lines.append(f"{'phase':16} {'status':8} {'passed':>7} {'failed':>7} {'errors':>7} "
                 f"{'skipped':>7} {'time/budget s':>14}  note")
    for r in summary["phases"]:
        counts = [str(r[k]) if k in r else "" for k in ("passed", "failed", "errors", "skipped")]
        took = (f"{r['duration_s']:.0f}" if "duration_s" in r else "-") + \
            f"/{r.get('budget_s', 0):.0f}"
        lines.append(f"{r['name']:16} {r['status']:8} {counts[0]:>7} {counts[1]:>7} "
                     f"{counts[2]:>7} {counts[3]:>7} {took:>14}  {str(r.get('note', ''))[:70]}")
    failures = [(r["name"], f) for r in summary["phases"] for f in r.get("failures", [])]
    if failures:
        lines.append(f"failures ({len(failures)}; all in results.jsonl / junit.xml):")
        lines += [f"  {name}: {f[:140]}" for name, f in failures[:12]]
    unfinished = [(r["name"], n) for r in summary["phases"] for n in r.get("unfinished", [])]
    if unfinished:
        lines.append("started but never finished (hung or killed):")
        lines += [f"  {name}: {n[:150]}" for name, n in unfinished[:5]]
    skipped = [s for r in summary["phases"] for s in r.get("gpu_tests_skipped", [])]
    if skipped:
        lines.append("test_gpu_* tests skipped (only second-GPU, CuPy or PyTorch ones may be):")
        lines += [f"  {s[:150]}" for s in skipped[:8]]
    if summary.get("missing"):
        lines.append("missing: " + "; ".join(f"{k} ({str(v)[:80]})"
                                             for k, v in summary["missing"].items()))
    lines += format_bench(bench)
    lines.append(f"files in {out}: " + ", ".join(n for n in OUT_FILES if (out / n).exists()))
    meaning = {EXIT_OK: "every phase passed or was skipped", EXIT_FAILED: "a phase failed, "
               "timed out or could not run", EXIT_INTERRUPTED: "interrupted"}
    no_gpu = next((r["note"] for r in summary["phases"] if r["name"] == "preflight"
                   and str(r.get("note", "")).startswith("no GPU")), None)
    lines.append(f"exit status {summary.get('exit')}: " +
                 (no_gpu if summary.get("exit") == EXIT_NO_GPU and no_gpu
                  else meaning.get(summary.get("exit", -1), "")))
    return "\n".join(lines)


def format_bench(bench: dict[str, Any]) -> list[str]:
    """The benchmarks side by side: accelrt, torch, cupy ('-' where a peer did not run)."""
    lines: list[str] = []
    rows = [r for r in bench.get("replay", []) + bench.get("replay_compiled", [])
            if "error" not in r]
    if rows:
        lines.append("replay: us/op | peak reserved")
        for r in bench.get("replay", []):
            if "error" not in r:
                lines.append(f"  {r['trace']:32} {r['allocator']:50} {r['us_per_op']:>9.3f} "
                             f"{r['peak_reserved']:>15,}")
        for r in bench.get("replay_compiled", []):
            if "error" not in r:
                lines.append(f"  {r['trace']:32} {'compiled ' + r['allocator']:50} "
                             f"{r['us_per_op']:>9.3f} {r['peak_reserved']:>15,}")
    peers = ("accelrt", "torch", "cupy")

    def cell(row: dict[str, Any], p: str, fmt: str) -> str:
        return format(row[p], fmt) if p in row else "-"
    if bench.get("calls_us"):
        lines.append("runtime calls, us: " + " | ".join(peers))
        lines += [f"  {what:20} " + " | ".join(cell(row, p, ".3f") for p in peers)
                  for what, row in bench["calls_us"].items()]
    if bench.get("bandwidth_gbs"):
        lines.append("copy 256 MiB, GB/s: accelrt | torch")
        lines += [f"  {kind:20} " + " | ".join(cell(row, p, ".1f") for p in peers[:2])
                  for kind, row in bench["bandwidth_gbs"].items()]
    if bench.get("rand"):
        lines.append("uniform_ float32, ms (GB/s): accelrt | torch")
        for n, row in bench["rand"].items():
            lines.append(f"  {int(n):<20,} " + " | ".join(
                f"{row[p]['ms']:.3f} ({row[p]['gbs']:.0f})" if p in row else "-"
                for p in peers[:2]))
    return lines


def junit_names(nodeid: str) -> tuple[str, str]:
    """``(classname, name)`` of a test in pytest's junit report (its mangle_test_address):
    the file as a dotted module with the classes joined to it, and the test with its
    parameters untouched."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = names[0].replace("/", ".").removesuffix(".py")
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def junit_from_results(name: str, tests: dict[str, dict[str, Any]], unfinished: list[str],
                       suite: ET.Element | None = None) -> ET.Element:
    """A ``<testsuite>`` of a phase's result lines, or ``suite`` (pytest's own) completed
    with the tests it lacks; unfinished tests are errors."""
    if suite is None:
        suite = ET.Element("testsuite", name=name)
    present = {(c.get("classname"), c.get("name")) for c in suite.iter("testcase")}
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    for nodeid, line in list(tests.items()) + [(n, None) for n in unfinished]:
        classname, test = junit_names(nodeid)
        if (classname, test) in present:
            continue
        case = ET.SubElement(suite, "testcase", classname=classname, name=test,
                             time=str((line or {}).get("duration", 0)))
        counts["tests"] += 1
        outcome = line["outcome"] if line else "unfinished"
        message = line["message"] if line else "did not finish: the phase was killed"
        if outcome == "failed":
            counts["failures"] += 1
            ET.SubElement(case, "failure", message=message[:500]).text = message
        elif outcome in ("error", "unfinished"):
            counts["errors"] += 1
            ET.SubElement(case, "error", message=message[:500]).text = message
        elif outcome in ("skipped", "xfailed"):
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message=message[:500])
    for key, value in counts.items():
        suite.set(key, str(value))
    return suite


def make_tools_venv(python: str, venv: Path) -> tuple[Path, Path]:
    """A virtual environment for the benchmarks' peers (no pip of its own: the caller's pip
    installs into it with ``--target``) that also sees every package of ``python``'s
    environment through a ``.pth`` file. ``--system-site-packages`` is not enough: when
    ``python`` is itself a virtual environment's (the GPU machine's is), that flag shows the
    base interpreter's packages, not that environment's. Returns ``(its python, its
    site-packages)``."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True,
                   capture_output=True, timeout=120)
    py = venv / "bin" / "python"
    base = subprocess.run([python, "-c", ("import site, sys; print('\\n'.join("
                           "p for p in sys.path if p.endswith('-packages')))")],
                          check=True, capture_output=True, text=True, timeout=60).stdout
    purelib = Path(subprocess.run([str(py), "-c", ("import sysconfig; "
                                   "print(sysconfig.get_paths()['purelib'])")],
                                  check=True, capture_output=True, text=True,
                                  timeout=60).stdout.strip())
    # "import" lines of a .pth run at start-up: addsitedir also reads those folders' .pth files
    (purelib / "accelrt_gpu_check_base.pth").write_text("".join(
        f"import site; site.addsitedir({d!r})\n" for d in base.splitlines() if d))
    return py, purelib


def compiled_config() -> tuple[list[str], dict[str, Any]]:
    """setup.py's ``COMPILED`` paths (relative to ``src``) and its ``mypycify`` keywords."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    modules: list[str] = []
    options: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "COMPILED"
                                                for t in node.targets):
            modules = [p.removeprefix("src/") for p in ast.literal_eval(node.value)]
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "mypycify":
            options = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    if not modules:
        raise RuntimeError("setup.py has no COMPILED list")
    return modules, options


# ---------------------------------------------------------------------- helpers

def stop_group(proc: subprocess.Popen[Any], grace: float) -> None:
    """Stop ``proc``'s process group (``proc`` started with ``start_new_session``): SIGINT,
    so that pytest still writes its reports and prints where it was; SIGKILL after ``grace``
    seconds if ``proc`` is still running; then SIGKILL to whatever is left of the group (a
    child that ignored SIGINT, or outlived its parent)."""
    _killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    _killpg(proc.pid, signal.SIGKILL)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for raw in f:
                try:
                    yield json.loads(raw)
                except ValueError:   # a line cut by a kill
                    continue
    except FileNotFoundError:
        return


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _line(rec: dict[str, Any]) -> str:
    counts = ", ".join(f"{rec[k]} {k}" for k in ("passed", "failed", "errors", "skipped")
                       if rec.get(k))
    parts = [rec["status"], counts, f"{rec.get('duration_s', 0):.1f} s", rec.get("note", "")]
    return "; ".join(str(p) for p in parts if p)


def _traceback() -> str:
    import traceback
    return traceback.format_exc()


def _on_signal(signum: int, frame: object) -> None:
    raise Interrupted(signal.Signals(signum).name)


def list_phases(chosen: list[Phase], deadline: float) -> str:
    lines = [(f"gpu_check phases (deadline {deadline:.0f} s; a phase gets at most its budget and "
             f"leaves the later phases their minimum):"),
             f"{'phase':16} {'budget':>6} {'min':>5}  what"]
    for p in chosen:
        lines.append(f"{p.name:16} {p.budget:>6.0f} {p.minimum:>5.0f}  {p.what}")
        if p.command:
            lines.append(f"{'':30}$ {p.command}")
    return "\n".join(lines)


def prepare(python_version: str) -> int:
    """Here, with a network: the wheels the GPU machine lacks into ``.gpu_carry/wheels`` and
    the replay peers' script into ``.gpu_carry/`` (name ``.gpu_carry`` in the device run's
    ``carry``)."""
    wheels = CARRY / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)   # one version of each: two stop the install
    wheels.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", python_version, "--implementation", "cp",
           *(a for p in PLATFORMS for a in ("--platform", p)), "-d", str(wheels), *CARRY_WHEELS]
    print("$ " + shlex.join(cmd), flush=True)
    rc = subprocess.run(cmd, timeout=900).returncode
    shared = Path(os.environ.get("ACCELRT_SHARED", ROOT.parent / "shared"))
    peer = shared / "tools" / "replay_peer.py"
    if peer.exists():
        shutil.copy(peer, CARRY / "replay_peer.py")
    else:
        print(f"gpu_check: {peer} not found: the replay peers will be skipped", flush=True)
    size = sum(p.stat().st_size for p in CARRY.rglob("*") if p.is_file())
    print(f"{CARRY}: {size / 2**20:.1f} MiB:", *sorted(p.name for p in wheels.iterdir()),
          sep="\n  ")
    print('then: run(command="bash scripts/gpu_check.sh", timeout_s=540, carry=[".gpu_carry"])')
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, default=None,
                    help="the results folder (default: $OUT, else /tmp/accelrt-gpu-check/out)")
    ap.add_argument("--work", type=Path, default=None,
                    help="scratch folder, emptied first (default: /tmp/accelrt-gpu-check/work)")
    ap.add_argument("--deadline", type=float, default=DEADLINE,
                    help=f"seconds for the whole run (default {DEADLINE:.0f})")
    ap.add_argument("--only", help="comma-separated phases or prefixes (suite, bench, "
                                   "compiled); preflight and deps always run")
    ap.add_argument("--workers", type=int, default=None,
                    help="pytest-xdist workers for the suite (default: CPUs - 4, 2 to 12)")
    ap.add_argument("--offline", action="store_true", help="never call pip install")
    ap.add_argument("--force", action="store_true",
                    help="run every phase even without a GPU (the GPU tests skip)")
    ap.add_argument("--list", "--dry-run", dest="list", action="store_true",
                    help="print the phases and exit")
    ap.add_argument("--prepare", action="store_true",
                    help="download the wheels to carry into .gpu_carry/ (needs a network)")
    ap.add_argument("--python-version", default="3.12", help="for --prepare (default 3.12)")
    args = ap.parse_args(argv)
    try:
        chosen = select(phases(), args.only)
    except ValueError as exc:
        ap.error(str(exc))
    if args.list:
        print(list_phases(chosen, args.deadline))
        return EXIT_OK
    if args.prepare:
        return prepare(args.python_version)
    base = Path("/tmp/accelrt-gpu-check")
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else base / "out")
    workers = args.workers or max(2, min(12, (os.cpu_count() or 4) - 4))
    runner = Runner(out=out.resolve(), work=(args.work or base / "work").resolve(),
                    deadline=args.deadline, workers=workers, offline=args.offline,
                    force=args.force)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    runner.say(f"gpu_check: {len(chosen)} phases, deadline {args.deadline:.0f} s, results in "
               f"{runner.out}; python {runner.python}")
    try:
        return run_all(runner, chosen)
    finally:
        runner.close()


if __name__ == "__main__":
    sys.exit(main())
