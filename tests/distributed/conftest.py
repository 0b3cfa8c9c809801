"""Fixtures shared by the one-process tests of ``accelrt.distributed``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def one_rank_world() -> Iterator[None]:
    """A default group of one rank on the MPI engine (MPI's singleton world: no launcher),
    destroyed afterwards if the test left it. Tests using it skip without mpi4py."""
    import accelrt.distributed as dist
    dist.init_process_group("cpu:mpi", timeout=30)
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
