"""Session-37 leftovers: small differences from torch 2.15 that the session-36 reviewers saw
and left. Each test failed before its fix. The expected behaviour is torch 2.15.0's, observed
on its CPU build with the same inputs (or read in its sources where the path needs CUDA), and
is written here as literals.
"""

from __future__ import annotations

import pytest

import accelrt as acc
import accelrt.distributed as dist


# ---------------------------------------------------------------- 1. get_default_backend_for_device

def test_default_backend_of_an_unknown_device_type_is_a_runtime_error() -> None:
    # torch 2.15: get_default_backend_for_device("bogus") -> RuntimeError "Expected one of cpu,
    # cuda, ... device type at start of device string: bogus" (torch.device refuses it)
    with pytest.raises(RuntimeError, match="device type at start of device string: bogus"):
        dist.get_default_backend_for_device("bogus")
    # still a ValueError, as accelrt raised before (and as torch raises for "meta")
    with pytest.raises(ValueError, match="Default backend not registered for device : bogus"):
        dist.get_default_backend_for_device("bogus")


def test_default_backend_of_a_known_type_without_one_is_a_value_error() -> None:
    # torch 2.15: "meta" and "hpu" -> ValueError "Default backend not registered for device : meta"
    for name in ("meta", "hpu"):
        with pytest.raises(ValueError, match=f"^Default backend not registered for device : {name}$"):
            dist.get_default_backend_for_device(name)


def test_default_backend_of_a_malformed_device_string_is_a_runtime_error() -> None:
    # torch 2.15: get_default_backend_for_device("cuda:x") -> RuntimeError "Invalid device
    # string: 'cuda:x'"; accelrt answered "nccl"
    with pytest.raises(RuntimeError, match="Invalid device string: 'cuda:x'"):
        dist.get_default_backend_for_device("cuda:x")
    assert dist.get_default_backend_for_device("cuda:1") == "nccl"
    assert dist.get_default_backend_for_device("cpu") == "mpi"
