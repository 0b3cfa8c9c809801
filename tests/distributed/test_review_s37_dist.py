"""Findings of the session-37 review of the day's ``accelrt.distributed`` changes (object
collectives, split sizes, coalescing checks, ``ReduceOp`` renumbering and comparisons,
``Work.result()``, ``barrier(device_ids=)``, ``register_backend(devices=)``). Each test failed
before its fix; torch 2.15.0's behaviour was observed on the same inputs (its CPU build,
gloo, one process).

* ``register_backend("MyEng", f, devices=["xla"])`` stores the engine as ``"myeng"`` and,
  since this session, makes it the default of ``"xla"``; ``Backend._unregister("MyEng")``
  (``unregister_backend``) compared the name as given, so it removed nothing: the default
  map kept ``"xla": "myeng"`` for an engine that was gone, and ``init_process_group()``
  without a backend (whose engine map is that default map) and
  ``get_default_backend_for_device("xla")`` still named it. ``unregister_backend("MPI")``
  passed the built-in check silently. The name is lower-cased now, as ``register_backend``
  stores it.
* ``barrier(device_ids=[np.int64(0)])`` raised ``TypeError`` "device_ids must be a list of
  device indices"; torch 2.15 takes numpy ints there (its ``BarrierOptions.device_ids`` and
  ``torch.device(type, index)`` read them as ints), and refuses ``np.bool_`` as it refuses
  ``True`` and a negative numpy index as a negative int ("Device index must not be
  negative").
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import accelrt.distributed as dist

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")


def test_unregister_takes_the_name_as_register_backend_stored_it() -> None:
    from accelrt.distributed._engine import unregister_backend
    from accelrt.distributed._mpi import MpiEngine
    before = dict(dist.Backend.default_device_backend_map)
    listed = list(dist.Backend.backend_list)
    dist.Backend.register_backend("S37RevEng", MpiEngine.create, devices=["xla"])
    try:
        assert dist.get_default_backend_for_device("xla") == "s37reveng"
        dist.Backend._unregister("S37RevEng")
        assert dist.Backend.default_device_backend_map == before
        assert dist.Backend.backend_list == listed
        assert "s37reveng" not in dist.Backend.backend_capability
        assert not hasattr(dist.Backend, "S37REVENG")
        with pytest.raises(ValueError, match="Default backend not registered for device : xla"):
            dist.get_default_backend_for_device("xla")
        with pytest.raises(ValueError, match="Invalid backend: 's37reveng'"):
            dist.Backend("s37reveng")
    finally:
        unregister_backend("s37reveng")   # whatever the outcome, for the next tests
    # a built-in under another spelling is still a built-in
    for name in ("MPI", "Nccl", "GLOO"):
        with pytest.raises(ValueError, match="built-in engines cannot be unregistered"):
            unregister_backend(name)
    assert dist.Backend.default_device_backend_map == before and dist.Backend.MPI == "mpi"


@needs_mpi
def test_barrier_device_ids_takes_numpy_ints_as_torch(one_rank_world: None) -> None:
    assert dist.barrier(device_ids=[np.int64(0)]) is None
    assert dist.barrier(device_ids=[np.int32(3)]) is None   # cpu: the index is not used
    w = dist.barrier(async_op=True, device_ids=[np.int64(0)])
    assert w is not None and w.wait()
    with pytest.raises(TypeError, match="device_ids must be a list of device indices"):
        dist.barrier(device_ids=[np.bool_(True)])
    with pytest.raises(RuntimeError, match="Device index must not be negative"):
        dist.barrier(device_ids=[np.int64(-1)])
    assert dist.barrier() is None   # the group is left usable


def test_register_backend_with_no_devices_serves_none() -> None:
    """torch 2.15's ``register_backend(..., devices=[])`` records an empty capability and makes
    the engine no device type's default; accelrt read ``[]`` as "every device type"."""
    from accelrt.distributed._mpi import MpiEngine
    before = dict(dist.Backend.default_device_backend_map)
    dist.register_backend("s37noneng", MpiEngine.create, devices=[])
    try:
        assert dist.Backend.backend_capability["s37noneng"] == []
        assert dist.Backend.default_device_backend_map == before
    finally:
        dist.Backend._unregister("s37noneng")


@needs_mpi
def test_monitored_barrier_wait_all_ranks_as_torchs_binding(one_rank_world: None) -> None:
    """torch 2.15's pybind bool takes None and numbers (what has ``__bool__``) and refuses a
    str, a list or a tuple with TypeError "incompatible function arguments" (gloo, one rank);
    accelrt took any value as its truth."""
    for ok in (True, False, None, 1, 0, 1.5, np.bool_(True)):
        assert dist.monitored_barrier(wait_all_ranks=ok) is None
    for bad in ("x", [1], ()):
        with pytest.raises(TypeError, match="incompatible function arguments"):
            dist.monitored_barrier(wait_all_ranks=bad)
    assert dist.monitored_barrier() is None   # the group is left usable


@needs_mpi
def test_all_to_all_single_takes_one_element_arrays_as_split_sizes(one_rank_world: None) -> None:
    """torch 2.15 (gloo, one rank) takes ``[torch.tensor(2)]``, ``[torch.tensor(2.)]`` and
    ``[torch.tensor([2])]`` as split sizes (its binding reads them with ``int()``); accelrt
    refused one-element arrays with TypeError. A bigger array is still refused."""
    import accelrt as acc
    out, inp = acc.zeros(2, device="cpu"), acc.full((2,), 3.0, device="cpu")
    for size in (acc.full((), 2, dtype="int64", device="cpu"),
                 acc.full((), 2.0, device="cpu"), acc.full((1,), 2, dtype="int32", device="cpu")):
        assert dist.all_to_all_single(out, inp, [size], [size]) is None
        assert out.tolist() == [3.0, 3.0]
    with pytest.raises(TypeError, match="must be a sequence of ints"):
        dist.all_to_all_single(out, inp, [acc.full((2,), 1, dtype="int64", device="cpu")], [2])
