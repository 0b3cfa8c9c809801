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

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: The modules compiled by ``ACCELRT_COMPILE=1``: the allocator and what its malloc/free paths
#: call on every operation (chosen by profiling ``bench/bench_allocator.py``). Modules that
#: inspect frames (``_history``) or are off the hot path stay pure Python, and so does
#: ``_lock``: its acquire and release already are C methods of ``queue.SimpleQueue``, and its
#: locks must stay weak-referenceable (``accelrt._fork``), which mypyc's classes are not.
COMPILED = [
    "src/accelrt/_event.py",
    "src/accelrt/_placement.py",
    "src/accelrt/_size.py",
    "src/accelrt/_stream.py",
    "src/accelrt/memory/_allocator.py",
    "src/accelrt/memory/_block.py",
    "src/accelrt/memory/_events.py",
    "src/accelrt/memory/_expandable.py",
    "src/accelrt/memory/_fast.py",
    "src/accelrt/memory/_fit.py",
    "src/accelrt/memory/_malloc_async.py",       # subclasses the allocator
    "src/accelrt/memory/_pluggable_device.py",   # subclasses the allocator
    "src/accelrt/memory/_pools.py",
    "src/accelrt/memory/_registry.py",
    "src/accelrt/memory/_release.py",
    "src/accelrt/memory/_replaced.py",           # subclasses the allocator
    "src/accelrt/memory/_segments.py",
    "src/accelrt/memory/_stats.py",
    "src/accelrt/memory/_uncached.py",
    "src/accelrt/random/_draw.py",
    "src/accelrt/testing/_allocators.py",        # subclasses the allocator (tests, benchmarks)
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


#: The shim that PyTorch's ``CUDAPluggableAllocator`` loads (``accelrt.interop.torch``): a
#: shared library with a C interface (C++ inside, to raise into PyTorch; no Python or CUDA
#: headers), built in both the pure and the compiled build. Optional: without a C++ compiler
#: the package still installs, without the shim. It lands
#: in ``accelrt/interop/_lib/``, a folder without ``__init__.py``, so that tools walking the
#: package's modules (pydoc, pkgutil) do not take the library for a Python extension module.
SHIM = Extension("accelrt.interop._lib._torch_shim", ["src/accelrt/interop/_torch_shim.cpp"],
                 optional=True)


class BuildExt(build_ext):  # type: ignore[misc]
    """setuptools' ``build_ext``; a shim that fails to build is reported in one line."""

    def build_extension(self, ext: Extension) -> None:
        if ext.name != SHIM.name:
            super().build_extension(ext)
            return
        try:
            super().build_extension(ext)
        except Exception as exc:   # no compiler, a failed compile or link: install without it
            self.warn(f"accelrt: the PyTorch allocator shim ({SHIM.name}) was not built "
                      f"({exc}); accelrt.interop.torch.use_accelrt_allocator() will say so. "
                      f"Install a C++ compiler (e.g. g++) and reinstall accelrt to build it.")


    def copy_extensions_to_source(self) -> None:
        """``--inplace`` (editable installs): the shim's folder is not a package, so make it."""
        package = SHIM.name.rpartition(".")[0]
        os.makedirs(self.get_finalized_command("build_py").get_package_dir(package),
                    exist_ok=True)
        super().copy_extensions_to_source()


def all_ext_modules() -> list[object]:
    """The shim, plus the mypyc modules of the compiled build."""
    return [SHIM, *ext_modules()]


if __name__ == "__main__":   # as setuptools' build backend runs it (tests import this file)
    setup(ext_modules=all_ext_modules(), cmdclass={"build_ext": BuildExt})
