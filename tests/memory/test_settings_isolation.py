"""tests/conftest.py puts the allocator options back after each test: the options themselves,
not the last settings string (``set_allocator_settings("")`` after
``"expandable_segments_reserve:0.5"`` keeps that reserve, as in PyTorch, which never resets
it: docs/memory.md). The two tests run in this order (pytest keeps a file's order); the
second failed while the fixture restored the string."""

from __future__ import annotations

import accelrt.memory as m
from accelrt.memory import _config


def test_first_leaves_a_reserve_behind_an_empty_string() -> None:
    assert _config.get_config().expandable_segments_reserve is None
    m.set_allocator_settings("expandable_segments_reserve:0.5")
    m.set_allocator_settings("")
    assert _config.get_config().expandable_segments_reserve is not None
    assert m.get_allocator_settings() == ""


def test_second_starts_from_the_options_before_the_first() -> None:
    assert _config.get_config().expandable_segments_reserve is None
