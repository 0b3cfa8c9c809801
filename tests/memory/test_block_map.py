"""The allocator's BlockMap, both implementations (the pure build's ``dict`` and the compiled
build's C type, where it is built) against a dict model: every operation the allocator uses,
in the dict's order, across the C table's growth and its deletions (backward shifts through
clusters of aligned addresses), 64-bit edges, keys that are not addresses, and reference
counts (the C type owns a reference to every block it holds); and the C type survives a
collection that changes the map inside values() and keys(), and a long chain of maps (on a small
stack: tests/helpers/collect_inside.py)."""

from __future__ import annotations

import gc
import random
import sys
import weakref
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelrt import memory
from accelrt.memory import _allocator, _block_map
from accelrt.memory._block_map import PyBlockMap
from tests.helpers.builds import both_builds_params
from tests.helpers.collect_inside import assert_chain_released, run_scenarios

IMPLS = both_builds_params(PyBlockMap, "accelrt.memory._block_map_c", "BlockMap")
C_ONLY = [p for p in IMPLS if p.id == "c"]
END = 1 << 64


class Blk:
    """A stand-in block (the map holds any object)."""

    def __init__(self, addr: int) -> None:
        self.addr = addr

    def __repr__(self) -> str:
        return f"Blk({self.addr:#x})"


def test_the_loaded_implementation_follows_the_build() -> None:
    c = sys.modules.get("accelrt.memory._block_map_c")
    if memory.compiled:
        assert c is not None and _block_map.BlockMap is c.BlockMap
    else:
        assert _block_map.BlockMap is PyBlockMap
        assert PyBlockMap is dict  # type: ignore[comparison-overlap]  # (typed as its own class)


def check_same(m: Any, model: dict[int, Any]) -> None:
    assert len(m) == len(model) and bool(m) == bool(model)
    assert list(m.values()) == list(model.values())   # (a dict's order: first stored)
    assert list(m.keys()) == list(model)


# aligned addresses (all low bits 0: one cluster for a table indexed by low bits), their
# neighbours, and the 64-bit edges
ADDRS = [0, 1, 512, 0x7F00_0000_0000 + 512, 2**62, 2**63, END - 1,
         *(0x7F12_3400_0000 + i * 2**21 for i in range(12)),
         *(0x7F12_3400_0000 + i * 512 for i in range(12))]
ops = st.lists(st.tuples(st.sampled_from(["set", "del", "get", "getitem", "in", "check"]),
                         st.sampled_from(ADDRS), st.integers(0, 3)), max_size=120)


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=150, deadline=None)
@given(seq=ops)
def test_against_a_model(impl: Any, seq: list[Any]) -> None:
    m = impl()
    model: dict[int, Any] = {}
    for op, addr, v in seq:
        if op == "set":
            blk = (addr, v)
            m[addr] = blk
            model[addr] = blk
        elif op == "del":
            if addr in model:
                del m[addr]
                del model[addr]
            else:
                with pytest.raises(KeyError):
                    del m[addr]
        elif op == "get":
            assert m.get(addr) == model.get(addr)
            assert m.get(addr, "none") == model.get(addr, "none")
        elif op == "getitem":
            if addr in model:
                assert m[addr] is model[addr]
            else:
                with pytest.raises(KeyError):
                    m[addr]
        elif op == "in":
            assert (addr in m) == (addr in model)
        elif op == "check":
            check_same(m, model)
    check_same(m, model)


@pytest.mark.parametrize("impl", IMPLS)
def test_many_blocks_grow_and_shrink_the_table(impl: Any) -> None:
    rng = random.Random(7)
    m = impl()
    model: dict[int, Any] = {}
    base = 0x7F00_0000_0000
    for step in range(20_000):
        addr = base + rng.randrange(4000) * 512
        if addr in model and rng.random() < 0.55:
            del m[addr], model[addr]
        else:
            m[addr] = model[addr] = step
        if step % 4000 == 0:
            check_same(m, model)
    check_same(m, model)
    for addr in list(model):
        assert m[addr] == model[addr]
        del m[addr]
    assert len(m) == 0 and list(m.values()) == [] and not m


@pytest.mark.parametrize("impl", IMPLS)
def test_an_overwrite_keeps_the_first_position(impl: Any) -> None:
    m = impl()
    for a in (0x3000, 0x1000, 0x2000):
        m[a] = a
    m[0x1000] = "new"
    assert list(m.values()) == [0x3000, "new", 0x2000]
    del m[0x3000]
    m[0x3000] = "back"   # (stored again: now last)
    assert list(m.keys()) == [0x1000, 0x2000, 0x3000]


@pytest.mark.parametrize("impl", IMPLS)
def test_keys_that_are_not_addresses_are_absent(impl: Any) -> None:
    m = impl()
    m[0x1000] = "a"
    m[END - 1] = "top"
    for key in ("0x1000", None, (1, 2), -0x1000, END, 2**100):
        assert key not in m
        assert m.get(key) is None and m.get(key, 5) == 5
        with pytest.raises(KeyError):
            m[key]
        with pytest.raises(KeyError):
            del m[key]
    assert m[END - 1] == "top" and len(m) == 2


class Addr(int):
    """An int subclass (the C type reads it by the general route, not from its digits)."""


@pytest.mark.parametrize("impl", IMPLS)
def test_ints_of_every_length_and_int_subclasses_are_addresses(impl: Any) -> None:
    m = impl()
    # 0, one, two and three 30-bit digits, and the ends of each length
    keys = [0, 1, 2**30 - 1, 2**30, 2**60 - 1, 2**60, 2**63, END - 1]
    for k in keys:
        m[k] = k
    for k in keys:
        assert m[k] == k and m[Addr(k)] == k and Addr(k) in m and m.get(Addr(k)) == k
    m[Addr(2**45)] = "sub"
    assert m[2**45] == "sub" and list(m.keys())[-1] == 2**45
    del m[Addr(2**45)]
    assert 2**45 not in m and list(m.values()) == keys


@pytest.mark.parametrize("impl", C_ONLY)
def test_the_c_type_refuses_to_store_what_is_not_an_address(impl: Any) -> None:
    m = impl()
    with pytest.raises(TypeError, match="an address must be an int, not str"):
        m["0x1000"] = "a"
    with pytest.raises(OverflowError, match=r"in \[0, 2\*\*64\), got -1"):
        m[-1] = "a"
    with pytest.raises(OverflowError, match="got 18446744073709551616"):
        m[END] = "a"
    # an int-valued float or a bool is not an address (a dict would take 4096.0 for 4096)
    m[4096] = "a"
    m[1] = "one"
    assert m.get(4096.0) is None and 4096.0 not in m
    assert m.get(True) == "one"      # (bool is an int: True is address 1, as in a dict)
    with pytest.raises(TypeError, match="takes no arguments"):
        impl({1: 2})
    with pytest.raises(TypeError, match="takes no arguments"):
        impl(a=1)
    with pytest.raises(TypeError, match="get takes"):
        m.get()
    with pytest.raises(TypeError, match="get takes"):
        m.get(1, 2, 3)
    assert len(m) == 2 and repr(m) == "<BlockMap of 2 blocks>"


@pytest.mark.parametrize("impl", IMPLS)
def test_held_blocks_are_owned_and_released(impl: Any) -> None:
    m = impl()
    refs = []
    for i in range(40):
        b = Blk(i * 512)
        refs.append(weakref.ref(b))
        m[b.addr] = b
        del b
    gc.collect()
    assert all(r() is not None for r in refs)     # the map keeps them alive
    del m[3 * 512]
    m[4 * 512] = "replaced"
    gc.collect()
    assert refs[3]() is None and refs[4]() is None and refs[5]() is not None
    # a cycle through the map (a block that holds its map, as the allocator's blocks hold
    # their pool and allocator) is collected
    cyc = Blk(2**40)
    cyc.m = m  # type: ignore[attr-defined]
    m[cyc.addr] = cyc
    del cyc, m
    gc.collect()
    assert all(r() is None for r in refs)


@pytest.mark.parametrize("impl", IMPLS)
def test_a_block_released_by_the_map_may_read_the_map(impl: Any) -> None:
    # a value's release runs Python code (here __del__); the map is consistent by then
    seen: list[Any] = []
    m = impl()
    addrs = [0x7F00_0000_0000 + i * 512 for i in range(64)]   # (one cluster in the table)

    class Reader:
        def __del__(self) -> None:
            seen.append((len(m), all(m.get(a) == a for a in addrs if a in m),
                         sum(1 for a in addrs if a in m)))

    for a in addrs:
        m[a] = a
    m[addrs[10]] = Reader()
    m[addrs[10]] = addrs[10]               # an overwrite releases the reader
    m[addrs[20]] = Reader()
    del m[addrs[20]]                       # a deletion releases the reader
    assert seen == [(64, True, 64), (63, True, 63)]


def test_the_allocator_holds_its_blocks_in_the_loaded_map() -> None:
    from accelrt.backends import get_backend
    a = _allocator.DeviceCachingAllocator(get_backend("cpu"), 0)
    p = a.malloc(4096, 0)
    q = a.malloc(4096, 0)
    assert type(a._blocks) is _block_map.BlockMap
    assert a._blocks[p].addr == p and q in a._blocks
    a.free(p)
    a.free(q)
    a.empty_cache()
    assert len(a._blocks) == 0



# values(), keys() and iteration while a finaliser the collector runs inside the call adds or
# deletes blocks: the result is the map's before or after the change. The C type sized its
# list before making it (the collection) and filled it after: past its end (a crash), or with
# empty items, or from slots emptied or moved by the change.
SCENARIOS = """
def add(m):
    for i in range(100):
        m[0x100000 + i * 512] = Blk(100 + i)


def delete(m):
    for a in list(m.keys())[:7]:
        del m[a]


for call in ["values", "keys", "iter"]:
    for change in [add, delete]:
        m = impl()
        for i in range(8):
            m[0x1000 * (i + 1)] = Blk(i)
        listing = {"values": lambda: [b.i for b in m.values()],
                   "keys": lambda: list(m.keys()), "iter": lambda: list(m)}[call]
        before = listing()
        n = len(ran)
        try:
            got = during(lambda: change(m), listing)
        except RuntimeError:          # (a dict that changed size while iterated)
            got = "RuntimeError"
        assert len(ran) == n + 1, (call, change.__name__)
        assert got in (before, listing(), "RuntimeError"), (call, change.__name__, got)
        print(call, change.__name__, "ok")
"""


@pytest.mark.parametrize("impl", IMPLS)
def test_a_collection_inside_a_call_that_changes_the_map(impl: Any) -> None:
    out = run_scenarios(SCENARIOS, impl.__module__, impl.__name__)
    assert out.count(" ok") == 6, out


@pytest.mark.parametrize("impl", IMPLS)
def test_a_long_chain_of_maps_is_released(impl: Any) -> None:
    # each map holds the next: the C type's release recursed once per map and overflowed the
    # stack (the trashcan defers it, as a dict's release does)
    assert_chain_released(impl.__module__, impl.__name__, "y = impl(); y[0] = x")
