"""``mypy --strict`` on a user's script sees real types, never ``Any``, for every name of
``acc.cuda``, ``acc.cpu`` and ``acc.opencl`` and for what their functions return; and it
rejects misuse (a wrong argument type) that an ``Any`` would let through.

Skipped where mypy is not installed (``accelrt[test]`` installs it). mypy checks the source
tree (``MYPYPATH=src``) in a subprocess with a fresh cache.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from helpers.typecheck import run_mypy

import accelrt as acc

MODULES = ("cpu", "cuda", "opencl")

#: Calls whose results a user would use, per module ``{m}``.
CALLS = [
    "{m}.current_stream()", "{m}.default_stream(0)", "{m}.Stream(priority=0)",
    "{m}.Stream(0, 0)",
    "{m}.Stream().record_event()", "{m}.Event()", "{m}.Event(True, device=0)", "{m}.Stream.priority_range()",
    "{m}.Stream().is_capturing()", "{m}.current_device()", "{m}.device(0)",
    "{m}.device_of(None)", "{m}.stream(None)", "{m}.StreamContext(None)", "{m}.device_count()",
    "{m}.is_available()", "{m}.is_initialized()", "{m}.memory_allocated()",
    "{m}.memory_stats()", "{m}.mem_get_info()", "{m}.get_rng_state()",
    "{m}.get_rng_state_all()", "{m}.initial_seed()", "{m}.seed()", "{m}.get_arch_list()",
    "{m}.get_gencode_flags()", "{m}.graph_pool_handle()", "{m}.is_current_stream_capturing()",
    "{m}.Graph()", "{m}.memory_summary()", "{m}.can_device_access_peer(0, 0)",
    "{m}.caching_allocator_alloc(16)", "{m}.MemPool()", "{m}.use_mem_pool({m}.MemPool())",
    "{m}.OutOfMemoryError", "{m}.get_device_name()",
]

#: Where ``Any`` is the honest type: values of property dicts, snapshots and nested stats,
#: and inputs that accept anything (a state, an object with a device, a foreign stream).
ALLOWED_ANY = re.compile(r"dict\[(builtins\.)?str, Any\]|ndarray\[tuple\[Any, \.\.\.\]")


def _snippet() -> str:
    lines = ["import accelrt as acc", ""]
    for mod in MODULES:
        m = f"acc.{mod}"
        for name in getattr(acc, mod).__all__:
            lines.append(f"reveal_type({m}.{name})")
        lines.extend(f"reveal_type({c.format(m=m)})" for c in CALLS)
    lines.extend([
        "def takes(s: acc.cuda.Stream, e: acc.cpu.Event, o: acc.opencl.Stream) -> None:",
        "    reveal_type(s.record_event())",
        "    reveal_type(o.priority_range())",
        "    reveal_type(e.query())",
    ])
    return "\n".join(lines) + "\n"


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    return run_mypy(tmp_path, source, timeout=150)


def test_device_module_names_have_real_types(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    source = _snippet()
    proc = _mypy(tmp_path, source)
    out = proc.stdout + proc.stderr
    revealed = re.findall(r":(\d+): note: Revealed type is \"(.*)\"", out)
    wanted = source.count("reveal_type(")
    assert len(revealed) == wanted, f"{len(revealed)} of {wanted} revealed:\n{out}"
    lines = source.splitlines()
    bad = []
    for lineno, typ in revealed:
        expr = lines[int(lineno) - 1].strip()
        if typ.startswith("def "):   # a function: its result (mypy omits "-> None")
            result = typ.rpartition("->")[2] if "->" in typ else "None"
        else:
            result = typ
        if typ == "Any" or "Any" in ALLOWED_ANY.sub("", result):
            bad.append(f"{expr}: {typ}")
    assert not bad, "Any seen by mypy:\n" + "\n".join(bad)
    # errors in the user's script only: accelrt's own source is checked with the project's
    # mypy configuration by tests/package/test_typing.py (here, without it, an installed-but-untyped
    # optional library such as nvtx would be reported inside accelrt when MYPYPATH finds it)
    errors = [line for line in out.splitlines()
              if ": error:" in line and line.startswith("user_script.py:")]
    assert not errors, "\n".join(errors)
    # spot checks of the types themselves
    types = {lines[int(n) - 1].strip(): t for n, t in revealed}
    assert types["reveal_type(acc.cuda.current_stream())"] == "accelrt.cuda.Stream"
    assert types["reveal_type(acc.cpu.Event())"] == "accelrt.cpu.Event"
    assert types["reveal_type(acc.opencl.memory_allocated())"] in ("int", "builtins.int")
    assert types["reveal_type(acc.cpu.Stream.priority_range())"].replace("builtins.", "") \
        == "tuple[int, int]"


def test_mypy_rejects_misuse_of_device_module_names(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    bad_calls = [
        'acc.cuda.Stream(priority="high")',
        'acc.cpu.Stream(0, "high")',
        "acc.cpu.memory_allocated(1.5)",
        "acc.opencl.set_device([0])",
        'acc.cuda.manual_seed("7")',
        "acc.cpu.stream(3)",
        "acc.opencl.current_stream().wait_stream(3)",
    ]
    source = "import accelrt as acc\n\n" + "\n".join(bad_calls) + "\n"
    proc = _mypy(tmp_path, source)
    out = proc.stdout + proc.stderr
    flagged = {int(n) for n in re.findall(r"^user_script\.py:(\d+): error:", out, re.MULTILINE)}
    missing = [c for i, c in enumerate(bad_calls, start=3) if i not in flagged]
    assert not missing, f"mypy accepted: {missing}\n{out}"
