"""Rank script of ``test_review_s40_rev1.py`` (4 ranks): a 2 x 2 ``DeviceMesh`` made on rank
0 and sent to every rank (``broadcast_object_list`` pickles it), then sliced, flattened,
unflattened and its ``_get_all_submeshes`` listed on each rank. torch 2.15's gloo (the same
script under ``REALCODE_TORCH=1``, one process per rank) slices for the rank that slices:
``u["a"].mesh`` is this rank's column, its coordinate this rank's. accelrt sliced for the
rank that pickled it (rank 0's column and coordinate on every rank)."""

from __future__ import annotations

import os
import sys
import warnings

TORCH = bool(os.environ.get("REALCODE_TORCH"))
if TORCH:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
else:
    import accelrt.distributed as dist
    from accelrt.distributed.device_mesh import init_device_mesh

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rank_cases import Cases  # noqa: E402

warnings.simplefilter("ignore")   # torch's warning about unpickled meshes and torch.compile

dist.init_process_group("gloo")
rank = dist.get_rank()
case = Cases(rank, after=dist.barrier)
m = init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b"))
objs = [m if rank == 0 else None]
dist.broadcast_object_list(objs, src=0)
u = objs[0]
row, col = divmod(rank, 2)


@case
def the_received_mesh_is_rank_0s() -> None:
    assert u.mesh.tolist() == [[0, 1], [2, 3]] and u.get_coordinate() == (0, 0)


@case
def its_slices_are_this_ranks() -> None:
    assert u["a"].mesh.tolist() == [col, col + 2], u["a"].mesh.tolist()
    assert u["b"].mesh.tolist() == [2 * row, 2 * row + 1], u["b"].mesh.tolist()
    assert u["a"].get_coordinate() == (row,) and u["b"].get_coordinate() == (col,)


@case
def its_unflattened_mesh_is_this_ranks() -> None:
    v = u._unflatten("a", (2, 1), ("x", "y"))
    assert v.get_coordinate() == (row, 0, col), v.get_coordinate()


@case
def its_flattened_mesh_is_this_ranks() -> None:
    assert u._flatten("ab").get_coordinate() == (rank,)


@case
def its_groups_are_rank_0s_names() -> None:
    # the groups a rank-0 mesh names: rank 0's own, unknown elsewhere (torch's error)
    names = [u["a"].get_group, u["b"].get_group]
    for k, get in enumerate(names):
        mine = (col == 0) if k == 0 else (row == 0)
        if mine:
            assert dist.get_process_group_ranks(get()) == ([0, 2] if k == 0 else [0, 1])
        else:
            try:
                get()
            except RuntimeError as e:
                assert "Could not resolve the process group" in str(e)
            else:
                raise AssertionError("resolved another rank's group")


case.done()
dist.destroy_process_group()
