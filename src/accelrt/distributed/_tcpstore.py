""":class:`TCPStore` and its transport: the master serves the store's table
(:class:`~accelrt.distributed._store._MemoryTable`) to its clients.

The transport is Python's own: ``socketserver`` (a thread per client) and
``multiprocessing.connection``'s length-prefixed frames (``send_bytes``/``recv_bytes``); a
request is a frame holding a list of byte strings, never a pickle, so a peer can only read and
write keys.

Example::

    >>> from accelrt.distributed._tcpstore import _pack, _unpack
    >>> _unpack(_pack([b"set", b"k", b"v"]))
    [b'set', b'k', b'v']
"""

from __future__ import annotations

import datetime
import errno
import math
import os
import socket
import socketserver
import struct
import threading
import time
import weakref
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from .._errors import type_shown
from .._fork import reinit_after_fork
from ._errors import DistNetworkError, DistStoreError, QueueEmptyError
from ._store import (_INT32_MAX, _INT32_MIN, DEFAULT_STORE_TIMEOUT, _binding_int, _flag, _key,
                     _MemoryTable, _Table, _TableStore, _timedelta)

__all__ = ["TCPStore"]

_PROTOCOL = b"accelrt-store/1"


# ---------------------------------------------------------------------------- TCP transport
def _pack(fields: Sequence[bytes]) -> bytes:
    return b"".join(struct.pack("!I", len(f)) + f for f in fields)


def _unpack(frame: bytes) -> list[bytes]:
    out, pos, n = [], 0, len(frame)
    while pos < n:
        if pos + 4 > n:
            raise ValueError("truncated store message")
        (size,) = struct.unpack_from("!I", frame, pos)
        pos += 4
        if pos + size > n:
            raise ValueError("truncated store message")
        out.append(frame[pos:pos + size])
        pos += size
    return out


def _ms(seconds: float) -> bytes:
    return str(int(seconds * 1000)).encode()


def _serve_one(table: _MemoryTable, req: list[bytes]) -> list[bytes]:
    """Run one decoded request on ``table``; the reply's fields (without the status)."""
    op, args = req[0].decode(), req[1:]

    def key(i: int) -> str:
        return args[i].decode()

    def secs(i: int) -> float:
        return int(args[i]) / 1000.0

    if op == "set":
        table.set(key(0), args[1])
        return []
    if op == "get":
        return [table.get(key(0), secs(1))]
    if op == "add":
        return [str(table.add(key(0), int(args[1]))).encode()]
    if op == "compare_set":
        return [table.compare_set(key(0), args[1], args[2])]
    if op == "append":
        table.append(key(0), args[1])
        return []
    if op == "wait":
        table.wait([a.decode() for a in args[1:]], secs(0))
        return []
    if op == "check":
        return [b"1" if table.check([a.decode() for a in args]) else b"0"]
    if op == "delete_key":
        return [b"1" if table.delete_key(key(0)) else b"0"]
    if op == "num_keys":
        return [str(table.num_keys()).encode()]
    if op == "list_keys":
        return [k.encode() for k in table.list_keys()]
    if op == "multi_get":
        return table.multi_get([a.decode() for a in args[1:]], secs(0))
    if op == "multi_set":
        half = len(args) // 2
        table.multi_set([a.decode() for a in args[:half]], list(args[half:]))
        return []
    if op == "queue_push":
        table.queue_push(key(0), args[1])
        return []
    if op == "queue_pop":
        return [table.queue_pop(key(0), args[1] == b"1", secs(2))]
    if op == "queue_len":
        return [str(table.queue_len(key(0))).encode()]
    if op == "hello":
        return [_PROTOCOL]
    raise ValueError(f"unknown store request {op!r}")


#: exception kinds a server sends back, and the class a client raises for each
_ERRORS: dict[bytes, type[Exception]] = {
    b"store": DistStoreError, b"queue_empty": QueueEmptyError, b"value": ValueError,
    b"type": TypeError, b"not_implemented": NotImplementedError,
}


def _error_kind(exc: Exception) -> bytes:
    for kind, cls in (((b"queue_empty", QueueEmptyError), (b"store", DistStoreError),
                       (b"not_implemented", NotImplementedError), (b"type", TypeError),
                       (b"value", ValueError))):
        if isinstance(exc, cls):
            return kind
    return b"store"


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        conn = Connection(os.dup(self.request.fileno()))
        try:
            while True:
                try:
                    frame = conn.recv_bytes()
                except (EOFError, OSError):
                    return
                try:
                    reply = [b"ok", *_serve_one(self.server.table, _unpack(frame))]
                except Exception as exc:   # sent back; the client raises it
                    reply = [b"err", _error_kind(exc), str(exc).encode()]
                try:
                    conn.send_bytes(_pack(reply))
                except OSError:
                    return
        finally:
            conn.close()


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """The TCPStore master's server: a thread per client over one :class:`_MemoryTable`."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock.getsockname()[:2], _Handler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.address_family = sock.family
        self.table = _MemoryTable("tcp")
        self.port: int = sock.getsockname()[1]
        self.users = 0                                   # guarded by _SERVERS_LOCK
        self._open: set[socket.socket] = set()           # guarded by _open_lock
        self._open_lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"accelrt-TCPStore:{self.port}", daemon=True)
        self._thread.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def stop(self) -> None:
        self.table.close()
        self.shutdown()
        self.server_close()
        with self._open_lock:
            conns = list(self._open)
        for s in conns:   # end the client threads (their clients see the connection close)
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


_SERVERS: dict[int, _Server] = {}      # multi-tenant servers by port; guarded by _SERVERS_LOCK
_SERVERS_LOCK = reinit_after_fork(threading.Lock())
#: The master stores of this process (a forked child makes each a client: see
#: :func:`_masters_after_fork`)
_MASTERS: weakref.WeakSet[TCPStore] = weakref.WeakSet()
#: The client tables of this process (a forked child drops their connections: see
#: :func:`_masters_after_fork`)
_CLIENTS: weakref.WeakSet[_RemoteTable] = weakref.WeakSet()


def _local_address(sock: socket.socket) -> str:
    """The address a client on this host reaches the server listening on ``sock`` at: the
    address it is bound to (a ``master_listen_fd`` socket may be bound to ``::1`` or
    ``127.0.0.2`` only), or the loopback for a wildcard (IPv4's, unless the socket is
    IPv6-only)."""
    try:
        name = sock.getsockname()
    except OSError:   # closed: the store's own error comes at the first request
        return "127.0.0.1"
    host = str(name[0])
    if sock.family == socket.AF_INET6:
        if host in ("::", "::ffff:0.0.0.0"):
            try:
                v6only = sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
            except OSError:
                v6only = 0
            return "::1" if v6only else "127.0.0.1"
        if host.startswith("::ffff:"):   # an IPv4-mapped address
            return host[len("::ffff:"):]
        scope = name[3] if len(name) > 3 else 0
        return f"{host}%{scope}" if scope and "%" not in host else host
    return "127.0.0.1" if host == "0.0.0.0" else host


def _masters_after_fork() -> None:
    """In a forked child, each master store of the parent becomes a client of the parent's
    server (as torch's master is a client of its own server, whose socket the child shares):
    the child has no server thread, so its copy of the master's table took writes the parent
    never saw, and closing the store at the child's exit waited for ever for a server loop
    that does not run there. The child's copies of the server's sockets are closed (the
    parent's stay open).

    Every client store's table drops the connection it inherited (the child's copy of its
    descriptor is closed; the parent's stays open) and connects again at its first request:
    two processes writing requests into one connection read each other's replies (a child
    forked again from a child that had used the store, or from a parent using a client)."""
    _SERVERS.clear()
    for table in list(_CLIENTS):
        table._after_fork()
    for store in list(_MASTERS):
        server = store._server
        if server is None:
            continue
        store._finalizer.detach()
        store._server = None
        host = _local_address(server.socket)   # (before its descriptor is closed here)
        for sock in [server.socket, *server._open]:
            try:
                sock.close()   # this process's descriptor only: the parent keeps serving
            except OSError:
                pass
        timeout = getattr(store, "_timeout", DEFAULT_STORE_TIMEOUT)   # (set after the table)
        remote = _RemoteTable(host, store._port, timeout.total_seconds(),
                              connect=False)   # (connects at its first request)
        store._table = remote
        store._finalizer = weakref.finalize(store, remote.close)
    _MASTERS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_masters_after_fork)


def _listen(port: int, fd: int | None, use_libuv: bool = True) -> socket.socket:
    if fd is not None:
        dup = -1
        try:
            dup = os.dup(fd)
            sock = socket.socket(fileno=dup)
        except OSError as exc:   # torch 2.15's words for master_listen_fd
            if dup >= 0:
                os.close(dup)
            raise DistNetworkError(f"Failed to open existing socket. socket: {fd}, code: "
                                   f"{-(exc.errno or 0)}, name: "
                                   f"{errno.errorcode.get(exc.errno or 0, '?')}, message: "
                                   f"{exc.strerror}; pass master_listen_fd= a listening "
                                   "socket's file descriptor") from exc
        try:
            # a socket that is bound but not listening yet is served too (torch listens on
            # it); listen() on a listening socket changes nothing else
            sock.listen()
        except OSError as exc:
            sock.close()
            raise DistNetworkError(f"Failed to listen on the existing socket {fd}: "
                                   f"{exc.strerror}; pass master_listen_fd= a bound TCP "
                                   "socket's file descriptor") from exc
        bound = sock.getsockname()[1]
        if port != 0 and bound != port:
            # torch 2.15 refuses a socket on another port than `port` (the clients, told
            # `port`, would wait for a master that is not there): DistStoreError from its
            # libuv server, DistNetworkError from the other
            sock.close()
            cls = DistStoreError if use_libuv else DistNetworkError
            raise cls(f"listen fd {fd} is bound to port {bound}, expected to be bound to port "
                      f"{port}; pass port=0 or the port of the master_listen_fd socket")
        return sock
    try:
        if socket.has_dualstack_ipv6():
            return socket.create_server(("", port), family=socket.AF_INET6,
                                        dualstack_ipv6=True)
        return socket.create_server(("", port))
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, "?")
        raise DistNetworkError(f"The server socket has failed to listen on any local network "
                               f"address. port: {port}, code: {-(exc.errno or 0)}, name: "
                               f"{name}, message: {exc.strerror}") from exc


def _acquire_server(port: int, multi_tenant: bool, fd: int | None,
                    use_libuv: bool = True) -> _Server:
    with _SERVERS_LOCK:
        server = _SERVERS.get(port) if multi_tenant and port else None
        if server is None:
            server = _Server(_listen(port, fd, use_libuv))
            if multi_tenant:
                _SERVERS[server.port] = server
        server.users += 1
        return server


def _release_server(server: _Server) -> None:
    with _SERVERS_LOCK:
        server.users -= 1
        if server.users > 0:
            return
        if _SERVERS.get(server.port) is server:
            del _SERVERS[server.port]
    server.stop()


def _connect_error(host: str, port: int, seconds: float, exc: OSError) -> DistNetworkError:
    return DistNetworkError(
        f"The client socket has timed out after {seconds * 1000:.0f}ms while trying to "
        f"connect to ({host}, {port}): {exc}. Check that the master store (rank 0) is running "
        "and that MASTER_ADDR and MASTER_PORT name it")


def _resolve(host: str, port: int, seconds: float) -> None:
    """Resolve ``host``, retrying (a DNS name may appear late) until ``seconds`` passed."""
    deadline = time.monotonic() + seconds
    delay = 0.01
    while True:
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            return
        except (socket.gaierror, UnicodeError) as exc:
            if time.monotonic() + delay > deadline:
                raise _connect_error(host, port, seconds,
                                     exc if isinstance(exc, OSError) else OSError(str(exc))
                                     ) from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


def _check_connectable(host: str, port: int, timeout: datetime.timedelta,
                       resolve: bool) -> None:
    """Refuse a ``timeout`` under a millisecond as torch 2.15's client (the master is a client
    of its own server too) fails with it: it times out connecting to ``(host, port)`` at once;
    with ``resolve`` (the master), then resolve ``host`` as that client does, within
    ``timeout``.

    Raises:
        DistNetworkError: either fails (torch's words, the port the connection is made to).
    """
    ms = int(timeout / datetime.timedelta(milliseconds=1))   # (torch's, truncated)
    if ms <= 0:
        raise DistNetworkError(
            f"The client socket has timed out after {ms}ms while trying to connect to "
            f"({host}, {port}). A TCPStore's timeout bounds its connection too: give "
            "at least a millisecond (e.g. timeout=datetime.timedelta(seconds=30))")
    if resolve:
        # (a host name the master cannot resolve fails as a client's connection does)
        _resolve(host, port, timeout.total_seconds())


#: the most bytes a TCPStore master's answer to ``hello`` takes (``ok`` and the protocol)
_HELLO_MAX = 256


def _hello(sock: socket.socket, wait: float, host: str, port: int) -> list[bytes] | None:
    """Greet the TCPStore master on ``sock`` (``multiprocessing.connection``'s framing, as
    its :class:`Connection`) and read its answer within ``wait`` seconds and a greeting's
    bytes: a server of another protocol (an HTTP server on ``MASTER_PORT``) must neither
    keep the client reading for ever nor have it allocate what its bytes announce. The
    answer's fields; None: no answer in time; ``[]``: the connection closed.

    Raises:
        DistNetworkError: the answer is no TCPStore's (torch's client: "Ping failed,
            invalid value returned from server").
    """
    end = time.monotonic() + wait
    frame = _pack([b"hello"])

    def exactly(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            sock.settimeout(max(end - time.monotonic(), 0.001))
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    try:
        sock.settimeout(wait)
        sock.sendall(struct.pack("!i", len(frame)) + frame)
        head = exactly(4)
        (size,) = struct.unpack("!i", head)
        body = exactly(size) if 0 <= size <= _HELLO_MAX else None
        reply = None if body is None else _unpack(body)
    except TimeoutError:
        return None
    except (EOFError, OSError):
        return []
    except ValueError:   # a truncated frame of _unpack
        reply = None
    finally:
        sock.settimeout(None)
    if reply is None:
        raise DistNetworkError(f"{host}:{port} is not an accelrt TCPStore: its answer to the "
                               f"greeting ({head!r}...) is no store's (Ping failed, invalid "
                               "value returned from server). Check that MASTER_ADDR and "
                               "MASTER_PORT name the master store (rank 0)")
    return reply


class _RemoteTable(_Table):
    """A client of a TCPStore master: every operation is one request and one reply."""

    def __init__(self, host: str, port: int, timeout: float, connect: bool = True) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._lock = reinit_after_fork(threading.Lock())
        # None after a request went unanswered in time (guarded by _lock): its late reply
        # could be read as the answer to the next request, so the next one reconnects
        # (without ``connect``: the first request connects)
        self._conn: Connection | None = (self._greeted(time.monotonic() + timeout)
                                         if connect else None)
        _CLIENTS.add(self)

    def _after_fork(self) -> None:
        """In a forked child: no connection (the parent's, which another thread may have
        been using at the fork, stays the parent's; the lock is free again:
        ``reinit_after_fork``)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()   # this process's descriptor only
            except OSError:
                pass

    def _greeted(self, deadline: float) -> Connection:
        """A connection whose greeting was answered. As torch's client retries "connect/
        validate" until its timeout, a connection closed during the greeting is made again:
        a master closing as this client came (a world destroyed and made again on the same
        ``MASTER_PORT``, where rank 0 closes its old store while the others already connect)
        is followed by the master of the next world."""
        delay = 0.01
        while True:
            sock = self._connect(deadline)
            reply = _hello(sock, max(deadline - time.monotonic(), 1.0), self.host, self.port)
            if reply:
                if reply != [b"ok", _PROTOCOL]:
                    sock.close()
                    raise DistNetworkError(f"{self.host}:{self.port} is not an accelrt "
                                           "TCPStore")
                return Connection(sock.detach())
            sock.close()
            if reply is None:
                raise DistNetworkError(f"the TCPStore server at {self.host}:{self.port} did "
                                       "not answer hello in time")
            if time.monotonic() + delay > deadline:
                raise DistNetworkError(
                    f"the connection to the TCPStore server at {self.host}:{self.port} was "
                    "closed during hello: did the master store (rank 0) exit or crash?")
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _reconnect_locked(self) -> Connection:
        """A new connection, greeted, replacing one dropped after an unanswered request (or
        inherited by a forked child: :meth:`_after_fork`)."""
        sock = self._connect()
        reply = _hello(sock, max(self.timeout, 1.0), self.host, self.port)
        if reply != [b"ok", _PROTOCOL]:
            sock.close()
            raise DistNetworkError(f"could not (re)connect to the TCPStore server at "
                                   f"{self.host}:{self.port} (after an unanswered request, "
                                   "or in a forked process): did the master store exit?")
        conn = Connection(sock.detach())
        self._conn = conn
        return conn

    def _connect(self, deadline: float | None = None) -> socket.socket:
        if deadline is None:
            deadline = time.monotonic() + self.timeout
        delay = 0.01
        while True:
            left = deadline - time.monotonic()
            try:
                sock = socket.create_connection((self.host, self.port),
                                                timeout=max(min(left, 5.0), 0.01))
                break
            except OSError as exc:
                if time.monotonic() + delay > deadline:
                    raise _connect_error(self.host, self.port, self.timeout, exc) from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _call(self, fields: Sequence[str | bytes], wait: float = 0.0) -> list[bytes]:
        req = _pack([f.encode() if isinstance(f, str) else f for f in fields])
        with self._lock:
            conn = self._conn if self._conn is not None else self._reconnect_locked()
            try:
                conn.send_bytes(req)
                # the server answers a blocking request when its own timeout ends
                if not conn.poll(wait + max(self.timeout, 1.0)):
                    # its reply may still come: never let it answer a later request
                    self._conn = None
                    conn.close()
                    raise DistNetworkError(f"the TCPStore server at {self.host}:{self.port} "
                                           f"did not answer {fields[0]!s} in time")
                reply = _unpack(conn.recv_bytes())
            except (EOFError, OSError) as exc:
                raise DistNetworkError(
                    f"the connection to the TCPStore server at {self.host}:{self.port} was "
                    f"closed during {fields[0]!s}: did the master store (rank 0) exit or "
                    "crash?") from exc
        if reply[0] == b"ok":
            return reply[1:]
        raise _ERRORS.get(reply[1], DistStoreError)(reply[2].decode())

    def close(self) -> None:
        conn = self._conn   # not under _lock: a blocked request must not delay the close
        if conn is not None:
            conn.close()

    def set(self, key: str, value: bytes) -> None:
        self._call(["set", key, value])

    def get(self, key: str, timeout: float) -> bytes:
        return self._call(["get", key, _ms(timeout)], timeout)[0]

    def add(self, key: str, amount: int) -> int:
        return int(self._call(["add", key, str(amount)])[0])

    def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        return self._call(["compare_set", key, expected, desired])[0]

    def append(self, key: str, value: bytes) -> None:
        self._call(["append", key, value])

    def wait(self, keys: list[str], timeout: float) -> None:
        self._call(["wait", _ms(timeout), *keys], timeout)

    def check(self, keys: list[str]) -> bool:
        return self._call(["check", *keys]) == [b"1"]

    def delete_key(self, key: str) -> bool:
        return self._call(["delete_key", key]) == [b"1"]

    def num_keys(self) -> int:
        return int(self._call(["num_keys"])[0])

    def list_keys(self) -> list[str]:
        return [k.decode() for k in self._call(["list_keys"])]

    def multi_get(self, keys: list[str], timeout: float) -> list[bytes]:
        return self._call(["multi_get", _ms(timeout), *keys], timeout)

    def multi_set(self, keys: list[str], values: list[bytes]) -> None:
        self._call(["multi_set", *keys, *values])

    def queue_push(self, key: str, value: bytes) -> None:
        self._call(["queue_push", key, value])

    def queue_pop(self, key: str, block: bool, timeout: float) -> bytes:
        return self._call(["queue_pop", key, b"1" if block else b"0", _ms(timeout)],
                          timeout)[0]

    def queue_len(self, key: str) -> int:
        return int(self._call(["queue_len", key])[0])


_INIT_KEY = "init/"

#: the words torch 2.15's getCvarBool reads (after lowering the case)
_ENV_TRUE, _ENV_FALSE = ("1", "true", "t", "yes", "y"), ("0", "false", "f", "no", "n")


def _agent_store_serves(port: int) -> bool:
    """Whether a master that could not listen on ``port`` joins the store there instead, as
    torch 2.15's TCPStore does: ``TORCHELASTIC_USE_AGENT_STORE`` is true (torchelastic's
    agent serves the store) and ``MASTER_PORT`` is ``port``.

    Raises:
        RuntimeError: ``TORCHELASTIC_USE_AGENT_STORE`` is no boolean (torch's words).
    """
    flag = os.environ.get("TORCHELASTIC_USE_AGENT_STORE")
    if flag is None:
        return False
    if flag.lower() not in _ENV_TRUE + _ENV_FALSE:
        raise RuntimeError("Invalid value for environment variable: "
                           "TORCHELASTIC_USE_AGENT_STORE (use 1/true/t/yes/y or 0/false/f/no/n; "
                           f"got {flag!r})")
    return flag.lower() in _ENV_TRUE and os.environ.get("MASTER_PORT") == str(port)


class TCPStore(_TableStore):
    """A store served over TCP by the master process (torch's ``TCPStore``).

    The master (``is_master=True``) listens on ``port`` on every interface (``port=0``: a free
    port, read it from :attr:`port`) and holds the data; the others connect to
    ``host_name:port``, retrying until ``timeout``. With ``world_size``, each store counts
    itself in, and the master waits (``wait_for_workers``) until ``world_size`` stores joined.

    Args:
        host_name: the master's host name or address (clients connect to it).
        port: the master's port.
        world_size: the number of stores that will join (None: not counted).
        is_master: serve the store from this process.
        timeout: the default timeout of the store's operations, and of joining.
        wait_for_workers: on the master, wait until ``world_size`` stores joined.
        multi_tenant: masters of one process on the same port share one server (as
            ``init_process_group``'s ``env://`` and ``tcp://`` do).
        master_listen_fd: a bound (or listening) socket to serve from (Linux); the caller
            keeps its own descriptor. With a non-zero ``port``, it must be bound to ``port``.
        use_libuv: accepted for compatibility: the server is Python's ``socketserver``.

    Raises:
        TypeError: an argument of the wrong type, or an integer beyond what torch 2.15's
            binding reads (``port`` outside ``[0, 65535]``, ``world_size`` or
            ``master_listen_fd`` outside int32), as torch's binding refuses them.
        ValueError: ``world_size=0``, or ``port=0`` on a client.
        DistNetworkError: the master could not listen (or use ``master_listen_fd``), or a
            client could not connect within ``timeout``; ``timeout`` is under a millisecond
            (zero or negative), on a client or the master, as torch 2.15's store, which
            times out connecting at once (a master once it listens: the message names the
            port it bound).
        DistStoreError: the master's wait for the workers timed out; or ``master_listen_fd``
            is bound to another port than a non-zero ``port`` (torch 2.15's libuv words;
            ``DistNetworkError`` with ``use_libuv=False``, as torch's other server).

    Example::

        >>> import datetime
        >>> from accelrt.distributed import TCPStore
        >>> master = TCPStore("127.0.0.1", 0, 1, True, datetime.timedelta(seconds=30))
        >>> client = TCPStore("127.0.0.1", master.port, timeout=datetime.timedelta(seconds=30))
        >>> client.set("first_key", "first_value"); master.get("first_key")
        b'first_value'
        >>> client.close(); master.close()
    """

    def __init__(self, host_name: str, port: int, world_size: int | None = None,
                 is_master: bool = False,
                 timeout: datetime.timedelta = DEFAULT_STORE_TIMEOUT,
                 wait_for_workers: bool = True, multi_tenant: bool = False,
                 master_listen_fd: int | None = None, use_libuv: bool = True) -> None:
        host_name = _key(host_name, "host_name")
        if not isinstance(is_master, (bool, np.bool_)):
            # (torch's binding takes True, False or a numpy bool: is_master="False" was a
            # truthy string, and made a second master)
            raise TypeError(f"is_master must be a bool, got {type_shown(is_master)}")
        wait_for_workers, multi_tenant, use_libuv = (
            _flag(wait_for_workers, "wait_for_workers"), _flag(multi_tenant, "multi_tenant"),
            _flag(use_libuv, "use_libuv"))
        # torch 2.15's binding reads port as a uint16, world_size and master_listen_fd as
        # ints (int32): a value beyond them is its TypeError, not a ValueError
        port = _binding_int(port, "port", 0, 2 ** 16 - 1, "a uint16")
        if master_listen_fd is not None:
            master_listen_fd = _binding_int(master_listen_fd, "master_listen_fd", _INT32_MIN,
                                            _INT32_MAX, "an int32")
        if world_size is not None:
            world_size = _binding_int(world_size, "world_size", _INT32_MIN, _INT32_MAX, "an int32")
            if world_size == 0:
                raise ValueError("TCPStore world size cannot be 0")
            if world_size < 0:   # torch's -1: the number of workers is not known
                world_size = None
        if not is_master and port == 0 and master_listen_fd is None:
            raise ValueError("port=0 picks a free port on the master only: a client "
                             "(is_master=False) needs the master's port (master.port)")
        timeout = _timedelta(timeout)
        seconds = timeout.total_seconds()
        self._server: _Server | None = None
        self._host, self._libuv = host_name, bool(use_libuv)
        self._world_size, self._multi_tenant = world_size, bool(multi_tenant)
        table: _Table
        if is_master:
            try:
                self._server = _acquire_server(port, bool(multi_tenant), master_listen_fd,
                                               bool(use_libuv))
            except DistNetworkError:
                if master_listen_fd is not None or not _agent_store_serves(port):
                    raise
                # torchelastic's agent serves the store at MASTER_PORT: join it (torch 2.15)
                is_master = False
        if not is_master:
            _check_connectable(host_name, port, timeout, False)
        if is_master:
            assert self._server is not None
            try:
                # torch's master is a client of its own server too, once it listens: it
                # connects to the port bound (the one picked for port=0)
                _check_connectable(host_name, self._server.port, timeout, True)
            except BaseException:
                _release_server(self._server)
                raise
            self._port = self._server.port
            table = self._server.table
            self._finalizer: weakref.finalize[Any, Any] = weakref.finalize(
                self, _release_server, self._server)
            _MASTERS.add(self)
        else:
            self._port = port
            remote = _RemoteTable(host_name, port, seconds)
            table = remote
            self._finalizer = weakref.finalize(self, remote.close)
        super().__init__(table)
        self._timeout = timeout
        if world_size is not None and wait_for_workers:
            # (as torch 2.15: a store made with wait_for_workers=False is not counted in)
            self._table.add(_INIT_KEY, 1)
            if is_master:
                self._wait_workers(world_size, seconds)

    def _wait_workers(self, world_size: int, seconds: float) -> None:
        assert self._server is not None
        start = time.monotonic()
        joined = self._server.table.wait_count(_INIT_KEY, world_size, seconds)
        if joined < world_size:
            self.close()
            # torch 2.15 writes whole seconds, the time it waited
            waited = max(math.ceil(time.monotonic() - start), 1)
            raise DistStoreError(f"Timed out after {waited} seconds waiting for clients. "
                                 f"{joined}/{world_size} clients joined.")

    @property
    def host(self) -> str:
        """The master's host name, as given."""
        return self._host

    @property
    def port(self) -> int:
        """The master's port (the one it picked for ``port=0``)."""
        return self._port

    @property
    def libuvBackend(self) -> bool:  # noqa: N802 (torch's name)
        """False: the server is Python's ``socketserver``, not libuv."""
        return False

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        super().set_timeout(timeout)
        if isinstance(self._table, _RemoteTable):
            self._table.timeout = self._timeout.total_seconds()

    def list_keys(self) -> list[str]:
        return [k for k in super().list_keys() if k != _INIT_KEY]

    def clone(self) -> TCPStore:
        """A new client connection to the same master."""
        host = self._host if self._server is None else _local_address(self._server.socket)
        twin = TCPStore(host, self._port, None, False, self._timeout)
        twin._host = self._host
        return twin

    def close(self) -> None:
        """Close the connection; on the master, stop serving (when the last master store of
        a multi-tenant server closes). Also done when the store is garbage collected."""
        self._finalizer()

    def __enter__(self) -> TCPStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        role = "master" if self._server is not None else "client"
        return f"TCPStore({role}, {self._host}:{self._port})"
