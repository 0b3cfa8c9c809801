"""Two OpenCL devices (PoCL's ``POCL_DEVICES="pthread pthread"``): copies and collectives
across ``opencl:0`` and ``opencl:1`` with the default streams and side streams on either side,
in both memory modes.

Each mode runs in a subprocess (PoCL reads ``POCL_DEVICES`` once, at start-up) with a hard
timeout, since the failure this guards against is a hang: a peer copy's write used to go on the
destination's default queue, which itself waited (through the copy's ordering event) for that
copy. Ordering is checked with gates (host functions waiting on ``threading.Event``), never
sleeps.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from accelrt import _backend

_SCRIPT = textwrap.dedent('''
import contextlib
import threading

import numpy as np

import accelrt as acc
from accelrt.backends import get_backend

D0, D1 = "opencl:0", "opencl:1"
b = get_backend("opencl")
if b.device_count() != 2:
    print(f"SKIP: POCL_DEVICES gave {b.device_count()} OpenCL device(s), not 2")
    raise SystemExit(0)
x = np.arange(4096, dtype=np.float32)
y = -np.arange(4096, dtype=np.float32)


def gated(stream):
    """Hold ``stream`` until the returned event is set (a host function waiting on it)."""
    gate = threading.Event()
    b.launch_host_func(stream.device_index, lambda: gate.wait(60), stream.stream_id)
    return gate


# to() both directions, default streams on both sides
for a, c in ((D0, D1), (D1, D0)):
    src = acc.asarray(x, device=a)
    assert np.array_equal(src.to(c).numpy(), x)
    assert np.array_equal(src.to(c, non_blocking=True).numpy(), x)

# copy_ both directions, every mix of default and side streams; gates prove the ordering:
# the copy waits for the destination's earlier fill and for the source's earlier upload
for a, c in ((D0, D1), (D1, D0)):
    for side_src in (False, True):
        for side_dst in (False, True):
            case = (a, c, side_src, side_dst)
            src = acc.asarray(x, device=a)
            dst = acc.asarray(y, device=c)
            with contextlib.ExitStack() as st:
                if side_src:
                    st.enter_context(acc.Stream(a))
                if side_dst:
                    st.enter_context(acc.Stream(c))
                ss, ds = acc.current_stream(a), acc.current_stream(c)
                g_dst, g_src = gated(ds), gated(ss)
                dst.fill_(7.0)                      # queued behind g_dst
                src.copy_(x[::-1].copy(), non_blocking=True)   # queued behind g_src
                dst.copy_(src, non_blocking=True)
                assert not ds.query(), case
                g_dst.set()
                assert not ds.query(), case       # it still waits for the copy
                g_src.set()
                got = dst.numpy()
            assert np.array_equal(got, x[::-1]), (case, got[:4])
            src.copy_(dst)                          # and back, synchronously
            assert np.array_equal(src.numpy(), x[::-1]), case

# collectives over both devices, from either device
for root, other in ((D0, D1), (D1, D0)):
    src = acc.asarray(x, device=root)
    outs = acc.comm.broadcast(src, devices=[D0, D1])
    assert [str(o.device) for o in outs] == [D0, D1]
    assert all(np.array_equal(o.numpy(), x) for o in outs)
    parts = acc.comm.scatter(src, devices=[D0, D1])
    assert np.array_equal(np.concatenate([p.numpy() for p in parts]), x)
    streams = [acc.Stream(D0), acc.Stream(D1)]
    parts = acc.comm.scatter(src, devices=[D0, D1], chunk_sizes=[1000, 3096], streams=streams)
    for s in streams:
        s.synchronize()
    assert [p.shape for p in parts] == [(1000,), (3096,)]
    assert np.array_equal(np.concatenate([p.numpy() for p in parts]), x)
    g = acc.comm.gather([acc.asarray(x, device=D0), acc.asarray(y, device=D1)],
                        destination=root)
    assert str(g.device) == root and np.array_equal(g.numpy(), np.concatenate([x, y]))
    r = acc.comm.reduce_add([acc.asarray(x, device=D0), acc.asarray(x, device=D1)],
                            destination=other)
    assert str(r.device) == other and np.array_equal(r.numpy(), 2 * x)

acc.synchronize(D0)
acc.synchronize(D1)
print("two-opencl-devices-ok")
''')


@pytest.mark.parametrize("mode", ["svm", "buffer"])
def test_two_opencl_devices_copies_and_collectives(mode: str) -> None:
    reason = _backend.unavailable_reason("opencl")
    if reason is not None:
        pytest.skip(f"opencl unavailable: {reason}")
    env = dict(os.environ, POCL_DEVICES="pthread pthread", ACCELRT_OPENCL_MEMORY=mode)
    try:
        proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", _SCRIPT], env=env,
                              capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"two OpenCL devices ({mode} memory) hung:\n{exc.stderr!r:.3000}")
    if "svm" in proc.stderr and "do not support" in proc.stderr:
        pytest.skip(f"this OpenCL platform has no SVM: {proc.stderr.strip()[-300:]}")
    if proc.stdout.startswith("SKIP: "):
        pytest.skip(proc.stdout.strip()[6:])
    assert proc.returncode == 0 and "two-opencl-devices-ok" in proc.stdout, proc.stderr[-3000:]
