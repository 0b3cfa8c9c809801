#!/usr/bin/env python3
"""Generate the committed PTX of accelrt's CUDA kernels from ``src/accelrt/kernels/*.cu``.

The CUDA backend compiles the ``.cu`` sources with NVRTC at run time when an NVRTC library is
installed; otherwise it loads these PTX files, which the driver JIT-compiles for the GPU. Each
PTX starts with a comment holding its source's sha256, and ``tests/backends/test_cuda_backend.py``
checks that every committed PTX matches the current source, so the ``.cu`` stays the one
source of truth.

Use an NVRTC of CUDA 12.x (it still targets ``compute_70`` and emits a PTX ISA that CUDA 12
drivers can JIT), e.g. in a virtual environment::

    pip install "cuda-bindings==12.*" "nvidia-cuda-nvrtc-cu12==12.4.*"
    python scripts/gen_ptx.py            # (re)write stale or missing PTX
    python scripts/gen_ptx.py --check    # exit 1 if any PTX is stale or missing
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from accelrt.backends.cuda import _kernels  # noqa: E402


def stale() -> list[str]:
    """Names of modules whose PTX is missing or was generated from another source."""
    out = []
    for name, src in _kernels.sources().items():
        ptx = src.with_suffix(".ptx")
        if not ptx.exists() or _kernels.ptx_source_sha256(ptx.read_text()) != \
                _kernels.source_sha256(src):
            out.append(name)
    return out


def generate(name: str, arch: str) -> Path:
    """Compile module ``name`` to PTX for ``arch`` and write it with its header."""
    src = _kernels.sources()[name]
    version = _kernels.nvrtc_version()
    if version is None:
        raise SystemExit("NVRTC is not available: pip install \"cuda-bindings==12.*\" "
                         "\"nvidia-cuda-nvrtc-cu12==12.4.*\"")
    ptx = _kernels.compile_source(src.read_bytes(), src.name, arch).decode()
    header = _kernels.ptx_header(name, _kernels.source_sha256(src),
                                 f"{version[0]}.{version[1]}", arch)
    out = src.with_suffix(".ptx")
    out.write_text(header + ptx.rstrip("\n") + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report stale PTX (exit 1)")
    ap.add_argument("--all", action="store_true", help="regenerate every PTX, not just stale")
    ap.add_argument("--arch", default=_kernels.PTX_ARCH, help="virtual architecture")
    args = ap.parse_args(argv)
    todo = list(_kernels.sources()) if args.all else stale()
    if args.check:
        for name in todo:
            print(f"stale or missing: {name}.ptx")
        return 1 if todo else 0
    for name in todo:
        print(f"wrote {generate(name, args.arch)}")
    if not todo:
        print("all PTX files are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
