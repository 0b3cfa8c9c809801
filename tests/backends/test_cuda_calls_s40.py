"""Every call accelrt makes to the CUDA driver, NVRTC, NVML, NVTX and NCCL, checked against the
installed packages without a GPU (session 40).

The stand-ins of tests/backends/test_cuda_backend.py answer driver calls from a table written
by hand. Here the *real* ``cuda.bindings`` wrappers run, over stand-in ``libcuda``/``libnvrtc``
libraries built from C (:mod:`helpers.cuda_stub`): a wrong argument kind or count is the real
wrapper's error, result tuples have the real arity and types (``CUdeviceptr``, ``CUuuid``,
``cuuint64_t``, enums), and the enums and structs the code fills are the real ones.
:mod:`helpers.cuda_calls` drives the backend's raw operations on two devices, their error
answers, the discovery paths, the runtime paths changed since the GPU run (a use on another
device's stream, out of memory, expandable segments, graphs, interprocess sharing), NVML's
real ``pynvml`` wrappers, the real ``nvtx`` package and nccl4py's real ``nccl.core`` (where it
is installed) down to its bindings module; it also holds CUDA's documented context rules (an
event is recorded on a stream of its own context, work goes to a stream of the current
context, a kernel runs in the context of its module, ``cuMemMap``/``cuMemSetAccess``/IPC
arguments) and reports any call that breaks one.

An AST scan of ``src/accelrt`` finds the call sites; each must have run. What only a GPU can
confirm is listed in docs/cuda.md ("Checked without a GPU against the real packages").
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest

from helpers import cuda_stub

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "accelrt"
_LIB_NAMES = {"driver": re.compile(r"^cu[A-Z]\w*$"), "nvrtc": re.compile(r"^nvrtc[A-Z]\w*$"),
              "nvml": re.compile(r"^nvml[A-Z]\w*$")}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return cuda_stub.run_scenario(tmp_path_factory, "cuda_calls", "cuda_stub")


def _sites() -> list[tuple[str, str, str, int, bool]]:
    """``(library, function, file, line, called there)`` of every driver, NVRTC and NVML
    function named in accelrt's code (docstrings and comments are not code)."""
    out = []
    for f in sorted(SRC.rglob("*.py")):
        tree = ast.parse(f.read_text())
        called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        rel = str(f.relative_to(SRC))
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute):
                for lib, pat in _LIB_NAMES.items():
                    if pat.match(n.attr):
                        out.append((lib, n.attr, rel, n.lineno, id(n) in called))
            elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                  and n.func.id == "getattr" and len(n.args) > 1
                  and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str)
                  and _LIB_NAMES["driver"].match(n.args[1].value)):
                out.append(("driver", n.args[1].value, rel, n.lineno, False))
    return out


def _ran(report: dict[str, Any]) -> dict[tuple[str, str], set[int]]:
    ran: dict[tuple[str, str], set[int]] = {}
    for c in report["calls"]:
        if c["site"]:
            ran.setdefault((c["name"], c["site"][0]), set()).add(c["site"][1])
    return ran


def test_every_driver_nvrtc_and_nvml_call_site_ran_against_the_real_bindings(
        report: dict[str, Any]) -> None:
    sites = _sites()
    assert len(sites) > 110, len(sites)   # the scan finds the code's calls
    ran = _ran(report)
    missed = [s for s in sites
              if not ran.get((s[1], s[2])) or (s[4] and s[3] not in ran[(s[1], s[2])])]
    assert not missed, "call sites no scenario of helpers/cuda_calls.py ran:\n" + \
        "\n".join(f"{f}:{ln} {lib}.{name}" for lib, name, f, ln, _ in missed)


def test_no_call_is_refused_by_the_real_bindings_or_breaks_cudas_rules(
        report: dict[str, Any]) -> None:
    assert not report["problems"], "\n".join(report["problems"])
    libs = {c["lib"] for c in report["calls"]}
    assert {"driver", "nvrtc", "nvml", "nvml-c", "nvtx"} <= libs


def test_the_rules_report_a_call_that_breaks_them(report: dict[str, Any]) -> None:
    """The checker can fail: its self-test's four bad calls are each reported."""
    found = json.loads(next(c["name"] for c in report["calls"] if c["lib"] == "selftest"))
    assert len(found) == 4, found
    assert "recorded on a stream of context" in found[0]
    assert "while 0xc7000000 is current" in found[1]
    assert "CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS" in found[2]
    assert "cuMemAlloc while a graph captures, outside relaxed capture mode" in found[3]


def test_a_capture_begins_in_the_mode_asked(report: dict[str, Any]) -> None:
    """``capture_error_mode`` reaches ``cuStreamBeginCapture`` (s41: accelrt always captured
    in thread-local mode): ``graph_capture_begin`` ("default") is global, as
    ``CUDAGraph.capture_begin``'s default; ``graph_capture_begin_mode`` passes the mode asked
    (helpers/cuda_calls.py's ``capture_mode_steps``, which also checks that an allocation
    during each capture runs in relaxed mode and restores the thread's mode when
    ``cuMemAlloc`` or ``cuMemMap`` fails, and runs the ``graph_capture_modes`` conformance
    check: a synchronize refused by the capture's mode and thread)."""
    g, t, r = (f"CU_STREAM_CAPTURE_MODE_{m}" for m in ("GLOBAL", "THREAD_LOCAL", "RELAXED"))
    assert report["capture_modes"][:8] == [g, g, g, t, r, g, t, r], report["capture_modes"]


def _attrs_of(path: Path, roots: set[str]) -> set[str]:
    """Attributes read from ``roots`` (names, ``self.<name>``, or calls of a name) in
    ``path``."""
    out = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if not isinstance(n, ast.Attribute):
            continue
        v = n.value
        base = (v.id if isinstance(v, ast.Name)
                else v.attr if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name)
                and v.value.id == "self"
                else v.func.id if isinstance(v, ast.Call) and isinstance(v.func, ast.Name)
                else None)
        if base in roots:
            out.add(n.attr)
    return out


def test_every_nvtx_function_accelrt_calls_ran_in_the_real_package(
        report: dict[str, Any]) -> None:
    used = _attrs_of(SRC / "backends" / "cuda" / "_nvtx.py", {"_lib", "nvtx"})
    ran = {c["name"] for c in report["calls"] if c["lib"] == "nvtx"}
    assert used and not used - ran, sorted(used - ran)


def test_every_nccl4py_call_ran_through_the_real_nccl_core(report: dict[str, Any]) -> None:
    missing = [c["name"] for c in report["calls"] if c["lib"] == "nccl-missing"]
    if missing:
        pytest.skip(f"nccl4py is not importable here ({missing[0]}); run with it installed")
    used = set()
    for f in ("_nccl.py", "_init.py"):
        used |= _attrs_of(SRC / "distributed" / f, {"comm", "core", "_core"})
    # read at creation (nranks, rank; checked by it), an EngineContext's, and mpi4py's Free
    used -= {"nranks", "rank", "options", "Free"}
    ran = {c["name"] for c in report["calls"] if c["lib"] in ("nccl", "nccl-comm")}
    assert used and not used - ran, sorted(used - ran)
    # nccl4py's own calls reached its bindings module with arguments its functions take
    assert {"all_reduce", "reduce", "send", "recv", "comm_split"} <= \
        {c["name"] for c in report["calls"] if c["lib"] == "nccl-bindings"}
