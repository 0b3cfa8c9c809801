"""The memory owner of an array (``accelrt._memory_owner._Memory``), both implementations: the
pure build's Python class and the compiled build's C type (``_memory_owner_c.c``, where it is
built). Each owner test hands it a real block: an array's owner gives its block up
(``alloc = None``) to an owner of the type under test.

What the C type must do as CPython does for the Python class: free the block once, when
collected, also while an exception propagates (a finalizer that does not set the exception
aside ran the allocator's ``free`` with it set: ``SystemError``, the failure of the mypyc
attempt, docs/memory.md); report an exception of ``free`` as unraisable and go on; be weakly
referenceable, GC-tracked (a cycle through ``base`` is collected and its block freed), do
nothing at interpreter shutdown; fields of any type, no ``__dict__``. Copying or pickling an
owner is refused in both (``copy.copy`` of the Python class made a second owner of the block,
which freed it a second time: ``ValueError: ... not allocated (double free?)``, or another
array's block once the allocator had reused it)."""

from __future__ import annotations

import copy
import gc
import pickle
import subprocess
import sys
import textwrap
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from helpers.builds import both_builds_params

import accelrt as acc
from accelrt import _memory_owner, memory
from accelrt._memory_owner import PyMemory

IMPLS = both_builds_params(PyMemory, "accelrt._memory_owner_c", "_Memory")
DEV = "cpu:0"


def _allocated() -> int:
    return memory.memory_allocated(DEV)


def _owned(impl: Any, n: int = 64, **kw: Any) -> Any:
    """A block of ``n`` float32 owned by an owner of type ``impl`` (taken from an array)."""
    a = acc.empty(n, device=DEV)
    mem = a._mem
    owner = impl(mem.ptr, mem.nbytes, mem.alloc, **kw)
    mem.alloc = None   # the array's owner gives the block up
    return owner


@contextmanager
def _unraisable() -> Iterator[list[Any]]:
    """The unraisable exceptions reported within (``sys.unraisablehook``'s arguments)."""
    seen: list[Any] = []
    old = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        yield seen
    finally:
        sys.unraisablehook = old


@pytest.fixture(autouse=True)
def _no_memory_left() -> Iterator[None]:
    gc.collect()
    before = _allocated()
    yield
    gc.collect()
    assert _allocated() == before


def test_the_loaded_type_follows_the_build() -> None:
    assert (_memory_owner._Memory is not PyMemory) == memory.compiled
    a = acc.empty(4, device=DEV)
    assert type(a._mem) is _memory_owner._Memory
    assert isinstance(a._mem, _memory_owner._Memory)


@pytest.mark.parametrize("impl", IMPLS)
def test_the_type_is_named_as_the_python_class(impl: Any) -> None:
    assert (impl.__module__, impl.__name__, impl.__qualname__) == (
        "accelrt._memory_owner", "_Memory", "_Memory")
    assert repr(impl) == "<class 'accelrt._memory_owner._Memory'>"
    assert "_Memory" in repr(impl.__del__)


@pytest.mark.parametrize("impl", IMPLS)
def test_fields_take_any_value_and_there_is_no_dict(impl: Any) -> None:
    m = impl(0, 0, None)
    assert (m.ptr, m.nbytes, m.alloc, m.base, m.host) == (0, 0, None, None, False)
    base = np.zeros(2)
    m = impl(5, 16, None, base, True)
    assert (m.ptr, m.nbytes, m.base, m.host) == (5, 16, base, True)
    m = impl(ptr=6, nbytes=8, alloc=None, base="b", host=1)
    assert (m.ptr, m.nbytes, m.base, m.host) == (6, 8, "b", 1)
    for name in ("ptr", "nbytes", "alloc", "base", "host"):
        for value in (None, 1.5, "x", 2**70, -1):
            setattr(m, name, value)
            assert getattr(m, name) == value
    m.alloc = None
    del m.base
    with pytest.raises(AttributeError, match="'_Memory' object has no attribute 'base'"):
        m.base   # noqa: B018
    with pytest.raises(AttributeError, match="'_Memory' object has no attribute 'other'"):
        m.other = 1
    with pytest.raises(AttributeError, match="__dict__"):
        m.__dict__   # noqa: B018
    unset = impl.__new__(impl)
    with pytest.raises(AttributeError, match="'_Memory' object has no attribute 'ptr'"):
        unset.ptr   # noqa: B018
    del unset   # (never initialised: its finalizer has nothing to free, and says nothing)
    with pytest.raises(TypeError, match="alloc"):
        impl(1, 2)
    with pytest.raises(TypeError):
        impl(1, 2, None, None, False, 6)


@pytest.mark.parametrize("impl", IMPLS)
def test_the_block_is_freed_once_when_collected(impl: Any) -> None:
    before = _allocated()
    m = _owned(impl)
    assert _allocated() > before
    alloc = m.alloc
    del m
    assert _allocated() == before
    # an explicit __del__ frees it, and marks it freed (alloc None): the collection does not
    m = _owned(impl)
    m.__del__()
    assert m.alloc is None and _allocated() == before
    del m
    # nothing to free: no alloc, or no memory
    impl(0, 0, alloc)
    impl(12345, 8, None)


def _raise(exc: BaseException) -> Any:
    raise exc


@pytest.mark.parametrize("impl", IMPLS)
def test_a_block_freed_while_an_exception_propagates(impl: Any) -> None:
    # the regression of the mypyc attempt: an owner released while an exception is being
    # raised (a temporary popped off the value stack by the unwinding, the arguments of a call
    # that failed) must not run free with the exception set, nor lose it
    before = _allocated()
    with _unraisable() as seen:
        try:
            (_owned(impl), _raise(KeyError("propagating")))
        except KeyError as exc:
            assert _allocated() == before   # freed by the unwinding, before this handler
            assert exc.args == ("propagating",) and exc.__context__ is None
        try:
            len(_owned(impl), 2)   # type: ignore[call-arg]
        except TypeError as exc:
            assert _allocated() == before
            assert "len() takes exactly one argument" in str(exc)
            assert exc.__context__ is None
        try:   # dropped in an except block (the exception handled, not being raised)
            raise ValueError("inner")
        except ValueError:
            m = _owned(impl)
            del m
            assert sys.exc_info()[0] is ValueError and _allocated() == before
    assert seen == []


def test_arrays_dropped_while_exceptions_propagate() -> None:
    # the same through the factories (the loaded build's owner), and a generator's finalizer:
    # closing a suspended generator raises GeneratorExit at its yield, and the array on its
    # value stack is released while that propagates
    before = _allocated()
    with _unraisable() as seen:
        for _ in range(3):
            try:
                (acc.empty(256, device=DEV), acc.zeros(1000, device=DEV),
                 _raise(RuntimeError("unwinding")))
            except RuntimeError:
                assert _allocated() == before
        finished: list[bool] = []

        def gen() -> Iterator[Any]:
            try:
                yield (acc.empty(256, device=DEV), (yield 1))
            finally:
                finished.append(True)

        g = gen()
        assert next(g) == 1
        assert _allocated() > before
        del g   # the generator's finalizer closes it
        assert finished == [True] and _allocated() == before

        def gen_with_error() -> Iterator[Any]:
            yield (acc.empty(64, device=DEV), _raise(LookupError("from the generator")))

        try:
            next(gen_with_error())
        except LookupError:
            assert _allocated() == before
    assert seen == []
    assert _allocated() == before


class _FailingAlloc:
    """An allocator whose ``free`` raises (and counts its calls)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, bool]] = []

    def free(self, ptr: int, from_finalizer: bool = False) -> None:
        self.calls.append((ptr, from_finalizer))
        raise ValueError(f"free({ptr:#x}) refused")


@pytest.mark.parametrize("impl", IMPLS)
def test_an_error_in_free_is_unraisable_and_the_interpreter_goes_on(impl: Any) -> None:
    bad = _FailingAlloc()
    with _unraisable() as seen:
        m = impl(0x1000, 64, bad)
        ref = weakref.ref(m)
        del m
        # and while another exception propagates: that one survives
        try:
            (impl(0x2000, 64, bad), _raise(KeyError("kept")))
        except KeyError as exc:
            assert exc.args == ("kept",) and exc.__context__ is None
            assert len(bad.calls) == 2
    assert bad.calls == [(0x1000, True), (0x2000, True)]   # once each, non-blocking
    assert [u.exc_type for u in seen] == [ValueError, ValueError]
    assert str(seen[0].exc_value) == "free(0x1000) refused"
    # reported as CPython reports a Python __del__'s exception: the __del__ as the object
    assert "__del__" in repr(seen[0].object) and "_Memory" in repr(seen[0].object)
    assert seen[0].err_msg is None or "deallocator" in seen[0].err_msg
    del seen   # (the Python __del__'s frame, in the traceback, holds the owner)
    gc.collect()
    assert ref() is None and bad.calls == [(0x1000, True), (0x2000, True)]   # not again


@pytest.mark.parametrize("impl", IMPLS)
def test_weak_references_see_the_block_freed(impl: Any) -> None:
    before = _allocated()
    m = _owned(impl)
    seen: list[int] = []
    ref = weakref.ref(m, lambda r: seen.append(_allocated()))
    assert ref() is m
    del m
    assert ref() is None and seen == [before]   # callbacks run after the finalizer


@pytest.mark.parametrize("impl", IMPLS)
def test_a_cycle_through_base_is_collected_and_freed(impl: Any) -> None:
    before = _allocated()

    class Holder:
        mem: Any = None

    holder = Holder()
    m = _owned(impl, base=holder)
    holder.mem = m   # m -> base -> holder -> m
    assert gc.is_tracked(m)
    ref = weakref.ref(m)
    del m, holder
    assert ref() is not None and _allocated() > before   # only the collector frees a cycle
    gc.collect()
    assert ref() is None and _allocated() == before
    # a cycle of an owner with itself
    m = _owned(impl)
    m.base = m
    ref = weakref.ref(m)
    del m
    gc.collect()
    assert ref() is None and _allocated() == before


@pytest.mark.parametrize("impl", IMPLS)
def test_copy_and_pickle_are_refused(impl: Any) -> None:
    # copy.copy of the Python class made a second owner of the same block: both freed it
    m = _owned(impl)
    host = impl(1, 8, None, base=np.zeros(1), host=True)
    for obj in (m, host):
        for how in (copy.copy, copy.deepcopy, pickle.dumps,
                    lambda o: pickle.dumps(o, protocol=0), lambda o: o.__reduce__()):
            with pytest.raises(TypeError, match="cannot copy or pickle '_Memory' object: a "
                                                "memory owner frees its block"):
                how(obj)
    # arrays carry their contents, never the owner
    a = acc.full(3, 2.0, device=DEV)
    for b in (copy.deepcopy(a), pickle.loads(pickle.dumps(a))):
        assert b._mem is not a._mem and b.numpy().tolist() == [2.0, 2.0, 2.0]
    assert copy.copy(a)._mem is a._mem   # (a second array over the same memory)


@pytest.mark.parametrize("impl", IMPLS)
def test_python_subclasses_keep_working(impl: Any) -> None:
    before = _allocated()

    class Sub(impl):  # type: ignore[misc,valid-type]
        pass

    a = acc.empty(16, device=DEV)
    mem = a._mem
    s = Sub(mem.ptr, mem.nbytes, mem.alloc)
    mem.alloc = None
    s.extra = 1
    assert isinstance(s, impl) and s.extra == 1
    del a, mem, s
    assert _allocated() == before


@pytest.mark.parametrize("impl", IMPLS)
def test_threads_freeing_at_once_lose_nothing(impl: Any) -> None:
    before = _allocated()
    start = threading.Barrier(6, timeout=60)
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            start.wait()
            for i in range(150):
                owners = [_owned(impl, 16 + 16 * ((i + j + k) % 7)) for j in range(4)]
                del owners
                a = acc.empty(64 + k, device=DEV)
                del a
        except BaseException as exc:   # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    with _unraisable() as seen:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert errors == [] and seen == []
    assert _allocated() == before


def test_close_frees_at_once_only_what_nothing_else_shares() -> None:
    # Array.close's refcount rule (_SOLE_REFS) on the loaded build's owner
    before = _allocated()
    a = acc.zeros(64, device=DEV)
    a.close()
    assert _allocated() == before
    b = acc.zeros(64, device=DEV)
    view = np.asarray(b.numpy())   # holds the owner
    b.close()
    assert _allocated() > before and view.sum() == 0
    del view
    gc.collect()
    assert _allocated() == before


@pytest.mark.parametrize("impl", ["python", "loaded"])
def test_nothing_is_freed_at_interpreter_exit(impl: str) -> None:
    # as sys.is_finalizing(): at shutdown the allocator may be torn down already; an owner
    # still alive then (a global, a cycle) does not call free
    script = textwrap.dedent(f"""
        import gc, sys
        import accelrt as acc
        from accelrt import _memory_owner
        impl = _memory_owner.{"PyMemory" if impl == "python" else "_Memory"}

        class Loud:
            def free(self, ptr, from_finalizer=False):
                sys.stdout.write(f"free {{ptr}}\\n")
                sys.stdout.flush()

        gc.disable()
        impl(7, 8, Loud())                        # now: freed
        KEEP = impl(8, 8, Loud())                 # a global at exit
        cycle = impl(9, 8, Loud()); cycle.base = cycle; del cycle   # a cycle at exit
        ARRAY = acc.empty(1000, device="cpu:0")   # a real block at exit
        print("end")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["free 7", "end"]
    assert proc.stderr == ""
