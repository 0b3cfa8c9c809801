"""Review by tests of ``accelrt.random`` against PyTorch 2.14's behaviour and hostile inputs:
randint's bounds, dtypes and size forms, rand/randn's dtypes and generators, uniform_/normal_
parameters, seeds, states, copies and pickles of a Generator, threads, fork, and seeding before
any device exists. Where PyTorch raises ``RuntimeError`` for a bad value, accelrt raises an
``AcceleratorValueError`` / ``AcceleratorTypeError`` (also a ``ValueError`` / ``TypeError``);
PyTorch's behaviour was checked with a CPU build of PyTorch 2.14 (its numbers differ:
mt19937, not Philox). Runs on whichever build is installed (the RNG's per-call path,
``random/_draw.py``, is compiled in the default build): no mypyc message may leak.
"""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt import backends
from accelrt.backends.cpu import CpuBackend
from accelrt.random import Generator

_MYPYC = r"object expected; got|expected [a-z_.]+, got|got [a-z]+ \(expected"


def _cpu(num_devices: int = 2) -> str:
    name = "rrv" + uuid.uuid4().hex[:8]
    backends.register(name, lambda: CpuBackend(num_devices=num_devices, name=name),
                      replace=True)
    return name


def _raises(exc: tuple[type[BaseException], ...], match: str, fn: Callable[[], Any]) -> None:
    """``fn()`` raises an instance of every class of ``exc`` with ``match`` in its message,
    and no mypyc message."""
    with pytest.raises(exc[0], match=match) as info:
        fn()
    for cls in exc[1:]:
        assert isinstance(info.value, cls), (type(info.value), cls)
    assert not __import__("re").search(_MYPYC, str(info.value)), str(info.value)


RT_VALUE = (ValueError, RuntimeError)     # PyTorch's RuntimeError, accelrt's ValueError
RT_TYPE = (TypeError, RuntimeError)

# ---------------------------------------------------------------------- randint


@pytest.mark.parametrize("args,kw,exc,msg", [
    ((5, 5, (3,)), {}, RT_VALUE, "from=5 >= to=5"),            # low == high
    ((6, 5, (3,)), {}, RT_VALUE, "from=6 >= to=5"),            # low > high
    ((0, (3,)), {}, RT_VALUE, "from=0 >= to=0"),               # high only, 0
    ((-3, (3,)), {}, RT_VALUE, "from=0 >= to=-3"),             # high only, negative
    ((2**64, (3,)), {}, RT_VALUE, "do not fit dtype int64"),
    ((0, 2**64 + 1, (3,)), {"dtype": "uint64"}, RT_VALUE, "do not fit dtype uint64"),
    ((-(2**63) - 1, 0, (3,)), {}, RT_VALUE, "do not fit dtype int64"),
    ((-(10**30), 10**30, (3,)), {}, RT_VALUE, "do not fit"),
    ((257, (3,)), {"dtype": "uint8"}, RT_VALUE, "do not fit dtype uint8"),
    ((-1, 5, (3,)), {"dtype": "uint8"}, RT_VALUE, "do not fit dtype uint8"),
    ((129, (3,)), {"dtype": "int8"}, RT_VALUE, "do not fit dtype int8"),
    ((-129, 0, (3,)), {"dtype": "int8"}, RT_VALUE, "do not fit dtype int8"),
    ((3, (3,)), {"dtype": "bool"}, RT_VALUE, "do not fit dtype bool"),
    ((-1, 2, (3,)), {"dtype": "bool"}, RT_VALUE, "do not fit dtype bool"),
    # float16's finite range is +-65504 (PyTorch: "to - 1 is out of bounds for c10::Half");
    # before the fix these drew inf
    ((0, 70000, (3,)), {"dtype": "float16"}, RT_VALUE, "do not fit dtype float16"),
    ((-70000, 0, (3,)), {"dtype": "float16"}, RT_VALUE, "do not fit dtype float16"),
    ((0, 65506, (3,)), {"dtype": "float16"}, RT_VALUE, "values -65504..65504"),
    ((0, 2**64, (3,)), {"dtype": "float64"}, RT_VALUE, "do not fit dtype float64"),
    ((2**31 + 1, (3,)), {"dtype": "int32"}, RT_VALUE, "do not fit dtype int32"),
    ((True, (3,)), {}, (TypeError,), "high must be an int, got bool"),
    ((False, True, (3,)), {}, (TypeError,), "low must be an int, got bool"),
    ((3.0, (3,)), {}, (TypeError,), "high must be an int, got float"),
    ((0.5, 3, (3,)), {}, (TypeError,), "low must be an int, got float"),
    ((np.float64(3), (3,)), {}, (TypeError,), "high must be an int, got numpy.float64"),
    ((float("nan"), (3,)), {}, (TypeError,), "high must be an int"),
    (("3", (3,)), {}, (TypeError,), "high must be an int, got str"),
    ((None, (3,)), {}, (TypeError,), "high must be an int, got None"),   # torch: NoneType
    ((3, None), {}, (TypeError,), "missing the 'size'"),
    ((3, (2.0,)), {}, (TypeError,), "size entries must be ints"),
    ((3, (True,)), {}, (TypeError,), "bool"),
    ((3, "ab"), {}, (TypeError,), "size entries must be ints"),
    ((3, (-1,)), {}, RT_VALUE, "negative dimension -1"),
    ((2, (3,)), {"dtype": "complex64"}, (TypeError,), "integer, bool or float dtype"),
    ((2, (3,)), {"dtype": "U3"}, (TypeError,), "integer, bool or float dtype"),
    ((2, (3,)), {"dtype": "nope"}, (TypeError,), "unknown dtype"),
    ((2, (3,)), {"dtype": object}, (TypeError,), "integer, bool or float dtype"),
])
def test_randint_bad_arguments_like_torch(args: tuple[Any, ...], kw: dict[str, Any],
                                          exc: tuple[type[BaseException], ...],
                                          msg: str) -> None:
    g = Generator("cpu:0")
    _raises(exc, msg, lambda: acc.randint(*args, device="cpu:0", generator=g, **kw))
    assert g.get_offset() == 0                     # nothing reserved by a refused call


@pytest.mark.parametrize("dtype,low,high", [
    ("bool", 0, 2), ("uint8", 0, 256), ("int8", -128, 128), ("int16", -(2**15), 2**15),
    ("uint16", 0, 2**16), ("int32", -(2**31), 2**31), ("uint32", 0, 2**32),
    ("int64", -(2**63), 2**63), ("uint64", 0, 2**64), ("float16", -65504, 65505),
    ("float32", -(2**24), 2**24 + 1), ("float64", -(2**63), 2**63),
    ("int64", -5, -2), ("int64", 2**63 - 2, 2**63), ("uint64", 2**64 - 3, 2**64),
])
def test_randint_every_dtype_covers_its_range(dtype: str, low: int, high: int) -> None:
    g = Generator("cpu:0").manual_seed(7)
    digits = {"float16": 11, "float32": 24, "float64": 53}.get(dtype)
    inexact = digits is not None and max(-low, high - 1) > 2**digits
    with pytest.warns(UserWarning, match="out of bounds") if inexact else nullcontext():
        x = acc.randint(low, high, (4096,), dtype=dtype, device="cpu:0", generator=g).numpy()
    assert x.dtype == np.dtype(dtype)
    assert np.isfinite(x.astype(np.float64)).all()
    v = [int(i) for i in x.tolist()]
    assert low <= min(v) and max(v) <= high - 1
    if high - low <= 4:
        assert set(v) == set(range(low, high))      # every value drawn
    else:                                           # both halves of the range drawn
        mid = low + (high - low) // 2
        assert min(v) < mid <= max(v)


def test_randint_size_forms_and_high_only() -> None:
    d = {"device": "cpu:0"}
    assert acc.randint(3, (2, 2), **d).shape == (2, 2)
    assert acc.randint(3, [2, 2], **d).shape == (2, 2)
    assert acc.randint(3, (), **d).shape == ()
    assert acc.randint(3, (np.int64(2),), **d).shape == (2,)
    assert acc.randint(3, size=(2,), **d).shape == (2,)
    assert acc.randint(high=3, size=(2,), **d).shape == (2,)
    assert acc.randint(low=1, high=3, size=(5,), **d).numpy().min() >= 1
    assert acc.randint(np.int64(3), (50,), **d).numpy().max() <= 2
    assert acc.randint(np.uint64(2**64 - 1), (5,), dtype="uint64", **d).dtype == np.uint64
    assert acc.randint(-5, -2, (200,), **d).numpy().max() <= -3
    assert acc.randint(3, (0, 4), **d).shape == (0, 4)


# ---------------------------------------------------------------------- rand / randn

@pytest.mark.parametrize("fn", ["rand", "randn"])
def test_rand_randn_dtypes_and_generators(fn: str) -> None:
    f = getattr(acc, fn)
    # PyTorch refuses them too; complex64 and complex128 it draws (as torch 2.14.1 does:
    # test_review_torch_array_s25.py)
    for dt in ("int32", "int64", "bool", "uint8"):
        _raises((TypeError,), "dtype must be one of float16, float32, float64",
                lambda dt=dt: f(3, dtype=dt, device="cpu:0"))
    _raises((TypeError,), "unknown dtype", lambda: f(3, dtype="nope", device="cpu:0"))
    g = Generator("cpu:0").manual_seed(1)
    h = f(1000, dtype="float16", device="cpu:0", generator=g).numpy()
    assert h.dtype == np.float16 and np.isfinite(h).all()
    used = g.get_offset()
    for bad in (object(), 1, True, np.random.default_rng(0), "cpu:0"):
        _raises((TypeError,), "generator must be an accelrt.random.Generator",
                lambda bad=bad: f(3, device="cpu:0", generator=bad))
        _raises((TypeError,), "generator must be an accelrt.random.Generator",
                lambda bad=bad: f(3, generator=bad))
    name = _cpu(2)
    for other in (Generator(f"{name}:0"), Generator(f"{name}:1")):   # other backend
        _raises(RT_VALUE, "belongs to", lambda other=other: f(3, device="cpu:0",
                                                              generator=other))
    # (s41: another device of the backend is taken, as torch's check_generator compares
    # device types only: test_review_rng_s41.py)
    assert g.get_offset() == used                  # the refused calls reserved nothing


# ---------------------------------------------------------------------- uniform_ / normal_

@pytest.mark.parametrize("fn,dtype,args,exc,msg", [
    ("uniform_", "float32", (2.0, 1.0), RT_VALUE, r"a=2.0 > b=1.0"),
    # (torch 2.15: "from is out of bounds for float"; s41: accelrt's message)
    ("uniform_", "float32", (float("nan"), 1.0), RT_VALUE, "a=nan .* must be finite"),
    ("uniform_", "float32", (0.0, float("nan")), RT_VALUE, "b=nan .* must be finite"),
    ("uniform_", "float32", (0.0, float("inf")), RT_VALUE, "b=inf .* must be finite"),
    ("uniform_", "float32", (-float("inf"), 0.0), RT_VALUE, "a=-inf .* must be finite"),
    # torch 2.15's class (s41): OverflowError "int too large to convert to float"
    ("uniform_", "float32", (0, 10**400), (OverflowError,), "b: int too large to convert"),
    ("uniform_", "float32", (-3e38, 3e38), RT_VALUE, "b - a"),
    ("uniform_", "float16", (-60000, 60000), RT_VALUE, "b - a"),
    # a bound beyond the dtype's finite range: PyTorch "to is out of bounds for c10::Half";
    # before the fix these drew inf (a DeviceError under -W error)
    ("uniform_", "float16", (65000, 70000), RT_VALUE, "b=70000.0 is out of bounds"),
    ("uniform_", "float32", (3e38, 3.5e38), RT_VALUE, "b=3.5e.38 is out of bounds"),
    ("uniform_", "float32", (-3.5e38, -3e38), RT_VALUE, "a=-3.5e.38 is out of bounds"),
    # (True, 2.0) is taken since s25, as torch reads a double (a bool is an int)
    ("uniform_", "float32", (None, 2.0), (TypeError,), "real number, got NoneType"),
    ("uniform_", "float32", ("0", 2.0), (TypeError,), "a must be a real number, got str"),
    ("uniform_", "float32", (1j, 2.0), (TypeError,), "real number, got complex"),
    # (s41: also RuntimeErrors, as torch's NotImplementedError "... not implemented for")
    ("uniform_", "int32", (0.0, 1.0), RT_TYPE, "needs a floating array"),
    ("uniform_", "bool", (0.0, 1.0), RT_TYPE, "needs a floating array"),
    ("uniform_", "uint8", (0.0, 1.0), RT_TYPE, "needs a floating array"),
    ("normal_", "float32", (0.0, -1.0), RT_VALUE, "expects std >= 0.0, but found std -1"),
    # (s41: torch 2.15 takes an infinite std and a nan or infinite mean: test_review_rng_s41)
    ("normal_", "float32", (0.0, float("nan")), RT_VALUE, "std >= 0.0, but found std nan"),
    ("normal_", "float32", ("1", 1.0), (TypeError,), "mean must be a real number"),
    ("normal_", "int64", (0.0, 1.0), RT_TYPE, "needs a floating array"),
])
def test_inplace_bad_parameters(fn: str, dtype: str, args: tuple[Any, ...],
                                exc: tuple[type[BaseException], ...], msg: str) -> None:
    g = Generator("cpu:0")
    x = acc.empty(8, dtype=dtype, device="cpu:0")
    _raises(exc, msg, lambda: getattr(acc.random, fn)(x, *args, generator=g))
    assert g.get_offset() == 0


def test_uniform_normal_edges_like_torch() -> None:
    g = Generator("cpu:0").manual_seed(2)
    x16 = acc.empty(4096, dtype="float16", device="cpu:0")
    v = acc.random.uniform_(x16, 65000, 65504, generator=g).numpy()
    assert np.isfinite(v).all() and v.min() >= 65000
    v = acc.random.uniform_(x16, -65504, 0, generator=g).numpy()
    assert np.isfinite(v).all() and v.max() <= 0
    x = acc.empty(5, device="cpu:0")
    assert acc.random.uniform_(x, 1, 1, generator=g).tolist() == [1.0] * 5
    assert acc.random.normal_(x, 3, 0, generator=g).tolist() == [3.0] * 5
    v = acc.random.uniform_(x, np.float32(0), np.int64(2), generator=g).numpy()
    assert v.min() >= 0 and v.max() < 2
    with pytest.raises(TypeError, match="accelrt.Array"):
        acc.random.uniform_(np.zeros(3, np.float32))
    _raises((TypeError,), "generator must be", lambda: acc.random.normal_(x, generator=5))
    name = _cpu(2)
    _raises(RT_VALUE, "belongs to",
            lambda: acc.random.normal_(x, generator=Generator(f"{name}:0")))


@pytest.mark.parametrize("dtype,mean,std", [("float16", 1e6, 1.0), ("float16", 0.0, 1e5),
                                            ("float32", 3e38, 1e38),
                                            ("float64", 1e308, 1e308)])
def test_normal_beyond_the_dtype_is_inf_without_a_warning(dtype: str, mean: float,
                                                          std: float) -> None:
    # PyTorch: torch.empty(3, dtype=torch.float16).normal_(1e6, 1) is inf; accelrt raised
    # the numpy overflow warning from the queued fill (a DeviceError under -W error)
    g = Generator("cpu:0").manual_seed(4)
    for n in (7, 40_000):                        # the small run path and the chunked one
        v = acc.random.normal_(acc.empty(n, dtype=dtype, device="cpu:0"), mean, std,
                               generator=g).numpy()
        assert np.isinf(v).any() and not np.isnan(v).any()
        acc.synchronize("cpu:0")


# ---------------------------------------------------------------------- seeds

class _Int(int):
    def __index__(self) -> int:    # read by value, as PyTorch's C++ reads it
        return 99


@pytest.mark.parametrize("seed,stored", [
    (-1, 2**64 - 1), (-(2**63), 2**63), (2**64 - 1, 2**64 - 1), (0, 0),
    (np.int64(5), 5), (np.int8(-1), 2**64 - 1), (np.uint64(2**64 - 1), 2**64 - 1),
    (_Int(7), 7),
])
def test_seed_values(seed: Any, stored: int) -> None:
    g = Generator("cpu:0").manual_seed(3)
    acc.rand(9, device="cpu:0", generator=g)
    assert g.manual_seed(seed) is g
    assert g.initial_seed() == stored and g.get_offset() == 0
    saved = acc.cpu.get_rng_state()
    try:
        acc.cpu.manual_seed(seed)
        assert acc.cpu.initial_seed() == stored
        acc.random.manual_seed_all(seed)
        assert acc.random.initial_seed("cpu:0") == stored
        assert int.from_bytes(acc.random.get_rng_state("cpu:0")[:8].tobytes(), "little") == stored
    finally:
        acc.cpu.set_rng_state(saved)


@pytest.mark.parametrize("seed,exc,msg", [
    (2**64, (ValueError,), "out of range"), (-(2**63) - 1, (ValueError,), "out of range"),
    # torch.Generator.manual_seed: RuntimeError "manual_seed expected a long, but got bool"
    (True, RT_TYPE, "got bool"), (False, RT_TYPE, "got bool"), (np.bool_(True), RT_TYPE, "bool"),
    (1.0, RT_TYPE, "got float"), (1.5, RT_TYPE, "got float"), (np.float64(2), RT_TYPE, "float64"),
    ("3", RT_TYPE, "got str"), (None, RT_TYPE, "got NoneType"),
])
def test_bad_seeds(seed: Any, exc: tuple[type[BaseException], ...], msg: str) -> None:
    g = Generator("cpu:0").manual_seed(11)
    _raises(exc, msg, lambda: g.manual_seed(seed))
    assert g.initial_seed() == 11
    saved = acc.cpu.get_rng_state()
    # the module-level seeders read int(seed) first, as torch.manual_seed and
    # torch.cuda.manual_seed do: they take the bools, floats and "3" (s25's
    # test_review_random_args_s25.py) and refuse None and the out-of-range ints
    if seed is None or type(seed) is int:
        for f in (acc.manual_seed, acc.random.manual_seed_all, acc.cpu.manual_seed,
                  acc.cpu.random.manual_seed, acc.cuda.manual_seed):
            _raises(exc, msg, lambda f=f: f(seed))
    assert acc.cpu.get_rng_state().tobytes() == saved.tobytes()


def test_seed_functions_return_and_store() -> None:
    saved = acc.random.get_rng_state_all()
    try:
        s = acc.seed()
        assert type(s) is int and 0 <= s < 2**64 and acc.initial_seed() == s
        assert acc.random.seed_all() == acc.random.initial_seed("cpu:0")
        assert acc.cpu.seed() is None and acc.cpu.seed_all() is None
        assert acc.cuda.seed() is None            # ignored where the backend is unusable
    finally:
        acc.random.set_rng_state_all(saved)


# ---------------------------------------------------------------------- states

@pytest.mark.parametrize("state,exc,msg", [
    (np.zeros(15, np.uint8), ValueError, "16 bytes"),
    (np.zeros(17, np.uint8), ValueError, "16 bytes"),
    (np.zeros(0, np.uint8), ValueError, "16 bytes"),
    (np.zeros(16, np.int8), TypeError, "dtype uint8"),
    (np.zeros(2, np.uint64), TypeError, "dtype uint8"),
    (np.zeros(16, np.float32), TypeError, "dtype uint8"),
    (np.uint8(3), TypeError, "numpy uint8 array"),
    (b"", TypeError, "numpy uint8 array"),          # bytes are refused, as PyTorch's
    (b"x" * 15, TypeError, "numpy uint8 array"),    # ByteTensor-only set_state refuses them
    (np.frombuffer(b"x" * 15, np.uint8), ValueError, "16 bytes"),
    ("x" * 16, TypeError, "numpy uint8 array"),
    (list(range(16)), TypeError, "numpy uint8 array"),
    (None, TypeError, "numpy uint8 array"),
    (5, TypeError, "numpy uint8 array"),
])
def test_bad_states(state: Any, exc: type[BaseException], msg: str) -> None:
    g = Generator("cpu:0").manual_seed(12)
    before = g.get_state().tobytes()
    _raises((exc,), msg, lambda: g.set_state(state))
    assert g.get_state().tobytes() == before
    saved = acc.cpu.get_rng_state()
    for f in (lambda: acc.random.set_rng_state(state, "cpu:0"),
              lambda: acc.cpu.set_rng_state(state), lambda: acc.set_rng_state(state),
              lambda: acc.random.set_rng_state_all([saved, state])):
        _raises((exc,), msg, f)
    _raises((exc,), msg, lambda: acc.random.set_rng_state_all([state]))
    assert acc.cpu.get_rng_state().tobytes() == saved.tobytes()


def test_state_round_trips_across_forms_devices_and_backends() -> None:
    name = _cpu(2)
    g = Generator("cpu:0").manual_seed(2**64 - 1).set_offset(2**64 - 2)  # wraps past 2**64
    st = g.get_state()
    assert st.dtype == np.uint8 and st.shape == (16,)
    st[:] = 0                                      # a copy: the generator does not move
    st = g.get_state()
    ref = acc.rand(12, device="cpu:0", generator=g).numpy()
    assert g.get_offset() == 1                     # 2**64 - 2 + 3 blocks, mod 2**64
    forms: list[Any] = [st, st.reshape(2, 8),          # (bytes are refused, as in PyTorch,
                        # and a non-contiguous view: test_random.py)
                        np.frombuffer(bytes(st), np.uint8),
                        acc.asarray(st, device=f"{name}:1")]
    for form in forms:
        for gen in (Generator("cpu:0"), Generator(f"{name}:0"), Generator(f"{name}:1")):
            gen.set_state(form)
            out = acc.rand(12, device=gen.device, generator=gen).numpy()
            assert out.tobytes() == ref.tobytes()
    saved = acc.random.get_rng_state(f"{name}:1")
    acc.random.set_rng_state(acc.asarray(st, device="cpu:0"), f"{name}:1")
    assert acc.rand(12, device=f"{name}:1").numpy().tobytes() == ref.tobytes()
    acc.random.set_rng_state(saved, f"{name}:1")


def test_reproducible_across_devices_and_backends() -> None:
    name = _cpu(2)
    devs = ["cpu:0", f"{name}:0", f"{name}:1"]
    for dtype in ("float16", "float32", "float64"):
        outs = []
        for d in devs:
            g = Generator(d).manual_seed(99)
            x = acc.empty(37, dtype=dtype, device=d)
            outs.append(b"".join([
                acc.rand(5, 3, dtype=dtype, device=d, generator=g).numpy().tobytes(),
                acc.randn(9, dtype=dtype, device=d, generator=g).numpy().tobytes(),
                acc.random.uniform_(x, -3, 5, generator=g).numpy().tobytes(),
                acc.random.normal_(x, 1, 2, generator=g).numpy().tobytes(),
                acc.randint(-7, 2**40 if dtype != "float32" else 2**24, (11,),   # (exact)
                            dtype=dtype if dtype != "float16" else "int64",
                            device=d, generator=g).numpy().tobytes()]))
        assert outs[0] == outs[1] == outs[2]


# ---------------------------------------------------------------------- copies and pickles

def test_generator_copy_deepcopy_and_pickle_like_torch() -> None:
    # torch.Generator: copy.copy, copy.deepcopy and pickle give a new generator with the same
    # state (and device); they raised "cannot pickle '_thread.lock' object" here
    name = _cpu(2)
    for dev in ("cpu:0", f"{name}:1"):
        g = Generator(dev).manual_seed(5)
        acc.rand(3, device=dev, generator=g)
        for c in (copy.copy(g), copy.deepcopy(g), pickle.loads(pickle.dumps(g)),
                  copy.deepcopy([g, g])[0]):
            assert c is not g and type(c) is Generator
            assert c.device == g.device and c.initial_seed() == 5 and c.get_offset() == 1
            assert c.get_state().tobytes() == g.get_state().tobytes()
            a = acc.rand(4, device=dev, generator=c).numpy()
            assert c.get_offset() == 2 and g.get_offset() == 1    # independent
            assert acc.rand(4, device=dev, generator=g.clone_state()).numpy().tobytes() == \
                a.tobytes()
    dflt = acc.random.default_generator("cpu:0")
    c = copy.deepcopy(dflt)
    assert c is not dflt and c.get_state().tobytes() == dflt.get_state().tobytes()
    g = Generator("cpu:0")
    for bad in ((1,), (1, 2, 3), [1, 2], None):
        _raises((TypeError,), "pair", lambda bad=bad: g.__setstate__(bad))
    _raises((ValueError,), "seed must be in", lambda: g.__setstate__((-1, 0)))
    _raises((TypeError,), "offset must be an int", lambda: g.__setstate__((1, 1.5)))


# ---------------------------------------------------------------------- threads

@pytest.mark.parametrize("default", [False, True])
def test_two_threads_on_one_generator_never_share_counters(default: bool) -> None:
    g = acc.random.default_generator("cpu:0") if default else Generator("cpu:0")
    saved = g.get_state()
    g.manual_seed(321)
    n = 400
    got: list[list[bytes]] = [[], []]
    barrier = threading.Barrier(2)

    def draw(k: int) -> None:
        barrier.wait()
        for _ in range(n):   # one block per call
            x = acc.rand(4, device="cpu:0", generator=None if default else g)
            got[k].append(x.numpy().tobytes())

    ts = [threading.Thread(target=draw, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert g.get_offset() == 2 * n
    ref = acc.rand(8 * n, device="cpu:0", generator=Generator("cpu:0").manual_seed(321))
    blocks = {ref.numpy()[4 * i:4 * i + 4].tobytes(): i for i in range(2 * n)}
    assert len(blocks) == 2 * n
    positions = [[blocks[b] for b in got[k]] for k in range(2)]
    assert sorted(positions[0] + positions[1]) == list(range(2 * n))   # no block twice
    assert all(p == sorted(p) for p in positions)                       # call order per thread
    g.set_state(saved)


# ---------------------------------------------------------------------- fresh process, fork

_SCRIPT = r"""
import os, threading
import numpy as np
import accelrt as acc
from accelrt.random import _generator

acc.random.manual_seed(1234)                 # before any device is initialised
acc.cpu.set_rng_state(acc.cpu.get_rng_state())
cpu = acc.backends.get_backend("cpu")
assert not acc.cpu.is_initialized() and not _generator._is_started(cpu, 0)
assert acc.random.initial_seed() == 1234 and acc.cpu.initial_seed() == 1234
ref = acc.rand(16, device="cpu:0", generator=acc.random.Generator("cpu:0").manual_seed(1234))
first = acc.rand(8, device="cpu:0").numpy()
assert first.tobytes() == ref.numpy()[:8].tobytes(), "seed set before init was lost"

g = acc.random.default_generator("cpu:0")
held = threading.Event(); release = threading.Event()
def hold():
    with g._st.lock:                      # a thread holds the generator's lock at the fork
        held.set(); release.wait(10)
t = threading.Thread(target=hold); t.start(); held.wait(10)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        os.close(r)
        st = acc.cpu.get_rng_state()
        x = acc.rand(8, device="cpu:0").numpy()
        os.write(w, st.tobytes() + x.tobytes())
        os._exit(0)
    except BaseException as exc:
        os.write(w, repr(exc).encode()); os._exit(1)
os.close(w)
release.set(); t.join()
data = b""
while True:
    chunk = os.read(r, 4096)
    if not chunk: break
    data += chunk
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, data
parent_state = acc.cpu.get_rng_state()
assert data[:16] == parent_state.tobytes(), (data[:16], parent_state)   # inherited state
assert data[16:] == ref.numpy()[8:].tobytes()                           # the same next numbers
assert acc.rand(8, device="cpu:0").numpy().tobytes() == ref.numpy()[8:].tobytes()
print("OK")
"""


def test_seed_before_init_and_fork_child_state() -> None:
    if not hasattr(__import__("os"), "fork"):
        pytest.skip("needs os.fork")
    proc = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", _SCRIPT],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stderr[-3000:]
