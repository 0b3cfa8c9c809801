"""Differential fuzzer of the compiled and the pure build with the hostile values that
``tests/helpers/builds_probe.py`` does not try.

The two probes of ``tests/package/test_builds_agree.py`` call every public callable (and the
raw backend, distributed, multiprocessing and interop surface) with 47 hostile values per
parameter and compare the builds. This script reruns the same specs with *other* values
(:data:`NEW_VALUES`: 0-d and one-item numpy arrays, numpy scalars of every kind and of extreme
values, mypyc's short-int and C ``int64`` boundaries, subclasses of ``int``/``float`` with
huge values or ``__index__`` that raises, objects whose ``__index__`` answers a huge, negative,
bool or int-subclass value, whose ``__float__`` lies, buffers, ranges, slices, types, and
accelrt's own objects where an int or a device is expected), under both builds, and prints
every case whose outcome (return value, or exception class and message) differs, and every
outcome that carries a mypyc message. It needs a compiled build (``ACCELRT_COMPILE=1 pip
install .`` into another virtual environment); the tests do not run it (they must not depend on
building).

Usage::

    python scripts/fuzz_compiled.py --compiled /tmp/c/venv/bin/python \\
        [--pure .venv/bin/python] [--probe api --probe ext] [--only REGEX]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HELPERS = ROOT / "tests" / "helpers"

#: mypyc's messages for an argument it refuses (tests/package/test_builds_agree.py's)
MYPYC = re.compile(r"object expected; got|takes at most \d+ (keyword )?arguments? \(|"
                   r"is an invalid keyword argument for")

#: the one documented difference (docs/memory.md, "The compiled build"; test_builds_agree's
#: ARITY): a wrong count of arguments to an argument-free method of the compiled cores
ARITY = re.compile(r"^accelrt\.(cpu\.)?(Stream|ExternalStream|Event|Event\(interprocess\)|"
                   r"device_index|device)\.(query|synchronize|__enter__|__exit__)"
                   r"\[\+(arg|kw)\]$")


# ---------------------------------------------------------------------- the new values

class HugeIndex:
    """``__index__`` answers 2**64."""

    def __index__(self) -> int:
        return 2 ** 64


class NegIndex:
    """``__index__`` answers -1."""

    def __index__(self) -> int:
        return -1


class BoolIndex:
    """``__index__`` answers True."""

    def __index__(self) -> Any:
        return True   # noqa: PLE0305


class SubIndex:
    """``__index__`` answers an int subclass (deprecated by CPython: a warning)."""

    def __index__(self) -> int:
        from hostile import IntSub
        return IntSub(1)


class TypeErrorIndex:
    """``__index__`` raises TypeError (what a parser may take for "not an int")."""

    def __index__(self) -> int:
        raise TypeError("__index__ raised TypeError")


class OverflowIndex:
    """``__index__`` raises OverflowError."""

    def __index__(self) -> int:
        raise OverflowError("__index__ raised OverflowError")


class NanFloat:
    """``__float__`` answers nan (and no ``__index__``/``__int__``)."""

    def __float__(self) -> float:
        return math.nan


class StrFloat:
    """``__float__`` answers a str."""

    def __float__(self) -> Any:
        return "1.0"   # noqa: PLE0305


class IntBadIndex(int):
    """An int whose ``__index__`` raises."""

    def __index__(self) -> int:
        raise ZeroDivisionError("__index__ raised")


class IntHugeIndex(int):
    """An int (value 1) whose ``__index__`` and ``__int__`` answer 2**64."""

    def __index__(self) -> int:
        return 2 ** 64

    def __int__(self) -> int:
        return 2 ** 64


class FloatIndex(float):
    """A float with an ``__index__``."""

    def __index__(self) -> int:
        return 1


class IntFloat(int):
    """An int whose ``__float__`` answers nan."""

    def __float__(self) -> float:
        return math.nan


def new_values() -> list[tuple[str, Any]]:
    """The values to try (none of them in builds_probe.VALUES)."""
    import numpy as np

    import accelrt as acc
    sys.path.insert(0, str(HELPERS))
    from hostile import IntSub

    ro = np.array(1)
    ro.flags.writeable = False
    return [
        ("np.array(1)", np.array(1)), ("np.array(1.5)", np.array(1.5)),
        ("np.array(True)", np.array(True)), ("np.array(-1)", np.array(-1)),
        ("np.array(2**63,uint64)", np.array(2 ** 63, np.uint64)),
        ("np.array([1])", np.array([1])), ("np.array(1) read-only", ro),
        ("np.array('cpu')", np.array("cpu")), ("np.array(None)", np.array(None)),
        ("np.int8(-1)", np.int8(-1)), ("np.uint8(255)", np.uint8(255)),
        ("np.int16(1)", np.int16(1)), ("np.uint16(1)", np.uint16(1)),
        ("np.uint32(2**32-1)", np.uint32(2 ** 32 - 1)), ("np.int64(-1)", np.int64(-1)),
        ("np.int64(2**63-1)", np.int64(2 ** 63 - 1)), ("np.int64(-2**63)", np.int64(-2 ** 63)),
        ("np.uint64(2**63)", np.uint64(2 ** 63)), ("np.uint64(1)", np.uint64(1)),
        ("np.float16(1)", np.float16(1)), ("np.float64(inf)", np.float64("inf")),
        ("np.float64(1.5)", np.float64(1.5)), ("np.longdouble(1)", np.longdouble(1)),
        ("np.complex64(1)", np.complex64(1)), ("np.str_('cpu')", np.str_("cpu")),
        ("np.bytes_(b'1')", np.bytes_(b"1")), ("np.datetime64(1,'s')", np.datetime64(1, "s")),
        ("np.timedelta64(1)", np.timedelta64(1)),
        ("-0.0", -0.0), ("1e308", 1e308), ("5e-324", 5e-324), ("2.0**63", 2.0 ** 63),
        ("2**53+1", 2 ** 53 + 1), ("2**62-1", 2 ** 62 - 1), ("2**62", 2 ** 62),
        ("-2**62-1", -2 ** 62 - 1), ("2**32", 2 ** 32), ("2**32-1", 2 ** 32 - 1),
        ("-2**31-1", -2 ** 31 - 1), ("-2**63", -2 ** 63), ("2**128", 2 ** 128),
        ("-10**40", -10 ** 40),
        ("IntSub(2**63)", IntSub(2 ** 63)), ("IntSub(2**64)", IntSub(2 ** 64)),
        ("IntSub(-1)", IntSub(-1)), ("IntSub(0)", IntSub(0)),
        ("IntBadIndex(1)", IntBadIndex(1)), ("IntHugeIndex(1)", IntHugeIndex(1)),
        ("IntFloat(1)", IntFloat(1)), ("FloatIndex(1.0)", FloatIndex(1.0)),
        ("HugeIndex()", HugeIndex()), ("NegIndex()", NegIndex()), ("BoolIndex()", BoolIndex()),
        ("SubIndex()", SubIndex()), ("TypeErrorIndex()", TypeErrorIndex()),
        ("OverflowIndex()", OverflowIndex()), ("NanFloat()", NanFloat()),
        ("StrFloat()", StrFloat()),
        ("bytearray(b'1')", bytearray(b"1")), ("memoryview(b'1')", memoryview(b"1")),
        ("range(1)", range(1)), ("slice(1)", slice(1)), ("...", ...), ("int", int),
        ("set()", set()), ("frozenset({1})", frozenset({1})), ("[]", []), ("()", ()),
        ("[2**63]", [2 ** 63]), ("[None]", [None]), ("(1.5,)", (1.5,)),
        ("np.int64", np.int64), ("lambda", lambda *a: None),
        ("acc.device('cpu:1')", acc.device("cpu:1")), ("acc.device('cpu')", acc.device("cpu")),
        ("acc.Stream('cpu:1')", acc.Stream("cpu:1")), ("acc.Event()", acc.Event("cpu:0")),
        ("acc.zeros(())", acc.zeros((), dtype="int64", device="cpu:0")),
        ("acc.zeros(2)", acc.zeros(2, device="cpu:1")),
    ]


# ---------------------------------------------------------------------- the child

def child(probe: str, out: str) -> int:
    sys.path.insert(0, str(HELPERS))
    import builds_probe as bp
    values = new_values()
    bp.VALUES[:] = values
    if probe == "api":
        return _guarded(bp.main, out)
    import builds_probe_ext as bpe
    bpe.LEFT_OUT = _LeftOut(bpe.LEFT_OUT)
    return _guarded(bpe.main, out)


#: values a timeout is not given: a positive timeout this short makes the group's watchdog end
#: the process (as builds_probe_ext leaves out tiny timeouts)
TINY = {"5e-324", "np.timedelta64(1)"}


class _LeftOut:
    """builds_probe_ext's LEFT_OUT cases, and tiny timeouts."""

    def __init__(self, cases: set[tuple[str, str, str]]) -> None:
        self.cases = cases

    def __contains__(self, case: tuple[str, str, str]) -> bool:
        return case in self.cases or ("timeout" in case[1] and case[2] in TINY)


def _guarded(main: Any, out: str) -> int:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    return int(main([sys.argv[0], out]))


# ---------------------------------------------------------------------- the driver

def run_both(compiled: str, pure: str, probe: str, tmp: Path,
             timeout: float) -> tuple[dict[str, str], dict[str, str]]:
    sys.path.insert(0, str(HELPERS))
    import builds_probe as bp
    import builds_probe_ext as bpe
    envs = bp.environment() if probe == "api" else bpe.environment()
    procs = {}
    for which, python in (("compiled", compiled), ("pure", pure)):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(envs)
        if which == "pure" and "@" in python:
            python, _, src = python.partition("@")
            env["PYTHONPATH"] = src
        out = tmp / probe / which / "out.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        procs[which] = (subprocess.Popen([python, __file__, "--child", probe, str(out)],
                                         cwd=out.parent, env=env, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True), out)
    results = {}
    for which, (proc, out) in procs.items():
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            raise SystemExit(f"{probe}/{which}: ran past {timeout} s: {err[-2000:]}") from None
        if proc.returncode != 0:
            raise SystemExit(f"{probe}/{which}: exit {proc.returncode}: {err[-3000:]}")
        data = json.loads(out.read_text())
        assert data["header"]["compiled"] == (which == "compiled"), data["header"]
        results[which] = data["results"]
    return results["compiled"], results["pure"]


def main(argv: list[str]) -> int:
    if len(argv) > 1 and argv[1] == "--child":
        return child(argv[2], argv[3])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compiled", required=True, help="a Python with the compiled build")
    ap.add_argument("--pure", default=str(ROOT / ".venv" / "bin" / "python"),
                    help="a Python with the pure build (PY@SRC: SRC on PYTHONPATH)")
    ap.add_argument("--probe", action="append", choices=("api", "ext"))
    ap.add_argument("--only", default="", help="report only the cases matching this regex")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", help="write the differing cases here")
    ap.add_argument("--keep", help="write each build's outcomes (PROBE-BUILD.json) here")
    args = ap.parse_args(argv[1:])
    only = re.compile(args.only)
    found: dict[str, dict[str, str]] = {}
    total = documented = 0
    with tempfile.TemporaryDirectory() as tmp:
        for probe in args.probe or ["api", "ext"]:
            c, p = run_both(args.compiled, args.pure, probe, Path(tmp), args.timeout)
            if args.keep:
                Path(args.keep).mkdir(parents=True, exist_ok=True)
                for which, res in (("compiled", c), ("pure", p)):
                    (Path(args.keep) / f"{probe}-{which}.json").write_text(json.dumps(res))
            total += len(c)
            for key in sorted(c.keys() | p.keys()):
                if not only.search(key):
                    continue
                a, b = c.get(key, "<missing>"), p.get(key, "<missing>")
                if ARITY.match(key) and a.startswith("raise builtins.TypeError:") and \
                        b.startswith("raise builtins.TypeError:"):
                    documented += 1
                elif a != b or MYPYC.search(a) or MYPYC.search(b):
                    found[key] = {"compiled": a, "pure": b}
    for key, both in found.items():
        print(f"{key}\n  compiled: {both['compiled'][:500]}\n  pure:     {both['pure'][:500]}")
    print(f"{len(found)} of {total} cases differ or carry a mypyc message (and {documented} "
          "differ as docs/memory.md says: a wrong count of arguments to a compiled core)")
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=1))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
