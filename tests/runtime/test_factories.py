"""The factories' one size normaliser (``f(2, 3)``, ``f((2, 3))``, ``f([2, 3])``,
``f(size=(2, 3))`` alike, keyword-only dtype and device, PyTorch's error types) and the
default device of factories (``with acc.device(...)``, ``set_default_device``), as
``torch.empty`` and ``torch.device``'s ``DeviceContext`` do."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt.backends.cpu import CpuBackend

#: a second backend with several devices, so a default device differs from the current one
MULTI = "factcpu"
_backends = module_backends(
    {MULTI: lambda: CpuBackend(num_devices=3, async_streams=False, name=MULTI)})

#: every factory that takes the size as ints or one sequence
VARARGS = ["Array", "empty", "zeros", "ones", "rand", "randn"]


def factory(name: str) -> Callable[..., acc.Array]:
    f: Callable[..., acc.Array] = getattr(acc, name)
    return f


@pytest.fixture(autouse=True)
def _no_default_device() -> Iterator[None]:
    yield
    acc.set_default_device(None)


# ---------------------------------------------------------------------- sizes

@pytest.mark.parametrize("name", VARARGS)
def test_size_as_ints_or_one_sequence(backend: str, name: str) -> None:
    f, dev = factory(name), f"{backend}:0"
    for call in (lambda: f(2, 3, device=dev), lambda: f((2, 3), device=dev),
                 lambda: f([2, 3], device=dev), lambda: f(size=(2, 3), device=dev),
                 lambda: f(np.int64(2), np.int32(3), device=dev),
                 lambda: f(np.array([2, 3]), device=dev)):
        a = call()
        assert a.shape == (2, 3) and a.dtype == np.float32 and str(a.device) == dev
    assert f(4, device=dev).shape == (4,) and f(size=[4], device=dev).shape == (4,)
    with pytest.raises(TypeError, match="argument 'size' must be tuple of ints, not int"):
        f(size=4, device=dev)      # as torch 2.14.1 refuses it (session 26)
    assert f((), device=dev).shape == () and f([], device=dev).shape == ()
    assert f(2, 0, 3, device=dev).shape == (2, 0, 3)
    assert f(2, 3, dtype="float64", device=dev).dtype == np.float64


def test_contents_and_the_one_argument_factories(backend: str) -> None:
    dev = f"{backend}:0"
    assert acc.zeros(2, 2, dtype="int32", device=dev).tolist() == [[0, 0], [0, 0]]
    assert acc.ones(2, 3, device=dev).tolist() == [[1.0] * 3] * 2
    assert acc.ones([3], dtype="bool", device=dev).tolist() == [True] * 3
    assert acc.ones(size=(1, 2), dtype="complex64", device=dev).tolist() == [[1 + 0j, 1 + 0j]]
    # full and randint take the size as one argument, as in PyTorch
    assert acc.full((2, 3), 1.5, device=dev).tolist() == [[1.5] * 3] * 2
    assert acc.full(size=[2], fill_value=7, device=dev).tolist() == [7, 7]
    assert acc.full(3, 1, dtype="int8", device=dev).tolist() == [1, 1, 1]
    assert acc.randint(10, [2, 3], device=dev).shape == (2, 3)


#: the factories of accelrt 0.1 whose positional dtype still works, deprecated
LEGACY = ("Array", "empty", "zeros")

BAD: list[tuple[tuple[Any, ...], dict[str, Any], type[BaseException], str]] = [
    (((2, 3), 4), {}, TypeError, "mixes ints and sequences"),
    ((2, (3,)), {}, TypeError, "mixes ints and sequences"),
    ((2, "float32"), {}, TypeError, "dtype and device are keyword-only"),
    ((2, np.float64), {}, TypeError, "keyword-only"),
    ((2.0,), {}, TypeError, "size entries must be ints, got float"),
    (((2, 1.5),), {}, TypeError, "size entries must be ints, got float"),
    ((True,), {}, TypeError, "bool"),
    (((2, np.True_),), {}, TypeError, "bool"),
    (("3",), {}, TypeError, "size entries must be ints, got str"),
    ((None,), {}, TypeError, "size entries must be ints"),
    ((np.zeros((2, 2), int),), {}, TypeError, "1-D"),
    ((), {}, TypeError, "missing the size"),
    ((2,), {"size": (3,)}, TypeError, "both positionally"),
    ((2,), {"shape": (3,)}, TypeError, "unexpected keyword"),
]


@pytest.mark.parametrize("name", VARARGS)
@pytest.mark.parametrize("args, kw, exc, match", BAD)
def test_bad_sizes_are_type_errors(name: str, args: tuple[Any, ...], kw: dict[str, Any],
                                   exc: type[BaseException], match: str) -> None:
    if match.endswith("keyword-only") and name in LEGACY:
        pytest.skip(f"{name}(shape, dtype) is 0.1's deprecated form (a FutureWarning): "
                    "test_the_contracts_positional_dtype_still_works_with_a_future_warning")
    with pytest.raises(exc, match=match) as info:
        factory(name)(*args, device="cpu:0", **kw)
    assert f"{name}()" in str(info.value)       # the message names the factory


@pytest.mark.parametrize("name", [*VARARGS, "full", "randint"])
@pytest.mark.parametrize("size", [(-1,), (2, -3)])
def test_negative_dimension_is_torchs_runtime_error(name: str, size: tuple[int, ...]) -> None:
    calls: dict[str, Callable[[], object]] = {
        "full": lambda: acc.full(size, 1.0, device="cpu:0"),
        "randint": lambda: acc.randint(5, size, device="cpu:0"),
    }
    call = calls.get(name, lambda: factory(name)(*size, device="cpu:0"))
    neg = min(size)
    # PyTorch raises RuntimeError("Trying to create tensor with negative dimension -1: [-1]");
    # accelrt's error is that RuntimeError and a ValueError
    dims = ", ".join(map(str, size))
    with pytest.raises(RuntimeError, match=rf"negative dimension {neg}: \[{dims}\]"):
        call()
    with pytest.raises(ValueError, match="every dimension must be >= 0"):
        call()


def test_dtype_and_device_are_keyword_only() -> None:
    with pytest.raises(TypeError, match=r"ones\(2, 3, dtype="):
        acc.ones(4, "int32", "cpu:0")
    with pytest.raises(TypeError, match="positional"):
        acc.full((2,), 1, "int32")
    with pytest.raises(TypeError, match="full.*one sequence"):
        acc.full((2, "x"), 1)
    with pytest.raises(TypeError, match="full.*one sequence"):
        acc.full(((2,), 3), 1)


@pytest.mark.parametrize("make", [acc.Array, acc.empty, acc.zeros])
def test_the_contracts_positional_dtype_still_works_with_a_future_warning(make: Any) -> None:
    """accelrt 0.1's ``empty(shape, dtype, device)`` (the contract's form) keeps working,
    deprecated; an int in second place is still a size."""
    with pytest.warns(FutureWarning, match="keyword-only, as in PyTorch"):
        a = make((2, 3), "int16", "cpu:0")
    assert (a.shape, str(a.dtype), str(a.device)) == ((2, 3), "int16", "cpu:0")
    with pytest.warns(FutureWarning):
        b = make(4, np.float64)
    assert (b.shape, b.dtype) == ((4,), np.float64)
    assert make(2, 3, device="cpu:0").shape == (2, 3)
    with pytest.warns(FutureWarning), pytest.raises(TypeError, match="dtype twice"):
        make((2,), "int8", dtype="int16")
    with pytest.warns(FutureWarning), pytest.raises(TypeError, match="device twice"):
        make((2,), "int8", "cpu:0", device="cpu:0")


# ---------------------------------------------------------------------- default device

def test_with_device_is_the_factories_default(backend: str) -> None:
    """Inside ``with acc.device(d):`` every factory without ``device=`` allocates on ``d``
    (here a device of another backend than the current accelerator); the current device,
    the current stream and explicit devices are untouched; exiting restores."""
    target = acc.device(MULTI, 2)
    index, stream = acc.current_device_index(), acc.current_stream()
    ext = acc.empty(2, device=f"{backend}:0")
    with target as entered:
        assert entered is target
        made = [acc.Array(2), acc.empty(2, 3), acc.zeros(2), acc.ones(2), acc.full((2,), 1.0),
                acc.rand(2), acc.randn(2), acc.randint(5, (2,)), acc.asarray([1.0, 2.0]),
                acc.asarray(np.zeros(2)), acc.asarray(ext), acc.empty(2, device=None)]
        assert [a.device for a in made] == [target] * len(made)
        assert acc.empty(2, device=f"{backend}:0").device == acc.device(backend, 0)
        assert acc.get_default_device() == target
        assert acc.current_device_index() == index and acc.current_stream() == stream
        assert acc.current_accelerator() == acc.device(backend)
    assert acc.empty(2).device == acc.device(backend, index)
    assert acc.get_default_device() == acc.device(backend, index)


def test_nested_blocks_restore_the_outer_one() -> None:
    d0, d1, d2 = (acc.device(MULTI, i) for i in range(3))
    with d1:
        assert acc.empty(1).device == d1
        with d2:
            assert acc.rand(1).device == d2
            with d1:
                assert acc.zeros(1).device == d1
            assert acc.zeros(1).device == d2
        assert acc.randn(1).device == d1
        with acc.device(MULTI):     # no index: the current device of that backend
            assert acc.empty(1).device == d0
    cur = acc.current_accelerator()
    assert cur is not None
    assert acc.get_default_device() == acc.device(cur.type, acc.current_device_index())


def test_block_restores_after_an_exception() -> None:
    before = acc.get_default_device()
    with pytest.raises(KeyError), acc.device(MULTI, 1):
        raise KeyError("x")
    assert acc.get_default_device() == before


def test_set_default_device_and_blocks() -> None:
    d1, d2 = acc.device(MULTI, 1), acc.device(MULTI, 2)
    acc.set_default_device(f"{MULTI}:1")
    assert acc.get_default_device() == d1 and acc.empty(1).device == d1
    assert acc.randint(3, (1,)).device == d1
    with d2:                                    # the block wins inside it
        assert acc.empty(1).device == d2
        acc.set_default_device(d1)              # set inside a block: the block still wins
        assert acc.ones(1).device == d2
    assert acc.empty(1).device == d1
    assert acc.empty(1, device="cpu:0").device == acc.device("cpu", 0)
    acc.set_default_device(None)
    assert acc.empty(1).device == acc.get_default_device()
    cur = acc.current_accelerator()
    assert cur is not None and acc.get_default_device().type == cur.type
    with pytest.raises(TypeError):
        acc.set_default_device(1.5)  # type: ignore[arg-type]


def test_default_device_is_per_thread() -> None:
    """As PyTorch's (a thread-local mode stack): another thread does not see this thread's
    block or default, and its own do not leak back."""
    d1, d2 = acc.device(MULTI, 1), acc.device(MULTI, 2)
    seen: dict[str, object] = {}
    inside = threading.Event()
    release = threading.Event()

    def other() -> None:
        seen["other"] = acc.get_default_device()
        with d2:
            acc.set_default_device(d2)
            inside.set()
            release.wait(30)
            seen["other_block"] = acc.empty(1).device

    acc.set_default_device(d1)
    with d1:
        t = threading.Thread(target=other)
        t.start()
        assert inside.wait(30)
        assert acc.empty(1).device == d1        # the other thread's block is not ours
        release.set()
        t.join(30)
    assert acc.empty(1).device == d1
    assert seen["other_block"] == d2
    assert seen["other"] != d1


def test_generator_of_another_device_in_a_block() -> None:
    """As in PyTorch: the block sets the device, and a generator of another device of its
    backend draws there (torch's check_generator compares device types only, s41)."""
    g0 = acc.random.Generator(f"{MULTI}:0")
    assert acc.rand(2, generator=g0).device == acc.device(MULTI, 0)
    with acc.device(MULTI, 1):
        assert acc.rand(2, generator=g0).device == acc.device(MULTI, 1)
        with pytest.raises(ValueError, match="generator"):
            acc.rand(2, generator=acc.random.Generator("cpu:0"))
        assert acc.rand(2, generator=acc.random.Generator(f"{MULTI}:1")).device == \
            acc.device(MULTI, 1)


def test_storage_nbytes_bound_is_int64() -> None:
    """Every allocation's size check accepts exactly int64's bytes (2**63 - 1) and refuses one
    more, on both builds (compiled, the bound is tested by a shift, ``nbytes >> 63``, not a
    compare against a constant wider than mypyc's ints); an empty shape is checked on its
    non-zero dimensions."""
    from accelrt._errors import AcceleratorValueError
    from accelrt._size import storage_nbytes
    assert storage_nbytes((2**63 - 1,), 1) == 2**63 - 1
    assert storage_nbytes((2**62 - 1,), 2) == 2**63 - 2
    assert storage_nbytes((3, 5), 4) == 60
    assert storage_nbytes((), 8) == 8
    assert storage_nbytes((0, 2**61), 2) == 0
    for shape, itemsize in [((2**63,), 1), ((2**62,), 2), ((2**31, 2**31), 2),
                            ((0, 2**62), 2), ((2**64 + 1,), 1)]:
        with pytest.raises(AcceleratorValueError, match="overflowed"):
            storage_nbytes(shape, itemsize)
