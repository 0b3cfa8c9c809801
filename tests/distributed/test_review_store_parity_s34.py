"""Session 34's store argument fixes (``TCPStore``, ``FileStore``, ``HashStore``,
``PrefixStore``), each checked against torch 2.15.0's stores by running them (CPU build with
gloo: a ``TCPStore`` master on localhost, ``HashStore``, ``FileStore``, ``PrefixStore``) on the
same inputs; torch's answers are written here as literals (CI has no torch). Each test failed
before its change unless it says it pins behaviour that already matched.
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers.hostile import Index, IndexRaises
from helpers.ids import shown

import accelrt.distributed as dist

T = datetime.timedelta


class Boom(Exception):
    """An exception class of the caller's own."""


BROKEN = [IndexRaises(ValueError("bad index")), IndexRaises(Boom("custom"))]


@pytest.fixture(params=["hash", "tcp", "file", "prefix"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dist.Store]:
    kind = request.param
    s: dist.Store
    if kind == "hash":
        s = dist.HashStore()
    elif kind == "tcp":
        s = dist.TCPStore("127.0.0.1", 0, None, True, T(seconds=30))
    elif kind == "file":
        s = dist.FileStore(str(tmp_path / "store"), 1)
    else:
        s = dist.PrefixStore("p", dist.HashStore())
    s.set_timeout(T(seconds=5))
    yield s
    if isinstance(s, (dist.TCPStore, dist.FileStore)):
        s.close()


# ---------------------------------------------------------------------- TCPStore's constructor

@pytest.mark.parametrize("port", [-1, 65536, 2**16 + 5, 2**31, 2**63, 2**64, np.int64(70000),
                                  np.int64(-1)], ids=repr)
def test_tcpstore_port_out_of_range_is_a_type_error(port: Any) -> None:
    # torch 2.15: TypeError "__init__(): incompatible constructor arguments" (its binding
    # reads a uint16); accelrt raised ValueError "port must have value from 0 to 65535"
    with pytest.raises(TypeError, match=r"^port must be an int in \[0, 65535\] \(torch's "
                                        r"binding reads a uint16\), got -?\d+$"):
        dist.TCPStore("127.0.0.1", port, None, True, T(seconds=5))


@pytest.mark.parametrize("world_size", [2**31, -2**31 - 1, 2**63, np.int64(2**40)], ids=repr)
def test_tcpstore_world_size_beyond_int32_is_a_type_error(world_size: Any) -> None:
    # torch 2.15: TypeError (std::optional<int>); accelrt made a store counting 2**31 workers
    with pytest.raises(TypeError, match=r"^world_size must be an int in \[-2147483648, "
                                        r"2147483647\] \(torch's binding reads an int32\)"):
        dist.TCPStore("127.0.0.1", 0, world_size, True, T(seconds=5), wait_for_workers=False)


def test_tcpstore_world_size_at_the_int32_limits_is_taken() -> None:
    # pins: torch 2.15 takes 2**31 - 1 and -2**31 (a negative world size: not counted)
    for world_size in (2**31 - 1, -2**31):
        dist.TCPStore("127.0.0.1", 0, world_size, True, T(seconds=5),
                      wait_for_workers=False).close()


@pytest.mark.parametrize("name", ["port", "world_size"])
@pytest.mark.parametrize("value", BROKEN, ids=repr)
def test_tcpstore_integers_whose_index_raises_are_a_type_error(name: str,
                                                               value: IndexRaises) -> None:
    # torch 2.15: TypeError "incompatible constructor arguments"; accelrt let the exception
    # of __index__ out
    kw: dict[str, Any] = {"port": 0, "world_size": None, name: value}
    with pytest.raises(TypeError, match=rf"^{name} must be an int, got IndexRaises \(its "
                                        rf"__index__ raised {type(value.exc).__name__}"):
        dist.TCPStore("127.0.0.1", is_master=True, timeout=T(seconds=5),
                      wait_for_workers=False, **kw)


@pytest.mark.parametrize("fd", [2**31, 2**40, -2**31 - 1], ids=repr)
def test_tcpstore_master_listen_fd_beyond_int32_is_a_type_error(fd: int) -> None:
    # torch 2.15: TypeError (std::optional<int>); accelrt: socket's OverflowError
    with pytest.raises(TypeError, match=r"^master_listen_fd must be an int in "):
        dist.TCPStore("127.0.0.1", 0, None, True, T(seconds=5), master_listen_fd=fd)


@pytest.mark.parametrize("fd", [1.5, "3", True], ids=repr)
def test_tcpstore_master_listen_fd_of_another_type_is_a_type_error(fd: Any) -> None:
    # torch 2.15: TypeError for 1.5 and "3" (pins the class; accelrt's came from os.dup);
    # True is fd 1 in torch, and a bool is no int argument in accelrt
    with pytest.raises(TypeError, match="master_listen_fd must be an int"):
        dist.TCPStore("127.0.0.1", 0, None, True, T(seconds=5), master_listen_fd=fd)


def test_tcpstore_master_listen_fd_that_is_no_socket_is_a_network_error(
        tmp_path: Path) -> None:
    # torch 2.15: DistNetworkError "Failed to open existing socket. socket: -1, code: -9,
    # name: EBADF, message: bad file descriptor" (a file: "code: -88, name: ENOTSOCK");
    # accelrt let OSError out (and kept the duplicated descriptor of a file open)
    with pytest.raises(dist.DistNetworkError, match=r"^Failed to open existing socket\. "
                                                    r"socket: -1, code: -9, name: EBADF, "):
        dist.TCPStore("127.0.0.1", 0, None, True, T(seconds=5), master_listen_fd=-1)
    with open(tmp_path / "f", "wb") as f:
        before = len(os.listdir("/proc/self/fd"))
        with pytest.raises(dist.DistNetworkError, match=r"socket: \d+, code: -88, name: "
                                                        r"ENOTSOCK"):
            dist.TCPStore("127.0.0.1", 0, None, True, T(seconds=5),
                          master_listen_fd=f.fileno())
        assert len(os.listdir("/proc/self/fd")) == before


def test_tcpstore_serves_from_a_listening_socket() -> None:
    # pins: master_listen_fd as an int (or a numpy integer) still serves
    sock = socket.create_server(("127.0.0.1", 0))
    try:
        master = dist.TCPStore("127.0.0.1", sock.getsockname()[1], None, True, T(seconds=5),
                               master_listen_fd=np.int64(sock.fileno()))
        client = dist.TCPStore("127.0.0.1", master.port, None, False, T(seconds=5))
        client.set("k", "v")
        assert master.get("k") == b"v"
        client.close()
        master.close()
    finally:
        sock.close()


# ---------------------------------------------------------------------- FileStore's constructor

@pytest.mark.parametrize("world_size", [2**31, -2**31 - 1, 2**63, 2**64, np.int64(2**40)],
                         ids=repr)
def test_filestore_world_size_beyond_int32_is_a_type_error(world_size: Any,
                                                           tmp_path: Path) -> None:
    # torch 2.15: TypeError "incompatible constructor arguments" (an int); accelrt took 2**31
    # (and raised ValueError for -2**31 - 1)
    with pytest.raises(TypeError, match=r"^world_size must be an int in \[-2147483648, "):
        dist.FileStore(str(tmp_path / "s"), world_size)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("value", BROKEN, ids=repr)
def test_filestore_world_size_whose_index_raises_is_a_type_error(value: IndexRaises,
                                                                  tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"world_size must be an int, got IndexRaises \(its "):
        dist.FileStore(str(tmp_path / "s"), value)


def test_filestore_world_size_with_index_is_taken(tmp_path: Path) -> None:
    # pins: torch's binding reads an object with __index__ (numpy integers)
    dist.FileStore(str(tmp_path / "s"), Index()).close()
    dist.FileStore(str(tmp_path / "t"), np.int32(1)).close()


# ---------------------------------------------------------------------- methods, every store

def test_wait_refuses_a_timeout_of_none(store: dist.Store) -> None:
    # torch 2.15: wait(keys, None) and wait(keys, timeout=None) raise TypeError "wait():
    # incompatible function arguments" (its overloads are wait(keys) and wait(keys,
    # timedelta)); accelrt read None as the store's timeout
    store.set("k", "v")
    for call in (lambda: store.wait(["k"], None), lambda: store.wait(["k"], timeout=None),
                 lambda: store.wait([], None)):
        with pytest.raises(TypeError, match=r"^wait\(\) takes a timeout as a "
                                            r"datetime\.timedelta .* got None; leave it out"):
            call()
    store.wait(["k"])                           # pins the forms torch takes
    store.wait(["k"], T(seconds=1))
    store.wait(["k"], 1.5)
    with pytest.raises(dist.DistStoreError):
        store.wait(["missing"], T(milliseconds=50))


def test_barrier_takes_torchs_integers_and_timeouts(store: dist.Store) -> None:
    # torch 2.15's binding reads world_size as an int64 (an object with __index__ too) and
    # timeout as a timedelta, a float of seconds or None; accelrt refused Index() ("must be
    # an int, got Index") and took 2**63 (waiting out the timeout)
    store.barrier("a", Index())
    store.barrier("b", 1, None)
    store.barrier("c", 1, 1.5)
    store.barrier("d", np.int64(1), T(seconds=1))
    with pytest.raises(TypeError, match=r"^world_size must be an int in \[-9223372036854775808"):
        store.barrier("e", 2**63, T(milliseconds=10))
    for value in BROKEN:
        with pytest.raises(TypeError, match=r"^world_size must be an int, got IndexRaises"):
            store.barrier("f", value, T(milliseconds=10))


def test_barrier_checks_its_timeout_before_counting_in(store: dist.Store) -> None:
    # a bad timeout is refused before the caller is counted (torch's binding refuses it
    # before the call); accelrt counted the caller in, then raised in wait()
    with pytest.raises(TypeError, match="timeout must be a datetime.timedelta"):
        store.barrier("g", 2, "soon")  # type: ignore[arg-type]
    assert not store.check(["g/num_members"])


@pytest.mark.parametrize("value", BROKEN, ids=repr)
def test_add_amount_whose_index_raises_is_a_type_error(store: dist.Store,
                                                       value: IndexRaises) -> None:
    # torch 2.15: TypeError "add(): incompatible function arguments"
    with pytest.raises(TypeError, match=r"^amount must be an int, got IndexRaises \(its "):
        store.add("n", value)
    assert store.add("n", Index()) == 1        # pins: an object with __index__ is an int


@pytest.mark.parametrize("block", ["x", b"", [1], object()], ids=shown)
def test_queue_pop_block_takes_what_torchs_binding_takes(store: dist.Store, block: Any) -> None:
    # torch 2.15: queue_pop("q", "x") raises TypeError "queue_pop(): incompatible function
    # arguments" (FileStore too, before its "not implemented"); None is False, a number its
    # truth. accelrt read any object's truth ("x": block).
    with pytest.raises(TypeError, match="^block must be a bool, got "):
        store.queue_pop("q", block)


def test_queue_pop_block_none_or_zero_does_not_block(store: dist.Store) -> None:
    # pins: torch 2.15's queue_pop("q", None) and ("q", 0) raise QueueEmptyError at once
    if isinstance(store, dist.FileStore):
        pytest.skip("FileStore has no queues (torch's neither)")
    for block in (None, 0, False, np.False_):
        with pytest.raises(dist.QueueEmptyError):
            store.queue_pop("q", block)  # type: ignore[arg-type]


_CALLS: dict[str, Callable[[dist.Store], object]] = {
    "set(k, 1)": lambda s: s.set("k", 1),  # type: ignore[arg-type]
    "get(1)": lambda s: s.get(1),  # type: ignore[arg-type]
    "check('k')": lambda s: s.check("k"),  # type: ignore[arg-type]
    "wait([1])": lambda s: s.wait([1]),  # type: ignore[list-item]
    "add('n', 1.0)": lambda s: s.add("n", 1.0),  # type: ignore[arg-type]
    "multi_set(['a'], [1])": lambda s: s.multi_set(["a"], [1]),  # type: ignore[list-item]
    "compare_set('k', 1, 'x')": lambda s: s.compare_set("k", 1, "x"),  # type: ignore[arg-type]
    "set_timeout(None)": lambda s: s.set_timeout(None),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("name", list(_CALLS))
def test_other_wrong_types_stay_type_errors(store: dist.Store, name: str) -> None:
    # pins: each is a TypeError in torch 2.15's stores too
    with pytest.raises(TypeError):
        _CALLS[name](store)
