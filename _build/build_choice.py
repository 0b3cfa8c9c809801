"""Which build of accelrt to make: compiled (mypyc) or pure Python, and why.

Shared by the build backend (``_build/backend.py``: whether mypy joins the build requirements)
and ``setup.py`` (whether the mypyc extensions are built). ``ACCELRT_COMPILE``:

- unset or empty: **compiled when it can be**: a C compiler that builds against this Python's
  headers is present (and, in ``setup.py``, mypyc imports); otherwise the pure build, with one
  line saying why. Editable installs (``pip install -e .``) are pure unless ``=1`` asks, so that
  an edit of a ``.py`` file is what runs.
- ``0``: the pure-Python build.
- ``1``: the compiled build, or a clear failure saying what is missing.
"""

from __future__ import annotations

import os
import sysconfig
import tempfile

ENV = "ACCELRT_COMPILE"

#: Set by the build backend while it builds an editable install (``_build/backend.py``).
EDITABLE_ENV = "_ACCELRT_EDITABLE_BUILD"

#: Set by the build backend while setup.py runs only for the requirements or the metadata,
#: which are the same for both builds (compiling there would be thrown away).
METADATA_ENV = "_ACCELRT_METADATA_ONLY"

AUTO, PURE, COMPILED = "auto", "pure", "compiled"


def requested() -> str:
    """What ``ACCELRT_COMPILE`` asks for: :data:`AUTO`, :data:`PURE` or :data:`COMPILED`.

    Raises:
        SystemExit: the variable holds anything but unset, empty, ``0`` or ``1``.
    """
    value = os.environ.get(ENV, "").strip()
    if value not in ("", "0", "1"):
        raise SystemExit(f"{ENV}={value!r}: use 1 for the compiled (mypyc) build, 0 for the "
                         f"pure-Python build, or leave it unset (compiled when a C compiler "
                         f"is found, pure otherwise)")
    if os.environ.get(METADATA_ENV) == "1":
        return PURE
    if value == "1":
        return COMPILED
    if value == "0":
        return PURE
    return PURE if os.environ.get(EDITABLE_ENV) == "1" else AUTO


def pure_reason() -> str:
    """Why the build is pure when :func:`requested` says :data:`PURE`."""
    if os.environ.get(METADATA_ENV) == "1":
        return "the requirements and metadata only (the same for both builds)"
    if os.environ.get(ENV, "").strip() == "0":
        return f"{ENV}=0 asks for the pure-Python build"
    return (f"an editable install builds pure Python (so that edited sources run); "
            f"{ENV}=1 compiles it")


def compiler_problem() -> str | None:
    """None when a C compiler builds a file that includes this Python's ``Python.h``;
    otherwise what is missing, with what to install (one line)."""
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        return (f"Python's C headers are not installed ({include}/Python.h is missing; "
                f"install them, e.g. the python3-dev package)")
    try:
        from setuptools._distutils.ccompiler import new_compiler
        from setuptools._distutils.sysconfig import customize_compiler
    except ImportError:   # a setuptools without its vendored distutils
        from distutils.ccompiler import new_compiler  # type: ignore[no-redef]
        from distutils.sysconfig import customize_compiler  # type: ignore[no-redef]
    compiler = new_compiler()
    with tempfile.TemporaryDirectory(prefix="accelrt-cc-") as folder:
        source = os.path.join(folder, "probe.c")
        with open(source, "w") as f:
            f.write("#include <Python.h>\nint accelrt_probe(void) { return Py_IsInitialized(); }\n")
        try:
            customize_compiler(compiler)
            compiler.compile([source], output_dir=folder, include_dirs=[include])
        except Exception as exc:   # CompileError, DistutilsExecError, a missing executable
            command = getattr(compiler, "compiler_so", None) or ["the C compiler"]
            return (f"no working C compiler was found ({command[0]!r} could not compile a "
                    f"file that includes Python.h: {type(exc).__name__}); install one, e.g. "
                    f"gcc, for the compiled build")
    return None


def required_but(problem: str) -> str:
    """The failure of ``ACCELRT_COMPILE=1`` when the compiled build cannot be made."""
    return (f"{ENV}=1 asks for the compiled build, but {problem}; or set {ENV}=0 for the "
            f"pure-Python build")
