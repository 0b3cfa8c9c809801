"""Graph pool ids as PyTorch's ``CUDAGraph::capture_begin`` reads them (session 37): ``(0, 0)``
asks for no pool to share (the capture makes its own, as with ``pool=None``), and an id with
both halves set is refused (torch's internal assert: a capture's own pool is ``(n, 0)``, a
user's, from ``graph_pool_handle()`` or a ``MemPool``, ``(0, n)``)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

import accelrt as acc


@pytest.fixture
def cpu() -> Iterator[None]:
    acc.set_current_accelerator("cpu")
    yield
    acc.synchronize("cpu")


def _capture(g: acc.Graph, **kw: object) -> None:
    x = acc.zeros(4, device="cpu:0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with acc.cpu.graph(g, **kw):   # type: ignore[arg-type]
            x.fill_(1.0)


@pytest.mark.parametrize("how", ["graph", "capture_begin", "constructor"])
def test_zero_pool_id_is_no_pool(cpu: None, how: str) -> None:
    """``pool=(0, 0)`` captures into a new pool of the capture's own, ``(n, 0)``."""
    if how == "constructor":
        g = acc.Graph(pool=(0, 0))
        s = acc.Stream("cpu:0")
        with s, g:
            acc.zeros(4, device="cpu:0").fill_(1.0)
    elif how == "capture_begin":
        g = acc.cpu.Graph()
        s = acc.Stream("cpu:0")
        with s:
            g.capture_begin(pool=(0, 0))
            acc.zeros(4, device="cpu:0").fill_(1.0)
            g.capture_end()
    else:
        g = acc.cpu.Graph()
        _capture(g, pool=(0, 0))
    pid = g.pool()
    assert pid[0] > 0 and pid[1] == 0
    g.replay()


@pytest.mark.parametrize("pool", [(3, 4), (1, 1)])
def test_pool_id_with_both_halves_set_is_refused(cpu: None, pool: tuple[int, int]) -> None:
    with pytest.raises(RuntimeError, match="one half of it must be 0"):
        _capture(acc.cpu.Graph(), pool=pool)
    g = acc.cpu.Graph()
    with pytest.raises(RuntimeError, match="one half of it must be 0"):
        with acc.Stream("cpu:0"):
            g.capture_begin(pool=pool)
    assert not acc.cpu.is_current_stream_capturing()


def test_shared_ids_of_either_half_still_share(cpu: None) -> None:
    """A capture's own id ``(n, 0)`` and a handle ``(0, n)`` are shared as before."""
    first = acc.cpu.Graph()
    _capture(first)
    second = acc.cpu.Graph()
    _capture(second, pool=first.pool())
    assert second.pool() == first.pool()
    handle = acc.cpu.graph_pool_handle()
    third = acc.cpu.Graph()
    _capture(third, pool=handle)
    assert third.pool() == handle
