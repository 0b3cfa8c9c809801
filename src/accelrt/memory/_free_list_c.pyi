# The compiled build's FreeList (_free_list_c.c): the same type as the pure build's.
from ._free_list import FreeList as FreeList

__all__ = ["FreeList"]
