"""``accelrt.distributed.device_mesh``: torch 2.15's ``DeviceMesh`` / ``init_device_mesh`` on
accelrt's process groups (it was listed as left out; the module did not exist).

The rank script (``device_mesh_ranks_s40.py``) runs on 1, 2 and 4 ranks with accelrt's
launcher; it also runs under torch 2.15.0's gloo (``REALCODE_TORCH=1``, one process per rank
with torchrun's variables), where every case passed on the same inputs: its assertions are
torch's answers (meshes of 1 to 3 dimensions, names, slicing, each dimension's groups and an
all_reduce on each, coordinates, ``_flatten``/``_unflatten``, ``from_group``, meshes that
leave ranks out, torch's errors, and HF accelerate's ``ParallelismConfig.build_device_mesh``).
The tests below, in a world of one rank, cover what only accelrt does: its checks of hostile
arguments (docs/differences.md), the device choice, copies and pickling.
"""

from __future__ import annotations

import importlib.util
import pickle
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accelrt as acc
import accelrt.distributed as dist
from accelrt.distributed import _mesh_layout as L
from accelrt.distributed import device_mesh as dm
from accelrt.distributed.device_mesh import DeviceMesh, init_device_mesh

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
HERE = Path(__file__).parent


def _launcher():
    from test_distributed import MPIEXEC, _check_cases, launch
    if not HAVE_MPI or MPIEXEC is None:
        pytest.skip("needs mpi4py and mpiexec (pip install 'accelrt[mpi]')")
    return _check_cases, launch


@pytest.mark.parametrize("n, mode", [(1, "plain"), (2, "plain"), (4, "plain"), (4, "bound")],
                         ids=["n1", "n2", "n4", "n4-bound"])
def test_device_mesh_on_ranks(n: int, mode: str) -> None:
    """Nine cases per rank, each torch 2.15 gloo's answer; ``bound``: a world bound to cpu:0,
    whose dimensions' groups come from one split_group each (as torch's with a GPU)."""
    check, launch = _launcher()
    rc, out, _ = launch(n, "device_mesh_ranks_s40.py", mode, timeout=90)
    assert check(n, out, rc) == 9, out[-3000:]


def test_names_are_torch_distributed_names() -> None:
    assert dist.DeviceMesh is DeviceMesh and dist.init_device_mesh is init_device_mesh
    assert dist.device_mesh is dm and dm.__all__ == ["DeviceMesh", "init_device_mesh"]
    assert {"DeviceMesh", "init_device_mesh"} <= set(dist.__all__)


def test_init_device_mesh_makes_the_default_group() -> None:
    if not HAVE_MPI:
        pytest.skip("needs mpi4py")
    assert not dist.is_initialized()
    try:
        m = init_device_mesh("cpu", [1], mesh_dim_names=["w"])   # lists, as torchtitan's
        assert dist.is_initialized() and m.get_group() is dist.group.WORLD
        assert m.mesh_dim_names == ("w",) and m.get_coordinate() == (0,)
    finally:
        dist.destroy_process_group()


BAD_MESHES = [
    ([0.5], TypeError, "must hold int ranks"),           # torch truncates floats to ints
    ([True], TypeError, "must hold int ranks"),
    ("0", TypeError, "array of int ranks"),
    ([[0], [1, 2]], ValueError, "rectangular"),
    ([], AssertionError, "names no rank"),
    ([-1], ValueError, "which is no rank"),
    ([2**40], ValueError, "which is no rank"),
    ([0, 0], ValueError, "more than once"),              # torch: a world group of [0, 0]
    ([1], ValueError, "not a rank of the world"),        # torch: the world group
]


@pytest.mark.parametrize("mesh, exc, words", BAD_MESHES, ids=[repr(m) for m, *_ in BAD_MESHES])
def test_bad_meshes_are_refused(one_rank_world: None, mesh: Any, exc: type, words: str) -> None:
    with pytest.raises(exc, match=words):
        DeviceMesh("cpu", mesh)
    assert dist.get_pg_count() == 1   # no group was made


@pytest.mark.parametrize("call, exc, words", [
    (lambda: DeviceMesh("foo", [0]), acc.BackendUnavailableError, "unknown device type 'foo'"),
    (lambda: DeviceMesh("CPU", [0]), RuntimeError, "lower case"),
    (lambda: DeviceMesh("cuda:0", [0]), RuntimeError, "Device type with index"),
    (lambda: DeviceMesh(acc.device("cpu"), [0]), TypeError, "pass device.type"),
    (lambda: DeviceMesh("cpu", [0], mesh_dim_names="a"), TypeError, r"write \('a',\)"),
    (lambda: DeviceMesh("cpu", [0], mesh_dim_names=(1,)), TypeError, "must be a str"),
    (lambda: DeviceMesh("cpu", [0], mesh_dim_names=("a", "b")), RuntimeError, "same length"),
    (lambda: DeviceMesh("cpu", [[0]], mesh_dim_names=("a", "a")), ValueError, "unique"),
    (lambda: init_device_mesh("cpu", 1), TypeError, "tuple of ints"),
    (lambda: init_device_mesh("cpu", (1.0,)), TypeError, "must be an int"),
    (lambda: init_device_mesh("cpu", (True,)), TypeError, "must be an int"),
    (lambda: init_device_mesh("cpu", (0,)), AssertionError, "at least 1"),
    (lambda: init_device_mesh("cpu", (-1,)), RuntimeError, "at least 1"),
    (lambda: init_device_mesh("cpu", (2,)), RuntimeError, "bigger than default world size 1"),
    (lambda: init_device_mesh("cpu", (1,), backend_override=[0]), TypeError, "a dict"),
    (lambda: init_device_mesh("cpu", (1,), backend_override={0: 3}), TypeError, "backend name"),
    (lambda: init_device_mesh("cpu", (1,), backend_override={0: "fake"}), ValueError,
     "Invalid backend: 'fake'"),
    (lambda: DeviceMesh.from_group(dist.GroupMember.NON_GROUP_MEMBER, "cpu"), TypeError,
     "NON_GROUP_MEMBER"),
    (lambda: DeviceMesh.from_group([None], "cpu", [0], mesh_dim_names=("a",)), TypeError,
     "each group must be a ProcessGroup"),
], ids=["unknown-type", "upper-case", "index", "device-object", "names-str", "names-int",
        "names-length", "names-repeat", "shape-int", "shape-float", "shape-bool", "shape-0",
        "shape-negative", "bigger", "override-list", "override-value", "override-fake",
        "from-nonmember", "from-none"])
def test_hostile_arguments(one_rank_world: None, call: Any, exc: type, words: str) -> None:
    """Each a clear error naming the fix, before any group is made (torch accepts an unknown
    or indexed device type in ``DeviceMesh``, names of another count, repeated names there
    and in ``_unflatten``, a str of names, and fails later or never)."""
    with pytest.raises(exc, match=words):
        call()
    assert dist.get_pg_count() == 1


def test_dimension_arguments(one_rank_world: None) -> None:
    m = init_device_mesh("cpu", (1, 1), mesh_dim_names=("dp", "tp"))
    assert m.get_group(np.int64(1)) is m.get_group("tp") is m.get_group(-1)
    for bad in (True, 1.0, None):
        with pytest.raises(TypeError, match="mesh_dim must be an int") as info:
            m.get_group(bad) if bad is not None else DeviceMesh("cpu", 0).get_group()
        assert isinstance(info.value, AssertionError)   # torch's class
    with pytest.raises(IndexError, match="out of range for a 2-D DeviceMesh"):
        m.get_group(2)
    with pytest.raises(TypeError, match="an int index"):
        m.size("dp")
    with pytest.raises(TypeError, match="indexed by dimension names"):
        m[0]   # type: ignore[index]
    with pytest.raises(KeyError, match="Invalid mesh_dim_names"):
        m["dp", 1]   # type: ignore[index]
    with pytest.raises(RuntimeError, match="Each mesh_dim_name must be unique"):
        m._unflatten(1, (1,), ("dp",))
    with pytest.raises(TypeError, match="needs a DeviceMesh with mesh_dim_names"):
        init_device_mesh("cpu", (1,))._unflatten(0, (1, 1), ("a", "b"))


def test_unflatten_of_a_flattened_dimension_that_sizes_cannot_cut() -> None:
    """A dimension flattened from dimensions that are not neighbours (x and z of a 2x2x3 mesh:
    ranks [0, 1, 2, 6, 7, 8]) cuts into (2, 3) but not (3, 2): torch 2.15's AssertionError,
    here also a ValueError naming why."""
    layout = L.from_sizes((2, 2, 3))
    xz = L.collapse((layout[0], layout[2]))
    rank_map = np.arange(12, dtype=np.int32)
    assert L.remap((xz,), rank_map).tolist() == [[0, 1, 2, 6, 7, 8], [3, 4, 5, 9, 10, 11]]
    assert L.remap(L.split(xz, (2, 3)), rank_map)[0].tolist() == [[0, 1, 2], [6, 7, 8]]
    with pytest.raises(ValueError, match="does not divide") as info:
        L.split(xz, (3, 2))
    assert isinstance(info.value, AssertionError)


@st.composite
def _slices(draw: Any) -> tuple[tuple[int, ...], list[int], np.ndarray]:
    """A mesh shape, the dimensions kept (in order), and the mesh's ranks (any order)."""
    sizes = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    keep = sorted(draw(st.sets(st.integers(0, len(sizes) - 1))))
    perm = draw(st.permutations(range(int(np.prod(sizes)))))
    return sizes, keep, np.array(perm, dtype=np.int32)


@settings(max_examples=80, deadline=None)
@given(_slices(), st.data())
def test_layout_walks_are_numpy_transpositions(case: Any, data: Any) -> None:
    """The dimensions a slice keeps, and the copies of them that tile the root mesh (one
    group per copy), are numpy's view of the mesh with the other dimensions first, in order;
    a flattened slice is that view reshaped, and cutting it again into sizes it can take
    walks the same ranks in the same order."""
    sizes, keep, ranks = case
    grid = ranks.reshape(sizes)
    layout = L.from_sizes(sizes)
    kept = tuple(layout[k] for k in keep)
    rest = [k for k in range(len(sizes)) if k not in keep]
    expect = np.transpose(grid, rest + keep).reshape(-1, *[sizes[k] for k in keep])
    assert L.remap(kept, ranks).tolist() == expect.tolist()
    flat = L.collapse(kept)
    assert L.orthogonal(flat) and L.descending(flat)
    rows = L.remap((flat,), ranks)
    assert rows.tolist() == expect.reshape(expect.shape[0], -1).tolist()
    assert sorted(rows.ravel().tolist()) == sorted(ranks.tolist())   # a partition
    assert L.split(flat, [sizes[k] for k in keep]) == kept            # back as it was
    total = int(np.prod([sizes[k] for k in keep]))
    cut = data.draw(st.sampled_from([d for d in range(1, total + 1) if total % d == 0]))
    try:
        parts = L.split(flat, (cut, total // cut))
    except ValueError as exc:   # a size that falls across two kept dimensions
        assert "does not divide" in str(exc) and len(keep) > 1
    else:
        assert L.remap(parts, ranks).tolist() == \
            expect.reshape(expect.shape[0], cut, total // cut).tolist()
    if len(keep) > 1:   # out of order: no longer descending
        swapped = (kept[-1],) + kept[:-1]
        if all(L.numel(a) > 1 for a in kept):
            assert not L.descending(L.collapse(swapped))


def test_mesh_is_a_copy_and_the_callers_array_is_not_kept(one_rank_world: None) -> None:
    given = np.zeros((1, 1), dtype=np.int32)
    m = DeviceMesh("cpu", given, mesh_dim_names=("a", "b"))
    given[0, 0] = 7                       # the caller's array changes afterwards
    out = m.mesh
    out[0, 0] = 9                         # and so does the answer
    assert m.mesh.tolist() == [[0]] and m.get_coordinate() == (0, 0)
    assert m.mesh.dtype == np.int32 and not m._rank_map.flags.writeable


def test_pickle_hash_context_and_repr(one_rank_world: None) -> None:
    m = init_device_mesh("cpu", (1, 1), mesh_dim_names=("dp", "tp"))
    back = pickle.loads(pickle.dumps(m))
    assert back == m and hash(back) == hash(m) and back.get_group("tp") is m.get_group("tp")
    seen: list[object] = []
    with m:
        assert dm._mesh_resources.get_current_mesh() is m
        t = threading.Thread(target=lambda: seen.append(dm._mesh_resources.mesh_stack[:]))
        t.start()
        t.join()
    assert seen == [[]]   # one stack per thread, as torch's
    with pytest.raises(RuntimeError, match="No device mesh is currently active"):
        dm._mesh_resources.get_current_mesh()
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        assert repr(m) == "DeviceMesh((dp=1, tp=1), 'cpu', stride=((), ()), Mesh: [[0]])"
    finally:
        dist.set_debug_level(dist.DebugLevel.OFF)


def test_groups_of_a_destroyed_world_are_gone() -> None:
    if not HAVE_MPI:
        pytest.skip("needs mpi4py")
    dist.init_process_group("cpu:mpi", timeout=30)
    m = init_device_mesh("cpu", (1,), mesh_dim_names=("w",), backend_override={"w": "mpi"})
    name = m.get_group().group_name
    assert name == "1"   # an override makes a group of its own
    dist.destroy_process_group()
    with pytest.raises(RuntimeError, match=f"registered under the name {name}"):
        m.get_group()


def test_a_bound_world_splits_once_per_dimension() -> None:
    """torch makes a dimension's groups with one split_group in a world bound to a device
    (``device_id=``; torch: with an accelerator): its groups are named by the hash of their
    ranks, and only one group is counted per dimension."""
    if not HAVE_MPI:
        pytest.skip("needs mpi4py")
    dist.init_process_group("cpu:mpi", timeout=30, device_id="cpu:0")
    try:
        m = init_device_mesh("cpu", (1,), mesh_dim_names=("w",), backend_override={0: "mpi"})
        g = m.get_group()
        assert len(g.group_name) == 40 and dist.get_pg_count() == 2   # a SHA-1, one split
        assert g.group_desc == "mesh_w" and g.bound_device_id == acc.device("cpu:0")
    finally:
        dist.destroy_process_group()


class _Handle:
    """A device module of ``count`` devices that records set_device."""

    def __init__(self, count: int, initialized: bool = False) -> None:
        self.count, self.initialized = count, initialized
        self.set: list[int] = []

    def is_initialized(self) -> bool:
        return self.initialized

    def device_count(self) -> int:
        return self.count

    def set_device(self, index: int) -> None:
        self.set.append(index)


@pytest.mark.parametrize("device_type, count, initialized, local, world, expect", [
    ("cuda", 4, False, "3", 8, [3]),          # the launcher's LOCAL_RANK
    ("cuda", 4, False, None, 8, [0]),         # rank % count, with torch's warning
    ("cuda", 4, True, "3", 8, []),            # the user's choice is kept
    ("cuda", 0, False, None, 8, []),          # no device: nothing to choose
    ("cpu", 4, False, "3", 8, []),            # the cpu backend, as torch.cpu
], ids=["local-rank", "heuristic", "initialized", "no-device", "cpu"])
def test_device_choice(monkeypatch: pytest.MonkeyPatch, device_type: str, count: int,
                       initialized: bool, local: str | None, world: int,
                       expect: list[int]) -> None:
    handle = _Handle(count, initialized)
    monkeypatch.setattr(dm, "_get_device_handle", lambda t: handle)
    monkeypatch.setattr(dm, "get_rank", lambda group=None: 0)
    if local is None:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    else:
        monkeypatch.setenv("LOCAL_RANK", local)
    if expect and local is None:
        with pytest.warns(UserWarning, match="did not set/select the default device"):
            dm._bind_device(device_type, world)
    else:
        dm._bind_device(device_type, world)
    assert handle.set == expect


def test_device_choice_needs_homogeneous_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    handle = _Handle(4)
    monkeypatch.setattr(dm, "_get_device_handle", lambda t: handle)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.warns(UserWarning), \
            pytest.raises(RuntimeError, match="found 6 ranks and 4 cuda devices"):
        dm._bind_device("cuda", 6)
    assert handle.set == []


def test_a_cuda_mesh_without_cuda(one_rank_world: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """As torch on a CPU machine: without LOCAL_RANK no device is chosen and the mesh is made;
    under a launcher (LOCAL_RANK set) the device cannot be set."""
    if acc.cuda.is_available():
        pytest.skip("a CUDA device is here")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert init_device_mesh("cuda", (1,)).device_type == "cuda"
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(acc.BackendUnavailableError):
        init_device_mesh("cuda", (1,))
