"""Session-40 leftovers of accelrt.distributed: differences from torch 2.15, checked against
torch 2.15's CPU build on the same inputs. Each test failed before its fix.

* A ``TCPStore`` master refused a timeout under a millisecond before it listened: torch's
  master listens first and then, a client of its own server, times out connecting to the port
  it bound, so its message names that port (not ``0`` for ``port=0``, nor a
  ``master_listen_fd`` socket's ``0``), a host name it cannot resolve is reported with that
  port too, and a port that is in use fails with the listen error before the timeout's.
"""

from __future__ import annotations

import datetime
import socket

import pytest

from accelrt.distributed import DistNetworkError, TCPStore
from accelrt.distributed import _tcpstore

ZERO = datetime.timedelta(0)


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


def _port_in(exc: BaseException) -> int:
    # "... while trying to connect to (host, PORT)..."
    return int(str(exc).split("while trying to connect to (", 1)[1].split(")", 1)[0]
               .rsplit(", ", 1)[1])


@pytest.mark.parametrize("timeout", [ZERO, datetime.timedelta(seconds=-1)])
@pytest.mark.parametrize("multi_tenant", [False, True])
def test_master_of_port_0_names_the_port_it_bound(timeout: datetime.timedelta,
                                                  multi_tenant: bool) -> None:
    # torch 2.15: TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(0)) raises
    # DistNetworkError "The client socket has timed out after 0ms while trying to connect to
    # (127.0.0.1, 45005)." (the port it bound); accelrt wrote (127.0.0.1, 0)
    ms = int(timeout / datetime.timedelta(milliseconds=1))
    with pytest.raises(DistNetworkError, match=rf"^The client socket has timed out after "
                                               rf"{ms}ms while trying to connect to "
                                               rf"\(127\.0\.0\.1, [1-9]\d*\)\.") as info:
        TCPStore("127.0.0.1", 0, 1, True, timeout=timeout, multi_tenant=multi_tenant)
    port = _port_in(info.value)
    # the server it made is gone: the port is free again, no multi-tenant server is left
    assert port not in _tcpstore._SERVERS
    with socket.create_server(("", port)):
        pass


def test_master_of_a_listen_fd_names_its_port() -> None:
    # torch 2.15: ... connect to (127.0.0.1, <the socket's port>).
    with socket.create_server(("", 0)) as ls:
        bound = ls.getsockname()[1]
        with pytest.raises(DistNetworkError, match=rf"\(127\.0\.0\.1, {bound}\)\."):
            TCPStore("127.0.0.1", 0, 1, True, timeout=ZERO, master_listen_fd=ls.fileno())
        ls.getsockname()   # the caller's descriptor is still open


def test_master_of_an_unresolvable_host_names_the_port_it_bound() -> None:
    # torch 2.15: TCPStore("no-such-host.invalid", 0, 1, True, timeout=2 s) raises
    # "The client socket has timed out after 2000ms while trying to connect to
    # (no-such-host.invalid, 38963)."
    with pytest.raises(DistNetworkError, match=r"^The client socket has timed out after 300ms "
                                               r"while trying to connect to "
                                               r"\(no-such-host\.invalid, [1-9]\d*\)") as info:
        TCPStore("no-such-host.invalid", 0, 1, True, timeout=datetime.timedelta(seconds=0.3))
    with socket.create_server(("", _port_in(info.value))):
        pass


def test_master_on_a_port_in_use_fails_listening_first() -> None:
    # torch 2.15: a master on a busy port with timeout=timedelta(0) raises the listen error
    # "The server socket has failed to listen on any local network address. port: P, ...
    # EADDRINUSE"; accelrt raised the timeout's
    with socket.create_server(("", 0)) as busy:
        port = busy.getsockname()[1]
        with pytest.raises(DistNetworkError, match=rf"^The server socket has failed to listen "
                                                   rf"on any local network address\. port: "
                                                   rf"{port}, .*EADDRINUSE"):
            TCPStore("127.0.0.1", port, 1, True, timeout=ZERO)


def test_a_client_still_names_the_port_it_was_given() -> None:
    port = _free_port()
    with pytest.raises(DistNetworkError, match=rf"after 0ms while trying to connect to "
                                               rf"\(127\.0\.0\.1, {port}\)\."):
        TCPStore("127.0.0.1", port, 1, False, timeout=ZERO)
