"""DeviceMesh cases run on every rank as ``OK``/``FAIL`` lines (tests/distributed/rank_cases.py):
1-D, 2-D and 3-D meshes, names, slicing (sub-meshes of sub-meshes), each dimension's groups
(an all_reduce on each gives the sum of the right ranks), coordinates, ``_flatten`` and
``_unflatten``, ``from_group``, meshes that leave ranks out, torch's errors, and
HF accelerate's ``ParallelismConfig.build_device_mesh`` (re-written short below).

The same file runs under torch 2.15's gloo (``REALCODE_TORCH=1``, one process per rank with
torchrun's variables) and under ``accelrt.distributed`` (``mpiexec -n N python -m
accelrt.distributed.run``, the only change the import): the values and errors asserted are
the ones torch gave, on 1, 2 and 4 ranks. ``argv[1]``: ``plain`` (the first mesh makes the
default group, as ``init_device_mesh`` does without one) or ``bound`` (accelrt only: a world
bound to ``cpu:0``, where each dimension's groups come from one ``split_group``; torch on a
CPU machine makes them with ``new_group`` there, so the group names are not compared).
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass

import numpy as np

TORCH = bool(os.environ.get("REALCODE_TORCH"))
if TORCH:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    def T(a):
        return torch.from_numpy(np.array(a, copy=True))
else:
    import accelrt as acc
    import accelrt.distributed as dist
    from accelrt.distributed.device_mesh import DeviceMesh, init_device_mesh

    def T(a):
        return acc.asarray(np.array(a, copy=True), device="cpu")

MODE = sys.argv[1]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rank_cases import Cases, raises  # noqa: E402

warnings.simplefilter("ignore")   # torch's deprecation of slicing a flattened dim off the root

assert not dist.is_initialized()
if MODE == "bound":
    dist.init_process_group("gloo", device_id="cpu:0")
    WORLD_MESH = init_device_mesh("cpu", (int(os.environ["WORLD_SIZE"]),),
                                  mesh_dim_names=("world",))
else:
    # no default group yet: init_device_mesh makes it (init_process_group())
    WORLD_MESH = init_device_mesh("cpu", (int(os.environ["WORLD_SIZE"]),),
                                  mesh_dim_names=("world",))
assert dist.is_initialized()
rank, n = dist.get_rank(), dist.get_world_size()
case = Cases(rank, after=dist.barrier)
NAMES = MODE != "bound"   # group names are torch's where groups are made as torch makes them


def ranks(g) -> list[int]:
    return dist.get_process_group_ranks(g)


def summed(g) -> float:
    """all_reduce of this rank's number over ``g``."""
    t = T(np.array([float(rank)]))
    dist.all_reduce(t, group=g)
    return float(t.tolist()[0])


def L(a) -> list:
    return a.tolist()


@case
def one_dim_world_mesh() -> None:
    m = WORLD_MESH
    assert L(m.mesh) == list(range(n)) and str(m.mesh.dtype).endswith("int32")
    assert (m.ndim, m.shape, m.size(), m.size(0)) == (1, (n,), n, n)
    assert m.mesh_dim_names == ("world",) and m.device_type == "cpu"
    assert m.get_coordinate() == (rank,) and m.get_local_rank() == rank == m.get_rank()
    assert m.get_group() is m.get_group("world") is m.get_group(0) is dist.group.WORLD
    assert m.get_all_groups() == [dist.group.WORLD] and m["world"] is m
    assert repr(m) == f"DeviceMesh((world={n}), 'cpu', stride=({'()' if n == 1 else 1},))", \
        repr(m)
    assert summed(m.get_group()) == n * (n - 1) / 2
    assert m == init_device_mesh("cpu", (n,), mesh_dim_names=("world",))
    assert hash(m) == hash(init_device_mesh("cpu", (n,), mesh_dim_names=("world",)))
    assert m != init_device_mesh("cpu", (n,)) and m != "mesh"


A = 2 if n >= 2 else 1
B = n // A


@case
def two_dim_mesh_groups_and_slices() -> None:
    m = init_device_mesh("cpu", (A, B), mesh_dim_names=("dp", "tp"))
    grid = np.arange(n).reshape(A, B)
    i, j = divmod(rank, B)
    assert L(m.mesh) == grid.tolist() and m.get_coordinate() == (i, j)
    assert (m.shape, m.size(1), m.size(-1)) == ((A, B), B, B)
    dp, tp = m.get_group("dp"), m.get_group("tp")
    assert m.get_all_groups() == [dp, tp] and m.get_group(-1) is tp
    assert ranks(dp) == grid[:, j].tolist() and ranks(tp) == grid[i].tolist()
    assert (m.get_local_rank("dp"), m.get_local_rank(1)) == (i, j)
    assert summed(dp) == float(grid[:, j].sum()) and summed(tp) == float(grid[i].sum())
    if NAMES:
        # the world group for a dimension spanning the whole world, else one group per line
        # (every line's group counted on every rank): torch 2.15's names
        names = [g.group_name for g in (dp, tp)]
        exp_dp = "0" if A == n else str(1 + j)
        exp_tp = "0" if B == n else str(1 + (0 if A == n else B) + i)
        assert names == [exp_dp, exp_tp], names
    sub = m["tp"]
    assert L(sub.mesh) == grid[i].tolist() and sub.get_coordinate() == (j,)
    assert sub.get_group() is tp and sub.get_local_rank() == j and sub.mesh_dim_names == ("tp",)
    assert L(m["dp"].mesh) == grid[:, j].tolist() and m["dp"].get_group() is dp
    assert m["dp", "tp"] is m and m[("dp", "tp")] is m
    assert m[["dp", "tp"]] is not m and m[["dp", "tp"]] == m
    assert sub["tp"] is sub and sub._get_root_mesh() is m
    stride = f"({B if A > 1 else '()'}, {1 if B > 1 else '()'})"
    assert repr(m) == f"DeviceMesh((dp={A}, tp={B}), 'cpu', stride={stride})", repr(m)
    ref = DeviceMesh("cpu", grid.tolist())
    assert ref == init_device_mesh("cpu", (A, B)) and ref != m
    assert ref.mesh_dim_names is None


C = 2 if n >= 4 else 1      # 3-D: (dp, cp, tp) = (C, B2, 1) with B2 = n // C
B2 = n // C


@case
def three_dim_mesh_slices_flatten_and_sub_of_sub() -> None:
    m = init_device_mesh("cpu", (C, B2, 1), mesh_dim_names=("dp", "cp", "tp"))
    grid = np.arange(n).reshape(C, B2, 1)
    i, j = divmod(rank, B2)
    assert m.get_coordinate() == (i, j, 0)
    assert [ranks(g) for g in m.get_all_groups()] == \
        [grid[:, j, 0].tolist(), grid[i, :, 0].tolist(), [rank]]
    dt = m["dp", "tp"]
    assert dt.mesh_dim_names == ("dp", "tp") and L(dt.mesh) == grid[:, j, :].tolist()
    assert dt.get_group("tp") is m.get_group("tp") and dt.get_coordinate() == (i, 0)
    assert L(dt["dp"].mesh) == grid[:, j, 0].tolist() and dt["dp"].get_group() is m.get_group(0)
    assert dt["tp"]._get_root_mesh() is m
    raises(KeyError, "Valid mesh_dim_names are \\['dp', 'tp'\\]", lambda: dt["cp"])
    if C > 1:
        raises(KeyError, "Mesh dim indices should be in ascending order", lambda: m["cp", "dp"])
        raises(RuntimeError, "Slicing overlapping dim_names", lambda: m["dp", "dp"])
    else:   # a size-1 dimension walks nowhere: torch slices it in any order, even twice
        assert m["cp", "dp"].shape == (B2, 1) and m["dp", "dp"].shape == (1, 1)
    flat = m["dp", "cp"]._flatten()
    assert flat.mesh_dim_names == ("dp_cp",) and L(flat.mesh) == list(range(n))
    assert flat.get_group() is m.get_group("dp_cp") and summed(flat.get_group()) == n * (n - 1) / 2
    assert m["dp", "cp"]._flatten("dp_cp") is flat and m["dp_cp"] == flat
    assert m._flatten_mapping == {"dp_cp": flat}
    raises(ValueError, "already exists for submesh", lambda: m["dp", "cp"]._flatten("dp"))
    if C > 1:
        raises(KeyError, "Mesh dim indices should be in ascending order",
               lambda: m["dp_cp", "dp"])
    elif B2 > 1:   # ("dp_cp" is "cp" there)
        raises(RuntimeError, "Slicing overlapping dim_names", lambda: m["dp_cp", "cp"])
    ct = m["cp", "tp"]._flatten("cp_tp")
    assert L(ct.mesh) == grid[i].ravel().tolist() and summed(ct.get_group()) == float(grid[i].sum())
    if B2 > 1:
        raises(ValueError, "has been created before", lambda: m["dp"]._flatten("cp_tp"))


@case
def unflatten_the_world_as_torchtitan() -> None:
    # torchtitan's ParallelDims.build_mesh: a ("world",) mesh cut into named dimensions
    data = WORLD_MESH._unflatten(0, (A, B), ("batch", "tp"))
    grid = np.arange(n).reshape(A, B)
    i, j = divmod(rank, B)
    assert data.mesh_dim_names == ("batch", "tp") and L(data.mesh) == grid.tolist()
    assert ranks(data.get_group("batch")) == grid[:, j].tolist()
    assert summed(data.get_group("tp")) == float(grid[i].sum())
    loss = data["batch", "tp"]._flatten("loss")
    assert L(loss.mesh) == list(range(n)) and loss._get_root_mesh() is WORLD_MESH
    dense = WORLD_MESH._unflatten("world", (1, A, B), ("pp", "dp_replicate", "fsdp"))
    assert dense.shape == (1, A, B) and ranks(dense.get_group("fsdp")) == grid[i].tolist()
    inner = data["tp"]._unflatten(0, (B, 1), ("t1", "t2"))
    assert L(inner.mesh) == grid[i].reshape(B, 1).tolist()
    raises(ValueError, "must be equal for unflatten",
           lambda: data._unflatten(0, (A, 2), ("p", "q")))
    raises(ValueError, "specified in `_unflatten` is not in",
           lambda: data._unflatten("zz", (A,), ("p",)))
    raises(ValueError, "is out of range 2", lambda: data._unflatten(2, (1,), ("p",)))
    raises(RuntimeError, "must have same length as mesh_sizes",
           lambda: data._unflatten(1, (B,), ("p", "q")))


@case
def meshes_that_leave_ranks_out() -> None:
    half = max(n // 2, 1)
    m = init_device_mesh("cpu", (half,), mesh_dim_names=("part",))
    assert L(m.mesh) == list(range(half)) and m.size() == half
    if rank < half:
        assert m.get_coordinate() == (rank,) and ranks(m.get_group()) == list(range(half))
        assert summed(m.get_group()) == half * (half - 1) / 2
    else:
        assert m.get_coordinate() is None and m.get_rank() == rank
        raises(IndexError, "", lambda: m.get_group())
        raises(IndexError, "", lambda: m.get_local_rank())
    grid = np.arange(n)[::-1].reshape(A, B)       # the ranks in reverse order
    r = DeviceMesh("cpu", grid.tolist(), mesh_dim_names=("x", "y"))
    i, j = [int(c) for c in np.argwhere(grid == rank)[0]]
    assert r.get_coordinate() == (i, j) and L(r["y"].mesh) == grid[i].tolist()
    # group ranks are sorted (a permuted whole world is the world group) where new_group
    # makes them; split_group (a bound world, torch's too) keeps the mesh's order ...
    order = (lambda x: x) if MODE == "bound" else sorted
    assert ranks(r.get_group("y")) == order(grid[i].tolist())
    assert ranks(r.get_group("x")) == (order(grid[:, j].tolist()) if A < n else
                                       sorted(grid[:, j].tolist()))
    # ... unless preserve_rank_order=True
    p = DeviceMesh("cpu", grid.tolist(), mesh_dim_names=("x", "y"), preserve_rank_order=True)
    assert ranks(p.get_group("y")) == grid[i].tolist()
    assert p.get_local_rank("y") == j and p != r


@case
def from_group_meshes() -> None:
    m = init_device_mesh("cpu", (A, B), mesh_dim_names=("dp", "tp"))
    grid = np.arange(n).reshape(A, B)
    i, j = divmod(rank, B)
    tp = m.get_group("tp")
    one = DeviceMesh.from_group(tp, "cpu", mesh_dim_names=("tp",))
    assert L(one.mesh) == grid[i].tolist() and one.get_group() is tp
    assert one.get_coordinate() == (j,) and one.get_local_rank() == j
    raises(ValueError, "Invalid mesh", lambda: DeviceMesh.from_group(tp, "cpu", [n + 7]))
    two = DeviceMesh.from_group([m.get_group("dp"), tp], "cpu", grid.tolist(),
                                mesh_dim_names=("a", "b"))
    assert two.get_group("a") is m.get_group("dp") and L(two["b"].mesh) == grid[i].tolist()
    assert two.get_coordinate() == (i, j)
    raises(ValueError, "Expects at least one ProcessGroup",
           lambda: DeviceMesh.from_group([], "cpu"))
    raises(ValueError, "Must pass mesh if", lambda: DeviceMesh.from_group([tp], "cpu"))
    raises(ValueError, "Must pass mesh_dim_names", lambda: DeviceMesh.from_group([tp], "cpu", [0]))
    raises(ValueError, "Expects mesh with ndim equal",
           lambda: DeviceMesh.from_group([tp, tp], "cpu", [0], mesh_dim_names=("a", "b")))


@case
def torch_errors() -> None:
    m = init_device_mesh("cpu", (A, B), mesh_dim_names=("dp", "tp"))
    raises(RuntimeError, "Mesh should not be bigger than default world size",
           lambda: init_device_mesh("cpu", (n + 1,)))
    raises(RuntimeError, "Each mesh_dim_name must be unique",
           lambda: init_device_mesh("cpu", (A, B), mesh_dim_names=("dp", "dp")))
    raises(RuntimeError, "mesh_shape and mesh_dim_names should have same length",
           lambda: init_device_mesh("cpu", (n,), mesh_dim_names=("dp", "tp")))
    raises(RuntimeError, "Device type with index is not supported",
           lambda: init_device_mesh("cpu:0", (n,)))
    raises(RuntimeError, "Found invalid keys in backend_override",
           lambda: init_device_mesh("cpu", (n,), backend_override={3: "gloo"}))
    raises(RuntimeError, "Found redundant dim index",
           lambda: init_device_mesh("cpu", (n,), mesh_dim_names=("w",),
                                    backend_override={0: "gloo", "w": "gloo"}))
    raises(KeyError, "Invalid mesh_dim_names", lambda: m["pp"])
    raises(RuntimeError, "Cannot slice a DeviceMesh without mesh_dim_names",
           lambda: init_device_mesh("cpu", (n,))["dp"])
    raises(RuntimeError, "`mesh_dim` needs to be specified", lambda: m.get_group())
    raises(RuntimeError, "`mesh_dim` needs to be specified", lambda: m.get_local_rank())
    raises(KeyError, "Mesh dimension 'pp' does not exist", lambda: m.get_group("pp"))
    raises(IndexError, "", lambda: m.get_group(2))
    raises(IndexError, "", lambda: m.size(2))
    raises(AssertionError, "mesh_dim must be an int", lambda: m.get_group(1.0))
    raises(RuntimeError, "Cannot flatten a DeviceMesh without mesh_dim_names",
           lambda: init_device_mesh("cpu", (n,))._flatten())
    raises(RuntimeError, "DeviceMesh process groups not initialized",
           lambda: DeviceMesh("cpu", [0], _init_backend=False).get_group())
    raises(TypeError, "mesh argument is required", lambda: DeviceMesh("cpu"))


@case
def accelrt_checks_the_groups_of_from_group() -> None:
    # accelrt only (docs/differences.md): torch takes groups that are not the mesh's lines,
    # and dimension 0's collectives then run on the ranks of the group given for it
    if TORCH or n == 1:
        return
    m = init_device_mesh("cpu", (A, B), mesh_dim_names=("dp", "tp"))
    grid = np.arange(n).reshape(A, B).tolist()
    raises(ValueError, "this rank's line of the mesh along that dimension",
           lambda: DeviceMesh.from_group([m.get_group("tp"), m.get_group("dp")], "cpu", grid,
                                         mesh_dim_names=("a", "b")))


# ------------------------------------------------------------------------------------------
# HF accelerate, src/accelerate/parallelism_config.py: ParallelismConfig's mesh (Apache-2.0;
# re-written short: the sizes, the canonical dimension order, build_device_mesh and its
# flattened dims "dp", "dp_shard_cp" and "dp_cp"; sequence parallelism left out)
@dataclass
class ParallelismConfig:
    dp_replicate_size: int = 1
    dp_shard_size: int = 1
    tp_size: int = 1
    cp_size: int = 1

    @property
    def _sizes(self) -> dict[str, int]:
        return {"dp_replicate": self.dp_replicate_size, "dp_shard": self.dp_shard_size,
                "tp": self.tp_size, "cp": self.cp_size}

    @property
    def dp_dim_names(self) -> list[str]:
        return [d for d in ("dp_replicate", "dp_shard") if self._sizes[d] > 1]

    @property
    def non_dp_dim_names(self) -> list[str]:
        return [d for d in ("tp", "cp") if self._sizes[d] > 1]

    @property
    def dp_shard_cp_dim_names(self) -> list[str]:
        return [d for d in ("dp_shard", "cp") if self._sizes[d] > 1]

    @property
    def dp_cp_dim_names(self) -> list[str]:
        return [d for d in ("dp_replicate", "dp_shard", "cp") if self._sizes[d] > 1]

    def _get_mesh(self):
        mesh_dims = {p: self._sizes[p] for p in self.dp_dim_names + self.non_dp_dim_names}
        order = ["dp_replicate", "dp_shard", "cp", "sp", "tp"]
        return tuple(zip(*sorted(mesh_dims.items(), key=lambda x: order.index(x[0]))))

    def build_device_mesh(self, device_type: str):
        mesh = self._get_mesh()
        if len(mesh) == 0:
            return None
        mesh_dim_names, mesh_shape = mesh
        device_mesh = init_device_mesh(device_type, mesh_shape, mesh_dim_names=mesh_dim_names)
        self._flattened_meshes = {}
        if self.dp_dim_names:
            self._flattened_meshes["dp"] = device_mesh[self.dp_dim_names]._flatten("dp")
        if self.dp_shard_cp_dim_names:
            self._flattened_meshes["dp_shard_cp"] = \
                device_mesh[self.dp_shard_cp_dim_names]._flatten("dp_shard_cp")
        if self.dp_cp_dim_names:
            self._flattened_meshes["dp_cp"] = device_mesh[self.dp_cp_dim_names]._flatten("dp_cp")
        return device_mesh


@case
def accelerate_parallelism_config_mesh() -> None:
    if n == 1:
        assert ParallelismConfig().build_device_mesh("cpu") is None
        return
    # HSDP x TP on 4 ranks (2 x 1 x 2), FSDP x TP on 2 (1 x 1 x 2: dp_shard disabled)
    cfg = ParallelismConfig(dp_replicate_size=2, dp_shard_size=1, tp_size=n // 2) if n == 4 \
        else ParallelismConfig(tp_size=2)
    mesh = cfg.build_device_mesh("cpu")
    grid = np.arange(n).reshape(mesh.shape)
    if n == 4:
        assert mesh.mesh_dim_names == ("dp_replicate", "tp") and mesh.shape == (2, 2)
        i, j = divmod(rank, 2)
        dp = cfg._flattened_meshes["dp"]
        assert L(dp.mesh) == grid[:, j].tolist() and dp.get_group() is mesh.get_group("dp")
        assert summed(mesh.get_group("dp_cp")) == float(grid[:, j].sum())
        assert "dp_shard_cp" not in cfg._flattened_meshes
        assert summed(mesh["tp"].get_group()) == float(grid[i].sum())
    else:
        assert mesh.mesh_dim_names == ("tp",) and cfg._flattened_meshes == {}
        assert mesh.get_group() is dist.group.WORLD


case.done()
dist.destroy_process_group()
