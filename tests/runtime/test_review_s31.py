"""Review of session 31's torch 2.15.0 changes: regression tests for what the review found.

Expectations were observed by running torch 2.15.0 (CPU build, gloo, world size 1) and are
written here as literals (no torch in the test environment).
"""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterator

import pytest

import accelrt as acc
import accelrt.distributed as dist
from accelrt import backends
from accelrt.testing import SimulatedBackend

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed")


@pytest.fixture
def other_accelerator() -> Iterator[str]:
    """A current accelerator that is not ``cpu`` (as cuda is on a GPU machine): a simulated
    backend of two devices, its memory not the host's, restored afterwards."""
    name = "s31acc" + uuid.uuid4().hex[:8]
    backends.register(name, lambda: SimulatedBackend(device_count=2, name=name), replace=True)
    prev = acc.current_accelerator()
    acc.set_current_accelerator(name)
    try:
        yield name
    finally:
        acc.set_current_accelerator(prev.type if prev is not None else "cpu")


# ---------------------------------------------------------------------- device_id

@needs_mpi
def test_a_cpu_device_id_binds_while_another_backend_is_the_accelerator(
        other_accelerator: str) -> None:
    # torch 2.15.0 binds device_id=torch.device("cpu:0") whatever the accelerator is (its
    # checks skip cpu devices; on a CUDA build it gives bound_device_id cpu:0). accelrt made
    # the device current with set_device_index, which refuses a device of another backend
    # than the current accelerator: ValueError("cpu doesn't match the current accelerator
    # ...") after the world had started, leaving no default group
    acc.set_device_index(1)
    dist.init_process_group("cpu:mpi", store=dist.HashStore(), rank=0, world_size=1,
                            device_id="cpu:0")
    try:
        world = dist.group.WORLD
        assert world is not None and world.bound_device_id == acc.device("cpu", 0)
        assert acc.cpu.current_device() == 0
        assert acc.current_device_index() == 1     # the accelerator's own device is kept
        a = acc.full((2,), 2.0, device="cpu")
        dist.all_reduce(a)
        assert a.tolist() == [2.0, 2.0]
    finally:
        dist.destroy_process_group()
        acc.set_device_index(0)


@needs_mpi
def test_a_device_id_of_the_accelerator_is_made_current(other_accelerator: str) -> None:
    dist.init_process_group("cpu:mpi", store=dist.HashStore(), rank=0, world_size=1,
                            device_id=1)
    try:
        world = dist.group.WORLD
        assert world is not None
        assert world.bound_device_id == acc.device(other_accelerator, 1)
        assert acc.current_device_index() == 1
    finally:
        dist.destroy_process_group()
        acc.set_device_index(0)


@needs_mpi
@pytest.mark.parametrize("device_id", ["cpu", acc.device("cpu"), "cpu:7", acc.device("cpu", 7)])
def test_new_group_in_a_bound_world_compares_before_it_checks(device_id: object) -> None:
    # observed on torch 2.15.0 (world bound to cpu:0): new_group([0], device_id=
    # torch.device("cpu")) and device_id=torch.device("cpu:5") both raise AssertionError
    # "Mismatched bound device between new pg and the default pg." (the comparison comes
    # first); accelrt checked the device first: ValueError (no index), IndexError (range)
    dist.init_process_group("cpu:mpi", store=dist.HashStore(), rank=0, world_size=1,
                            device_id="cpu:0")
    try:
        with pytest.raises(AssertionError, match="^Mismatched bound device between new pg "
                                                 "and the default pg.$"):
            dist.new_group([0], device_id=device_id)  # type: ignore[arg-type]
        with pytest.raises(AssertionError, match="^Mismatched bound device"):
            dist.new_group([7], device_id=device_id)  # type: ignore[arg-type]
        assert dist.new_group([0], device_id="cpu:0").bound_device_id == acc.device("cpu", 0)
    finally:
        dist.destroy_process_group()


@needs_mpi
def test_new_group_of_an_accelerator_device_without_index_has_the_group_message(
        other_accelerator: str) -> None:
    # observed on torch 2.15.0 (unbound world): new_group([0], device_id=torch.device("cuda"))
    # raises ValueError "init_process_group device_id parameter must be a device with a valid
    # index, e.g. cpu:0 or cuda:0" (_new_process_group_helper's check), not
    # init_process_group's "Please use a device_id with index."
    dist.init_process_group("cpu:mpi", store=dist.HashStore(), rank=0, world_size=1)
    try:
        for device_id in (other_accelerator, "cpu"):
            with pytest.raises(ValueError, match=r"^init_process_group device_id parameter "
                               r"must be a device with a valid index, e\.g\. cpu:0 or cuda:0$"):
                dist.new_group([0], device_id=device_id)
        g = dist.new_group([0], device_id=f"{other_accelerator}:1")
        assert g.bound_device_id == acc.device(other_accelerator, 1)
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------------- annotation_config

_SUPPORTED = "supported: ['backend', 'key_by', 'py_stack_filter_paths', 'record_py_stacks']"


@pytest.mark.parametrize(("config", "shown"), [
    ({1: "x"}, "[1]"), ({("a",): 1}, "[('a',)]"), ({None: 1}, "[None]"),
    ({"b": 1, "a": 2}, "['a', 'b']"),
])
def test_unknown_annotation_keys_are_shown_as_torch_shows_them(config: dict[object, object],
                                                               shown: str) -> None:
    # observed on torch 2.15.0: torch.cuda.graphs._parse_annotation_config({1: "x"}) raises
    # ValueError "unrecognized annotation_config key(s) [1]; supported: [...]" (the keys'
    # reprs, sorted); accelrt showed them as strings (['1'])
    g = acc.cpu.Graph()
    with pytest.raises(ValueError) as info:
        acc.cpu.graph(g, annotation_config=config)
    assert str(info.value) == f"unrecognized annotation_config key(s) {shown}; {_SUPPORTED}"


def test_unknown_annotation_keys_that_do_not_order_are_still_a_value_error() -> None:
    # torch 2.15's sorted() raises TypeError for {1: ..., "a": ...}; accelrt lists them in
    # their reprs' order (docs/differences.md)
    g = acc.cpu.Graph()
    with pytest.raises(ValueError, match=r"key\(s\) \['a', 1\];"):
        acc.cpu.graph(g, annotation_config={"a": 1, 1: 2})
