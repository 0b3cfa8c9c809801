"""backends/_ranges.Ranges, the backends' table of live allocations, against a list model."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelrt.backends._ranges import Ranges

# operations: ("add", slot, size) places a range in slot ``slot`` of 64-byte slots (if free),
# ("pop", slot), ("ask", ptr, nbytes)
_ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 15), st.integers(1, 64)),
    st.tuples(st.just("pop"), st.integers(0, 15)),
    st.tuples(st.just("ask"), st.integers(0, 16 * 64 + 8), st.integers(0, 200))), max_size=60)


@settings(max_examples=150, deadline=None)
@given(_ops)
def test_ranges_answer_as_a_list_of_ranges(ops: list[tuple[object, ...]]) -> None:
    r: Ranges[int] = Ranges()
    model: dict[int, tuple[int, int]] = {}     # base -> (size, obj)
    for n, op in enumerate(ops):
        if op[0] == "add":
            base, size = int(op[1]) * 64, int(op[2])   # type: ignore[call-overload]
            if base not in model:
                r.add(base, size, n)
                model[base] = (size, n)
        elif op[0] == "pop":
            base = int(op[1]) * 64   # type: ignore[call-overload]
            assert r.pop(base) == model.pop(base, None)
        else:
            ptr, nbytes = int(op[1]), int(op[2])   # type: ignore[call-overload]
            hit = next(((b, s, o) for b, (s, o) in model.items() if b <= ptr < b + s), None)
            assert r.find(ptr) == (None if hit is None else hit[:2])
            inside = hit is not None and ptr + nbytes <= hit[0] + hit[1]
            assert r.contains(ptr, nbytes) == inside
            end = ptr + max(nbytes, 1)
            assert r.overlaps(ptr, nbytes) == any(b < end and ptr < b + s
                                                   for b, (s, _) in model.items())
            if inside:
                assert hit is not None
                assert r.locate(ptr, nbytes, "copy", "cpu:0") == (hit[2], ptr - hit[0])
            else:
                with pytest.raises(ValueError, match=r"^copy: \[.*cpu:0"):
                    r.locate(ptr, nbytes, "copy", "cpu:0")
            assert r.size_of(ptr) == (model[ptr][0] if ptr in model else None)
        assert r.spans() == sorted((b, s) for b, (s, _) in model.items())
        assert len(r) == len(model)


def test_take_of_an_unknown_base_names_it_and_changes_nothing() -> None:
    r: Ranges[None] = Ranges()
    r.add(4096, 16, None)
    with pytest.raises(ValueError, match="^free: 0x1001 is not live on cuda:3$"):
        r.take(4097, "free: {ptr:#x} is not live on cuda:{index}", index=3)
    assert r.spans() == [(4096, 16)]
    assert r.take(4096, "unused {ptr}") == (16, None)
    assert len(r) == 0


def test_threads_adding_and_taking_keep_the_table_consistent() -> None:
    r: Ranges[int] = Ranges()
    start = threading.Barrier(4)

    def work(t: int) -> None:
        start.wait()
        for i in range(300):
            base = (t * 1000 + i) * 32
            r.add(base, 32, t)
            assert r.find(base + 5) == (base, 32)
            if i % 2:
                assert r.take(base, "lost {ptr}") == (32, t)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    spans = r.spans()
    assert len(spans) == len(r) == 4 * 150
    assert spans == sorted(spans)
