"""Review of the s40 merges (rev1), distributed part: ``init_device_mesh`` checks a shape
against the world before it makes the array of ranks (torch 2.15 makes ``torch.arange`` of the
whole shape first, so a huge shape was accelrt's ``MemoryError`` too, or gigabytes filled
before the error)."""

from __future__ import annotations

import math
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import accelrt.distributed as dist
from accelrt.distributed.device_mesh import init_device_mesh

SRC = str(Path(__file__).resolve().parents[2] / "src")


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


_HASHED = """
import pickle, sys
import accelrt.distributed as dist
from accelrt.distributed.device_mesh import init_device_mesh
dist.init_process_group("cpu:mpi")
m = init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
if sys.argv[1] == "dump":
    hash(m)
    sys.stdout.buffer.write(pickle.dumps(m))
else:
    u = pickle.loads(sys.stdin.buffer.read())
    print(u == m, hash(u) == hash(m), len({u: 1, m: 2}))
dist.destroy_process_group()
"""


def test_an_unpickled_mesh_hashes_as_its_equal_copy() -> None:
    # a mesh hashed (its hash cached), pickled, and loaded in a process whose str hashes
    # differ: equal to that process's copy, it hashed differently, so a dict keyed by meshes
    # held both (torch 2.15's pickles its cached hash too: the same)
    pytest.importorskip("mpi4py")
    env = dict(os.environ, PYTHONPATH=SRC)
    dump = subprocess.run([sys.executable, "-c", _HASHED, "dump"], capture_output=True,
                          env=dict(env, PYTHONHASHSEED="1"), timeout=60, check=True)
    load = subprocess.run([sys.executable, "-c", _HASHED, "load"], input=dump.stdout,
                          capture_output=True, env=dict(env, PYTHONHASHSEED="2"), timeout=60)
    assert load.returncode == 0, load.stderr[-2000:]
    assert load.stdout.decode().split() == ["True", "True", "1"]


@pytest.mark.parametrize("shape, names", [((1,), ("w",)), ((1, 1), ("a", "b"))],
                         ids=["1-D", "2-D"])
def test_unflatten_needs_the_new_names(one_rank_world: None, shape: tuple,
                                       names: tuple) -> None:
    # torch 2.15: TypeError (len(None)). accelrt made a 1-D mesh's cut without any names and
    # failed inside for a 2-D one (IndexError while naming the new groups)
    m = init_device_mesh("cpu", shape, mesh_dim_names=names)
    before = dist.get_pg_count()
    with pytest.raises(TypeError, match="mesh_dim_names must be a tuple of str, one per size"):
        m._unflatten(0, (1, 1), None)  # type: ignore[arg-type]
    assert dist.get_pg_count() == before   # no group was made


def test_a_bad_device_type_makes_no_default_group() -> None:
    # the shape's check against the world (above) inits the default group: the device type
    # is checked before it, as DeviceMesh checks it before its groups
    pytest.importorskip("mpi4py")
    assert not dist.is_initialized()
    try:
        with pytest.raises(RuntimeError, match="Device type with index"):
            init_device_mesh("cpu:0", (1,))
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
