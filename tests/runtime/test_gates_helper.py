"""The ordering tests' gate helper (``tests/helpers/gates.py``) on the CUDA wait path, without
a GPU: a CUDA driver wait spins (``CU_CTX_SCHED_AUTO`` with one context), so the waiting
thread reads as *running* in ``/proc``. ``open_when_blocked`` waited for "sleeping" only, never
opened its gate on a GPU, and the test_lifetimes ordering tests on ``cuda`` hung until
pytest-timeout."""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from types import SimpleNamespace

from helpers.gates import _blocked, _in_driver_wait


def test_a_spinning_cuda_driver_wait_reads_as_blocked() -> None:
    from accelrt.backends.cuda._streams import CudaStreams

    # a C call that keeps its thread running (not sleeping) with the GIL released, as the
    # driver's spin-wait does: the innermost Python frame is the backend's synchronize()
    spin = functools.partial(hashlib.pbkdf2_hmac, "sha256", b"gate", b"spin", 1_000_000, 1)
    stub = SimpleNamespace(_use=lambda index: None, _capturing={},
                           _drv=SimpleNamespace(cuCtxSynchronize=spin),
                           _raise_host_error=lambda index, stream: None)

    def wait() -> None:
        try:
            CudaStreams.synchronize(stub, 0)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001, S110 - the spin's bytes are no CUresult: irrelevant
            pass

    t = threading.Thread(target=wait)
    t.start()
    assert t.ident is not None and t.native_id is not None
    seen: list[tuple[int, int]] = []
    found = False
    while t.is_alive() and not found:
        found = _blocked(t.ident, t.native_id, seen)
        time.sleep(0)   # yield the GIL: polling a state, not ordering work
    t.join()
    assert found, "a thread inside cuCtxSynchronize was never seen as blocked"


def test_only_a_driver_wait_line_counts() -> None:
    import sys
    assert not _in_driver_wait(sys._getframe())
