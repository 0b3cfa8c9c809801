"""Session-37 leftovers, the checks that need two ranks (the one-process ones are in
tests/runtime/test_review_leftovers_s37.py). Each case failed before its fix. The expected
behaviour is torch 2.15.0's, run with gloo on two ranks on this machine with the same calls:

* ``send_object_list`` / ``recv_object_list`` given a group this rank is not in
  (``new_group([0])`` on rank 1, i.e. ``NON_GROUP_MEMBER``) raise ``ValueError`` "Invalid
  process group specified" (the rank translation fails before the membership check, and
  torch's c10d exception logger raises that while reporting it); accelrt warned and returned
  None / -1.
* ``Work.result()`` of ``isend``/``irecv`` (and of ``batch_isend_irecv``'s works) raises
  ``RuntimeError`` "result() not implemented." before and after ``wait()``; accelrt answered
  the array.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

HAVE_MPI = importlib.util.find_spec("mpi4py") is not None

_RANKS = r'''
import re, warnings
import numpy as np
import accelrt as acc
import accelrt.distributed as dist

dist.init_process_group("gloo", timeout=20)
r, n = dist.get_rank(), dist.get_world_size()
from rank_cases import Cases, raises
case = Cases(r, after=dist.barrier)


@case
def object_p2p_on_a_non_member():
    g = dist.new_group([0])
    if r == 1:
        assert g is dist.GroupMember.NON_GROUP_MEMBER
        with warnings.catch_warnings():
            warnings.simplefilter("error")     # no warning, an error
            raises(ValueError, "^Invalid process group specified",
                   lambda: dist.send_object_list(["x"], dst=0, group=g))
            raises(ValueError, "^Invalid process group specified",
                   lambda: dist.send_object_list(["x"], group_dst=0, group=g))
            raises(ValueError, "^Invalid process group specified",
                   lambda: dist.recv_object_list([None], src=0, group=g))
            raises(ValueError, "^Invalid process group specified",
                   lambda: dist.recv_object_list([None], group=g))

@case
def point_to_point_result_is_not_implemented():
    a = acc.full((3,), float(r))
    w = dist.isend(a, 1) if r == 0 else dist.irecv(a, 0)
    raises(RuntimeError, r"^result\(\) not implemented\.$", w.result)
    w.wait()
    raises(RuntimeError, r"^result\(\) not implemented\.$", w.result)
    assert w.is_completed()
    if r == 1:
        assert a.tolist() == [0.0, 0.0, 0.0]
    ops = [dist.P2POp(dist.isend, acc.full((1,), 1.0), 1 - r),
           dist.P2POp(dist.irecv, acc.zeros((1,)), 1 - r)]
    works = dist.batch_isend_irecv(ops)
    for w in works:
        w.wait()
        raises(RuntimeError, r"^result\(\) not implemented\.$", w.result)
    # a collective's work still answers its outputs once waited for
    b = acc.full((2,), 1.0)
    w = dist.all_reduce(b, async_op=True)
    assert w.wait() and [x.tolist() for x in w.result()] == [[2.0, 2.0]]

case.done()
dist.destroy_process_group()
'''


def test_two_rank_leftovers(tmp_path: Path) -> None:
    from test_distributed import MPIEXEC, _check_cases, launch
    if not HAVE_MPI or MPIEXEC is None:
        pytest.skip("needs mpi4py and mpiexec (pip install 'accelrt[mpi]')")
    from rank_cases import write_script
    script = write_script(tmp_path, _RANKS)
    rc, out, _ = launch(2, str(script), timeout=90)
    assert _check_cases(2, out, rc) == 2, out[-3000:]
