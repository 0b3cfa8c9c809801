"""Session-40 leftovers: small differences from torch 2.15 left by the last sessions. Each test
failed before its fix. The expected behaviour is torch 2.15.0's, observed on its CPU build with
the same inputs (or read in its sources where the path needs CUDA), written here as literals.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import types
from typing import Any

import numpy as np
import pytest

import accelrt as acc

# ------------------------------------------------- 2. Stream(priority=...) is an int64_t argument

_STREAMS = [
    pytest.param(lambda v: acc.Stream("cpu", priority=v), id="acc.Stream"),
    pytest.param(lambda v: acc.cpu.Stream(priority=v), id="acc.cpu.Stream"),
    pytest.param(lambda v: acc.cpu.Stream("cpu", v), id="acc.cpu.Stream-positional"),
]


class _Index:
    """An object with ``__index__`` alone (torch's int64_t parser refuses it)."""

    def __index__(self) -> int:
        return 0


@pytest.mark.parametrize("make", _STREAMS)
@pytest.mark.parametrize("value", [np.array(0), np.array(-1, dtype=np.int32), np.array([0]),
                                   np.array(0.0), _Index()],
                         ids=["0d", "0d-int32", "1-element", "0d-float", "__index__"])
def test_priority_refuses_arrays_and_index_objects(make: Any, value: object) -> None:
    # torch 2.15: torch.Stream("cpu", priority=np.array(0)) raises TypeError "Stream():
    # argument 'priority' must be int, not numpy.ndarray" (not int, not I for an object
    # with __index__ alone); accelrt read a 0-d array (and any __index__) as its value
    with pytest.raises(TypeError, match=rf"^priority must be an int, got "
                                        rf"{'numpy.ndarray' if isinstance(value, np.ndarray) else '_Index'}$"):
        make(value)


@pytest.mark.parametrize("make", _STREAMS)
def test_priority_still_takes_ints_numpy_integers_and_0d_integer_arrays_of_accelrt(
        make: Any) -> None:
    class Sub(int):
        def __index__(self) -> int:
            return 5      # read by its value, as torch's C++ reads it
    for v, want in ((-1, -1), (np.int64(-1), -1), (np.int8(0), 0), (Sub(-1), -1),
                    (acc.asarray(np.array(-1)), -1)):
        s = make(v)
        assert s.priority == want and type(s.priority) is int
        s.close()
    for bad, name in ((acc.asarray(np.array([0])), "Array"), (acc.asarray(np.array(0.0)), "Array"),
                      (acc.asarray(np.array(False)), "Array"), (True, "bool"),
                      (np.False_, "numpy.bool"), (0.0, "float")):
        with pytest.raises(TypeError, match=rf"^priority must be an int, got {name}$"):
            make(bad)


class _FakeTensor:
    """Enough of a torch.Tensor for torch's int64_t rule: 0-d, integral, no grad."""

    def __init__(self, value: int, dtype: object, dim: int = 0, grad: bool = False) -> None:
        self.value, self.dtype, self._dim, self.requires_grad = value, dtype, dim, grad

    def dim(self) -> int:
        return self._dim

    def __index__(self) -> int:
        return self.value


def test_priority_takes_a_0d_integer_torch_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch 2.15: torch.Stream("cpu", priority=torch.tensor(-1)) is priority -1; a float,
    # bool or 1-element tensor is refused ("must be int, not Tensor")
    fake: Any = types.ModuleType("torch")
    fake.Tensor = _FakeTensor
    for n in ("int64", "int32", "bool", "float32"):
        setattr(fake, n, object())
    monkeypatch.setitem(sys.modules, "torch", fake)
    s = acc.Stream("cpu", priority=_FakeTensor(-1, fake.int32))  # type: ignore[arg-type]
    assert s.priority == -1
    s.close()
    for bad in (_FakeTensor(0, fake.bool), _FakeTensor(0, fake.float32),
                _FakeTensor(0, fake.int64, dim=1), _FakeTensor(0, fake.int64, grad=True)):
        with pytest.raises(TypeError, match=r"^priority must be an int, got _FakeTensor$"):
            acc.Stream("cpu", priority=bad)  # type: ignore[arg-type]


def test_priority_of_a_wrapped_stream_is_read_the_same_way() -> None:
    s = acc.Stream("cpu")
    try:
        with pytest.raises(TypeError, match=r"^priority must be an int, got numpy.ndarray$"):
            acc.Stream(stream_id=s.stream_id, device_index=0, device_type="cpu",
                       priority=np.array(1))  # type: ignore[arg-type]
    finally:
        s.close()


# ------------------------------------------- 4. accelrt.<device module>.comm is importable


@pytest.mark.parametrize("name", ["cpu", "cuda", "opencl"])
def test_comm_of_every_device_module_is_importable(name: str) -> None:
    # torch 2.15: `import torch.cuda.comm` and `from torch.cuda.comm import broadcast` work
    # (torch.cuda.comm is torch.nn.parallel.comm's functions); accelrt.cuda.comm was an
    # attribute only (ModuleNotFoundError: 'accelrt.cuda' is not a package) and accelrt.cpu
    # and accelrt.opencl had none. A fresh interpreter: the import must find it by itself.
    code = (f"import sys\n"
            f"import accelrt.{name}.comm as c\n"
            f"from accelrt.{name}.comm import broadcast, reduce_add\n"
            f"import accelrt, accelrt.comm\n"
            f"from accelrt.{name} import comm\n"
            f"assert c is comm is accelrt.comm is accelrt.{name}.comm, c\n"
            f"assert broadcast is accelrt.comm.broadcast and 'comm' in accelrt.{name}.__all__\n"
            "bad = [m for m in ('pyopencl', 'cuda.bindings', 'pynvml', 'nvtx') "
            "if m in sys.modules]\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr


def test_every_submodule_attribute_of_a_device_module_is_importable() -> None:
    # torch.cuda's submodules that accelrt's device modules have as attributes (listed from
    # torch 2.15: amp, comm, gds, graph_annotations, graphs, green_contexts, jiterator,
    # memory, nccl, nvtx, profiler, random, sparse, streams, tunable)
    torch_cuda = ("amp", "comm", "gds", "graph_annotations", "graphs", "green_contexts",
                  "jiterator", "memory", "nccl", "nvtx", "profiler", "random", "sparse",
                  "streams", "tunable")
    for name in ("cpu", "cuda", "opencl"):
        mod = getattr(acc, name)
        have = [n for n in torch_cuda if isinstance(getattr(mod, n, None), types.ModuleType)]
        assert {"comm", "graphs", "memory", "nvtx", "profiler", "random", "streams"} <= set(have)
        for n in have:
            assert importlib.import_module(f"accelrt.{name}.{n}") is getattr(mod, n), (name, n)
