"""PyTorch's two forms of ``torch.cuda.memory._record_memory_history`` over a device module's
``record_memory_history``: the legacy one (a bool first argument) and the current one, typed
for users' mypy as one callable with two overloads.

Example::

    >>> import accelrt as acc
    >>> acc.cpu.memory._record_memory_history(True)     # the legacy form
    >>> acc.cpu.memory._record_memory_history(None)     # the current form: stop recording
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast, overload
from .._errors import _bool_arg
from ._history import binding_int

if TYPE_CHECKING:
    from .._typing import DeviceLike

__all__: list[str] = []


def _record_memory_history_legacy(record: Callable[..., None], enabled: bool,
                                  record_context: bool = True,
                                  trace_alloc_max_entries: int = 1,
                                  trace_alloc_record_context: bool = False,
                                  device: DeviceLike = None, record_context_cpp: bool = False,
                                  clear_history: bool = False, compile_context: bool = False,
                                  global_record_annotations: bool = False,
                                  skip_actions: list[str] | None = None,
                                  record_pinned_host_memory: bool = False,
                                  record_cuda: bool = True) -> None:
    """PyTorch's legacy ``_record_memory_history`` (a bool first argument:
    ``torch.cuda.memory._record_memory_history_legacy`` and its C++ ``_record_memory_history``)
    through ``record``, a device module's ``record_memory_history``: ``enabled`` starts or
    stops recording on every device of the backend (``device`` is not used, as PyTorch does
    not use it); the trace ring keeps ``trace_alloc_max_entries`` entries whatever the
    context (an int64: ``0`` keeps one, a negative one is unbounded, as PyTorch's conversion
    to size_t makes it); ``trace_alloc_record_context`` records stacks on trace entries
    (context ``"alloc"``), else ``record_context`` the stacks of live allocations
    (``"state"``); ``record_context_cpp`` asks for C++ frames too (``stacks="all"``).

    Raises:
        TypeError: a flag is not what a bool binding takes (a str, a list: ``None`` and numbers
            are read by their truth, as PyTorch's binding reads them), or
            ``trace_alloc_max_entries`` is not an integer (an int, a numpy integer) in
            ``[-2**63, 2**63)`` (PyTorch's binding refuses them with a TypeError).
        ValueError: as :func:`record_memory_history` for the torch-only flags.
    """
    flags = [_bool_arg("_record_memory_history", value, name) for name, value in (
        ("record_context", record_context), ("trace_alloc_record_context",
                                             trace_alloc_record_context),
        ("record_context_cpp", record_context_cpp), ("clear_history", clear_history))]
    record_context, trace_alloc_record_context, record_context_cpp, clear_history = flags
    n = binding_int(trace_alloc_max_entries, "trace_alloc_max_entries", -(1 << 63), 1 << 63,
                    "an int64")
    context = "alloc" if trace_alloc_record_context else "state" if record_context else None
    record("all" if enabled else None, context, "all" if record_context_cpp else "python",
           n if n >= 0 else sys.maxsize, None, clear_history, compile_context,
           global_record_annotations, skip_actions, record_pinned_host_memory, record_cuda)


class _TorchRecordMemoryHistory(Protocol):
    """The type of ``torch.cuda.memory._record_memory_history``: PyTorch's legacy form for a
    bool first argument, :func:`record_memory_history`'s otherwise (a user's mypy checks both
    forms' arguments)."""

    @overload
    def __call__(self, enabled: bool, record_context: bool = True,
                 trace_alloc_max_entries: int = 1, trace_alloc_record_context: bool = False,
                 device: DeviceLike = None, record_context_cpp: bool = False,
                 clear_history: bool = False, compile_context: bool = False,
                 global_record_annotations: bool = False, skip_actions: list[str] | None = None,
                 record_pinned_host_memory: bool = False, record_cuda: bool = True) -> None: ...

    @overload
    def __call__(self, enabled: str | None = "all", context: str | None = "all",
                 stacks: str = "all", max_entries: int = sys.maxsize,
                 device: DeviceLike = None, clear_history: bool = False,
                 compile_context: bool = False, global_record_annotations: bool = False,
                 skip_actions: list[str] | None = None, record_pinned_host_memory: bool = False,
                 record_cuda: bool = True) -> None: ...


def _torch_record_memory_history(record: Callable[..., None]) -> _TorchRecordMemoryHistory:
    """``torch.cuda.memory._record_memory_history`` over ``record`` (a device module's
    ``record_memory_history``, whose signature it shows, as PyTorch shows its new form's): a
    bool first argument is PyTorch's legacy form (:func:`_record_memory_history_legacy`),
    anything else the new one.

    Example::

        >>> import accelrt as acc
        >>> from accelrt.memory._history_forms import _torch_record_memory_history
        >>> rec = _torch_record_memory_history(acc.cpu.record_memory_history)
        >>> rec(True)                      # legacy: stacks of live blocks, a ring of 1 entry
        >>> rec(False)
    """
    def _record_memory_history(enabled: Any = "all", *args: Any, **kwargs: Any) -> None:
        """``torch.cuda.memory._record_memory_history``: with a bool first argument PyTorch's
        legacy form ``(enabled, record_context=True, trace_alloc_max_entries=1,
        trace_alloc_record_context=False, device=None, record_context_cpp=False,
        clear_history=False, ...)``, otherwise ``record_memory_history``'s arguments."""
        if isinstance(enabled, bool):
            _record_memory_history_legacy(record, enabled, *args, **kwargs)
        else:
            record(enabled, *args, **kwargs)

    # the new form's signature, as PyTorch's (inspect.signature follows __wrapped__)
    return cast(_TorchRecordMemoryHistory,
                functools.update_wrapper(_record_memory_history, record, assigned=()))
