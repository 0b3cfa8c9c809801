"""accelrt's PEP 517 build backend: setuptools', plus mypy for the compiled build.

``pip install .`` builds the pure-Python package exactly as ``setuptools.build_meta`` does.
When ``ACCELRT_COMPILE=1`` asks for the compiled build (see ``setup.py``), the build
requirements also list mypy (mypyc ships with it), so pip's build isolation installs it in
the build environment; the pure build never needs it, nor a C compiler.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the other PEP 517 hooks, unchanged)

ENV = "ACCELRT_COMPILE"

#: What the compiled build needs besides setuptools: mypyc ships with mypy, and mypyc
#: type-checks the package, which imports numpy (without numpy in the build environment the
#: build worked only where the calling environment happened to have it installed).
COMPILE_REQUIRES = ["mypy>=1.10", "numpy>=1.24"]


@contextlib.contextmanager
def _requirements_only() -> Iterator[bool]:
    """Whether the compiled build is asked for; meanwhile setup.py runs as the pure build:
    asking setuptools for its requirements runs setup.py before mypyc is installed, and the
    metadata is the same for both builds (compiling to prepare it would be thrown away: mypyc
    would run twice, about 8 s)."""
    value = os.environ.get(ENV)
    if value is None or value.strip() != "1":
        yield False
        return
    os.environ[ENV] = "0"
    try:
        yield True
    finally:
        os.environ[ENV] = value


def get_requires_for_build_wheel(config_settings: dict[str, object] | None = None) -> list[str]:
    with _requirements_only() as compiled:
        reqs = _setuptools.get_requires_for_build_wheel(config_settings)
    return [*reqs, *COMPILE_REQUIRES] if compiled else reqs


def get_requires_for_build_editable(config_settings: dict[str, object] | None = None
                                    ) -> list[str]:
    with _requirements_only() as compiled:
        reqs = _setuptools.get_requires_for_build_editable(config_settings)
    return [*reqs, *COMPILE_REQUIRES] if compiled else reqs


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: dict[str, object] | None = None) -> str:
    with _requirements_only():
        return str(_setuptools.prepare_metadata_for_build_wheel(metadata_directory,
                                                                config_settings))


def prepare_metadata_for_build_editable(metadata_directory: str,
                                        config_settings: dict[str, object] | None = None) -> str:
    with _requirements_only():
        return str(_setuptools.prepare_metadata_for_build_editable(metadata_directory,
                                                                   config_settings))
