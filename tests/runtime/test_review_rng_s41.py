"""Review of ``accelrt.random`` against torch 2.15 on a CPU (session 41).

``scripts/torch_rng_diff.py`` runs one call list in torch 2.15.0 (``torch.rand``,
``Tensor.uniform_``, ``torch.Generator``, ``torch.random.fork_rng``...) and in accelrt, and
compares results and error classes; torch's answers are written here as literal expectations
("observed on torch 2.15.0"), since the test suite must not need torch. Where only CUDA shows
the behaviour, torch's C++ source is named. Each test failed before the change it covers.
"""

from __future__ import annotations

import math
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt import backends
from accelrt.backends.cpu import CpuBackend
from accelrt.backends.cuda._ops import philox_launch
from accelrt.random import Generator

# torch's RuntimeError, accelrt's ValueError / TypeError, and the checker of both classes
from test_review_random_args_s25 import RT_TYPE, RT_VALUE, _raises


@pytest.fixture
def saved_states() -> Iterator[None]:
    saved = acc.random.get_rng_state_all()
    try:
        yield
    finally:
        acc.random.set_rng_state_all(saved)


# ---------------------------------------------------------------------- randint's bounds

@pytest.mark.parametrize(("low", "high", "dtype", "text"), [
    # observed on torch 2.15.0: check_random_bounds checks `from` first, on either side
    (70000, 70001, "int8", "from is out of bounds for signed char"),
    (70000, 70001, "uint8", "from is out of bounds for unsigned char"),
    (70000, 70001, "int16", "from is out of bounds for short int"),
    (70000, 70001, "uint16", "from is out of bounds for short unsigned int"),
    (70000, 70001, "bool", "from is out of bounds for bool"),
    (70000, 70001, "float16", r"from is out of bounds for c10::Half"),
    (-300, 300, "int8", "from is out of bounds for signed char"),
    (0, 300, "uint8", "to - 1 is out of bounds for unsigned char"),
    (-1, 1, "uint8", "from is out of bounds for unsigned char"),
])
def test_randint_names_the_bound_torch_checks_first(low: int, high: int, dtype: str,
                                                    text: str) -> None:
    g = Generator("cpu:0")
    _raises(RT_VALUE, "^" + text + ":",
            lambda: acc.randint(low, high, (2,), dtype=dtype, device="cpu:0", generator=g))
    assert g.get_offset() == 0


# ---------------------------------------------------------------------- normal_'s parameters

@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "complex64"])
def test_normal_takes_a_non_finite_mean_and_an_infinite_std(dtype: str) -> None:
    # observed on torch 2.15.0: Tensor.normal_(nan, 1), (inf, 1), (0, inf), (-inf, inf) fill
    # the tensor (only std < 0 or nan is refused: CHECK_NORMAL_STD), with no warning
    g = Generator("cpu:0").manual_seed(4)
    x = acc.empty(64, dtype=dtype, device="cpu:0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        def parts(a: acc.Array) -> np.ndarray:
            return a.numpy().view(np.float32 if dtype == "complex64" else dtype)
        assert np.isnan(parts(acc.random.normal_(x, math.nan, 1.0, generator=g))).all()
        assert (parts(acc.random.normal_(x, math.inf, 1.0, generator=g)) == math.inf).all()
        v = parts(acc.random.normal_(x, 0.0, math.inf, generator=g))
        assert np.isinf(v).all() and (v > 0).any() and (v < 0).any()
        v = parts(acc.random.normal_(x, -math.inf, math.inf, generator=g))
        assert np.isnan(v).any() and (v == -math.inf).any() and not np.isfinite(v).any()
        acc.cpu.synchronize()
    assert g.get_offset() == 4 * (32 if dtype != "complex64" else 64)   # 2 normals a block


def test_normal_still_refuses_a_negative_or_nan_std() -> None:
    g = Generator("cpu:0")
    x = acc.empty(4, device="cpu:0")
    # observed on torch 2.15.0: RuntimeError "normal expects std >= 0.0, but found std nan"
    _raises(RT_VALUE, "normal expects std >= 0.0, but found std nan",
            lambda: acc.random.normal_(x, 0.0, math.nan, generator=g))
    _raises(RT_VALUE, "found std -inf", lambda: acc.random.normal_(x, 0, -math.inf, generator=g))
    assert g.get_offset() == 0


def test_cuda_plan_passes_non_finite_normal_params_through() -> None:
    # what the CUDA backend launches (no GPU needed): the kernel's IEEE arithmetic makes the
    # nan/inf numbers, as tests/backends/test_cuda_kernels.py checks on the host build
    _, args, _ = philox_launch(0x1000, 4, "float32", "normal", 1, 0, (math.nan, math.inf), sms=1)
    assert math.isnan(float(args[4])) and float(args[5]) == math.inf and int(args[6]) == 0
    with pytest.raises(ValueError, match="finite"):
        philox_launch(0x1000, 4, "float32", "uniform", 1, 0, (0.0, math.inf), sms=1)


# ---------------------------------------------------------------------- complex arrays

@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_uniform_and_normal_fill_complex_arrays_as_rand_and_randn(dtype: str) -> None:
    # observed on torch 2.15.0: uniform_/normal_ of a complex tensor fill it (view_as_real:
    # each part a float; normal_ with std/sqrt(2) per part); accelrt refused them
    x = acc.empty(7, dtype=dtype, device="cpu:0")
    acc.random.uniform_(x, generator=Generator("cpu:0").manual_seed(3))
    ref = acc.rand(7, dtype=dtype, device="cpu:0", generator=Generator("cpu:0").manual_seed(3))
    assert x.numpy().tobytes() == ref.numpy().tobytes()
    acc.random.normal_(x, generator=Generator("cpu:0").manual_seed(3))
    ref = acc.randn(7, dtype=dtype, device="cpu:0", generator=Generator("cpu:0").manual_seed(3))
    assert x.numpy().tobytes() == ref.numpy().tobytes()
    g = Generator("cpu:0").manual_seed(5)
    big = acc.empty(50_000, dtype=dtype, device="cpu:0")
    v = acc.random.uniform_(big, -2, 3, generator=g).numpy()
    for part in (v.real, v.imag):
        assert part.min() >= -2 and part.max() < 3 and abs(part.mean() - 0.5) < 0.05
    v = acc.random.normal_(big, 1.0, 2.0, generator=g).numpy()
    # (torch adds the real mean to both parts; each part has std 2/sqrt(2))
    assert abs(v.real.mean() - 1) < 0.05 and abs(v.imag.mean() - 1) < 0.05
    assert abs(v.real.std() - math.sqrt(2)) < 0.05 and abs(v.imag.std() - math.sqrt(2)) < 0.05
    assert abs((np.abs(v - (1 + 1j)) ** 2).mean() - 4) < 0.15        # E|z - mean|^2 = std^2
    # 100_000 parts: 4 (float32) or 2 (float64) uniform numbers a block, 2 normals a block
    assert g.get_offset() == 100_000 // (4 if dtype == "complex64" else 2) + 50_000


def test_complex_uniform_bounds_are_the_parts_dtype() -> None:
    x = acc.empty(3, dtype="complex64", device="cpu:0")
    # torch 2.15.0: "to is out of bounds for float" (the float32 parts)
    _raises(RT_VALUE, "b=1e.39 is out of bounds for float32",
            lambda: acc.random.uniform_(x, 0, 1e39))
    acc.random.uniform_(acc.empty(3, dtype="complex128", device="cpu:0"), 0, 1e39)


@pytest.mark.parametrize(("fn", "dtype", "torch_text"), [
    # observed on torch 2.15.0: NotImplementedError (a RuntimeError)
    ("uniform_", "int64", "\"check_uniform_bounds\" not implemented for 'Long'"),
    ("uniform_", "bool", "\"check_uniform_bounds\" not implemented for 'Bool'"),
    ("normal_", "int32", "\"normal_kernel_cpu\" not implemented for 'Int'"),
    ("normal_", "uint8", "\"normal_kernel_cpu\" not implemented for 'Byte'"),
])
def test_inplace_of_another_dtype_is_also_a_runtime_error(fn: str, dtype: str,
                                                          torch_text: str) -> None:
    x = acc.empty(3, dtype=dtype, device="cpu:0")
    _raises(RT_TYPE, "needs a floating array .* " + torch_text.replace("'", "."),
            lambda: getattr(acc.random, fn)(x))


# ---------------------------------------------------------------------- number arguments

def test_an_int_beyond_float64_is_an_overflow_error_as_in_torch() -> None:
    # observed on torch 2.15.0: OverflowError "int too large to convert to float"
    x = acc.empty(3, device="cpu:0")
    with pytest.raises(OverflowError, match="int too large to convert to float"):
        acc.random.uniform_(x, 2**1024, 2**1025)
    with pytest.raises(OverflowError, match="std: int too large"):
        acc.random.normal_(x, 0, 10**400)


def test_a_0d_array_is_a_number_as_a_0d_tensor() -> None:
    # torch 2.15.0 reads a 0-d tensor as a double (Tensor.uniform_(torch.tensor(0.0), 1) fills),
    # and refuses one of shape (1,) ("must be float, not Tensor") and a numpy array
    x = acc.empty(1000, device="cpu:0")
    lo, hi = acc.asarray(0.5, device="cpu:0"), acc.asarray(2, device="cpu:0")
    v = acc.random.uniform_(x, lo, hi).numpy()
    assert v.min() >= 0.5 and v.max() < 2
    v = acc.random.normal_(x, hi, acc.asarray(0.0, device="cpu:0")).numpy()
    assert (v == 2).all()
    for bad in (acc.asarray([0.5], device="cpu:0"), np.array(0.5),
                acc.asarray(1j, device="cpu:0")):
        with pytest.raises(TypeError, match="a must be a real number"):
            acc.random.uniform_(x, bad, 3)


# ---------------------------------------------------------------------- seeds

def test_nondeterministic_seeds_keep_53_bits_as_device_generators(saved_states: None) -> None:
    # torch's device generators (CUDA, XPU, MPS) seed with getNonDeterministicRandom(true),
    # "limit to 53 bits to ensure unique representation in double" (c10/core/GeneratorImpl.cpp):
    # torch.cuda.seed()/initial_seed() are below 2**53; accelrt drew 64 bits (each check below
    # fails with probability 1 - 2**-64 on 64-bit seeds)
    g = Generator("cpu:0")
    saved_cpu = acc.cpu.get_rng_state_all()
    try:
        seeds = [g.seed() for _ in range(64)]
        seeds += [acc.random.seed() for _ in range(64)]
        seeds += [acc.random.seed_all() for _ in range(64)]
        for _ in range(64):
            acc.cpu.seed()
            seeds.append(acc.cpu.initial_seed())
            acc.cpu.seed_all()
            seeds.append(acc.cpu.initial_seed())
    finally:
        acc.cpu.set_rng_state_all(saved_cpu)
    assert all(0 <= s < 2**53 for s in seeds) and len(set(seeds)) > 300
    assert all(float(s) == s for s in seeds)


# ---------------------------------------------------------------------- fork_rng

@pytest.mark.parametrize("device_type", [None, "", 0, False, "cpu", "cpu:0", "cpu:5",
                                         "dev"])
def test_fork_rng_reads_device_type_as_torch(device_type: Any, saved_states: None) -> None:
    # observed on torch 2.15.0: fork_rng takes `device_type or <current accelerator>`, then
    # torch.get_device_module reads a device or a device string ("cuda:1") by its type
    if device_type == "dev":
        device_type = acc.device("cpu")
    before = acc.cpu.get_rng_state(0)
    with acc.random.fork_rng(devices=[0], device_type=device_type):
        acc.cpu.manual_seed(99)
        acc.rand(4, device="cpu:0")
    assert (acc.cpu.get_rng_state(0) == before).all()


@pytest.mark.parametrize(("device_type", "exc", "match"), [
    # observed on torch 2.15.0: RuntimeError "Invalid value of device '5', expect
    # torch.device, str, or None" (accelrt raised a plain TypeError)
    (5, RT_TYPE, "Invalid value of device '5'"),
    (b"cpu", RT_TYPE, "got bytes"),
    ("nope:0", RT_VALUE, "Unknown backend 'nope'"),
    (" cpu:0", RT_VALUE, "Invalid device string"),
])
def test_fork_rng_refuses_other_device_types_as_runtime_errors(device_type: Any,
                                                               exc: tuple[type[BaseException],
                                                                          ...],
                                                               match: str) -> None:
    def enter() -> None:
        with acc.random.fork_rng(devices=[], device_type=device_type):
            pass
    _raises(exc, match, enter)


# ---------------------------------------------------------------------- randint(pin_memory=)

def test_randint_takes_pin_memory_as_rand(saved_states: None) -> None:
    # torch 2.15's randint has pin_memory= as rand has; accelrt's randint refused the keyword
    acc.random.manual_seed(8)
    host = acc.randint(3, 9, (1000,), pin_memory=True)
    assert isinstance(host, np.ndarray) and acc.is_pinned(host)
    assert host.dtype == np.int64 and host.min() >= 3 and host.max() <= 8
    ref = acc.randint(3, 9, (1000,), generator=Generator("cpu:0").manual_seed(8))
    assert host.tobytes() == ref.numpy().tobytes()
    assert isinstance(acc.randint(3, (2,), pin_memory=None), acc.Array)
    assert isinstance(acc.randint(3, (2,), pin_memory=False), acc.Array)
    with pytest.raises(TypeError, match="pin_memory must be a bool or None"):
        acc.randint(3, (2,), pin_memory=1)
    _raises(RT_VALUE, "Only dense CPU tensors can be pinned",
            lambda: acc.randint(3, (2,), device="cpu:0", pin_memory=True))


# ---------------------------------------------------------------------- generators' devices

def _cpu(num_devices: int = 2) -> str:
    name = "rng41" + uuid.uuid4().hex[:8]
    backends.register(name, lambda: CpuBackend(num_devices=num_devices, name=name),
                      replace=True)
    return name


@pytest.mark.parametrize("fn", ["rand", "randn", "randint", "uniform_", "normal_"])
def test_a_generator_of_another_device_of_the_backend_draws_there(fn: str) -> None:
    # torch's check_generator compares device types only (pytorch#62451, PR 59352):
    # torch.rand(2, device="cuda:0", generator=torch.Generator("cuda:1")) draws on cuda:0
    # from that generator; accelrt refused it ("the generator belongs to ...")
    name = _cpu(2)

    def draw(device: str, g: Generator) -> np.ndarray:
        if fn == "randint":
            return acc.randint(0, 100, (9,), device=device, generator=g).numpy()
        if fn in ("rand", "randn"):
            return getattr(acc, fn)(9, device=device, generator=g).numpy()
        return getattr(acc.random, fn)(acc.empty(9, device=device), generator=g).numpy()

    g = Generator(f"{name}:0").manual_seed(21)
    got = draw(f"{name}:1", g)
    ref = draw(f"{name}:0", Generator(f"{name}:0").manual_seed(21))
    assert got.tobytes() == ref.tobytes() and g.get_offset() > 0
    other = Generator("cpu:0")           # another backend: still refused, as torch's
    _raises(RT_VALUE, f"Expected a '{name}' device type for generator but found 'cpu'",
            lambda: draw(f"{name}:1", other))
    assert other.get_offset() == 0


def test_a_capture_draws_from_a_generator_of_another_device() -> None:
    # the capture on device 0 registers device 1's generator at its first draw, and each
    # replay draws what the eager work would (docs/random.md, graph captures)
    name = _cpu(2)
    g = Generator(f"{name}:1").manual_seed(7)
    x = acc.zeros(4, device=f"{name}:0")
    dm = backends.device_module(name)
    graph = dm.Graph()
    with dm.graph(graph):                      # on device 0's stream (its current device)
        acc.random.uniform_(x, generator=g)
    replays = []
    for _ in range(2):
        graph.replay()
        replays.append(x.tolist())
    ref = Generator(f"{name}:1").manual_seed(7)
    eager = [acc.random.uniform_(x, generator=ref).tolist() for _ in range(2)]
    assert replays == eager and replays[0] != replays[1]
    assert g.get_offset() == ref.get_offset() == 2


@pytest.mark.parametrize(("method", "arg"), [("manual_seed", 3), ("set_offset", 4),
                                             ("set_state", "state"),
                                             ("graphsafe_set_state", "generator")])
def test_generator_setters_take_their_argument_positionally_only(method: str, arg: Any) -> None:
    # observed on torch 2.15.0: TypeError "Generator.manual_seed() takes no keyword arguments"
    # (torch's methods take one positional argument); accelrt took seed=3 and the others
    g = Generator("cpu:0")
    value = {"state": g.get_state(), "generator": Generator("cpu:0")}.get(arg, arg)
    getattr(g, method)(value)
    name = {"manual_seed": "seed", "set_offset": "offset", "set_state": "new_state",
            "graphsafe_set_state": "state"}[method]
    with pytest.raises(TypeError, match="positional-only"):
        getattr(g, method)(**{name: value})
