"""Issue 14 §3: errors a user can act on (CLI checks run in subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import accelrt as acc
from accelrt.backends.cpu import CpuBackend
from accelrt.backends.cpu._config import _known_physical_memory, config_error, resolve_config
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import parse_config

MiB = 1 << 20


def run(*args: str, env: dict[str, str] | None = None, code: str | None = None,
        **kw: object) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "accelrt", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=120,  # noqa: PLW1510
                          **kw)  # type: ignore[call-overload]


# ---------------------------------------------------------------------- cpu out of memory

def test_cpu_oom_reports_the_size_asked_for_and_the_budget() -> None:
    code = textwrap.dedent("""
        import accelrt as acc
        try:
            acc.empty(4 << 20, dtype="uint8", device="cpu")
        except acc.OutOfMemoryError as e:
            print(e)
    """)
    r = run(code=code, env={"ACCELRT_CPU_MEMORY": "8MiB"})
    assert r.returncode == 0, r.stderr
    msg = r.stdout
    assert "Tried to allocate 4.00 MiB." in msg            # not the 20 MiB segment
    assert "new 20.00 MiB segment for the 4.00 MiB request" in msg
    assert "memory budget is 8.0 MiB per device (ACCELRT_CPU_MEMORY=8MiB)" in msg
    assert "ACCELRT_CPU_MEMORY=16MiB" in msg


def test_cpu_oom_names_a_constructor_budget() -> None:
    a = DeviceCachingAllocator(CpuBackend(memory_limit="4MiB"), 0)
    with pytest.raises(acc.OutOfMemoryError) as ei:
        a.malloc(3 * MiB + 5, 0)
    msg = str(ei.value)
    assert "Tried to allocate 3.00 MiB." in msg
    assert "memory_limit='4MiB' given to CpuBackend" in msg and "memory_limit='8MiB'" in msg


def test_budget_over_physical_memory_is_refused() -> None:
    phys = _known_physical_memory()
    if phys is None:
        pytest.skip("this platform does not report its physical memory")
    huge = f"{phys // (1 << 30) + 64}GiB"
    err = config_error({"ACCELRT_CPU_MEMORY": huge})
    assert err is not None and err.startswith(f"ACCELRT_CPU_MEMORY={huge!r}")
    assert "more than this machine's physical memory" in err and "at most" in err
    with pytest.raises(ValueError, match="physical memory"):
        resolve_config(memory_limit=phys + (1 << 30), env={})
    assert resolve_config(memory_limit=phys, env={}).memory_limit == phys


def test_budget_over_physical_memory_in_info() -> None:
    if _known_physical_memory() is None:
        pytest.skip("this platform does not report its physical memory")
    r = run("info", "--backend", "cpu", "--no-check", env={"ACCELRT_CPU_MEMORY": "1000TiB"})
    assert r.returncode == 1
    assert "physical memory" in r.stdout and "Traceback" not in r.stderr


# ---------------------------------------------------------------------- device strings

@pytest.mark.parametrize("text, guess", [("gpu:0", "cuda:0"), ("cuda0", "cuda:0"),
                                         ("CPU:0", "cpu:0"), ("cpuu", "cpu"),
                                         ("zzz", None)])
def test_unknown_device_type_fails_when_made(text: str, guess: str | None) -> None:
    with pytest.raises(acc.BackendUnavailableError) as ei:
        acc.device(text)
    msg = str(ei.value)
    assert "Known backends: cuda, opencl, cpu" in msg and repr(text) in msg
    assert isinstance(ei.value, RuntimeError)               # as PyTorch's RuntimeError
    if guess is None:
        assert "did you mean" not in msg
    else:
        assert f"did you mean {guess!r}?" in msg
    with pytest.raises(acc.BackendUnavailableError):
        acc.empty(2, device=text)


def test_known_but_unavailable_device_types_are_still_devices() -> None:
    assert acc.device("cuda:0").type == "cuda"              # made; fails on use if no driver
    assert acc.device("opencl").index is None


def test_out_of_range_cpu_index_says_how_to_get_more() -> None:
    n = acc.device_count() if acc.current_accelerator() == acc.device("cpu") else None
    with pytest.raises(IndexError) as ei:
        acc.empty(2, device="cpu:63")
    assert "ACCELRT_CPU_DEVICES" in str(ei.value)
    assert n is None or f"is out of index range [0, {n})" in str(ei.value)


# ---------------------------------------------------------------------- allocator keys

def test_unknown_allocator_key_suggests_and_lists() -> None:
    with pytest.raises(ValueError) as ei:
        parse_config("max_split_mb:128")
    msg = str(ei.value)
    assert "Unrecognized key 'max_split_mb'" in msg
    assert "did you mean max_split_size_mb?" in msg
    assert "Valid keys:" in msg and "expandable_segments" in msg and "page_reuse" in msg


def test_unknown_allocator_key_names_the_environment_variable() -> None:
    code = "import accelrt as acc\nacc.empty(4, device='cpu')\n"
    r = run(code=code, env={"ACCELRT_ALLOC_CONF": "expandable_segment:True"})
    assert r.returncode != 0
    assert "ACCELRT_ALLOC_CONF='expandable_segment:True'" in r.stderr
    assert "did you mean expandable_segments?" in r.stderr


def test_unknown_allocator_key_names_set_allocator_settings() -> None:
    before = acc.memory.get_allocator_settings()
    with pytest.raises(ValueError) as ei:
        acc.memory.set_allocator_settings("garbage_colection_threshold:0.5")
    msg = str(ei.value)
    assert msg.startswith("set_allocator_settings='garbage_colection_threshold:0.5': ")
    assert "did you mean garbage_collection_threshold?" in msg
    assert acc.memory.get_allocator_settings() == before     # nothing changed


# ---------------------------------------------------------------------- accelrt info

def test_info_fails_on_unknown_accelerator() -> None:
    r = run("info", "--no-check", env={"ACCELRT_ACCELERATOR": "nosuch"})
    assert r.returncode == 1
    assert "accelrt info: error:" in r.stderr and "'nosuch'" in r.stderr


def test_info_fails_when_no_backend_is_usable() -> None:
    # the cpu backend refuses a malformed budget; the others are left out with --backend
    r = run("info", "--backend", "cpu", "--no-check", "--json",
            env={"ACCELRT_CPU_MEMORY": "lots", "ACCELRT_ACCELERATOR": ""})
    assert r.returncode == 1
    assert "no usable backend" in r.stderr


def test_info_is_fine_otherwise() -> None:
    r = run("info", "--backend", "cpu", "--no-check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr == ""


@pytest.mark.parametrize("cmd, words", [
    (["info"], "Exit status"),
    (["replay"], "Replay recorded allocation traces"),
    (["memory"], "accelrt memory tune"),
    (["memory", "tune"], "candidate"),
    (["memory", "viz"], "usage: accelrt memory viz"),
])
def test_every_subcommand_help_describes_it(cmd: list[str], words: str) -> None:
    r = run(*cmd, "--help")
    assert r.returncode == 0, r.stderr
    assert words in r.stdout
    assert r.stdout.count("\n") >= 4          # a description, not only a usage line


@pytest.mark.parametrize("cmd", [
    ["info", "--no-check"],
    ["info", "--json"],
    ["--help"],
    ["replay", "tests/data/traces/trace_varlen_encoder.json.gz"],
    ["memory", "tune", "tests/data/traces/trace_varlen_encoder.json.gz"],
])
def test_output_into_a_closed_pipe_ends_quietly(cmd: list[str]) -> None:
    """Like ``accelrt ... | head -0``: the reader is gone before the first write."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        r = subprocess.run([sys.executable, "-m", "accelrt", *cmd], stdout=write_end,  # noqa: PLW1510
                           stderr=subprocess.PIPE, text=True, timeout=120, cwd=root)
    finally:
        os.close(write_end)
    assert "Traceback" not in r.stderr and "BrokenPipeError" not in r.stderr, r.stderr
    # 141 as after SIGPIPE; argparse's --help ignores the failed write itself and exits 0
    assert r.returncode == (0 if cmd == ["--help"] else 141)
