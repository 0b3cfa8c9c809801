"""Review s37-docs: claims of the docs and docstrings checked by running them.

- ``acc.device`` takes torch.device's keywords, ``type`` and ``index``
  (``torch.device(type="cpu", index=1)``, torch 2.15), so its repr
  ``device(type='cpu', index=0)`` makes the same device again, as torch's does.
- What a user's ``mypy --strict`` sees: ``pin_memory(a)`` keeps ``a``'s dtype;
  ``Generator.get_state``/``set_state``/``philox_state``, the device modules'
  ``set_rng_state``/``set_rng_state_all``/``caching_allocator_alloc`` and ``Array.fill_`` have
  the types their run-time checks enforce (they were ``Any``, or a bare ``np.ndarray``, so a
  call that fails at run time, such as ``set_state(b"...")``, type-checked);
  ``acc.interop.torch.from_torch`` returns an ``Array`` and ``acc.interop``'s lazy submodules
  are typed (a misspelt one was ``Any``).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from helpers.typecheck import run_mypy

import accelrt as acc


def test_device_takes_torch_keywords() -> None:
    # torch 2.15: torch.device(type="cpu", index=1) == torch.device("cpu:1"), and
    # eval(repr(d)) with torch.device as ``device`` gives d back
    assert acc.device(type="cpu", index=1) == acc.device("cpu:1")
    assert acc.device(index=0, type="cpu") == acc.device("cpu", 0)
    assert acc.device(type="cpu").index is None
    for d in (acc.device("cpu:0"), acc.device("cpu")):
        assert eval(repr(d), {"device": acc.device}) == d
    # the checks are unchanged: an index given twice, a wrong type
    with pytest.raises(ValueError, match="must not include an index"):
        acc.device(type="cpu:1", index=1)
    with pytest.raises(TypeError, match="device index must be an int or None"):
        acc.device(type="cpu", index=1.0)   # type: ignore[arg-type]
    assert acc.device(type="cpu", index=np.int64(1)) == acc.device("cpu:1")  # type: ignore[arg-type]


def test_pin_memory_keeps_the_dtype_at_run_time() -> None:
    a = np.arange(4, dtype=np.int16)
    p = acc.pin_memory(a, device="cpu")
    assert p.dtype == np.int16 and acc.is_pinned(p)


_USER_OK = """\
from __future__ import annotations

import numpy as np
import numpy.typing as npt

import accelrt as acc

a: npt.NDArray[np.float32] = np.zeros(4, dtype=np.float32)
p: npt.NDArray[np.float32] = acc.pin_memory(a, device="cpu")
g = acc.random.Generator("cpu:0")
state: npt.NDArray[np.uint8] = g.get_state()
g.set_state(state)
g.set_state(acc.asarray(state, device="cpu:0"))
seed, offset, intra = g.philox_state(8)
words: npt.NDArray[np.int64] = seed
acc.cpu.set_rng_state(acc.cpu.get_rng_state())
acc.cpu.set_rng_state_all(acc.cpu.get_rng_state_all())
ptr = acc.cpu.caching_allocator_alloc(64, 0, acc.cpu.current_stream())
acc.cpu.caching_allocator_delete(ptr)
x = acc.zeros(3, device="cpu:0")
x.fill_(1.5)
x.fill_(np.float32(2))
x.fill_(acc.zeros((), device="cpu:0"))


def shared(tensor: object) -> acc.Array:
    return acc.interop.torch.from_torch(tensor)   # an Array, not Any (warn_return_any)
"""

#: each line is refused at run time; mypy must flag it
_USER_BAD = [
    'acc.random.Generator("cpu:0").set_state(b"0123456789abcdef")',
    'acc.cpu.set_rng_state([0] * 16)',
    'acc.cpu.set_rng_state_all([b"0123456789abcdef"])',
    'acc.cpu.caching_allocator_alloc(64, 0, "stream")',
    'acc.zeros(3, device="cpu:0").fill_("1")',
    'acc.pin_memory([1.0, 2.0])',
    'acc.interop.tourch.from_torch(0)',
]


def test_user_mypy_sees_the_checked_types(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    proc = run_mypy(tmp_path, _USER_OK)
    out = proc.stdout + proc.stderr
    errors = [line for line in out.splitlines() if line.startswith("user_script.py:")]
    assert not errors, "\n".join(errors)


def test_user_mypy_rejects_what_runs_refuse(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    source = "import accelrt as acc\n\n" + "\n".join(_USER_BAD) + "\n"
    proc = run_mypy(tmp_path, source)
    out = proc.stdout + proc.stderr
    flagged = {int(n) for n in re.findall(r"^user_script\.py:(\d+): error:", out, re.MULTILINE)}
    missing = [c for i, c in enumerate(_USER_BAD, start=3) if i not in flagged]
    assert not missing, f"mypy accepted: {missing}\n{out}"
