"""Build script: the hot modules compiled with mypyc by default, pure Python as the fallback.

``pip install .`` compiles the modules of :data:`COMPILED` with mypyc when a C compiler and
Python's headers are present (the build backend, ``_build/backend.py``, then adds mypy to the
build requirements), and otherwise installs the pure-Python build, saying why in one line; it
never fails for lack of a compiler. ``ACCELRT_COMPILE=0`` forces the pure build, ``=1`` requires
the compiled one (and fails clearly without mypyc or a compiler); editable installs are pure
unless ``=1`` asks (``_build/build_choice.py``). The build writes :data:`RECORD` into the
package, which ``accelrt info`` reads. Everything else (metadata, packages, data files) is
declared in ``pyproject.toml``.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: The modules of the compiled build: the allocator and what its malloc/free paths call on
#: every operation (chosen by profiling ``bench/bench_allocator.py``), and the per-call paths
#: of the array factories and of small RNG launches (``bench/bench_builds.py``). Public classes
#: and functions whose arguments accelrt checks itself (``_stream``, ``_event``, ``_factories``)
#: stay pure Python: a compiled function refuses a wrong argument type with mypyc's message
#: before accelrt's check runs (docs/memory.md). Modules that
#: inspect frames (``_history``) or are off the hot path stay pure Python, and so does
#: ``_lock``: its uncontended acquire and release already are C methods of
#: ``queue.SimpleQueue``, and its locks must stay weak-referenceable (``accelrt._fork``), which
#: mypyc's classes are not.
COMPILED = [
    "src/accelrt/_checked.py",                   # the seam's result checks (event lifetimes)
    "src/accelrt/_device_core.py",               # device_index's fields, with enter/exit
    "src/accelrt/_placement.py",                 # a factory's placement and allocation
    "src/accelrt/_size.py",                      # the factories' argument step
    "src/accelrt/_stream_core.py",               # Stream/Event fields, argument-free hot paths
    "src/accelrt/_transfer/_execute.py",         # the transfer plans' executors
    "src/accelrt/_transfer/_lifetime.py",        # the transfers' keep-alive rule
    "src/accelrt/_transfer/_plan.py",            # the transfer plans' steps and places
    "src/accelrt/backends/_common.py",           # backends' argument checks, handle tables
    "src/accelrt/backends/cpu/_live.py",         # the cpu backend's hot handle checks
    "src/accelrt/comm/_args.py",                 # comm's device arguments (checks typed Any)
    "src/accelrt/comm/_arrays.py",               # comm's array descriptions and copies
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
    "src/accelrt/testing/_sim_device.py",        # the simulated device's vm_map/vm_unmap
]

#: :data:`COMPILED` as module names (``accelrt.memory._allocator``): what the record lists.
COMPILED_MODULES = [p.removeprefix("src/").removesuffix(".py").replace("/", ".")
                    for p in COMPILED]

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_build"))
import build_choice as choice  # noqa: E402  (the build's own helpers, beside the backend)

ENV = choice.ENV

#: mypycify's group_name (a literal there: scripts/gpu_check.py reads the call's keywords):
#: one shared library, ``accelrt__mypyc``, holds every compiled module.
GROUP = "accelrt"

#: The build record that ``accelrt info`` reads (``accelrt._build_info``): which build this
#: install is, and why. Written into the package by ``build_ext``.
RECORD = "_build.json"


class Choice(NamedTuple):
    """The build to make: ``compiled`` or pure, ``required`` (``ACCELRT_COMPILE=1``: no
    fallback), and the one-line ``reason``."""

    compiled: bool
    required: bool
    reason: str


def choose() -> Choice:
    """The build ``ACCELRT_COMPILE`` and this machine allow (see ``_build/build_choice.py``).

    Raises:
        SystemExit: ``ACCELRT_COMPILE=1`` and mypyc or a C compiler is missing, or the
            variable's value is not one of unset, ``0``, ``1``.
    """
    wanted = choice.requested()
    if wanted == choice.PURE:
        return Choice(False, False, choice.pure_reason())
    required = wanted == choice.COMPILED
    problem = choice.compiler_problem()
    if problem is not None:
        if required:
            raise SystemExit(choice.required_but(problem))
        return Choice(False, False, problem)
    try:
        import mypyc.build  # noqa: F401
    except ImportError as exc:
        if required:
            raise SystemExit(
                f"{ENV}=1 asks for the compiled build, which needs mypyc (it ships with mypy) "
                f"in the build environment: {exc}. With pip's build isolation the build "
                f"backend installs it; with --no-build-isolation, install mypy first (pip "
                f"install mypy), or set {ENV}=0 for the pure-Python build.") from exc
        return Choice(False, False, f"mypyc is not installed in the build environment ({exc})")
    how = f"{ENV}=1" if required else f"{ENV} unset and a C compiler found"
    return Choice(True, required, f"compiled with mypyc ({how})")


def ext_modules(chosen: Choice | None = None) -> tuple[list[object], Choice]:
    """The mypyc extension modules of the compiled build (none for the pure one), and the
    choice they make: a default build whose mypyc run fails falls back to pure Python.

    Raises:
        SystemExit: the compiled build is required and mypyc cannot run.
    """
    chosen = choose() if chosen is None else chosen
    if not chosen.compiled:
        return [], chosen
    from mypyc.build import mypycify
    # mypyc reads the package from the source tree; paths are relative to this file
    here = os.path.dirname(os.path.abspath(__file__))
    os.chdir(here)
    sys.path.insert(0, os.path.join(here, "src"))
    try:
        # multi_file: one C file per module, compiled in parallel by BuildExt
        return [*mypycify(COMPILED, opt_level="3", debug_level="0", group_name="accelrt",
                          multi_file=True), PHILOX, FREE_LIST, BLOCK_MAP, LOCK, OWNER], chosen
    except (Exception, SystemExit) as exc:   # mypyc exits on a type error
        if chosen.required:
            raise
        what = f"exit status {exc.code}" if isinstance(exc, SystemExit) else repr(exc)
        return [], Choice(False, False, f"mypyc failed ({what}; {ENV}=1 pip install -v . "
                                        f"shows its errors); the pure-Python build instead")


#: Philox4x32-10 in C: the arithmetic of ``accelrt.random._philox`` (the numpy reference, which
#: the pure build runs), made about three times faster (bench/bench_random.py); part of the
#: compiled build, so it ships and falls back with the mypyc modules.
PHILOX = Extension("accelrt.random._philox_host", ["src/accelrt/random/_philox_host.c"],
                   depends=["src/accelrt/random/_philox_kernels.h"])

#: The allocator's free lists in C (``accelrt.memory._free_list``'s ``FreeList``, in Python for
#: the pure build): keys of two 64-bit integers where the Python type compares and builds
#: 128-bit integers (bench/bench_builds.py's replay rows); part of the compiled build, like
#: :data:`PHILOX`.
FREE_LIST = Extension("accelrt.memory._free_list_c", ["src/accelrt/memory/_free_list_c.c"],
                      depends=["src/accelrt/memory/_pyint.h"])

#: The allocator's map of blocks by address in C (``accelrt.memory._block_map``'s ``BlockMap``, a
#: ``dict`` in the pure build): unboxed 64-bit keys, where a dict hashes and compares int
#: objects on every split, free and merge; part of the compiled build, like :data:`PHILOX`.
BLOCK_MAP = Extension("accelrt.memory._block_map_c", ["src/accelrt/memory/_block_map_c.c"],
                      depends=["src/accelrt/memory/_pyint.h"])

#: The allocator's mutex in C (``accelrt.memory._lock``'s ``FastLock``, a ``SimpleQueue`` token in
#: the pure build, whose get and put were about a third of a compiled cached malloc + free);
#: part of the compiled build, like :data:`PHILOX`.
LOCK = Extension("accelrt.memory._lock_c", ["src/accelrt/memory/_lock_c.c"])

#: The memory owner of an array in C (``accelrt._memory_owner``'s ``_Memory``, a Python class in
#: the pure build): its creation and finalizer were about 8 of the 40 calls of ``empty(256)`` +
#: free, and a mypyc class can be neither weakly referenced nor finalized with an exception
#: pending; part of the compiled build, like :data:`PHILOX`.
OWNER = Extension("accelrt._memory_owner_c", ["src/accelrt/_memory_owner_c.c"])

#: The flags :data:`PHILOX` is compiled with by GCC and Clang: its loops over blocks need -O3
#: to run in SIMD registers (measured 2.3 times slower at the -O2 of many Pythons' flags).
PHILOX_FLAGS = ["-O3"]


#: The shim that PyTorch's ``CUDAPluggableAllocator`` loads (``accelrt.interop.torch``): a
#: shared library with a C interface (C++ inside, to raise into PyTorch; no Python or CUDA
#: headers), built in both the pure and the compiled build. Optional: without a C++ compiler
#: the package still installs, without the shim. It lands
#: in ``accelrt/interop/_lib/``, a folder without ``__init__.py``, so that tools walking the
#: package's modules (pydoc, pkgutil) do not take the library for a Python extension module.
SHIM = Extension("accelrt.interop._lib._torch_shim", ["src/accelrt/interop/_torch_shim.cpp"],
                 optional=True)


class BuildExt(build_ext):  # type: ignore[misc]
    """setuptools' ``build_ext``, plus: the C files of one extension compile in parallel (the
    compiled build's one large extension is most of the install time); a shim that fails to
    build is reported in one line; a default build whose compiled modules fail to build
    installs pure Python; and the build record (:data:`RECORD`) is written."""

    #: The build chosen by setup.py (``__main__`` sets it); updated on a fallback to pure.
    chosen = Choice(False, False, "built without setup.py's choice")

    def build_extensions(self) -> None:
        self._compile_in_parallel()
        mypyc_exts = [ext for ext in self.extensions if ext.name != SHIM.name]
        self._remove_stale({ext.name for ext in mypyc_exts})
        try:
            super().build_extensions()
        except Exception as exc:   # a compile or link error in a mypyc extension
            if not mypyc_exts or self.chosen.required:
                raise
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            self.warn(f"accelrt: the compiled build failed ({first}); installing the "
                      f"pure-Python build instead. Set {ENV}=1 to see the failure.")
            self._remove_stale(set())   # none of them may ship: each needs the whole group
            self.extensions = [ext for ext in self.extensions if ext.name == SHIM.name]
            type(self).chosen = Choice(False, False, f"the C compiler failed on the compiled "
                                                     f"modules ({first})")
            super().build_extensions()
        self._write_record([ext.name for ext in self.extensions if ext.name != SHIM.name])

    def _remove_stale(self, building: set[str]) -> None:
        """Delete compiled modules that an earlier build left in the build folder (pip builds
        in the source tree and reuses ``build/``), or beside the sources for an in-place or
        editable build, unless this build makes them again: a pure build after a compiled
        one would otherwise ship the old extension modules, which shadow the ``.py`` files."""
        roots = [self.build_lib]
        if self.inplace or getattr(self, "editable_mode", False):
            roots.append(os.path.dirname(
                self.get_finalized_command("build_py").get_package_dir("accelrt")))
        for root in roots:
            # the modules of this list, and any other an earlier build compiled (a module
            # since dropped from the list), found by the file name a compiled module has
            names = {*COMPILED_MODULES, f"{GROUP}__mypyc"}   # and the group's shared library
            suffix = self.get_ext_filename("x")[1:]
            for folder, _, files in os.walk(os.path.join(root, "accelrt")):
                package = os.path.relpath(folder, root).replace(os.sep, ".")
                names.update(f"{package}.{f[:-len(suffix)]}" for f in files if f.endswith(suffix))
            for name in sorted(names - building - {SHIM.name}):
                path = os.path.join(root, self.get_ext_filename(name))
                if os.path.exists(path):
                    os.remove(path)

    def _compile_in_parallel(self) -> None:
        """Compile the sources of one extension on every core (distutils compiles them one by
        one); the objects and flags are distutils' own."""
        compiler = self.compiler
        jobs = os.cpu_count() or 1
        serial = compiler.compile
        if jobs == 1 or getattr(serial, "accelrt_parallel", False):
            return

        def compile_all(sources: list[str], output_dir: str | None = None,
                        macros: object = None, include_dirs: object = None, debug: int = 0,
                        extra_preargs: object = None, extra_postargs: object = None,
                        depends: object = None) -> list[str]:
            if len(sources) < 2:
                return serial(sources, output_dir, macros, include_dirs, debug,  # type: ignore[no-any-return]
                              extra_preargs, extra_postargs, depends)
            with ThreadPoolExecutor(jobs) as pool:
                parts = pool.map(lambda src: serial([src], output_dir, macros, include_dirs,
                                                    debug, extra_preargs, extra_postargs,
                                                    depends), sources)
                return [obj for objs in parts for obj in objs]

        compile_all.accelrt_parallel = True  # type: ignore[attr-defined]
        compiler.compile = compile_all

    def _write_record(self, compiled_modules: list[str]) -> None:
        """The build record (:data:`RECORD`) in the built package (and beside the sources
        for an in-place or editable build)."""
        modules = COMPILED_MODULES if compiled_modules else []
        reason = self.chosen.reason if modules or not self.chosen.compiled else (
            "no compiled module was built")
        record = {"build": "compiled" if modules else "pure", "reason": reason,
                  "modules": modules}
        folders = {os.path.join(self.build_lib, "accelrt")}
        if self.inplace or getattr(self, "editable_mode", False):
            folders.add(self.get_finalized_command("build_py").get_package_dir("accelrt"))
        for folder in folders:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, RECORD), "w") as f:
                json.dump(record, f, indent=1)
                f.write("\n")

    def build_extension(self, ext: Extension) -> None:
        if ext.name == PHILOX.name and self.compiler.compiler_type != "msvc":
            ext.extra_compile_args = [*PHILOX_FLAGS]
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
    """The shim, plus the mypyc modules of the compiled build (the choice goes to BuildExt)."""
    mypyc_exts, BuildExt.chosen = ext_modules()
    if not BuildExt.chosen.compiled and os.environ.get(choice.METADATA_ENV) != "1":
        # one line saying why (pip shows it with -v; accelrt info says it too)
        sys.stderr.write(f"accelrt: the pure-Python build: {BuildExt.chosen.reason}\n")
    return [SHIM, *mypyc_exts]


if __name__ == "__main__":   # as setuptools' build backend runs it (tests import this file)
    setup(ext_modules=all_ext_modules(), cmdclass={"build_ext": BuildExt})
