"""Build script: pure Python by default; ``ACCELRT_COMPILE=1`` compiles the allocator with mypyc.

``pip install .`` builds the pure-Python package (no compiler needed): that build is the
reference. ``ACCELRT_COMPILE=1 pip install .`` compiles the caching allocator's hot modules
(:data:`COMPILED`) with mypyc from the same source; the build backend in ``_build/backend.py``
then adds mypy to the build requirements, and a C compiler and Python's headers are needed.
Everything else (metadata, packages, data files) is declared in ``pyproject.toml``.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup

#: The modules compiled by ``ACCELRT_COMPILE=1``: the allocator and what its malloc/free paths
#: call on every operation (chosen by profiling ``bench/bench_allocator.py``). Modules that
#: inspect frames (``_history``) or are off the hot path stay pure Python, and so does
#: ``_lock``: its acquire and release already are C methods of ``queue.SimpleQueue``, and its
#: locks must stay weak-referenceable (``accelrt._fork``), which mypyc's classes are not.
COMPILED = [
    "src/accelrt/memory/_allocator.py",
    "src/accelrt/memory/_block.py",
    "src/accelrt/memory/_events.py",
    "src/accelrt/memory/_expandable.py",
    "src/accelrt/memory/_malloc_async.py",       # subclasses the allocator
    "src/accelrt/memory/_pluggable_device.py",   # subclasses the allocator
    "src/accelrt/memory/_pools.py",
    "src/accelrt/memory/_release.py",
    "src/accelrt/memory/_segments.py",
    "src/accelrt/memory/_stats.py",
]

ENV = "ACCELRT_COMPILE"


def compile_requested() -> bool:
    """Whether ``ACCELRT_COMPILE`` asks for the compiled build ("1"; "0" or unset: pure)."""
    value = os.environ.get(ENV, "").strip()
    if value not in ("", "0", "1"):
        raise SystemExit(f"{ENV}={value!r}: use 1 for the compiled (mypyc) build, or 0 / unset "
                         f"for the pure-Python build")
    return value == "1"


def ext_modules() -> list[object]:
    """The mypyc extension modules of the compiled build, or none for the pure one.

    Raises:
        SystemExit: the compiled build is asked for and mypyc cannot be imported.
    """
    if not compile_requested():
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as exc:
        raise SystemExit(
            f"{ENV}=1 asks for the compiled build, which needs mypyc (it ships with mypy) in the "
            f"build environment: {exc}. With pip's build isolation the build backend installs "
            f"it; with --no-build-isolation, install mypy first (pip install mypy), or unset "
            f"{ENV} for the pure-Python build.") from exc
    # mypyc reads the package from the source tree; paths are relative to this file
    here = os.path.dirname(os.path.abspath(__file__))
    os.chdir(here)
    sys.path.insert(0, os.path.join(here, "src"))
    return mypycify(COMPILED, opt_level="3", debug_level="0", group_name="accelrt")


if __name__ == "__main__":   # as setuptools' build backend runs it (tests import this file)
    setup(ext_modules=ext_modules())
