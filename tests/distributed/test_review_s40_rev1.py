"""Review of the s40 merges (rev1), distributed part: ``init_device_mesh`` checks a shape
against the world before it makes the array of ranks (torch 2.15 makes ``torch.arange`` of the
whole shape first, so a huge shape was accelrt's ``MemoryError`` too, or gigabytes filled
before the error)."""

from __future__ import annotations

import math
import pickle

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


def test_a_mesh_from_another_rank_is_sliced_for_this_rank() -> None:
    """A 2 x 2 mesh pickled on rank 0 and sliced on each of 4 ranks (torch 2.15 gloo passed
    every case of the script): the slices, the unflattened and flattened meshes are this
    rank's; accelrt's were rank 0's (its rank was kept in the mesh, torch asks get_rank())."""
    from test_device_mesh_s40 import _launcher
    check, launch = _launcher()
    rc, out, _ = launch(4, "review_s40_rev1_ranks.py", timeout=90)
    assert check(4, out, rc) == 5, out[-3000:]


def test_slicing_a_mesh_needs_the_default_group(one_rank_world: None) -> None:
    # torch 2.15: a mesh unpickled where no default group exists keeps its coordinate, but
    # slicing it asks get_rank(): "Default process group has not been initialized"
    m = init_device_mesh("cpu", (1, 1), mesh_dim_names=("a", "b"))
    data = pickle.dumps(m)
    dist.destroy_process_group()
    u = pickle.loads(data)
    assert u.get_coordinate() == (0, 0) and u.mesh.tolist() == [[0]]
    for call in (lambda: u["a"], lambda: u._unflatten("a", (1, 1), ("x", "y"))):
        with pytest.raises(ValueError, match="Default process group has not been initialized"):
            call()
