"""Dump the signatures of PyTorch's runtime API that accelrt mirrors, as JSON.

Run with a Python that has torch (a tool only; accelrt never imports torch)::

    python scripts/torch_signatures.py > tests/data/torch_2_15_signatures.json  # torch 2.15

tests/package/test_torch_signatures.py compares the committed dump with accelrt's names (CI has
no torch), and docs/differences.md lists the accepted differences.

Scope (which torch names are dumped):

- ``torch.accelerator``, ``torch.accelerator.graphs``, ``.memory`` and ``.random``: their
  ``__all__``.
- ``torch.cuda``: its ``__all__``, and the ``__all__`` of ``torch.cuda.memory``, ``.graphs``,
  ``.random``, ``.nvtx``, ``.profiler`` and ``.comm``; ``torch.cuda.streams``' classes
  (``Stream``, ``ExternalStream``, ``Event``); and ``torch.cuda.memory``'s private-but-used
  names ``_record_memory_history``, ``_snapshot``, ``_dump_snapshot``,
  ``_set_memory_metadata`` and ``_get_memory_metadata`` (what memory tutorials call), and
  ``_set_allocator_settings``, ``_get_current_allocator`` and ``_CUDAAllocator`` (what
  allocator-swapping code calls: vLLM-style backend switches, allocator libraries).
- ``torch.distributed``: ``torch.distributed.distributed_c10d.__all__`` less the option structs
  of the C++ ``ProcessGroup`` interface (``*Options``) and the per-library process-group
  classes (``ProcessGroupNCCL``, ``ProcessGroupGloo``, ...); plus the store classes
  (``Store``, ``TCPStore``, ``FileStore``, ``HashStore``, ``PrefixStore``) and the error classes
  (``DistError``, ``DistBackendError``, ``DistNetworkError``, ``DistStoreError``,
  ``QueueEmptyError``), ``is_available``, ``DebugLevel``, ``set_debug_level`` and
  ``breakpoint``, and ``torch.distributed.device_mesh``'s ``DeviceMesh`` and
  ``init_device_mesh`` (which ``torch.distributed`` re-exports).
- ``torch.multiprocessing``: the sharing and launch names accelrt implements
  (``set_sharing_strategy``, ``get_sharing_strategy``, ``get_all_sharing_strategies``,
  ``spawn``, ``start_processes``, ``ProcessContext``, ``ProcessExitedException``,
  ``ProcessRaisedException``, ``reductions.init_reductions``); the re-exported standard
  ``multiprocessing`` names are Python's own and not dumped.

Out of scope everywhere: tensor math and tensor types, i.e. the ``*Tensor`` and ``*Storage``
types, ``amp``, ``sparse``, ``jiterator``, ``tunable``, ``make_graphed_callables``,
``current_blas_handle``, ``current_solver_handle``, ``has_half`` and ``has_magma``.

Each entry records ``kind`` (``function``, ``class``, ``module`` or ``attribute``) and, where
torch's signature can be read, ``signatures``: a list of alternatives (more than one only for an
overloaded pybind function), each a list of parameters ``{"name", "kind", "default"}`` with
``kind`` an :class:`inspect.Parameter` kind name and ``default`` the ``repr`` of the default
(absent when there is none; an enum member is written ``Enum.NAME``). Bound ``self``/``cls`` are left out. A class records its
constructor as ``signatures`` and its public methods under ``methods`` (same format) and its
public properties and data attributes under ``attributes``. Signatures of pybind functions
(which ``inspect`` cannot read) are parsed from their ``__doc__`` signature lines, and those of
torch's C stream and event methods from their ``Class.method(args) -> ...`` doc line; pybind's
unnamed ``argN`` parameters are positional-only.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import sys
from typing import Any

SCOPE_OUT = {
    "amp", "sparse", "jiterator", "tunable", "make_graphed_callables", "current_blas_handle",
    "current_solver_handle", "has_half", "has_magma",
}

CUDA_SUBMODULES = ("memory", "graphs", "random", "nvtx", "profiler", "comm")
CUDA_MEMORY_PRIVATE = ("_record_memory_history", "_snapshot", "_dump_snapshot",
                       "_set_memory_metadata", "_get_memory_metadata",
                       "_set_allocator_settings", "_get_current_allocator", "_CUDAAllocator")
DIST_EXTRA = ("Store", "TCPStore", "FileStore", "HashStore", "PrefixStore", "DistError",
              "DistBackendError", "DistNetworkError", "DistStoreError", "QueueEmptyError",
              "is_available", "DebugLevel", "set_debug_level", "DeviceMesh", "init_device_mesh",
              "breakpoint")
MP_NAMES = ("set_sharing_strategy", "get_sharing_strategy", "get_all_sharing_strategies",
            "spawn", "start_processes", "ProcessContext", "ProcessExitedException",
            "ProcessRaisedException")


def _in_scope(name: str) -> bool:
    if name in SCOPE_OUT:
        return False
    return not name.endswith(("Tensor", "Storage"))


def _default(value: Any) -> str:
    """``repr`` of a default; an enum member as ``Enum.NAME`` (torch's ``ReduceOp.SUM`` is a
    pybind ``RedOpType`` whose repr is ``<RedOpType.SUM: 0>``)."""
    if hasattr(type(value), "__members__") and isinstance(getattr(value, "name", None), str):
        owner = type(value).__name__
        return f"{'ReduceOp' if owner == 'RedOpType' else owner}.{value.name}"
    return repr(value)


def _param(p: inspect.Parameter) -> dict[str, Any]:
    out: dict[str, Any] = {"name": p.name, "kind": p.kind.name}
    if p.default is not inspect.Parameter.empty:
        out["default"] = _default(p.default)
    return out


def _from_inspect(obj: Any, bound: bool) -> list[dict[str, Any]]:
    params = list(inspect.signature(obj).parameters.values())
    if bound and params and params[0].name in ("self", "cls"):
        params = params[1:]
    return [_param(p) for p in params]


_DOC_LINE = re.compile(r"^\s*(?:\d+\.\s*)?(?:[A-Za-z_][\w]*\.)?(\w+)\((.*)\)\s*(?:->.*)?$")


def _parse_params(text: str) -> list[dict[str, Any]] | None:
    """Parameters of a doc signature line's ``(...)`` text, or None when it cannot be read."""
    text = re.sub(r"<[^<>]*>", "None", text)  # pybind reprs of enum defaults
    text = re.sub(r"c10d::[\w:]+", "object", text)  # C++ types in annotations
    try:
        fn = ast.parse(f"def f({text}): pass").body[0]
    except SyntaxError:
        return None
    assert isinstance(fn, ast.FunctionDef)
    a = fn.args
    out: list[dict[str, Any]] = []
    positional = a.posonlyargs + a.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults))
    defaults += list(a.defaults)
    for i, (arg, d) in enumerate(zip(positional, defaults, strict=True)):
        if i == 0 and arg.arg in ("self", "cls"):
            continue
        kind = ("POSITIONAL_ONLY" if arg in a.posonlyargs or re.fullmatch(r"arg\d+", arg.arg)
                else "POSITIONAL_OR_KEYWORD")
        entry: dict[str, Any] = {"name": arg.arg, "kind": kind}
        if d is not None:
            entry["default"] = ast.unparse(d)
        out.append(entry)
    if a.vararg is not None:
        out.append({"name": a.vararg.arg, "kind": "VAR_POSITIONAL"})
    for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        entry = {"name": arg.arg, "kind": "KEYWORD_ONLY"}
        if d is not None:
            entry["default"] = ast.unparse(d)
        out.append(entry)
    if a.kwarg is not None:
        out.append({"name": a.kwarg.arg, "kind": "VAR_KEYWORD"})
    # a pybind positional-only parameter forces the ones before it to be positional-only too
    last = max((i for i, p in enumerate(out) if p["kind"] == "POSITIONAL_ONLY"), default=0)
    for p in out[:last]:
        if p["kind"] == "POSITIONAL_OR_KEYWORD":
            p["kind"] = "POSITIONAL_ONLY"
    return out


def _from_doc(obj: Any, name: str) -> list[list[dict[str, Any]]] | None:
    doc = getattr(obj, "__doc__", None) or ""
    sigs: list[list[dict[str, Any]]] = []
    overloaded = "Overloaded function." in doc
    for line in doc.splitlines():
        m = _DOC_LINE.match(line)
        if m is None or m.group(1) != name:
            continue
        if overloaded and m.group(2) == "*args, **kwargs":
            continue
        params = _parse_params(m.group(2))
        if params is not None:
            sigs.append(params)
        if not overloaded:
            break
    return sigs or None


def _signatures(obj: Any, name: str, bound: bool) -> list[list[dict[str, Any]]] | None:
    try:
        return [_from_inspect(obj, bound)]
    except (ValueError, TypeError):
        return _from_doc(obj, name)


def _class_entry(cls: type) -> dict[str, Any]:
    entry: dict[str, Any] = {"kind": "class"}
    init = cls.__dict__.get("__init__")
    try:
        entry["signatures"] = [_from_inspect(cls, bound=False)]
    except (ValueError, TypeError):
        entry["signatures"] = _from_doc(init, "__init__") if init is not None else None
    methods: dict[str, Any] = {}
    attributes: list[str] = []
    # builtin bases (object, str, Exception) are Python's, the same on both sides
    for klass in reversed([k for k in cls.__mro__ if k.__module__ != "builtins"]):
        for attr, member in vars(klass).items():
            if attr.startswith("_") or attr == "mro":
                continue
            if isinstance(member, (staticmethod, classmethod)):
                methods[attr] = _signatures(member.__func__, attr,
                                            bound=isinstance(member, classmethod))
            elif inspect.isfunction(member) or inspect.ismethoddescriptor(member) or (
                    inspect.isbuiltin(member)):
                methods[attr] = _signatures(member, attr, bound=True)
                attributes = [a for a in attributes if a != attr]
            else:
                methods.pop(attr, None)
                if attr not in attributes:
                    attributes.append(attr)
    entry["methods"] = dict(sorted(methods.items()))
    entry["attributes"] = sorted(attributes)
    return entry


def _entry(obj: Any, name: str) -> dict[str, Any]:
    if inspect.ismodule(obj):
        return {"kind": "module"}
    if inspect.isclass(obj):
        return _class_entry(obj)
    if callable(obj):
        return {"kind": "function", "signatures": _signatures(obj, name, bound=False)}
    return {"kind": "attribute"}


def _dump_module(modname: str, names: list[str], out: dict[str, Any]) -> None:
    mod = importlib.import_module(modname)
    for name in names:
        if not _in_scope(name) or not hasattr(mod, name):
            continue
        out[f"{modname}.{name}"] = _entry(getattr(mod, name), name)


def main() -> int:
    import warnings

    import torch

    warnings.simplefilter("ignore")  # deprecated aliases (reduce_op) warn when inspected
    out: dict[str, Any] = {}
    acc = "torch.accelerator"
    _dump_module(acc, list(importlib.import_module(acc).__all__), out)
    for sub in ("graphs", "memory", "random"):
        _dump_module(f"{acc}.{sub}", list(importlib.import_module(f"{acc}.{sub}").__all__), out)
    _dump_module("torch.cuda", list(torch.cuda.__all__), out)
    for sub in CUDA_SUBMODULES:
        mod = importlib.import_module(f"torch.cuda.{sub}")
        names = list(mod.__all__)
        if sub == "memory":
            names += CUDA_MEMORY_PRIVATE
        _dump_module(f"torch.cuda.{sub}", names, out)
    _dump_module("torch.cuda.streams", ["Stream", "ExternalStream", "Event"], out)
    import torch.distributed.distributed_c10d as c10d
    dist = [n for n in c10d.__all__
            if not n.endswith("Options") and not n.startswith("ProcessGroup")]
    dist += ["ProcessGroup", *DIST_EXTRA]
    _dump_module("torch.distributed", sorted(set(dist)), out)
    _dump_module("torch.multiprocessing", list(MP_NAMES), out)
    _dump_module("torch.multiprocessing.reductions", ["init_reductions"], out)
    doc = {"torch_version": torch.__version__.split("+")[0], "names": dict(sorted(out.items()))}
    json.dump(doc, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
