"""Findings of the session-37 hostile-input sweep of the runtime and memory surface (random,
memory, streams/events, comm, graphs, DLPack), and a stateful check of the caching allocator's
statistics under hostile sequences of private pools. Each ``test_`` named for a finding
failed before its fix; the torch behaviour is torch 2.15.0's (its CPU build run on the same
inputs, or its sources where the path is CUDA-only), written here as literals.
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt import memory
from accelrt.testing import leak_check

DEV = "cpu:0"


# ---------------------------------------------------------------------- findings

@pytest.mark.parametrize("pool", [(-1, -1), (-1, 0), (1 << 64, 0), (0, 1 << 64), (0, -(1 << 70))])
def test_a_graph_pool_id_outside_uint64_is_a_type_error(pool: tuple[int, int]) -> None:
    # torch 2.15: a pool id is MempoolId_t, a pair of unsigned long long (c10/core/
    # Allocator.h: CaptureId_t); the capture_begin binding refuses anything else with
    # TypeError ("incompatible function arguments"). Before: accepted, a private pool of
    # that id made (a segment with segment_pool_id (-1, -1) in memory_snapshot()).
    stream = acc.Stream(DEV)
    with leak_check():
        with pytest.raises(TypeError, match=r"pool id .* is out of range.*\[0, 2\*\*64\)"):
            acc.Graph(pool=pool)
        with pytest.raises(TypeError, match="is out of range"):
            with acc.graph(acc.Graph(), pool=pool, stream=stream):
                acc.empty(10, device=DEV)
        assert acc.current_stream(DEV) != stream   # nothing began: the stream not set
        assert memory.memory_snapshot() == [] or all(
            tuple(s["segment_pool_id"]) != pool for s in memory.memory_snapshot())
    stream.close()


def test_the_largest_graph_pool_id_is_still_one() -> None:
    g, stream = acc.Graph(pool=(0, (1 << 64) - 1)), acc.Stream(DEV)
    with acc.graph(g, stream=stream):
        a = acc.empty(10, device=DEV)
        a.fill_(1.0)
    g.replay()
    assert g.pool() == (0, (1 << 64) - 1)
    assert a.numpy().tolist() == [1.0] * 10
    del a
    g.reset()
    stream.close()
    gc.collect()
    memory.empty_cache()


@pytest.mark.parametrize("max_version, versioned", [
    ((1 << 70, 0), True), ((1 << 63, 0), True), ((1, 1 << 70), True),
    ((-(1 << 70), 0), False), ((0, 1 << 70), False)])
def test_dlpack_max_version_beyond_a_c_long(max_version: tuple[int, int],
                                            versioned: bool) -> None:
    # torch 2.15: t.__dlpack__(max_version=(2**70, 0)) is a "dltensor_versioned" capsule
    # (its __dlpack__ compares Python ints); (-2**70, 0) a legacy "dltensor" one. Before: the
    # host path passed the tuple to numpy, which raised OverflowError ("Python int too large
    # to convert to C long"); the opencl path already compared Python ints.
    a = acc.asarray(np.arange(4.0), device=DEV)
    capsule = a.__dlpack__(max_version=max_version)
    name = "dltensor_versioned" if versioned else "dltensor"
    assert f'capsule object "{name}"' in repr(capsule)

    class Producer:
        def __dlpack__(self, **kwargs: Any) -> Any:
            return a.__dlpack__(max_version=max_version)

        def __dlpack_device__(self) -> tuple[int, int]:
            return a.__dlpack_device__()

    assert np.from_dlpack(Producer()).tolist() == [0.0, 1.0, 2.0, 3.0]
