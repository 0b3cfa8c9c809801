"""A pickle that runs code when loaded, for the tests that check a snapshot or trace reader
refuses to unpickle arbitrary objects: ``pickle.dumps(Evil())`` calls ``_evil("ran")`` on
load, which appends to :data:`CALLS` (still empty after a refused load)."""

from __future__ import annotations

from typing import Any

__all__ = ["CALLS", "Evil"]

#: what loads of an :class:`Evil` pickle ran
CALLS: list[str] = []


def _evil(arg: str) -> None:
    CALLS.append(arg)


class Evil:
    def __reduce__(self) -> tuple[Any, ...]:
        return (_evil, ("ran",))
