"""The allocator's FreeList, both implementations (the pure build's Python type and the
compiled build's C type, where it is built) against a sorted-list model: every method, tiny
buckets (splits and drops on every few changes), 64-bit edges, bad arguments, iterators that
see a change, and reference counts (the C type owns a reference to every listed block); the
two agree on every argument (numpy integers, bools, int subclasses, the first bad one named);
and the C type survives a collection that changes the list inside its calls, a
long chain of lists (on a small stack: tests/helpers/collect_inside.py), and a failed
allocation."""

from __future__ import annotations

import gc
import itertools
import subprocess
import sys
import textwrap
import weakref
from typing import Any

import numpy as np

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelrt import memory
from accelrt.memory import _block
from accelrt.memory._free_list import PyFreeList
from tests.helpers.builds import both_builds_params
from tests.helpers.collect_inside import assert_chain_released, run_scenarios


IMPLS = both_builds_params(PyFreeList, "accelrt.memory._free_list_c", "FreeList")
END = 1 << 64


class Blk:
    """A stand-in block (any object may be listed)."""

    def __init__(self, size: int, addr: int) -> None:
        self.size, self.addr = size, addr

    def __repr__(self) -> str:
        return f"Blk({self.size}, {self.addr:#x})"


def test_the_loaded_implementation_follows_the_build() -> None:
    c = sys.modules.get("accelrt.memory._free_list_c")
    if memory.compiled:
        assert c is not None and _block.FreeList is c.FreeList
    else:
        assert _block.FreeList is PyFreeList


class Model:
    def __init__(self) -> None:
        self.d: dict[tuple[int, int], Any] = {}

    def sorted(self) -> list[tuple[int, int]]:
        return sorted(self.d)


keys = st.tuples(st.sampled_from([0, 1, 512, 1024, 4096, 2**20, 2**32, 2**63, END - 1]),
                 st.sampled_from([0, 1, 0x1000, 0x2000, 2**40, 2**62, END - 1]))
ops = st.lists(st.tuples(st.sampled_from(["add", "remove", "replace", "pop_ge", "first_ge",
                                          "iter_ge", "iter_lt"]), keys, keys),
               max_size=80)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("bucket_max", [2, 3, 5, 512])
@settings(max_examples=60, deadline=None)
@given(seq=ops)
def test_against_a_model(impl: Any, bucket_max: int, seq: list[Any]) -> None:
    fl = impl(bucket_max)
    model = Model()
    for op, (s, a), (s2, a2) in seq:
        if op == "add":
            b = Blk(s, a)
            if (s, a) in model.d:
                with pytest.raises(ValueError, match="already listed"):
                    fl.add(s, a, b)
            else:
                fl.add(s, a, b)
                model.d[(s, a)] = b
        elif op == "remove":
            if (s, a) in model.d:
                assert fl.remove(s, a) is model.d.pop((s, a))
            else:
                with pytest.raises(KeyError):
                    fl.remove(s, a)
        elif op == "replace":
            b = Blk(s2, a2)
            if (s, a) not in model.d:
                with pytest.raises(KeyError):
                    fl.replace(s, a, s2, a2, b)
            elif (s2, a2) in model.d and (s2, a2) != (s, a):
                with pytest.raises(ValueError, match="already listed"):
                    fl.replace(s, a, s2, a2, b)
            else:
                fl.replace(s, a, s2, a2, b)
                del model.d[(s, a)]
                model.d[(s2, a2)] = b
        elif op == "pop_ge":
            ge = [k for k in model.sorted() if k >= (s, 0)]
            got = fl.pop_ge(s)
            assert got is (model.d.pop(ge[0]) if ge else None)
        elif op == "first_ge":
            ge = [k for k in model.sorted() if k >= (s, a)]
            assert fl.first_ge(s, a) is (model.d[ge[0]] if ge else None)
            if a == 0:
                assert fl.first_ge(s) is fl.first_ge(s, 0)
        elif op == "iter_ge":
            assert list(fl.iter_ge(s, a)) == [model.d[k] for k in model.sorted() if k >= (s, a)]
        else:
            assert list(fl.iter_lt(s, a)) == [model.d[k] for k in model.sorted()
                                              if k < (s, a)][::-1]
        assert fl.keys() == model.sorted()
        assert len(fl) == len(model.d) and bool(fl) == bool(model.d)
        assert list(fl) == [model.d[k] for k in model.sorted()]
        sizes = fl.bucket_sizes()
        assert all(0 < n <= bucket_max for n in sizes) and sum(sizes) == len(model.d)


@pytest.mark.parametrize("impl", IMPLS)
def test_many_keys_split_and_drop_buckets(impl: Any) -> None:
    fl = impl(8)
    order = [(i * 7919) % 1000 for i in range(1000)]
    for i in order:
        fl.add(512 * (i % 10 + 1), i, i)
    assert len(fl) == 1000 and max(fl.bucket_sizes()) <= 8
    expect = sorted(order, key=lambda i: (512 * (i % 10 + 1), i))
    assert list(fl) == expect
    assert list(fl.iter_lt(512 * 5)) == [i for i in expect if 512 * (i % 10 + 1) < 512 * 5][::-1]
    for i in order[::2]:
        assert fl.remove(512 * (i % 10 + 1), i) == i
    assert list(fl) == [i for i in expect if i in set(order[1::2])]
    while fl:
        fl.pop_ge(0)
    assert fl.bucket_sizes() == [] and list(fl) == [] and fl.keys() == []
    assert list(fl.iter_ge(0)) == [] and list(fl.iter_lt(END - 1)) == []


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("how", ["iter", "iter_ge", "iter_lt"])
def test_an_iterator_refuses_a_changed_list(impl: Any, how: str) -> None:
    fl = impl(2)
    for i in range(6):
        fl.add(512, i, i)
    it = iter(fl) if how == "iter" else getattr(fl, how)(512, 3)
    next(it)
    fl.add(1024, 0, "x")
    with pytest.raises(RuntimeError, match="changed during iteration"):
        next(it)
    # a change between making an iterator and its first step counts too
    it = iter(fl)
    fl.pop_ge(1024)
    with pytest.raises(RuntimeError, match="changed during iteration"):
        next(it)


@pytest.mark.parametrize("impl", IMPLS)
def test_bad_arguments_raise_and_change_nothing(impl: Any) -> None:
    fl = impl(4)
    fl.add(512, 0x1000, "a")
    with pytest.raises(OverflowError, match="size must be in"):
        fl.add(-1, 0, "b")
    with pytest.raises(OverflowError, match="addr must be in"):
        fl.add(512, END, "b")
    with pytest.raises(TypeError, match="size must be an int"):
        fl.add(512.0, 0, "b")
    with pytest.raises(TypeError, match="addr must be an int"):
        fl.first_ge(512, "0")
    with pytest.raises(OverflowError):
        fl.pop_ge(END)
    with pytest.raises(OverflowError, match="new_addr must be in"):
        fl.replace(512, 0x1000, 512, -5, "b")
    with pytest.raises(KeyError):
        fl.remove(512, 0x2000)
    with pytest.raises(OverflowError, match="size must be in"):
        fl.remove(-512, 0x1000)
    with pytest.raises(TypeError, match="addr must be an int"):
        fl.remove(512, 4096.0)
    with pytest.raises(ValueError, match="bucket_max must be at least 2"):
        impl(1)
    assert fl.keys() == [(512, 0x1000)] and fl.first_ge(0) == "a"
    assert "FreeList([(512, 4096)])" == repr(fl)
    assert fl.bucket_max == 4 and impl().bucket_max == 512


@pytest.mark.parametrize("impl", IMPLS)
def test_listed_blocks_are_owned_and_released(impl: Any) -> None:
    fl = impl(2)
    refs = []
    for i in range(10):
        b = Blk(512, i)
        refs.append(weakref.ref(b))
        fl.add(512, i, b)
        del b
    gc.collect()
    assert all(r() is not None for r in refs)       # the list keeps them alive
    got = fl.remove(512, 3)
    fl.replace(512, 4, 1024, 4, got)                 # (4's block is dropped, 3's relisted)
    del got
    gc.collect()
    assert refs[4]() is None and refs[3]() is not None
    # a cycle through the list (a block that holds its list) is collected
    cyc = Blk(2048, 0)
    cyc.fl = fl  # type: ignore[attr-defined]
    fl.add(2048, 0, cyc)
    del cyc, fl
    gc.collect()
    assert all(r() is None for r in refs)


class Num(int):
    """An int subclass (the C type reads it by the general route, not from its digits)."""


@pytest.mark.parametrize("impl", IMPLS)
def test_ints_of_every_length_and_int_subclasses_are_read_alike(impl: Any) -> None:
    fl = impl(3)
    # 0, one, two and three 30-bit digits, and the ends of each length, as sizes and addresses
    values = [0, 1, 2**30 - 1, 2**30, 2**60 - 1, 2**60, 2**63, END - 1]
    for i, v in enumerate(values):
        fl.add(v, values[-1 - i], ("blk", i))
        fl.add(Num(v), Num(v), ("sub", i))
    assert fl.keys() == sorted({*((v, values[-1 - i]) for i, v in enumerate(values)),
                                *((v, v) for v in values)})
    for i, v in enumerate(values):
        assert fl.first_ge(Num(v), Num(values[-1 - i])) in (("blk", i), ("sub", i))
        assert fl.remove(Num(v), values[-1 - i]) == ("blk", i)
        assert fl.remove(v, Num(v)) == ("sub", i)
    assert len(fl) == 0
    with pytest.raises(OverflowError):
        fl.add(Num(-1), 0, "neg")


def _outcome(fl: Any, call: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What ``fl.call(*args)`` does: its result (iterators listed) or its error, and the list
    after it (keys, with their types, and buckets)."""
    try:
        r = getattr(fl, call)(*args)
        got: tuple[Any, ...] = ("ok", list(r) if call.startswith("iter") else r)
    except Exception as exc:
        got = (type(exc).__name__, exc.args)
    keys = fl.keys()    # (a FreeList's iteration gives blocks, not keys)
    return (*got, [(type(a), a, type(b), b) for a, b in keys], fl.bucket_sizes())


class Shifty(int):
    """An int subclass whose operators lie (the C type reads its int value)."""

    def __lshift__(self, other: Any) -> int:
        return 12345

    __or__ = __ror__ = __lshift__

    def __index__(self) -> int:
        return 7


EDGES = [0, 1, 2**63 - 1, 2**63, END - 1, END, -1, -2**63, 2**200, True, False, Num(5),
         Num(END), Shifty(3), np.int64(5), np.uint64(END - 1), np.int32(-1), np.bool_(True),
         np.array(5), 5.0, "5", None]


@pytest.mark.skipif(IMPLS[1].values[0] is None, reason="the C FreeList is not built here")
def test_the_two_types_agree_on_every_argument() -> None:
    # integer edges, numpy integers (the Python type shifted them as numpy does: 2**64 - 1 as
    # a uint64 was listed under size 0), bools, int subclasses, and wrong types, in every
    # argument of every method: same result or same error, same list after; with two bad
    # arguments, the first is named (the Python type named a wrong type before a value out of
    # range, and replace's new_size as "size")
    py, c = PyFreeList, IMPLS[1].values[0]

    def fresh(impl: Any) -> Any:
        fl = impl(2)
        for k in [(10, 0x100), (20, 0x200), (30, 0x300), (40, 0)]:
            fl.add(*k, f"b{k}")
        return fl

    calls: list[tuple[str, tuple[Any, ...]]] = []
    for v in EDGES:
        calls += [("add", (v, 1, "n")), ("add", (1, v, "n")), ("remove", (v, 0x100)),
                  ("remove", (10, v)), ("pop_ge", (v,)), ("first_ge", (v,)),
                  ("first_ge", (10, v)), ("iter_ge", (v, 0)), ("iter_lt", (40, v)),
                  ("replace", (v, 0x100, 11, 0x100, "n")), ("replace", (10, v, 11, 0, "n")),
                  ("replace", (10, 0x100, v, 0, "n")), ("replace", (10, 0x100, 11, v, "n"))]
    for v, w in itertools.product([END, -1, "x", None, np.uint64(1)], repeat=2):
        calls += [("add", (v, w, "n")), ("replace", (10, 0x100, v, w, "n")),
                  ("replace", (v, w, 1, 1, "n")), ("first_ge", (v, w))]
    calls += [("add", (20, 0x200, "dup")), ("add", (True, 0x100, "n")),
              ("replace", (10, 0x100, 30, 0x300, "n")),      # a listed new key
              ("replace", (True, 0x100, 1, 1, "n"))]         # KeyError((True, 256)) in both
    for call, args in calls:
        assert _outcome(fresh(py), call, args) == _outcome(fresh(c), call, args), (call, args)
    for bucket_max in [1, 2, 2.5, True, 2**70, -2**70, None, np.int64(3), "3"]:
        got = []
        for impl in (py, c):
            try:
                fl = impl(bucket_max)
                got.append(("ok", type(fl.bucket_max), fl.bucket_max))
            except Exception as exc:
                got.append((type(exc).__name__, str(exc)))
        assert got[0] == got[1], bucket_max


@pytest.mark.parametrize("impl", IMPLS)
def test_a_numpy_integer_or_a_lying_int_is_read_as_the_c_type_reads_it(impl: Any) -> None:
    fl = impl(4)
    fl.add(512, 0x1000, "a")
    with pytest.raises(TypeError, match="size must be an int, not numpy.uint64"):
        fl.add(np.uint64(END - 1), 1, "b")        # (was listed as (0, 1) by the Python type)
    with pytest.raises(TypeError, match="addr must be an int, not numpy.int64"):
        fl.remove(512, np.int64(0x1000))
    with pytest.raises(TypeError, match="size must be an int, not numpy.int64"):
        fl.pop_ge(np.int64(0))                    # (popped the first block)
    with pytest.raises(OverflowError, match=r"new_size must be in \[0, 2\*\*64\), got -1"):
        fl.replace(512, 0x1000, -1, 0, "b")
    with pytest.raises(OverflowError, match="size must be in"):
        fl.add(END, "x", "b")                     # (the first bad argument is reported)
    with pytest.raises(KeyError) as err:
        fl.remove(True, 0x1000)
    assert err.value.args == ((True, 0x1000),)    # (the caller's objects)
    fl.add(Shifty(3), Shifty(5), "s")             # (its int value, not its operators)
    with pytest.raises(ValueError, match="a block of 3 bytes at 0x5 is already listed"):
        fl.add(3, True + 4, "again")
    assert fl.keys() == [(3, 5), (512, 0x1000)] and len(fl) == 2


@pytest.mark.parametrize("impl", IMPLS)
def test_a_refused_replace_leaves_the_buckets_and_the_iterators(impl: Any) -> None:
    # the C type took the entry out and put it back (dropping and remaking its bucket, and
    # breaking every iterator); the Python type refuses first: both do now
    fl = impl(2)
    for i in range(5):
        fl.add(512 * (i + 1), 0, i)
    sizes, it = fl.bucket_sizes(), iter(fl)
    with pytest.raises(ValueError, match="already listed"):
        fl.replace(512 * 5, 0, 512, 0, "x")
    assert fl.bucket_sizes() == sizes and list(it) == [0, 1, 2, 3, 4]


# Each scenario: a list of 8 blocks (buckets of 4), a change made by a finaliser the
# collector runs inside the call, and the call; the result must be the list's before or after
# the change (or, for an iterator, RuntimeError), never freed or missing entries. The C type
# filled keys() and bucket_sizes() past their end or left them empty (a crash or a list of
# NULLs), and gave iterators a position in the list before the change.
SCENARIOS = """
def grow(fl):
    for i in range(50):
        fl.add(5000 + i, i, Blk(100 + i))


def shrink(fl):
    while len(fl) > 1:
        fl.pop_ge(0)


def drop_top(fl):      # (the last blocks: an iterator from the end would read them freed)
    fl.remove(107, 0x7000)
    fl.remove(106, 0x6000)


def listing(fl, call):
    if call == "keys":
        return fl.keys()
    if call == "bucket_sizes":
        return fl.bucket_sizes()
    if call == "iter_lt":
        return [b.i for b in fl.iter_lt(200)]
    return [b.i for b in fl.iter_ge(101, 0x1000)]


for call in ["keys", "bucket_sizes", "iter_lt", "iter_ge"]:
    for change in [grow, shrink, drop_top]:
        fl = impl(4)
        for i in range(8):
            fl.add(100 + i, 0x1000 * i, Blk(i))
        before = listing(fl, call)
        n = len(ran)
        if call.startswith("iter"):
            def run():
                try:
                    return [b.i for b in listing_it(fl, call)]
                except RuntimeError:
                    return "RuntimeError"
            listing_it = lambda fl, call: (fl.iter_lt(200) if call == "iter_lt"
                                           else fl.iter_ge(101, 0x1000))
            got = during(lambda: change(fl), run)
        else:
            got = during(lambda: change(fl), lambda: listing(fl, call))
        after = listing(fl, call)
        assert len(ran) == n + 1, (call, change.__name__)
        assert got in (before, after, "RuntimeError"), (call, change.__name__, got)
        print(call, change.__name__, "ok")
"""


def _where(impl: Any) -> tuple[str, str]:
    """The module and name a subprocess imports ``impl`` from (the Python type's module
    names the loaded type ``FreeList``: the C one in the compiled build)."""
    return impl.__module__, "PyFreeList" if impl is PyFreeList else impl.__name__


@pytest.mark.parametrize("impl", IMPLS)
def test_a_collection_inside_a_call_that_changes_the_list(impl: Any) -> None:
    out = run_scenarios(SCENARIOS, *_where(impl))
    assert out.count(" ok") == 12, out


@pytest.mark.parametrize("impl", IMPLS)
def test_a_long_chain_of_lists_is_released(impl: Any) -> None:
    # each list holds the next as a block: its release recursed once per list in C and
    # overflowed the stack (the trashcan defers it, as a Python list's release does)
    assert_chain_released(*_where(impl), "y = impl(2); y.add(0, 0, x)")


def test_a_failed_allocation_keeps_the_list() -> None:
    # a bucket that grows, or the bucket array that grows on a split, when the allocation
    # fails: the C type lost the buffer (PyMem_Resize sets it to NULL) and crashed on the next
    # access; now add raises MemoryError (or leaves a bucket long) and the list is intact
    c = IMPLS[1].values[0]
    if c is None:
        pytest.skip("the C FreeList is part of the compiled build, not built here")
    pytest.importorskip("_testcapi")
    code = textwrap.dedent(f"""
        import _testcapi
        from {c.__module__} import FreeList
        outcomes = set()
        for bucket_max, n in [(100, 4), (4, 4), (4, 16), (4, 6), (2, 32)]:
            for fail in range(3):
                fl = FreeList(bucket_max)
                for i in range(n):
                    fl.add(i, 0, i)
                _testcapi.set_nomemory(fail, fail + 1)
                try:
                    fl.add(1000, 0, "x")
                    outcome = "added"
                except MemoryError:
                    outcome = "MemoryError"
                finally:
                    _testcapi.remove_mem_hooks()
                keys = [(i, 0) for i in range(n)] + ([(1000, 0)] if outcome == "added" else [])
                assert fl.keys() == keys and list(fl) == [k[0] if k[0] < n else "x"
                                                          for k in keys], (bucket_max, n, fail)
                assert sum(fl.bucket_sizes()) == len(keys)
                fl.add(2000, 0, "y")
                assert fl.pop_ge(1500) == "y"
                outcomes.add(outcome)
        print(sorted(outcomes))
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "['MemoryError', 'added']\n"
