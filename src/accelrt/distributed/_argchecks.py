"""The argument checks the collectives share: dtypes, sizes and the lengths of list
arguments, with torch 2.15's words where its tests match them (gloo's ``RuntimeError`` texts,
``_ensure_all_tensors_same_dtype``'s ``ValueError``); each raises on the calling rank before
anything is enqueued.

Example::

    >>> import numpy as np
    >>> from accelrt.distributed._argchecks import _check_same
    >>> _check_same("all_gather", np.zeros(1, "float16"), np.zeros(1, "float32"))
    Traceback (most recent call last):
    ...
    accelrt._errors.AcceleratorValueError: all_gather: Invalid usage of tensors with different dtypes Found float16 and  float32 (the arrays must have the same dtype)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._array import Array
from .._errors import AcceleratorValueError, type_shown
from .._errors import _bool_arg as _bool_arg   # (shared with accelrt.memory)
from ._errors import _DtypeMismatchError, _NotAListError
from . import _group as _group_mod
from ._group import ProcessGroup

__all__ = ["_bool_arg", "_check_length", "_check_list", "_check_same", "_check_self_pair",
           "_check_single", "_size_check", "_split_sizes"]


def _check_single(what: str, param: object, name: str) -> None:
    """Raise ``TypeError`` naming the parameter ``name`` unless ``param`` is one array (an
    accelrt ``Array`` or a numpy ``ndarray``), as torch 2.15's ``_check_single_tensor`` refuses a
    non-tensor before the collective reads its dtype or size (in accelrt's words for a
    collective's array, as ``all_reduce`` says them).

    Example::

        >>> from accelrt.distributed._argchecks import _check_single
        >>> _check_single("all_gather_into_tensor", None, "output_tensor")
        Traceback (most recent call last):
        ...
        TypeError: all_gather_into_tensor: expected an accelrt.Array or numpy.ndarray, got NoneType (parameter `output_tensor`)
    """
    if not isinstance(param, (Array, np.ndarray)):
        raise TypeError(f"{what}: expected an accelrt.Array or numpy.ndarray, got "
                        f"{type_shown(param)} (parameter `{name}`)")


def _check_same(what: str, a: Any, b: Any, nccl: str | None = None) -> None:
    """Raise torch's ``ValueError`` (its words, with the dtypes in the order torch's
    ``_ensure_all_tensors_same_dtype`` meets them: pass ``a`` first) unless the dtypes match.
    ``nccl``: the words of torch's NCCL check of the operation, which raises ``TypeError``
    there; the error is then a ``TypeError`` too, its message starting with those words."""
    if a.dtype != b.dtype:
        words = (f"Invalid usage of tensors with different dtypes Found {a.dtype} and  "
                 f"{b.dtype} (the arrays must have the same dtype)")
        if nccl is not None:
            raise _DtypeMismatchError(f"{what}: {nccl.rstrip('.')}. {words}")
        raise AcceleratorValueError(f"{what}: {words}")


def _size_check(what: str, out: Any, expect: int, got: int, fix: str) -> None:
    if expect != got:
        raise AcceleratorValueError(f"{what}: {fix} (expected {expect} elements, got {got})")


def _check_list(what: str, g: ProcessGroup, arrays: Any, name: str, one: Any, where: str,
                *, inputs: bool, list_first: bool = False) -> list[Any]:
    """``arrays`` (the argument ``name``) as a list, checked to hold one array per rank of
    ``g``, each of ``one``'s dtype and size; ``inputs``: they are the collective's inputs and
    ``one`` its output (else its outputs and ``one`` its input). ``where`` ends the list
    message; ``list_first``: torch names the list's dtype first in its dtype error."""
    _check_length(what, arrays, name, g.size(), where)
    if inputs:
        g.check_args(what, arrays, [one], alias="staged")
    else:
        g.check_args(what, [one], arrays, alias="staged")
    fix = f"every array of {name} must have the {'output' if inputs else 'input'}'s size"
    for k, t in enumerate(arrays):
        _check_same(what, *((t, one) if list_first else (one, t)))
        _size_check(what, t, one.size, t.size, f"invalid tensor size at index {k}: {fix}")
    return list(arrays)


def _check_self_pair(what: str, g: ProcessGroup, send: list[int], recv: list[int],
                     fix: str) -> None:
    """Raise unless this rank receives from itself as many elements as it sends itself: the
    one pair of an all-to-all's counts that a rank knows both sides of (MPI waited for ever
    on a short receive from itself; a peer's counts can only be compared by the debug
    fingerprint, ``ACCELRT_DISTRIBUTED_DEBUG=DETAIL``, which compares this pair too)."""
    if _group_mod.DETAIL:
        # the debug fingerprint compares every pair, this one too, on every rank: a check
        # here would raise on this rank only, and leave the others waiting in the fingerprint
        return
    r = g.rank()
    _size_check(what, None, send[r], recv[r], f"this rank (group rank {r}) sends and "
                f"receives with itself: {fix}")


#: torch 2.15's words for a missing list (``None``) or a list of another length, by
#: (collective, argument): gloo's ``RuntimeError`` texts and the ``ValueError`` of
#: ``scatter``/``gather`` without their list on the root; accelrt's message follows them
_TORCH_LIST_WORDS: dict[tuple[str, str], Callable[[int | None, int], str]] = {
    ("scatter", "scatter_list"): lambda got, n: (
        "Argument ``scatter_list`` must be specified on source rank." if got is None else
        f"Incorrect input list size {got}. Input list size should be {n}, same as size of "
        "the process group."),
    ("gather", "gather_list"): lambda got, n: (
        "Argument ``gather_list`` must be specified on destination rank." if got is None else
        f"Incorrect output list size {got}. Output list size should be {n}, same as size of "
        "the process group."),
    ("all_gather", "tensor_list"): lambda got, n: (
        f"invalid output tensor list at index 0 (expected length {n}, got {got})"),
    ("all_to_all", "output_tensor_list"): lambda got, n: (
        f"output tensor list size {got} does not match world size {n}"),
    ("all_to_all", "input_tensor_list"): lambda got, n: (
        f"input tensor list size {got} does not match world size {n}"),
    ("reduce_scatter", "input_list"): lambda got, n: (
        "invalid input tensor list size, must be world size"),
}


def _check_length(what: str, arrays: Any, name: str, n: int, where: str) -> None:
    """Raise unless ``arrays`` (the argument ``name``) is a list or tuple of ``n`` items: not a
    sequence is also a ``TypeError``, as torch's (``where`` ends the message, which starts
    with torch's words where :data:`_TORCH_LIST_WORDS` has them)."""
    words = _TORCH_LIST_WORDS.get((what, name))

    def said(torch_words: str | None, ours: str) -> str:
        return f"{what}: {torch_words} ({ours})" if torch_words else f"{what}: {ours}"

    if not isinstance(arrays, (list, tuple)):
        raise _NotAListError(said(words(None, n) if words and arrays is None else None,
                                  f"{name} must be a list of {n} arrays {where}, got "
                                  f"{type_shown(arrays)}"))
    if len(arrays) != n:
        raise AcceleratorValueError(said(words(len(arrays), n) if words else None,
                                         f"{name} must be a list of {n} arrays {where}, got "
                                         f"{len(arrays)}"))


def _split_sizes(splits: object, name: str) -> list[int]:
    """``all_to_all_single``'s ``{name}_split_sizes`` as a list of ints: a sequence (a numpy
    array too) of ints, numpy ints or one-element arrays, as torch's binding takes (it
    refuses floats, strings and anything that is no sequence with a ``TypeError``)."""
    words = (f"all_to_all_single: {name}_split_sizes must be a sequence of ints (one per "
             "rank) or None")
    if isinstance(splits, (str, bytes)) or not isinstance(splits, (Sequence, np.ndarray)):
        raise TypeError(f"{words}, got {type_shown(splits)}")
    out = []
    for s in splits:
        # (torch's binding reads a one-element tensor with int(), as here a one-element array)
        if not (isinstance(s, (int, np.integer)) or isinstance(s, Array) and s.size == 1):
            raise TypeError(f"{words}, got {type_shown(s)} {s!r:.40} in {name}_split_sizes")
        out.append(int(s))
    return out
