"""Exception classes as PyTorch's (issue 10 §2): where PyTorch raises RuntimeError, accelrt's
exception is a RuntimeError too (and still the ValueError/IndexError/TypeError that older
accelrt code catches), with PyTorch's message text ("tensor" reads "array")."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt._errors import (
    AcceleratorError,
    AcceleratorIndexError,
    AcceleratorTypeError,
    AcceleratorValueError,
    map_backend_errors,
)
from accelrt.backends.cpu import CpuBackend

# closed and unregistered after the module
_backends = module_backends(
    {"errcpu": lambda: CpuBackend(num_devices=2, async_streams=False, name="errcpu")})


@pytest.mark.parametrize(("cls", "base"), [(AcceleratorValueError, ValueError),
                                           (AcceleratorIndexError, IndexError),
                                           (AcceleratorTypeError, TypeError)])
def test_classes_are_runtime_errors_of_the_one_tree(cls: type[Exception],
                                                    base: type[Exception]) -> None:
    assert issubclass(cls, RuntimeError) and issubclass(cls, base)
    assert issubclass(cls, AcceleratorError)
    e = pickle.loads(pickle.dumps(cls("msg")))
    assert type(e) is cls and str(e) == "msg"
    with pytest.raises(cls), map_backend_errors("cpu", "x"):  # passes the mapping unchanged
        raise cls("msg")


# ---------------------------------------------------------------------- device indices

OUT_OF_RANGE = r"^Device index value 7 is out of index range \[0, 2\)"


@pytest.mark.parametrize("call", [
    lambda: acc.Stream("errcpu:7"),
    lambda: acc.Event("errcpu:7"),
    lambda: acc.get_device_properties("errcpu:7"),
    lambda: acc.memory.memory_allocated("errcpu:7"),
    lambda: acc.synchronize("errcpu:7"),
    lambda: acc.set_device_index(7),
], ids=["Stream", "Event", "get_device_properties", "memory_allocated", "synchronize",
        "set_device_index"])
def test_out_of_range_device_index_is_runtime_and_index_error(call: Callable[[], Any]) -> None:
    acc.set_current_accelerator("errcpu")
    with pytest.raises(RuntimeError, match=OUT_OF_RANGE) as info:
        call()
    assert isinstance(info.value, IndexError)


def test_negative_device_index_is_runtime_error_with_pytorch_text() -> None:
    with pytest.raises(RuntimeError, match="Device index must not be negative") as info:
        acc.device("cpu", -1)
    assert isinstance(info.value, ValueError)
    acc.set_current_accelerator("errcpu")
    with pytest.raises(RuntimeError, match="Device index must not be negative"):
        acc.Stream(-1)


# ---------------------------------------------------------------------- events

def test_event_misuse_is_runtime_error() -> None:
    e = acc.Event("errcpu:0", enable_timing=True)
    e.record(acc.Stream("errcpu:0"))   # the first record binds it (as torch.Event)
    with pytest.raises(RuntimeError, match=r"^Event device 0 does not match recording "
                                           r"stream's device 1\."):
        e.record(acc.Stream("errcpu:1"))
    f = acc.Event("errcpu:1", enable_timing=True)
    e.record()
    f.record(acc.current_stream("errcpu:1"))   # (record() is device 0's current stream)
    with pytest.raises(RuntimeError, match="same device"):
        e.elapsed_time(f)
    with pytest.raises(RuntimeError, match=r"^Event device type errcpu does not match other's "
                                           r"device type cpu\."):
        e.elapsed_time(acc.Event("cpu", enable_timing=True))
    with pytest.raises(RuntimeError, match=r"^Event device type errcpu does not match blocking "
                                           r"stream's device type cpu\."):
        e.wait(acc.Stream("cpu"))
    with pytest.raises(RuntimeError, match=r"^Event device type errcpu does not match blocking "
                                           r"stream's device type cpu\.") as info:
        acc.Stream("cpu").wait_stream(acc.Stream("errcpu:0"))
    assert isinstance(info.value, ValueError)


# ---------------------------------------------------------------------- comm

def _arr(dev: str, n: int = 4) -> acc.Array:
    return acc.asarray(np.arange(float(n)), device=dev, copy=True)


COMM_RUNTIME_ERRORS: list[tuple[str, Callable[[], Any], str, type[Exception]]] = [
    ("broadcast_devices_and_out",
     lambda: acc.comm.broadcast(_arr("errcpu:0"), [0], out=[_arr("errcpu:1")]),
     r"^Exactly one of 'devices' and 'out' must be specified, but got devices=", ValueError),
    ("scatter_no_devices",
     lambda: acc.comm.scatter(_arr("errcpu:0"), []),
     r"^Expected at least one device to scatter to", ValueError),
    ("broadcast_out_not_on_device",
     lambda: acc.comm.broadcast(_arr("errcpu:0"), out=[np.zeros(4)]),
     (r"^Expected all output arrays to be accelrt arrays, but output array at index 0 has "
      r"device 'host'"), TypeError),
    ("broadcast_out_shape",
     lambda: acc.comm.broadcast(_arr("errcpu:0"), out=[_arr("errcpu:1", 3)]),
     r"^Expected all output arrays to have same shape as the source array", ValueError),
    ("scatter_out_and_devices",
     lambda: acc.comm.scatter(_arr("errcpu:0"), [0], out=[_arr("errcpu:1")]),
     r"^'devices' must not be specified when 'out' is specified, but got devices=",
     ValueError),
    ("scatter_out_and_chunk_sizes",
     lambda: acc.comm.scatter(_arr("errcpu:0"), chunk_sizes=[4], out=[_arr("errcpu:1")]),
     r"^'chunk_sizes' must not be specified when 'out' is specified, but got chunk_sizes=",
     ValueError),
    ("scatter_chunk_sum",
     lambda: acc.comm.scatter(_arr("errcpu:0"), [0, 1], chunk_sizes=[1, 1]),
     (r"^split_with_sizes expects split_sizes to sum exactly to 4 \(input array's size at "
      r"dimension 0\), but got split_sizes=\[1, 1\]"), ValueError),
    ("gather_destination_and_out",
     lambda: acc.comm.gather([_arr("errcpu:0")], destination=0, out=np.zeros(4)),
     r"^'destination' must not be specified when 'out' is specified, but got destination=",
     ValueError),
    ("gather_empty",
     lambda: acc.comm.gather([]),
     r"^Expected at least one array to gather from", ValueError),
    ("reduce_add_destination",
     lambda: acc.comm.reduce_add([_arr("errcpu:0"), _arr("errcpu:0")], destination=1),
     r"^reduce_add expects destination to be on the same device with one of the arrays",
     ValueError),
    ("broadcast_coalesced_not_on_root",
     lambda: acc.comm.broadcast_coalesced([_arr("errcpu:1")], [0, 1]),
     r"^All arrays must be on devices\[0\]", ValueError),
]


@pytest.mark.parametrize(("call", "message", "also"),
                         [pytest.param(c, m, a, id=i) for i, c, m, a in COMM_RUNTIME_ERRORS])
def test_comm_argument_errors_are_runtime_errors(call: Callable[[], Any], message: str,
                                                 also: type[Exception]) -> None:
    acc.set_current_accelerator("errcpu")
    with pytest.raises(RuntimeError, match=message) as info:
        call()
    assert isinstance(info.value, also)   # `except ValueError` / `except TypeError` still work


def test_comm_keeps_pytorch_value_error_for_reduce_add_sizes() -> None:
    # torch.nn.parallel.comm.reduce_add raises a plain ValueError here
    with pytest.raises(ValueError, match=r"^input 1 has invalid size: got 3, but expected 4") \
            as info:
        acc.comm.reduce_add([_arr("errcpu:0"), _arr("errcpu:1", 3)], destination="errcpu:0")
    assert not isinstance(info.value, RuntimeError)
