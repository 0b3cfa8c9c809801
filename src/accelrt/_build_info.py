"""Which build of accelrt is loaded, compiled (mypyc) or pure Python, and why.

The build (``setup.py``) writes a record into the package, ``accelrt/_build.json``: the build it
made, the reason (e.g. ``ACCELRT_COMPILE=0``, or no C compiler was found) and the modules it
compiled. :func:`build_info` checks that record against the modules actually loaded: a compiled
build whose extension modules were deleted, or a source tree run without installing, say so.

Example::

    >>> from accelrt._build_info import build_info
    >>> info = build_info()
    >>> info.build in ("compiled", "pure"), isinstance(info.reason, str)
    (True, True)
"""

from __future__ import annotations

import importlib
import importlib.machinery
import json
from importlib import resources
from typing import Literal, NamedTuple

__all__ = ["BuildInfo", "build_info"]

#: The record's name in the package (``setup.py``'s ``RECORD``).
RECORD = "_build.json"

#: A module compiled in every compiled build: without a record, it tells the builds apart.
_PROBE = "accelrt.memory._allocator"


class BuildInfo(NamedTuple):
    """The loaded build: ``build`` is ``"compiled"`` or ``"pure"``; ``reason`` says why, in
    one line; ``modules`` are the compiled modules loaded (empty for the pure build)."""

    build: Literal["compiled", "pure"]
    reason: str
    modules: tuple[str, ...]


def _is_extension(name: str) -> bool:
    origin = getattr(importlib.import_module(name), "__file__", None) or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def _record() -> dict[str, object] | None:
    try:
        text = resources.files("accelrt").joinpath(RECORD).read_text()
    except (FileNotFoundError, OSError):
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def build_info() -> BuildInfo:
    """The build loaded in this process and why (see the module's docstring)."""
    record = _record()
    if record is None:
        if _is_extension(_PROBE):
            return BuildInfo("compiled", "compiled modules found, but no build record",
                             (_PROBE,))
        return BuildInfo("pure", "no build record: accelrt runs from a source tree that pip "
                                 "did not build (pip install . makes the compiled build)", ())
    reason = str(record.get("reason", ""))
    names = record.get("modules")
    modules = tuple(str(n) for n in names) if isinstance(names, list) else ()
    if record.get("build") != "compiled" or not modules:
        return BuildInfo("pure", reason or "built pure", ())
    missing = [name for name in modules if not _is_extension(name)]
    if missing:
        return BuildInfo("pure", f"the build compiled {len(modules)} modules, but "
                                 f"{len(missing)} load from Python source (e.g. {missing[0]}): "
                                 f"reinstall accelrt", ())
    return BuildInfo("compiled", reason, modules)
