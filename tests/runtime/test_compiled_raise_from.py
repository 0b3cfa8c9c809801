"""``raise ... from`` in the compiled modules: mypyc drops the ``from`` clause (no
``__cause__``, ``__suppress_context__`` left False), so they set ``__cause__`` before raising;
these check what a user sees in both builds (tests/backends/test_cpu_fast_paths_s28.py checks
the chained causes of the seam)."""

from __future__ import annotations

import pytest

import accelrt as acc
from accelrt.comm import _args


@pytest.mark.parametrize(("call", "match"), [
    (lambda: acc.empty(1.5), "size entries must be ints"),
    (lambda: acc.empty((2, [3])), "mixes ints and sequences"),
    (lambda: acc.empty(2, dtype="float33"), "unknown dtype"),
    (lambda: _args.int_list([1, "a"], "sizes"), "must contain only ints"),
])
def test_refusals_raised_from_none_suppress_their_context(call, match) -> None:
    with pytest.raises(TypeError, match=match) as info:
        call()
    assert info.value.__suppress_context__ and info.value.__cause__ is None
