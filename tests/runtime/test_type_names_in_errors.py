"""Wrong-type errors name the argument's type as PyTorch prints it (CPython's ``tp_name``):
numpy's scalars module-qualified (``numpy.bool``, where "must be a bool, got bool" misled),
builtins and classes defined in Python by their bare names. Observed with torch 2.15 (CPU):
``torch.zeros(2, requires_grad=np.True_)`` says "must be bool, not numpy.bool",
``torch.zeros(np.float64(2))`` "... not numpy.float64", and ``.to(non_blocking=Fraction(1))``
"got (non_blocking=Fraction, )"."""

from __future__ import annotations

import fractions
import re
from pathlib import Path

import numpy as np
import pytest

import accelrt as acc
from accelrt import memory
from accelrt._errors import type_shown


def test_type_shown_is_torchs_type_name() -> None:
    assert type_shown(True) == "bool"
    assert type_shown(None) == "NoneType"
    assert type_shown(np.True_) == "numpy.bool"
    assert type_shown(np.int64(1)) == "numpy.int64"
    assert type_shown(np.zeros(1)) == "numpy.ndarray"
    assert type_shown(fractions.Fraction(1, 2)) == "Fraction"   # a class defined in Python
    assert type_shown(acc.device("cpu")) == "device"


@pytest.mark.parametrize(("make", "words"), [
    # (np.True_ and Fraction(1) are taken, as torch 2.15's bool binding reads them: session 41)
    (lambda: memory.MemPool(use_on_oom=np.array([True, False])),
     "use_on_oom must be a bool, got numpy.ndarray"),
    (lambda: memory.MemPool(no_split=np.array([True, False])),
     "no_split must be a bool, got numpy.ndarray"),
    (lambda: acc.Event(enable_timing=np.True_), "enable_timing must be a bool, got numpy.bool"),
    (lambda: acc.Stream("cpu", priority=np.True_), "priority must be an int, got numpy.bool"),
    (lambda: memory.caching_allocator_delete(np.float64(8)),
     "ptr must be an int, got numpy.float64"),
    (lambda: memory.MemPool(use_on_oom=Path("x")), "use_on_oom must be a bool, got PosixPath"),
])
def test_wrong_types_are_named_as_torch_names_them(make: object, words: str) -> None:
    with pytest.raises(TypeError, match=re.escape(words)):
        make()  # type: ignore[operator]


def test_no_wrong_type_message_prints_a_bare_type_name() -> None:
    # every "..., got <type>" message goes through _errors.type_shown (one helper), so that a
    # numpy scalar never reads as the builtin it imitates
    src = Path(acc.__file__).parent
    bare = re.compile(r"(got|not|returned|of) \{type\((?!exc\)|self\))[^)]*\)\.__name__\}")
    found = [f"{p.relative_to(src)}:{n}" for p in sorted(src.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if bare.search(line)]
    assert found == []
