# The compiled build's BlockMap (_block_map_c.c): the same type as the pure build's.
from ._block_map import BlockMap as BlockMap

__all__ = ["BlockMap"]
