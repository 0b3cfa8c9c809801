"""Review of session 39's merges (s39-rev1): what they broke or got wrong, checked against
torch 2.15 (``/tmp/t215``, CPU build with gloo) and hostile inputs.

1. A ``TCPStore`` master used in a forked child became a client of ``127.0.0.1``: a master
   serving a ``master_listen_fd`` socket bound to another address (``127.0.0.2``, ``::1``)
   was out of the child's reach ("Connection refused" after the whole store timeout), where
   torch 2.15's child reaches it (checked: ``os.fork`` after a master on an IPv6 socket bound
   to ``::1``, the child's ``get`` answers). ``TCPStore.clone()`` of such a master had the
   same address.

Hangs are bounded: the scripts run in a subprocess with a timeout and ``signal.alarm``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bindable(family: socket.AddressFamily, host: str) -> bool:
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
        return True
    except OSError:
        return False


# ------------------------------------------------- 1. a master bound to one address, forked
_FORK_BOUND_SCRIPT = textwrap.dedent("""
    import datetime, os, signal, socket, sys
    signal.alarm(60)                         # a hang ends the run (the child's too)
    import accelrt.distributed as dist
    family, host = (socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET), sys.argv[1]
    ls = socket.socket(family, socket.SOCK_STREAM)
    ls.bind((host, 0))
    ls.listen()
    port = ls.getsockname()[1]
    s = dist.TCPStore(host, port, 1, True, datetime.timedelta(seconds=3),
                      master_listen_fd=ls.fileno())
    s.set("a", "1")
    twin = s.clone()                         # a client of the same server, in the parent
    print(twin.get("a"))
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)
        try:
            s.set("b", "2")
            ok = s.get("a") == b"1"
        except Exception as exc:
            print("child:", type(exc).__name__, str(exc)[:200], flush=True)
            os._exit(3)
        sys.exit(0 if ok else 4)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), s.check(["b"]))
""")


@pytest.mark.parametrize("host", ["127.0.0.2", "::1"])
def test_forked_master_bound_to_one_address_reaches_the_parents_server(host: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if not _bindable(family, host):
        pytest.skip(f"this system cannot bind {host}")
    # before: the child connected to 127.0.0.1, where nothing listens ("Connection refused"
    # after the store's 3 s timeout: exit code 3), and clone() failed the same way
    r = subprocess.run([sys.executable, "-c", _FORK_BOUND_SCRIPT, host], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, (r.stdout, r.stderr[-3000:])
    assert r.stdout.split() == ["b'1'", "0", "True"], r.stdout


# ------------------------------------- 2. a store's connection shared with a forked process
_FORK_TWICE_SCRIPT = textwrap.dedent("""
    import datetime, os, signal, sys
    signal.alarm(60)                         # a hang ends the run (the children's too)
    import accelrt.distributed as dist
    s = dist.TCPStore("127.0.0.1", 0, 1, True, datetime.timedelta(seconds=5))
    pid = os.fork()
    if pid == 0:
        signal.alarm(30)
        store = s if sys.argv[1] == "master" else dist.TCPStore(
            "127.0.0.1", s.port, 1, False, datetime.timedelta(seconds=5))
        store.set("start", "1")              # this child's connection is open: then fork
        grandchild = os.fork()
        who = "g" if grandchild == 0 else "c"
        bad = 0
        try:
            for i in range(200):             # both processes at once, on their own stores
                store.set(f"{who}{i}", f"{who}{i}")
                bad += store.get(f"{who}{i}") != f"{who}{i}".encode()
        except Exception as exc:
            print(who, type(exc).__name__, str(exc)[:200], flush=True)
            bad += 1000
        if grandchild == 0:
            os._exit(min(bad, 100))
        _, status = os.waitpid(grandchild, 0)
        print(bad, os.waitstatus_to_exitcode(status), flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), s.get("c199"), s.get("g199"))
""")


@pytest.mark.parametrize("made_as", ["master", "client"])
def test_store_used_at_once_by_a_forked_process_and_its_child(made_as: str) -> None:
    # before: the grandchild inherited the child's connection and both wrote requests into
    # it and read each other's replies ("ValueError: truncated store message", IndexError)
    r = subprocess.run([sys.executable, "-c", _FORK_TWICE_SCRIPT, made_as],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, (r.stdout, r.stderr[-3000:])
    assert r.stdout.split() == ["0", "0", "0", "b'c199'", "b'g199'"], r.stdout


_FORK_DURING_REQUEST_SCRIPT = textwrap.dedent("""
    import datetime, os, signal, threading
    signal.alarm(60)
    import accelrt.distributed as dist
    s = dist.TCPStore("127.0.0.1", 0, 1, True, datetime.timedelta(seconds=30))
    c = dist.TCPStore("127.0.0.1", s.port, 1, False, datetime.timedelta(seconds=30))

    def blocked():
        try:
            c.wait(["never"])                # holds the client's lock while it waits
        except Exception:
            pass

    threading.Thread(target=blocked, daemon=True).start()
    while not c._table._lock.locked():       # the thread is inside its request
        pass
    pid = os.fork()
    if pid == 0:
        signal.alarm(10)                     # before: the child waited for that lock for ever
        c.set("k", "v")
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), s.check(["k"]), flush=True)
    os._exit(0)
""")


def test_client_store_in_a_child_forked_during_a_parent_threads_request() -> None:
    r = subprocess.run([sys.executable, "-c", _FORK_DURING_REQUEST_SCRIPT],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, (r.stdout, r.stderr[-3000:])
    assert r.stdout.split() == ["0", "True"], r.stdout   # before: -14 (SIGALRM), False


# ------------------------------------------- 3. a str subclass naming no device type (s39)
class _OddStr(str):
    """A str whose own methods raise: torch's parser reads the value only."""

    def __len__(self) -> int:
        raise RuntimeError("the subclass's __len__ was called")

    def __repr__(self) -> str:
        raise RuntimeError("the subclass's __repr__ was called")

    def __hash__(self) -> int:
        raise RuntimeError("the subclass's __hash__ was called")


@pytest.mark.parametrize("text", ["nope:0", "nope", "CPU", "gpu:0"])
def test_device_str_subclass_with_an_unknown_type_gets_accelrts_error(text: str) -> None:
    import accelrt as acc
    from accelrt import AcceleratorError

    # s39 read a str subclass by its value, but the unknown-type error path measured and
    # showed the subclass itself: its __len__ error escaped instead of accelrt's
    with pytest.raises(AcceleratorError) as plain:
        acc.device(text)
    with pytest.raises(AcceleratorError) as odd:
        acc.device(_OddStr(text))
    assert type(odd.value) is type(plain.value) and str(odd.value) == str(plain.value)
