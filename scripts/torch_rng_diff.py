"""Differential check of accelrt's random numbers against torch's on the CPU.

Run with a Python that has torch and can import accelrt (a tool only: accelrt never imports
torch, and CI has none)::

    PYTHONPATH=src python scripts/torch_rng_diff.py [-v] [PATTERN]

Each case is one expression (or a few statements that set ``r``) written once and run in
two namespaces: torch's (``rand`` is ``torch.rand``, ``G()`` a ``torch.Generator()``,
``D("int64")`` ``torch.int64``, ``T(data)`` a tensor) and accelrt's (``acc.rand`` on its
simulated ``cpu:0``, ``acc.random.Generator("cpu:0")``, numpy dtype names, ``acc.asarray``).
The outcomes are compared: the kind, shape and dtype of an array, an int or bool result's
value, or the builtin class of an error (accelrt's must be an instance of torch's class; its
``Accelerator*Error`` classes are ``RuntimeError`` and ``TypeError``/``ValueError`` at
once). Random values differ by design (accelrt's Philox, torch's CPU mt19937) and are not
compared. Every difference not explained by a deliberate one (``KNOWN``: each names the
docs/differences.md or docs/random.md text) is printed; the exit status is 1 if any was. What
this finds goes into tests/runtime/test_review_rng_s41.py as literal expectations ("observed
on torch 2.15.0"), since the test suite must not need torch.
"""

from __future__ import annotations

import copy
import os
import pickle
import re
import sys
import warnings
from typing import Any

os.environ.setdefault("ACCELRT_ACCELERATOR", "cpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import accelrt as acc  # noqa: E402

BUILTIN = (NotImplementedError, IndexError, TypeError, ValueError, OverflowError, MemoryError,
           RuntimeError, AttributeError, KeyError)

_TORCH_DTYPES = {"bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8,
                 "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
                 "uint16": torch.uint16, "uint32": torch.uint32, "uint64": torch.uint64,
                 "float16": torch.float16, "float32": torch.float32,
                 "float64": torch.float64, "complex64": torch.complex64,
                 "complex128": torch.complex128}
_NAMES = {v: k for k, v in _TORCH_DTYPES.items()}


def _torch_env() -> dict[str, Any]:
    return {
        "torch": torch, "np": np, "copy": copy, "pickle": pickle,
        "rand": torch.rand, "randn": torch.randn, "randint": torch.randint,
        "empty": torch.empty, "zeros": torch.zeros, "ones": torch.ones, "full": torch.full,
        "manual_seed": torch.manual_seed, "seed": torch.seed, "initial_seed": torch.initial_seed,
        "fork_rng": torch.random.fork_rng, "DEV": "cpu",
        "G": lambda: torch.Generator(), "D": lambda n: _TORCH_DTYPES[n],
        "T": lambda data, dtype=None: torch.tensor(
            data, dtype=None if dtype is None else _TORCH_DTYPES[dtype]),
        "Size": torch.Size,
        "uniform_": lambda t, *a, **k: t.uniform_(*a, **k),
        "normal_": lambda t, *a, **k: t.normal_(*a, **k),
        "default_gen": torch.default_generator,
    }


def _acc_env() -> dict[str, Any]:
    return {
        "torch": None, "np": np, "copy": copy, "pickle": pickle,
        "rand": acc.rand, "randn": acc.randn, "randint": acc.randint,
        "empty": acc.empty, "zeros": acc.zeros, "ones": acc.ones, "full": acc.full,
        "manual_seed": acc.manual_seed, "seed": acc.seed, "initial_seed": acc.initial_seed,
        "fork_rng": acc.random.fork_rng, "DEV": "cpu:0",
        "G": lambda: acc.random.Generator("cpu:0"), "D": lambda n: n,
        "T": lambda data, dtype=None: acc.asarray(data, device="cpu:0", dtype=dtype),
        "Size": tuple,
        "uniform_": acc.random.uniform_, "normal_": acc.random.normal_,
        "default_gen": acc.random.default_generator("cpu:0"),
    }


#: Cases. ``G()`` is a fresh generator; ``DEV`` the library's CPU device.
CASES: list[str] = []


def _add(*exprs: str) -> None:
    CASES.extend(exprs)


# ----------------------------------------------------------------- sizes
SIZES = ["3", "(2, 3)", "[2, 3]", "Size([2, 3])", "np.int64(3)", "np.uint8(3)", "np.array(3)",
         "np.array([2, 3])", "True", "2, True", "False", "-1", "2, -1", "0", "2**62",
         "2**63", "2**64", "2.0", "2.5", "np.float64(2)", "", "()", "[]", "(2,), 3", "None",
         "'3'", "[[2]]", "(2, None)", "np.bool_(True)", "T(3)", "T([2, 3])", "T(2.0)",
         "(np.int32(2), 3)", "size=(2, 3)", "size=3", "size=[]", "size=None", "(2**31, 2**31, 4)"]
for fn in ("rand", "randn", "empty", "zeros", "ones"):
    for s in SIZES:
        _add(f"{fn}({s})")
for s in ["(2, 3)", "3", "[]", "()", "(-1,)", "np.array([2, 3])", "Size([2])", "(2.0,)",
          "(True,)", "(np.int64(2),)", "None", "(2**63,)", "T([2, 3])"]:
    _add(f"randint(10, {s})", f"full({s}, 1.5)")

# ----------------------------------------------------------------- dtypes
for d in _TORCH_DTYPES:
    _add(f"rand(2, dtype=D('{d}'))", f"randn(2, dtype=D('{d}'))",
         f"randint(0, 2, (2,), dtype=D('{d}'))", f"randint(0, 10, (2,), dtype=D('{d}'))",
         f"randint(-1, 1, (2,), dtype=D('{d}'))", f"randint(0, 256, (2,), dtype=D('{d}'))",
         f"randint(0, 257, (2,), dtype=D('{d}'))", f"randint(0, 2**16, (2,), dtype=D('{d}'))",
         f"randint(0, 2**32, (2,), dtype=D('{d}'))", f"randint(0, 2**63 - 1, (2,), dtype=D('{d}'))",
         f"randint(-2**63, 0, (2,), dtype=D('{d}'))", f"randint(70000, 70001, (2,), dtype=D('{d}'))",
         f"randint(-70001, -70000, (2,), dtype=D('{d}'))",
         f"empty(2, dtype=D('{d}'))", f"uniform_(empty(2, dtype=D('{d}')))",
         f"normal_(empty(2, dtype=D('{d}')))")
_add("rand(2, dtype=None)", "randn(2, dtype=None)", "randint(3, (2,), dtype=None)",
     "rand(2, dtype='float32')", "rand(2, dtype=5)", "rand(2, dtype=float)",
     "randint(3, (2,), dtype=int)", "randint(3, (2,), dtype=bool)")

# ----------------------------------------------------------------- keywords
for fn, args in (("rand", "2"), ("randn", "2"), ("randint", "10, (2,)"), ("empty", "2"),
                 ("zeros", "2"), ("ones", "2"), ("full", "(2,), 1.0")):
    _add(f"{fn}({args}, device=DEV)", f"{fn}({args}, device=None)",
         f"{fn}({args}, device='cpu:9')", f"{fn}({args}, device='nope')",
         f"{fn}({args}, device=5.0)", f"{fn}({args}, requires_grad=False)",
         f"{fn}({args}, requires_grad=True)", f"{fn}({args}, pin_memory=False)",
         f"{fn}({args}, layout=None)", f"{fn}({args}, bogus=1)",
         f"{fn}({args}, out=None)", f"{fn}({args}, names=None)",
         f"{fn}({args}, memory_format=None)")
    if fn in ("rand", "randn", "randint"):
        _add(f"{fn}({args}, generator=None)", f"{fn}({args}, generator=G())",
             f"{fn}({args}, generator=5)", f"{fn}({args}, generator='cpu')",
             f"{fn}({args}, generator=G(), device=DEV)",
             f"{fn}({args}, generator=default_gen)",
             f"{fn}({args}, generator=np.random.default_rng())")

# ----------------------------------------------------------------- randint bounds/forms
_add("randint(5, 5, (2,))", "randint(6, 5, (2,))", "randint(0, (2,))", "randint(-1, (2,))",
     "randint(5, 5, (0,))", "randint(6, 5, ())", "randint(0, 2**63, (2,))",
     "randint(-2**63, 2**63 - 1, (2,))", "randint(-2**63 - 1, 0, (2,))",
     "randint(0, 2**64, (2,), dtype=D('uint64'))", "randint(1.5, (2,))", "randint(2.0, (2,))",
     "randint(True, (2,))", "randint(np.int64(5), (2,))", "randint(np.uint64(5), (2,))",
     "randint(np.float64(5), (2,))", "randint(T(5), (2,))", "randint(T(5.0), (2,))",
     "randint(T(True), (2,))", "randint(np.array(5), (2,))", "randint(10, size=(2,))",
     "randint(low=0, high=10, size=(2,))", "randint(high=10, size=(2,))",
     "randint(0, 10, size=(2,))", "randint(0, high=10, size=(2,))", "randint(10)",
     "randint(1, 3)", "randint(0, 1, 3)", "randint(0, 10, (2,), 5)", "randint(None, (2,))",
     "randint(None, 10, (2,))", "randint(0, None, (2,))", "randint(low=3, size=(2,))",
     "randint(size=(2,))", "randint(high=10)", "randint(0, 2**24 + 2, (2,), dtype=D('float32'))",
     "randint(0, 2**11 + 2, (2,), dtype=D('float16'))", "randint(0, 65505, (2,), dtype=D('float16'))",
     "randint(0, 65506, (2,), dtype=D('float16'))", "randint(-65505, 0, (2,), dtype=D('float16'))",
     "randint(0, 2**53 + 2, (2,), dtype=D('float64'))", "randint(10, (2,), low=1)")

# ----------------------------------------------------------------- uniform_ / normal_
for a, b in (("0", "1"), ("1", "0"), ("1", "1"), ("-1e300", "1e300"), ("0", "float('inf')"),
             ("float('nan')", "1"), ("False", "True"), ("np.float32(0)", "np.int8(3)"),
             ("'0'", "1"), ("None", "1"), ("0", "70000"), ("-70000", "0"), ("-60000", "60000"),
             ("T(0.0)", "1"), ("2**1024", "2**1025"), ("0", "1j"), ("0", "T([1.0])"),
             ("np.array(0.5)", "1")):
    for d in ("float16", "float32", "float64"):
        _add(f"uniform_(empty(3, dtype=D('{d}')), {a}, {b})")
for m, s in (("0", "1"), ("0", "-1"), ("0", "0"), ("float('nan')", "1"), ("0", "float('nan')"),
             ("float('inf')", "1"), ("0", "float('inf')"), ("1e300", "1e300"), ("'0'", "1"),
             ("True", "True"), ("0", "-0.0"), ("0", "T(1.0)"), ("1j", "1")):
    for d in ("float16", "float32", "float64"):
        _add(f"normal_(empty(3, dtype=D('{d}')), {m}, {s})")
_add("uniform_(empty(3), 0, 1, generator=G())", "uniform_(empty(3), 0, 1, generator=5)",
     "uniform_(empty(3), generator=None)", "normal_(empty(3), generator=G())",
     "normal_(empty(3), 0, 1, generator='x')", "uniform_(empty(3), from_=0)",
     "uniform_(empty(3), a=0, b=1)", "normal_(empty(3), mean=0, std=2)",
     "uniform_(empty(0), 5, 1)", "normal_(empty(0), 0, -1)")

# ----------------------------------------------------------------- seeds
SEEDS = ["0", "1", "-1", "-2**63", "-2**63 - 1", "2**63", "2**64 - 1", "2**64", "2**70",
         "1.0", "1.5", "-1.5", "True", "False", "'1'", "'x'", "None", "np.int64(5)",
         "np.int64(-1)", "np.uint64(2**64 - 1)", "np.int8(-3)", "np.float64(3.7)",
         "np.bool_(True)", "np.array(5)", "T(5)", "float('nan')", "float('inf')",
         "[1]", "1 + 0j", "b'1'"]
for s in SEEDS:
    _add(f"G().manual_seed({s}).initial_seed()", f"manual_seed({s}); r = initial_seed()",
         f"G().set_offset({s}).get_offset()")
_add("G().initial_seed()", "type(G().seed())", "g = G(); s = g.seed(); r = g.initial_seed() == s",
     "g = G(); g.manual_seed(5); r = (g.seed() != 5, g.initial_seed() != 5)",
     "s = seed(); r = initial_seed() == s", "G().device.type", "G().manual_seed(3) is not None",
     "g = G(); r = g.manual_seed(3) is g", "g = G(); r = g.set_state(g.get_state()) is g",
     "g = G(); r = g.set_offset(4) is g", "G().get_offset()",
     "g = G(); rand(3, generator=g); r = g.get_offset() > 0",
     "G().get_state().dtype", "G().get_state().ndim", "G().get_state().shape[0] > 0",
     "G().manual_seed()", "G().manual_seed(1, 2)", "G().set_offset()", "G(device=DEV).device.type",
     "type(manual_seed(3)).__name__",
     "G().manual_seed(seed=3).initial_seed()", "G().initial_seed(5)")

# ----------------------------------------------------------------- states
for st in ["g.get_state()", "g.get_state().tolist()", "bytes(g.get_state().tolist())",
           "bytearray(g.get_state().tolist())", "None", "5", "'x'",
           "T([1, 2, 3], 'uint8')", "T([1.0] * 16, 'float32')", "T([1] * 16, 'int64')",
           "T([1] * 16, 'int8')", "T([1] * 16, 'bool')", "T([[1] * 8] * 2, 'uint8')",
           "T([1] * 4000, 'uint8')", "np.zeros(16, np.uint8) if not torch else torch.zeros(16, dtype=torch.uint8)",
           "g.get_state()[::2]", "T([], 'uint8')"]:
    _add(f"g = G(); r = g.set_state({st}) is g")
_add("g = G(); g.manual_seed(9); s = g.get_state(); h = G(); h.set_state(s); r = h.initial_seed()",
     "g = G(); s = g.get_state(); s[0] = 7; r = g.initial_seed()",
     "g = G(); r = g.get_state() is g.get_state()")

# ----------------------------------------------------------------- copies
_add("g = G(); g.manual_seed(11); h = copy.deepcopy(g); r = (h is not g, h.initial_seed())",
     "g = G(); g.manual_seed(11); h = copy.copy(g); r = (h is not g, h.initial_seed())",
     "g = G(); g.manual_seed(11); h = pickle.loads(pickle.dumps(g)); r = h.initial_seed()",
     "g = G(); g.manual_seed(11); rand(5, generator=g); h = copy.deepcopy(g); "
     "r = h.get_offset() == g.get_offset()",
     "g = G(); g.manual_seed(11); h = g.clone_state(); r = (h is not g, h.initial_seed())",
     "g = G(); r = type(g.__reduce__()).__name__",
     "g = G(); g.manual_seed(5); h = g.graphsafe_get_state(); r = h.initial_seed()",
     "g = G(); r = g.graphsafe_set_state(5)")

# ----------------------------------------------------------------- fork_rng
_add("with fork_rng(): r = 1", "with fork_rng(enabled=False): r = 1",
     "with fork_rng(devices=[]): r = 1", "with fork_rng(devices=5): r = 1",
     "with fork_rng(devices=None, device_type='nope'): r = 1",
     "with fork_rng(device_type=5): r = 1", "with fork_rng(enabled='yes'): r = 1",
     "with fork_rng(devices=[], enabled=False, device_type='nope'): r = 1",
     "with fork_rng(devices=[], device_type='cuda'): r = 1",
     "with fork_rng([], True, 'cpu', 3): r = 1",
     "with fork_rng(devices=[], _caller='x', _devices_kw='y'): r = 1",
     "with fork_rng(devices=iter([])): r = 1",
     "manual_seed(5)\nwith fork_rng(devices=[]):\n    manual_seed(6)\nr = initial_seed()",
     "manual_seed(5)\ntry:\n    with fork_rng(devices=[]):\n        manual_seed(6)\n"
     "        raise KeyError\nexcept KeyError:\n    pass\nr = initial_seed()",
     "manual_seed(5)\nwith fork_rng(devices=[], enabled=False):\n    manual_seed(6)\n"
     "r = initial_seed()")

# ----------------------------------------------------------------- full / factories
for v in ("1", "1.5", "True", "1j", "None", "'x'", "2**63", "2**64", "-1", "float('nan')",
          "np.float32(2)", "T(3)", "T([3])"):
    for d in ("None", "D('int64')", "D('uint8')", "D('bool')", "D('float16')", "D('complex64')"):
        _add(f"full((2,), {v}, dtype={d})")


# ----------------------------------------------------------------- running
def _norm(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return ("array", tuple(x.shape), _NAMES.get(x.dtype, str(x.dtype)))
    if isinstance(x, acc.Array):
        return ("array", tuple(x.shape), x.dtype.name)
    if isinstance(x, torch.dtype):
        return ("dtype", _NAMES.get(x, str(x)).replace("uint8", "uint8"))
    if isinstance(x, np.dtype):
        return ("dtype", x.name)
    if isinstance(x, (torch.Generator, acc.random.Generator)):
        return "generator"
    if isinstance(x, (bool, int, str, float, type(None))):
        return x
    if isinstance(x, tuple):
        return tuple(_norm(v) for v in x)
    if isinstance(x, type):
        return ("type", x.__name__)
    return ("other", type(x).__name__)


def _builtin(e: BaseException) -> type[BaseException]:
    for cls in type(e).__mro__:
        if cls in BUILTIN:
            return cls
    return type(e)


def run(case: str, env: dict[str, Any]) -> tuple[Any, BaseException | None, list[str]]:
    ns = dict(env)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            if "\n" in case or ";" in case or case.startswith("with "):
                exec(case, ns)
                out = ns.get("r")
            else:
                out = eval(case, ns)
            if isinstance(out, acc.Array):
                acc.cpu.synchronize()
            return _norm(out), None, [str(x.message)[:80] for x in w]
        except BaseException as e:  # noqa: BLE001 - a tool that reports every outcome
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            return None, e, [str(x.message)[:80] for x in w]


#: deliberate differences: a regular expression matching the case -> the docs that say so
KNOWN: dict[str, str] = {
    r"np\.array\(\[2, 3\]\)|^full\(3,": "differences.md, Size arguments (a 1-D numpy array; full(n))",
    r"^\w+\(2, True\)": "differences.md, Size arguments (a bool is never a size entry)",
    r"^(rand|randn|empty|zeros|ones)\(2\*\*6[34]\)|\(2\*\*63,\)":
        "differences.md, Sizes whose bytes overflow int64",
    r"^rand[n]?\(2, dtype=D\('(bool|u?int)": "differences.md: rand/randn of a non-floating dtype",
    r"^(uniform|normal)_\(empty\(2, dtype=D\('(bool|u?int)":
        "differences.md: uniform_/normal_ of a non-floating array",
    r"dtype='float32'": "differences.md, A dtype argument is numpy's",
    r"device='cpu:9'": "accelrt's cpu devices are simulated devices (ACCELRT_CPU_DEVICES)",
    r"requires_grad=|layout=|out=None|memory_format=":
        "differences.md: the factories take no requires_grad, layout, memory_format or out",
    r"randint\(0, 2\*\*6[34]": "differences.md, randint draws every value of a 64-bit dtype",
    r"randint\(T\(True\)": "torch 2.15 fails an internal assert (accelrt: TypeError)",
    r"a=0, b=1": "uniform_(array, a, b) is torch.nn.init.uniform_'s signature (random.md)",
    r"set_offset|get_offset": "random.md: accelrt's generators are CUDA-like (torch's CPU one has "
                              "no offset)",
    r"G\(\)\.manual_seed\(np\.|G\(\)\.set_offset\(np\.":
        "random.md, Seeds (a numpy integer is taken by its value)",
    r"type\(manual_seed\(3\)\)": "differences.md: acc.manual_seed returns None",
    r"set_state\(T\(\[\[1\] \* 8\] \* 2|set_state\(np\.zeros\(16":
        "random.md, State (16 bytes, any shape; torch's CPU state is 5056 bytes)",
    r"graphsafe_get_state": "random.md: graph-safe states on every backend (torch's CPU: "
                            "NotImplementedError)",
    r"fork_rng\(devices=\[\].*\n +manual_seed\(6\)":
        "differences.md: fork_rng forks the devices' generators only",
    r"^full\(\(2,\), 2\*\*64": "differences.md, fill_/full values (ints beyond int64 checked)",
}


def main() -> int:
    verbose = "-v" in sys.argv
    pats = [a for a in sys.argv[1:] if a != "-v"]
    tenv, aenv = _torch_env(), _acc_env()
    diffs = 0
    for case in CASES:
        if pats and not any(p in case for p in pats):
            continue
        tr, te, tw = run(case, tenv)
        ar, ae, aw = run(case, aenv)
        if te is not None and ae is not None:
            same = isinstance(ae, _builtin(te))
        elif te is None and ae is None:
            same = tr == ar
        else:
            same = False
        same = same and bool(tw) == bool(aw)
        if not same or verbose:
            tshow = f"{type(te).__name__}: {str(te)[:140]}" if te else repr(tr)
            ashow = f"{type(ae).__name__}: {str(ae)[:140]}" if ae else repr(ar)
            mark = "ok  " if same else "DIFF"
            known = next((v for k, v in KNOWN.items() if re.search(k, case)), None)
            if not same and known:
                mark = "known"
            diffs += (not same and not known)
            print(f"{mark} {case}\n   torch: {tshow}{' W' + str(tw) if tw else ''}\n"
                  f"   acc:   {ashow}{' W' + str(aw) if aw else ''}"
                  + (f"\n   known: {known}" if mark == "known" and verbose else ""))
    print(f"{len(CASES)} cases, {diffs} unexplained differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
