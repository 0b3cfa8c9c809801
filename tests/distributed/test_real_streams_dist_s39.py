"""Stream and event choreography of real distributed code (s39), ported by changing the import
and run on 2 ranks with accelrt's launcher, asynchronous cpu streams and two devices per rank:
PyTorch FSDP2's copy-in / all-gather / reduce-scatter streams and events
(``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``, ``_fsdp_collectives.py``:
``foreach_all_gather`` with ``all_gather_single`` sync and async, ``wait_for_unshard``,
``foreach_reduce`` with ``reduce_scatter_single``, the post-reduce events waited on by the
current stream, streams as dict keys), DeepSpeed ZeRO-3's ``fetch_sub_module`` (all-gathers
on a stream, event backpressure with ``query()``/``synchronize()``, ``wait_stream``) and
Megatron-LM's overlapped grad reduce (``async_op=True`` on a communication stream that waits
for the current one, ``handle.wait()``, ``current_stream().wait_stream``). The rank script is
``real_streams_ranks_s39.py``; every stream that real code orders after another is held by a
gate while the consumer is queued, so a missing order shows as wrong values.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
HERE = Path(__file__).parent


def test_real_stream_choreography_on_two_ranks() -> None:
    """Four cases per rank (FSDP2 all-gather, FSDP2 reduce-scatter, ZeRO-3 fetch, Megatron
    grad reduce), each checking the values the consumer stream saw."""
    from test_distributed import MPIEXEC, _check_cases, launch
    if not HAVE_MPI or MPIEXEC is None:
        pytest.skip("needs mpi4py and mpiexec (pip install 'accelrt[mpi]')")
    rc, out, _ = launch(2, str(HERE / "real_streams_ranks_s39.py"),
                        env={"ACCELRT_CPU_STREAMS": "async", "ACCELRT_CPU_DEVICES": "2"},
                        timeout=90)
    assert _check_cases(2, out, rc) == 4, out[-3000:]
