"""accelrt's public API against torch 2.15's signatures (issue 23 §5).

For every torch name in the committed dump (``tests/data/torch_2_15_signatures.json``, made by
``scripts/torch_signatures.py``; scope in its docstring) the accelrt counterpart in each module
of ``TARGETS`` must exist and accept torch's call forms: the comparison rule is in
``tests/helpers/torch_signatures.py``'s docstring. A difference passes only when
docs/differences.md's "Accepted signature differences" table lists it with a reason.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from helpers import torch_signatures as ts

FIXTURE = ts.load_fixture()
DIFFERENCES = ts.accepted_differences()


def _importable(target: str) -> bool:
    if target.startswith("accelrt.opencl"):
        return importlib.util.find_spec("pyopencl") is not None
    return True


PAIRS = ts.pairs(FIXTURE)


@pytest.mark.parametrize(("torch_name", "target"), PAIRS,
                         ids=[f"{n}->{t}" for n, t in PAIRS])
def test_signature_matches_torch(torch_name: str, target: str) -> None:
    if not _importable(target):
        pytest.skip(f"{target} needs pyopencl")
    problems = ts.check(torch_name, FIXTURE["names"][torch_name], target, DIFFERENCES)
    assert not problems, (
        f"{torch_name} differs from torch 2.15 in {target}:\n  " + "\n  ".join(problems)
        + "\nFix the signature, or list the difference with its reason in docs/differences.md"
        " ('Accepted signature differences').")


@pytest.mark.parametrize("row", DIFFERENCES, ids=[f"{d.torch_name} {d.what}" for d in DIFFERENCES])
def test_accepted_differences_are_real(row: ts.Difference) -> None:
    # a row that no longer changes any result is stale: remove it from docs/differences.md
    others = [d for d in DIFFERENCES if d is not row]
    names = [n for n in FIXTURE["names"]
             if ts.fnmatch.fnmatchcase(n, row.torch_name)
             or n == row.torch_name.rsplit(".", 1)[0]
             or ts.fnmatch.fnmatchcase(n, row.torch_name.rsplit(".", 1)[0])]
    assert names, f"{row.torch_name} names nothing in the torch dump"
    changed = False
    for name in names:
        mod, _ = ts.split_name(name)
        for target in ts.TARGETS[mod]:
            if not (_importable(target) and row.applies(target)):
                continue
            entry: Any = FIXTURE["names"][name]
            if ts.check(name, entry, target, others) != ts.check(name, entry, target,
                                                                  DIFFERENCES):
                changed = True
    assert changed, f"docs/differences.md row for {row.torch_name} ({row.what}) is stale"


def test_comparison_rule() -> None:
    # the rule itself, on made-up signatures: torch's call forms must keep working
    def p(name: str, kind: str = "POSITIONAL_OR_KEYWORD", **d: str) -> dict[str, str]:
        return {"name": name, "kind": kind, **d}
    torch_sig = [p("device", default="None"), p("flag", "KEYWORD_ONLY", default="False")]
    assert ts.compare(torch_sig, torch_sig) == []
    assert ts.compare(torch_sig, [*torch_sig, p("extra", "KEYWORD_ONLY", default="1")]) == []
    assert ts.compare(torch_sig, [*torch_sig, p("extra", default="1")])  # positional addition
    assert ts.compare(torch_sig, [*torch_sig, p("extra", "KEYWORD_ONLY")])  # no default
    assert ts.compare(torch_sig, [p("dev", default="None"), torch_sig[1]])  # renamed
    assert ts.compare(torch_sig, [p("device", "POSITIONAL_ONLY", default="None"), torch_sig[1]])
    assert ts.compare(torch_sig, [p("device", default="0"), torch_sig[1]])  # other default
    assert ts.compare(torch_sig, [torch_sig[0]])  # missing keyword-only
    posonly = [p("arg0", "POSITIONAL_ONLY")]
    assert ts.compare(posonly, [p("key", "POSITIONAL_ONLY")]) == []  # pybind names don't count
    assert ts.compare(posonly, [p("key")]) == []  # a positional call still works
    assert ts.compare(posonly, [p("key", default="None")]) == []  # torch always passes it
    assert ts.compare(posonly, [p("key", "KEYWORD_ONLY")])  # a positional call would fail
    assert ts.compare([p("arg0", "POSITIONAL_ONLY", default="0")], [p("key", default="1")])
    assert ts.compare([p("device", default="None")], [p("device")])  # torch omits it
    wait = [[posonly[0]], [posonly[0], p("arg1", "POSITIONAL_ONLY")]]  # pybind overloads
    assert ts.compare_any(wait, [p("keys"), p("timeout", default="None")]) == []
    assert ts.compare([p("kwargs", "VAR_KEYWORD")], [])
