"""The argument checks of graph captures (``torch.accelerator.Graph``/``torch.cuda.graph``'s
arguments): pools, capture modes and the PyTorch-only options accelrt takes at their defaults.

Example::

    >>> from accelrt._graph_args import _check_mode
    >>> _check_mode("thread_local")
    'thread_local'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._device import _plain_int
from ._errors import AcceleratorValueError, shown, type_shown

#: ``capture_error_mode`` values (``torch.accelerator.Graph``'s; ``"default"`` is the
#: backend's own: ``graph_capture_begin``; the others go to ``graph_capture_begin_mode`` where
#: the backend declares ``graph_capture_modes``, as cpu does; see docs/graphs.md)
_CAPTURE_MODES = ("default", "global", "thread_local", "relaxed")


def _pool_id(pool: Any) -> tuple[int, int] | None:
    """Normalise a ``pool`` argument: None, a pool id tuple, or a ``MemPool``; ``(0, 0)`` is
    None (no pool to share), as in PyTorch."""
    if pool is None:
        return None
    from .memory import MemPool
    # a MemPool gives its id; any other object is the id itself (torch 2.15's _get_pool_id:
    # an object with an ``id`` that is not a MemPool reaches the MempoolId_t binding, which
    # refuses it with TypeError)
    pid = pool.id if isinstance(pool, MemPool) else pool
    if (isinstance(pid, tuple) and len(pid) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in pid)):
        # an int subclass is read by its value (its __bool__, __lt__, __eq__ are not asked),
        # as PyTorch's MempoolId_t binding reads it; the id kept is a tuple of plain ints
        pid = (_plain_int(pid[0]), _plain_int(pid[1]))
        if all(0 <= v < 1 << 64 for v in pid):
            if pid[0] and pid[1]:
                # PyTorch's CUDAGraph::capture_begin asserts that at most one half is set: a
                # capture's own pool is (n, 0), a user's (graph_pool_handle, MemPool) (0, n)
                raise RuntimeError(f"pool id {shown(pid):.80} is no pool id: one half of it "
                                   "must be 0 ((n, 0) from a capture, (0, n) from "
                                   "graph_pool_handle() or a MemPool); pass Graph.pool(), "
                                   "graph_pool_handle() or a MemPool")
            # (0, 0) asks for no pool to share, as in PyTorch: the capture makes its own
            return pid if pid[0] or pid[1] else None
        # PyTorch's MempoolId_t is a pair of unsigned 64-bit ints (CaptureId_t): its binding
        # refuses anything else with TypeError ("incompatible function arguments")
        raise TypeError(f"pool id {shown(pid):.80} is out of range: a pool id is a pair of "
                        "ints in [0, 2**64) (PyTorch's MempoolId_t); pass Graph.pool(), "
                        "graph_pool_handle() or a MemPool")
    raise TypeError(f"pool must be None, a pool id from Graph.pool() / graph_pool_handle(), "
                    f"or a MemPool, got {shown(pool)}")


def _check_mode(capture_error_mode: object) -> str:
    """``capture_error_mode`` checked: an unknown one raises
    :class:`~accelrt.AcceleratorValueError`, a ``ValueError`` and PyTorch's ``RuntimeError``
    ("Unknown capture error mode")."""
    # a str subclass by its value, as PyTorch's binding reads it (its own __eq__ or __str__,
    # which may raise, are not called)
    mode = (str.__str__(capture_error_mode) if isinstance(capture_error_mode, str)
            else None)
    if mode not in _CAPTURE_MODES:
        raise AcceleratorValueError(
            f"Unknown capture error mode: capture_error_mode must be one of {_CAPTURE_MODES}, "
            f"got {shown(capture_error_mode if mode is None else mode)}")
    assert mode is not None
    return mode


#: ``graph(annotation_config=)``'s keys: default and allowed values (None: a list of paths),
#: as torch 2.15 validates them even while annotations are off.
_ANNOTATION_KEYS: dict[str, tuple[object, tuple[object, ...] | None]] = {
    "backend": ("auto", ("auto", "cupti", "edge_walk")),
    "key_by": ("exec", ("exec", "source", "auto")),
    "record_py_stacks": (False, (False, True)),
    "py_stack_filter_paths": (None, None),
}


def _check_annotation_config(config: object) -> None:
    """torch 2.15's checks of ``graph(annotation_config=)``: unknown keys or values raise
    ``ValueError``; a valid dict is accepted and unused (it configures annotations, which
    need ``enable_annotations=True``)."""
    if config is None:
        return
    if not isinstance(config, Mapping):
        raise TypeError(f"annotation_config must be a dict or None, got {type_shown(config)}")
    unknown = [k for k in config if k not in _ANNOTATION_KEYS]
    if unknown:
        try:
            keys = sorted(unknown)   # (torch's: the keys' reprs in a list)
        except TypeError:            # keys that do not order (torch's sorted raises this)
            keys = sorted(unknown, key=repr)
        raise ValueError(f"unrecognized annotation_config key(s) {shown(keys)}; "
                         f"supported: {sorted(_ANNOTATION_KEYS)}")
    resolved = {k: d for k, (d, _) in _ANNOTATION_KEYS.items()}
    for key, value in config.items():
        allowed = _ANNOTATION_KEYS[key][1]
        if allowed is None:
            if value is not None and (not isinstance(value, (list, tuple)) or not all(
                    isinstance(path, str) and path for path in value)):
                raise ValueError(f"annotation_config[{key!r}] must be None or a list/tuple "
                                 "of nonempty path strings")
        elif value not in allowed:
            raise ValueError(f"annotation_config[{key!r}] must be one of {list(allowed)}, "
                             f"got {shown(value)}")
        resolved[key] = value
    if resolved["record_py_stacks"] and resolved["backend"] == "edge_walk":
        raise ValueError("record_py_stacks=True requires the CUPTI annotation backend")


def _torch_only(name: str, value: object) -> None:
    """Refuse a PyTorch option that needs tensors (accepted as False, as PyTorch's default)."""
    if value is not False:
        raise ValueError(f"{name}={shown(value)} is not supported: it tracks PyTorch tensors, "
                         f"which accelrt does not have; pass {name}=False (docs/differences.md)")
