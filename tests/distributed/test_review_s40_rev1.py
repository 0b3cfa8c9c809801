"""Review of the s40 merges (rev1), distributed part: ``init_device_mesh`` checks a shape
against the world before it makes the array of ranks (torch 2.15 makes ``torch.arange`` of the
whole shape first, so a huge shape was accelrt's ``MemoryError`` too, or gigabytes filled
before the error)."""

from __future__ import annotations

import math

import pytest

import accelrt.distributed as dist
from accelrt.distributed.device_mesh import init_device_mesh


@pytest.mark.parametrize("shape", [(2**40,), (2**21, 2**21), (2**31,)],
                         ids=["2**40", "2**21 x 2**21", "2**31"])
def test_a_huge_shape_is_the_world_size_error(one_rank_world: None, shape: tuple) -> None:
    with pytest.raises(RuntimeError, match="bigger than default world size 1, but found "
                       f"{math.prod(shape)} ranks"):
        init_device_mesh("cpu", shape, mesh_dim_names=tuple("ab"[:len(shape)]))
    assert dist.get_pg_count() == 1   # no group was made
