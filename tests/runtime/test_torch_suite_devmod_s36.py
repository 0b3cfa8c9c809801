"""torch 2.15's own runtime modules, function by function (``torch/cuda/__init__.py``,
``torch/cuda/memory.py``, ``torch/cuda/random.py``, ``torch/cuda/streams.py``,
``torch/accelerator/__init__.py`` and ``torch/accelerator/memory.py``), checked on accelrt's
device modules and top-level namespace.

Each test names the torch function whose docstring and code it follows (read in torch 2.15's
sources; where the function works on a CPU-only build, run there too). ``torch.cuda`` is a
device module here: a two-device cpu backend (synchronous streams) and a two-device
:class:`~accelrt.testing.SimulatedBackend`; ``torch.accelerator`` is ``accelrt`` with that
backend as the current accelerator. What the session-35 files check already (stream and
event semantics, statistics, host statistics, snapshots, RNG states) is not repeated.
"""

from __future__ import annotations

import gc
import re
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt.backends.cpu import CpuBackend
from accelrt.testing import SimulatedBackend

CPU, SIM = "s36dmcpu", "s36dmsim"

_backends = module_backends({
    CPU: lambda: CpuBackend(num_devices=2, async_streams=False, name=CPU),
    SIM: lambda: SimulatedBackend(device_count=2, name=SIM),
})

MiB = 1 << 20


@pytest.fixture(params=[CPU, SIM])
def m(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The device module of each backend, made the current accelerator with device 0
    current (conftest puts the accelerator, devices and streams back); its sync debug mode
    and default generators are put back too."""
    name: str = request.param
    mod: Any = acc.backends.device_module(name)
    acc.set_current_accelerator(name)
    mod.set_device(0)
    mode = mod.get_sync_debug_mode()
    states = mod.get_rng_state_all()
    yield mod
    mod.set_sync_debug_mode(mode)
    for i in range(mod.device_count()):
        mod.synchronize(i)
    mod.set_rng_state_all(states)


def _fresh(name: str, factory: Any) -> Any:
    """A newly registered backend's device module (conftest unregisters it after the test):
    nothing of it was used or initialised yet."""
    acc.backends.register(name, factory)
    return acc.backends.device_module(name)


# ------------------------------------------------------------ properties and peer access

def test_get_device_properties_refuses_an_invalid_id_as_torch(m: Any) -> None:
    """mirrors torch/cuda/__init__.py get_device_properties (and get_device_name and
    get_device_capability, which call it): an index that is negative or not below
    ``device_count()`` raises ``AssertionError("Invalid device id")``. accelrt's error keeps
    its own class (a ``RuntimeError`` and an ``IndexError``/``ValueError``) and is an
    ``AssertionError`` too, with torch's words first."""
    for fn in (m.get_device_properties, m.get_device_name, m.get_device_capability):
        for bad in (2, -1, f"{m.name}:2", acc.device(m.name, 5)):
            with pytest.raises(AssertionError, match="^Invalid device id"):
                fn(bad)
        with pytest.raises(IndexError, match="out of index range"):
            fn(2)
        with pytest.raises(ValueError, match="must not be negative"):
            fn(-1)
        with pytest.raises(RuntimeError):
            fn(-1)
        with pytest.raises(ValueError, match="Expected a .* device, but got"):
            fn("cuda:0")                   # another type: torch.cuda._utils's ValueError


def test_device_queries_take_every_device_form(m: Any) -> None:
    """mirrors torch/cuda/__init__.py get_device_properties/get_device_name/
    get_device_capability's ``device`` (``torch.device or int or str, optional``, ``None``
    the current device): every form of device 1 answers device 1's properties."""
    uuid1 = m.get_device_properties(1).uuid
    assert uuid1 != m.get_device_properties(0).uuid
    forms = [1, f"{m.name}:1", acc.device(m.name, 1), m.device(1)]
    for form in forms:
        assert m.get_device_properties(form).uuid == uuid1
        assert m.get_device_name(form) == m.get_device_properties(1).name
        assert m.get_device_capability(form) == m.get_device_capability(1)
    with m.device(1):
        assert m.get_device_properties().uuid == uuid1
        assert m.get_device_properties(None).uuid == uuid1
        assert m.get_device_properties(m.name).uuid == uuid1   # no index: the current one
    props = m.get_device_properties(0)
    # torch 2.15's _CudaDeviceProperties attributes (torch/_C/__init__.pyi)
    for field in ("name", "major", "minor", "multi_processor_count", "total_memory",
                  "is_integrated", "is_multi_gpu_board", "max_threads_per_multi_processor",
                  "max_threads_per_block", "gcnArchName", "warp_size", "uuid",
                  "L2_cache_size", "clock_rate", "memory_clock_rate", "memory_bus_width",
                  "shared_memory_per_block", "shared_memory_per_multiprocessor",
                  "shared_memory_per_block_optin", "regs_per_multiprocessor"):
        assert hasattr(props, field), field
    assert isinstance(props.name, str) and isinstance(props.total_memory, int)
    assert props.total_memory > 0 and isinstance(props.multi_processor_count, int)


def test_can_device_access_peer_argument_forms(m: Any) -> None:
    """mirrors torch/cuda/__init__.py can_device_access_peer: ``device`` may be ``None`` (the
    current device) but ``peer_device`` must name one (``_get_device_index(peer_device)``
    without ``optional``: ``ValueError`` "Expected a torch.device with a specified index or an
    integer, but got:None"); an index out of range or negative is ``AssertionError`` "Invalid
    device id" / "Invalid peer device id"."""
    assert m.can_device_access_peer(None, 1) is m.can_device_access_peer(0, 1)
    assert m.can_device_access_peer(0, f"{m.name}:1") is m.can_device_access_peer(0, 1)
    assert m.can_device_access_peer(acc.device(m.name, 1), 0) is m.can_device_access_peer(1, 0)
    for peer in (None, m.name, acc.device(m.name)):
        with pytest.raises(ValueError, match="with a specified index or an integer, but got"):
            m.can_device_access_peer(0, peer)
    with pytest.raises(AssertionError, match="^Invalid device id"):
        m.can_device_access_peer(2, 0)
    with pytest.raises(AssertionError, match="^Invalid device id"):
        m.can_device_access_peer(-1, 0)
    with pytest.raises(AssertionError, match="^Invalid peer device id"):
        m.can_device_access_peer(0, 2)
    with pytest.raises(AssertionError, match="^Invalid peer device id"):
        m.can_device_access_peer(0, -1)
    with pytest.raises(IndexError):
        m.can_device_access_peer(0, 2)      # accelrt's class is kept as well


# -------------------------------------------------------------------- memory functions

def test_deprecated_memory_aliases_warn_and_answer(m: Any) -> None:
    """mirrors torch/cuda/memory.py memory_cached, max_memory_cached (``@deprecated`` with
    ``FutureWarning``: "renamed to memory_reserved") and reset_max_memory_allocated,
    reset_max_memory_cached (a ``FutureWarning`` that they now reset /all/ peak stats, then
    ``reset_peak_memory_stats``)."""
    x = acc.empty(3 * MiB, dtype="int8", device=f"{m.name}:0")
    del x
    y = acc.empty(MiB, dtype="int8", device=f"{m.name}:0")
    with pytest.warns(FutureWarning, match="renamed to .*memory_reserved"):
        assert m.memory_cached() == m.memory_reserved()
    with pytest.warns(FutureWarning, match="renamed to .*max_memory_reserved"):
        assert m.max_memory_cached(0) == m.max_memory_reserved(0)
    m.empty_cache()
    assert m.max_memory_allocated() >= 3 * MiB > m.memory_allocated()
    for reset in (m.reset_max_memory_allocated, m.reset_max_memory_cached):
        with pytest.warns(FutureWarning, match="resets /all/ peak memory stats"):
            reset()
        # every peak, not only the one the name speaks of, is back at its current value
        assert m.max_memory_allocated() == m.memory_allocated()
        assert m.max_memory_reserved() == m.memory_reserved()
    del y
    gc.collect()
    m.empty_cache()


def test_per_process_memory_fraction_bounds_and_types(m: Any) -> None:
    """mirrors torch/cuda/memory.py set_per_process_memory_fraction: a ``float`` in the
    closed range 0~1 (both ends allowed), an ``int`` (``1``, ``True``) is ``TypeError``
    "Invalid type for fraction argument, must be `float`", outside the range ``ValueError``
    "Invalid fraction value: 1.5. Allowed range: 0~1"; ``device`` takes every device form."""
    orig = m.get_per_process_memory_fraction(1)
    try:
        for ok in (0.0, 1.0, 0.25):
            m.set_per_process_memory_fraction(ok, f"{m.name}:1")
            assert m.get_per_process_memory_fraction(acc.device(m.name, 1)) == ok
        for bad in (1, 0, True):
            with pytest.raises(TypeError, match="Invalid type for fraction argument, must be "
                                                "`float`"):
                m.set_per_process_memory_fraction(bad, 1)
        with pytest.raises(ValueError, match=r"^Invalid fraction value: 1\.5\. Allowed range: "
                                             r"0~1$"):
            m.set_per_process_memory_fraction(1.5, 1)
        with pytest.raises(ValueError, match="Invalid fraction value: -0.001"):
            m.set_per_process_memory_fraction(-0.001, 1)
        assert m.get_per_process_memory_fraction(1) == 0.25      # refused values change nothing
        with pytest.raises(IndexError):
            m.set_per_process_memory_fraction(0.5, 2)
        with pytest.raises(ValueError, match="Expected a .* device"):
            m.get_per_process_memory_fraction("cuda:0")
    finally:
        m.set_per_process_memory_fraction(orig, 1)


def test_caching_allocator_alloc_stream_forms(m: Any) -> None:
    """mirrors torch/cuda/memory.py caching_allocator_alloc: ``stream`` is a stream object or
    an ``int`` handle (``None``: the current stream of ``device``); anything else is
    ``TypeError`` "Invalid type for stream argument, must be ... `int` ..."; the block is
    counted on the device asked for and ``caching_allocator_delete`` gives it back."""
    side = m.Stream(1)
    before = m.memory_allocated(1)
    ptrs = [m.caching_allocator_alloc(MiB, 1, side),
            m.caching_allocator_alloc(MiB, f"{m.name}:1", None),
            m.caching_allocator_alloc(MiB, acc.device(m.name, 1), m.current_stream(1))]
    assert m.memory_allocated(1) == before + 3 * MiB
    for bad in ("0", 1.5, object()):
        with pytest.raises(TypeError, match="Invalid type for stream argument, must be .*`int`"):
            m.caching_allocator_alloc(16, 1, bad)
    for ptr in ptrs:
        m.caching_allocator_delete(ptr)
    assert m.memory_allocated(1) == before
    side.synchronize()
    m.empty_cache()


def test_calls_that_leave_the_backend_uninitialised() -> None:
    """mirrors torch/cuda/memory.py and torch/cuda/__init__.py: the calls torch makes without
    ``_lazy_init()`` (``device_count``, ``is_available``, the statistics getters guarded by
    ``is_initialized()``: ``memory_stats``/``memory_stats_as_nested_dict`` ``{}``, the byte
    counters 0, ``host_memory_stats``/``host_memory_stats_as_nested_dict`` ``{}``,
    ``empty_cache``, ``caching_allocator_enable``, ``get_allocator_backend``) leave a fresh
    backend uninitialised; ``init()`` and ``ipc_collect()`` (which calls ``_lazy_init()``)
    initialise it."""
    for name, how in (("s36dmfresh1", "init"), ("s36dmfresh2", "ipc_collect")):
        f = _fresh(name, lambda name=name: CpuBackend(num_devices=2, async_streams=False,
                                                      name=name))
        assert f.is_initialized() is False
        assert f.is_available() is True and f.device_count() == 2
        assert f.memory_stats() == {} and f.memory_stats(1) == {}
        assert f.memory_stats_as_nested_dict() == {}
        assert (f.memory_allocated(), f.max_memory_allocated(), f.memory_reserved(),
                f.max_memory_reserved()) == (0, 0, 0, 0)
        assert f.host_memory_stats() == {} and f.host_memory_stats_as_nested_dict() == {}
        f.empty_cache()
        f.caching_allocator_enable(True)
        assert f.get_allocator_backend() == "native"
        f.reset_peak_memory_stats()
        f.reset_accumulated_memory_stats(1)
        assert f.is_initialized() is False
        getattr(f, how)()
        assert f.is_initialized() is True
        assert len(f.host_memory_stats()) == 28      # every key, at 0, once initialised


def test_record_memory_history_refuses_unknown_names_as_torch(m: Any) -> None:
    """mirrors torch/cuda/memory.py _record_memory_history (its C++ ``checkOptionIn``, run
    on torch 2.15 CPU-only: the names are checked before CUDA is needed): an unknown
    ``enabled``, ``context`` or ``stacks`` string is a ``RuntimeError`` "expected state to be
    'state', 'all', or None" / "expected context to be 'state', 'alloc', 'all', or None" /
    "expected stacks to be 'python', or 'all'" (accelrt's is a ``ValueError`` too); a value
    that is not a string is a ``TypeError`` (torch: "incompatible function arguments"); the
    legacy ``bool`` form is taken (``trace_alloc_max_entries=1``: the trace keeps the last
    entry)."""
    record = m.memory._record_memory_history
    cases = [(("none",), {}, "expected state to be 'state', 'all', or None"),
             (("all",), {"context": "everything"},
              "expected context to be 'state', 'alloc', 'all', or None"),
             (("all",), {"stacks": "cpp"}, "expected stacks to be 'python', or 'all'")]
    for args, kwargs, text in cases:
        with pytest.raises(RuntimeError, match=re.escape(text)):
            record(*args, device=0, **kwargs)
        with pytest.raises(ValueError):
            record(*args, device=0, **kwargs)
    for args, kwargs in (((1,), {}), (("all",), {"stacks": None}), (("all",), {"context": 1})):
        with pytest.raises(TypeError):
            record(*args, device=0, **kwargs)
    try:
        # torch's legacy form (_record_memory_history_legacy): on, a trace of one entry
        record(True, device=0)
        x = acc.empty(16, device=f"{m.name}:0")
        trace = m.memory._snapshot(0)["device_traces"][0]
        assert [t["action"] for t in trace] == ["alloc"] and trace[0]["addr"] == x.data_ptr()
        del x
    finally:
        record(None, device=0)
        m.empty_cache()


# ------------------------------------------------------------------------ sync debug

def test_sync_debug_mode_argument_forms(m: Any) -> None:
    """mirrors torch/cuda/__init__.py set_sync_debug_mode/get_sync_debug_mode and its C++
    binding: a name (``"default"``/``"warn"``/``"error"``, exact case) or an integer 0..2 (a
    numpy integer too); another string is ``RuntimeError`` "invalid value of debug_mode,
    expected one of `default`, `warn`, `error`", an integer outside 0..2 "... expected one of
    0,1,2", a bool, float or ``None`` "invalid argument to set_sync_debug_mode"; in "warn"
    mode a stream synchronize warns ``UserWarning`` "called a synchronizing ... operation",
    in "error" mode it raises ``RuntimeError``."""
    m.set_sync_debug_mode(np.int64(1))
    assert m.get_sync_debug_mode() == 1 and type(m.get_sync_debug_mode()) is int
    for bad in ("WARN", "Default", ""):
        with pytest.raises(RuntimeError, match="expected one of `default`, `warn`, `error`"):
            m.set_sync_debug_mode(bad)
    for bad_int in (3, -1):
        with pytest.raises(RuntimeError, match="invalid value of debug_mode, expected one of "
                                               "0,1,2"):
            m.set_sync_debug_mode(bad_int)
    for bad_obj in (True, 1.0, None):
        with pytest.raises(RuntimeError, match="invalid argument to set_sync_debug_mode"):
            m.set_sync_debug_mode(bad_obj)
    assert m.get_sync_debug_mode() == 1             # nothing refused changed the mode
    s = m.current_stream()
    with pytest.warns(UserWarning, match="called a synchronizing .* operation"):
        s.synchronize()
    m.set_sync_debug_mode("error")
    with pytest.raises(RuntimeError, match="called a synchronizing .* operation"):
        s.synchronize()
    m.set_sync_debug_mode("default")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s.synchronize()


# ------------------------------------------------------------------------------ random

def test_random_seed_argument_forms(m: Any) -> None:
    """mirrors torch/cuda/random.py manual_seed/manual_seed_all (``seed = int(seed)`` first:
    a numpy integer, a float and a numeric string are read by ``int()``; a negative seed
    wraps to uint64 in the generator, as ``initial_seed()`` shows) and set_rng_state_all
    (``for i, state in enumerate(new_states)``: fewer states than devices set only the
    first devices, an iterator is taken)."""
    for seed, expected in ((np.int64(3), 3), (7.9, 7), ("11", 11), (-1, 2**64 - 1)):
        m.manual_seed(seed)
        assert m.initial_seed() == expected and type(m.initial_seed()) is int
    m.manual_seed_all(5)
    assert [m.initial_seed() for _ in range(1)] == [5]
    with m.device(1):
        assert m.initial_seed() == 5
    m.manual_seed_all(1)
    s0, s1 = m.get_rng_state(0), m.get_rng_state(1)
    m.manual_seed_all(2)
    m.set_rng_state_all(iter([s0]))                 # only device 0
    assert np.array_equal(m.get_rng_state(0), s0)
    assert not np.array_equal(m.get_rng_state(1), s1)
    m.set_rng_state(s1, f"{m.name}:1")
    assert np.array_equal(m.get_rng_state(acc.device(m.name, 1)), s1)


# -------------------------------------------------------------------- torch.accelerator

def test_accelerator_device_index_argument_checks(m: Any) -> None:
    """mirrors torch/accelerator/__init__.py set_device_index and _utils._get_device_index:
    a device without an index (``optional=False``) is ``ValueError`` "Expected a ... with a
    specified index or an integer, but got..."; a device of another type than the current
    accelerator ``ValueError`` "cuda doesn't match the current accelerator ..."; a negative
    index is a no-op; ``current_device_idx``/``set_device_idx`` are the ``FutureWarning``
    aliases ("Use `current_device_index` instead.")."""
    for bad in (m.name, acc.device(m.name), None):
        with pytest.raises(ValueError, match="with a specified index or an integer, but got"):
            acc.set_device_index(bad)
    with pytest.raises(ValueError, match=f"^cuda doesn't match the current accelerator "
                                         f"{m.name}"):
        acc.set_device_index("cuda:0")
    acc.set_device_index(f"{m.name}:1")
    assert acc.current_device_index() == 1
    acc.set_device_index(-1)
    assert acc.current_device_index() == 1
    with pytest.warns(FutureWarning, match="Use `set_device_index` instead"):
        acc.set_device_idx(0)
    with pytest.warns(FutureWarning, match="Use `current_device_index` instead"):
        assert acc.current_device_idx() == 0


def test_accelerator_random_functions(m: Any) -> None:
    """mirrors torch/accelerator/random.py initial_seed, get_rng_state and get_rng_state_all
    (torch 2.15): each takes an int, a string or a device of the current accelerator
    (``None``: the current device) and answers the device's default generator, the one the
    device module reads."""
    m.manual_seed_all(0)
    with m.device(1):
        m.manual_seed(123)
    assert acc.random.initial_seed(1) == 123
    assert acc.random.initial_seed(f"{m.name}:1") == 123
    assert acc.random.initial_seed(acc.device(m.name, 1)) == 123
    assert acc.random.initial_seed() == acc.random.initial_seed(0) == 0
    acc.set_device_index(1)
    assert acc.random.initial_seed() == 123
    assert np.array_equal(acc.random.get_rng_state(), m.get_rng_state(1))
    states = acc.random.get_rng_state_all()
    assert len(states) == acc.device_count() == 2
    assert all(np.array_equal(a, m.get_rng_state(i)) for i, a in enumerate(states))
    assert all(a.dtype == np.uint8 for a in states)
