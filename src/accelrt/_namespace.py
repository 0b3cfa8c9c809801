"""What ``dir()`` lists for accelrt's packages: one ``__dir__`` for ``accelrt`` and
``accelrt.memory``.

Example::

    >>> import accelrt as acc
    >>> "memory_allocated" in dir(acc.memory) and "importlib" not in dir(acc)
    True
"""

from __future__ import annotations

import types
from typing import Any


def public_dir(namespace: dict[str, Any], public: list[str], package: str) -> list[str]:
    """The public API ``public`` (the package's ``__all__``), its dunders and its loaded public
    submodules, sorted; not the modules and names the package's own code imports.

    Example::

        >>> from accelrt._namespace import public_dir
        >>> public_dir({"__name__": "p", "os": __import__("os"), "f": 1}, ["f"], "p")
        ['__name__', 'f']
    """
    subs = {n for n, v in namespace.items() if isinstance(v, types.ModuleType)
            and not n.startswith("_") and v.__name__.startswith(package + ".")}
    dunders = {n for n in namespace if n.startswith("__") and n.endswith("__")}
    return sorted(set(public) | dunders | subs)
