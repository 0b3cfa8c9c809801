"""Hostile integer-like values shared by the tests that feed them to accelrt's argument checks
(``tests/runtime/test_review_builds_s24.py``) and by the build-comparison probes
(``builds_probe.py``, run as a script beside this file)."""

from __future__ import annotations

__all__ = ["Index", "IndexRaises", "IntEq", "IntIdx", "IntSub"]


class IntSub(int):
    """A plain subclass of int."""


class IntEq(int):
    """An int equal to everything, hashing as 0."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


class IntIdx(int):
    """An int whose ``__index__`` and ``__int__`` say 0."""

    def __index__(self) -> int:
        return 0

    def __int__(self) -> int:
        return 0


class Index:
    """Not an int, with ``__index__`` (as numpy's integers)."""

    def __index__(self) -> int:
        return 1


class IndexRaises:
    """Not an int, with an ``__index__`` that raises ``exc`` (torch's argument parser and
    pybind11 bindings clear what it raised and refuse the argument with ``TypeError``;
    torch's Python functions let it out)."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __index__(self) -> int:
        raise self.exc

    def __repr__(self) -> str:
        return f"IndexRaises({type(self.exc).__name__})"
