"""Reading files from strangers safely, and writing the command line's output files: the one
bounded reader, the text sanitiser and the one output writer shared by ``accelrt replay``,
``accelrt memory viz`` and ``accelrt memory tune``.

* :func:`file_name` checks a file argument (str, bytes or ``os.PathLike``; never a file
  descriptor) and gives it as text for messages.
* :func:`read_input` reads a file, inflating gzip data as a stream and refusing to inflate
  more than :func:`inflate_limit` bytes (a 0.5 MB gzip bomb that would inflate to 512 MiB is
  refused after at most 64 MiB, with a clear ``ValueError``).
* :func:`terminal_safe` escapes control characters (ESC, BEL, carriage return, C1 codes,
  Unicode bidi overrides, ...) so text that came from a file cannot retitle, clear or
  rewrite the terminal it is printed on; it also shows the bytes of a file name that is not
  valid UTF-8 (Python keeps them as lone surrogates, ``surrogateescape``) as ``\\xff``, so
  such a name never makes printing or writing UTF-8 fail.
* :func:`write_atomic` writes an output file whole or not at all: to a new file beside it,
  renamed over it once written, so a failure never leaves an empty or partial file behind.
* :func:`short_repr` is a bounded, escaped ``repr`` for error messages about file content.
* :func:`parse_args` parses a command line for ``accelrt replay``, ``memory viz`` and
  ``memory tune``, turning argparse's exit (``--help``, a bad argument) into the status.
* :func:`example_file` writes a file into a temporary folder removed at exit: the one fixture
  of the tools' examples (a trace, a snapshot, a gzip file).

Example::

    >>> from accelrt.memory.tools._files import terminal_safe
    >>> terminal_safe("ok\\x1b]0;pwned\\x07")
    'ok\\\\x1b]0;pwned\\\\x07'
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gzip
import os
import re
import reprlib
import secrets
import shutil
import stat
import tempfile
import zlib
from collections.abc import Sequence
from typing import Any
from ..._errors import type_shown

__all__ = ["INFLATE_FLOOR", "INFLATE_RATIO", "example_file", "file_name", "inflate_limit",
           "parse_args", "read_input", "short_repr", "terminal_safe", "write_atomic"]

#: Gzip input may always inflate to this many bytes...
INFLATE_FLOOR = 64 << 20
#: ...or to this many times its compressed size, whichever is larger. Allocator traces and
#: snapshots compress 10x to 30x; a gzip bomb compresses about 1000x.
INFLATE_RATIO = 100

_CHUNK = 1 << 20


def inflate_limit(compressed_size: int) -> int:
    """The most bytes gzip data of ``compressed_size`` bytes may inflate to.

    Example::

        >>> from accelrt.memory.tools._files import inflate_limit
        >>> inflate_limit(1000) == 64 << 20, inflate_limit(10 << 20) == 1000 << 20
        (True, True)
    """
    return max(INFLATE_FLOOR, INFLATE_RATIO * compressed_size)


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
               json_help: str | None = None) -> argparse.Namespace | int:
    """``parser.parse_args(argv)``, or the exit status argparse asked for (0 after ``--help``,
    2 after a bad argument, its message printed) instead of raising ``SystemExit``. With
    ``json_help``, the parser takes the tools' ``--json`` flag last, described so.

    Example::

        >>> import argparse
        >>> from accelrt.memory.tools._files import parse_args
        >>> parser = argparse.ArgumentParser(prog="demo")
        >>> parse_args(parser, ["--json"], json_help="print JSON")
        Namespace(json=True)
        >>> import contextlib, io
        >>> with contextlib.redirect_stderr(io.StringIO()):
        ...     parse_args(parser, ["--bad"])
        2
    """
    if argv is not None and (isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence)
                             or not all(isinstance(a, str) for a in argv)):
        raise TypeError(f"argv must be a list of str (the arguments after the command), got "
                        f"{short_repr(argv)}")
    if json_help is not None:
        parser.add_argument("--json", action="store_true", help=json_help)
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def example_file(name: str, data: bytes) -> str:
    """Write ``data`` to a file ``name`` in a new temporary folder, removed when the process
    exits, and return the file's path: the fixture of the tools' examples.

    Example::

        >>> import os
        >>> from accelrt.memory.tools._files import example_file
        >>> p = example_file("t.bin", b"abc")
        >>> os.path.basename(p), os.path.getsize(p)
        ('t.bin', 3)
    """
    folder = tempfile.mkdtemp(prefix="accelrt-example-")
    atexit.register(shutil.rmtree, folder, True)
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def file_name(path: Any, what: str = "path") -> str:
    """``path`` (a str, bytes or ``os.PathLike`` file name) as a str, to open and to name in
    messages (undecodable bytes kept as ``os.fsdecode`` keeps them).

    Raises:
        TypeError: ``path`` is anything else; an int would be read as an open file
            descriptor, which the tools never take (the message names ``what``).

    Example::

        >>> from pathlib import Path
        >>> from accelrt.memory.tools._files import file_name
        >>> file_name(Path("snap.pickle")), file_name(b"t.json")
        ('snap.pickle', 't.json')
        >>> file_name(3)
        Traceback (most recent call last):
        ...
        TypeError: path must be a file name (str, bytes or os.PathLike), got int
    """
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"{what} must be a file name (str, bytes or os.PathLike), got "
                        f"{type_shown(path)}")
    return os.fsdecode(os.fspath(path))


def read_input(path: str, limit: int | None = None) -> bytes:
    """Read ``path``; gzip data is inflated, but never to more than ``limit`` bytes.

    Args:
        path: the file (see :func:`file_name`).
        limit: the most inflated bytes accepted (default :func:`inflate_limit` of the file's
            size).

    Raises:
        TypeError: ``path`` is not a file name, or ``limit`` not an int.
        OSError: the file cannot be read.
        ValueError: the gzip data is corrupt, or inflates to more than ``limit`` bytes (a
            "gzip bomb"); the message names the file and the limit.

    Example::

        >>> import gzip
        >>> from accelrt.memory.tools._files import example_file, read_input
        >>> read_input(example_file("t.gz", gzip.compress(b"hello")))
        b'hello'
    """
    path = file_name(path)
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
        raise TypeError(f"limit must be an int number of bytes or None, got "
                        f"{type_shown(limit)}")
    with open(path, "rb") as f:
        if f.peek(2)[:2] != b"\x1f\x8b":
            return f.read()
        st = os.fstat(f.fileno())
        size = st.st_size if stat.S_ISREG(st.st_mode) else 0    # a pipe: the floor applies
        cap = inflate_limit(size) if limit is None else limit
        out = bytearray()
        try:
            with gzip.GzipFile(fileobj=f, mode="rb") as z:
                while True:
                    chunk = z.read(min(_CHUNK, cap + 1 - len(out)))
                    if not chunk:
                        break
                    out += chunk
                    if len(out) > cap:
                        raise ValueError(
                            f"{path}: refusing to inflate: the {size:,}-byte gzip data inflates "
                            f"to more than {cap:,} bytes (at most {INFLATE_RATIO}x its size or "
                            f"{INFLATE_FLOOR >> 20} MiB is accepted); decompress it yourself if "
                            "you trust it")
        except (OSError, EOFError, zlib.error) as exc:
            raise ValueError(f"{path}: corrupt gzip data ({exc})") from exc
    return bytes(out)


# C0 and C1 control characters except newline and tab, DEL, the Unicode line/paragraph
# separators, the bidirectional overrides/isolates (which reorder what a terminal shows) and
# lone surrogates (no UTF-8 encodes them; U+DC80..U+DCFF are the undecodable bytes of a file
# name, os.fsdecode's surrogateescape).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                     "\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSAFE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                          "\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    if 0xDC80 <= c <= 0xDCFF:           # the byte surrogateescape kept
        return f"\\x{c - 0xDC00:02x}"
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def terminal_safe(text: str, *, one_line: bool = False) -> str:
    """``text`` with every control character escaped (``\\x1b``, ``\\u202e``); newlines and
    tabs are kept unless ``one_line``. The undecodable bytes of a file name (``os.fsdecode``'s
    lone surrogates) show as the bytes they were, so the result always encodes to UTF-8.

    Example::

        >>> import os
        >>> from accelrt.memory.tools._files import terminal_safe
        >>> terminal_safe("a\\tb\\r\\n"), terminal_safe("a\\nb", one_line=True)
        ('a\\tb\\\\x0d\\n', 'a\\\\x0ab')
        >>> terminal_safe(os.fsdecode(b"snap\\xff.pickle"))
        'snap\\\\xff.pickle'
    """
    return (_UNSAFE_LINE if one_line else _UNSAFE).sub(_escape, text)


_repr = reprlib.Repr()
_repr.maxlevel = 3
_repr.maxstring = 60
_repr.maxother = 60
_repr.maxlong = 60


def short_repr(value: Any) -> str:
    """A ``repr`` of file content for error messages: bounded in length and nesting (a
    100,000-deep list prints as ``[[[[...]]]]``), control characters escaped.

    Example::

        >>> from accelrt.memory.tools._files import short_repr
        >>> short_repr(["\x1b" + "x" * 100, [[[[1]]]]])
        "['\\\\x1bxxxxxxxxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxxxxxxxxxxxx', [[[...]]]]"
    """
    try:
        text = _repr.repr(value)
    except (RecursionError, ValueError, MemoryError):   # absurd ints or nesting
        text = f"<{type(value).__name__}>"
    return terminal_safe(text[:200], one_line=True)


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all.

    The bytes go to a new file in the same folder, which is renamed over ``path`` once written
    (``os.replace``), so a failure (a full disk, an interrupt) never leaves an empty or partial
    file behind, and a file that was there is kept. A new file gets the permissions ``open``
    would give it (``0o666`` less the umask), a replaced one keeps its own; a symbolic link is
    written through, as ``open`` does. A path that is not a regular file (``/dev/stdout``, a
    pipe) is written directly, and so is an existing file in a folder where no new file can be
    made (a read-only folder).

    Raises:
        OSError: the file cannot be written (nothing is left behind).

    Example::

        >>> import os
        >>> from accelrt.memory.tools._files import example_file, write_atomic
        >>> p = example_file("page.html", b"old")
        >>> write_atomic(p, b"<html>")
        >>> with open(p, "rb") as f:
        ...     f.read()
        b'<html>'
        >>> os.listdir(os.path.dirname(p))
        ['page.html']
    """
    target = os.path.realpath(path)
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    if (st is not None and not stat.S_ISREG(st.st_mode)
            or os.path.abspath(path).startswith(("/dev/", "/proc/"))):   # /dev/stdout > file
        with open(path, "wb") as f:
            f.write(data)
        return
    folder = os.path.dirname(target)
    while True:
        tmp = os.path.join(folder, f".{secrets.token_hex(8)}.accelrt-tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                         0o666)
            break
        except FileExistsError:     # pragma: no cover - 64 random bits collided
            continue
        except PermissionError:
            if st is None:
                raise
            # a writable file in a folder we may not create files in: write it in place, as
            # ``open`` would (the only way left to update it)
            with open(path, "wb") as f:
                f.write(data)
            return
    try:
        with open(fd, "wb") as f:
            f.write(data)
        if st is not None:
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
