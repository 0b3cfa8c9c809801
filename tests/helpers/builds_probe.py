"""The child of tests/package/test_builds_agree.py: calls accelrt's public API with hostile
arguments and writes what each call did, as JSON, to the file named by its one argument.

Run under each build (the compiled one and the pure one) with the same environment, it makes
the same calls in the same order; the test compares the two files case by case. Every public
callable of ``accelrt``, its device module ``accelrt.cpu`` (and the namespaces under it),
``accelrt.memory``, ``accelrt.random``, ``accelrt.comm`` and ``accelrt.graphs`` is called once
with valid arguments (its "baseline", :data:`BASE` and the specs below), then once per
parameter and hostile value (:data:`VALUES`) with that one argument replaced; the public
methods of the classes they return (``Stream``, ``Event``, ``Array``, ``Generator``,
``MemPool``, ``Graph``, ...) the same way on fresh instances; and every attribute a user can
assign on those classes is assigned each value (then read back, and the object used); and the
memory owner of arrays (``accelrt._memory_owner._Memory``, a C type in the compiled build):
its constructor, its fields, and the copy, pickle and weakref protocols.

What a case did is one line: ``return <normalised value>`` or ``raise <class>: <message>``
(with its ``__cause__``), then the warnings it emitted. Object addresses are normalised away;
values that depend on timing or on when the garbage collector runs (memory statistics read
while a failed call's frames may still hold an array) are recorded by type only.

Usage: ``ACCELRT_CPU_DEVICES=2 python builds_probe.py OUT.json`` (the test sets the
environment: :func:`environment`).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import inspect
import json
import math
import os
import pickle
import re
import sys
import types
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np


def environment() -> dict[str, str]:
    """The variables the probe runs under (beside the caller's): two cpu devices as the
    current accelerator, a memory limit that turns huge sizes into a quick out-of-memory."""
    return {"ACCELRT_CPU_DEVICES": "2", "ACCELRT_ACCELERATOR": "cpu",
            "ACCELRT_CPU_MEMORY": "256MiB", "ACCELRT_ALLOC_CONF": "",
            "PYTORCH_CUDA_ALLOC_CONF": "", "PYTHONHASHSEED": "0"}


# ---------------------------------------------------------------------- hostile values

try:   # imported by tests/package/test_builds_agree.py (package helpers), or run as a script
    from .hostile import Index, IntEq, IntIdx, IntSub
except ImportError:
    from hostile import Index, IntEq, IntIdx, IntSub  # type: ignore[no-redef]


class BadIndex:
    """``__index__`` raises."""

    def __index__(self) -> int:
        raise ZeroDivisionError("__index__ raised")


class StrIndex:
    """``__index__`` returns a str."""

    def __index__(self) -> Any:
        return "1"   # noqa: PLE0305  (what the argument checks must survive)


class BadInt:
    """``__int__`` and ``__float__`` raise."""

    def __int__(self) -> int:
        raise ZeroDivisionError("__int__ raised")

    def __float__(self) -> float:
        raise ZeroDivisionError("__float__ raised")


class IntLike:
    """``__int__`` and ``__float__`` only (no ``__index__``)."""

    def __int__(self) -> int:
        return 1

    def __float__(self) -> float:
        return 1.0


class BadEq:
    """``__eq__`` and ``__hash__`` raise."""

    def __eq__(self, other: object) -> bool:
        raise ZeroDivisionError("__eq__ raised")

    def __hash__(self) -> int:
        raise ZeroDivisionError("__hash__ raised")


class EqAll:
    """Equal to everything, hash 0."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


class BoolRaise:
    """``__bool__`` raises."""

    def __bool__(self) -> bool:
        raise ZeroDivisionError("__bool__ raised")


class StrSub(str):
    """A subclass of str."""


class FloatSub(float):
    """A subclass of float."""


#: (id, value): what each parameter is given in turn
VALUES: list[tuple[str, Any]] = [
    ("1.5", 1.5), ("0.0", 0.0), ("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf),
    ("True", True), ("False", False),
    ("np.int64(1)", np.int64(1)), ("np.int32(0)", np.int32(0)),
    ("np.uint64(2**64-1)", np.uint64(2 ** 64 - 1)), ("np.float64(1.0)", np.float64(1.0)),
    ("np.float32(nan)", np.float32("nan")), ("np.True_", np.True_), ("np.False_", np.False_),
    ("0", 0), ("-1", -1), ("2**31", 2 ** 31), ("2**63-1", 2 ** 63 - 1), ("2**63", 2 ** 63),
    ("2**64", 2 ** 64), ("-2**63-1", -2 ** 63 - 1), ("10**40", 10 ** 40),
    ("None", None), ("'1'", "1"), ("'cpu:1'", "cpu:1"), ("''", ""), ("b'1'", b"1"),
    ("[1]", [1]), ("(1,)", (1,)), ("{}", {}), ("object()", object()), ("1j", 1j),
    ("Decimal('1.5')", Decimal("1.5")), ("Fraction(1,2)", Fraction(1, 2)),
    ("IntSub(1)", IntSub(1)), ("IntEq(1)", IntEq(1)), ("IntIdx(1)", IntIdx(1)),
    ("Index()", Index()), ("BadIndex()", BadIndex()), ("StrIndex()", StrIndex()),
    ("BadInt()", BadInt()), ("IntLike()", IntLike()), ("BadEq()", BadEq()),
    ("EqAll()", EqAll()), ("BoolRaise()", BoolRaise()), ("StrSub('cpu')", StrSub("cpu")),
    ("FloatSub(1.0)", FloatSub(1.0)),
]

#: more values for parameters of these names (device strings, dtypes)
DEVICE_VALUES: list[tuple[str, Any]] = [
    (repr(v), v) for v in ["cpu:-1", "cpu:2", "cpu:99999999999999999999", "cpu:1.5", "cpu: 1",
                           "cpu:01", "CPU:0", "cpu:\u0661", "cpu:0:0", "cuda:0", "nope:0",
                           "cpu:", ":0", "cpu:+1", "cpu:1 ", "cpu", "opencl:0"]]
DTYPE_VALUES: list[tuple[str, Any]] = [
    (repr(v), v) for v in ["float64", "bfloat16", "int4", "float32 ", "FLOAT32", "bool",
                           "complex64", "object", "V4", ">f4", "U1"]] + [
    ("np.float32", np.float32), ("np.dtype('V4')", np.dtype("V4")),
    ("np.dtype('>f4')", np.dtype(">f4")), ("int", int), ("float", float), ("bool", bool),
    ("np.dtype('O')", np.dtype("O"))]
STATE_VALUES: list[tuple[str, Any]] = [
    ("uint8[15]", np.zeros(15, np.uint8)), ("uint8[17]", np.zeros(17, np.uint8)),
    ("float32[16]", np.zeros(16, np.float32)), ("int64[2]", np.zeros(2, np.int64)),
    ("uint8[4,4]", np.zeros((4, 4), np.uint8)), ("bool[16]", np.zeros(16, bool)),
    ("uint8[16] non-contiguous", np.zeros(32, np.uint8)[::2]),
    ("uint8[16] read-only", np.zeros(16, np.uint8).view()),
    ("bytes(16)", bytes(16)), ("bytearray(16)", bytearray(16)), ("list(16)", [0] * 16),
    ("uint8[16] of 255", np.full(16, 255, np.uint8))]
STATE_VALUES[7][1].flags.writeable = False
EXTRA: dict[str, list[tuple[str, Any]]] = {
    "new_state": STATE_VALUES, "new_states[0]": STATE_VALUES,
    "device": DEVICE_VALUES, "peer_device": DEVICE_VALUES, "destination": DEVICE_VALUES,
    "type": DEVICE_VALUES, "device_type": DEVICE_VALUES, "dtype": DTYPE_VALUES,
    "devices[0]": DEVICE_VALUES, "name": DEVICE_VALUES,
}

#: strings for ``set_allocator_settings`` (each also as ``ACCELRT_ALLOC_CONF`` is not probed:
#: the variable is read once per process)
SETTINGS = [
    "", "max_split_size_mb:64", "max_split_size_mb:1.5", "max_split_size_mb:-1",
    "max_split_size_mb:nan", "max_split_size_mb:inf", "max_split_size_mb:0",
    "max_split_size_mb:18446744073709551616", "max_split_size_mb:99999999999999999999999",
    "max_split_size_mb:1e3", "max_split_size_mb:0x10", "max_split_size_mb:", "max_split_size_mb",
    "max_split_size_mb:True", "garbage_collection_threshold:0.5",
    "garbage_collection_threshold:1.5", "garbage_collection_threshold:nan",
    "garbage_collection_threshold:-0.1", "garbage_collection_threshold:1e400",
    "garbage_collection_threshold:x", "roundup_power2_divisions:4",
    "roundup_power2_divisions:3", "roundup_power2_divisions:[256:4,>:2]",
    "roundup_power2_divisions:[1:4]", "roundup_power2_divisions:[256:1.5]",
    "roundup_power2_divisions:[256:4", "roundup_power2_divisions:2**64",
    "roundup_power2_divisions:18446744073709551616", "expandable_segments:True",
    "expandable_segments:1", "expandable_segments:yes", "expandable_segments:False",
    "pinned_use_host_register:True", "pinned_num_register_threads:3",
    "pinned_num_register_threads:99999999999999999999", "release_lock_on_cudamalloc:True",
    "max_non_split_rounding_mb:1.5", "max_non_split_rounding_mb:18446744073709551616",
    "backend:native", "backend:cudaMallocAsync", "backend:nope", "unknown_key:1",
    "max_split_size_mb:64,,", ",", ":", "max_split_size_mb:64,max_split_size_mb:128",
    "max_split_size_mb:\u0661\u0662\u0663", "max_split_size_mb: 64", "MAX_SPLIT_SIZE_MB:64",
    "per_process_memory_fraction:0.5", "per_process_memory_fraction:2",
    "graph_capture_record_stream_reuse:True", "\x00",
]


# ---------------------------------------------------------------------- outcomes

_HEX = re.compile(r"0x[0-9a-fA-F]+")
_PID = re.compile(r"\b(pid|process|/proc/) ?\d+")
#: a store's ``(host, port)`` where the port was bound at run time (``port=0``)
_PORT = re.compile(r"(\([^(),]*, )\d+\)")


#: an out-of-memory message's amounts of memory in use, free or cached, which depend on when
#: the garbage collector last ran (the amount asked for and the capacity stay)
_IN_USE = re.compile(r"\b(of which|memory|with|and) [\d.]+ (bytes|KiB|MiB|GiB|TiB)\b")


def clean(text: str) -> str:
    """``text`` without what differs between two runs of one build (addresses, process ids,
    memory in use, ports bound at run time)."""
    text = _HEX.sub("0x?", text)
    text = _PORT.sub(r"\1?)", text)
    text = _IN_USE.sub(r"\1 <bytes>", text)
    return _PID.sub(r"\1 ?", text)


def describe_exc(e: BaseException) -> str:
    cls = type(e)
    out = f"{cls.__module__}.{cls.__qualname__}: {clean(str(e))}"
    if e.__cause__ is not None:
        c = e.__cause__
        out += f" [from {type(c).__module__}.{type(c).__qualname__}: {clean(str(c))}]"
    return out


def norm(x: Any, values: bool = True, depth: int = 0) -> str:
    """``x`` as text that two runs of one build agree on."""
    import accelrt as acc
    if depth > 4:
        return type(x).__name__
    t = type(x)
    if x is None or t is bool:
        return repr(x)
    if t is int:
        return repr(x) if values else "int"
    if t is float:
        return repr(x) if values else "float"
    if t is str:
        return repr(clean(x)) if values else "str"
    if t is bytes:
        return f"bytes[{len(x)}]"
    if isinstance(x, (tuple, list)):
        inner = ", ".join(norm(v, values, depth + 1) for v in x[:20])
        return f"{t.__name__}({inner}{', ...' if len(x) > 20 else ''})"
    if isinstance(x, dict):
        items = ", ".join(f"{k!r}: {norm(v, values, depth + 1)}" for k, v in list(x.items())[:200])
        return f"{t.__name__}{{{items}}}"
    if isinstance(x, np.ndarray):
        return f"ndarray{x.shape}{x.dtype}"
    if isinstance(x, np.generic):
        return f"{t.__name__}({x!r})"
    if isinstance(x, acc.Array):
        return (f"{t.__name__}(shape={x.shape}, dtype={x.dtype}, device={x.device})"
                if not x.is_closed else f"{t.__name__}(closed)")
    if isinstance(x, acc.device):
        return repr(x)
    if isinstance(x, acc.Stream):
        return f"{t.__module__}.{t.__name__}({x.device}, priority={x.priority})"
    if isinstance(x, int):
        return f"{t.__name__}({int.__repr__(x)})"
    if isinstance(x, float):
        return f"{t.__name__}({float.__repr__(x)})"
    return f"{t.__module__}.{t.__qualname__}"


def _fds_ok() -> None:
    """Put back stdin/stdout/stderr if a call closed them (``open(1, 'wb')`` of a file name
    given as an int closes fd 1 on exit)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


def outcome(call: Callable[[], Any], values: bool = True,
            then: Callable[[Any], Any] | None = None) -> str:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            r = call()
            if then is not None:
                extra = then(r)
                out = f"return {norm(r, values)}; then {norm(extra, values)}"
            else:
                out = f"return {norm(r, values)}"
        except Exception as e:   # noqa: BLE001  (what a call raises is the observation)
            out = f"raise {describe_exc(e)}"
        finally:
            r = None
        _fds_ok()
    for w in caught:
        out += f" | warn {w.category.__name__}: {clean(str(w.message))}"
    return out


# ---------------------------------------------------------------------- specs

_MISSING = object()


@dataclass
class Spec:
    """One callable: ``target()`` gives it (a fresh bound method for a method); ``base``
    maps parameter names to factories of valid arguments; ``varargs`` is the valid
    ``*args``; ``then`` runs on the result (enter a context manager, free a pointer)."""

    name: str
    target: Callable[[], Callable[..., Any]]
    base: dict[str, Callable[[], Any]] = field(default_factory=dict)
    varargs: Callable[[], list[Any]] | None = None
    kw_vary: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    then: Callable[[Any], Any] | None = None
    values: bool = True
    reset: Callable[[], None] | None = None
    around: Callable[[], contextlib.AbstractContextManager[Any]] | None = None


#: the signatures read so far, per :func:`_signature_key`
_SIGNATURES: dict[Any, inspect.Signature] = {}


def _signature_key(fn: Callable[..., Any]) -> Any:
    """What ``fn``'s signature depends on, or None where that is not a long-lived object:
    a method bound to a fresh instance each case is its function (or, compiled, its class
    and name), never the instance, which a cache would keep alive and so change what later
    cases see of memory."""
    if isinstance(fn, types.MethodType):
        return (fn.__func__, True) if isinstance(fn.__func__, types.FunctionType) else None
    if isinstance(fn, (types.FunctionType, type)):
        return fn, False
    if isinstance(fn, types.BuiltinMethodType):
        owner = fn.__self__
        if owner is None or isinstance(owner, (types.ModuleType, type)):
            return fn, False
        return type(owner), fn.__name__, "bound"
    return None


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    """:func:`inspect.signature`, read once per function: the probe calls each one
    thousands of times, often as a fresh bound method."""
    key = _signature_key(fn)
    if key is None:
        return inspect.signature(fn)
    sig = _SIGNATURES.get(key)
    if sig is None:   # (one that raises is not kept: it raises again, as it did)
        sig = _SIGNATURES[key] = inspect.signature(fn)
    return sig


def baseline(fn: Callable[..., Any], table: dict[str, Callable[[], Any]],
             given: dict[str, Callable[[], Any]]) -> dict[str, Callable[[], Any]]:
    """The baseline arguments of ``fn``: ``given``, then, for each parameter of ``fn``
    without a default (not ``*args``/``**kwargs``) that ``given`` lacks, ``table``'s entry
    under its name."""
    base = dict(given)
    try:
        sig = _signature(fn)
    except (TypeError, ValueError):
        return base
    for p in sig.parameters.values():
        if (p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                and p.name not in base and p.name in table):
            base[p.name] = table[p.name]
    return base


def _call(spec: Spec, override: tuple[str, Any] | None, seq: bool = False) -> Any:
    """Call ``spec``'s target with its baseline arguments, ``override`` = (name, value)
    replacing one (a name ``*i`` replaces item i of the varargs, ``*seq`` passes them as one
    tuple with item 0 replaced)."""
    fn = spec.target()
    sig = _signature(fn)
    vals = {k: f() for k, f in spec.base.items()}
    varargs = spec.varargs() if spec.varargs is not None else []
    extra_args: list[Any] = []
    if override is not None:
        name, value = override
        if name.endswith("]") and not name.startswith("*"):   # "devices[1]": one item
            pname, _, i = name[:-1].partition("[")
            seq = vals[pname] if pname in vals else ELEMENTS[pname]()
            items = list(seq)
            items[int(i)] = value
            vals[pname] = type(seq)(items) if isinstance(seq, tuple) else items
        elif name == "+arg":
            extra_args.append(value)
        elif name == "+kw":
            vals["no_such_keyword"] = value
        elif name.startswith("*"):
            varargs = list(varargs)
            if name == "*seq":
                varargs = [(value, *varargs[1:])]
            else:
                varargs[int(name[1:])] = value
        else:
            vals[name] = value
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    params = list(sig.parameters.values())
    has_var = any(p.kind is p.VAR_POSITIONAL for p in params)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    # positional-only (and, before *args, positional-or-keyword) parameters go by position,
    # up to the last one given; the rest by keyword
    by_position = [p for p in positional if p.kind is p.POSITIONAL_ONLY or has_var]
    last = max((i for i, p in enumerate(by_position) if p.name in vals), default=-1)
    for i, p in enumerate(by_position):
        if i > last:
            break
        if p.name in vals:
            args.append(vals.pop(p.name))
        elif p.default is not p.empty:
            args.append(p.default)
        else:
            raise AssertionError(f"{spec.name}: no value for {p.name}")
    if extra_args and not has_var:   # one positional argument more than it takes
        args = [*args, *(vals.pop(p.name) for p in positional[len(args):] if p.name in vals)]
        while len(args) < len(positional):
            p = positional[len(args)]
            args.append(p.default if p.default is not p.empty else None)
    args.extend(varargs)
    args.extend(extra_args)
    kwargs.update(vals)
    return fn(*args, **kwargs)


def _varied(spec: Spec) -> list[str]:
    """The parameter names of ``spec`` to vary, in signature order."""
    try:
        sig = _signature(spec.target())
    except (TypeError, ValueError):
        return []
    names: list[str] = []
    for p in sig.parameters.values():
        if p.name in spec.skip:
            continue
        if p.kind is p.VAR_POSITIONAL:
            n = len(spec.varargs()) if spec.varargs is not None else 0
            names += [f"*{i}" for i in range(n)]
            if n:
                names.append("*seq")
        elif p.kind is p.VAR_KEYWORD:
            names += list(spec.kw_vary)
        else:
            names.append(p.name)
            factory = spec.base.get(p.name) or ELEMENTS.get(p.name)
            seq = factory() if factory is not None else None
            if type(seq) in (list, tuple) and seq:
                names += [f"{p.name}[{i}]" for i in range(min(len(seq), 2))]
    return names


#: baselines of sequence parameters that default to None, for their items' variants
ELEMENTS: dict[str, Callable[[], Any]] = {}


def _elements() -> None:
    import accelrt as acc
    from accelrt import memory
    ELEMENTS.update({
        "devices": lambda: [0, 1], "chunk_sizes": lambda: [2, 2],
        "mempool_id": lambda: _keep(memory.MemPool()).id,
        "pool": lambda: acc.graphs.generate_graph_pool_handle(),
        "streams": lambda: [None, None],
        "out": lambda: [acc.zeros(4, device="cpu:0"), acc.zeros(4, device="cpu:1")],
        "max_version": lambda: (1, 0), "dl_device": lambda: (1, 0),
    })


# ---------------------------------------------------------------------- the API's specs

def build_specs() -> list[Spec]:
    import accelrt as acc
    from accelrt import comm, graphs, memory
    from accelrt import random as rnd

    cpu = acc.cpu
    specs: list[Spec] = []

    def stream0() -> Any:
        return acc.Stream("cpu:0")

    def recorded(timing: bool = False, interprocess: bool = False) -> Any:
        e = acc.Event("cpu:0", enable_timing=timing, interprocess=interprocess)
        e.record(acc.current_stream("cpu:0"))
        return e

    def ipc_handle() -> bytes:
        e = recorded(interprocess=True)
        _kept.append(e)   # the handle names it: it stays open for the whole run
        return e.ipc_handle()

    def ptr() -> int:
        return memory.caching_allocator_alloc(512, "cpu:0")

    def arr() -> Any:
        return acc.ones(4, device="cpu:0")

    def two() -> list[Any]:
        return [acc.ones(2, device="cpu:0"), acc.ones(2, device="cpu:1")]

    def free_ptr(r: Any) -> None:
        if type(r) is int:
            memory.caching_allocator_delete(r)

    def enter(r: Any) -> str:
        with r:
            return "entered"

    def alloc_fns() -> tuple[Any, Any]:
        return (lambda size, device, stream: 0), (lambda ptr, size, device, stream: None)

    #: baseline values of parameters with no default, by name (a spec's own win)
    base_by_name: dict[str, Callable[[], Any]] = {
        "device": lambda: "cpu:0", "peer_device": lambda: "cpu:1", "seed": lambda: 7,
        "size": lambda: 512, "ptr": ptr, "mem_ptr": ptr, "name": lambda: "cpu",
        "stream": stream0, "pool": memory.MemPool, "fraction": lambda: 0.5,
        "settings": lambda: "max_split_size_mb:64", "debug_mode": lambda: 0,
        "new_state": lambda: acc.get_rng_state("cpu:0"),
        "new_states": lambda: rnd.get_rng_state_all(), "array": arr, "tensor": arr,
        "tensors": two, "inputs": two, "devices": lambda: [0, 1], "fill_value": lambda: 1.0,
        "obj": lambda: np.arange(4, dtype=np.float32), "a": lambda: np.zeros(4),
        "type": lambda: "cpu", "cuda_graph": acc.Graph,
        "filename": lambda: "snap.pickle", "path": lambda: "graph.dot",
        "debug_path": lambda: "graph.dot", "stream_ptr": lambda: acc.Stream("cpu:0").stream_id,
        "data_ptr": lambda: acc.Stream("cpu:0").stream_id, "event": recorded,
        "end_event": lambda: recorded(True), "src": arr, "value": lambda: 2.0,
        "increment": lambda: 4, "offset": lambda: 8, "hook": lambda: (lambda g: None),
        "cb": lambda: (lambda: None), "generator": lambda: rnd.Generator("cpu:0"),
        "allocator": lambda: memory.PluggableAllocator.from_callables(*alloc_fns()),
        "alloc": lambda: alloc_fns()[0], "free": lambda: alloc_fns()[1],
        "path_to_so_file": lambda: "libnone.so", "alloc_fn_name": lambda: "a",
        "free_fn_name": lambda: "f", "handle": ipc_handle,
        "chunk_sizes": lambda: [2, 2], "destination": lambda: "cpu:1",
        "state": lambda: rnd.Generator("cpu:0").graphsafe_get_state(),
        "mempool_id": lambda: None, "fn": lambda: (lambda *a: None),
        "exc_type": lambda: None, "exc": lambda: None, "tb": lambda: None,
    }

    def fn_spec(name: str, f: Callable[..., Any], **kw: Any) -> Spec:
        return Spec(name, lambda: f, baseline(f, base_by_name, kw.pop("base", {})), **kw)

    # ---- module functions (one spec per distinct object)
    seen: set[int] = set()
    special: dict[str, dict[str, Any]] = {
        "empty": {"varargs": lambda: [2, 3], "kw_vary": ("size",)},
        "zeros": {"varargs": lambda: [2, 3], "kw_vary": ("size",)},
        "ones": {"varargs": lambda: [2, 3], "kw_vary": ("size",)},
        "rand": {"varargs": lambda: [2, 3], "kw_vary": ("size",)},
        "randn": {"varargs": lambda: [2, 3], "kw_vary": ("size",)},
        "randint": {"varargs": lambda: [0, 10, (3,)]},
        "Array": {"varargs": lambda: [2, 3], "kw_vary": ("size",)},
        "full": {"base": {"size": lambda: (2, 3), "fill_value": lambda: 1.5}},
        "uniform_": {"base": {"array": lambda: acc.zeros(4, dtype="float64", device="cpu:1")}},
        "normal_": {"base": {"array": lambda: acc.zeros(4, dtype="float16", device="cpu:1")}},
        "caching_allocator_alloc": {"then": free_ptr},
        "use_mem_pool": {"then": enter}, "device_index": {"then": enter,
                                                         "base": {"device": lambda: 1}},
        "stream": {"then": enter}, "StreamContext": {"then": enter},
        "device": {"then": None}, "graph": {"then": enter,
                                            "base": {"cuda_graph": acc.Graph}},
        "caching_allocator_disabled": {"then": enter},
        "set_allocator_settings": {"reset": lambda: memory.set_allocator_settings(_SETTINGS0)},
        "set_per_process_memory_fraction": {"reset": _full_fractions},
        "caching_allocator_enable": {"reset": lambda: cpu.caching_allocator_enable(True)},
        "record_memory_history": {"reset": lambda: memory.record_memory_history(None)},
        "set_sync_debug_mode": {"reset": lambda: acc.set_sync_debug_mode(0)},
        "set_default_device": {"reset": lambda: acc.set_default_device(None)},
        "change_current_allocator": {},
        "reduce_add_coalesced": {"base": {"inputs": lambda: [[t] for t in two()]}},
        "broadcast_coalesced": {"base": {"tensors": lambda: [arr()]}},
        "scatter": {"base": {"devices": lambda: [0, 1]}},
        "broadcast": {"base": {"devices": lambda: [0, 1]}},
        "gather": {"base": {"destination": lambda: "cpu:1"}},
        "set_rng_state_all": {"base": {"new_states": lambda: rnd.get_rng_state_all()}},
        "is_pinned": {"base": {"a": lambda: np.zeros(4)}},
        "pin_memory": {"base": {"a": lambda: np.zeros(4)}},
        "device_of": {"then": enter, "base": {"obj": lambda: acc.zeros(2, device="cpu:1")}},
        "export_dot": {"then": lambda r: callable(r)},
    }
    #: functions whose results depend on memory state or timing: recorded by type only
    by_type = {"memory_allocated", "memory_reserved", "max_memory_allocated",
               "max_memory_reserved", "memory_stats", "memory_stats_as_nested_dict",
               "memory_summary", "memory_snapshot", "get_memory_info", "mem_get_info",
               "memory_cached", "max_memory_cached", "host_memory_stats",
               "host_memory_stats_as_nested_dict", "device_memory_used", "memory_usage",
               "seed", "seed_all", "initial_seed", "list_gpu_processes", "utilization",
               "temperature", "power_draw", "clock_rate", "get_rng_state",
               "get_rng_state_all", "snapshot", "use_count", "elapsed_time", "query",
               "data_ptr", "stream_id", "native_handle", "event_id", "ipc_handle",
               "get_offset", "pool", "pools", "id", "generate_graph_pool_handle",
               "graph_pool_handle", "raw_cuda_graph", "raw_cuda_graph_exec",
               "get_device_properties", "caching_allocator_alloc"}
    # accelrt.cuda too: no CUDA here, so each call says so, after or before its checks
    modules = [acc, cpu, cpu.memory, cpu.random, cpu.streams, cpu.graphs, memory, rnd, comm,
               graphs, acc.cuda, acc.cuda.memory, acc.cuda.random]
    classes: dict[str, Any] = {}
    for mod in modules:
        for n in sorted(getattr(mod, "__all__", None) or [x for x in dir(mod)
                                                           if not x.startswith("_")]):
            f = getattr(mod, n, None)
            if f is None or inspect.ismodule(f) or not callable(f):
                continue
            if inspect.isclass(f) and issubclass(f, BaseException):
                continue
            if id(f) in seen:
                ALIASES.append(f"{mod.__name__}.{n}")   # called under its first name
                continue
            seen.add(id(f))
            qual = f"{mod.__name__}.{n}"
            if inspect.isclass(f):
                classes[qual] = f
            extra = dict(special.get(n, {}))
            if n in by_type:
                extra["values"] = False
            specs.append(fn_spec(qual, f, **extra))

    # ---- the factories again with other dtypes (the fill value and bounds meet them)
    for dt in ("int64", "uint8", "bool", "complex64", "float16"):
        specs.append(fn_spec(f"accelrt.full[dtype={dt}]", acc.full,
                             base={"size": lambda: (2,), "fill_value": lambda: 1,
                                   "dtype": lambda dt=dt: dt}))
        specs.append(fn_spec(f"accelrt.asarray[dtype={dt}]", acc.asarray,
                             base={"obj": lambda: [1, 0], "dtype": lambda dt=dt: dt}))
    for dt in ("int8", "uint8", "int32", "bool"):
        specs.append(fn_spec(f"accelrt.randint[dtype={dt}]", acc.randint,
                             varargs=lambda: [0, 2, (3,)],
                             base={"dtype": lambda dt=dt: dt}))
    for dt in ("float64", "float16", "bfloat16"):
        specs.append(fn_spec(f"accelrt.rand[dtype={dt}]", acc.rand, varargs=lambda: [2],
                             base={"dtype": lambda dt=dt: dt}))

    # ---- methods of the public classes, on fresh instances
    instances: dict[str, Callable[[], Any]] = {
        "accelrt.Stream": stream0, "accelrt.cpu.Stream": lambda: cpu.Stream(0),
        "accelrt.cpu.ExternalStream": lambda: cpu.ExternalStream(_keep(acc.Stream(0)).stream_id),
        "accelrt.Event": lambda: recorded(True),
        "accelrt.cpu.Event": lambda: _record(cpu.Event(True)),
        "accelrt.Array": arr, "accelrt.random.Generator": lambda: rnd.Generator("cpu:0"),
        "accelrt.Array(int64)": lambda: acc.zeros(3, dtype="int64", device="cpu:1"),
        "accelrt.Array(bool)": lambda: acc.zeros(3, dtype="bool", device="cpu:0"),
        "accelrt.Array(complex64)": lambda: acc.zeros(3, dtype="complex64", device="cpu:0"),
        "accelrt.Array(empty)": lambda: acc.zeros(0, 2, device="cpu:0"),
        "accelrt.Event(interprocess)": lambda: recorded(interprocess=True),
        "accelrt.MemPool": memory.MemPool, "accelrt.Graph": lambda: _graph(acc.Graph()),
        "accelrt.cpu.Graph": lambda: _graph(cpu.Graph()),
        "accelrt.Graph(captured)": lambda: _captured(acc.Graph()),
        "accelrt.cpu.Graph(captured)": lambda: _captured(cpu.Graph()),
        "accelrt.memory.PluggableAllocator":
            lambda: memory.PluggableAllocator.from_callables(*alloc_fns()),
        "accelrt.device": lambda: acc.device("cpu:1"),
        "accelrt.device_index": lambda: acc.device_index(1),
        "accelrt.cpu.device": lambda: cpu.device(1),
        "accelrt.cpu.StreamContext": lambda: cpu.StreamContext(acc.Stream("cpu:1")),
    }
    method_base: dict[str, dict[str, Callable[[], Any]]] = {
        "from_ipc_handle": {"device": lambda: "cpu:0", "handle": ipc_handle},
        "retain_object": {"obj": object},
    }
    method_then = {"__enter__": None}
    dunders = ("__enter__", "__exit__", "__dlpack__", "__dlpack_device__", "__array__",
               "__len__", "__bool__", "__eq__", "__lt__", "__hash__", "__repr__", "__call__")
    cls_names: list[str] = []
    for qual, factory in instances.items():
        obj_cls = type(factory())
        cls_names.append(qual)
        for m in sorted(dir(obj_cls)):
            if m.startswith("_") and m not in dunders:
                continue
            a = inspect.getattr_static(obj_cls, m)
            if isinstance(a, (property, type(IntSub.real))) or not callable(getattr(obj_cls, m)):
                continue
            if m in ("__eq__", "__hash__", "__lt__") and getattr(obj_cls, m) is getattr(object, m):
                continue
            base = dict(method_base.get(m, {}))

            def target(factory: Callable[[], Any] = factory, m: str = m) -> Any:
                return getattr(factory(), m)
            try:
                sig = _signature(target())
            except Exception:   # noqa: BLE001  (the instance cannot be made: the baseline says)
                sig = None
            if sig is not None:
                for p in sig.parameters.values():
                    if (p.default is p.empty and p.name not in base
                            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)):
                        if p.name in base_by_name:
                            base[p.name] = base_by_name[p.name]
                        elif p.name in ("other", "value"):
                            base[p.name] = factory
            varargs = None
            if m == "__exit__" and sig is not None and any(
                    p.kind is p.VAR_POSITIONAL for p in sig.parameters.values()):
                varargs = lambda: [None, None, None]   # noqa: E731
            specs.append(Spec(f"{qual}.{m}", target, base, varargs=varargs,
                              then=method_then.get(m), values=m not in by_type,
                              around=_side_stream if "Graph" in qual else None))

    # ---- attributes a user can assign (then read back, and use the object)
    settable: list[tuple[str, Callable[[], Any], str, Callable[[Any], Any] | None]] = []
    for qual, factory in instances.items():
        obj_cls = type(factory())
        for m in sorted(dir(obj_cls)):
            if m.startswith("_"):
                continue
            a = inspect.getattr_static(obj_cls, m)
            if callable(a) and not isinstance(a, property):
                continue
            use = enter if hasattr(obj_cls, "__enter__") and qual != "accelrt.Graph" and \
                "Graph" not in qual else None
            settable.append((qual, factory, m, use))
        settable.append((qual, factory, "user_attribute", None))
    for qual, factory, attr, use in settable:
        specs.append(_setattr_spec(qual, factory, attr, use))

    # ---- allocator settings strings
    for i, s in enumerate(SETTINGS):
        specs.append(Spec(f"set_allocator_settings[{i}:{s!r}]",
                          lambda s=s: (lambda: (memory.set_allocator_settings(s),
                                                memory.get_allocator_settings())[1]),
                          reset=lambda: memory.set_allocator_settings(_SETTINGS0)))

    # ---- operators and the copy, pickle and weakref protocols on every class's instances
    for qual, factory in instances.items():
        for op_name, op in (("==", lambda a, b: a == b), ("!=", lambda a, b: a != b),
                            ("<", lambda a, b: a < b), ("in-set", lambda a, b: b in {a})):  # noqa: FURB171
            specs.append(Spec(f"{qual} {op_name} v",
                              lambda factory=factory, op=op: (lambda other: op(factory(), other)),
                              {"other": factory}, around=_side_stream if "Graph" in qual else None))
        for op_name, op in (("hash", lambda a: hash(a) == hash(a)), ("repr", repr), ("str", str),
                            ("bool", bool), ("copy.copy", copy.copy),
                            ("copy.deepcopy", copy.deepcopy),
                            ("pickle", lambda a: pickle.loads(pickle.dumps(a))),
                            ("weakref", lambda a: weakref.ref(a)() is a)):
            specs.append(Spec(f"{op_name}({qual})",
                              lambda factory=factory, op=op: (lambda: op(factory())),
                              around=_side_stream if "Graph" in qual else None,
                              values=op_name not in ("repr", "str")))
    return specs + _owner_specs()


def _owner_specs() -> list[Spec]:
    """The memory owner of arrays (``accelrt._memory_owner._Memory``: a C type in the compiled
    build, the Python class in the pure one): the constructor, its fields (on an owner of
    borrowed memory, let go after: a field set to a hostile value would otherwise be freed),
    and the copy, pickle and weakref protocols on an owner of allocator memory and on one of
    borrowed memory."""
    import accelrt as acc
    from accelrt import _memory_owner
    owner, qual = _memory_owner._Memory, "accelrt._memory_owner._Memory"
    host = _keep(np.zeros(4))

    def borrowed() -> Any:
        return owner(4096, host.nbytes, None, host, True)   # (an address never read)

    def owning() -> Any:
        return acc.empty(4, device="cpu:0")._mem

    def let_go(m: Any) -> None:
        m.alloc = None

    specs = [Spec(qual, lambda: owner, {"ptr": lambda: 0, "nbytes": lambda: 0,
                                       "alloc": lambda: None})]
    specs += [_setattr_spec(f"{qual}(borrowed)", borrowed, attr, let_go)
              for attr in ("ptr", "nbytes", "alloc", "base", "host", "user_attribute")]
    for name, factory in ((qual, owning), (f"{qual}(borrowed)", borrowed)):
        for op_name, op in (("hash", lambda a: hash(a) == hash(a)), ("repr", repr),
                            ("==", lambda a: (a == a, a != a)), ("bool", bool),
                            ("copy.copy", copy.copy), ("copy.deepcopy", copy.deepcopy),
                            ("pickle", lambda a: pickle.loads(pickle.dumps(a))),
                            ("weakref", lambda a: weakref.ref(a)() is a)):
            specs.append(Spec(f"{op_name}({name})",
                              lambda factory=factory, op=op: (lambda: op(factory())),
                              values=op_name != "repr"))
    return specs


_SETTINGS0 = ""
#: public names of an object already probed under another name
ALIASES: list[str] = []
_kept: list[Any] = []


def _keep(obj: Any) -> Any:
    _kept.append(obj)
    return obj


def _record(e: Any) -> Any:
    import accelrt as acc
    e.record(acc.current_stream(e.device))
    return e


#: the graphs made by the current case (ended and reset after it)
_graphs: list[Any] = []


def _graph(g: Any) -> Any:
    _graphs.append(g)
    return g


def _captured(g: Any) -> Any:
    """``g`` with a capture ended (by capture_begin/end: ``with graph(g)`` collects garbage,
    too slow to run per case)."""
    import accelrt as acc
    with acc.Stream("cpu:0"):
        g.capture_begin()
        acc.zeros(2, device="cpu:0").fill_(1.0)
        g.capture_end()
    return _graph(g)


@contextlib.contextmanager
def _side_stream() -> Iterator[None]:
    """A graph's case runs on a side stream (capture needs one); a capture it began is
    ended after it."""
    import accelrt as acc
    with acc.Stream("cpu:0"):
        try:
            yield
        finally:
            _end_graphs()


def _end_graphs() -> None:
    """End the captures the case's graphs began, and reset them (their private pools give
    their memory back now, not at the next garbage collection)."""
    for g in _graphs:
        with contextlib.suppress(Exception), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            g.capture_end()
        with contextlib.suppress(Exception):
            g.reset()
    if _graphs:
        import accelrt as acc
        _graphs.clear()
        acc.empty_cache()   # a released private pool's segments go back here


def _full_fractions() -> None:
    from accelrt import memory
    for i in range(2):
        memory.set_per_process_memory_fraction(1.0, f"cpu:{i}")


def _setattr_spec(qual: str, factory: Callable[[], Any], attr: str,
                  use: Callable[[Any], Any] | None) -> Spec:
    def assign(value: Any) -> Any:
        obj = factory()
        setattr(obj, attr, value)
        back = getattr(obj, attr)
        if use is not None:
            return back, use(obj)
        return back

    def current() -> Any:
        return getattr(factory(), attr) if attr != "user_attribute" else 0

    return Spec(f"{qual}.{attr} = v", lambda: assign, {"value": current})


# ---------------------------------------------------------------------- running

#: the cpu devices' default streams, device 1's first (read once: :func:`reset` runs after
#: every case)
_DEFAULT_STREAMS: list[Any] = []


def reset() -> None:
    """Put back what a case may have changed: its graphs' captures ended, the cpu backend the
    current accelerator, each device's default stream current, device 0 current."""
    import accelrt as acc
    _end_graphs()
    if acc.current_accelerator() != acc.device("cpu"):
        acc.set_current_accelerator("cpu")
    if not _DEFAULT_STREAMS:
        _DEFAULT_STREAMS.extend(acc.cpu.default_stream(i) for i in (1, 0))
    for s in _DEFAULT_STREAMS:
        acc.set_stream(s)
    acc.set_device_index(0)


def run(specs: list[Spec]) -> Iterator[tuple[str, str]]:
    for n, spec in enumerate(specs):
        if n % 25 == 0:
            gc.collect()
        cases: list[tuple[str, tuple[str, Any] | None]] = [
            ("baseline", None), ("+arg", ("+arg", 0)), ("+kw", ("+kw", 0))]
        for p in _varied(spec):
            cases += [(f"{p}={vid}", (p, v)) for vid, v in VALUES + EXTRA.get(p, [])]
        for cid, override in cases:
            def call(spec: Spec = spec, override: Any = override) -> Any:
                if spec.around is None:
                    return _call(spec, override)
                with spec.around():
                    return _call(spec, override)
            got = outcome(call, spec.values, spec.then)
            yield f"{spec.name}[{cid}]", got
            if spec.reset is not None:
                with contextlib.suppress(Exception):
                    spec.reset()
            reset()


def freeze_setup() -> None:
    """Collect what the setup left, then leave what it made (modules, specs, the values) out
    of every later collection: the collections between cases (every 25 specs) then walk what
    the cases made only (each took 0.1 s walking the setup's objects)."""
    gc.collect()
    gc.freeze()


def main(argv: list[str]) -> int:
    global _SETTINGS0
    out_path = os.path.abspath(argv[1])
    gc.disable()   # collections at fixed points only: both builds free arrays alike
    import accelrt as acc
    from accelrt import memory
    _SETTINGS0 = memory.get_allocator_settings()
    workdir = os.path.dirname(out_path)
    os.chdir(workdir)
    _elements()
    specs = build_specs()
    freeze_setup()
    results: dict[str, str] = {}
    for key, got in run(specs):
        results[key] = got
    header = {"accelrt": acc.__file__, "compiled": bool(memory.compiled),
              "specs": len(specs), "values": len(VALUES), "aliases": ALIASES}
    write_results(out_path, header, results)
    return 0


def write_results(out_path: str, header: dict[str, Any], results: dict[str, str]) -> None:
    """The probe's output file: its header and one outcome line per case."""
    with open(out_path, "w") as f:
        json.dump({"header": header, "results": results}, f, indent=0)


def run_script(main: Callable[[list[str]], int]) -> None:
    """Run a probe's ``main`` as the script: the calls may close or write to stdin/stdout (a
    file name given as 1), and none is needed, the results go to the file."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    sys.exit(main(sys.argv))


if __name__ == "__main__":
    run_script(main)
