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
"""

from __future__ import annotations

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
