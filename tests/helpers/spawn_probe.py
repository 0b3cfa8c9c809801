"""A child for ``accelrt.multiprocessing.spawn`` tests that reports how it was started: a
forked child inherits the parent's :data:`MARK`, a spawned one imports this module afresh."""

from __future__ import annotations

#: the parent appends to it before starting children; only forked children see that
MARK: list[int] = []


def report(i: int, path: str) -> None:
    """Write ``"forked"`` or ``"spawned"`` to ``<path>.<i>``."""
    with open(f"{path}.{i}", "w") as f:
        f.write("forked" if MARK else "spawned")
