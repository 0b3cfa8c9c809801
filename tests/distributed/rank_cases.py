"""The rank side of the ``OK``/``FAIL``/``DONE`` protocol of ``cases.py``, for the rank scripts
the torch-suite tests write: each case is a function run once on every rank; the script ends
with :meth:`Cases.done`, and the test reads the output with ``test_distributed._check_cases``.
:func:`write_script` writes a rank script with a copy of this module beside it, where the ranks
import it from.

Example (in a rank script)::

    from rank_cases import Cases
    case = Cases(dist.get_rank(), after=dist.barrier)

    @case
    def sums():
        ...

    case.done()
"""

from __future__ import annotations

import os
import re
import shutil
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["Cases", "eq", "raises", "raises_containing", "write_script"]


def write_script(folder: Path, text: str, name: str = "ranks.py") -> Path:
    """Write the rank script ``text`` as ``folder/name``, with this module beside it; return
    the script's path."""
    shutil.copy(__file__, folder / "rank_cases.py")
    script = folder / name
    script.write_text(text)
    return script


class Cases:
    """A decorator that runs a case at once and records ``OK name`` or ``FAIL name: the end of
    its traceback``; ``after`` (e.g. ``dist.barrier``) runs after each case, whatever its
    outcome, so that a failing rank stays in step. ``RANK_CASES_TRACE=1`` prints each line as
    it comes (a hang then shows the last case that finished)."""

    def __init__(self, rank: int, after: Callable[[], object] | None = None) -> None:
        self.rank, self.after = rank, after
        self.lines: list[str] = []
        self.trace = bool(os.environ.get("RANK_CASES_TRACE"))

    def __call__(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        try:
            fn()
            self.lines.append(f"OK {fn.__name__}")
        except Exception:
            msg = traceback.format_exc().strip().splitlines()
            self.lines.append(f"FAIL {fn.__name__}: {' | '.join(msg[-4:])}")
        if self.trace:
            print(f"[{self.rank}] {self.lines[-1]}", flush=True)
        if self.after is not None:
            self.after()
        return fn

    def done(self) -> None:
        """Print every line, then ``DONE <rank> <count>``."""
        for line in self.lines:
            print(f"[{self.rank}] {line}", flush=True)
        print(f"DONE {self.rank} {len(self.lines)}", flush=True)


def raises(exc: type[BaseException], pattern: str, fn: Callable[[], object]) -> None:
    """Call ``fn`` and check that it raises ``exc`` with a message ``pattern`` searches
    (``re.search``); AssertionError otherwise (a case then records FAIL)."""
    try:
        fn()
    except exc as e:
        assert re.search(pattern, str(e)), (type(e).__name__, str(e))
    else:
        raise AssertionError(f"no {exc.__name__} ({pattern})")


def raises_containing(exc: type[BaseException], words: str, fn: Callable[[], object]) -> None:
    """As :func:`raises`, for a message that contains ``words`` as they are (no pattern)."""
    try:
        fn()
    except exc as e:
        assert words in str(e), (type(e).__name__, str(e))
    else:
        raise AssertionError(f"no {exc.__name__} ({words})")


def eq(a: Any, want: object) -> None:
    """Check that ``a`` (an array: its ``tolist()``; or any value) equals ``want``."""
    got = a.tolist() if hasattr(a, "tolist") else a
    assert got == want, (got, want)
