"""Findings of the session-36 hostile-input sweep of the arrays' value conversions and
``asarray`` of custom sequences. Each test failed before its fix; the torch behaviour was
observed on torch 2.15.0 (CPU build) on the same inputs and is written here as literals.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import accelrt as acc


def test_asarray_of_a_custom_sequence_that_holds_itself_is_a_value_error() -> None:
    # torch 2.15: torch.asarray(x) where x[0] is x for a class with __len__/__getitem__ raises
    # ValueError "too many dimensions 'Rec'". Before: RecursionError (the cycle check only
    # knew lists and tuples), or, reading the items again, no end. In a subprocess with a
    # timeout: before the fix it could also hang.
    code = textwrap.dedent("""
        import accelrt as acc

        class Rec:
            def __len__(self):
                return 1

            def __getitem__(self, i):
                return self

        class Later:
            def __len__(self):
                return 2

            def __getitem__(self, i):
                return [1.0, 2.0] if i == 0 else self

        for data in (Rec(), [Rec()]):   # its own first item: nests without end
            try:
                acc.asarray(data, device="cpu:0")
            except ValueError as exc:
                assert str(exc).startswith("too many dimensions '"), exc
            else:
                raise AssertionError("accepted")
        try:   # itself after its first item: torch 2.15's TypeError, as for a list
            acc.asarray(Later(), device="cpu:0")
        except TypeError as exc:
            assert str(exc).startswith("new(): self-referential lists are incompatible"), exc
        else:
            raise AssertionError("accepted")
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_int_and_float_of_a_complex_array_with_no_imaginary_part(dtype: str) -> None:
    # torch 2.15: int(torch.tensor(3+0j)) == 3 and float(...) == 3.0 (checked_convert takes a
    # complex number whose imaginary part is zero); a non-zero imaginary part is refused.
    # Before: both raised AcceleratorTypeError for any complex array.
    a = acc.asarray(np.array([-3.5 + 0j], dtype=dtype), device="cpu:0")
    assert int(a) == -3 and float(a) == -3.5 and complex(a) == -3.5 + 0j
    b = acc.asarray(np.array(1 + 2j, dtype=dtype), device="cpu:0")
    with pytest.raises(RuntimeError, match="value cannot be converted to type int64_t"):
        int(b)
    with pytest.raises(TypeError, match="value cannot be converted to type double"):
        float(b)
