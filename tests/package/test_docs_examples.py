"""Every example in README.md and docs/*.md runs as written, so the docs cannot drift.

What runs, per document, in a fresh folder whose entries link to the repository's top level
(so ``tests/data/...`` and ``scripts/...`` resolve as from the repository root, and what a
block writes lands in the fresh folder), with the CPU backend as the current accelerator, no
other ``ACCELRT_*`` variable set, and this interpreter's ``bin`` first on ``PATH``:

* ```python blocks, in order, in one interpreter: each sees the names the earlier ones defined,
  as the reader does (and as doctest and Sybil run a document). A block of ``>>>`` lines is a
  doctest, whose outputs are compared.
* ```bash blocks, with ``bash -e -o pipefail``, and ```console blocks: their ``$ `` lines (the
  other lines are output, not compared).

Untyped blocks are text (file trees, outputs, synopses) and never run; they hold no ``$ ``
command lines (a transcript is a ```console block, and runs).

A block is marked by an HTML comment on the line right before its opening fence:

* ``<!-- skip: REASON -->``: not run; reported as a skip with REASON, which starts with one of
  :data:`SKIP_REASONS`: only what cannot run here (a GPU, several hosts, a program the reader
  writes, a ``pip install``, which needs a network and would change the test's environment:
  the driver refuses one unmarked, this suite itself, a run far beyond this test's budget).
* ``<!-- file: NAME -->``: saved as NAME in the document's folder instead of run; later blocks
  use it (import it, launch it with ``mpiexec``).
* ``<!-- ranks: N -->``: a python block that runs on N MPI ranks of this machine
  (``mpiexec -n N python -m accelrt.distributed.run``), on its own.

The documents run side by side (one process each), each under a time limit.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/
from helpers import doc_blocks  # noqa: E402
from helpers.doc_blocks import (  # noqa: E402
    RUNNABLE,
    Block,
    blocks_of,
    console_commands,
    never_runs,
)

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
ALL = [b for d in DOCS for b in blocks_of(d, ROOT)]
RUN = [b for b in ALL if b.lang in RUNNABLE and "file" not in b.marks]
DOC_TIMEOUT = 180        # seconds for one document's blocks (together they take ~15 s)


@functools.cache
def _missing(what: str) -> bool:
    if what == "mpiexec":
        return shutil.which("mpiexec", path=_env()["PATH"]) is None
    from accelrt import backends
    return what not in backends.available()


def _unavailable(block: Block) -> str | None:
    """Why ``block`` cannot run on this machine although it runs where the test extra installs
    (mpiexec from the mpich wheel, OpenCL from PoCL: Linux on x86-64), or None."""
    if ("ranks" in block.marks or "mpiexec" in block.code) and _missing("mpiexec"):
        return "no mpiexec here (the test extra's mpich wheel is for Linux)"
    if '"opencl' in block.code and _missing("opencl"):
        return "no OpenCL device here (the test extra's PoCL is for Linux on x86-64)"
    return None


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELRT_")}
    env["ACCELRT_ACCELERATOR"] = "cpu"
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    env["UCX_TLS"] = "self,sm"          # MPI on shared memory only, as the distributed tests
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run_document(doc: str, folder: Path) -> dict[str, dict[str, Any]]:
    """Run one document's blocks in ``folder``; the result of each block by its id."""
    for entry in ROOT.iterdir():
        if entry.name != ".git":
            (folder / entry.name).symlink_to(entry)
    blocks = [b for b in ALL if b.doc == doc]
    for b in blocks:
        if "file" in b.marks:
            (folder / b.marks["file"]).write_text(b.code, encoding="utf-8")
    results = folder / ".results.jsonl"
    spec = folder / ".spec.json"
    spec.write_text(json.dumps({
        "workdir": str(folder), "results": str(results),
        "blocks": [{"id": b.id, "line": b.line, "lang": b.lang, "code": b.code,
                    "file": b.marks.get("file"), "ranks": b.marks.get("ranks")}
                   for b in blocks if b.lang in RUNNABLE and "skip" not in b.marks
                   and _unavailable(b) is None]}),
        encoding="utf-8")
    log = folder / ".output.txt"
    with open(log, "wb") as out:
        try:
            proc = subprocess.run([sys.executable, doc_blocks.__file__, str(spec)], cwd=folder,
                                  stdout=out, stderr=subprocess.STDOUT, env=_env(),
                                  timeout=DOC_TIMEOUT, check=False)
            ended = f"the driver exited with status {proc.returncode}"
        except subprocess.TimeoutExpired:
            ended = f"{doc} did not finish in {DOC_TIMEOUT} s"
    got: dict[str, dict[str, Any]] = {}
    if results.exists():
        for line in results.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            got[r["id"]] = r
    tail = log.read_text(encoding="utf-8", errors="replace")[-6000:]
    for r in got.values():
        if r["status"] == "started":          # it was running when the driver ended
            r.update(status="failed", detail=f"{ended} while this block ran")
        if r["status"] == "failed":
            r["detail"] += f"\n--- the document's output (tail)\n{tail}"
    return got


class _Runs:
    """The documents' results, run side by side on first use (each once)."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2))
        self._futures: dict[str, concurrent.futures.Future[dict[str, dict[str, Any]]]] = {}

    def _submit(self, doc: str) -> None:
        if doc not in self._futures:
            folder = self._folder / doc.replace("/", "_")
            folder.mkdir()
            self._futures[doc] = self._pool.submit(_run_document, doc, folder)

    def result(self, block: Block) -> dict[str, Any]:
        with self._lock:
            if not self._futures and "PYTEST_XDIST_WORKER" not in os.environ:
                for doc in dict.fromkeys(b.doc for b in RUN if "skip" not in b.marks):
                    self._submit(doc)       # all at once: they run side by side
            self._submit(block.doc)
            fut = self._futures[block.doc]
        got = fut.result()
        return got.get(block.id, {"status": "failed", "detail": "the driver never reached it"})

    def close(self) -> None:
        self._pool.shutdown(wait=True)


@pytest.fixture(scope="module")
def runs() -> Iterator[_Runs]:
    with tempfile.TemporaryDirectory(prefix="accelrt-docs-") as d:
        r = _Runs(Path(d))
        yield r
        r.close()


@pytest.mark.parametrize("block", RUN, ids=[b.id for b in RUN])
def test_doc_block_runs_as_written(block: Block, runs: _Runs) -> None:
    if "skip" in block.marks:
        pytest.skip(f"{block.id}: {block.marks['skip']}")
    if (why := _unavailable(block)) is not None:
        pytest.skip(f"{block.id}: {why}")
    r = runs.result(block)
    assert r["status"] == "ok", f"{block.id} ({block.lang}) {r['status']}:\n{r['detail']}"


def test_every_block_is_run_or_text() -> None:
    seen = {b.lang for b in ALL}
    assert {"python", "bash", "console"} <= seen
    for b in ALL:
        if b.lang in ("", "text"):
            assert not any(ln.startswith("$ ") for ln in b.code.splitlines()), \
                f"{b.id}: a command transcript in an untyped block: make it ```console"
        if b.lang not in RUNNABLE:
            assert not b.marks, f"{b.id}: a marking on a block that never runs"
        if b.lang == "console" and "skip" not in b.marks:
            assert console_commands(b.code), f"{b.id}: a console block without a $ line"
        if "file" in b.marks:
            later = [o for o in ALL if o.doc == b.doc and o.line > b.line]
            assert any(Path(b.marks["file"]).stem in o.code for o in later), \
                f"{b.id}: saved as {b.marks['file']}, which no later block of {b.doc} uses"
        if b.lang in RUNNABLE and never_runs(b.code):
            assert "skip" in b.marks, f"{b.id}: it installs packages: mark it <!-- skip: ... -->"
        if "ranks" in b.marks:
            assert b.lang in ("python", "py") and b.marks["ranks"].isdigit(), b.id


#: Why a block may be skipped: what cannot run here, nothing else.
SKIP_REASONS = ("needs a GPU", "needs several hosts", "installs packages", "runs the reader's",
                "runs tests of this suite", "takes about")


def test_skips_say_why_the_block_cannot_run_here() -> None:
    for b in ALL:
        if "skip" in b.marks:
            assert b.marks["skip"].startswith(SKIP_REASONS), \
                f"{b.id}: skip reason {b.marks['skip']!r} is none of {SKIP_REASONS}"


def test_markings_are_checked(tmp_path: Path) -> None:
    doc = tmp_path / "d.md"
    doc.write_text("<!-- skip: needs a GPU -->\n```python\nx = 1\n```\n<!-- skpi: typo -->\n"
                   "```bash\ntrue\n```\n")
    with pytest.raises(ValueError, match="unknown marking"):
        blocks_of(doc, tmp_path)
    doc.write_text("<!-- skip: needs a GPU -->\n<!-- file: a.py -->\n```python\nx = 1\n```\n"
                   "  ```console\n  $ echo a \\\n      b\n  a b\n  ```\n")
    a, c = blocks_of(doc, tmp_path)
    assert a.marks == {"skip": "needs a GPU", "file": "a.py"} and a.code == "x = 1\n"
    assert (c.lang, console_commands(c.code)) == ("console", ["echo a  b"])


def test_readme_quick_start_has_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert 'pip install . && accelrt info' in text
    assert 'pip install ".[test]" && python -m pytest -n auto --dist loadfile' in text
