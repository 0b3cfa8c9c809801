"""torch 2.15's ``torch.distributed.device_mesh``: :class:`DeviceMesh` and
:func:`init_device_mesh`, the n-dimensional arrangement of the world's ranks that FSDP2, tensor
parallelism, torchtitan and accelerate name their process groups by, on accelrt's groups.

A mesh is an array of global ranks; each of its dimensions has one process group per line of
ranks along it (made with :func:`~accelrt.distributed.new_group`, or one
:func:`~accelrt.distributed.split_group` per dimension in a world bound to a device, as torch
makes them; a dimension spanning the whole world in rank order is the world group itself).
Where torch's mesh holds a CPU tensor, this one holds a numpy ``int32`` array (``mesh``);
``DeviceMesh(device_type, mesh)`` takes a list or a numpy array of ints. Every rank of the
world makes every mesh (and every ``_flatten``/``_unflatten``), with the same arguments: the
groups are made collectively. Slicing (``mesh["tp"]``) makes no group. See
docs/distributed.md, "Device meshes".

Example (one process: a world of one rank)::

    >>> import accelrt.distributed as dist
    >>> from accelrt.distributed.device_mesh import init_device_mesh
    >>> dist.init_process_group("mpi")
    >>> mesh = init_device_mesh("cpu", (1, 1), mesh_dim_names=("dp", "tp"))
    >>> mesh, mesh["tp"].get_group() is dist.group.WORLD, mesh.get_coordinate()
    (DeviceMesh((dp=1, tp=1), 'cpu', stride=((), ())), True, (0, 0))
    >>> dist.destroy_process_group()
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _errors as _acc_errors
from .._errors import AcceleratorIndexError, AcceleratorValueError, type_shown
from . import _mesh_layout as L
from ._debug import DebugLevel, get_debug_level
from ._errors import _AssertTypeError, _AssertValueError
from ._group import ProcessGroup
from ._groups import get_rank, get_world_size, new_group, split_group
from ._init import init_process_group, is_initialized
from ._world import _get_default_group, _NonMember, _resolve_process_group

__all__ = ["DeviceMesh", "init_device_mesh"]

#: a dimension's backend override: (backend name or None, pg_options or None)
BackendConfig = tuple[str | None, Any]
_NO_OVERRIDE: BackendConfig = (None, None)
RankArray = npt.NDArray[np.int32]


def _get_device_handle(device_type: str = "cuda") -> Any:
    """The device module of ``device_type`` (``accelrt.cuda`` for ``"cuda"``: torch's
    ``_get_device_handle`` returns ``torch.cuda``), or None for a name no backend has."""
    from .. import backends
    if not isinstance(device_type, str) or device_type not in backends.registered():
        return None
    return backends.device_module(device_type)


class _MeshEnv(threading.local):
    """The meshes entered with ``with mesh:`` on this thread (torch's ``_mesh_resources``)."""

    def __init__(self) -> None:
        self.mesh_stack: list[DeviceMesh] = []

    def get_current_mesh(self) -> DeviceMesh:
        if not self.mesh_stack:
            raise RuntimeError("No device mesh is currently active!")
        return self.mesh_stack[-1]

    @staticmethod
    def num_devices_per_host(device_type: str) -> int:
        return int(_get_device_handle(device_type).device_count())

    @staticmethod
    def num_hosts(device_type: str) -> int:
        return get_world_size() // _MeshEnv.num_devices_per_host(device_type)


_mesh_resources: _MeshEnv = _MeshEnv()


# ---------------------------------------------------------------------------- argument checks
def _check_device_type(device_type: object) -> str:
    """``device_type`` as a plain str: a type accelrt has a backend of, without an index."""
    from .. import backends
    if not isinstance(device_type, str):
        raise TypeError(f"device_type must be a str such as 'cuda' or 'cpu' (for a device "
                        f"object, pass device.type), got {type_shown(device_type)}")
    name = str.__str__(device_type)
    if name and not name.isalpha():
        # torch 2.15's init_device_mesh (a RuntimeError there)
        raise AcceleratorValueError(
            f"Device type with index is not supported but got {name}. If you maintained a "
            "'torch.device' object, it's recommended to pass in 'device.type'.")
    known = backends.registered()
    if name not in known:
        raise _acc_errors.BackendUnavailableError(
            f"DeviceMesh: unknown device type {name!r}; accelrt's device types are "
            f"{', '.join(known)} (lower case; third-party backends register with "
            "accelrt.backends.register())")
    return name


def _check_names(names: object, ndim: int, where: str) -> tuple[str, ...] | None:
    """``mesh_dim_names`` as a tuple of distinct strs, one per dimension (None: unnamed)."""
    if names is None:
        return None
    if isinstance(names, str):
        raise TypeError(f"{where}: mesh_dim_names must be a tuple of str, one per dimension, "
                        f"got the str {names!r} (write ({names!r},))")
    if not isinstance(names, Iterable):
        raise TypeError(f"{where}: mesh_dim_names must be a tuple of str, one per dimension, "
                        f"got {type_shown(names)}")
    out = tuple(names)
    for n in out:
        if not isinstance(n, str):
            raise TypeError(f"{where}: each of mesh_dim_names must be a str, got "
                            f"{type_shown(n)} {n!r:.40}")
    out = tuple(str.__str__(n) for n in out)
    # torch 2.15's words (RuntimeError); its DeviceMesh itself takes any names
    if len(set(out)) != len(out):
        raise AcceleratorValueError(f"Each mesh_dim_name must be unique. Found repeated "
                                    f"mesh_dim_name in mesh_dim_names {out}")
    if len(out) != ndim:
        raise AcceleratorValueError(
            f"mesh_shape and mesh_dim_names should have same length! Found "
            f"len(mesh_dim_names): {len(out)} and len(mesh_shape):{ndim}.")
    return out or None


def _check_sizes(sizes: object, where: str) -> tuple[int, ...]:
    """A mesh shape: a sequence of ints, each at least 1."""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Iterable):
        raise TypeError(f"{where}: the mesh shape must be a tuple of ints such as (8,) or "
                        f"(2, 4), got {type_shown(sizes)} {sizes!r:.40}")
    out = []
    for s in sizes:
        if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)):
            raise TypeError(f"{where}: each size of the mesh shape must be an int, got "
                            f"{type_shown(s)} {s!r:.40}")
        if s < 1:
            cls = _AssertValueError if s == 0 else AcceleratorValueError   # torch's classes
            raise cls(f"{where}: each size of the mesh shape must be at least 1, got "
                      f"{tuple(int(x) for x in sizes)}")
        out.append(int(s))
    return tuple(out)


def _rank_array(mesh: object) -> RankArray:
    """``mesh`` (a list, a numpy array, anything numpy reads) as a C-contiguous int32 array
    of distinct non-negative ranks."""
    if isinstance(mesh, (str, bytes)):
        raise TypeError(f"DeviceMesh: mesh must be an array of int ranks, got {type_shown(mesh)}")
    try:
        arr = np.asarray(mesh)
    except (ValueError, TypeError) as exc:   # ragged nested lists
        raise ValueError(f"DeviceMesh: mesh must be a rectangular array of int ranks ({exc})"
                         ) from None
    if arr.size == 0:
        raise _AssertValueError(f"DeviceMesh: the mesh names no rank (shape {arr.shape})")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"DeviceMesh: mesh must hold int ranks, got an array of dtype "
                        f"{arr.dtype} ({mesh!r:.60})")
    flat = arr.ravel()
    if flat.min() < 0 or flat.max() > np.iinfo(np.int32).max:
        bad = int(flat.min()) if flat.min() < 0 else int(flat.max())
        raise ValueError(f"DeviceMesh: the mesh holds {bad}, which is no rank (ranks are "
                         "0 .. world_size - 1)")
    uniq, counts = np.unique(flat, return_counts=True)
    if (counts > 1).any():
        raise ValueError(f"DeviceMesh: the mesh names rank {int(uniq[counts > 1][0])} more "
                         f"than once ({arr.tolist()!r:.80}); each rank may appear once")
    return np.array(arr, dtype=np.int32, order="C")   # a copy: the caller's array may change


def _override_value(value: object) -> BackendConfig:
    if isinstance(value, str):
        return (str.__str__(value), None)
    if isinstance(value, tuple) and len(value) == 2 and \
            (value[0] is None or isinstance(value[0], str)):
        return (value[0], value[1])
    raise TypeError(f"backend_override: each value must be a backend name ('mpi', 'nccl', "
                    f"'gloo', ...) or a (backend, pg_options) pair, got {type_shown(value)} "
                    f"{value!r:.40}")


def _normalize_backend_override(backend_override: object, ndim: int,
                                mesh_dim_names: tuple[str, ...] | None = None
                                ) -> tuple[BackendConfig, ...]:
    """torch's ``backend_override`` dict (keys: dim indices or names) as one
    ``(backend, pg_options)`` per dimension; the caller's dict is left as it is."""
    if not isinstance(backend_override, Mapping):
        raise TypeError(f"backend_override must be a dict of mesh dim (index or name) to "
                        f"backend, got {type_shown(backend_override)}")
    left = dict(backend_override)
    names = mesh_dim_names or ()
    out: list[BackendConfig] = []
    for idx in range(ndim):
        name = names[idx] if idx < len(names) else None
        if name is not None and name in left:
            if idx in left:
                raise AcceleratorValueError(f"Found redundant dim index {idx} and name {name} "
                                            "in backend_override")
            out.append(_override_value(left.pop(name)))
        elif idx in left:
            out.append(_override_value(left.pop(idx)))
        else:
            out.append(_NO_OVERRIDE)
    if left:
        raise AcceleratorValueError(f"Found invalid keys in backend_override: got "
                                    f"{list(left)}, expected integers in range [0, {ndim}) "
                                    f"or one of {names}")
    return tuple(out)


# ------------------------------------------------------------------------------- the groups
def _bind_device(device_type: str, world_size: int) -> None:
    """torch's device choice at mesh creation: a device module not yet initialized gets
    ``LOCAL_RANK`` (set by the launcher), else ``rank % device_count()`` with torch's warning.
    The cpu backend counts as initialized, as ``torch.cpu`` does."""
    handle = _get_device_handle(device_type)
    if handle is None or device_type == "cpu" or handle.is_initialized():
        return
    if "LOCAL_RANK" in os.environ:
        handle.set_device(int(os.environ["LOCAL_RANK"]))
        return
    count = int(handle.device_count())
    if count == 0:
        return
    warnings.warn(
        "It seems like you did not set/select the default device for the current process "
        "before the DeviceMesh initialization or use a launcher (i.e. torchrun) which "
        "populates `LOCAL_RANK` environment variable. It is recommended to set the current "
        "device for the process BEFORE the DeviceMesh initialization so that the underlying "
        "communicator (i.e. NCCL) can be initialized properly. Given that the current process "
        "has no default device selected, DeviceMesh will use a heuristic to set the device_id "
        "via `global_rank % num_devices_per_host`, assuming homogeneous hardware cluster. ",
        stacklevel=4)
    if world_size > count and world_size % count != 0:
        raise RuntimeError(f"DeviceMesh only support homogeneous hardware, but found "
                           f"{world_size} ranks and {count} {device_type} devices!")
    handle.set_device(get_rank() % count)


def _world_size_for(n: int) -> int:
    """The world's size (the default group made if there is none), checked to hold a mesh of
    ``n`` ranks (torch's error)."""
    if not is_initialized():
        init_process_group()
    size = get_world_size()
    if n > size:
        raise AcceleratorValueError(f"Mesh should not be bigger than default world size "
                                    f"{size}, but found {n} ranks! (make the mesh's sizes "
                                    "multiply to at most the world size)")
    return size


def _init_one_group(axis: L.Axis, rank_map: RankArray, dim_name: str,
                    override: BackendConfig, preserve_rank_order: bool) -> str | None:
    """The groups of one mesh dimension (collective over the world); the name of this rank's,
    or None where the rank is in none (torch's ``_init_one_process_group``)."""
    rows = L.remap((axis,), rank_map).tolist()
    backend, pg_options = override
    desc = f"mesh_{dim_name}"
    world = _get_default_group()
    size = world.size()
    # the whole world in rank order (or in any order without preserve_rank_order, as torch):
    # the world group itself
    if L.numel(axis) == size and override == _NO_OVERRIDE and (
            not preserve_rank_order or [r for row in rows for r in row] == list(range(size))):
        return world.group_name
    import accelrt
    if world.bound_device_id is not None and accelrt.is_available() and \
            (backend is None or world.name() == backend):
        # torch splits a bound world's communicator once per dimension (ncclCommSplit)
        g = split_group(parent_pg=world, split_ranks=rows, pg_options=pg_options,
                        group_desc=desc)
        return g.group_name if isinstance(g, ProcessGroup) else None
    me = get_rank()
    mine = None
    for row in rows:
        g = new_group(ranks=row, backend=backend, pg_options=pg_options, group_desc=desc,
                      sort_ranks=not preserve_rank_order)
        if me in row and isinstance(g, ProcessGroup):
            mine = g.group_name
    return mine


def _init_process_groups(layout: L.Layout, rank_map: RankArray,
                         mesh_dim_names: tuple[str, ...] | None,
                         overrides: Sequence[BackendConfig],
                         preserve_rank_order: bool) -> list[str]:
    """One group name per dimension where this rank is in the mesh, else an empty list."""
    found = [_init_one_group(axis, rank_map,
                             mesh_dim_names[d] if mesh_dim_names else f"dim_{d}",
                             overrides[d], preserve_rank_order)
             for d, axis in enumerate(layout)]
    names = [n for n in found if n is not None]
    if names and len(names) != len(found):
        raise AssertionError(f"rank {get_rank()} is in the groups of some of the mesh's "
                             "dimensions but not all")
    return names


# ------------------------------------------------------------------------------- the mesh
class DeviceMesh:
    """An n-dimensional array of the world's ranks with a process group per line along each
    dimension (torch 2.15's ``torch.distributed.device_mesh.DeviceMesh``).

    ``mesh`` is the array of global ranks (a list or numpy array of distinct ints; torch takes
    a tensor). Every rank of the world makes the mesh with the same arguments (its groups
    are made collectively); a rank the mesh leaves out gets ``get_coordinate() is None`` and
    no groups. The default group is made if there is none (``init_process_group()``).
    ``device_type`` is a type accelrt has a backend of (``"cpu"``, ``"cuda"``,
    ``"opencl"``); a device module not yet initialized gets ``LOCAL_RANK`` as its device
    (else ``rank % device_count()``, with torch's warning); the cpu backend is left as it is,
    as torch's. ``backend_override`` gives each dimension's groups their own backend
    (``(backend, pg_options)`` per dimension; :func:`init_device_mesh` takes torch's dict).
    With ``preserve_rank_order=True`` a group's ranks keep the mesh's order (else they are
    sorted, and a dimension spanning the whole world is the world group).

    Raises:
        TypeError: ``mesh`` holds no ints; ``mesh_dim_names`` is not a tuple of str.
        ValueError: a rank outside the world or named twice; the names repeat or are not one
            per dimension (torch's ``RuntimeError`` words; also a ``RuntimeError``).
        RuntimeError: the mesh is bigger than the world; ``device_type`` names no backend
            (:class:`~accelrt.BackendUnavailableError`) or has an index.

    Example::

        >>> import accelrt.distributed as dist
        >>> from accelrt.distributed import DeviceMesh
        >>> dist.init_process_group("mpi")
        >>> mesh = DeviceMesh("cpu", [[0]], mesh_dim_names=("dp", "tp"))
        >>> mesh.shape, mesh.ndim, mesh.mesh.tolist(), mesh.get_local_rank("tp")
        ((1, 1), 2, [[0]], 0)
        >>> dist.destroy_process_group()
    """

    _root_mesh: DeviceMesh | None = None

    def __init__(self, device_type: str, mesh: Any = None, *,
                 mesh_dim_names: tuple[str, ...] | None = None,
                 backend_override: tuple[BackendConfig, ...] | None = None,
                 preserve_rank_order: bool = False, _init_backend: bool = True,
                 _rank: int | None = None, _layout: L.Layout | None = None,
                 _rank_map: RankArray | None = None,
                 _root_mesh: DeviceMesh | None = None) -> None:
        device_type = _check_device_type(device_type)
        if mesh is not None:
            if _layout is not None or _rank_map is not None:
                raise TypeError("Cannot provide _layout and/or _rank_map if passing explicit "
                                "mesh")
            arr = _rank_array(mesh)
            _layout, _rank_map = L.from_sizes(arr.shape), arr.ravel()
        elif _layout is None or _rank_map is None:
            raise TypeError("The mesh argument is required except for PRIVATE USAGE ONLY!")
        if not L.orthogonal(L.collapse(_layout)) or _rank_map.size < L.cosize(_layout):
            raise AssertionError(f"the layout {_layout} does not fit the rank map of "
                                 f"{_rank_map.size} ranks")
        _rank_map.flags.writeable = False   # shared by a root and its sub-meshes
        self._device_type = device_type
        self._layout: L.Layout = tuple(_layout)
        self._rank_map: RankArray = _rank_map
        if mesh is not None:   # (torch checks the names in init_device_mesh only)
            self._mesh_dim_names = _check_names(mesh_dim_names, len(self._layout), "DeviceMesh")
        else:   # a slice names a size-1 dimension twice where torch lets it (m["dp", "dp"])
            self._mesh_dim_names = tuple(mesh_dim_names) if mesh_dim_names else None
        self._root_mesh = _root_mesh
        self._preserve_rank_order = bool(preserve_rank_order)
        if backend_override is None:
            backend_override = (_NO_OVERRIDE,) * len(self._layout)
        elif len(backend_override) != len(self._layout):
            raise ValueError(f"backend_override should have the same length as the number of "
                             f"mesh dimensions, but got {len(backend_override)} and "
                             f"{len(self._layout)}.")
        self._flatten_rank_map = tuple(int(r) for r in self._rank_map)
        self._flatten_mapping: dict[str, DeviceMesh] = {}
        #: this rank's group of each dimension (an empty list outside the mesh; None: no
        #: groups were made, ``_init_backend=False``)
        self._dim_group_names: list[str] | None = None
        self._hash: int | None = None
        if _init_backend:
            self._setup_world_group_and_device()
            self._dim_group_names = _init_process_groups(
                self._layout, self._rank_map, self._mesh_dim_names, backend_override,
                self._preserve_rank_order)
        self._rank = get_rank() if _rank is None else int(_rank)
        self._coordinate_on_dim = self._compute_coordinate_on_dim()

    def _setup_world_group_and_device(self) -> None:
        size = _world_size_for(L.numel(L.collapse(self._layout)))
        if int(self._rank_map.max()) >= size:
            raise ValueError(f"DeviceMesh: the mesh names rank {int(self._rank_map.max())}, "
                             f"which is not a rank of the world (its ranks are 0..{size - 1})")
        _bind_device(self._device_type, size)

    def _compute_coordinate_on_dim(self) -> tuple[int, ...] | None:
        hits = np.argwhere(self.mesh == self._rank)
        return None if len(hits) == 0 else tuple(int(c) for c in hits[0])

    # ------------------------------------------------------------------------- properties
    @property
    def device_type(self) -> str:
        """The device type of the mesh (``"cpu"``, ``"cuda"``, ``"opencl"``)."""
        return self._device_type

    @property
    def mesh(self) -> RankArray:
        """The ranks of the mesh (a new int32 array): for a mesh sliced from another, the
        slice this rank is in.

        Raises:
            RuntimeError: a slice of several copies none of which holds this rank (torch's
                words).
        """
        full = L.remap(self._layout, self._rank_map)
        # (this process's rank now, as torch's: a mesh pickled on another rank is sliced here)
        rows = [0] if full.shape[0] == 1 else [int(r[0]) for r in np.argwhere(full == get_rank())]
        if rows:
            mine: RankArray = full[rows[0]]
            return mine
        raise RuntimeError("In order to get the mesh Tensor of a DeviceMesh it needs to either "
                           "have all its original dimensions (e.g., no slicing) or it needs to "
                           "contain the local rank")

    @property
    def mesh_dim_names(self) -> tuple[str, ...] | None:
        """The names of the dimensions, or None."""
        return self._mesh_dim_names

    @property
    def ndim(self) -> int:
        return len(self._layout)

    @property
    def shape(self) -> tuple[int, ...]:
        return L.sizes_of(self._layout)

    def size(self, mesh_dim: int | None = None) -> int:
        """The number of ranks of the mesh, or of its dimension ``mesh_dim`` (an index)."""
        if mesh_dim is None:
            return L.numel(L.collapse(self._layout))
        return L.numel(self._layout[self._dim_index(mesh_dim, names=False)])

    def get_rank(self) -> int:
        """This process's global rank."""
        return get_rank()

    def get_coordinate(self) -> tuple[int, ...] | None:
        """This rank's index along each dimension, or None if the mesh leaves it out."""
        return self._coordinate_on_dim

    def _is_current_rank_part_of_mesh(self) -> bool:
        return self._coordinate_on_dim is not None

    # ------------------------------------------------------------------------- dimensions
    def _get_root_mesh(self) -> DeviceMesh:
        return self._root_mesh if self._root_mesh is not None else self

    def _get_mesh_dim_by_name(self, mesh_dim_name: str) -> int:
        if not self._mesh_dim_names:
            raise KeyError("No `mesh_dim_names` found (name the dimensions with "
                           "mesh_dim_names=, or index them by int)")
        if mesh_dim_name not in self._mesh_dim_names:
            raise KeyError(f"Mesh dimension '{mesh_dim_name}' does not exist. Available mesh "
                           f"dimensions are: mesh_dim_names={self._mesh_dim_names}")
        return self._mesh_dim_names.index(mesh_dim_name)

    def _get_root_mesh_dim(self) -> int | None:
        root, names = self._get_root_mesh(), self._mesh_dim_names
        if not names:
            return None
        if len(names) != 1:
            raise AssertionError("The submesh can only be a 1D mesh.")
        return root._get_mesh_dim_by_name(names[0])

    def _dim_index(self, mesh_dim: object, names: bool = True) -> int:
        """``mesh_dim`` (a name where ``names``, or an index, negative from the end) as an
        index; torch's errors: ``KeyError`` for a name, ``AssertionError`` for a type,
        ``IndexError`` for a range (each also accelrt's class)."""
        if names and isinstance(mesh_dim, str):
            return self._get_mesh_dim_by_name(mesh_dim)
        if isinstance(mesh_dim, (bool, np.bool_)) or not isinstance(mesh_dim, (int, np.integer)):
            what = "a name or an int index" if names else "an int index"
            raise _AssertTypeError(f"mesh_dim must be an int, got {type_shown(mesh_dim)}: "
                                   f"pass {what} of a dimension")
        k, n = int(mesh_dim), len(self._layout)
        if not -n <= k < n:
            raise AcceleratorIndexError(f"mesh_dim {k} is out of range for a {n}-D DeviceMesh "
                                        f"(valid: {-n} .. {n - 1})")
        return k % n

    def _groups(self) -> list[str]:
        if self._dim_group_names is None:
            raise RuntimeError("DeviceMesh process groups not initialized!")
        if not self._dim_group_names:
            raise AcceleratorIndexError(
                f"global rank {self._rank} is not in this DeviceMesh, so it has no process "
                f"group of its dimensions (get_coordinate() is None on a rank outside the "
                f"mesh; the mesh's ranks: {self._flatten_rank_map!r:.80})")
        return self._dim_group_names

    def get_group(self, mesh_dim: int | str | None = None) -> ProcessGroup:
        """This rank's process group of dimension ``mesh_dim`` (an index or a name; a
        dimension flattened from the root mesh by name too); ``None`` for a 1-D mesh.

        Raises:
            RuntimeError: ``mesh_dim`` is None on a mesh of several dimensions; the mesh was
                made without groups (``_init_backend=False``).
            KeyError: no dimension has that name.
            IndexError: ``mesh_dim`` is out of range, or this rank is not in the mesh.

        Example::

            >>> import accelrt.distributed as dist
            >>> from accelrt.distributed import init_device_mesh
            >>> dist.init_process_group("mpi")
            >>> m = init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
            >>> m.get_group() is m.get_group("dp") is m.get_group(0) is dist.group.WORLD
            True
            >>> dist.destroy_process_group()
        """
        names = self._dim_group_names
        if names is None:
            raise RuntimeError("DeviceMesh process groups not initialized!")
        n = len(self._layout)
        if n > 1 and mesh_dim is None:
            raise AcceleratorValueError(
                f"Found the DeviceMesh have {n} dimensions. Optional kwarg `mesh_dim` needs to "
                "be specified when device_mesh.ndim > 1. If you want to get the list of all "
                "the ProcessGroups in the DeviceMesh, please use `get_all_groups()` instead.")
        if n == 1 and mesh_dim is None:
            return _resolve_process_group(self._groups()[0])
        flattened = self._get_root_mesh()._flatten_mapping
        if isinstance(mesh_dim, str) and mesh_dim in flattened:
            return _resolve_process_group(flattened[mesh_dim]._groups()[0])
        k = self._dim_index(mesh_dim)
        return _resolve_process_group(self._groups()[k])

    def get_all_groups(self) -> list[ProcessGroup]:
        """This rank's process group of each dimension, in order."""
        return [self.get_group(k) for k in range(len(self._layout))]

    def get_local_rank(self, mesh_dim: int | str | None = None) -> int:
        """This rank's rank in its group of dimension ``mesh_dim`` (None: a 1-D mesh's).

        Raises:
            RuntimeError: ``mesh_dim`` is None on a mesh of several dimensions.
        """
        if len(self._layout) > 1 and mesh_dim is None:
            raise AcceleratorValueError(
                f"Found the DeviceMesh have {len(self._layout)} dimensions. Optional kwarg "
                "`mesh_dim` needs to be specified when device_mesh.ndim > 1.")
        return get_rank(self.get_group(0 if mesh_dim is None else mesh_dim))

    # ---------------------------------------------------------------------------- slicing
    def __getitem__(self, mesh_dim_names: str | Sequence[str]) -> DeviceMesh:
        """The sub-mesh of the dimensions named (one name or a tuple of names, in the mesh's
        order; a dimension ``_flatten`` made, by name, from the root mesh). It makes no
        group: its dimensions keep this mesh's groups. This rank's copy of it.

        Raises:
            RuntimeError: the mesh has no names; the names overlap (a flattened dimension
                with one of its own).
            KeyError: a name no dimension has, or names out of the mesh's order.

        Example::

            >>> import accelrt.distributed as dist
            >>> from accelrt.distributed import init_device_mesh
            >>> dist.init_process_group("mpi")
            >>> m = init_device_mesh("cpu", (1, 1, 1), mesh_dim_names=("dp", "cp", "tp"))
            >>> m["dp", "tp"].mesh_dim_names, m["dp", "tp"]["tp"].get_coordinate()
            (('dp', 'tp'), (0,))
            >>> dist.destroy_process_group()
        """
        if not self._mesh_dim_names:
            raise RuntimeError("Cannot slice a DeviceMesh without mesh_dim_names!")
        if isinstance(mesh_dim_names, str):
            names: tuple[Any, ...] = (mesh_dim_names,)
        elif isinstance(mesh_dim_names, (tuple, list)):
            names = tuple(mesh_dim_names)
        else:
            raise TypeError(f"a DeviceMesh is indexed by dimension names (a str or a tuple "
                            f"of str), got {type_shown(mesh_dim_names)}")
        if names == self._mesh_dim_names and not isinstance(mesh_dim_names, list):
            return self   # (torch compares before a list becomes a tuple: a list slices)
        return self._create_sub_mesh(self._get_slice_mesh_layout(names), names)

    def _get_slice_mesh_layout(self, mesh_dim_names: tuple[Any, ...]) -> L.Layout:
        root = self._get_root_mesh()
        from_root = self == root
        flattened = ({k: m._layout[0] for k, m in root._flatten_mapping.items()}
                     if from_root else {})
        own = self._mesh_dim_names or ()
        valid = [*own, *flattened]
        if not all(isinstance(n, str) and n in valid for n in mesh_dim_names):
            raise KeyError(f"Invalid mesh_dim_names {mesh_dim_names} specified. Valid "
                           f"mesh_dim_names are {valid}.")
        axes: list[L.Axis] = []
        for name in mesh_dim_names:
            if name in own:
                axes.append(self._layout[own.index(name)])
            else:
                warnings.warn("Slicing a flattened dim from root mesh will be deprecated in PT "
                              "2.11. Users need to bookkeep the flattened mesh directly. ",
                              stacklevel=3)
                axes.append(flattened[name])
        layout = tuple(axes)
        if not L.descending(L.collapse(layout)):
            raise KeyError(f"Invalid mesh_dim_names {mesh_dim_names} specified. Mesh dim "
                           "indices should be in ascending order.")
        if not L.orthogonal(L.collapse(layout)):
            raise RuntimeError(f"Slicing overlapping dim_names {mesh_dim_names} is not "
                               "allowed.")
        return layout

    def _create_sub_mesh(self, layout: L.Layout, names: tuple[str, ...]) -> DeviceMesh:
        root = self._get_root_mesh()
        groups = self._dim_group_names
        own = self._mesh_dim_names or ()
        # this rank's groups of the dimensions picked (none outside the mesh): a dimension
        # flattened from the root mesh (this mesh, or its equal) has its flattened group
        picked = None if groups is None else [] if not groups else [
            groups[own.index(name)] if name in own else
            root._flatten_mapping[name]._groups()[0] for name in names]
        sub = DeviceMesh(self._device_type, _layout=layout, _rank_map=root._rank_map,
                         mesh_dim_names=names, _root_mesh=root, _init_backend=False,
                         preserve_rank_order=root._preserve_rank_order)
        sub._dim_group_names = picked
        return sub

    def _get_all_submeshes(self, mesh_dim_name: str) -> list[DeviceMesh]:
        """Every 1-D mesh along dimension ``mesh_dim_name`` (this rank's with its group)."""
        dim = self._get_mesh_dim_by_name(mesh_dim_name)
        me, out = get_rank(), []
        for row in L.remap((self._layout[dim],), self._rank_map):
            sub = DeviceMesh(self._device_type, row, mesh_dim_names=(mesh_dim_name,),
                             _init_backend=False, preserve_rank_order=self._preserve_rank_order)
            if self._dim_group_names is not None:
                sub._dim_group_names = ([self._dim_group_names[dim]]
                                        if self._dim_group_names and me in row else [])
            out.append(sub)
        return out

    # ---------------------------------------------------------------- flatten / unflatten
    def _flatten(self, mesh_dim_name: str | None = None,
                 backend_override: str | tuple[str | None, Any] | None = None) -> DeviceMesh:
        """This mesh's dimensions as one (torch's ``_flatten``, which FSDP2, torchtitan and
        accelerate call): a 1-D mesh named ``mesh_dim_name`` (default: the names joined by
        ``_``), kept by the root mesh, which then slices it by that name and whose
        :meth:`get_group` finds it. Collective over the world the first time (its groups are
        made); again with the same name it returns the same mesh.

        Raises:
            RuntimeError: the mesh has no names.
            ValueError: the name is one of the root mesh's, or was given to another flattening.

        Example::

            >>> import accelrt.distributed as dist
            >>> from accelrt.distributed import init_device_mesh
            >>> dist.init_process_group("mpi")
            >>> m = init_device_mesh("cpu", (1, 1), mesh_dim_names=("dp", "cp"))
            >>> flat = m._flatten("dp_cp")
            >>> flat.mesh_dim_names, m._flatten("dp_cp") is flat, m.get_group("dp_cp").size()
            (('dp_cp',), True, 1)
            >>> dist.destroy_process_group()
        """
        if not self._mesh_dim_names:
            raise RuntimeError("Cannot flatten a DeviceMesh without mesh_dim_names!")
        if mesh_dim_name is not None and not isinstance(mesh_dim_name, str):
            raise TypeError(f"_flatten(): mesh_dim_name must be a str, got "
                            f"{type_shown(mesh_dim_name)}")
        name = mesh_dim_name or "_".join(self._mesh_dim_names)
        if len(self._layout) == 1 and name in self._mesh_dim_names:
            return self
        override = (_NO_OVERRIDE if backend_override is None else
                    _normalize_backend_override({0: backend_override}, 1)[0])
        root = self._get_root_mesh()
        taken = root._mesh_dim_names or ()
        if name in taken:
            raise ValueError(f"{name} already exists for submesh of the {root!r}. The "
                             f"mesh_dim_names of submesh and flattened mesh are {taken}. "
                             "Please specify another valid mesh_dim_name.")
        layout: L.Layout = (L.collapse(self._layout),)
        made = root._flatten_mapping.get(name)
        if made is not None:
            if made._layout == layout:
                return made
            raise ValueError(f"Flatten mesh with mesh_dim_name {name} has been created "
                             "before, Please specify another valid mesh_dim_name.")
        flat = DeviceMesh(root._device_type, _layout=layout, _rank_map=root._rank_map,
                          mesh_dim_names=(name,), _root_mesh=root, backend_override=(override,),
                          preserve_rank_order=root._preserve_rank_order)
        root._flatten_mapping[name] = flat
        return flat

    def _unflatten(self, dim: int | str, mesh_sizes: Sequence[int],
                   mesh_dim_names: Sequence[str],
                   backend_override: Mapping[str, Any] | None = None) -> DeviceMesh:
        """This mesh with dimension ``dim`` cut into dimensions of ``mesh_sizes`` named
        ``mesh_dim_names`` (torch's ``_unflatten``, which torchtitan builds its meshes with):
        collective over the world (the new dimensions' groups are made); the other
        dimensions keep their groups.

        Raises:
            ValueError: ``dim`` is out of range (negative included) or no dimension's name;
                the sizes do not multiply to that dimension's size, or cannot cut it.
            TypeError: ``mesh_dim_names`` is None, or the mesh has no names.
            RuntimeError: the names are not one per size, or repeat a name of the mesh.

        Example::

            >>> import accelrt.distributed as dist
            >>> from accelrt.distributed import init_device_mesh
            >>> dist.init_process_group("mpi")
            >>> world = init_device_mesh("cpu", (1,), mesh_dim_names=("world",))
            >>> world._unflatten(0, (1, 1), ("dp", "tp"))
            DeviceMesh((dp=1, tp=1), 'cpu', stride=((), ()))
            >>> dist.destroy_process_group()
        """
        own = self._mesh_dim_names or ()
        if isinstance(dim, str):
            if dim not in own:
                raise ValueError(f"dim {dim} specified in `_unflatten` is not in "
                                 f"{self._mesh_dim_names}")
            k = own.index(dim)
        elif isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)):
            raise TypeError(f"_unflatten(): dim must be an int or a dimension's name, got "
                            f"{type_shown(dim)}")
        elif not 0 <= dim < len(self._layout):
            raise ValueError(f"dim {dim} specified in `_unflatten` is out of range "
                             f"{len(self._layout)}")
        else:
            k = int(dim)
        sizes = _check_sizes(mesh_sizes, "_unflatten()")
        if mesh_dim_names is None:   # torch 2.15: a TypeError too (len(None))
            raise TypeError("_unflatten(): mesh_dim_names must be a tuple of str, one per size "
                            f"of mesh_sizes={sizes}, got None (name the new dimensions)")
        if isinstance(mesh_dim_names, Sequence) and not isinstance(mesh_dim_names, str) \
                and len(mesh_dim_names) != len(sizes):
            raise AcceleratorValueError("mesh_dim_names must have same length as mesh_sizes in "
                                        "_unflatten!")
        new_names = _check_names(mesh_dim_names, len(sizes), "_unflatten()") or ()
        if not own:   # torch 2.15 fails there too (a TypeError from an internal check)
            raise TypeError("_unflatten() needs a DeviceMesh with mesh_dim_names (name its "
                            "dimensions: init_device_mesh(..., mesh_dim_names=(\"world\",)))")
        names = [*own[:k], *new_names, *own[k + 1:]]
        _check_names(names, len(names), "_unflatten()")   # not the others' names either
        overrides = (_normalize_backend_override(backend_override, len(sizes), new_names)
                     if backend_override is not None else (_NO_OVERRIDE,) * len(sizes))
        return self._create_unflatten_mesh(k, sizes, tuple(names), overrides)

    def _create_unflatten_mesh(self, k: int, sizes: tuple[int, ...], names: tuple[str, ...],
                               overrides: tuple[BackendConfig, ...]) -> DeviceMesh:
        axis = self._layout[k]
        if L.numel(axis) != int(np.prod(sizes)):
            raise ValueError(f"The product of mesh_sizes={sizes} is {int(np.prod(sizes))}, but "
                             f"the original dimension at dim={k} has size {L.numel(axis)}. These "
                             "must be equal for unflatten to work correctly.")
        part = L.split(axis, sizes)
        layout = self._layout[:k] + part + self._layout[k + 1:]
        root = self._get_root_mesh()
        groups = self._dim_group_names
        if groups is not None:   # (collective: every rank makes every line's group)
            made = _init_process_groups(part, root._rank_map, names[k:k + len(sizes)],
                                        overrides, root._preserve_rank_order)
            groups = groups[:k] + made + groups[k + 1:] if groups else []
        res = DeviceMesh(self._device_type, _layout=layout, _rank_map=root._rank_map,
                         mesh_dim_names=names, _root_mesh=root, _init_backend=False,
                         preserve_rank_order=root._preserve_rank_order)
        res._dim_group_names = groups
        return res

    # ------------------------------------------------------------------------- from groups
    @staticmethod
    def from_group(group: ProcessGroup | Sequence[ProcessGroup], device_type: str,
                   mesh: Any = None, *,
                   mesh_dim_names: tuple[str, ...] | None = None) -> DeviceMesh:
        """A mesh over groups made already: one group (a 1-D mesh of its ranks; ``mesh``, if
        given, must be them) or a list of groups, one per dimension of ``mesh`` (required
        then, with ``mesh_dim_names``). Makes no group; every rank calls it.

        Raises:
            TypeError: ``group`` is not a group or a list of groups.
            ValueError: ``mesh`` is not the group's ranks; no groups; ``mesh`` or the names
                missing for several groups, or not one dimension per group; a group that is
                not this rank's line of the mesh along its dimension (accelrt checks this).

        Example::

            >>> import accelrt.distributed as dist
            >>> from accelrt.distributed import DeviceMesh
            >>> dist.init_process_group("mpi")
            >>> m = DeviceMesh.from_group(dist.group.WORLD, "cpu", mesh_dim_names=("dp",))
            >>> m.mesh.tolist(), m.get_group() is dist.group.WORLD
            ([0], True)
            >>> dist.destroy_process_group()
        """
        if isinstance(group, ProcessGroup):
            ranks = list(group.global_ranks)
            if mesh is not None and _rank_array(mesh).tolist() != ranks:
                raise ValueError(f"Invalid mesh {mesh!s} for ProcessGroup with ranks {ranks}")
            dm = DeviceMesh(device_type, ranks, mesh_dim_names=mesh_dim_names,
                            _init_backend=False)
            dm._dim_group_names = [group.group_name]
            return dm
        if isinstance(group, (str, bytes)) or not isinstance(group, Iterable):
            got = ("GroupMember.NON_GROUP_MEMBER (this rank is not in that group)"
                   if isinstance(group, _NonMember) else type_shown(group))
            raise TypeError(f"from_group(): group must be a ProcessGroup (this rank's) or a "
                            f"list of them, one per mesh dimension, got {got}")
        groups = list(group)
        for g in groups:
            if not isinstance(g, ProcessGroup):
                raise TypeError(f"from_group(): each group must be a ProcessGroup this rank is "
                                f"in, got {type_shown(g)} {g!r:.60}")
        if not groups:
            raise ValueError("Expects at least one ProcessGroup to be passed")
        if mesh is None:
            raise ValueError("Must pass mesh if passing multiple ProcessGroups")
        if mesh_dim_names is None:
            raise ValueError("Must pass mesh_dim_names if passing multiple ProcessGroups")
        arr = _rank_array(mesh)
        if arr.ndim != len(groups):
            raise ValueError(f"Expects mesh with ndim equal to number of ProcessGroups but got "
                             f"mesh {arr.tolist()} and {len(groups)} ProcessGroups")
        dm = DeviceMesh(device_type, arr, mesh_dim_names=mesh_dim_names, _init_backend=False)
        coord = dm.get_coordinate()
        if coord is not None:   # torch does not check: a wrong group runs on the wrong ranks
            for d, g in enumerate(groups):
                line = arr[coord[:d] + (slice(None),) + coord[d + 1:]].tolist()
                if sorted(g.global_ranks) != sorted(line):
                    raise ValueError(f"from_group(): the group of dimension {d} has the ranks "
                                     f"{g.global_ranks}, but this rank's line of the mesh "
                                     f"along that dimension is {line}")
        dm._dim_group_names = [g.group_name for g in groups]
        return dm

    # ------------------------------------------------------------------------- the object
    def __enter__(self) -> DeviceMesh:
        _mesh_resources.mesh_stack.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _mesh_resources.mesh_stack.pop()

    def __repr__(self) -> str:
        sizes = L.sizes_of(self._layout)
        shown = (f"({', '.join(f'{k}={v}' for k, v in zip(self._mesh_dim_names, sizes))})"
                 if self._mesh_dim_names else f"{sizes}")
        stride = tuple(L.stride_shown(axis) for axis in self._layout)
        text = f"DeviceMesh({shown}, '{self._device_type}', stride={stride}"
        if get_debug_level() == DebugLevel.DETAIL:   # torch: TORCH_DISTRIBUTED_DEBUG=DETAIL
            text += f", Mesh: {self.mesh.tolist()}"
        return text + ")"

    def __getstate__(self) -> dict[str, Any]:
        # the cached hash stays behind: a str's hash differs between processes, so an
        # unpickled mesh would be equal to its copy there and hash differently (torch's does)
        state = self.__dict__.copy()
        state["_hash"] = None
        return state

    def _hash_key(self) -> tuple[Any, ...]:
        return (self._flatten_rank_map, self._layout, self._device_type,
                self._mesh_dim_names, self._preserve_rank_order)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self._hash_key())
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, DeviceMesh):
            return False
        return self._hash_key() == other._hash_key()

    def __ne__(self, other: object) -> bool:
        return not self == other


def init_device_mesh(device_type: str, mesh_shape: Sequence[int], *,
                     mesh_dim_names: Sequence[str] | None = None,
                     backend_override: Mapping[int | str, Any] | None = None) -> DeviceMesh:
    """A :class:`DeviceMesh` of shape ``mesh_shape`` over the world's first ranks in order
    (``init_device_mesh("cuda", (2, 4))`` on 8 ranks: ``[[0, 1, 2, 3], [4, 5, 6, 7]]``), with
    its groups; the default group is made if there is none. Every rank calls it with the same
    arguments. ``backend_override`` maps dimensions (index or name) to a backend name or a
    ``(backend, pg_options)`` pair. A shape smaller than the world leaves the other ranks out
    (their ``get_coordinate()`` is None).

    Raises:
        RuntimeError: repeated names, not one name per dimension, a ``device_type`` with an
            index (``"cuda:0"``: pass ``device.type``), or a shape bigger than the world
            (torch's words; each also a ``ValueError``); an unknown ``device_type``
            (:class:`~accelrt.BackendUnavailableError`).
        TypeError: ``mesh_shape`` is not a tuple of ints.
        ValueError: a size below 1.

    Example::

        >>> import accelrt.distributed as dist
        >>> from accelrt.distributed import init_device_mesh
        >>> dist.init_process_group("mpi")
        >>> mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
        >>> mesh.mesh.tolist(), mesh.size(), mesh.get_group() is dist.group.WORLD
        ([0], 1, True)
        >>> dist.destroy_process_group()
    """
    sizes = _check_sizes(mesh_shape, "init_device_mesh()")
    names = _check_names(mesh_dim_names, len(sizes), "init_device_mesh()")
    overrides = (None if backend_override is None else
                 _normalize_backend_override(backend_override, len(sizes), names))
    layout = L.from_sizes(sizes)
    # before the ranks' array is made: a huge shape is torch's error, not gigabytes of ranks
    # (the device type first: a bad one makes no default group)
    _check_device_type(device_type)
    _world_size_for(L.numel(L.collapse(layout)))
    return DeviceMesh(device_type, _layout=layout,
                      _rank_map=np.arange(L.numel(L.collapse(layout)), dtype=np.int32),
                      mesh_dim_names=names, backend_override=overrides)
