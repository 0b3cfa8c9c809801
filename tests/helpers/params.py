"""``pytest.param`` per backend name, skipped with the reason where the backend is unusable
(shared by the ``backend`` fixture of ``tests/conftest.py`` and tests with their own list)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from accelrt import _backend


def backend_params(names: Iterable[str] | None = None,
                   ids: Mapping[str, str] | None = None,
                   own: Iterable[str] = ()) -> list[object]:
    """One param per backend in ``names`` (default: every registered one); a name that is not
    registered or not usable here is skipped with the reason; ``ids`` renames test ids.

    ``own`` names the backends the calling module registers for its tests
    (:func:`helpers.registry.module_backends`): they are not registered yet at collection, so
    they are taken as they are, never skipped."""
    registered = _backend.registered()
    mine = frozenset(own)
    params: list[object] = []
    for name in registered if names is None else names:
        if name in mine:
            reason = None
        else:
            reason = _backend.unavailable_reason(name) if name in registered else "not registered"
        marks = [pytest.mark.skip(reason=f"backend {name!r} unavailable: {reason}")] \
            if reason else []
        params.append(pytest.param(name, marks=marks, id=(ids or {}).get(name, name)))
    return params
