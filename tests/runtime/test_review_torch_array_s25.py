"""``accelrt.Array`` and its factories against ``torch.Tensor`` and torch's factories on the
CPU, by running both (a differential harness, run by hand with torch 2.14.1; CI has no
torch, so what torch did is written here as literal values and messages, each marked
"observed on torch 2.14.1"). Each test failed before the change it names; the differences
that stay are deliberate and listed in docs/differences.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt import backends
from accelrt._errors import AcceleratorTypeError
from accelrt.backends.cpu import CpuBackend

backends.register("s25k", lambda: CpuBackend(num_devices=2, name="s25k"), replace=True)
D0, D1 = "s25k:0", "s25k:1"

RT_TYPE = (TypeError, RuntimeError)       # PyTorch's RuntimeError, accelrt's TypeError too


def _raises(exc: tuple[type[BaseException], ...], match: str, fn: Callable[[], Any]) -> None:
    with pytest.raises(exc[0], match=match) as info:
        fn()
    for cls in exc[1:]:
        assert isinstance(info.value, cls), (type(info.value), cls)


@pytest.fixture(scope="module", autouse=True)
def _drain() -> Iterator[None]:
    yield
    b = backends.get_backend("s25k")
    for i in range(b.device_count()):
        b.synchronize(i)


# ---------------------------------------------------------------------- dtype=None

# observed on torch 2.14.1: dtype=None is the default dtype (float32; randint's int64), in
# every factory: torch.empty(2, dtype=None).dtype == torch.float32. accelrt refused None in
# empty/zeros/ones/Array ("dtype must not be None"), and rand/randn/randint read it as
# numpy's np.dtype(None), float64 (so randint(3, (2,), dtype=None) made floats).
NONE_DEFAULTS: list[tuple[str, Callable[..., Any], str]] = [
    ("empty", lambda **kw: acc.empty(2, 3, **kw), "float32"),
    ("zeros", lambda **kw: acc.zeros(2, 3, **kw), "float32"),
    ("ones", lambda **kw: acc.ones((2, 3), **kw), "float32"),
    ("Array", lambda **kw: acc.Array(2, 3, **kw), "float32"),
    ("rand", lambda **kw: acc.rand(2, 3, **kw), "float32"),
    ("randn", lambda **kw: acc.randn(2, 3, **kw), "float32"),
    ("randint", lambda **kw: acc.randint(3, (2, 3), **kw), "int64"),
]


@pytest.mark.parametrize("name, make, want", NONE_DEFAULTS, ids=[n for n, _, _ in NONE_DEFAULTS])
def test_dtype_none_is_the_default_dtype(name: str, make: Callable[..., Any], want: str) -> None:
    a = make(dtype=None, device=D0)
    assert a.dtype == np.dtype(want) and a.shape == (2, 3)
    assert make(device=D0).dtype == a.dtype
    if name == "ones":
        assert a.tolist() == [[1.0] * 3] * 2
    if name in ("empty", "zeros", "ones", "rand", "randn"):
        host = make(dtype=None, pin_memory=True)
        assert isinstance(host, np.ndarray) and host.dtype == np.dtype(want)


def test_dtype_none_with_the_legacy_positional_dtype_is_not_a_second_dtype() -> None:
    with pytest.warns(FutureWarning, match="positional dtype"):
        a = acc.empty((2,), "int8", dtype=None, device=D0)  # type: ignore[call-overload]
    assert a.dtype == np.int8


# ---------------------------------------------------------------------- complex rand/randn

# observed on torch 2.14.1: rand/randn take complex64/complex128 and draw the interleaved real
# and imaginary parts as floats: torch.randn(3, dtype=torch.complex64, generator=g) is
# torch.randn(6, generator=g) (same seed) times sqrt(1/2), pairwise; rand's parts are uniform
# in [0, 1). accelrt raised TypeError ("makes floating numbers").
@pytest.mark.parametrize("dtype, part", [("complex64", "float32"), ("complex128", "float64")])
def test_complex_rand_and_randn_draw_each_part_as_a_float(dtype: str, part: str) -> None:
    g = acc.random.Generator(D0).manual_seed(11)
    z = acc.randn(3, 2, dtype=dtype, generator=g).numpy()
    g.manual_seed(11)
    x = acc.randn(12, dtype=part, generator=g).numpy()
    assert z.dtype == np.dtype(dtype) and z.shape == (3, 2)
    np.testing.assert_allclose(z.view(part).ravel(), x * math.sqrt(0.5), rtol=1e-6)
    g.manual_seed(11)
    u = acc.rand(4, dtype=dtype, generator=g).numpy()
    g.manual_seed(11)
    assert u.view(part).tolist() == acc.rand(8, dtype=part, generator=g).tolist()
    big = acc.randn(100_000, dtype=dtype, device=D0).numpy()
    assert abs(float(big.real.std()) - math.sqrt(0.5)) < 0.01
    assert abs(float(big.imag.std()) - math.sqrt(0.5)) < 0.01
    assert abs(float(np.mean(np.abs(big) ** 2)) - 1.0) < 0.02
    pinned = acc.rand(2, dtype=dtype, pin_memory=True)
    assert pinned.dtype == np.dtype(dtype) and ((pinned.real >= 0) & (pinned.real < 1)).all()
    assert acc.rand(0, dtype=dtype, device=D0).shape == (0,)


# observed on torch 2.14.1: torch.rand(2, dtype=torch.int64) raises NotImplementedError
# '"check_uniform_bounds" not implemented for 'Long'' and torch.randint(2, (2,),
# dtype=torch.complex64) RuntimeError "check_random_bounds handles only integral,
# floating-point and boolean types": RuntimeErrors both; accelrt raised a plain TypeError
@pytest.mark.parametrize("make", [
    lambda: acc.rand(2, dtype="int64", device=D0),
    lambda: acc.randn(2, dtype=bool, device=D0),
    lambda: acc.rand(2, dtype="uint8", pin_memory=True),
    lambda: acc.randint(2, (2,), dtype="complex64", device=D0),
])
def test_random_factories_refuse_a_dtype_of_another_kind_with_a_runtime_error(
        make: Callable[[], Any]) -> None:
    _raises((AcceleratorTypeError, TypeError, RuntimeError), "dtype must be", make)
