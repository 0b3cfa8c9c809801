"""Argument forms of ``accelrt.random`` against PyTorch's readers (read in PyTorch's source):
randint's ``SymInt[] size`` (a sequence, never a bare int), the two seed readers
(``torch.manual_seed``/``torch.cuda.manual_seed``: ``int(seed)``; ``torch.Generator.manual_seed``:
``THPUtils_checkLong`` then ``unpack_uint64``) and the ``double`` parameters of
``uniform_``/``normal_`` (``THPUtils_checkDouble``: a bool is an int). Each test failed before
the change it names.
"""

from __future__ import annotations

import decimal
import fractions
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt.random import Generator

RT_VALUE = (ValueError, RuntimeError)     # PyTorch's RuntimeError, accelrt's ValueError
RT_TYPE = (TypeError, RuntimeError)


def _raises(exc: tuple[type[BaseException], ...], match: str, fn: Callable[[], Any]) -> None:
    with pytest.raises(exc[0], match=match) as info:
        fn()
    for cls in exc[1:]:
        assert isinstance(info.value, cls), (type(info.value), cls)


@pytest.fixture
def saved_states() -> Iterator[None]:
    saved = acc.random.get_rng_state_all()
    try:
        yield
    finally:
        acc.random.set_rng_state_all(saved)


# ---------------------------------------------------------------------- randint's size

class _Size(tuple):  # type: ignore[type-arg]
    """A ``torch.Size``-like tuple subclass."""


@pytest.mark.parametrize("args,kw", [
    ((1, 3), {}),                                   # randint(high, size): the brief's case
    ((0, 10, 5), {}),                               # randint(low, high, size)
    ((3,), {"size": 4}),
    ((), {"low": 0, "high": 3, "size": 4}),
    ((3, np.int64(2)), {}),                         # a numpy integer
    ((3, np.array(2)), {}),                         # a 0-d array
    ((3, np.True_), {}),
])
def test_randint_refuses_a_bare_int_size_like_torch(args: tuple[Any, ...],
                                                    kw: dict[str, Any]) -> None:
    # torch.randint(1, 3): "received an invalid combination of arguments" (TypeError): the
    # size is SymInt[], which takes a single int only with a declared length (int[2]);
    # before the change accelrt drew a 1-D array of 3 (or 5, 4, 2) numbers
    g = Generator("cpu:0")
    _raises((TypeError,), "argument 'size' must be tuple of ints, not",
            lambda: acc.randint(*args, device="cpu:0", generator=g, **kw))
    assert g.get_offset() == 0


def test_randint_still_takes_every_sequence_form() -> None:
    d = {"device": "cpu:0"}
    assert acc.randint(3, (2,), **d).shape == (2,)
    assert acc.randint(3, [2, 3], **d).shape == (2, 3)
    assert acc.randint(3, (), **d).shape == ()
    assert acc.randint(3, np.array([2, 3]), **d).shape == (2, 3)
    assert acc.randint(1, 5, size=_Size((4,)), **d).shape == (4,)
    assert acc.randint(3, [np.int32(2)], **d).shape == (2,)
    with pytest.raises(TypeError, match="size entries must be ints, got str"):
        acc.randint(3, "ab", **d)


# ---------------------------------------------------------------------- seeds

# torch.manual_seed / torch.cuda.manual_seed(_all): seed = int(seed) first
SEED_FORMS = [(True, 1), (False, 0), (1.0, 1), (2.9, 2), (-1.5, 2**64 - 1), ("42", 42),
              (b" 7 ", 7), (np.float64(3.7), 3), (np.True_, 1), (fractions.Fraction(7, 2), 3),
              (decimal.Decimal("5.7"), 5), (float(2**63), 2**63)]


def _module_seeders() -> list[Callable[[Any], None]]:
    return [acc.manual_seed, acc.random.manual_seed, acc.random.manual_seed_all,
            acc.cpu.manual_seed, acc.cpu.manual_seed_all, acc.cpu.random.manual_seed]


@pytest.mark.parametrize("seed,stored", SEED_FORMS, ids=repr)
def test_module_seed_functions_read_the_seed_with_int_like_torch(
        seed: Any, stored: int, saved_states: None) -> None:
    # before the change each of these raised TypeError ("seed must be an int, got bool")
    for f in _module_seeders():
        acc.cpu.manual_seed(12345)
        f(seed)
        assert acc.cpu.initial_seed() == stored, f
    acc.cuda.manual_seed(seed)      # checked, then ignored where the backend is unusable


@pytest.mark.parametrize("seed,exc,msg", [
    (None, RT_TYPE, "got NoneType"), ([1], RT_TYPE, "got list"), (1j, RT_TYPE, "got complex"),
    ("x", (ValueError,), "invalid literal"), ("1.5", (ValueError,), "invalid literal"),
    (float("nan"), (ValueError,), "NaN"), (float("inf"), (OverflowError,), "infinity"),
    (2**64, RT_VALUE, "out of range"), (-(2**63) - 1, RT_VALUE, "out of range"),
    (1e20, RT_VALUE, "out of range"),
], ids=repr)
def test_module_seed_functions_refuse_what_int_refuses(
        seed: Any, exc: tuple[type[BaseException], ...], msg: str, saved_states: None) -> None:
    # torch: int(None) TypeError, int("x") ValueError, int(inf) OverflowError, and a seed
    # outside [-2**63, 2**64) RuntimeError "Overflow when unpacking long" (accelrt raised a
    # plain ValueError, not a RuntimeError)
    acc.cpu.manual_seed(99)
    for f in [*_module_seeders(), acc.cuda.manual_seed, acc.cuda.manual_seed_all]:
        _raises(exc, msg, lambda f=f: f(seed))
    assert acc.cpu.initial_seed() == 99


@pytest.mark.parametrize("seed,exc,msg", [
    (True, RT_TYPE, "manual_seed expected a long, but got bool"),
    (np.True_, RT_TYPE, "manual_seed expected a long, but got bool"),
    (1.0, RT_TYPE, "manual_seed expected a long, but got float"),
    ("3", RT_TYPE, "manual_seed expected a long, but got str"),
    (np.float64(2), RT_TYPE, "manual_seed expected a long, but got float64"),
    (2**64, RT_VALUE, "Overflow when unpacking long"),
    (-(2**63) - 1, RT_VALUE, "Overflow when unpacking long"),
], ids=repr)
def test_generator_manual_seed_is_strict_like_torch(seed: Any,
                                                     exc: tuple[type[BaseException], ...],
                                                     msg: str) -> None:
    # torch.Generator.manual_seed: RuntimeError "manual_seed expected a long, but got bool";
    # out of range: "Overflow when unpacking long" (a RuntimeError; accelrt raised a plain
    # ValueError with its own text)
    g = Generator("cpu:0").manual_seed(5)
    _raises(exc, msg, lambda: g.manual_seed(seed))
    assert g.initial_seed() == 5
    assert g.manual_seed(np.int8(-1)).initial_seed() == 2**64 - 1   # wraps, as torch


# ---------------------------------------------------------------------- uniform_ / normal_

def test_uniform_and_normal_take_bools_as_torch_reads_a_double() -> None:
    # THPUtils_checkDouble accepts PyLong (bool is one) and numpy scalars (np.bool_ too):
    # torch.empty(3).uniform_(False, True) draws in [0, 1); accelrt raised TypeError
    g = Generator("cpu:0").manual_seed(3)
    x = acc.empty(1000, device="cpu:0")
    v = acc.random.uniform_(x, False, True, generator=g).numpy()
    assert v.min() >= 0.0 and v.max() < 1.0
    assert acc.random.uniform_(x, np.False_, np.True_, generator=g).numpy().max() < 1.0
    assert set(acc.random.normal_(x, True, False, generator=g).tolist()) == {1.0}
    assert set(acc.random.normal_(x, mean=np.True_, std=0, generator=g).tolist()) == {1.0}
    for bad in ("1", None, 1j, np.complex64(1), np.array(1.0), [1.0]):
        _raises((TypeError,), "must be a real number",
                lambda bad=bad: acc.random.uniform_(x, bad, 2.0, generator=g))
