"""Session 33's parity fixes found by comparing with torch 2.15 (each failed before its fix)."""

from __future__ import annotations

from typing import Any

import pytest

import accelrt as acc


@pytest.mark.parametrize("args, kwargs", [
    ((None, 10, (3,)), {}),
    ((None, 10), {"size": (3,)}),
    ((None,), {"high": 10, "size": (3,)}),
])
def test_randint_refuses_a_none_passed_for_low(args: tuple[Any, ...],
                                               kwargs: dict[str, Any]) -> None:
    # torch.randint(None, 10, (3,)) is a TypeError (its parser takes no None for low); accelrt
    # read it as low=0
    with pytest.raises(TypeError, match="low must be an int, got None"):
        acc.randint(*args, device="cpu", **kwargs)


def test_randint_without_low_still_starts_at_zero() -> None:
    acc.manual_seed(0)
    a = acc.randint(10, (64,), device="cpu").tolist()
    acc.manual_seed(0)
    assert acc.randint(0, 10, (64,), device="cpu").tolist() == a
    assert acc.randint(high=10, size=(4,), device="cpu").shape == (4,)
    with pytest.raises(TypeError, match="missing the upper bound 'high'"):
        acc.randint(None, (3,), device="cpu")
