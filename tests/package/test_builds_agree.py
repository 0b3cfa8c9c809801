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
from helpers import builds_probe
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


def _run(python: str, out: Path, pythonpath: str | None) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(builds_probe.environment())
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([python, builds_probe.__file__, str(out)], cwd=out.parent, env=env,
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
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The probe's results under this build and (where there is one) the other, run side by
    side: ``{"this": ..., "other": ... or the reason there is none}``."""
    tmp = tmp_path_factory.mktemp("builds")
    this_out, other_out = tmp / "this" / "out.json", tmp / "other" / "out.json"
    this = _run(sys.executable, this_out, None)
    other = _other_build()
    other_proc = None if isinstance(other, str) else _run(other[0], other_out, other[1])
    try:
        result: dict[str, Any] = {"this": _wait(this, this_out)}
        result["other"] = other if other_proc is None else _wait(other_proc, other_out)
    finally:
        for proc in (this, other_proc):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    yield result


def test_no_mypyc_message_reaches_a_user(outcomes: dict[str, Any]) -> None:
    this = outcomes["this"]
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


def test_the_builds_answer_alike(outcomes: dict[str, Any]) -> None:
    other = outcomes["other"]
    if isinstance(other, str):
        pytest.skip(other)
    this = outcomes["this"]
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
