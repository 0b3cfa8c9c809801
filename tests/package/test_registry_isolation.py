"""The suite's backend-registry isolation (tests/conftest.py, tests/helpers/registry.py).

Regression: ``pytest -p no:randomly tests/runtime tests/backends`` failed in
``test_all_backend_errors_mapped.py[cpuarr-...]`` with "the cpuarr backend instance is closed":
``tests/runtime/test_array.py`` registered ``cpuarr`` at import, so every later module's
parametrisation over ``registered()`` collected it, and its module fixture had closed it by the
time those tests ran. Modules now register their backends for their own tests
(``module_backends``), importing a module that changes the registry fails its collection, each
test's registrations are put back after it, and a module that leaves its fixtures'
registrations behind fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import registry

import accelrt as acc
from accelrt.backends.cpu import CpuBackend

ROOT = Path(__file__).resolve().parents[2]

_FILES = {
    # registers at import: its collection fails, and nothing of it stays registered
    "test_a_registers_at_import.py": '''
        import accelrt as acc
        from accelrt.backends.cpu import CpuBackend
        acc.backends.register("isoimport", lambda: CpuBackend(name="isoimport"))

        def test_never_runs():
            pass
        ''',
    # the owner of a backend, as tests/runtime/test_array.py is of cpuarr
    "test_b_owner.py": '''
        import accelrt as acc
        from accelrt.backends.cpu import CpuBackend
        from helpers.registry import module_backends

        _backends = module_backends({"isoown": lambda: CpuBackend(num_devices=2,
                                                                  async_streams=True,
                                                                  name="isoown")})
        SEEN = []

        def test_uses_its_backend():
            assert acc.zeros(2, device="isoown:1").tolist() == [0.0, 0.0]
            SEEN.append(acc.backends.get_backend("isoown"))

        def test_registers_one_for_itself():
            acc.backends.register("isotest", lambda: CpuBackend(async_streams=True,
                                                                name="isotest"))
            SEEN.append(acc.backends.get_backend("isotest"))

        def test_the_last_tests_registration_is_gone_and_closed():
            assert "isotest" not in acc.backends.registered()
            assert SEEN[1].closed and not SEEN[0].closed
        ''',
    # parametrised over registered() at import, as test_all_backend_errors_mapped.py is
    "test_c_all_backends.py": '''
        import pytest
        import accelrt as acc

        NAMES = acc.backends.registered()

        @pytest.mark.parametrize("name", NAMES)
        def test_each_registered_backend_is_open(name):
            if acc.backends.unavailable_reason(name) is None:
                assert not acc.backends.get_backend(name).closed

        def test_the_owners_backend_was_never_collected_and_is_gone():
            assert "isoown" not in NAMES and "isoimport" not in NAMES
            assert "isoown" not in acc.backends.registered()
        ''',
    # a module-scoped fixture that registers and forgets to unregister
    "test_d_module_fixture_leaks.py": '''
        import pytest
        import accelrt as acc
        from accelrt.backends.cpu import CpuBackend

        @pytest.fixture(scope="module")
        def mine():
            acc.backends.register("isomod", lambda: CpuBackend(name="isomod"))
            yield "isomod"

        def test_uses_it(mine):
            assert acc.zeros(1, device=f"{mine}:0").tolist() == [0.0]
        ''',
    "test_e_after.py": '''
        import accelrt as acc

        def test_the_leaking_modules_backend_was_put_back():
            assert "isomod" not in acc.backends.registered()

        def test_closing_the_registrys_cpu_instance_fails_the_test():
            acc.backends.get_backend("cpu").close()
        ''',
}


def test_a_module_owns_its_backends_and_the_registry_is_put_back(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    for name, text in _FILES.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\nmarkers =\n    leaks_ok(reason): leaks on purpose\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         "-c", str(ini), "--continue-on-collection-errors", "-rfE", *sorted(_FILES)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    text = out.stdout + out.stderr
    summary = text.split("short test summary")[-1]
    assert "importing test_a_registers_at_import.py changed the backend registry" in text, text
    assert "'isoimport' was registered and not unregistered" in text
    assert "ERROR test_a_registers_at_import.py" in summary
    assert "test_d_module_fixture_leaks.py left the backend registry changed" in text
    assert "'isomod' was registered and not unregistered" in text
    assert "ERROR test_d_module_fixture_leaks.py::test_uses_it" in summary
    assert "closed the registry's instance of 'cpu'" in text
    assert "ERROR test_e_after.py::test_closing_the_registrys_cpu_instance_fails_the_test" \
        in summary
    assert "test_b_owner" not in summary and "test_c_all_backends" not in summary, text
    assert "FAILED" not in summary, text


def test_restore_closes_what_was_registered_since_and_the_core_forgets_it() -> None:
    before = registry.snapshot()
    acc.backends.register("isorestore", lambda: CpuBackend(async_streams=True,
                                                           name="isorestore"))
    b = acc.backends.get_backend("isorestore")
    assert acc.zeros(2, device="isorestore:0").tolist() == [0.0, 0.0]
    assert registry.differences(before) == [
        "'isorestore' was registered and not unregistered"]
    assert registry.restore(before) == ["isorestore"]
    assert b.closed and registry.differences(before) == []
    with pytest.raises(acc.BackendUnavailableError, match="Unknown backend 'isorestore'"):
        acc.zeros(2, device="isorestore:0")


def test_restore_puts_back_a_replaced_factory_and_its_instance() -> None:
    before = registry.snapshot()
    cpu = acc.backends.get_backend("cpu")
    acc.backends.register("cpu", lambda: CpuBackend(num_devices=3, name="cpu"), replace=True)
    other = acc.backends.get_backend("cpu")
    assert other is not cpu
    assert registry.differences(before) == [
        "the built-in 'cpu' was replaced (replace=True) and not put back"]
    registry.restore(before)
    assert acc.backends.get_backend("cpu") is cpu and not cpu.closed and other.closed
    assert acc.zeros(1, device="cpu:0")._b is cpu
