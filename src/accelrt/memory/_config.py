"""Caching-allocator options: PyTorch's ``PYTORCH_CUDA_ALLOC_CONF`` syntax for accelrt.

The process-wide options come from the ``ACCELRT_ALLOC_CONF`` environment variable (read lazily,
the first time an allocator needs them, never at import) and from
:func:`set_allocator_settings`. The syntax is PyTorch's: ``key:value`` pairs separated by ``,``
(a trailing ``,`` is allowed, an empty item is not); list values in ``[k:v,...]``; booleans
spelled exactly ``True``/``False``; numbers in ASCII decimal (sizes and counts whole); ASCII
whitespace is ignored. A key given twice takes its last value (``roundup_power2_divisions``
lists edit one table: a later list changes only the intervals it names).

Keys (see ``docs`` of PyTorch's ``PYTORCH_CUDA_ALLOC_CONF``):

* ``backend`` -- ``native`` (the caching allocator, the default) or ``cudaMallocAsync`` (the
  device's stream-ordered memory pool, on backends that have one; see
  ``accelrt.memory._malloc_async``); it cannot change once an allocator it applies to started;
* ``large_segment_size_mb`` (> 10), ``max_split_size_mb`` and ``max_non_split_rounding_mb``
  (>= ``large_segment_size_mb``), ``roundup_power2_divisions`` (``N`` or ``[K:N,...,>:N]``),
  ``garbage_collection_threshold`` (a float in (0, 1)), ``expandable_segments``,
  ``release_lock_on_cudamalloc`` (or PyTorch's ROCm spelling ``release_lock_on_hipmalloc``,
  which PyTorch accepts on every build), ``per_process_memory_fraction`` (a float in [0, 1]),
  ``throw_on_cudamalloc_oom``, ``graph_capture_record_stream_reuse`` (only ``False``: see
  :data:`REFUSED`);
* ``expandable_segments_reserve`` and ``expandable_segments_reserve_by_class`` (PyTorch 2.15):
  the address range an expandable segment reserves, a fraction of the device's total memory
  (``0.5``) or GiB (``40G``), see :class:`ReserveSpec`; a malformed or non-positive value warns
  and is ignored, as in PyTorch. Unlike the other keys, a later parse that leaves them out keeps
  them (PyTorch never resets them). The classes apply only to streams tagged with a class,
  which PyTorch does in C++ only; accelrt keeps and checks them but has no tagged streams;
* host (pinned) pool keys, used by ``memory._host``: ``pinned_reserve_segment_size_mb``,
  ``pinned_use_background_threads``, ``pinned_free_catch_all``,
  ``pinned_max_round_threshold_mb``, ``pinned_max_cached_size_mb``; and
  ``pinned_use_cuda_host_register`` (only ``False``) and ``pinned_num_register_threads`` (only
  ``1``), which have no effect without host registration (see :data:`REFUSED`);
* accelrt's own policy: ``page_reuse`` (True/False): with ``expandable_segments:True``, the
  low-fragmentation policy: pages of the device's granularity (2 MiB), mapped when a block
  needs them (its whole pages in one mapping), a free mapping split into pieces of at most
  1/128 of the high-water mark when a block of another size reuses part of it, and free
  mappings unmapped before mapping more would raise that mark (see docs/memory.md).

Each parse starts from the current options but resets ``max_split_size_mb``,
``roundup_power2_divisions`` and ``garbage_collection_threshold`` to their defaults (and
``max_non_split_rounding_mb`` to ``large_segment_size_mb``), as PyTorch does.

Example::

    >>> from accelrt.memory._config import parse_config
    >>> cfg = parse_config("max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4]")
    >>> cfg.max_split_size == 128 * 2**20, cfg.roundup_power2_divisions[8], cfg.roundup_power2_divisions[9]
    (True, 1, 4)
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import threading
import warnings
from dataclasses import dataclass, field
from typing import Final

from .._fork import reinit_after_fork
from .._errors import type_shown

__all__ = [
    "ALLOCATOR_BACKENDS",
    "ENV_VAR",
    "EXPANDABLE_FALLBACK",
    "MB",
    "NO_SPLIT_LIMIT",
    "REFUSED",
    "SIZE_MAX",
    "AllocatorConfig",
    "ReserveSpec",
    "check_fraction",
    "get_allocator_settings",
    "get_config",
    "parse_config",
    "reported_size",
    "reserve_bytes",
    "set_allocator_settings",
    "warn_expandable_fallback",
]

#: The values of the ``backend`` key.
ALLOCATOR_BACKENDS = ("native", "cudaMallocAsync")
#: Environment variable holding the process-wide allocator options.
ENV_VAR = "ACCELRT_ALLOC_CONF"
MB = 1024 * 1024
#: "unlimited" for ``max_split_size`` (C++ ``SIZE_MAX``; reported as -1 in the stats).
SIZE_MAX = 2**64 - 1
#: ``max_split_size`` as the allocator holds it when it is unlimited (``SIZE_MAX``): the
#: largest int the compiled build keeps in a machine word, where ``SIZE_MAX`` is a heap int
#: whose every comparison goes through CPython (once per free). No request (below 2**60) or
#: segment reaches it, so every comparison with it comes out as with ``SIZE_MAX``.
NO_SPLIT_LIMIT: Final = (1 << 62) - 1
_NUM_INTERVALS = 16
_MAX_MB = SIZE_MAX // MB
_MAX_REGISTER_THREADS = 128

#: Keys PyTorch accepts whose other values accelrt refuses, with the reason: each value a
#: ``ValueError`` message for the key (the accepted value is PyTorch's default, which is also
#: what accelrt does).
REFUSED: dict[str, str] = {
    "pinned_use_cuda_host_register": (
        "pinned_use_cuda_host_register:True is not supported: PyTorch then pins host memory with "
        "malloc + cudaHostRegister (pages pre-faulted by pinned_num_register_threads threads) "
        "instead of cudaHostAlloc, and accelrt's backends offer no host-register operation; "
        "remove the key (pinned memory comes from the backend's host_malloc, cudaHostAlloc on "
        "CUDA), or use pinned_reserve_segment_size_mb to avoid many pinning calls"),
    "pinned_num_register_threads": (
        "pinned_num_register_threads only sets how many threads pre-fault pages for "
        "pinned_use_cuda_host_register:True, which accelrt does not support; remove the key "
        "(only its default, 1, is accepted)"),
    "graph_capture_record_stream_reuse": (
        "graph_capture_record_stream_reuse:True is not supported: PyTorch then reuses, inside "
        "a graph capture, blocks freed after record_stream once the captured graph orders "
        "every recorded stream's work before the reuse, which needs the capture's dependency "
        "graph, and accelrt's backends expose no such query; remove the key (such blocks "
        "become reusable when the capture ends, as with False, PyTorch's default)"),
}


def reported_size(size: int) -> int:
    """A ``size_t`` option as PyTorch reports it in the statistics and snapshots
    (``static_cast<int64_t>``): ``SIZE_MAX`` (no limit) is -1, a huge clamped
    ``max_split_size_mb`` negative.

    Example::

        >>> from accelrt.memory._config import SIZE_MAX, reported_size
        >>> reported_size(SIZE_MAX), reported_size(128 * 2**20), reported_size(SIZE_MAX - 2**20 + 1)
        (-1, 134217728, -1048576)
    """
    return size - (1 << 64) if size >= 1 << 63 else size


@dataclass(frozen=True)
class ReserveSpec:
    """An expandable segment's address reservation: a fraction of the device's total memory
    (``is_fraction``) or a number of GiB (PyTorch 2.15's ``ExpandableSegmentReserveSpec``).

    Example::

        >>> from accelrt.memory._config import ReserveSpec
        >>> ReserveSpec(True, 0.5).resolve(16 * 2**30) == 8 * 2**30
        True
        >>> ReserveSpec(False, 40.0).resolve(16 * 2**30) == 40 * 2**30
        True
    """

    is_fraction: bool
    value: float

    def resolve(self, total: int) -> int:
        """Bytes for a device of ``total`` bytes (truncated; ``SIZE_MAX`` when larger, as
        PyTorch saturates)."""
        nbytes = self.value * float(total) if self.is_fraction else self.value * float(1 << 30)
        if nbytes >= float(1 << 64):
            return SIZE_MAX
        return int(nbytes)

    def __str__(self) -> str:
        return repr(self.value) if self.is_fraction else f"{self.value!r}G"


def reserve_bytes(cfg: AllocatorConfig, total: int) -> int:
    """The bytes an expandable segment created now reserves on a device of ``total`` bytes,
    for an untagged stream: ``expandable_segments_reserve`` resolved against ``total`` and
    capped at PyTorch's full reserve, ``total + total // 8``, which it is when the key is unset.

    Example::

        >>> from accelrt.memory._config import parse_config, reserve_bytes
        >>> reserve_bytes(parse_config(""), 8 * 2**30) == 9 * 2**30
        True
        >>> reserve_bytes(parse_config("expandable_segments_reserve:2G"), 8 * 2**30) == 2 * 2**30
        True
    """
    full = total + total // 8
    spec = cfg.expandable_segments_reserve
    return full if spec is None else min(spec.resolve(total), full)


def _default_divisions() -> tuple[int, ...]:
    return (0,) * _NUM_INTERVALS


@dataclass(frozen=True, kw_only=True)
class AllocatorConfig:
    """Options of the caching allocator (frozen; build one with :func:`parse_config`).

    Sizes are in bytes. ``max_split_size == SIZE_MAX`` means unlimited.

    Example::

        >>> from accelrt.memory._config import AllocatorConfig
        >>> AllocatorConfig().large_segment_size
        20971520
    """

    #: the allocator backend: "native" or "cudaMallocAsync"
    backend: str = "native"
    large_segment_size: int = 20 * MB
    max_split_size: int = SIZE_MAX
    max_non_split_rounding_size: int = 20 * MB
    roundup_power2_divisions: tuple[int, ...] = field(default_factory=_default_divisions)
    garbage_collection_threshold: float = 0.0
    expandable_segments: bool = False
    release_lock_on_malloc: bool = False
    per_process_memory_fraction: float | None = None
    throw_on_malloc_oom: bool = False
    graph_capture_record_stream_reuse: bool = False
    page_reuse: bool = False
    pinned_use_host_register: bool = False
    pinned_num_register_threads: int = 1
    pinned_reserve_segment_size: int = 0
    pinned_use_background_threads: bool = False
    pinned_free_catch_all: bool = False
    pinned_max_round_threshold: int = SIZE_MAX
    pinned_max_cached_size: int = SIZE_MAX
    #: ``expandable_segments_reserve`` (``None``: unset, PyTorch's full reserve)
    expandable_segments_reserve: ReserveSpec | None = None
    #: ``expandable_segments_reserve_by_class``: (class name, reserve) pairs, each name once,
    #: in the order given (used only by streams tagged with a class: none in accelrt)
    expandable_segments_reserve_by_class: tuple[tuple[str, ReserveSpec], ...] = ()
    #: the settings string this config was parsed from ("" for the defaults)
    settings: str = ""

    def __post_init__(self) -> None:
        if len(self.roundup_power2_divisions) != _NUM_INTERVALS:
            raise ValueError(f"roundup_power2_divisions must have {_NUM_INTERVALS} entries, "
                             f"got {len(self.roundup_power2_divisions)}")
        if self.large_segment_size <= 10 * MB:
            raise ValueError("large_segment_size must be greater than 10 MiB")
        if self.backend not in ALLOCATOR_BACKENDS:
            raise ValueError(f"backend must be one of {ALLOCATOR_BACKENDS}, got {self.backend!r}")
        if self.per_process_memory_fraction is not None and not (
                0.0 <= self.per_process_memory_fraction <= 1.0):
            raise ValueError("per_process_memory_fraction is invalid, set it in [0.0, 1.0]; "
                             f"got {self.per_process_memory_fraction}")
        for key, refused in (("pinned_use_cuda_host_register", self.pinned_use_host_register),
                             ("pinned_num_register_threads",
                              self.pinned_num_register_threads != 1),
                             ("graph_capture_record_stream_reuse",
                              self.graph_capture_record_stream_reuse)):
            if refused:
                raise ValueError(REFUSED[key])


# ---------------------------------------------------------------------- parsing

#: What the tokenizer skips: C's ``isspace`` (PyTorch's ``ConfigTokenizer``), not Unicode's.
_SPACES = frozenset(" \t\n\v\f\r")
_INT = re.compile(r"[+-]?[0-9]+")
_NONZERO = re.compile(r"[1-9]")
#: The longest number taken (a size that large is clamped to ``SIZE_MAX`` anyway; a longer one
#: would only make the error messages long, or pass Python's limit on int conversion).
_MAX_DIGITS = 100


def _clip(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters for an error message (a hostile settings string
    may be megabytes long)."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _tokenize(s: str) -> list[str]:
    tokens: list[str] = []
    buf: list[str] = []
    for ch in s:
        if ch in ",:[]":
            if buf:
                tokens.append("".join(buf))
                buf.clear()
            tokens.append(ch)
        elif ch not in _SPACES:
            buf.append(ch)
    if buf:
        tokens.append("".join(buf))
    return tokens


class _Parser:
    def __init__(self, s: str) -> None:
        self.tokens = _tokenize(s)
        self.i = 0

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def next(self, what: str) -> str:
        if self.i >= len(self.tokens):
            raise ValueError(f"accelrt allocator config: expected {what} but the settings "
                             "string ended")
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expect(self, ch: str, key: str) -> None:
        tok = self.next(f"'{ch}' after {key!r}")
        if tok != ch:
            raise ValueError(f"accelrt allocator config: expected '{ch}' after {_clip(key)!r}, "
                             f"got {_clip(tok)!r}; the syntax is key:value[,key:value...]")

    def value(self, key: str) -> str:
        self.expect(":", key)
        tok = self.next(f"a value for {key!r}")
        if tok in ",:[]":
            raise ValueError(f"accelrt allocator config: missing value for {key!r}")
        return tok


def _int(key: str, tok: str, accepted: str) -> int:
    """``tok`` as an int: decimal ASCII digits with an optional sign, nothing else (Python's
    ``int`` would also take ``1_000`` and other scripts' digits)."""
    if _INT.fullmatch(tok) is None:
        raise ValueError(f"accelrt allocator config: {key} expects {accepted}, got "
                         f"{_clip(tok)!r}, which is not a whole number in decimal digits")
    if len(tok) > _MAX_DIGITS:
        raise ValueError(f"accelrt allocator config: {key} expects {accepted}, got a number of "
                         f"{len(tok)} digits")
    value = int(tok, 10)
    if value > SIZE_MAX:   # (a negative one: each key's own check refuses it)
        raise ValueError(f"accelrt allocator config: {key} expects {accepted}, got {_clip(tok)}, "
                         f"which is out of range: at most {SIZE_MAX} (2**64 - 1) is read, as "
                         "PyTorch's std::stoull reads it (IndexError: stoull)")
    return value


def _bool(key: str, tok: str, at: int) -> bool:
    """``tok``, the value of ``key`` and token ``at`` of the settings string, as a bool: only
    ``True`` and ``False`` are taken, and anything else is refused with torch 2.15's message
    (``ConfigTokenizer::toBool``: the index counts every token, separators included)."""
    if tok == "True":
        return True
    if tok == "False":
        return False
    raise ValueError(f"accelrt allocator config: {key}: Expected 'True' or 'False' at index "
                     f"{at} in ConfigTokenizer but got '{_clip(tok)}'")


def _float(key: str, tok: str, accepted: str) -> float:
    """``tok`` as a float, in ASCII without ``_`` (which Python's ``float`` would take)."""
    if tok.isascii() and "_" not in tok:
        try:
            value = float(tok)
        except ValueError:
            pass
        else:
            # C's strtod flags an underflow (a subnormal result, or 0 from nonzero digits),
            # which PyTorch's std::stod refuses (an overflow, inf, fails the keys' ranges)
            if (0.0 < abs(value) < sys.float_info.min
                    or value == 0.0 and _NONZERO.search(tok.lower().partition("e")[0])):
                raise ValueError(f"accelrt allocator config: {key} expects {accepted}, got "
                                 f"{_clip(tok)}, which is out of range: smaller than the least "
                                 "normal double, as PyTorch's std::stod refuses it "
                                 "(IndexError: stod)")
            return value
    raise ValueError(f"accelrt allocator config: {key} expects {accepted}, got {_clip(tok)!r}")


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _divisions_value(tok: str) -> int:
    v = _int("roundup_power2_divisions", tok, "a power of 2 (or 0 to disable rounding)")
    if v != 0 and not _is_pow2(v):
        raise ValueError("accelrt allocator config: roundup_power2_divisions: For roundups, the "
                         f"divisions has to be power of 2 or 0 to disable roundup, got {v}")
    return v


def _parse_divisions(p: _Parser, table: tuple[int, ...]) -> tuple[int, ...]:
    """``roundup_power2_divisions:N`` or ``:[K:N,...,>:N]`` applied to ``table`` (a repeated
    key edits the table the earlier ones built, as in PyTorch)."""
    key = "roundup_power2_divisions"
    p.expect(":", key)
    tok = p.next(f"a value for {key!r}")
    if tok != "[":
        v = _int(key, tok, "a power of 2")
        if not _is_pow2(v):
            raise ValueError("accelrt allocator config: roundup_power2_divisions: For roundups, "
                             f"the divisions has to be power of 2, got {v}")
        return (v,) * _NUM_INTERVALS
    out = list(table)
    first = True
    last_index = 0   # PyTorch's start: a '>' before any interval leaves interval 0 as it was
    k = p.next(f"an interval or ']' in {key}")
    while k != "]":
        if k == ",":
            raise ValueError(f"accelrt allocator config: empty item in the {key} list (a ',' "
                             "after '[' or after another ','); remove the extra ','")
        p.expect(":", f"{key} interval {_clip(k)}")
        v = _divisions_value(p.next(f"a division count in {key}"))
        if k == ">":
            for j in range(last_index + 1, _NUM_INTERVALS):
                out[j] = v
        else:
            size_mb = _int(key, k, "interval sizes in MB that are powers of 2, or '>'")
            if not _is_pow2(size_mb):
                raise ValueError("accelrt allocator config: roundup_power2_divisions intervals "
                                 f"must be powers of 2 (in MB), got {size_mb}")
            index = min(size_mb.bit_length() - 1, _NUM_INTERVALS - 1)
            if first:
                for j in range(index):
                    out[j] = v
                first = False
            out[index] = v
            last_index = index
        sep = p.next(f"',' or ']' in {key}")
        if sep == ",":
            k = p.next(f"an interval or ']' in {key}")   # a ']' here: a trailing comma
        elif sep != "]":
            raise ValueError(f"accelrt allocator config: expected ',' or ']' in {key}, got "
                             f"{sep!r}")
        else:
            k = sep
    return tuple(out)


_KEYS = frozenset({
    "backend", "large_segment_size_mb", "max_split_size_mb", "max_non_split_rounding_mb",
    "roundup_power2_divisions", "garbage_collection_threshold", "expandable_segments",
    "release_lock_on_cudamalloc", "release_lock_on_hipmalloc", "release_lock_on_malloc",
    "per_process_memory_fraction",
    "throw_on_cudamalloc_oom", "throw_on_malloc_oom", "graph_capture_record_stream_reuse",
    "page_reuse", "pinned_use_cuda_host_register", "pinned_use_hip_host_register",
    "pinned_use_host_register",
    "pinned_num_register_threads", "pinned_reserve_segment_size_mb",
    "pinned_use_background_threads", "pinned_free_catch_all", "pinned_max_round_threshold_mb",
    "pinned_max_cached_size_mb", "expandable_segments_reserve",
    "expandable_segments_reserve_by_class",
})


def _unknown_key_message(key: str) -> str:
    import difflib
    close = difflib.get_close_matches(key.lower(), sorted(_KEYS), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else "."
    return (f"Unrecognized key '{_clip(key)}' in accelrt allocator config{hint} Valid keys: "
            f"{', '.join(sorted(_KEYS))}.")


def _from(source: str, settings: str, exc: ValueError) -> ValueError:
    """``exc`` with where the settings string came from in front."""
    return ValueError(f"{source}={_clip(settings, 200)!r}: {exc}")


def parse_config(settings: str, base: AllocatorConfig | None = None) -> AllocatorConfig:
    """Parse a settings string in PyTorch's ``PYTORCH_CUDA_ALLOC_CONF`` syntax.

    Args:
        settings: e.g. ``"max_split_size_mb:128,expandable_segments:True"``.
        base: options the string modifies (default: accelrt's defaults). As in PyTorch,
            ``max_split_size_mb``, ``roundup_power2_divisions`` and
            ``garbage_collection_threshold`` are reset to their defaults first.

    Returns:
        A new frozen :class:`AllocatorConfig` (``settings`` holds the string).

    Raises:
        TypeError: ``settings`` is not a str.
        ValueError: an unknown key, a malformed string or a value out of range; the message
            names the key and the accepted values.

    Example::

        >>> from accelrt.memory._config import parse_config
        >>> parse_config("expandable_segments:True").expandable_segments
        True
    """
    if not isinstance(settings, str):
        raise TypeError(f"allocator settings must be a str, got {type_shown(settings)}")
    base = base if base is not None else AllocatorConfig()
    p = _Parser(settings)
    # Two passes: large_segment_size_mb first, since other checks and defaults depend on it.
    lss = base.large_segment_size
    tokens = p.tokens
    depth = 0   # inside a list (a reserve class may be named like a key)
    for j, tok in enumerate(tokens):
        depth += (tok == "[") - (tok == "]")
        if tok == "large_segment_size_mb" and depth <= 0 and (j == 0 or tokens[j - 1] == ","):
            if j + 2 >= len(tokens) or tokens[j + 1] != ":":
                raise ValueError("accelrt allocator config: expected large_segment_size_mb:N")
            mb = _int("large_segment_size_mb", tokens[j + 2], "an integer number of MB > 10")
            if mb <= 10:
                raise ValueError("accelrt allocator config: large_segment_size_mb must be > 10 "
                                 f"MB, got {mb}")
            lss = min(mb, _MAX_MB) * MB
    divisions = _default_divisions()
    vals: dict[str, object] = {
        "large_segment_size": lss,
        "max_split_size": SIZE_MAX,
        "max_non_split_rounding_size": lss,
        "roundup_power2_divisions": divisions,
        "garbage_collection_threshold": 0.0,
        "settings": settings,
    }
    lss_mb = lss // MB
    while not p.at_end():
        key = p.next("a key")
        if key == ",":
            raise ValueError("accelrt allocator config: empty item (a ',' at the start or "
                             "after another ','; PyTorch: Unrecognized key ','); remove the "
                             "extra ','")
        if key not in _KEYS:
            raise ValueError(_unknown_key_message(key))
        if key == "roundup_power2_divisions":
            divisions = _parse_divisions(p, divisions)
            vals["roundup_power2_divisions"] = divisions
        elif key == "expandable_segments_reserve_by_class":
            vals[key] = _parse_reserve_classes(p)
        elif key == "expandable_segments_reserve":
            spec = _reserve_spec(p.value(key))
            if spec is not None:    # (a bad value keeps the reserve in force, as in PyTorch)
                vals[key] = spec
        else:
            tok = p.value(key)
            _apply_key(vals, key, tok, lss_mb, p.i - 1)
        if not p.at_end():
            p.expect(",", key)
    return dataclasses.replace(base, **vals)  # type: ignore[arg-type]


#: A reserve value (without its ``G``): what C++'s ``istream >> double`` reads whole.
_RESERVE_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _reserve_spec(tok: str) -> ReserveSpec | None:
    """``tok`` as a reserve (``0.5``, ``40G``), or ``None`` after PyTorch's warning when it is
    malformed, not finite or not positive (PyTorch keeps its reserve then, never raising)."""
    is_gib = tok[-1:] in ("G", "g")
    num = tok[:-1] if is_gib else tok
    value = 0.0
    if _RESERVE_NUMBER.fullmatch(num) is not None:
        value = float(num)
    if not (math.isfinite(value) and value > 0.0):
        warnings.warn(f"Ignoring invalid expandable-segment reserve value '{_clip(tok)}' in the "
                      "allocator settings (expected a positive, finite fraction like 0.5 or an "
                      "absolute size like 40G); using default.", UserWarning, stacklevel=4)
        return None
    return ReserveSpec(not is_gib, value)


def _parse_reserve_classes(p: _Parser) -> tuple[tuple[str, ReserveSpec], ...]:
    """``expandable_segments_reserve_by_class:[name:value,...]``: the whole map (a repeated key
    replaces it, as in PyTorch; a name given twice takes its last value; ``[]`` empties it).
    A bad value skips its entry (with PyTorch's warning); a bad list raises."""
    key = "expandable_segments_reserve_by_class"
    p.expect(":", key)
    p.expect("[", key + ":")
    out: dict[str, ReserveSpec] = {}
    name = p.next(f"a class name or ']' in {key}")
    while name != "]":
        if name in ",:[":
            raise ValueError(f"accelrt allocator config: expected a class name in {key}, got "
                             f"{name!r}; the syntax is {key}:[name:value,...]")
        value = p.value(f"{key} class {_clip(name)}")
        spec = _reserve_spec(value)
        if spec is not None:
            out.pop(name, None)
            out[name] = spec
        sep = p.next(f"',' or ']' in {key}")
        if sep == ",":
            name = p.next(f"a class name or ']' in {key}")   # a ']' here: a trailing comma
        elif sep == "]":
            name = sep
        else:
            raise ValueError(f"accelrt allocator config: expected ',' or ']' in {key}, got "
                             f"{_clip(sep)!r}")
    return tuple(out.items())


def _apply_key(vals: dict[str, object], key: str, tok: str, lss_mb: int, at: int) -> None:
    """Check and store the value ``tok`` of ``key`` (token ``at`` of the settings string)."""
    if key == "backend":
        if tok not in ALLOCATOR_BACKENDS:
            raise ValueError(f"accelrt allocator config: Unknown allocator backend "
                             f"{_clip(tok)!r}, options are native and cudaMallocAsync")
        vals["backend"] = tok
    elif key == "large_segment_size_mb":
        pass  # handled in the first pass
    elif key in ("max_split_size_mb", "max_non_split_rounding_mb"):
        mb = _int(key, tok, f"an integer number of MB >= {lss_mb}")
        if mb < lss_mb:
            raise ValueError(f"accelrt allocator config: {key} too small, must be >= {lss_mb} "
                             f"(large_segment_size_mb), got {mb}")
        size = min(mb, _MAX_MB) * MB
        vals["max_split_size" if key == "max_split_size_mb" else
             "max_non_split_rounding_size"] = size
    elif key == "garbage_collection_threshold":
        t = _float(key, tok, "a float in (0.0, 1.0)")
        if not 0.0 < t < 1.0:
            raise ValueError("accelrt allocator config: garbage_collection_threshold is invalid, "
                             f"set it in (0.0, 1.0); got {_clip(tok)}")
        vals["garbage_collection_threshold"] = t
    elif key == "per_process_memory_fraction":
        f = _float(key, tok, "a float in [0.0, 1.0]")
        if not 0.0 <= f <= 1.0:
            # PyTorch's CUDAAllocatorConfig message (a ValueError there too)
            raise ValueError("accelrt allocator config: per_process_memory_fraction is invalid, "
                             f"set it in [0.0, 1.0]; got {_clip(tok)}")
        vals["per_process_memory_fraction"] = f
    elif key == "expandable_segments":
        vals["expandable_segments"] = _bool(key, tok, at)
    elif key in ("release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
                 "release_lock_on_malloc"):
        vals["release_lock_on_malloc"] = _bool(key, tok, at)
    elif key in ("throw_on_cudamalloc_oom", "throw_on_malloc_oom"):
        vals["throw_on_malloc_oom"] = _bool(key, tok, at)
    elif key == "graph_capture_record_stream_reuse":
        if _bool(key, tok, at):
            raise ValueError(f"accelrt allocator config: {REFUSED[key]}")
        vals["graph_capture_record_stream_reuse"] = False
    elif key == "page_reuse":
        vals["page_reuse"] = _bool(key, tok, at)
    elif key in ("pinned_use_cuda_host_register", "pinned_use_hip_host_register",
                 "pinned_use_host_register"):
        if _bool(key, tok, at):
            raise ValueError("accelrt allocator config: "
                             + REFUSED["pinned_use_cuda_host_register"].replace(
                                 "pinned_use_cuda_host_register:True", f"{key}:True", 1))
        vals["pinned_use_host_register"] = False
    elif key == "pinned_use_background_threads":
        vals["pinned_use_background_threads"] = _bool(key, tok, at)
    elif key == "pinned_free_catch_all":
        vals["pinned_free_catch_all"] = _bool(key, tok, at)
    elif key == "pinned_num_register_threads":
        n = _int(key, tok, f"a power of 2 <= {_MAX_REGISTER_THREADS}")
        if not _is_pow2(n):
            raise ValueError(f"accelrt allocator config: {key}: Number of register threads has "
                             f"to be power of 2, got {n}")
        if n > _MAX_REGISTER_THREADS:
            raise ValueError(f"accelrt allocator config: {key}: Number of register threads "
                             f"should be less than or equal to {_MAX_REGISTER_THREADS}, got {n}")
        if n != 1:
            raise ValueError(f"accelrt allocator config: {REFUSED[key]}; got {n}")
        vals["pinned_num_register_threads"] = n
    elif key == "pinned_reserve_segment_size_mb":
        mb = _int(key, tok, "a positive integer number of MB")
        if mb <= 0:
            raise ValueError(f"accelrt allocator config: {key}: Pinned reserve segment size has "
                             f"to be greater than 0, got {mb} (leave the key out for no reserve "
                             "segment)")
        vals["pinned_reserve_segment_size"] = min(mb, _MAX_MB) * MB
    else:  # the other pinned_*_mb sizes
        mb = _int(key, tok, "a non-negative integer number of MB")
        if mb < 0:
            raise ValueError(f"accelrt allocator config: {key} must be >= 0, got {mb}")
        field_name = {"pinned_max_round_threshold_mb": "pinned_max_round_threshold",
                      "pinned_max_cached_size_mb": "pinned_max_cached_size"}[key]
        vals[field_name] = min(mb, _MAX_MB) * MB


# ---------------------------------------------------------------------- process-wide options

_lock = reinit_after_fork(threading.Lock())
_current: AllocatorConfig | None = None   # guarded by _lock
#: Held by :func:`set_allocator_settings` (and ``interop.torch.use_accelrt_allocator``) from
#: reading the options to applying the new ones, so that two changes at once do not both start
#: from the same options (the second would drop a key the first set, where PyTorch's parses
#: edit one shared state).
_set_lock = reinit_after_fork(threading.Lock())


#: The start of PyTorch's warning (``TORCH_WARN_ONCE`` in ``CUDAAllocatorConfig``, whose
#: ``expandable_segments()`` then answers ``False``), kept so that filters written for it match.
EXPANDABLE_FALLBACK = "expandable_segments not supported on this platform"
_fallback_lock = reinit_after_fork(threading.Lock())
#: The backends warned about by :func:`warn_expandable_fallback` (guarded by
#: _fallback_lock; changed in place only, so a test may clear and restore it).
_fallback_warned: set[str] = set()
_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def warn_expandable_fallback(backend: str, index: int) -> None:
    """Warn, once per backend in this process, that ``expandable_segments:True`` was asked
    for but device ``index`` of ``backend`` has no virtual memory, so its caching allocator
    uses ordinary segments (PyTorch warns once and behaves as ``expandable_segments:False``
    where the platform cannot map memory). Call it with no lock held: a warnings filter may
    turn the warning into an exception, and a ``showwarning`` hook may run any code.

    Example::

        >>> import warnings
        >>> from accelrt.memory._config import warn_expandable_fallback
        >>> with warnings.catch_warnings(record=True) as seen:
        ...     warnings.simplefilter("always")
        ...     warn_expandable_fallback("nosuchbackend_doc", 0)
        ...     warn_expandable_fallback("nosuchbackend_doc", 1)
        >>> len(seen), "'nosuchbackend_doc' backend" in str(seen[0].message)
        (1, True)
    """
    with _fallback_lock:
        if backend in _fallback_warned:
            return
        _fallback_warned.add(backend)
    # point the warning at the user's frame, past accelrt's own (compiled modules have none)
    level = 2
    f = sys._getframe(1)
    while f.f_back is not None and f.f_code.co_filename.startswith(_PKG):
        f = f.f_back
        level += 1
    warnings.warn(
        f"{EXPANDABLE_FALLBACK}: the '{backend}' backend has no virtual memory on device "
        f"{index} (Backend.vm_supported() is False), so its caching allocator uses ordinary "
        "segments there, as with expandable_segments:False; devices with virtual memory keep "
        "expandable segments (warned once per backend)", UserWarning, stacklevel=level)


def check_fraction(fraction: object) -> float:
    """``fraction`` if it is a valid per-process memory fraction (a float in [0, 1]).

    Raises:
        TypeError: ``fraction`` is not a float.
        ValueError: ``fraction`` is outside [0, 1].

    Example::

        >>> from accelrt.memory._config import check_fraction
        >>> check_fraction(0.5)
        0.5
    """
    if not isinstance(fraction, float):
        raise TypeError(f"Invalid type for fraction argument, must be `float`, got "
                        f"{type_shown(fraction)}")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    return fraction


def get_config() -> AllocatorConfig:
    """The process-wide options (``ACCELRT_ALLOC_CONF`` is read on the first call).

    Raises:
        ValueError: the environment variable holds a malformed string (the message starts
            with ``ACCELRT_ALLOC_CONF='...'``; an unknown key lists the valid ones and the
            closest).

    Example::

        >>> from accelrt.memory._config import get_config
        >>> get_config().large_segment_size >= 10 * 2**20
        True
    """
    cfg = _current
    if cfg is not None:
        return cfg
    return _load_env()


def _load_env() -> AllocatorConfig:
    global _current
    with _lock:
        if _current is None:
            env = os.environ.get(ENV_VAR)
            try:
                _current = parse_config(env) if env else AllocatorConfig()
            except ValueError as exc:
                raise _from(ENV_VAR, env or "", exc) from None
        return _current


def set_allocator_settings(settings: str) -> None:
    """Change the allocator options at run time (PyTorch's ``_set_allocator_settings``).

    Existing allocators take the new ``max_split_size_mb``, ``max_non_split_rounding_mb``,
    ``roundup_power2_divisions``, ``garbage_collection_threshold`` and ``expandable_segments``
    (which affects segments created from now on); new allocators use all of it. Calls from
    several threads take effect one after the other, each on the options the last one left.
    ``expandable_segments:True`` is a request: the allocators of a device without virtual
    memory keep ordinary segments, with one ``UserWarning`` per backend (see
    :func:`warn_expandable_fallback`), as PyTorch does where its platform cannot.

    Args:
        settings: a string in ``PYTORCH_CUDA_ALLOC_CONF`` syntax.

    Raises:
        TypeError: ``settings`` is not a str.
        ValueError: malformed settings, or a ``backend`` other than the one an existing
            allocator runs. Nothing changes on error.

    Example::

        >>> from accelrt.memory._config import set_allocator_settings, get_allocator_settings
        >>> old = get_allocator_settings()
        >>> set_allocator_settings("max_split_size_mb:64")
        >>> get_allocator_settings()
        'max_split_size_mb:64'
        >>> set_allocator_settings(old)
    """
    from . import _allocator  # late import: the allocator module imports this one

    with _set_lock:
        try:
            cfg = parse_config(settings, get_config())
        except ValueError as exc:
            raise _from("set_allocator_settings", settings, exc) from None
        _install(cfg)
    # (without _set_lock: a showwarning hook may set the settings again)
    _allocator._warn_fallbacks()


def _install(cfg: AllocatorConfig) -> None:
    """Make ``cfg`` (from :func:`parse_config` over :func:`get_config`, with ``_set_lock``
    held since) the process-wide options: checked against every existing allocator, then
    applied to them, as :func:`set_allocator_settings` does, without parsing the string
    again (a bad value would warn twice). The fallback warnings are the caller's, once it
    released its locks (``_allocator._warn_fallbacks``).

    Raises:
        ValueError: an existing allocator's backend cannot take ``cfg``; nothing changes.
    """
    global _current
    from . import _allocator  # late import: the allocator module imports this one

    _allocator._check_config_for_all(cfg)
    with _lock:
        _current = cfg
    _allocator._apply_config_to_all(cfg)


def get_allocator_settings() -> str:
    """The last settings string (from :func:`set_allocator_settings` or the environment).

    Example::

        >>> from accelrt.memory._config import get_allocator_settings
        >>> isinstance(get_allocator_settings(), str)
        True
    """
    return get_config().settings


def _reset_for_tests(cfg: AllocatorConfig | None = None) -> None:
    """Replace the process-wide options without touching existing allocators (tests)."""
    global _current
    with _lock:
        _current = cfg
