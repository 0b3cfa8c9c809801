"""Stand-in NVIDIA *libraries* (not bindings) for checking accelrt's calls of the real
``cuda.bindings`` without a GPU (tests/backends/test_cuda_calls_s40.py).

``libcuda.so.1`` and ``libnvrtc.so.13`` built here export what ``cuda.bindings`` looks up
(``cuGetProcAddress_v2`` for the driver, every ``nvrtc*`` symbol for NVRTC): every function
returns the result code last set with ``accelrt_stub_result`` (success by default) and writes
no output, so the real Cython wrappers convert the arguments exactly as they would for a GPU
and build their real result tuples (the outputs zero-initialised by the wrapper). Loaded with
``RTLD_GLOBAL`` before the first call, the stand-ins are what ``cuda.pathfinder`` finds
(it asks the loader for an already loaded ``libcuda.so.1``/``libnvrtc.so.13`` first), even on
a machine with a real driver. The values a test needs from a call are put into the real
result objects by :mod:`helpers.cuda_calls`.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

_RESULT = """
static int result = 0;
int accelrt_stub_result(int r) { int o = result; if (r >= 0) result = r; return o; }
"""

CUDA_C = _RESULT + r"""
#include <string.h>
static int generic(void) { return result; }
static int drv_version(int *v) { if (v) *v = 13000; return 0; }
static int err_string(int e, const char **s) { if (s) *s = "stub description"; return 0; }
static int err_name(int e, const char **s) { if (s) *s = "STUB_NAME"; return 0; }
/* the wrapper reads this enum output even on success: write a valid one (NONE) */
static int is_capturing(void *s, int *st) { if (st) *st = 0; return result; }
int cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags,
                        int *status) {
    if (!strcmp(sym, "cuDriverGetVersion")) *pfn = (void *)drv_version;
    else if (!strcmp(sym, "cuGetErrorString")) *pfn = (void *)err_string;
    else if (!strcmp(sym, "cuGetErrorName")) *pfn = (void *)err_name;
    else if (!strcmp(sym, "cuStreamIsCapturing")) *pfn = (void *)is_capturing;
    else *pfn = (void *)generic;
    if (status) *status = 0;   /* CU_GET_PROC_ADDRESS_SUCCESS */
    return 0;
}
int cuGetProcAddress(const char *sym, void **pfn, int ver, unsigned long long flags) {
    return cuGetProcAddress_v2(sym, pfn, ver, flags, 0);
}
int cuDriverGetVersion(int *v) { return drv_version(v); }
int cuInit(unsigned f) { return result; }
"""


def nvrtc_c(names: list[str]) -> str:
    """C source of the NVRTC stand-in exporting ``names`` (``nvrtcGetErrorString`` returns
    a string, as NVRTC's does; every other function the result code)."""
    body = [_RESULT]
    for n in names:
        if n == "nvrtcGetErrorString":
            body.append(f'const char *{n}(int r) {{ return "stub nvrtc error"; }}')
        else:
            body.append(f"int {n}(void) {{ return result; }}")
    return "\n".join(body) + "\n"


def compiler() -> str | None:
    """A C compiler on PATH, or None."""
    for cc in (os.environ.get("CC", ""), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


def build(folder: Path, nvrtc_names: list[str]) -> dict[str, Path]:
    """Compile the stand-ins into ``folder``; return ``{"cuda": path, "nvrtc": path}``."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) on PATH")
    out = {}
    for key, soname, source in (("cuda", "libcuda.so.1", CUDA_C),
                                ("nvrtc", "libnvrtc.so.13", nvrtc_c(nvrtc_names))):
        src = folder / f"{key}_stub.c"
        src.write_text(source)
        lib = folder / soname
        subprocess.run([cc, "-shared", "-fPIC", "-O1", f"-Wl,-soname,{soname}", "-o",
                        str(lib), str(src)], check=True, capture_output=True, timeout=60)
        out[key] = lib
    return out


def load(path: Path) -> ctypes.CDLL:
    """Load a stand-in globally, so that ``cuda.pathfinder`` finds it as already loaded."""
    return ctypes.CDLL(str(path), mode=os.RTLD_NOW | os.RTLD_GLOBAL)


def run_scenario(tmp_path_factory: Any, module: str, folder_name: str) -> dict[str, Any]:
    """Build the stand-in libraries in a fresh folder and run ``python -m helpers.<module>``
    over them (with the accelrt this process imported: the source tree, or CI's installed
    copy, whose files are the tree's, so the call sites' lines are the same); the scenario's
    report, the JSON of its last line. Skips (pytest) without cuda-bindings, pynvml, nvtx or a
    C compiler, or when the scenario reports ``{"skip": why}``."""
    import pytest
    pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings is not installed")
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    pytest.importorskip("nvtx", reason="nvtx is not installed")
    if compiler() is None:
        pytest.skip("no C compiler to build the stand-in libcuda")
    names = sorted(n for n in dir(nvrtc) if n.startswith("nvrtc")
                   and callable(getattr(nvrtc, n)) and not isinstance(getattr(nvrtc, n), type))
    folder = tmp_path_factory.mktemp(folder_name)
    build(folder, names)
    import accelrt
    tests = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(accelrt.__file__).resolve().parents[1]), str(tests),
         os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", f"helpers.{module}", str(folder)],
                          cwd=tests, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    data: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    if "skip" in data:
        pytest.skip(data["skip"])
    return data
