"""Issue 21's size targets, kept: no hand-written module in src over 1,000 lines and no
function over 120 lines (generated device modules are small, and counted too)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "accelrt"


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_module_over_1000_lines() -> None:
    assert _modules(), SRC
    long = [f"{p.relative_to(SRC)}: {n} lines" for p in _modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 1000]
    assert not long, "split these modules by concern:\n" + "\n".join(long)


def test_no_function_over_120_lines() -> None:
    long = []
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > 120:
                    long.append(f"{p.relative_to(SRC)}:{node.lineno} {node.name}: {n} lines")
    assert not long, "split these functions:\n" + "\n".join(long)
