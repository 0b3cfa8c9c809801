"""The backend contract's handles are distinct types (issue 11 §1).

``mypy --strict`` runs on a backend author's script: correct calls type-check, and a swapped
handle (a stream where an event is expected, an event where a stream is, a graph where a
device pointer is, a bare ``int`` where a handle is) is an ``arg-type`` error. At run time a
handle is an ``int``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.typecheck import run_mypy

from accelrt.backends import DevicePtr, EventHandle, GraphHandle, StreamHandle


HEADER = [
    "from accelrt.backends import Backend, get_backend",
    "from accelrt.backends import DevicePtr, EventHandle, GraphHandle, StreamHandle",
    "b: Backend = get_backend('cpu')",
    "s = b.stream_create(0, 0)",
    "e = b.event_create(0, False, False, False)",
    "p = b.malloc(0, 256)",
    "g = b.graph_capture_end(0, s)",
]
CORRECT = [
    "b.event_record(0, e, s)",
    "b.stream_wait_event(0, s, e)",
    "b.memset(0, p, 0, 256, s)",
    "b.memcpy(0, p, p + 128, 64, 'd2d', s)",
    "b.launch_host_func(0, lambda: None, s)",
    "b.graph_replay(0, g, s)",
    "b.free(0, p)",
    "b.stream_synchronize(0, b.default_stream(0))",
    "b.stream_destroy(0, StreamHandle(int(s)))",
]
# wrong calls, each with the error code mypy must report on its line
NEGATIVE = [
    ("b.event_record(0, s, e)", "arg-type"),              # stream and event swapped
    ("b.event_query(0, s)", "arg-type"),                  # a stream where an event goes
    ("b.stream_synchronize(0, e)", "arg-type"),           # an event where a stream goes
    ("b.free(0, g)", "arg-type"),                         # a graph where a pointer goes
    ("b.graph_destroy(0, s)", "arg-type"),                # a stream where a graph goes
    ("b.memset(0, p, 0, 256, e)", "arg-type"),            # stream last, and a stream
    ("b.stream_query(0, 5)", "arg-type"),                 # a bare int is no handle
    ("x: StreamHandle = b.event_create(0, False, False, False)", "assignment"),
]


def _run_mypy(tmp: Path, source: str) -> str:
    pytest.importorskip("mypy")
    proc = run_mypy(tmp, source, "backend_author.py")
    return proc.stdout + proc.stderr


def test_swapped_handles_are_type_errors(tmp_path: Path) -> None:
    lines = HEADER + CORRECT + [code for code, _ in NEGATIVE]
    out = _run_mypy(tmp_path, "\n".join(lines) + "\n")
    errors: dict[int, list[str]] = {}
    for m in re.finditer(r"^backend_author\.py:(\d+): error: (.*)$", out, re.MULTILINE):
        errors.setdefault(int(m.group(1)), []).append(m.group(2))
    first_negative = len(HEADER) + len(CORRECT) + 1
    unexpected = {n: e for n, e in errors.items() if n < first_negative}
    assert not unexpected, f"correct calls rejected:\n{out}"
    missing = [f"{code!r} (expected [{kind}], got {errors.get(n)})"
               for n, (code, kind) in enumerate(NEGATIVE, start=first_negative)
               if not any(f"[{kind}]" in e for e in errors.get(n, []))]
    assert not missing, "not type errors:\n" + "\n".join(missing) + "\n" + out


def test_handles_are_ints_at_run_time() -> None:
    for t in (StreamHandle, EventHandle, DevicePtr, GraphHandle):
        h = t(7)
        assert type(h) is int and h == 7
