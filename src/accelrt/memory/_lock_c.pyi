# The compiled build's FastLock (_lock_c.c): the same type as the pure build's, and the
# function that installs its contention hook.
from collections.abc import Callable
from typing import Any

from ._lock import FastLock as FastLock

__all__ = ["FastLock", "set_contention_hook"]

def set_contention_hook(hook: Callable[[Any], bool] | None, /) -> None: ...
