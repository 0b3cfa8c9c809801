"""``torch.cuda.default_generators`` and ``AcceleratorError`` in the device modules, and
``torch.Generator``'s ``set_offset`` / ``clone_state`` on :class:`accelrt.random.Generator`."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt import _backend
from accelrt.backends.cpu import CpuBackend
from accelrt.random import Generator


@pytest.fixture
def fresh() -> Iterator[tuple[str, Any]]:
    """A fresh 3-device cpu backend under a unique name and its device module."""
    name = "cpudg_" + uuid.uuid4().hex[:8]
    acc.backends.register(name, lambda: CpuBackend(num_devices=3, name=name))
    yield name, acc.backends.device_module(name)
    with _backend._lock:   # there is no public unregister
        _backend._factories.pop(name, None)
        _backend._instances.pop(name, None)
        _backend._failures.pop(name, None)


@pytest.mark.parametrize("mod", ["cpu", "cuda", "opencl"])
def test_every_device_module_lists_default_generators(mod: str) -> None:
    m = getattr(acc, mod)
    assert "default_generators" in m.__all__
    assert "default_generators" in dir(m)
    gens = m.default_generators
    assert isinstance(gens, tuple)
    if not m.is_available():
        assert gens == ()      # torch's value where CUDA cannot be used
        return
    assert len(gens) == m.device_count()
    for i, g in enumerate(gens):
        assert type(g) is Generator
        assert g.device == acc.device(mod, i)
        assert g is acc.random.default_generator(f"{mod}:{i}")


def test_one_generator_per_device_shared_with_the_module_functions(
        fresh: tuple[str, Any]) -> None:
    name, m = fresh
    # seeded before any generator exists: the seed waits for the generator, as for torch
    m.manual_seed_all(5)
    gens = m.default_generators
    assert len(gens) == 3
    assert [g.initial_seed() for g in gens] == [5, 5, 5]
    assert gens[1] is m.default_generators[1]                  # stable across reads
    gens[2].manual_seed(9)
    assert m.get_rng_state(2)[:8].view(np.uint64)[0] == 9     # the module's state is the generator's
    a = acc.rand(6, device=f"{name}:2").numpy()
    b = acc.rand(6, device=f"{name}:2", generator=Generator(f"{name}:2").manual_seed(9)).numpy()
    assert a.tobytes() == b.tobytes()                        # rand on device 2 draws from gens[2]
    assert gens[2].get_offset() > 0
    m.set_rng_state(gens[0].get_state(), 2)
    assert gens[2].initial_seed() == 5 and gens[2].get_offset() == 0


def test_flag_attention_style_state_edit(fresh: tuple[str, Any]) -> None:
    """The pattern of kernels that reserve counters through the default generator's state:
    read (seed, offset) as int64, advance, set the state back."""
    name, m = fresh
    gen = m.default_generators[1]
    gen.manual_seed(123)
    state = gen.get_state()
    seed, offset = (int(x) for x in state.view(np.int64))
    state.view(np.int64)[1] += 4
    gen.set_state(state)
    assert (seed, offset) == (123, 0)
    assert gen.get_offset() == 4 and gen.initial_seed() == 123


def test_device_module_objects_have_the_property(fresh: tuple[str, Any]) -> None:
    name, m = fresh
    assert [g.device.index for g in m.default_generators] == [0, 1, 2]
    assert acc.backends.device_module("cpu").default_generators == acc.cpu.default_generators


def test_unusable_backend_has_no_generators() -> None:
    name = "broken_" + uuid.uuid4().hex[:8]

    def factory() -> CpuBackend:
        raise RuntimeError("no driver here")

    acc.backends.register(name, factory)
    try:
        assert acc.backends.device_module(name).default_generators == ()
    finally:
        with _backend._lock:
            _backend._factories.pop(name, None)
            _backend._instances.pop(name, None)
            _backend._failures.pop(name, None)


def test_star_import_and_reading_do_not_initialise_cuda() -> None:
    code = ("import accelrt as acc, sys\n"
            "from accelrt.cuda import *\n"
            "assert isinstance(default_generators, tuple)\n"
            "assert type(acc.cuda).__name__ == 'LiveModule'\n"
            "assert len(acc.cpu.default_generators) == acc.cpu.device_count()\n"
            "assert not acc.cuda.is_initialized() and not acc.cpu.is_initialized()\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# ---------------------------------------------------------------------- set_offset, clone_state

def test_set_offset_moves_the_counter_and_returns_self() -> None:
    g = Generator("cpu:0").manual_seed(77)
    ref = acc.rand(40, device="cpu:0", generator=g).numpy()      # 10 blocks of 4 float32
    assert g.get_offset() == 10
    assert g.set_offset(3) is g
    assert g.get_offset() == 3 and g.initial_seed() == 77
    tail = acc.rand(8, device="cpu:0", generator=g).numpy()
    assert tail.tobytes() == ref[12:20].tobytes()
    assert g.set_offset(2**64 - 1).get_offset() == 2**64 - 1
    assert g.set_offset(np.uint64(5)).get_offset() == 5


@pytest.mark.parametrize(("bad", "exc", "match"), [
    # -1 wraps to 2**64 - 1 as in torch 2.14.1 (test_review_torch_differences_s26.py)
    (2**64, ValueError, r"Overflow when unpacking long long"),
    (1.0, TypeError, "offset must be an int, got float"), ("4", TypeError, "got str"),
    (True, TypeError, "got bool"), (None, TypeError, "got NoneType"),
])
def test_set_offset_refuses_bad_offsets(bad: object, exc: type, match: str) -> None:
    g = Generator("cpu:0").manual_seed(1).set_offset(7)
    with pytest.raises(exc, match=match):
        g.set_offset(bad)  # type: ignore[arg-type]
    assert g.get_offset() == 7 and g.initial_seed() == 1          # unchanged


def test_clone_state_is_an_independent_copy() -> None:
    g = Generator("cpu:0").manual_seed(2024)
    acc.rand(5, device="cpu:0", generator=g)
    c = g.clone_state()
    assert c is not g and type(c) is Generator and c.device == g.device
    assert c.get_state().tobytes() == g.get_state().tobytes()
    x = acc.rand(9, device="cpu:0", generator=g).numpy()
    assert c.get_offset() != g.get_offset()                        # drawing from g left c alone
    y = acc.rand(9, device="cpu:0", generator=c).numpy()
    assert x.tobytes() == y.tobytes()
    c.manual_seed(1)
    assert g.initial_seed() == 2024


def test_clone_of_a_default_generator_is_not_the_default(fresh: tuple[str, Any]) -> None:
    name, m = fresh
    d = m.default_generators[0].manual_seed(8)
    c = d.clone_state()
    assert c is not d and m.default_generators[0] is d
    c.manual_seed(3)
    assert d.initial_seed() == 8 and m.initial_seed() == 8


@pytest.mark.parametrize("mod", ["cpu", "cuda", "opencl"])
def test_device_modules_name_the_error_classes_as_torch_cuda(mod: str) -> None:
    m = getattr(acc, mod)
    assert m.AcceleratorError is acc.AcceleratorError      # torch.cuda.AcceleratorError
    assert m.OutOfMemoryError is acc.OutOfMemoryError
    assert issubclass(m.OutOfMemoryError, m.AcceleratorError)
    assert "AcceleratorError" in m.__all__
