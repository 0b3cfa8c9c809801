"""Session-38 review of the day's merges (ReduceOp no longer an int, the device(type, index)
form in _device_form.py, ...): what they broke or got wrong. Each test failed before its fix.
The expected behaviour is torch 2.15.0's, observed on its CPU build with the same inputs, and
is written here as literals. (The checks that need two ranks are in
tests/distributed/test_review_s38_rev1_dist.py.)
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
import pytest

import accelrt as acc
from accelrt._errors import BackendUnavailableError

# ---------------------------------------------------------------- 2. device(type, index)


def test_device_two_argument_form_checks_the_index_kind_first() -> None:
    # torch 2.15: device("cpu:0", True), device("cpu:0", 1.5) and device(type="cpu:0",
    # index=True) raise TypeError "device(): argument 'index' (position 2) must be int, not
    # bool" (the parser checks the argument before the body reads the type string); accelrt
    # raised the RuntimeError/ValueError "type (string) must not include an index".
    for call in (lambda: acc.device("cpu:0", True), lambda: acc.device("cpu:0", 1.5),
                 lambda: acc.device(type="cpu:0", index=True),
                 lambda: acc.device("cpu:0", np.bool_(True)), lambda: acc.device("cpu", "0")):
        with pytest.raises(TypeError, match="device index must be an int or None"):
            call()


def test_device_two_argument_form_checks_the_type_before_its_index() -> None:
    # torch 2.15: device("foo:0", 0) raises RuntimeError "Expected one of cpu, cuda, ...
    # device type at start of device string: foo" as device("foo:0") does: the type is read
    # first. accelrt said "type (string) must not include an index" about an unknown type.
    for call in (lambda: acc.device("nosuchdev:0", 0), lambda: acc.device(type="nosuchdev:0")):
        with pytest.raises(BackendUnavailableError, match="Unknown backend 'nosuchdev'"):
            call()
    assert issubclass(BackendUnavailableError, RuntimeError)


def _python_calls(fn: Callable[[], object]) -> list[str]:
    """The Python functions one ``fn()`` runs (``fn`` itself left out)."""
    names: list[str] = []

    def prof(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "call":
            names.append(frame.f_code.co_name)

    fn()    # warm: the parse cache holds the string
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return names[1:]    # (names[0] is fn)


@pytest.mark.parametrize("call", [
    lambda: acc.device("cpu:0"), lambda: acc.device("cpu", 0), lambda: acc.device("cpu", None),
    lambda: acc.device(type="cpu", index=0), lambda: acc.device(type="cpu"),
    lambda: acc.device(acc.device("cpu", 1)),
], ids=["str", "type-index", "type-None", "keywords", "type-keyword", "device"])
def test_device_common_forms_run_no_extra_python_calls(call: Callable[[], object]) -> None:
    # The (type, index) form's move to _device_form.py made device("cpu", 0) 3.4x slower
    # (20 -> 68 empty calls: *args/**kwargs, _type_and_index, _parse twice, _init),
    # device("cpu:0") and device(d) 20% (bench: thread time in empty calls, as
    # bench/bench_runtime_calls.py, against 1b3aee9). The common forms now run
    # device.__init__ and at most _parse (a cache hit) in Python, as before the move.
    names = _python_calls(call)
    extra = [n for n in names if n not in ("__init__", "_parse")]
    assert not extra and names.count("__init__") <= 2, names
