"""The allocators (and a replacing pluggable allocator) of a backend name are forgotten when the
name is unregistered or refers to a new instance; live arrays of the old instance keep their
allocator and free into it."""

from __future__ import annotations

import gc

import pytest

import accelrt as acc
from accelrt import backends, memory
from accelrt.backends.cpu import CpuBackend
from accelrt.memory._registry import all_allocators, get_allocator, peek_allocator
from tests.helpers.pluggable import numpy_allocator


def _tmp(name: str) -> CpuBackend:
    return CpuBackend(name=name)


def test_unregister_drops_the_allocator_and_a_live_array_still_frees() -> None:
    backends.register("forgetdev", lambda: _tmp("forgetdev"))
    b = backends.get_backend("forgetdev")
    x = acc.full(16, 3, dtype="int32", device="forgetdev:0")
    a = peek_allocator("forgetdev", 0)
    assert a is not None and a in all_allocators()
    assert a.memory_allocated() > 0
    backends.unregister("forgetdev")
    # the registry forgot it: no allocator of the name is listed any more
    assert peek_allocator("forgetdev", 0) is None
    assert a not in all_allocators()
    # the array keeps its allocator and frees into it: no error, nothing left allocated
    assert x.tolist() == [3] * 16
    del x
    gc.collect()
    assert a.memory_allocated() == 0
    a.empty_cache()
    assert a.memory_reserved() == 0
    b.close()


def test_a_name_registered_again_gets_a_fresh_allocator() -> None:
    backends.register("forgetdev2", lambda: _tmp("forgetdev2"))
    first = get_allocator(backends.get_backend("forgetdev2"), 0)
    backends.unregister("forgetdev2")
    backends.register("forgetdev2", lambda: _tmp("forgetdev2"))
    b2 = backends.get_backend("forgetdev2")
    second = get_allocator(b2, 0)
    assert second is not first and second._b is b2
    assert [x for x in all_allocators() if x._name == "forgetdev2"] == [second]
    backends.unregister("forgetdev2")


def test_replace_drops_the_old_instances_allocator() -> None:
    backends.register("forgetdev3", lambda: _tmp("forgetdev3"))
    old = get_allocator(backends.get_backend("forgetdev3"), 0)
    backends.register("forgetdev3", lambda: _tmp("forgetdev3"), replace=True)
    assert old not in all_allocators()
    new = get_allocator(backends.get_backend("forgetdev3"), 0)
    assert new is not old and new in all_allocators()
    backends.unregister("forgetdev3")


def test_unregister_forgets_the_replacing_pluggable_allocator() -> None:
    backends.register("forgetplug", lambda: _tmp("forgetplug"))
    plug, held = numpy_allocator()
    memory.change_current_allocator(plug, "forgetplug")
    x = acc.zeros(8, device="forgetplug:0")
    assert memory.get_allocator_backend("forgetplug") == "pluggable" and held
    backends.unregister("forgetplug")
    # a new backend of that name starts with the native allocator, and may be swapped again
    backends.register("forgetplug", lambda: _tmp("forgetplug"))
    assert memory.get_allocator_backend("forgetplug") == "native"
    plug2, held2 = numpy_allocator()
    memory.change_current_allocator(plug2, "forgetplug")
    y = acc.zeros(8, device="forgetplug:0")
    assert held2
    # the old array still frees through the old pluggable allocator
    del x
    gc.collect()
    assert not held
    del y
    gc.collect()
    assert not held2
    backends.unregister("forgetplug")


def test_replace_keeps_the_replacing_pluggable_allocator() -> None:
    backends.register("keepplug", lambda: _tmp("keepplug"))
    plug, held = numpy_allocator()
    memory.change_current_allocator(plug, "keepplug")
    backends.register("keepplug", lambda: _tmp("keepplug"), replace=True)
    assert memory.get_allocator_backend("keepplug") == "pluggable"
    x = acc.zeros(8, device="keepplug:0")
    assert held
    with pytest.raises(RuntimeError, match="Can't swap an already initialized allocator"):
        memory.change_current_allocator(numpy_allocator()[0], "keepplug")
    del x
    gc.collect()
    assert not held
    backends.unregister("keepplug")


def test_an_instance_registered_again_takes_its_own_allocator_back() -> None:
    # (a factory that returns one object; the test machinery's restore puts instances back)
    inst = _tmp("forgetsame")
    backends.register("forgetsame", lambda: inst)
    x = acc.zeros(4, device="forgetsame:0")
    a = peek_allocator("forgetsame", 0)
    assert a is not None and a.memory_allocated() > 0
    backends.unregister("forgetsame")
    assert a not in all_allocators()
    backends.register("forgetsame", lambda: inst)
    assert backends.get_backend("forgetsame") is inst
    y = acc.zeros(4, device="forgetsame:0")
    assert peek_allocator("forgetsame", 0) is a   # its statistics go on: both arrays count
    assert a.memory_allocated() >= 2 * 512
    del x, y
    gc.collect()
    assert a.memory_allocated() == 0
    backends.unregister("forgetsame")
    inst.close()


def test_an_unregistered_instance_is_not_kept_by_the_placement_caches() -> None:
    # the factories' placement caches (_placement._sites by (name, index), _placed by device
    # string) held a Site of the instance, and through it the instance, its allocators and
    # their cached memory, after the name was unregistered, until another instance of the
    # name made a site of that device
    from accelrt import _placement

    backends.register("forgetsite", lambda: _tmp("forgetsite"))
    b = backends.get_backend("forgetsite")
    x = acc.full(16, 3, dtype="int32", device="forgetsite:0")
    y = acc.empty(4, device=acc.device("forgetsite", 0))
    held = [st for st in (*_placement._sites.values(), *_placement._placed.values())
            if st.b is b]
    assert held   # (the caches this test is about)
    del x, y, held
    b.close()
    backends.unregister("forgetsite")
    assert not [st for st in (*_placement._sites.values(), *_placement._placed.values())
                if st.b is b]
    # a new instance under the name makes its own sites
    backends.register("forgetsite", lambda: _tmp("forgetsite"))
    try:
        z = acc.zeros(2, device="forgetsite:0")
        assert z._b is backends.get_backend("forgetsite") is not b and z.tolist() == [0, 0]
        del z
    finally:
        backends.get_backend("forgetsite").close()
        backends.unregister("forgetsite")
