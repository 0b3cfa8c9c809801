"""Review of session 38's merges (rev3): the expandable-segments fallback warning and the
device modules' ``_initialized`` setter.

1. ``set_allocator_settings("expandable_segments:True")`` emitted the fallback warning while
   it still held the settings lock (``_config._set_lock``, not reentrant): a ``showwarning``
   hook (logging's ``captureWarnings`` handlers, a test harness) that changes the settings in
   answer waited for that lock forever. PyTorch's warning comes from the allocator's getter,
   outside any settings call. The warnings now come after the lock is released.
2. ``module._initialized = value`` evaluated ``bool(value)`` and called ``init()``: a value
   without a truth value (its ``__bool__`` raises, a numpy array of several elements) raised,
   and so did ``True`` on a backend that cannot start (no driver); ``torch.cuda._initialized``
   is a plain module attribute, whose assignment never fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers.registry import module_backends

from accelrt._errors import BackendUnavailableError
from accelrt.backends import device_module
from accelrt.backends.cpu import CpuBackend

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cannot_start() -> CpuBackend:
    raise BackendUnavailableError("s38rev3down has no device here (a test backend)")


_backends = module_backends({
    "s38rev3": lambda: CpuBackend(num_devices=1, name="s38rev3"),
    "s38rev3down": _cannot_start,
})


# ------------------------------------------------------- 1. the fallback warning and its lock

_HOOK_SCRIPT = textwrap.dedent("""
    import faulthandler, warnings
    faulthandler.dump_traceback_later(30, exit=True)     # a deadlock ends the run, with stacks
    import accelrt as acc
    from accelrt import backends
    from accelrt.testing import SimulatedBackend
    backends.register("novm", lambda: SimulatedBackend(name="novm", vm=False, device_count=1))
    x = acc.empty((10,), device="novm:0")                # an allocator without virtual memory
    seen = []

    def hook(message, category, filename, lineno, file=None, line=None):
        seen.append(str(message))
        acc.memory.set_allocator_settings("max_split_size_mb:64")   # the settings, again
        acc.empty((10,), device="novm:0")

    warnings.showwarning = hook
    warnings.simplefilter("always")
    acc.memory.set_allocator_settings("expandable_segments:True")
    assert len(seen) == 1 and seen[0].startswith("expandable_segments not supported"), seen
    from accelrt.memory._config import get_config
    cfg = get_config()      # the hook's change came on top of the one that warned
    assert cfg.expandable_segments and cfg.max_split_size == 64 << 20, cfg
    faulthandler.cancel_dump_traceback_later()
    print("done")
""")


def test_a_showwarning_hook_may_change_the_settings_the_warning_came_from() -> None:
    # before: the warning ran under set_allocator_settings' lock, and the hook's own
    # set_allocator_settings waited for it forever (faulthandler ended the run after 30 s)
    r = subprocess.run([sys.executable, "-c", _HOOK_SCRIPT], capture_output=True, text=True,
                       timeout=90, cwd=ROOT, env={**os.environ, "ACCELRT_ALLOC_CONF": ""})
    assert r.returncode == 0 and r.stdout.strip().endswith("done"), r.stderr[-3000:]


# --------------------------------------------------------------- 2. _initialized's setter

class _NoTruth:
    def __bool__(self) -> bool:
        raise RuntimeError("no truth value")


@pytest.mark.parametrize("value", [_NoTruth(), np.array([1, 2])], ids=["bool-raises", "array"])
def test_initialized_takes_a_value_without_a_truth_value(value: object) -> None:
    # torch.cuda._initialized = value stores it; accelrt raised the value's own error
    m = device_module("s38rev3")
    before = m._initialized
    m._initialized = value
    assert m._initialized is before


def test_initialized_true_on_a_backend_that_cannot_start_does_not_raise() -> None:
    # torch.cuda._initialized = True works without a GPU; accelrt raised the backend's
    # BackendUnavailableError from the assignment. The flag stays False; using the backend
    # still raises its error.
    m = device_module("s38rev3down")
    m._initialized = True
    assert m._initialized is False
    with pytest.raises(BackendUnavailableError, match="no device here"):
        m.init()
