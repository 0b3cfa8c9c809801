"""tests/conftest.py puts the allocator options back after each test: the options themselves,
not the last settings string (``set_allocator_settings("")`` after
``"expandable_segments:True"`` leaves expandable segments on, as in PyTorch: keys left out
keep their values). The two tests run in this order (pytest keeps a file's order); the
second failed while the fixture restored the string."""

from __future__ import annotations

import accelrt.memory as m
from accelrt.memory import _config


def test_first_leaves_expandable_segments_on_behind_an_empty_string() -> None:
    m.set_allocator_settings("expandable_segments:True")
    m.set_allocator_settings("")
    assert _config.get_config().expandable_segments is True
    assert m.get_allocator_settings() == ""


def test_second_starts_from_the_options_before_the_first() -> None:
    assert _config.get_config().expandable_segments is False
