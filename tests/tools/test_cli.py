"""The ``accelrt`` command line: info (human and JSON), exit status, delegation, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import accelrt
from accelrt import cli


def run(*args: str, env: dict[str, str] | None = None,
        code: str | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "accelrt", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=60)  # noqa: PLW1510


def test_info_json_in_process(capsys):
    assert cli.main(["info", "--json", "--no-check"]) in (0, 1)
    listing = json.loads(capsys.readouterr().out)
    assert [b["name"] for b in listing["backends"]][:3] == ["cuda", "opencl", "cpu"]
    assert cli.main(["info", "--json", "--backend", "cpu"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["ok"] is True and info["version"] == accelrt.__version__
    assert [b["name"] for b in info["backends"]] == ["cpu"]
    cpu = info["backends"][0]
    assert cpu["available"] is True and cpu["reason"] is None
    dev = cpu["devices"][0]
    assert dev["device"] == "cpu:0"
    assert dev["properties"]["total_memory"] > 0 and dev["properties"]["name"]
    assert 0 <= dev["memory"]["free"] <= dev["memory"]["total"]
    steps = {s["name"]: s for s in dev["self_check"]["steps"]}
    assert list(steps) == ["allocate", "copy round-trip", "stream + events", "synchronize",
                           "free"]
    assert all(s["ok"] and s["ms"] >= 0 for s in steps.values())
    assert steps["free"]["detail"] == "returned to the allocator"
    for b in listing["backends"]:
        if not b["available"]:
            # a backend registered under another name (tests register OpenCL's class as
            # "nsocl") gives its class's reason, which names the library to install
            assert b["reason"] and b["devices"] == []


def test_info_human_subprocess_with_several_devices():
    r = run("info", env={"ACCELRT_CPU_DEVICES": "2", "ACCELRT_CPU_STREAMS": "async"})
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "backends:" in out and "devices:" in out
    assert "cpu:0" in out and "cpu:1" in out
    lines = out.splitlines()
    headers = [ln for ln in lines if ln.startswith("  ") and ln.split()[0].count(":") == 1
               and not ln.startswith("    ")]
    assert sum(ln.split()[0].startswith("cpu:") for ln in headers) == 2
    assert out.count("self-check PASS") == len(headers) and "all self-checks passed" in out
    assert "unavailable" in out            # cuda/opencl are listed with the reason
    assert len(out.splitlines()) < 30


def test_info_no_check_and_backend_filter(capsys):
    assert cli.main(["info", "--no-check", "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    # the header names the current accelerator (cuda on a GPU machine); the listing must not
    body = "\n".join(line for line in out.splitlines()
                     if not line.startswith("current accelerator"))
    assert "self-check" not in out and "cpu:0" in out and "cuda" not in body
    assert cli.main(["info", "--backend", "nosuch"]) == 2
    assert "unknown backend" in capsys.readouterr().err


def test_failing_self_check_gives_nonzero_exit():
    code = textwrap.dedent("""
        import sys
        from accelrt import backends, cli
        from accelrt.backends.cpu import CpuBackend

        class Broken(CpuBackend):
            def memcpy(self, index, dst, src, nbytes, kind, stream):
                pass   # loses every copy

        backends.register("brokendev", lambda: Broken(name="brokendev"))
        sys.exit(cli.main(sys.argv[1:]))
    """)
    r = subprocess.run([sys.executable, "-c", code, "info", "--backend", "brokendev"],  # noqa: PLW1510
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "self-check FAIL" in r.stdout and "copy round-trip FAILED" in r.stdout
    assert "SOME CHECKS FAILED" in r.stdout
    r = subprocess.run([sys.executable, "-c", code, "info", "--json"],  # noqa: PLW1510
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    info = json.loads(r.stdout)
    by_name = {b["name"]: b for b in info["backends"]}
    assert info["ok"] is False
    assert by_name["cpu"]["devices"][0]["self_check"]["ok"] is True
    broken = by_name["brokendev"]["devices"][0]["self_check"]
    assert broken["ok"] is False
    failed = [s for s in broken["steps"] if not s["ok"]]
    assert failed[0]["name"] == "copy round-trip" and "differ" in failed[0]["detail"]


def test_self_check_function():
    result = cli.self_check("cpu:0", nbytes=1000)
    assert result["ok"] and len(result["steps"]) == 5


def test_self_check_uses_a_supported_dtype():
    from accelrt import backends
    from accelrt.backends.cpu import CpuBackend

    class OnlyFloat(CpuBackend):
        def get_device_capability(self, index):
            return {"supported_dtypes": ["float64", "float32"]}

    backends.register("cpuonlyfloat", lambda: OnlyFloat(name="cpuonlyfloat"), replace=True)
    result = cli.self_check("cpuonlyfloat:0", nbytes=4096)
    assert result["ok"], result
    assert result["steps"][1]["detail"] == "1024 x float32 (4096 bytes) h2d, d2d, d2h"


def test_version_and_help(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"accelrt {accelrt.__version__}"
    assert cli.main([]) == 2
    assert "info" in capsys.readouterr().err
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "info" in out and "replay" in out and "memory" in out
    assert cli.main(["bogus"]) == 2
    assert "invalid choice" in capsys.readouterr().err
    assert cli.main(["memory"]) == 2
    assert "memory viz" in capsys.readouterr().err


def test_console_script_and_module_agree():
    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"accelrt {accelrt.__version__}"
    script = os.path.join(os.path.dirname(sys.executable), "accelrt")
    if not os.path.exists(script):
        pytest.skip(f"the accelrt console script is not installed next to {sys.executable}")
    r = subprocess.run([script, "info", "--no-check", "--json"], capture_output=True,  # noqa: PLW1510
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["version"] == accelrt.__version__


def test_replay_and_viz_are_delegated(monkeypatch, capsys):
    import accelrt.memory.tools._replay as replay
    from accelrt.memory import viz
    seen = []
    monkeypatch.setattr(replay, "replay_main", lambda argv: seen.append(("replay", argv)) or 3)
    monkeypatch.setattr(viz, "viz_main", lambda argv: seen.append(("viz", argv)) or 0)
    assert cli.main(["replay", "t.json", "--alloc-conf", "x:1"]) == 3
    assert cli.main(["memory", "viz", "snap.json", "-o", "o.html"]) == 0
    assert seen == [("replay", ["t.json", "--alloc-conf", "x:1"]),
                    ("viz", ["snap.json", "-o", "o.html"])]


def test_real_replay_and_viz_entry_points(capsys, tmp_path):
    assert cli.main(["replay", "--help"]) == 0
    assert "usage: accelrt replay" in capsys.readouterr().out
    assert cli.main(["memory", "viz", "--help"]) == 0
    assert "usage: accelrt memory viz" in capsys.readouterr().out
    assert cli.main(["replay", str(tmp_path / "missing.json")]) != 0


def test_missing_subcommand_module_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "accelrt.memory.viz", None)   # import fails
    assert cli.main(["memory", "viz", "x"]) == 2
    err = capsys.readouterr().err
    assert "'accelrt memory viz' is not available" in err and "accelrt.memory.viz" in err


def test_bad_accelerator_env_is_reported():
    r = run("info", "--no-check", env={"ACCELRT_ACCELERATOR": "nosuch"})
    assert r.returncode == 1, r.stderr        # issue 14: a setting that cannot be honoured fails
    assert "current accelerator: error" in r.stdout and "nosuch" in r.stdout
    assert "accelrt info: error:" in r.stderr and "known backends are" in r.stderr
