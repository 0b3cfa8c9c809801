"""The compiled build and the pure build answer the public API alike, hostile arguments
included: the same return values, exception classes and messages, and warnings.

``tests/helpers/builds_probe.py`` calls every public callable of ``accelrt``, ``accelrt.cpu``
(and ``accelrt.cuda``, unusable here), ``accelrt.memory``, ``accelrt.random``, ``accelrt.comm``
and ``accelrt.graphs``, the methods of the classes they return, the attributes users assign,
the operators and the copy/pickle/weakref protocols, and ``set_allocator_settings`` strings:
each with valid arguments, then once per parameter and hostile value (floats, nan and inf,
bools, numpy scalars, negative and 2**63/2**64 ints, None, str, bytes, objects whose
``__index__``, ``__int__``, ``__eq__``, ``__hash__`` or ``__bool__`` raise or answer oddly, device
strings, dtypes, RNG states, items of sequence arguments), with one argument too many and with
an unknown keyword. It writes one line per case; :func:`test_the_builds_answer_alike` runs it
under both builds and compares the lines (about 60,000 cases, a few seconds each).

``tests/helpers/builds_probe_ext.py`` does the same, with the same values and helpers, for
what the first probe leaves out (about 57,000 cases): the backend registry and the raw
operations of the cpu, simulated and OpenCL backends, ``accelrt.distributed`` in a world of
one rank (functions, ``Work``, the stores), ``accelrt.multiprocessing``'s reductions,
``accelrt.interop``, ``accelrt.testing``, ``accelrt.opencl`` and the allocator and cpu
environment variables (each value in a forked child). Each of its cases runs under a
two-second alarm; :func:`test_the_ext_probe_covers_the_rest` fails on a case that hung. The
four children (two probes, two builds) run at once.

Which two builds: the installed one (``sys.executable``) and the other one. Where the
installed build is compiled (CI, a user's ``pip install .``), the other is this checkout's
``src`` (pure Python) on ``PYTHONPATH``; where it is pure (an editable install), the compiled
one is found through ``ACCELRT_COMPILED_PYTHON`` (an interpreter with the compiled build
installed), and the comparison is skipped without it. ``test_no_mypyc_message_reaches_a_user``
needs one build only.

The one difference allowed, and documented (docs/memory.md, "The compiled build"): a call
with the wrong number of arguments to the argument-free methods that the compiled cores
define (``query``, ``synchronize``, ``__enter__``, ``__exit__`` of ``Stream``, ``Event`` and
``device_index``) raises ``TypeError`` in both builds, with CPython's message in the pure build
and mypyc's in the compiled one. Checking the arguments in the compiled methods themselves
(``*args, **kwargs``, then a test) made ``Event.query`` 1.2 -> 1.9 calls
(``bench/bench_runtime_calls.py``, compiled).
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import builds_probe, builds_probe_ext
from helpers.builds import ROOT

import accelrt as acc
from accelrt import memory

#: mypyc's messages for an argument it refuses (a wrong type, a wrong count of arguments)
MYPYC = re.compile(r"object expected; got|takes at most \d+ (keyword )?arguments? \(|"
                   r"is an invalid keyword argument for")

#: the cases whose messages may differ (the module docstring says why): a wrong count of
#: arguments to a method of the compiled cores
ARITY = re.compile(r"^accelrt\.(cpu\.)?(Stream|ExternalStream|Event|Event\(interprocess\)|"
                   r"device_index|device)\.(query|synchronize|__enter__|__exit__)"
                   r"\[\+(arg|kw)\]$")

CHILD_TIMEOUT = 100


#: the probes: (module, the part of the API it calls)
PROBES = {"api": builds_probe, "ext": builds_probe_ext}


def _run(probe: Any, python: str, out: Path, pythonpath: str | None) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(probe.environment())
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([python, probe.__file__, str(out)], cwd=out.parent, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait(proc: subprocess.Popen[str], out: Path) -> dict[str, Any]:
    try:
        _, err = proc.communicate(timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the probe ran past {CHILD_TIMEOUT} s: {err[-2000:]}")
    assert proc.returncode == 0, f"the probe failed ({proc.returncode}): {err[-3000:]}"
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _pure_source_tree() -> str | None:
    """This checkout's ``src`` when it holds the pure build (no compiled module beside the
    sources, as an in-place or editable compiled build leaves), else None."""
    src = ROOT / "src"
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    built = [p for p in (src / "accelrt").rglob("*") if p.name.endswith(suffixes)
             and "_lib" not in p.parts]   # the PyTorch shim is built in both builds
    return None if built else str(src)


def _other_build() -> tuple[str, str | None] | str:
    """(interpreter, PYTHONPATH) of the build that is not installed here, or why there is
    none."""
    if memory.compiled:
        src = _pure_source_tree()
        if src is None:
            return f"{ROOT / 'src'} holds compiled modules (an in-place build): no pure build"
        return sys.executable, src
    python = os.environ.get("ACCELRT_COMPILED_PYTHON")
    if not python:
        return ("the pure build is installed; set ACCELRT_COMPILED_PYTHON to a Python with "
                "the compiled build installed (ACCELRT_COMPILE=1 pip install .) to compare")
    return python, None


@pytest.fixture(scope="module")
def all_outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Each probe's results under this build and (where there is one) the other, all run
    side by side: ``{probe: {"this": ..., "other": ... or the reason there is none}}``."""
    tmp = tmp_path_factory.mktemp("builds")
    other = _other_build()
    procs: dict[tuple[str, str], tuple[subprocess.Popen[str], Path]] = {}
    try:
        for name, probe in PROBES.items():
            out = tmp / name / "this" / "out.json"
            procs[name, "this"] = _run(probe, sys.executable, out, None), out
            if not isinstance(other, str):
                out = tmp / name / "other" / "out.json"
                procs[name, "other"] = _run(probe, other[0], out, other[1]), out
        result: dict[str, Any] = {name: {"other": other} for name in PROBES}
        for (name, which), (proc, out) in procs.items():
            result[name][which] = _wait(proc, out)
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    yield result


@pytest.fixture(scope="module")
def outcomes(all_outcomes: dict[str, Any]) -> dict[str, Any]:
    """``builds_probe``'s results (the runtime API)."""
    result: dict[str, Any] = all_outcomes["api"]
    return result


@pytest.fixture(scope="module")
def ext_outcomes(all_outcomes: dict[str, Any]) -> dict[str, Any]:
    """``builds_probe_ext``'s results (backends, distributed, multiprocessing, interop,
    testing, opencl, the environment)."""
    result: dict[str, Any] = all_outcomes["ext"]
    return result


@pytest.mark.parametrize("probe", list(PROBES))
def test_no_mypyc_message_reaches_a_user(all_outcomes: dict[str, Any], probe: str) -> None:
    this = all_outcomes[probe]["this"]
    assert this["header"]["compiled"] == memory.compiled
    assert this["header"]["accelrt"] == acc.__file__
    leaked = {k: v for k, v in this["results"].items() if MYPYC.search(v) and not ARITY.match(k)}
    assert not leaked, "\n".join(f"{k}: {v}" for k, v in list(leaked.items())[:20])


def test_the_probe_covers_the_api(outcomes: dict[str, Any]) -> None:
    results = outcomes["this"]["results"]
    assert outcomes["this"]["header"]["specs"] >= 1000
    assert len(results) >= 50_000
    names = {k.split("[")[0] for k in results} | set(outcomes["this"]["header"]["aliases"])
    for mod in (acc, acc.cpu, memory, acc.random, acc.comm, acc.graphs):
        for n in mod.__all__:
            obj = getattr(mod, n)
            if callable(obj) and not (isinstance(obj, type) and issubclass(obj, BaseException)):
                # each callable object has a spec (or is another one's alias)
                assert f"{mod.__name__}.{n}" in names
    # most calls' valid arguments are valid (so the hostile ones meet the checks after the
    # first): not accelrt.cuda's (no CUDA here), assignments to read-only properties,
    # operators, settings strings (most are bad on purpose)
    calls = [k for k in results if k.endswith("[baseline]") and not (
        k.startswith(("accelrt.cuda.", "set_allocator_settings[")) or " = v[" in k
        or " v[" in k or k.split("[")[0].endswith(")"))]
    passed = [k for k in calls if results[k].startswith("return")]
    assert len(calls) >= 450 and len(passed) >= 0.85 * len(calls), len(passed)


def test_the_ext_probe_covers_the_rest(ext_outcomes: dict[str, Any]) -> None:
    """The second probe calls every public name of the parts the first leaves out, and no
    call hangs (each case has two seconds) or kills its child."""
    import accelrt.distributed as dist
    import accelrt.multiprocessing as amp
    from accelrt import backends, interop, testing
    header, results = ext_outcomes["this"]["header"], ext_outcomes["this"]["results"]
    assert len(results) >= 40_000 and header["specs"] >= 450, (len(results), header["specs"])
    # (each group's cases; the opencl groups where PoCL runs)
    least = {"registry": 1500, "cpu": 7000, "simulated": 7000, "testing": 500,
             "distributed": 10_000, "stores": 6000, "multiprocessing": 900, "interop": 3000}
    if header["opencl"]:
        least |= {"opencl raw": 7000, "opencl": 5000}
    short = {g: (header["groups"].get(g, 0), n) for g, n in least.items()
             if header["groups"].get(g, 0) < n}
    assert not short, short
    names = {k.split("[")[0] for k in results}
    for prefix, mod, skip in (
            ("accelrt.backends", backends, {"BACKENDS", "Backend"}),
            ("accelrt.distributed", dist, {"ProcessGroup", "Work", "Engine", "Store", "group",
                                           "GroupMember", "GroupName", "DebugLevel",
                                           "set_debug_level_from_env", "HashStore",
                                           "FileStore", "PrefixStore", "TCPStore"}),
            ("accelrt.testing", testing, {"CALL_NAMES", "backend_conformance",
                                          "SimulatedBackend"}),
            ("accelrt.interop", interop, {"cupy", "numba", "torch"})):
        for n in mod.__all__:
            obj = getattr(mod, n)
            if n in skip or not callable(obj) or (isinstance(obj, type)
                                                  and issubclass(obj, BaseException)):
                continue
            assert f"{prefix}.{n}" in names, n
    for n in ("set_sharing_strategy", "get_sharing_strategy", "ipc_collect"):
        assert f"accelrt.multiprocessing.{n}" in names
    assert callable(amp.reductions.rebuild_array)
    for store in ("HashStore", "FileStore", "PrefixStore", "TCPStore"):
        assert f"accelrt.distributed.{store}()" in names or store == "HashStore"
        assert f"accelrt.distributed.{store}.multi_set" in names
    stuck = {k: v for k, v in results.items() if "ProbeTimeout" in v or "child exit" in v}
    assert not stuck, "\n".join(f"{k}: {v}" for k, v in list(stuck.items())[:20])


@pytest.mark.parametrize("probe", list(PROBES))
def test_the_builds_answer_alike(all_outcomes: dict[str, Any], probe: str) -> None:
    other = all_outcomes[probe]["other"]
    if isinstance(other, str):
        pytest.skip(other)
    this = all_outcomes[probe]["this"]
    assert {this["header"]["compiled"], other["header"]["compiled"]} == {True, False}, (
        this["header"], other["header"])
    a, b = this["results"], other["results"]
    assert a.keys() == b.keys()
    differ = []
    for key in a:
        if a[key] == b[key]:
            continue
        if ARITY.match(key) and a[key].startswith("raise builtins.TypeError:") and \
                b[key].startswith("raise builtins.TypeError:"):
            continue
        differ.append(key)
    shown = "\n".join(f"{k}\n  this:  {a[k][:400]}\n  other: {b[k][:400]}" for k in differ[:15])
    assert not differ, f"{len(differ)} of {len(a)} cases differ between the builds:\n{shown}"
