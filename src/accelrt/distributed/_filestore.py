""":class:`FileStore`: the store's table as an append-only log of set/delete records in a
file, read incrementally and written under ``fcntl.flock`` (shared to read, exclusive to
write), so that the processes of one machine (or of a shared file system with working
``flock``) share it.

Example::

    >>> import os, tempfile
    >>> from accelrt.distributed import FileStore
    >>> s = FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1); s.set("k", "v")
    >>> s.get("k")
    b'v'
    >>> s.close()
"""

from __future__ import annotations

import os
import struct
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from .._errors import type_shown
from .._fork import reinit_after_fork
from ._errors import DistStoreError
from ._store import (_INT32_MAX, _INT32_MIN, _binding_int, _compare_set_refusal, _counter,
                     _Table, _TableStore, _wait_timeout)

__all__ = ["FileStore"]


# ---------------------------------------------------------------------------- FileStore
_SET, _DELETE = 1, 2
_HEAD = struct.Struct("!BII")
_REFCOUNT_KEY, _CLEANUP_KEY = "refcount/", "cleanup/"


class _FileTable(_Table):
    """The table as an append-only log of set/delete records in a file, read incrementally
    and written under ``fcntl.flock`` (shared to read, exclusive to write)."""

    def __init__(self, path: str) -> None:
        import fcntl
        self._fcntl = fcntl
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._pos = 0                        # bytes of the log applied to _data
        self._data: dict[str, bytes] = {}
        # this object's threads (free again in a forked child); flock orders processes
        self._lock = reinit_after_fork(threading.Lock())
        _OPEN.add(self)

    def _reopen_in_child(self) -> None:
        """After ``fork``, in the child: a file description of its own. ``flock`` locks
        belong to the open file description, which a forked child shares with its parent:
        both would hold the exclusive lock at once (and lose each other's ``add``), where
        torch's FileStore opens the file for each operation. (The thread lock, which a
        parent's thread may have held when the process forked, is free again:
        ``reinit_after_fork``.)"""
        old = self._fd
        try:   # the same file even if its path was removed or replaced meanwhile (Linux)
            new = os.open(f"/proc/self/fd/{old}", os.O_RDWR | os.O_APPEND)
        except OSError:
            try:
                new = os.open(self.path, os.O_RDWR | os.O_APPEND)
            except OSError:
                return
            a, b = os.fstat(new), os.fstat(old)
            if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
                os.close(new)
                return
        self._fd = new
        os.close(old)

    def _sync(self) -> None:
        """Apply the records other processes appended since the last read."""
        end = os.fstat(self._fd).st_size
        if end < self._pos:   # the file was recreated: read it again
            self._pos, self._data = 0, {}
        if end == self._pos:
            return
        buf = os.pread(self._fd, end - self._pos, self._pos)
        pos = 0
        while pos + _HEAD.size <= len(buf):
            kind, klen, vlen = _HEAD.unpack_from(buf, pos)
            stop = pos + _HEAD.size + klen + vlen
            if stop > len(buf):
                break
            key = buf[pos + _HEAD.size:pos + _HEAD.size + klen].decode()
            if kind == _SET:
                self._data[key] = buf[pos + _HEAD.size + klen:stop]
            else:
                self._data.pop(key, None)
            pos = stop
        self._pos += pos

    def _locked(self, exclusive: bool) -> Any:
        table = self

        class _Held:
            def __enter__(self) -> None:
                table._lock.acquire()
                table._fcntl.flock(table._fd, table._fcntl.LOCK_EX if exclusive
                                   else table._fcntl.LOCK_SH)
                table._sync()

            def __exit__(self, *exc: object) -> None:
                table._fcntl.flock(table._fd, table._fcntl.LOCK_UN)
                table._lock.release()

        return _Held()

    def _write(self, kind: int, key: str, value: bytes = b"") -> None:
        k = key.encode()
        rec = _HEAD.pack(kind, len(k), len(value)) + k + value
        os.write(self._fd, rec)   # O_APPEND, under the exclusive lock
        self._sync()

    def _poll(self, pred: Callable[[], bool], keys: Sequence[str], timeout: float,
              style: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with self._locked(False):
                if pred():
                    return
            if time.monotonic() > deadline:
                with self._locked(False):
                    missing = [k for k in keys if k not in self._data]
                # (torch's FileStore names the first missing key of a get, none for a wait)
                raise _wait_timeout(missing if style == "file_get" and missing else keys,
                                    timeout, style)
            time.sleep(0.01)

    def set(self, key: str, value: bytes) -> None:
        with self._locked(True):
            self._write(_SET, key, value)

    def add(self, key: str, amount: int) -> int:
        with self._locked(True):
            new = _counter(key, self._data.get(key, b"0"), amount)
            self._write(_SET, key, str(new).encode())
            return new

    def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        with self._locked(True):
            kept = _compare_set_refusal(self._data.get(key), expected)
            if kept is not None:
                return kept
            self._write(_SET, key, desired)
            return desired

    def append(self, key: str, value: bytes) -> None:
        with self._locked(True):
            self._write(_SET, key, self._data.get(key, b"") + value)

    def wait(self, keys: list[str], timeout: float) -> None:
        self._poll(lambda: all(k in self._data for k in keys), keys, timeout, "hash")

    def check(self, keys: list[str]) -> bool:
        with self._locked(False):
            return all(k in self._data for k in keys)

    def delete_key(self, key: str) -> bool:
        with self._locked(True):
            if key not in self._data:
                return False
            self._write(_DELETE, key)
            return True

    def num_keys(self) -> int:
        with self._locked(False):
            return len(self._data)

    def list_keys(self) -> list[str]:
        with self._locked(False):
            return list(self._data)

    def multi_get(self, keys: list[str], timeout: float) -> list[bytes]:
        out: list[bytes] = []

        def ready() -> bool:
            if all(k in self._data for k in keys):
                out[:] = [self._data[k] for k in keys]
                return True
            return False

        self._poll(ready, keys, timeout, "file_get")
        return out

    def multi_set(self, keys: list[str], values: list[bytes]) -> None:
        with self._locked(True):
            for k, v in zip(keys, values):
                self._write(_SET, k, v)

    def _bump(self, key: str, amount: int) -> int:
        """``add`` under the exclusive lock the caller holds."""
        value = _counter(key, self._data.get(key, b"0"), amount)
        self._write(_SET, key, str(value).encode())
        return value

    def close(self, world_size: int) -> None:
        """Count this store out, as torch's FileStore destructor does: the file is removed
        when no store has it open any more (its reference count, which each store adds
        itself to when it opens the file, falls to 0) and ``world_size`` (> 0) stores were
        closed. Nothing is counted when the file was removed or replaced meanwhile."""
        try:
            with self._locked(True):
                st = os.stat(self.path)
                mine = os.fstat(self._fd)
                if (st.st_dev, st.st_ino) != (mine.st_dev, mine.st_ino):
                    return   # (another job's file now: not ours to count in or remove)
                done = self._bump(_CLEANUP_KEY, 1)
                refs = self._bump(_REFCOUNT_KEY, -1)
                if refs <= 0 and world_size > 0 and done >= world_size:
                    os.unlink(self.path)
        except (OSError, ValueError):
            pass   # (best effort, as torch's: a removed file, or a key overwritten by set())
        finally:
            _OPEN.discard(self)
            os.close(self._fd)


#: the tables not closed yet, each given a file description of its own in a forked child
_OPEN: weakref.WeakSet[_FileTable] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for table in list(_OPEN):
        table._reopen_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class FileStore(_TableStore):
    """A store in a file that every process of one machine (or of a shared file system with
    working ``flock``) opens (torch's ``FileStore``).

    With ``world_size`` (> 0), the file is removed when that many stores on it were closed
    (or garbage collected) and none is open any more, so a later job starts empty; with -1
    it is kept.

    Args:
        file_name: the path of the file (created if missing).
        world_size: the number of processes using the file, or -1.

    Example::

        >>> import os, tempfile
        >>> from accelrt.distributed import FileStore
        >>> path = os.path.join(tempfile.mkdtemp(), "store")
        >>> s = FileStore(path, 1); s.set("k", "v"); s.add("n", 3)
        3
        >>> FileStore(path).get("k")
        b'v'
    """

    def __init__(self, file_name: str, world_size: int = -1) -> None:
        if not isinstance(file_name, (str, bytes, os.PathLike)):
            raise TypeError(f"file_name must be a path, got {type_shown(file_name)}")
        world_size = _binding_int(world_size, "world_size", _INT32_MIN, _INT32_MAX, "an int32")
        if world_size == 0 or world_size < -1:
            raise ValueError(f"world_size must be positive or -1, got {world_size}")
        path = os.fsdecode(file_name)
        try:
            table = _FileTable(path)
        except OSError as exc:
            raise DistStoreError(f"FileStore cannot open {path!r}: {exc.strerror}; pass a "
                                 "path in a writable directory") from exc
        super().__init__(table)
        self._path, self._world_size = path, world_size
        table.add(_REFCOUNT_KEY, 1)
        self._finalizer = weakref.finalize(self, table.close, world_size)

    @property
    def path(self) -> str:
        """The store's file."""
        return self._path

    def has_extended_api(self) -> bool:
        return False   # as torch's FileStore (append/multi_get/multi_set still work)

    def clone(self) -> FileStore:
        """Another store on the same file, counted as one more user of it (torch's clone
        opens ``FileStore(path, world_size)`` again)."""
        twin = FileStore(self._path, self._world_size)
        twin._timeout = self._timeout
        return twin

    def close(self) -> None:
        """Close the file (counting this store out; see the class docstring). Also done when
        the store is garbage collected."""
        self._finalizer()

    def __enter__(self) -> FileStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
