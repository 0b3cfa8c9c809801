"""Lifetimes of memory shared with other processes: the producer's registry and the shared
reference slots consumers hold.

Every pickled array gets a *slot* in its producer's reference file, an anonymous ``memfd``
that consumers open through ``/proc/<pid>/fd/<fd>`` (no file is ever created, so nothing is
left behind in ``/dev/shm``). A slot is 32 bytes: a 16-byte random token, an ``int64``
count of pickles in flight (``pending``), a *hold* byte and a *mutex* byte.

* The producer writes the token and ``pending = 1`` when it pickles, and keeps the array's
  memory owner in its registry under that slot.
* A consumer that unpickles takes a shared open-file-description lock (``F_OFD_SETLK``,
  ``F_RDLCK``) on the hold byte for as long as it keeps any array from that pickle, then,
  under the slot's mutex lock, checks the token and takes over the in-flight reference
  (``pending -= 1``).
* :func:`collect` (``ipc_collect()`` of the device modules) frees every entry whose
  ``pending`` is 0 and whose hold byte nobody locks (``F_OFD_GETLK``): it clears the token and
  drops the memory owner, which returns the block to the caching allocator.
* Every new share looks at a bounded number of entries, so that it costs the same however many
  pickles were never received (a walk of the whole registry per share made ``N`` shares cost
  ``O(N**2)``): all of the last :data:`_YOUNG` shares still kept (*young* entries: most
  pickles are received and released soon, and their memory returns at the next share), then
  the next :data:`_STEP` of the older entries in turn, so that an older entry released later
  is freed within ``len(old) / _STEP`` shares (or by the next ``ipc_collect()``).

The kernel drops a process's locks when it exits, so a consumer that crashes releases its
holds by itself. A pickle that is never unpickled keeps its memory until the producer exits
(as torch.multiprocessing's). Locks are taken on a single open file description per process,
so one process holding several arrays of a slot keeps a local count; that description is
closed when the consumer holds no slot of the file any more (its last array from that
producer went), so a consumer of many short-lived producers keeps no descriptor of theirs.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
from collections import deque
from typing import Any

__all__ = ["Claim", "claim", "collect", "pending_count", "share"]

_SLOT = 32
_TOKEN, _PENDING, _HOLD, _MUTEX = 0, 16, 24, 25
_PREFIX = "accelrt-refs-"
_FLOCK = "hhqqi4x"   # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks)
_GROW = 256          # slots added when the file is full
#: a new share looks again at the entries of the last ``_YOUNG`` shares still kept ...
_YOUNG = 16
#: ... and at the next ``_STEP`` older entries, in turn
_STEP = 16
REF = struct.Struct("<II16s")  # pid, fd, file token

class _RefLock:
    """The module's lock, safe against the garbage collector: a :class:`Claim` released by a
    finaliser (``weakref.finalize`` or ``__del__``, run by a collection that may start inside
    any locked region of this module, on the thread that holds the lock) cannot take the lock
    again, so its release is queued and done when the region ends (:meth:`__exit__`, still
    under the lock), when the module's state is whole again. Releases from other threads wait
    for the lock as usual."""

    __slots__ = ("_deferred", "_lock", "_owner")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None        # the thread in a locked region
        self._deferred: list[Claim] = []      # releases queued by that thread's finalisers

    def __enter__(self) -> None:
        self._lock.acquire()
        self._owner = threading.get_ident()

    def __exit__(self, *exc: object) -> None:
        try:
            deferred = self._deferred
            while deferred:          # a release may queue more (a collection inside it)
                deferred.pop()._release_locked()
        finally:
            self._owner = None
            self._lock.release()

    def held_here(self) -> bool:
        """True on the thread inside a locked region."""
        return self._owner == threading.get_ident()

    def defer(self, claim: Claim) -> None:
        """Release ``claim`` when this thread's locked region ends."""
        self._deferred.append(claim)


_lock = _RefLock()


def _lk(fd: int, cmd: int, kind: int, start: int) -> int:
    got = fcntl.fcntl(fd, cmd, struct.pack(_FLOCK, kind, os.SEEK_SET, start, 1, 0))
    return int(struct.unpack(_FLOCK, got)[0])


class _Mutex:
    """The slot's mutex byte, locked on ``fd`` (blocking)."""

    __slots__ = ("fd", "off")

    def __init__(self, fd: int, slot: int) -> None:
        self.fd, self.off = fd, slot * _SLOT + _MUTEX

    def __enter__(self) -> None:
        _lk(self.fd, fcntl.F_OFD_SETLKW, fcntl.F_WRLCK, self.off)

    def __exit__(self, *exc: object) -> None:
        _lk(self.fd, fcntl.F_OFD_SETLK, fcntl.F_UNLCK, self.off)


# ---------------------------------------------------------------------- producer side

class _Producer:
    """This process's reference file and registry (created at the first share)."""

    def __init__(self) -> None:
        self.token = os.urandom(16)
        self.fd = os.memfd_create(_PREFIX + self.token.hex(), os.MFD_CLOEXEC)
        self.pid = os.getpid()
        self.capacity = 0
        self.free: list[int] = []
        self.entries: dict[int, tuple[bytes, Any]] = {}   # slot -> (token, keepalive)
        # the slots of ``entries``: the last shares' (at most _YOUNG, oldest first), and the
        # others in the order the shares' partial walks visit them
        self.young: deque[int] = deque()
        self.old: deque[int] = deque()

    def ref(self) -> bytes:
        return REF.pack(self.pid, self.fd, self.token)

    def grow(self) -> None:
        new = self.capacity + _GROW
        os.ftruncate(self.fd, new * _SLOT)
        self.free.extend(range(new - 1, self.capacity - 1, -1))
        self.capacity = new


_producer: _Producer | None = None


def _after_fork() -> None:
    global _producer, _lock
    # the child is not the producer of its parent's shares, and holds none of the slots its
    # parent holds (the locks belong to the parent's descriptions): its own start fresh, and
    # its copies of the parent's descriptors are closed (the parent's stay open)
    fds = list(_opened.values())
    if _producer is not None:
        fds.append(_producer.fd)
    _producer = None
    _lock = _RefLock()
    _opened.clear()
    _holds.clear()
    _held.clear()
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def share(keepalive: Any) -> tuple[bytes, int, bytes]:
    """Register one pickle of memory kept alive by ``keepalive``: ``(ref file handle, slot,
    slot token)`` for :func:`claim` in the consumer. Frees released entries first: those of
    the last :data:`_YOUNG` shares and the next :data:`_STEP` older ones (a bounded cost)."""
    global _producer
    with _lock:
        p = _producer
        if p is None:
            p = _producer = _Producer()
        else:
            _collect_some(p)
        if not p.free:
            p.grow()
        slot = p.free.pop()
        token = os.urandom(16)
        os.pwrite(p.fd, token + struct.pack("<q", 1), slot * _SLOT + _TOKEN)
        p.entries[slot] = (token, keepalive)
        p.young.append(slot)
        return p.ref(), slot, token


def add_pending(ref: bytes, slot: int, token: bytes) -> None:
    """One more pickle in flight of a slot this process holds (re-sharing received memory)."""
    with _lock:
        fd = _open_ref(ref)
        try:
            with _Mutex(fd, slot):
                got = os.pread(fd, 24, slot * _SLOT)
                if got[:16] != token:
                    raise ValueError("the shared memory was already released by its producer")
                pending = struct.unpack("<q", got[16:24])[0]
                os.pwrite(fd, struct.pack("<q", pending + 1), slot * _SLOT + _PENDING)
        finally:
            _close_unused(ref)


def _in_use(fd: int, off: int) -> bool:
    """Whether the slot at ``off`` has a pickle in flight or a consumer's hold."""
    if struct.unpack("<q", os.pread(fd, 8, off + _PENDING))[0] > 0:
        return True
    return _lk(fd, fcntl.F_OFD_GETLK, fcntl.F_WRLCK, off + _HOLD) != fcntl.F_UNLCK


def _free_if_released(p: _Producer, slot: int) -> bool:
    """Free the entry of ``slot`` if no pickle of it is in flight and no consumer holds it
    (``_lock`` held; the caller takes the slot out of ``p.young``/``p.old``); True if freed.

    A first look without the slot's mutex keeps an entry in use (a pickle never received costs
    one read); only a free-looking one is looked at again under the mutex, where a consumer's
    claim cannot take it between the look and the clearing of its token. A slot already
    freed (left in a line by an interrupted walk) counts as freed."""
    if slot not in p.entries:
        return True
    off = slot * _SLOT
    if _in_use(p.fd, off):
        return False
    with _Mutex(p.fd, slot):
        if _in_use(p.fd, off):
            return False
        os.pwrite(p.fd, bytes(24), off)
    del p.entries[slot]
    p.free.append(slot)
    return True


def _collect_some(p: _Producer) -> None:
    """A new share's bounded collection (``_lock`` held): the young entries, the oldest of
    which become old while more than ``_YOUNG - 1`` stay (room for the new share), then the
    next ``_STEP`` old entries, kept ones going to the back of the line."""
    young, old = p.young, p.old
    # (each slot leaves its line only once it is freed, and a kept one moves to the back in
    # one step: an interruption in between loses no slot from the lines)
    for _ in range(len(young)):
        if _free_if_released(p, young[0]):
            young.popleft()
        else:
            young.rotate(-1)
    while len(young) >= _YOUNG:
        old.append(young.popleft())
    for _ in range(min(_STEP, len(old))):
        if _free_if_released(p, old[0]):
            old.popleft()
        else:
            old.rotate(-1)


def collect() -> int:
    """Free every entry no consumer holds and no pickle in flight names; return how many
    entries are still kept."""
    with _lock:
        p = _producer
        if p is None or p.pid != os.getpid():
            return 0
        try:
            for slot in list(p.entries):
                _free_if_released(p, slot)
        finally:
            # the lines again from the registry (the one record of what is kept), even after
            # an interruption, which would leave freed slots in them: the young entries
            # still kept, then every other in the registry's order
            entries = p.entries
            p.young = deque(dict.fromkeys(slot for slot in p.young if slot in entries))
            young = set(p.young)
            p.old = deque(slot for slot in entries if slot not in young)
        return len(entries)


def pending_count() -> int:
    """Entries the producer still keeps (``ipc_collect`` has not freed them yet)."""
    with _lock:
        p = _producer
        return 0 if p is None or p.pid != os.getpid() else len(p.entries)


# ---------------------------------------------------------------------- consumer side

# each guarded by _lock
_opened: dict[bytes, int] = {}             # ref handle -> fd of this process's description
_holds: dict[tuple[bytes, int], int] = {}  # (ref handle, slot) -> local hold count
_held: dict[bytes, int] = {}               # ref handle -> slots of it in _holds


def _close_unused(ref: bytes) -> None:
    """Close this process's description of ``ref`` once it holds no slot of it (``_lock``
    held): its last array from that producer went. The next array opens it again."""
    if not _held.get(ref):
        fd = _opened.pop(ref, None)
        if fd is not None:
            os.close(fd)


def _open_ref(ref: bytes) -> int:
    fd = _opened.get(ref)
    if fd is not None:
        return fd
    if not isinstance(ref, bytes) or len(ref) != REF.size:
        raise ValueError("not an accelrt shared-memory reference; the pickle is corrupt")
    pid, rfd, token = REF.unpack(ref)
    where = f"/proc/{pid}/fd/{rfd}"
    try:
        if os.readlink(where) != f"/memfd:{_PREFIX}{token.hex()} (deleted)":
            raise OSError
        fd = os.open(where, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        raise ValueError(f"the producer process {pid} of this shared memory has exited (its "
                         f"reference file {where} is gone), or the handle is forged; keep the "
                         "producer alive until consumers have received what it sent") from None
    _opened[ref] = fd
    return fd


class Claim:
    """A consumer's hold on one slot; :meth:`release` (or collection) ends it once."""

    __slots__ = ("__weakref__", "key", "token")

    def __init__(self, key: tuple[bytes, int], token: bytes) -> None:
        self.key = key
        self.token = token

    def release(self) -> None:
        if self.key[1] < 0:
            return
        if _lock.held_here():
            # a finaliser run by a collection inside a locked region of this thread: the lock
            # cannot be taken again (it would wait for ever), and the state may be half-way
            _lock.defer(self)
            return
        with _lock:
            self._release_locked()

    def _release_locked(self) -> None:
        """:meth:`release`'s work (``_lock`` held)."""
        key, self.key = self.key, (b"", -1)
        if key[1] < 0:
            return
        n = _holds.get(key, 0) - 1
        if n > 0:
            _holds[key] = n
            return
        if _holds.pop(key, None) is None:
            return   # (a hold of the parent's, in a forked child: never taken here)
        ref = key[0]
        left = _held.get(ref, 1) - 1
        if left > 0:
            _held[ref] = left
        else:
            _held.pop(ref, None)
        fd = _opened.get(ref)
        if fd is not None:
            try:
                _lk(fd, fcntl.F_OFD_SETLK, fcntl.F_UNLCK, key[1] * _SLOT + _HOLD)
            except OSError:
                pass
        _close_unused(ref)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001, S110 - never raise from a finaliser
            pass


def claim(ref: bytes, slot: int, token: bytes) -> Claim:
    """Hold ``slot`` of the producer's reference file and take over its in-flight pickle.

    Raises:
        ValueError: the producer exited, already released the memory, or the handle is
            forged (wrong token or slot).
    """
    if not isinstance(slot, int) or slot < 0 or not isinstance(token, bytes):
        raise ValueError("not an accelrt shared-memory reference; the pickle is corrupt")
    with _lock:
        fd = _open_ref(ref)
        key = (ref, slot)
        held = _holds.get(key, 0)
        locked = False
        try:
            if os.fstat(fd).st_size < (slot + 1) * _SLOT:
                raise ValueError(f"slot {slot} does not exist in the producer's reference "
                                 "file; the handle is forged or corrupt")
            if not held:
                _lk(fd, fcntl.F_OFD_SETLK, fcntl.F_RDLCK, slot * _SLOT + _HOLD)
                locked = True
            with _Mutex(fd, slot):
                got = os.pread(fd, 24, slot * _SLOT)
                if got[:16] != token:
                    raise ValueError("the producer already released this shared memory (every "
                                     "consumer had dropped it and ipc_collect() ran), or the "
                                     "handle is forged; send the array again")
                pending = struct.unpack("<q", got[16:24])[0]
                if pending > 0:
                    os.pwrite(fd, struct.pack("<q", pending - 1), slot * _SLOT + _PENDING)
        except BaseException:
            if locked:
                _lk(fd, fcntl.F_OFD_SETLK, fcntl.F_UNLCK, slot * _SLOT + _HOLD)
            _close_unused(ref)
            raise
        _holds[key] = held + 1
        if not held:
            _held[ref] = _held.get(ref, 0) + 1
    return Claim(key, token)
