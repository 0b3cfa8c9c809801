"""``torch.accelerator.graphs``: :class:`Graph`, capture and replay of the current
accelerator's stream work (the class is also ``accelrt.Graph``).

Example::

    >>> import accelrt as acc
    >>> import accelrt.graphs
    >>> accelrt.graphs.Graph is acc.Graph
    True
"""

from __future__ import annotations

from ._graph import Graph, generate_graph_pool_handle

__all__ = ["Graph", "generate_graph_pool_handle"]
