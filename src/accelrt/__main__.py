"""``python -m accelrt``: the ``accelrt`` command line (see :mod:`accelrt.cli`).

Example::

    >>> import subprocess, sys
    >>> out = subprocess.run([sys.executable, "-m", "accelrt", "--version"],
    ...                      capture_output=True, text=True).stdout
    >>> out.startswith("accelrt ")
    True
"""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
