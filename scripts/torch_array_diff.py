"""Differential check of ``accelrt.Array`` and its factories against ``torch.Tensor`` on the CPU.

Run with a Python that has torch and hypothesis and can import accelrt (a tool only: accelrt
never imports torch, and CI has none)::

    PYTHONPATH=src python scripts/torch_array_diff.py [--examples 300] [--seed 0]

For each area (the size forms of every factory, dtype forms, ``full``/``fill_`` values,
``asarray`` of Python data and arrays, casts by ``to``/``copy_``, the metadata and host
reads of an array) hypothesis draws inputs, both libraries run them on the CPU (accelrt on
its simulated ``cpu:0``), and the outcomes are compared: the shape, dtype and values of a
result, or the class of an error (accelrt's must be an instance of PyTorch's builtin class;
its ``Accelerator*Error`` classes are ``RuntimeError`` and ``TypeError``/``ValueError`` at
once). Every difference not explained by a deliberate one (``KNOWN``, each a bullet of
docs/differences.md) is reported once per kind, with the shortest example found; the exit
status is 1 if any was. What the harness finds goes into tests/runtime as literal
expectations ("observed on torch 2.14.1"), since the test suite must not need torch.
"""

from __future__ import annotations

import argparse
import math
import operator
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("ACCELRT_ACCELERATOR", "cpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import accelrt as acc  # noqa: E402

DEV = "cpu:0"
BUILTIN = (IndexError, TypeError, ValueError, OverflowError, MemoryError, NotImplementedError,
           RuntimeError, AttributeError, BufferError)

#: torch dtype -> numpy dtype name, for the dtypes both have
DTYPES = {torch.bool: "bool", torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16",
          torch.int32: "int32", torch.int64: "int64", torch.uint16: "uint16",
          torch.uint32: "uint32", torch.uint64: "uint64", torch.float16: "float16",
          torch.float32: "float32", torch.float64: "float64", torch.complex64: "complex64",
          torch.complex128: "complex128"}
NAME_TO_TORCH = {v: k for k, v in DTYPES.items()}


# ---------------------------------------------------------------------- outcomes

@dataclass
class Outcome:
    """What a call did: a normalised result or an exception, and the warnings it raised."""

    result: Any = None
    error: BaseException | None = None
    warned: tuple[str, ...] = ()

    def builtin(self) -> type[BaseException]:
        assert self.error is not None
        for cls in type(self.error).__mro__:
            if cls in BUILTIN:
                return cls
        return type(self.error)

    def show(self) -> str:
        if self.error is not None:
            return f"{type(self.error).__name__}: {str(self.error)[:150]}"
        return repr(self.result)[:150] + (f" warned {self.warned}" if self.warned else "")


def _norm(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return ("array", tuple(x.shape), DTYPES.get(x.dtype, str(x.dtype)),
                repr(x.tolist()) if x.numel() <= 64 else None)
    if isinstance(x, (acc.Array, np.ndarray)):
        return ("array", tuple(x.shape), x.dtype.name,
                repr(x.tolist()) if x.size <= 64 else None)
    if isinstance(x, torch.Size):
        return tuple(x)
    if isinstance(x, torch.dtype):
        return DTYPES.get(x, str(x))
    if isinstance(x, np.dtype):
        return x.name
    return repr(x)


def run(fn: Callable[[], Any]) -> Outcome:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            result = _norm(fn())
        except Exception as exc:  # noqa: BLE001 - the outcome being compared
            return Outcome(error=exc, warned=tuple(type(w.message).__name__ for w in record))
    return Outcome(result=result, warned=tuple(sorted({type(w.message).__name__
                                                        for w in record})))


@dataclass
class Found:
    kind: str
    example: str
    torch: str
    accelrt: str


FOUND: dict[str, Found] = {}
EXPLAINED: dict[str, int] = {}


def compare(area: str, example: str, tf: Callable[[], Any], af: Callable[[], Any], *,
            values: bool = True, known: Callable[[Outcome, Outcome], str | None] | None = None
            ) -> None:
    """Run both, compare, and record an unexplained difference under its kind."""
    t, a = run(tf), run(af)
    if t.error is not None and a.error is not None:
        same = isinstance(a.error, t.builtin())
        kind = f"{area}: torch {t.builtin().__name__}, accelrt {type(a.error).__name__}"
    elif t.error is None and a.error is None:
        tr, ar = t.result, a.result
        if not values and isinstance(tr, tuple) and isinstance(ar, tuple):
            tr, ar = tr[:3], ar[:3]
        same = tr == ar
        kind = f"{area}: results differ"
    else:
        same = False
        kind = (f"{area}: torch " + (t.builtin().__name__ if t.error else "ok") + ", accelrt "
                + (type(a.error).__name__ if a.error else "ok"))
    if same:
        return
    reason = known(t, a) if known is not None else None
    if reason is not None:
        EXPLAINED[reason] = EXPLAINED.get(reason, 0) + 1
        return
    old = FOUND.get(kind)
    if old is None or len(example) < len(old.example):
        FOUND[kind] = Found(kind, example, t.show(), a.show())


# ---------------------------------------------------------------------- strategies

class Idx:
    """An object with ``__index__`` (as a numpy integer or a SymInt reads)."""

    def __init__(self, v: int) -> None:
        self.v = v

    def __index__(self) -> int:
        return self.v

    def __repr__(self) -> str:
        return f"Idx({self.v})"


SMALL = st.integers(-2, 4)
HUGE = st.sampled_from([2**62, 2**63 - 1, 2**63, 2**64, -(2**63), -(2**63) - 1, 10**30])
ODD = st.sampled_from([2.0, 1.5, np.float64(2.0), None, "2", np.bool_(True), 1j])
ENTRY = st.one_of(SMALL, SMALL, SMALL, HUGE, st.booleans(), SMALL.map(np.int64),
                  st.integers(0, 4).map(np.uint8), ODD, SMALL.map(Idx))


def _fits(entries: Any) -> bool:
    """True unless the size would allocate a lot (both libraries would try)."""
    try:
        dims = [int(d) for d in entries]
    except (TypeError, ValueError):
        return True
    if any(d < 0 for d in dims):
        return True
    n = math.prod(dims)
    return n <= 4096 or n * 8 > 2**63 or math.prod([d for d in dims if d]) * 8 > 2**63


SIZE_ARGS = st.one_of(
    st.lists(ENTRY, max_size=4).map(tuple),                       # f(2, 3)
    st.lists(ENTRY, max_size=4).map(lambda e: (tuple(e),)),       # f((2, 3))
    st.lists(ENTRY, max_size=4).map(lambda e: (list(e),)),        # f([2, 3])
    st.lists(SMALL, max_size=3).map(lambda e: (np.array(e, dtype=np.int64),)),
    st.lists(SMALL, max_size=3).map(lambda e: (torch.Size(max(d, 0) for d in e),)),
    st.lists(SMALL, min_size=1, max_size=3).map(lambda e: ((tuple(e), 2),)),   # nested
    st.lists(SMALL, max_size=3).map(lambda e: (range(len(e)),)),
).filter(lambda args: _fits(args[0] if len(args) == 1 and not isinstance(args[0], (int, Idx))
                            and hasattr(args[0], "__len__") else args))


def _acc_size(args: tuple[Any, ...]) -> tuple[Any, ...]:
    # accelrt gets torch.Size as the tuple it is
    return tuple(tuple(a) if isinstance(a, torch.Size) else a for a in args)


def _index(x: Any) -> int | None:
    if isinstance(x, (bool, np.bool_)):
        return None
    try:
        return operator.index(x)
    except TypeError:
        return None


def known_size(args: tuple[Any, ...], fname: str) -> Callable[[Outcome, Outcome], str | None]:
    def explain(t: Outcome, a: Outcome) -> str | None:
        flat: list[Any] = []
        for x in args:
            if isinstance(x, (list, tuple)):
                flat.extend(x)
            else:
                flat.append(x)
        if t.error is not None and (a.error is None or isinstance(t.error, TypeError)):
            if any(isinstance(x, (np.ndarray, range)) for x in args):
                return "accelrt takes more size forms (numpy arrays, ranges)"
            if fname == "full" and len(args) == 1:
                return "accelrt takes more size forms (an int for full)"
        if isinstance(a.error, TypeError) and any(isinstance(x, bool) for x in flat):
            return "a bool is never a size entry (torch takes one after the first)"
        if t.error is not None and a.error is not None and any(
                isinstance(x, (int, np.integer)) and not isinstance(x, bool)
                and not -(2**63) <= int(x) < 2**63 for x in flat):
            return "a dimension beyond int64 is the overflow ValueError (torch: TypeError)"
        if (a.error is not None and "overflowed" in str(a.error) and t.error is None
                and any(_index(x) == 0 for x in flat)):
            return "an empty shape whose bytes numpy cannot count is refused"
        if (t.error is not None and a.error is not None and "overflowed" in str(a.error)
                and isinstance(t.error, MemoryError)):
            return "an empty shape whose bytes numpy cannot count is refused"
        return None
    return explain


# ---------------------------------------------------------------------- areas

FACTORIES: dict[str, tuple[Callable[..., Any], Callable[..., Any], bool]] = {
    "empty": (torch.empty, acc.empty, False), "zeros": (torch.zeros, acc.zeros, True),
    "ones": (torch.ones, acc.ones, True), "rand": (torch.rand, acc.rand, False),
    "randn": (torch.randn, acc.randn, False),
}


@given(fname=st.sampled_from(sorted(FACTORIES)), args=SIZE_ARGS)
def area_sizes(fname: str, args: tuple[Any, ...]) -> None:
    tf, af, values = FACTORIES[fname]
    compare(f"size of {fname}", f"{fname}{args!r}", lambda: tf(*args),
            lambda: af(*_acc_size(args), device=DEV), values=values,
            known=known_size(args, fname))
    if len(args) == 1:
        size = args[0]
        compare("size of full", f"full({size!r}, 1.5)", lambda: torch.full(size, 1.5),
                lambda: acc.full(_acc_size(args)[0], 1.5, device=DEV),
                known=known_size(args, "full"))
        compare("size of randint", f"randint(3, {size!r})", lambda: torch.randint(3, size),
                lambda: acc.randint(3, _acc_size(args)[0], device=DEV), values=False,
                known=known_size(args, "randint"))


DTYPE_FORMS: list[tuple[Any, Any]] = [
    (None, None), (torch.int64, int), (torch.float64, float), (torch.bool, bool),
    (torch.complex128, complex),
    *DTYPES.items(), *[(t, np.dtype(n)) for t, n in DTYPES.items()],
    *[(t, np.dtype(n).type) for t, n in DTYPES.items()],
]


def known_dtype(t: Outcome, a: Outcome) -> str | None:
    if isinstance(t.error, NotImplementedError) and isinstance(a.error, RuntimeError):
        return ("rand/randn of a non-float dtype: a RuntimeError TypeError (torch: "
                "NotImplementedError)")
    return None


@given(form=st.sampled_from(DTYPE_FORMS), fname=st.sampled_from(
    ["empty", "zeros", "ones", "rand", "randn", "randint", "full", "asarray", "Array"]))
def area_dtypes(form: tuple[Any, Any], fname: str) -> None:
    tdt, adt = form
    calls: dict[str, tuple[Callable[[], Any], Callable[[], Any], bool]] = {
        "empty": (lambda: torch.empty(2, dtype=tdt), lambda: acc.empty(2, dtype=adt, device=DEV),
                  False),
        "Array": (lambda: torch.empty(2, dtype=tdt), lambda: acc.Array(2, dtype=adt, device=DEV),
                  False),
        "zeros": (lambda: torch.zeros(2, dtype=tdt), lambda: acc.zeros(2, dtype=adt, device=DEV),
                  True),
        "ones": (lambda: torch.ones(2, dtype=tdt), lambda: acc.ones(2, dtype=adt, device=DEV),
                 True),
        "rand": (lambda: torch.rand(2, dtype=tdt), lambda: acc.rand(2, dtype=adt, device=DEV),
                 False),
        "randn": (lambda: torch.randn(2, dtype=tdt), lambda: acc.randn(2, dtype=adt, device=DEV),
                  False),
        "randint": (lambda: torch.randint(2, (2,), dtype=tdt),
                    lambda: acc.randint(2, (2,), dtype=adt, device=DEV), False),
        "full": (lambda: torch.full((2,), 1, dtype=tdt),
                 lambda: acc.full((2,), 1, dtype=adt, device=DEV), True),
        "asarray": (lambda: torch.asarray([1, 0], dtype=tdt),
                    lambda: acc.asarray([1, 0], dtype=adt, device=DEV), True),
    }
    tf, af, values = calls[fname]
    compare(f"dtype of {fname}", f"{fname}(dtype={adt!r})", tf, af, values=values,
            known=known_dtype)


def _scalar_of(dtype: str, x: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return np.dtype(dtype).type(x)
        except (OverflowError, ValueError, TypeError):
            return x


NUMBERS = st.one_of(
    st.integers(-300, 300), st.sampled_from([2**31, 2**63 - 1, 2**63, 2**64 - 1, 2**64,
                                             -(2**63), -(2**63) - 1, 65504, 65520]),
    st.floats(allow_nan=True, allow_infinity=True), st.floats(-300, 300), st.booleans(),
    st.complex_numbers(max_magnitude=1e6), st.sampled_from([1 + 0j, 0j, 2.5 + 0j]),
)
FILL_VALUES = st.one_of(NUMBERS, st.tuples(st.sampled_from(sorted(NAME_TO_TORCH)), NUMBERS)
                        .map(lambda p: _scalar_of(*p)))


def known_fill(v: Any) -> Callable[[Outcome, Outcome], str | None]:
    def explain(t: Outcome, a: Outcome) -> str | None:
        if isinstance(v, np.bool_) and a.error is None:
            return "full infers a numpy bool as bool (torch: float32)"
        if isinstance(v, np.complexfloating) and not isinstance(v, complex):
            return "a numpy complex64 is complex (torch drops its imaginary part)"
        if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and not (
                -(2**63) <= int(v) < 2**63):
            return "ints beyond int64 are checked as values (torch cannot parse them)"
        if "ComplexWarning" in t.warned or (t.error is not None and
                                             type(t.error).__name__ == "ComplexWarning"):
            return "a numpy complex64 is complex (torch drops its imaginary part)"
        return None
    return explain


@given(value=FILL_VALUES, dtype=st.sampled_from([None, *sorted(NAME_TO_TORCH)]))
def area_fill(value: Any, dtype: str | None) -> None:
    tdt = None if dtype is None else NAME_TO_TORCH[dtype]
    compare("full value", f"full((2,), {value!r}, dtype={dtype})",
            lambda: torch.full((2,), value, dtype=tdt),
            lambda: acc.full((2,), value, dtype=dtype, device=DEV), known=known_fill(value))
    if dtype is not None:
        compare("fill_ value", f"empty(2, dtype={dtype}).fill_({value!r})",
                lambda: torch.empty(2, dtype=tdt).fill_(value),
                lambda: acc.empty(2, dtype=dtype, device=DEV).fill_(value),
                known=known_fill(value))


LEAF = st.one_of(st.integers(-300, 300), st.floats(-1e3, 1e3), st.booleans(),
                 st.complex_numbers(max_magnitude=10), st.sampled_from([
                     2**63, -1, 0.5, float("nan"), 1e40, 255.9, -0.5, 2**64]),
                 st.tuples(st.sampled_from(["int8", "uint8", "int32", "float16", "float32",
                                            "float64", "bool", "complex128"]),
                           st.integers(-3, 300)).map(lambda p: _scalar_of(*p)))


@st.composite
def python_data(draw: st.DrawFn) -> Any:
    depth = draw(st.integers(0, 2))
    if depth == 0:
        return draw(LEAF)
    shape = draw(st.lists(st.integers(0, 3), min_size=depth, max_size=depth))

    def build(level: int) -> Any:
        if level == len(shape):
            return draw(LEAF)
        items = [build(level + 1) for _ in range(shape[level])]
        return items if draw(st.booleans()) else tuple(items)
    return build(0)


def _mixes_ints_and_floats(obj: Any) -> bool:
    leaves: list[Any] = []

    def walk(x: Any) -> None:
        if isinstance(x, (list, tuple)):
            for y in x:
                walk(y)
        else:
            leaves.append(x)
    walk(obj)
    return any(isinstance(x, float) for x in leaves) and any(
        isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in leaves)


def _has_numpy_scalars(obj: Any) -> bool:
    if isinstance(obj, (list, tuple)):
        return any(_has_numpy_scalars(x) for x in obj)
    return isinstance(obj, np.generic)


def known_asarray(data: Any, dtype: str | None) -> Callable[[Outcome, Outcome], str | None]:
    def explain(t: Outcome, a: Outcome) -> str | None:
        if dtype is not None and dtype[0] == "u" and _mixes_ints_and_floats(data):
            return "a list mixing ints and floats is read as floats"
        if _has_numpy_scalars(data) and ((t.error is not None and a.error is None)
                                         or "ComplexWarning" in t.warned):
            return "numpy scalars in a list convert by value (torch's parser refuses some)"
        if dtype == "uint64" and isinstance(t.error, (OverflowError, TypeError)):
            return "uint64 takes floats and negative ints as the other unsigned dtypes do"
        if t.error is not None and a.error is not None:
            return "several bad numbers: another one is reported first"
        if "UserWarning" in a.warned and "UserWarning" not in t.warned:
            return "torch warns about complex-to-real casts once per process"
        return None
    return explain


@given(data=python_data(), dtype=st.sampled_from([None, *sorted(NAME_TO_TORCH)]))
def area_asarray(data: Any, dtype: str | None) -> None:
    tdt = None if dtype is None else NAME_TO_TORCH[dtype]
    compare("asarray of Python data", f"asarray({data!r}, dtype={dtype})",
            lambda: torch.asarray(data, dtype=tdt),
            lambda: acc.asarray(data, dtype=dtype, device=DEV), known=known_asarray(data, dtype))


CAST_SOURCES = st.sampled_from(sorted(NAME_TO_TORCH))


@st.composite
def host_arrays(draw: st.DrawFn) -> np.ndarray:
    dtype = draw(CAST_SOURCES)
    n = draw(st.integers(0, 4))
    values = draw(st.lists(st.one_of(st.integers(-200, 300), st.floats(-1e3, 1e3),
                                     st.complex_numbers(max_magnitude=100), st.booleans()),
                           min_size=n, max_size=n))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.array(values, dtype=complex).astype(dtype) if values else np.zeros(0, dtype)


def _cast_is_defined(x: np.ndarray, dst: str) -> bool:
    """C leaves float-to-int casts of values out of the integer range undefined."""
    if np.dtype(dst).kind not in "iu" or x.dtype.kind not in "fc":
        return True
    real = x.real.astype(np.float64)
    info = np.iinfo(dst)
    return bool(np.all(np.isfinite(real) & (real > info.min - 1) & (real < info.max + 1)))


def known_cast(t: Outcome, a: Outcome) -> str | None:
    if "UserWarning" in a.warned and "UserWarning" not in t.warned:
        return "torch warns about complex-to-real casts once per process"
    return None


@given(x=host_arrays(), dst=st.sampled_from(sorted(NAME_TO_TORCH)), how=st.sampled_from(
    ["to", "copy_", "asarray"]))
def area_casts(x: np.ndarray, dst: str, how: str) -> None:
    values = _cast_is_defined(x, dst)
    tsrc = torch.from_numpy(x.copy())
    tdst = NAME_TO_TORCH[dst]
    calls = {
        "to": (lambda: tsrc.to(tdst),
               lambda: acc.asarray(x, device=DEV, copy=True).to(np.dtype(dst))),
        "copy_": (lambda: torch.zeros(x.shape, dtype=tdst).copy_(tsrc),
                  lambda: acc.zeros(x.shape, dtype=dst, device=DEV).copy_(x)),
        "asarray": (lambda: torch.asarray(x, dtype=tdst),
                    lambda: acc.asarray(x, dtype=dst, device=DEV)),
    }
    tf, af = calls[how]
    compare(f"cast by {how}", f"{how} {x.dtype.name}{x.tolist()!r} -> {dst}", tf, af,
            values=values, known=known_cast)


@given(shape=st.lists(st.integers(0, 3), max_size=3).map(tuple),
       dtype=st.sampled_from(sorted(NAME_TO_TORCH)))
def area_metadata(shape: tuple[int, ...], dtype: str) -> None:
    t = torch.ones(shape, dtype=NAME_TO_TORCH[dtype])
    a = acc.ones(shape, dtype=dtype, device=DEV)
    reads: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "shape": (lambda: tuple(t.shape), lambda: a.shape),
        "ndim": (lambda: t.ndim, lambda: a.ndim),
        "numel/size": (lambda: t.numel(), lambda: a.size),
        "nbytes": (lambda: t.nbytes, lambda: a.nbytes),
        "itemsize": (lambda: t.itemsize, lambda: a.itemsize),
        "tolist": (t.tolist, a.tolist),
        "numpy": (t.numpy, a.numpy),
        "len": (lambda: len(t), lambda: len(a)),
        "bool": (lambda: bool(t), lambda: bool(a)),
        "empty data_ptr": (lambda: t.data_ptr() == 0, lambda: a.data_ptr() == 0),
        "np.asarray": (lambda: np.asarray(t), lambda: np.asarray(a)),
        "to same": (lambda: t.to(NAME_TO_TORCH[dtype]) is t,
                    lambda: a.to(np.dtype(dtype)) is a),
    }
    for name, (tf, af) in reads.items():
        compare(f"metadata {name}", f"ones({shape}, {dtype}).{name}", tf, af)


SHAPES = st.lists(st.integers(0, 3), max_size=3).map(tuple)


@given(dst=SHAPES, src=SHAPES, src_kind=st.sampled_from(["array", "numpy", "scalar"]),
       dtype=st.sampled_from(["float32", "int64", "bool", "complex64"]))
def area_copy_shapes(dst: tuple[int, ...], src: tuple[int, ...], src_kind: str,
                     dtype: str) -> None:
    host = np.arange(math.prod(src), dtype=np.float64).reshape(src).astype(dtype)
    tdt = NAME_TO_TORCH[dtype]
    if src_kind == "scalar":
        value: Any = host.flat[0].item() if host.size else 7
        tsrc: Any = value
        asrc: Any = value
    else:
        tsrc = torch.from_numpy(host.copy())
        asrc = acc.asarray(host, device=DEV, copy=True) if src_kind == "array" else host
    compare(f"copy_ of a{' numpy' if src_kind == 'numpy' else 'n'} {src_kind} source",
            f"zeros({dst}, {dtype}).copy_({src_kind} {src})",
            lambda: torch.zeros(dst, dtype=tdt).copy_(tsrc),
            lambda: acc.zeros(dst, dtype=dtype, device=DEV).copy_(asrc))


AREAS = [area_sizes, area_dtypes, area_fill, area_asarray, area_casts, area_metadata,
         area_copy_shapes]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=300, help="hypothesis examples per area")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for area in AREAS:
        test = settings(max_examples=args.examples, deadline=None, database=None,
                        suppress_health_check=list(HealthCheck))(seed(args.seed)(area))
        test()
    for reason, n in sorted(EXPLAINED.items()):
        print(f"explained ({n}x): {reason}")
    for found in sorted(FOUND.values(), key=lambda f: f.kind):
        print(f"DIFF {found.kind}\n  example: {found.example}\n  torch:   {found.torch}\n"
              f"  accelrt: {found.accelrt}")
    print(f"{len(FOUND)} unexplained difference(s)")
    return 1 if FOUND else 0


if __name__ == "__main__":
    sys.exit(main())
