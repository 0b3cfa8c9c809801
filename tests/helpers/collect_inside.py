"""A garbage collection inside a C method: Python code (a finaliser) that runs in the middle
of a call of the allocator's C containers, as it does when the collector runs on an
allocation the method makes.

:data:`PRELUDE` is source for a subprocess (a container that reads freed memory crashes it):
it defines ``during(change, call)``, which leaves a cycle whose finaliser calls ``change()``,
makes the collector run on the next tracked object made (threshold 1, the tuple and list free
lists emptied first, so that the next tuple or list is a new tracked object), and returns
``call()``. On CPython 3.11 the collection runs inside that allocation, that is inside the
method; on 3.12 and later the collector runs at the next evaluation breaker instead, after
the call, which such a test must accept as well. ``ran`` counts the finalisers run.

Example::

    >>> import subprocess, sys
    >>> code = PRELUDE + "print(during(lambda: None, lambda: len([1, 2])), ran)"
    >>> subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    '2 [1]\\n'

:func:`run_scenarios` runs such a script on one implementation of a container (the Python
type or the C one) after :data:`IMPL`, which names it ``impl``; :func:`assert_chain_released`
checks the release of a long chain of containers, each holding the next.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

PRELUDE = '''
import gc

ran = []


class _Changer:
    def __init__(self, change):
        self.change, self.me = change, self      # (a cycle: only the collector frees it)

    def __del__(self):
        ran.append(1)
        self.change()


def during(change, call):
    """call(), with a collection that runs change() on its first new tracked object."""
    gc.collect()
    threshold = gc.get_threshold()
    gc.disable()
    spare = ([(i, -i) for i in range(3000)], [[i] for i in range(300)])
    _Changer(change)
    gc.set_threshold(1)
    gc.enable()
    try:
        return call()
    finally:
        gc.set_threshold(*threshold)
        del spare
        gc.collect()

'''

#: What a scenario script of :func:`run_scenarios` has after :data:`PRELUDE`: ``impl``, the
#: container type whose module and name are the script's two arguments, and ``Blk``, a block
#: that shows its number.
IMPL = '''
import sys, importlib
mod, name = sys.argv[1:3]
impl = getattr(importlib.import_module(mod), name)


class Blk:
    def __init__(self, i):
        self.i = i

    def __repr__(self):
        return f"Blk({self.i})"

'''


def run_scenarios(scenarios: str, mod: str, name: str) -> str:
    """Run :data:`PRELUDE`, :data:`IMPL` and ``scenarios`` in a subprocess on the type ``name``
    of module ``mod`` (a container that reads freed memory crashes it); its standard output,
    once it has exited with 0."""
    proc = subprocess.run([sys.executable, "-c", PRELUDE + IMPL + textwrap.dedent(scenarios),
                           mod, name],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


#: the chain's length and the child's stack: a release that recursed once per container
#: would need at least 100,000 frames of C, over 1 MiB (a 30,000-deep ``repr`` of nested
#: lists already overflows a 1 MiB stack), so it crashes the child, as a million did on the
#: usual 8 MiB stack
CHAIN = 100_000
CHAIN_STACK = 1 << 20


def assert_chain_released(mod: str, name: str, link: str) -> None:
    """A chain of :data:`CHAIN` containers of the type ``name`` of module ``mod``, each
    holding the next, is released in a subprocess whose stack is :data:`CHAIN_STACK`
    without overflowing it (the C type's release recursed once per container; the trashcan
    defers it, as a dict's or a list's release does). ``link`` is one line that makes ``y``,
    a container of ``impl`` that holds ``x``."""
    code = textwrap.dedent(f"""
        import importlib, resource
        soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
        resource.setrlimit(resource.RLIMIT_STACK, ({CHAIN_STACK}, hard))
        impl = getattr(importlib.import_module({mod!r}), {name!r})
        x = None
        for _ in range({CHAIN}):
            {link}
            x = y
        del x, y
        print("released")
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout == "released\n", proc.stderr[-2000:]
