"""Static review of the CUDA paths changed since the GPU session of 2026-11-26 (session 37).

What can be checked without a GPU is checked against the real packages: every name the CUDA
backend, discovery and interop read from ``cuda.bindings.driver``, ``cuda.bindings.nvrtc`` and
``pynvml`` exists in the installed versions (a wrong name is an AttributeError only on a GPU
machine), names that exist in one major version of the bindings only are read with a fallback,
and discovery's handling of a failed ``cuInit`` with the real ``CUresult`` enum. The driver
calls themselves are left to the GPU run (scripts/gpu_check.sh).
"""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any

import pytest

from accelrt import _backend as registry
from accelrt.backends.cuda import _discovery

SRC = Path(__file__).resolve().parents[2] / "src" / "accelrt"
#: the files that call NVIDIA's packages
FILES = sorted([*(SRC / "backends" / "cuda").glob("*.py"), *(SRC / "interop").glob("*.py"),
                SRC / "distributed" / "_nccl.py"])
#: names of cuda.bindings.driver that one major version of the bindings lacks: read with
#: getattr(drv, name, None) and a fallback, never as drv.name
VERSION_GATED = ("cuGraphExecGetId",)   # CUDA 13.0's driver API: not in cuda-bindings 12.x

_REF = re.compile(r"(?<![\w])((?:self\.|b\.)?_?drv|self\.drv|nvrtc|nvml|res|attr|fl)"
                  r"((?:\.[A-Za-z_]\w*)+)")


def _references() -> list[tuple[str, str, list[str]]]:
    """``(where, base, chain)`` of each attribute chain read from a bindings module alias."""
    out = []
    for f in FILES:
        for ln, line in enumerate(f.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if code.lstrip().startswith((">>>", "...")):
                continue
            for m in _REF.finditer(code):
                out.append((f"{f.relative_to(SRC)}:{ln}", m.group(1), m.group(2)[1:].split(".")))
    return out


def test_every_bindings_name_the_cuda_code_reads_exists() -> None:
    drv = pytest.importorskip("cuda.bindings.driver")
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    nvml = pytest.importorskip("pynvml")
    # the local aliases the code uses for the driver module and its enums ("attr" is the
    # pointer attributes in _memory.py and the device attributes in _backend.py)
    roots: dict[str, list[Any]] = {
        "nvrtc": [nvrtc], "nvml": [nvml], "res": [drv.CUresult], "fl": [drv.CUevent_flags],
        "attr": [drv.CUpointer_attribute, drv.CUdevice_attribute]}
    missing = []
    checked = 0
    for where, base, chain in _references():
        objs = roots.get(base, [drv])
        if chain[0] == "binding":   # numba's driver module (interop/numba.py), not ours
            continue
        for obj in objs:
            cur, ok = obj, True
            for part in chain:
                if part in ("name", "value", "getPtr") or callable(cur) and part == "__doc__":
                    break
                if not hasattr(cur, part):
                    ok = False
                    break
                cur = getattr(cur, part)
            if ok:
                break
        checked += 1
        if not ok:
            missing.append(f"{where}: {base}.{'.'.join(chain)}")
    assert checked > 100   # the scan found the code's references
    assert not missing, "names the installed bindings do not have:\n" + "\n".join(missing)


@pytest.mark.parametrize("name", VERSION_GATED)
def test_version_gated_driver_names_are_read_with_a_fallback(name: str) -> None:
    uses = [f"{f.relative_to(SRC)}:{ln}" for f in FILES
            for ln, line in enumerate(f.read_text().splitlines(), 1)
            if re.search(rf"\.{name}\b", line.split("#", 1)[0])]
    assert not uses, f"{name} read as an attribute (AttributeError on other bindings): {uses}"


def test_exec_graph_id_falls_back_to_the_exec_handle_without_cuGraphExecGetId() -> None:
    drv = pytest.importorskip("cuda.bindings.driver")
    from accelrt.backends.cuda._graphs import exec_graph_id
    exe = drv.CUgraphExec(0x5000)   # a handle object as cuGraphInstantiate returns it
    assert exec_graph_id(types.SimpleNamespace(), exe) == 0x5000   # cuda-bindings 12.x
    with_id = types.SimpleNamespace(cuGraphExecGetId=lambda e: (drv.CUresult.CUDA_SUCCESS, 7))
    assert exec_graph_id(with_id, exe) == 7


def _driver_failing_init(drv: Any, err: Any, version: int) -> Any:
    """The real bindings' enums and version, with cuInit answering ``err`` (no driver here)."""
    return types.SimpleNamespace(
        CUDA_VERSION=drv.CUDA_VERSION, CUresult=drv.CUresult,
        cuInit=lambda flags: (err,),
        cuDriverGetVersion=lambda: (drv.CUresult.CUDA_SUCCESS, version),
        cuGetErrorString=lambda e: (drv.CUresult.CUDA_SUCCESS, b"described"))


def test_cuinit_failure_is_a_reason_with_the_real_cuResult_enum() -> None:
    # CUresult has no CUDA_ERROR_INSUFFICIENT_DRIVER (that is the runtime API's error): the
    # probe raised AttributeError for every cuInit failure but CUDA_ERROR_NO_DEVICE
    drv = pytest.importorskip("cuda.bindings.driver")
    fake = _driver_failing_init(drv, drv.CUresult.CUDA_ERROR_UNKNOWN, int(drv.CUDA_VERSION))
    p = _discovery._probe_driver(fake, "")
    assert p.count == 0 and p.source == "driver"
    assert p.reason is not None and "CUDA_ERROR_UNKNOWN" in p.reason


def test_cuinit_failure_with_an_older_driver_says_the_driver_is_too_old() -> None:
    drv = pytest.importorskip("cuda.bindings.driver")
    older = (int(drv.CUDA_VERSION) // 1000 - 1) * 1000 + 40
    fake = _driver_failing_init(drv, drv.CUresult.CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, older)
    p = _discovery._probe_driver(fake, "")
    assert p.count == 0 and p.reason is not None and "needs a CUDA" in p.reason


def test_graphs_are_instantiated_with_pytorchs_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    # PyTorch's CUDAGraph::instantiate: AUTO_FREE_ON_LAUNCH | USE_NODE_PRIORITY. With flags 0,
    # a graph whose captured cudaMallocAsync allocations outlive a replay (its outputs) fails
    # its second cuGraphLaunch. What the driver does with the flags is the GPU run's to see;
    # this checks what the backend passes (through the real binding's argument conversion
    # where libcuda is missing).
    real = pytest.importorskip("cuda.bindings.driver")
    from test_cuda_backend import FakeDriver   # tests/backends is on sys.path (rootdir-less)

    from accelrt.backends.cuda import CudaBackend, _cu
    drv = FakeDriver(real)
    monkeypatch.setattr(_cu, "driver", lambda: drv)
    monkeypatch.setattr(_discovery, "probe",
                        lambda: _discovery.Probe(1, None, "nvml", 13000, (0,)))
    try:
        b = CudaBackend()
        s = b.stream_create(0, 0)
        b.graph_capture_begin(0, s)
        g = b.graph_capture_end(0, s)
        b.graph_replay(0, g, s)   # instantiates
        b.graph_instantiate(0, g)
        flags = [int(args[1]) for name, args in drv.calls if name == "cuGraphInstantiate"]
        f = real.CUgraphInstantiate_flags
        want = (int(f.CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
                | int(f.CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY))
        assert flags == [want, want]
        b.graph_destroy(0, g)
        b.stream_destroy(0, s)
    finally:
        _discovery.reset()


CUDA_REASON = registry.unavailable_reason("cuda")


@pytest.mark.skipif(CUDA_REASON is not None, reason=f"needs a CUDA GPU: {CUDA_REASON}")
def test_gpu_graph_with_an_unfreed_pool_allocation_replays_again() -> None:
    """On the GPU (scripts/gpu_check.sh, suite-backends): a captured cuMemAllocFromPoolAsync
    whose memory the graph does not free (a graph output, backend:cudaMallocAsync) is freed
    by the next launch (AUTO_FREE_ON_LAUNCH), so replays after the first are accepted."""
    import numpy as np

    b = registry.get_backend("cuda")
    if not b.capabilities(0).stream_ordered_memory:
        pytest.skip("this GPU has no stream-ordered memory pools")
    n = 1 << 20
    s = b.stream_create(0, 0)
    try:
        b.graph_capture_begin(0, s)
        p = b.mempool_alloc_async(0, n, s)
        b.memset(0, p, 7, n, s)
        g = b.graph_capture_end(0, s)
        for _ in range(3):
            b.graph_replay(0, g, s)
        out = np.zeros(16, dtype=np.uint8)
        b.memcpy(0, out.ctypes.data, p, 16, "d2h", s)
        b.stream_synchronize(0, s)
        assert (out == 7).all()
        b.mempool_free_async(0, p, s)   # the last launch's allocation: freed by its owner
        b.stream_synchronize(0, s)
        b.graph_destroy(0, g)
    finally:
        b.stream_destroy(0, s)
