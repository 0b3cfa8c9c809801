# The compiled build's memory owner (_memory_owner_c.c): the same type as the pure build's.
from ._memory_owner import _Memory as _Memory

__all__ = ["_Memory"]
