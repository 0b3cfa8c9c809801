# The compiled build's FastLock (_lock_c.c): the same type as the pure build's.
from ._lock import FastLock as FastLock

__all__ = ["FastLock"]
