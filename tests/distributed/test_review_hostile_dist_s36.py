"""Findings of the session-36 hostile-input sweep of ``accelrt.distributed``'s ``ReduceOp``.
Each test failed before its fix; torch 2.15.0's behaviour was observed on the same inputs.
"""

from __future__ import annotations

import pytest

from accelrt.distributed import ReduceOp


@pytest.mark.parametrize("value", [1.0, True, False, 3.0, "SUM", None])
def test_reduce_op_from_a_float_or_bool_is_refused(value: object) -> None:
    # torch 2.15: ReduceOp(1.0), ReduceOp(True) raise TypeError (its constructor takes no
    # number at all). Before: Enum's lookup by value made ReduceOp(1.0) and ReduceOp(True)
    # PRODUCT, ReduceOp(False) SUM.
    with pytest.raises(TypeError, match="is not a valid ReduceOp"):
        ReduceOp(value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="is not a valid ReduceOp"):
        ReduceOp(value)  # type: ignore[arg-type]


def test_reduce_op_from_a_member_or_its_number_still_works() -> None:
    assert ReduceOp(ReduceOp.MAX) is ReduceOp.MAX
    assert ReduceOp(8) is ReduceOp.PREMUL_SUM and ReduceOp(0) is ReduceOp.SUM
    with pytest.raises(ValueError, match="9 is not a valid ReduceOp"):
        ReduceOp(9)


def test_every_reduce_op_member_is_true() -> None:
    """torch 2.15's ReduceOp members are pybind objects, all true: ``bool(ReduceOp.SUM)`` is
    True although SUM equals 0 (the int mixin made it False)."""
    assert all(bool(op) for op in ReduceOp)
    assert (ReduceOp.SUM or ReduceOp.MAX) is ReduceOp.SUM
    assert ReduceOp.SUM == 0 and int(ReduceOp.SUM) == 0
