"""Rendezvous: from ``init_method`` (``env://``, ``tcp://host:port``, ``file:///path``) to a
store, this process's rank and the world size, as torch's ``torch.distributed.rendezvous``.

A URL is first read into a :class:`RendezvousPlan` (no network, no file): every argument error
surfaces before any process waits for another. :meth:`RendezvousPlan.connect` then makes the
store: a :class:`~accelrt.distributed.TCPStore` served by rank 0 (``env://``, ``tcp://``) or a
:class:`~accelrt.distributed.FileStore` (``file://``).

Example::

    >>> from accelrt.distributed._rendezvous import plan
    >>> p = plan("tcp://10.0.0.1:29500", rank=1, world_size=4)
    >>> p.scheme, p.host, p.port, p.rank, p.world_size
    ('tcp', '10.0.0.1', 29500, 1, 4)
"""

from __future__ import annotations

import datetime
import numbers
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse, urlunparse

from ._group import DEFAULT_TIMEOUT
from ._filestore import FileStore
from ._store import Store
from ._tcpstore import TCPStore
from .._errors import type_shown

__all__ = ["RendezvousPlan", "plan", "register_rendezvous_handler", "rendezvous", "share"]


def _error(scheme: str, msg: str) -> ValueError:
    return ValueError(f"Error initializing torch.distributed using {scheme}:// rendezvous: "
                      f"{msg}")


@dataclass(frozen=True, kw_only=True)
class RendezvousPlan:
    """Where the ranks meet: ``scheme`` with its ``host``/``port`` or ``path``."""

    scheme: str
    rank: int
    world_size: int
    host: str | None = None
    port: int | None = None
    path: str | None = None

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise _error(self.scheme, f"world_size must be positive, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise _error(self.scheme, f"rank {self.rank} is out of range for world size "
                         f"{self.world_size}")
        if self.port is not None and not 0 <= self.port < 2 ** 16:
            raise ValueError(f"port must have value from 0 to 65535 but was {self.port}.")

    def connect(self, timeout: datetime.timedelta) -> Store:
        """The store: rank 0 serves a multi-tenant TCPStore and waits (up to ``timeout``)
        for the others to join; or the FileStore at ``path``."""
        if self.scheme == "file":
            assert self.path is not None
            return FileStore(self.path, self.world_size)
        assert self.host is not None and self.port is not None
        return TCPStore(self.host, self.port, self.world_size, self.rank == 0, timeout,
                        multi_tenant=True)


def _query(query: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in query.split("&") if "=" in pair)


def plan(url: str, rank: int = -1, world_size: int = -1) -> RendezvousPlan:
    """Read ``url`` (with ``rank``/``world_size`` given to ``init_process_group``, -1 when
    not) into a plan; ``env://`` reads ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
    ``MASTER_PORT``.

    Raises:
        ValueError: an unknown scheme, or a missing rank, world size, port, path or variable
            (torch's "Error initializing torch.distributed using ..." messages).
    """
    if not isinstance(url, str):
        raise TypeError(f"init_method must be a str, got {type_shown(url)}")
    parsed = urlparse(url)
    scheme, query = parsed.scheme, _query(parsed.query)

    def number(name: str, given: int, env: str | None) -> int:
        if given != -1:
            return int(given)
        if name in query:
            return int(query[name])
        if env is not None:
            value = os.environ.get(env)
            if not value:
                raise _error(scheme, f"environment variable {env} expected, but not set")
            return int(value)
        raise _error(scheme, f"{name.replace('_', ' ')} parameter missing")

    if scheme == "env":
        r = number("rank", rank, "RANK")
        n = number("world_size", world_size, "WORLD_SIZE")
        host = os.environ.get("MASTER_ADDR")
        if not host:
            raise _error(scheme, "environment variable MASTER_ADDR expected, but not set")
        port = os.environ.get("MASTER_PORT")
        if not port:
            raise _error(scheme, "environment variable MASTER_PORT expected, but not set")
        return RendezvousPlan(scheme=scheme, rank=r, world_size=n, host=host, port=int(port))
    if scheme == "tcp":
        if parsed.port is None:
            raise _error(scheme, "port number missing")
        if not parsed.hostname:
            raise _error(scheme, "host name missing")
        return RendezvousPlan(scheme=scheme, rank=number("rank", rank, None),
                              world_size=number("world_size", world_size, None),
                              host=parsed.hostname, port=parsed.port)
    if scheme == "file":
        if not parsed.path:
            raise _error(scheme, "path missing")
        return RendezvousPlan(scheme=scheme, rank=number("rank", rank, None),
                              world_size=number("world_size", world_size, None),
                              path=parsed.path)
    raise ValueError(f"init_method {url!r} is not supported: use 'env://' (RANK, WORLD_SIZE, "
                     "MASTER_ADDR, MASTER_PORT, as torchrun sets them), 'tcp://host:port', "
                     "'file:///path', or 'mpi://' (launch with mpiexec); or pass store=")


def share(store: Store, key: str, rank: int, make: Callable[[], bytes]) -> bytes:
    """Rank 0 runs ``make()`` and publishes the result under ``key``; every rank returns it
    (the others wait for it up to the store's timeout). This is how NCCL's unique id reaches
    the ranks, as torch's ProcessGroupNCCL does.

    Example::

        >>> from accelrt.distributed import HashStore
        >>> from accelrt.distributed._rendezvous import share
        >>> s = HashStore()
        >>> share(s, "uid", 0, lambda: b"id-0"), share(s, "uid", 1, lambda: b"other")
        (b'id-0', b'id-0')
    """
    if rank == 0:
        value = make()
        store.set(key, value)
        return value
    return store.get(key)


# ---------------------------------------------------------------------------- rendezvous()
#: a handler: ``handler(url, **kwargs)``, a generator that yields ``(store, rank, world_size)``
Handler = Callable[..., Iterator[tuple[Store, int, int]]]

_HANDLERS: dict[str, Handler] = {}


def register_rendezvous_handler(scheme: str, handler: Handler) -> None:
    """Register ``handler`` for URLs of ``scheme`` (torch's
    ``torch.distributed.register_rendezvous_handler``): :func:`rendezvous` and
    ``init_process_group(init_method="scheme://...")`` then call ``handler(url,
    timeout=...)``, a generator that yields ``(store, rank, world_size)``.

    Raises:
        RuntimeError: ``scheme`` has a handler already (``tcp``, ``env`` and ``file`` are
            built in).

    Example::

        >>> import accelrt.distributed as dist
        >>> def mine(url, **kwargs):
        ...     yield dist.HashStore(), 0, 1
        >>> dist.register_rendezvous_handler("doc-example", mine)
        >>> store, rank, world_size = next(dist.rendezvous("doc-example://"))
        >>> rank, world_size
        (0, 1)
    """
    if scheme in _HANDLERS:
        raise RuntimeError(f"Rendezvous handler for {scheme}:// already registered")
    _HANDLERS[scheme] = handler


def _query_dict(query: str) -> dict[str, str]:
    return {k: v for k, _, v in (pair.partition("=") for pair in query.split("&") if pair)}


def rendezvous(url: str, rank: int = -1, world_size: int = -1,
               **kwargs: Any) -> Iterator[tuple[Store, int, int]]:
    """The handler of ``url``'s scheme, as a generator of ``(store, rank, world_size)``
    (torch's ``torch.distributed.rendezvous``). ``rank`` and ``world_size`` (-1: not given)
    are added to the URL's query; ``kwargs`` (``timeout=`` a ``timedelta``) go to the
    handler. ``tcp://host:port`` and ``env://`` make rank 0 serve a multi-tenant
    :class:`TCPStore` that the others join, ``file:///path`` opens a :class:`FileStore`.

    Raises:
        RuntimeError: ``url`` is not a str, ``rank`` or ``world_size`` not an integer, or no
            handler is registered for the scheme ("No rendezvous handler for x://").
        AssertionError: ``rank``/``world_size`` given both as arguments and in the URL.
        ValueError: a built-in handler's URL lacks what it needs (torch's "Error
            initializing torch.distributed using tcp:// rendezvous: port number missing").

    Example::

        >>> import os, tempfile
        >>> import accelrt.distributed as dist
        >>> path = os.path.join(tempfile.mkdtemp(), "rdzv")
        >>> store, rank, world_size = next(dist.rendezvous(f"file://{path}", 0, 1))
        >>> store.set("k", "v"); (rank, world_size, store.get("k"))
        (0, 1, b'v')
        >>> store.close()
    """
    if not isinstance(url, (str, bytes)):
        raise RuntimeError(f"`url` must be a string. {type(url)}: {url}")
    if not isinstance(rank, numbers.Integral):
        raise RuntimeError(f"`rank` must be an integer. {rank}")
    if not isinstance(world_size, numbers.Integral):
        raise RuntimeError(f"`world_size` must be an integer. {world_size}")
    if isinstance(url, bytes):
        url = url.decode()
    result = urlparse(url)
    if rank != -1 or world_size != -1:
        query = _query_dict(result.query)
        if "rank" in query or "world_size" in query:
            raise AssertionError(f"The url: {url} has node-specific arguments(rank, "
                                 "world_size) already.")
        if rank != -1:
            query["rank"] = str(rank)
        if world_size != -1:
            query["world_size"] = str(world_size)
        result = result._replace(query="&".join(f"{k}={v}" for k, v in query.items()))
        url = urlunparse(result)
    if result.scheme not in _HANDLERS:
        raise RuntimeError(f"No rendezvous handler for {result.scheme}://")
    return _HANDLERS[result.scheme](url, **kwargs)


def _builtin_handler(scheme: str) -> Handler:
    def handler(url: str, timeout: datetime.timedelta = datetime.timedelta(
                    seconds=DEFAULT_TIMEOUT), **kwargs: Any) -> Iterator[tuple[Store, int, int]]:
        p = plan(url)
        yield p.connect(timeout), p.rank, p.world_size
        raise RuntimeError(f"Unable to perform re-rendezvous using {scheme}:// method")

    handler.__name__ = f"_{scheme}_rendezvous_handler"
    return handler


def custom_handler(url: str) -> bool:
    """Whether ``url``'s scheme has a handler registered by the user (not a built-in one)."""
    scheme = urlparse(url).scheme
    return scheme in _HANDLERS and scheme not in _BUILTIN


_BUILTIN = ("tcp", "env", "file")
for _scheme in _BUILTIN:
    register_rendezvous_handler(_scheme, _builtin_handler(_scheme))
