"""The NCCL engine makes its communicator on its rank's GPU (session 40).

NCCL's ``ncclCommInitRank*`` makes the communicator on the device whose context is current
in the calling thread (``cudaGetDevice``). accelrt's current device index is its own
bookkeeping and does not switch the driver's context, so ``NcclEngine.create`` must make the
bound device's primary context current itself (torch's ProcessGroupNCCL guards the device
before it initialises NCCL). Before the fix a rank bound to ``cuda:1`` in a thread that last
used ``cuda:0`` made its communicator on GPU 0. Here nccl4py and the CUDA backend are
stand-ins that record which device's context is current when the communicator is made; the
same check against the real nccl4py (down to its bindings module) and the real
``cuda.bindings`` is tests/backends/test_cuda_calls_s40.py's, where nccl4py is installed.
"""

from __future__ import annotations

from typing import Any

import pytest

import accelrt._device as device_mod
from accelrt.distributed import _nccl
from accelrt.distributed._engine import EngineContext


class _Backend:
    """The CUDA backend's part NcclEngine.create uses: the thread's current context."""

    name = "cuda"

    def __init__(self, current: int) -> None:
        self.current = current

    def init_device(self, index: int) -> None:
        self.current = index


@pytest.mark.parametrize(("bound", "before"), [(1, 0), (0, 1), (1, 1)])
def test_the_communicator_is_made_with_the_bound_devices_context_current(
        monkeypatch: pytest.MonkeyPatch, bound: int, before: int) -> None:
    b = _Backend(before)
    made_on: list[int] = []

    class Comm:
        nranks, rank = 2, 0

        def get_async_error(self) -> int:
            return 0

    class FakeCore:
        class NCCLConfig:
            def __init__(self, blocking: bool) -> None:
                assert blocking is False

        class Communicator:
            @staticmethod
            def init(nranks: int, rank: int, uid: Any, config: Any = None) -> Comm:
                made_on.append(b.current)   # what NCCL's cudaGetDevice would answer
                return Comm()

    monkeypatch.setattr(_nccl, "_core", lambda: FakeCore)
    monkeypatch.setattr(device_mod, "set_device_index", lambda dev: None)
    monkeypatch.setattr(device_mod, "_get_device",
                        lambda dev, **kw: (b, int(str(dev).rsplit(":", 1)[1])))
    monkeypatch.setattr(_nccl, "_wait_ready", lambda *a: None)
    ctx = EngineContext(0, 2, [0, 1], "cuda", bound, 5.0, None)
    ctx.options["unique_id"] = object()
    eng = _nccl.NcclEngine.create(ctx)
    assert made_on == [bound] and eng.device == bound
