"""``dir()`` of every accelrt module lists its whole ``__all__``: the names a module makes on
first use (PEP 562 ``__getattr__``) and the capture-hook functions of a device module's
``graphs`` (methods of its module object) were missing, so tab completion and
``inspect.getmembers`` did not see them."""

from __future__ import annotations

import types

import accelrt as acc


def _modules() -> list[types.ModuleType]:
    import accelrt.backends
    import accelrt.interop
    import accelrt.interop.numba
    roots: list[types.ModuleType] = [acc, acc.memory, acc.random, acc.comm, acc.graphs,
                                     acc.distributed, accelrt.backends, accelrt.interop,
                                     accelrt.interop.numba]
    for dm in (acc.cuda, acc.cpu, acc.opencl):
        roots.append(dm)
        roots += [v for n in dir(dm) if isinstance(v := getattr(dm, n, None), types.ModuleType)]
    return roots


def test_dir_lists_every_name_of_all() -> None:
    missing = {m.__name__: [n for n in m.__all__ if n not in dir(m)]
               for m in _modules() if getattr(m, "__all__", None)}
    assert {k: v for k, v in missing.items() if v} == {}


def test_graph_hooks_are_module_attributes() -> None:
    graphs = acc.cpu.graphs
    seen: list[object] = []
    handle = graphs.register_graph_instantiate_hook(seen.append)
    try:
        assert "register_graph_instantiate_hook" in vars(graphs)
        assert callable(vars(graphs)["register_graph_destroy_hook"])
    finally:
        handle.remove()
