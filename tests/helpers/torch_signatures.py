"""Compare accelrt's public API with torch 2.15's signatures (issue 23 §5).

The torch side is data: ``tests/data/torch_2_15_signatures.json``, written by
``scripts/torch_signatures.py`` (run with a Python that has torch; see its docstring for the
scope). The accepted differences are the table of docs/differences.md's section "Accepted
signature differences", parsed by :func:`accepted_differences`.

Comparison rule (a torch call form must work unchanged on accelrt):

- every torch name in scope exists in each accelrt counterpart module (:data:`TARGETS`); for a
  class, so do its public methods and attributes;
- torch's positional parameters (positional-only and positional-or-keyword) are ours, in the
  same order, of the same kind, with the same default (``repr``); their names must match too,
  except a positional-only one's (it cannot be passed by name; pybind's are ``arg0``, ...);
- a positional-only torch parameter may be ours positional-or-keyword under any name (torch's
  positional call still works), and, having no default in torch, may have one of ours (torch's
  calls always pass it; pybind's ``wait(keys)`` / ``wait(keys, timeout)`` overloads are one
  ``wait(keys, timeout=None)`` here);
- torch's keyword-only parameters are ours, keyword-only, with the same default (their order
  does not matter to a call); torch's ``*args`` / ``**kwargs`` are ours too;
- a parameter of ours beyond torch's is keyword-only with a default (so torch's call forms still
  work and mean the same); any other addition is a mismatch;
- defaults compare by ``repr``, an enum member as ``Enum.NAME`` (``ReduceOp.SUM``);
- annotations are not compared (accelrt's arrays are not torch's tensors).

An overloaded torch function (pybind) matches when ours matches any one of its overloads. A name
whose signature torch does not expose (C exceptions, ``priority_range``) is checked for presence
only.
"""

from __future__ import annotations

import enum
import fnmatch
import importlib
import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "data" / "torch_2_15_signatures.json"
DIFFERENCES = ROOT / "docs" / "differences.md"
DIFFERENCES_HEADING = "## 6. Accepted signature differences"

DEVICE_MODULES = ("accelrt.cuda", "accelrt.cpu", "accelrt.opencl")

# torch module -> the accelrt modules that stand for it (a device module's submodule, e.g.
# ``accelrt.cuda.memory``, is reached as an attribute of the device module).
TARGETS: dict[str, tuple[str, ...]] = {
    "torch.accelerator": ("accelrt",),
    "torch.accelerator.graphs": ("accelrt",),  # torch.accelerator re-exports Graph
    "torch.accelerator.memory": ("accelrt.memory",),
    "torch.accelerator.random": ("accelrt.random",),
    "torch.cuda": DEVICE_MODULES,
    **{f"torch.cuda.{sub}": tuple(f"{m}.{sub}" for m in DEVICE_MODULES)
       for sub in ("memory", "graphs", "random", "nvtx", "profiler", "streams")},
    "torch.cuda.comm": ("accelrt.comm",),
    "torch.distributed": ("accelrt.distributed",),
    "torch.multiprocessing": ("accelrt.multiprocessing",),
    "torch.multiprocessing.reductions": ("accelrt.multiprocessing.reductions",),
}

_POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")


def load_fixture() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    return data


def split_name(torch_name: str) -> tuple[str, str]:
    """``torch.cuda.memory.x`` -> (``torch.cuda.memory``, ``x``), by the longest module."""
    for mod in sorted(TARGETS, key=len, reverse=True):
        if torch_name.startswith(mod + "."):
            return mod, torch_name[len(mod) + 1:]
    raise KeyError(f"{torch_name}: no accelrt counterpart module in TARGETS")


def resolve_module(path: str) -> ModuleType | None:
    """The accelrt module at ``path`` (an attribute path below a real module), or None."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
            if obj is None:
                return None
        return obj if isinstance(obj, ModuleType) else None
    return None


@dataclass(frozen=True)
class Difference:
    """One row of docs/differences.md's accepted signature differences."""

    torch_name: str
    targets: tuple[str, ...] | None  # None: every counterpart module
    what: str  # "missing", "param NAME" or "signature"
    reason: str

    def applies(self, target: str) -> bool:
        # a module's row covers its submodules (accelrt.cpu covers accelrt.cpu.nvtx)
        return self.targets is None or any(target == t or target.startswith(t + ".")
                                           for t in self.targets)


def accepted_differences() -> list[Difference]:
    """The machine-readable table of docs/differences.md (section :data:`DIFFERENCES_HEADING`).

    Rows are ``| `torch name` | accelrt modules | difference | reason |`` with the modules
    ``all`` or a comma list (``accelrt.cpu, accelrt.opencl``) and the difference ``missing``
    (the name is not there; a ``*`` in the name matches any member, for a family that is
    missing for one reason), ``param `name` `` (torch's parameter ``name`` is not compared:
    ours lacks it or gives it another default or kind) or ``signature`` (the constructor or
    function is not compared at all: it is not called the same way, as torch's
    ``ProcessGroup(rank, size)``).
    """
    text = DIFFERENCES.read_text()
    start = text.index(DIFFERENCES_HEADING)
    end = text.find("\n## ", start + 1)
    section = text[start:end if end != -1 else len(text)]
    rows: list[Difference] = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4:
            raise ValueError(f"differences.md: a row needs 4 cells: {line!r}")
        name, targets, what, reason = cells
        what = what.replace("`", "")
        if not (what in ("missing", "signature") or re.fullmatch(r"param \w+", what)):
            raise ValueError("differences.md: difference must be 'missing', 'signature' or "
                             f"'param NAME': {line!r}")
        if not reason:
            raise ValueError(f"differences.md: a row needs a reason: {line!r}")
        tgt = None if targets == "all" else tuple(t.strip() for t in targets.split(","))
        rows.append(Difference(name.strip("`"), tgt, what, reason))
    return rows


def our_signature(obj: Any, *, bound: bool) -> list[dict[str, Any]] | None:
    try:
        sig = inspect.signature(obj)
    except (ValueError, TypeError):
        return None
    params = list(sig.parameters.values())
    if bound and params and params[0].name in ("self", "cls"):
        params = params[1:]
    out: list[dict[str, Any]] = []
    for p in params:
        entry: dict[str, Any] = {"name": p.name, "kind": p.kind.name}
        if p.default is not inspect.Parameter.empty:
            entry["default"] = _default(p.default)
        out.append(entry)
    return out


def _default(value: Any) -> str:
    """``repr`` of a default, an enum member as ``Enum.NAME`` (the fixture's form)."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)


def _fmt(p: dict[str, Any]) -> str:
    default = f"={p['default']}" if "default" in p else ""
    return f"{p['name']}({p['kind'].lower()}){default}"


def compare(theirs: list[dict[str, Any]], ours: list[dict[str, Any]],
            skip: frozenset[str] = frozenset()) -> list[str]:
    """Problems of ``ours`` against torch's ``theirs`` under the module's comparison rule."""
    problems: list[str] = []
    theirs = [p for p in theirs if p["name"] not in skip]
    ours = [p for p in ours if p["name"] not in skip]
    matched: set[str] = set()
    t_pos = [p for p in theirs if p["kind"] in _POSITIONAL]
    o_pos = [p for p in ours if p["kind"] in _POSITIONAL]
    for i, t in enumerate(t_pos):
        if i >= len(o_pos):
            problems.append(f"missing positional parameter {_fmt(t)}")
            continue
        o = o_pos[i]
        matched.add(o["name"])
        if t["kind"] == "POSITIONAL_ONLY":
            # any name and kind of positional; a default only where torch has none or the same
            same = "default" not in t or t["default"] == o.get("default")
        else:
            same = (t["kind"] == o["kind"] and t["name"] == o["name"]
                    and t.get("default") == o.get("default"))
        if not same:
            problems.append(f"positional parameter {i}: torch {_fmt(t)}, accelrt {_fmt(o)}")
    o_kw = {p["name"]: p for p in ours if p["kind"] == "KEYWORD_ONLY"}
    for t in theirs:
        if t["kind"] == "KEYWORD_ONLY":
            o = o_kw.get(t["name"])
            if o is None:
                problems.append(f"missing keyword-only parameter {_fmt(t)}")
            else:
                matched.add(o["name"])
                if t.get("default") != o.get("default"):
                    problems.append(f"keyword-only parameter: torch {_fmt(t)}, "
                                    f"accelrt {_fmt(o)}")
        elif t["kind"] in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            o_var = [p for p in ours if p["kind"] == t["kind"]]
            if not o_var:
                problems.append(f"missing {'*' if t['kind'] == 'VAR_POSITIONAL' else '**'}"
                                f"{t['name']}")
            else:
                matched.add(o_var[0]["name"])
    for o in ours:
        if o["name"] in matched:
            continue
        if o["kind"] != "KEYWORD_ONLY" or "default" not in o:
            problems.append(f"extra parameter {_fmt(o)} must be keyword-only with a default")
    return problems


def compare_any(alternatives: list[list[dict[str, Any]]], ours: list[dict[str, Any]],
                skip: frozenset[str] = frozenset()) -> list[str]:
    """Problems against the best-matching overload (none if any overload matches)."""
    results = [compare(t, ours, skip) for t in alternatives]
    return min(results, key=len)


def _member(cls: type, name: str) -> tuple[Any, bool] | None:
    """A class member for signature reading: (callable, whether it binds self/cls); a declared
    instance attribute (a class annotation) is found too."""
    for klass in cls.__mro__:
        if name in vars(klass).get("__annotations__", {}):
            return None, False
        if name in vars(klass):
            raw = vars(klass)[name]
            if isinstance(raw, staticmethod):
                return raw.__func__, False
            if isinstance(raw, classmethod):
                return raw.__func__, True
            return raw, True
    return None


def check(torch_name: str, entry: dict[str, Any], target: str,
          differences: list[Difference]) -> list[str]:
    """Problems of the accelrt counterpart in ``target`` of torch's ``torch_name``."""
    rows = [d for d in differences if d.applies(target)]

    def skipped(name: str) -> frozenset[str]:
        return frozenset(d.what.split()[1] for d in rows
                         if d.torch_name == name and d.what.startswith("param "))

    def missing_ok(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, d.torch_name) and d.what == "missing"
                   for d in rows)

    def not_compared(name: str) -> bool:
        return any(d.torch_name == name and d.what == "signature" for d in rows)

    _, attr = split_name(torch_name)
    mod = resolve_module(target)
    if mod is None:
        return [] if missing_ok(torch_name) else [f"{target} does not exist"]
    if not hasattr(mod, attr):
        return [] if missing_ok(torch_name) else [f"{target}.{attr} is missing"]
    obj = getattr(mod, attr)
    problems: list[str] = []
    where = f"{target}.{attr}"
    sigs = entry.get("signatures")
    if sigs and not not_compared(torch_name):
        ours = our_signature(obj, bound=False)
        if ours is None:
            problems.append(f"{where}: accelrt's signature cannot be read")
        else:
            problems += [f"{where}: {p}" for p in compare_any(sigs, ours, skipped(torch_name))]
    if entry["kind"] == "class" and inspect.isclass(obj):
        for meth, msigs in entry.get("methods", {}).items():
            full = f"{torch_name}.{meth}"
            member = _member(obj, meth)
            if member is None:
                if not missing_ok(full):
                    problems.append(f"{where}.{meth} is missing")
                continue
            if not msigs or not_compared(full):
                continue
            ours = our_signature(member[0], bound=member[1])
            if ours is None:
                problems.append(f"{where}.{meth}: accelrt's signature cannot be read")
                continue
            problems += [f"{where}.{meth}: {p}" for p in compare_any(msigs, ours, skipped(full))]
        for name in entry.get("attributes", []):
            full = f"{torch_name}.{name}"
            if _member(obj, name) is None and not missing_ok(full):
                problems.append(f"{where}.{name} is missing")
    return problems


def pairs(fixture: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (torch name, accelrt counterpart module) to compare."""
    out = []
    for torch_name in fixture["names"]:
        mod, _ = split_name(torch_name)
        out += [(torch_name, target) for target in TARGETS[mod]]
    return out
