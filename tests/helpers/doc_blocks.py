"""The code blocks of the Markdown docs, and the driver that runs one document's blocks.

Parsing (:func:`blocks_of`) is used by ``tests/package/test_docs_examples.py``; the driver is
this file run as a script (``python doc_blocks.py SPEC.json``), once per document, in a folder
of its own. See the test's docstring for what runs and how a block is marked.
"""

from __future__ import annotations

import dataclasses
import doctest
import json
import os
import re
import runpy
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

#: Fenced blocks that run, by their language tag.
PYTHON, SHELL, CONSOLE = ("python", "py"), ("bash", "sh", "shell"), ("console",)
RUNNABLE = PYTHON + SHELL + CONSOLE

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<lang>[^\s`]*)[^\n]*\n"
                    r"(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$", re.MULTILINE | re.DOTALL)
_MARK = re.compile(r"^\s*<!--\s*(?P<key>[a-z]+)\s*:\s*(?P<value>.*?)\s*-->\s*$")
#: The markings a block may carry (an HTML comment on the line right before its fence).
MARKS = ("skip", "file", "ranks")


@dataclasses.dataclass(frozen=True)
class Block:
    doc: str            # the document, relative to the repository root
    line: int           # the line of the opening fence (1-based)
    lang: str
    code: str
    marks: dict[str, str]

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks_of(path: Path, root: Path) -> list[Block]:
    """Every fenced block of ``path``, with the markings of the comment lines right above it.

    Raises:
        ValueError: a marking is not one of :data:`MARKS`, or malformed.
    """
    text = path.read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        above = text[:m.start()].splitlines()
        marks: dict[str, str] = {}
        while above and (mk := _MARK.match(above[-1])):
            above.pop()
            key, value = mk.group("key"), mk.group("value")
            if key not in MARKS or not value:
                raise ValueError(f"{path.name}:{line}: unknown marking <!-- {key}: {value} -->; "
                                 f"use one of {', '.join(k + ': ...' for k in MARKS)}")
            marks[key] = value
        indent = len(m.group("indent"))
        code = "".join(ln[indent:] if ln[:indent].isspace() else ln
                       for ln in m.group("body").splitlines(keepends=True))
        out.append(Block(str(path.relative_to(root)), line, m.group("lang").lower(), code,
                         marks))
    return out


#: What a block may not run here however it is marked up: it would change the environment the
#: tests run in, or need a network.
_NEVER = re.compile(r"\bpip3? install\b|\bpip -q install\b")


def never_runs(code: str) -> bool:
    """Whether ``code`` installs packages (it must be marked ``skip``)."""
    return _NEVER.search(code) is not None


def console_commands(code: str) -> list[str]:
    """The commands of a console transcript: its ``$ `` lines (with their ``\\``
    continuation lines); the other lines are output."""
    cmds: list[str] = []
    lines = code.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("$ "):
            cmd = lines[i][2:]
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
            cmds.append(cmd)
        i += 1
    return cmds


# ---------------------------------------------------------------------- the driver

def _shell(cmd: str, timeout: float) -> str | None:
    """Run ``cmd`` with bash (``-e -o pipefail``); None when it succeeds, else why not."""
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", cmd], capture_output=True,
                          text=True, timeout=timeout, check=False)
    if proc.returncode == 0:
        return None
    return (f"exit status {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n"
            f"{proc.stderr[-4000:]}")


def _python(block: dict[str, Any], path: str, ns: dict[str, Any]) -> str | None:
    code = block["code"]
    if code.lstrip().startswith(">>>"):             # a doctest: outputs are compared
        test = doctest.DocTestParser().get_doctest(code, ns, block["id"], path, block["line"])
        out: list[str] = []
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test, out=out.append)
        ns.update(test.globs)
        return "".join(out) if runner.failures else None
    if block.get("ranks"):
        return _shell(f"mpiexec -iface lo -n {int(block['ranks'])} {sys.executable} -m "
                      f"accelrt.distributed.run {path}", 120)
    try:
        ns.update(runpy.run_path(path, init_globals=ns, run_name="__main__"))
    except BaseException:      # noqa: BLE001 - reported as the block's failure
        return traceback.format_exc()
    return None


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    os.chdir(spec["workdir"])
    sys.path.insert(0, spec["workdir"])      # blocks import the files saved beside them
    results = open(spec["results"], "a", encoding="utf-8")   # noqa: SIM115
    ns: dict[str, Any] = {}
    failed = None
    for b in spec["blocks"]:
        if b.get("file"):
            continue                         # saved before anything ran
        if failed is not None:
            status, detail = "not run", f"an earlier block failed ({failed})"
        elif never_runs(b["code"]):
            status, detail = "failed", "it installs packages: mark it <!-- skip: ... -->"
            failed = b["id"]
        else:
            results.write(json.dumps({"id": b["id"], "status": "started"}) + "\n")
            results.flush()
            name = re.sub(r"\W", "_", b["id"]) + ".py"
            Path(name).write_text(b["code"], encoding="utf-8")
            if b["lang"] in PYTHON:
                why = _python(b, os.path.abspath(name), ns)
            else:
                cmds = [b["code"]] if b["lang"] in SHELL else console_commands(b["code"])
                why = next((w for c in cmds if (w := _shell(c, 120)) is not None), None)
            status, detail = ("ok", "") if why is None else ("failed", why)
            if why is not None:
                failed = b["id"]
        results.write(json.dumps({"id": b["id"], "status": status, "detail": detail}) + "\n")
        results.flush()
    results.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
