"""The suite's test ids are the same in every process that collects it: pytest-xdist (the
README's ``-n auto``) starts workers that each collect the suite and refuses to run when their
ids differ, as they do where an id holds a memory address (``ids=repr`` of an ``object()``)."""

from __future__ import annotations

import pytest
from helpers.ids import UNSTABLE, shown


def test_no_collected_test_id_holds_a_memory_address(request: pytest.FixtureRequest) -> None:
    unstable = request.config.stash[UNSTABLE]
    assert not unstable, ("these test ids hold a memory address, which differs between "
                          "pytest-xdist's workers: parametrise with ids=helpers.ids.shown\n  "
                          + "\n  ".join(unstable))


def test_shown_drops_the_address_and_keeps_the_rest() -> None:
    assert shown(object()) == "<object object>"
    generator = (i for i in ())
    assert shown(generator) == ("<generator object test_shown_drops_the_address_and_keeps_"
                                "the_rest.<locals>.<genexpr>>")
    assert shown([1, "a", b"x"]) == "[1, 'a', b'x']"
    assert shown(0x7F0000001000) == str(0x7F0000001000)
