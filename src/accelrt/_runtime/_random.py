"""The random functions of a device module (``torch.cuda.random``): seeding and the states of
the backend's default generators (:mod:`accelrt.random`'s Philox generators), and the
``random`` submodule that carries them.

Example::

    >>> import accelrt as acc
    >>> saved = acc.cpu.get_rng_state()
    >>> acc.cpu.random.manual_seed(3)
    >>> acc.cpu.initial_seed()
    3
    >>> acc.cpu.set_rng_state(saved)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._device import _tls
from ._base import ModuleBase, TypedRandomModule

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from .._typing import DeviceLike, RngStateLike
    from ..random._generator import Generator

__all__ = ["RandomFunctions", "RandomModule"]


class RandomFunctions(ModuleBase):
    """``torch.cuda``'s random functions bound to one backend (a part of
    :class:`~accelrt._runtime.DeviceModule`).

    Example::

        >>> import accelrt as acc
        >>> len(acc.backends.device_module("cpu").get_rng_state())
        16
    """

    def manual_seed(self, seed: int) -> None:
        """Seed the default generator of the backend's current device; silently ignored where
        the backend cannot be used (as in PyTorch). ``seed`` is read with ``int(seed)``, as
        ``torch.cuda.manual_seed`` reads it (a bool, a float or a numeric string is taken).

        Raises:
            TypeError/ValueError: ``int(seed)`` fails or is not in ``[-2**63, 2**64)``.

        Example::

            >>> import accelrt as acc
            >>> saved = acc.cpu.get_rng_state()
            >>> acc.cpu.manual_seed(7)
            >>> acc.cpu.initial_seed()
            7
            >>> acc.cpu.set_rng_state(saved)
        """
        from ..random import _generator as g
        value = g._seed_arg(seed)
        b = self._usable()
        if b is not None:
            g._set(b, _tls.device.get(b.name, 0), value)

    def manual_seed_all(self, seed: int) -> None:
        """Seed the default generators of every device of the backend; silently ignored where
        the backend cannot be used.

        Example::

            >>> import accelrt as acc
            >>> saved = acc.cpu.get_rng_state_all()
            >>> acc.cpu.manual_seed_all(7)
            >>> acc.cpu.set_rng_state_all(saved)
        """
        from ..random import _generator as g
        value = g._seed_arg(seed)
        b = self._usable()
        if b is not None:
            for index in range(b.device_count()):
                g._set(b, index, value)

    def seed(self) -> None:
        """Seed the current device's default generator with a random number (see
        :meth:`initial_seed`); silently ignored where the backend cannot be used.

        Example::

            >>> import accelrt as acc
            >>> saved = acc.cpu.get_rng_state()
            >>> acc.cpu.seed()
            >>> acc.cpu.set_rng_state(saved)
        """
        from ..random._generator import nondeterministic_seed
        self.manual_seed(nondeterministic_seed())

    def seed_all(self) -> None:
        """Seed every device's default generator with one random number; silently ignored
        where the backend cannot be used.

        Example::

            >>> import accelrt as acc
            >>> saved = acc.cpu.get_rng_state_all()
            >>> acc.cpu.seed_all()
            >>> len({g.initial_seed() for g in acc.cpu.default_generators})  # one seed for all
            1
            >>> acc.cpu.set_rng_state_all(saved)
        """
        from ..random._generator import nondeterministic_seed
        self.manual_seed_all(nondeterministic_seed())

    @property
    def default_generators(self) -> tuple[Generator, ...]:
        """The default generator of every device of the backend, by index
        (``torch.cuda.default_generators``); ``()`` where the backend cannot be used. Read on
        each access: a generator is made on first use (see
        :func:`accelrt.random.default_generator`) and stays the device's default, so
        ``default_generators[i]`` is the generator that :meth:`manual_seed` on device ``i`` and
        ``acc.rand(..., device=i)`` use. Nothing here initialises a device.

        Example::

            >>> import accelrt as acc
            >>> gens = acc.cpu.default_generators
            >>> len(gens) == acc.cpu.device_count()
            True
            >>> gens[0] is acc.random.default_generator("cpu:0")
            True
        """
        from ..random import _generator as g
        b = self._usable()
        if b is None:
            return ()
        return tuple(g._default_for(b, index) for index in range(b.device_count()))

    def initial_seed(self) -> int:
        """The seed of the current device's default generator.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.initial_seed() >= 0
            True
        """
        from ..random import _generator as g
        b = self._b()
        return g._get(b, _tls.device.get(b.name, 0))[0]

    def get_rng_state(self, device: DeviceLike = None) -> npt.NDArray[np.uint8]:
        """The 16-byte state of a device's default generator (``numpy.uint8``).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_rng_state().shape
            (16,)
        """
        from ..random import _generator as g
        b, index = self._resolve(device)
        return g._pack_state(*g._get(b, index))

    def set_rng_state(self, new_state: RngStateLike, device: DeviceLike = None) -> None:
        """Restore a device's default generator from :meth:`get_rng_state`.

        Raises:
            TypeError/ValueError: the state is not a contiguous uint8 array of 16 bytes (or
                8, the seed alone), as :meth:`accelrt.random.Generator.set_state` checks it.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.set_rng_state(acc.cpu.get_rng_state())
        """
        from ..random import _generator as g
        seed_, offset = g._unpack_state(new_state)
        b, index = self._resolve(device)
        g._set(b, index, seed_, offset)

    def get_rng_state_all(self) -> list[npt.NDArray[np.uint8]]:
        """The states of every device of the backend, by index.

        Example::

            >>> import accelrt as acc
            >>> len(acc.cpu.get_rng_state_all()) == acc.cpu.device_count()
            True
        """
        from ..random import _generator as g
        b = self._b()
        return [g._pack_state(*g._get(b, i)) for i in range(b.device_count())]

    def set_rng_state_all(self, new_states: Iterable[RngStateLike]) -> None:
        """Set the state of device ``i`` to ``new_states[i]``.

        Raises:
            IndexError: more states than devices.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.set_rng_state_all(acc.cpu.get_rng_state_all())
        """
        from ..random import _generator as g
        b = self._b()
        parsed = [g._unpack_state(s) for s in new_states]   # validate all before changing any
        n = b.device_count()
        if len(parsed) > n:
            raise IndexError(f"set_rng_state_all got {len(parsed)} states but {b.name!r} has "
                             f"only {n} device(s)")
        for index, (seed_, offset) in enumerate(parsed):
            g._set(b, index, seed_, offset)

    def _get_rng_state_offset(self, device: DeviceLike = None) -> int:
        """The offset of a device's default generator (``None``: the current device), as
        ``torch.cuda._get_rng_state_offset`` (private in PyTorch; functorch's and other
        libraries' Philox helpers call it): :meth:`accelrt.random.Generator.get_offset` of
        the device's default generator, so it counts accelrt's Philox blocks (PyTorch's
        counts 32-bit outputs, docs/random.md).

        Raises:
            RuntimeError: on a capturing stream, as ``Generator.get_offset``.
            BackendUnavailableError: the backend cannot be used here (PyTorch's
                initialises CUDA and raises there too).

        Example::

            >>> import accelrt as acc
            >>> saved = acc.cpu.get_rng_state()
            >>> acc.cpu.manual_seed(1)
            >>> acc.cpu._get_rng_state_offset()
            0
            >>> acc.cpu.set_rng_state(saved)
        """
        from ..random import _generator as g
        b, index = self._resolve(device)
        return g._default_for(b, index).get_offset()

    def _set_rng_state_offset(self, offset: int, device: DeviceLike = None) -> None:
        """Set the offset of a device's default generator (``None``: the current device) and
        keep its seed, as ``torch.cuda._set_rng_state_offset`` (private in PyTorch), which
        calls ``Generator.set_offset``: ``offset`` is read as
        :meth:`accelrt.random.Generator.set_offset` reads it and counts Philox blocks.
        Silently ignored where the backend cannot be used (PyTorch queues it for a CUDA
        initialisation that never comes).

        Raises:
            TypeError/ValueError: ``offset`` is not an int in ``[-2**63, 2**64)`` (also
                ``RuntimeError``, as PyTorch's "manual_offset expected a long").
            RuntimeError: on a capturing stream, as ``Generator.set_offset``.

        Example::

            >>> import accelrt as acc
            >>> saved = acc.cpu.get_rng_state()
            >>> acc.cpu._set_rng_state_offset(100)
            >>> acc.cpu._get_rng_state_offset()
            100
            >>> acc.cpu.set_rng_state(saved)
        """
        from ..random import _generator as g
        value = g._check_seed(offset, "offset", "manual_offset")
        if self._usable() is None:
            return
        b, index = self._resolve(device)
        g._default_for(b, index).set_offset(value)


_RANDOM_NAMES = ("get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all",
                 "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed")


class RandomModule(TypedRandomModule):
    """``torch.cuda.random`` for one device module: ``accelrt.cuda.random`` (importable as
    ``import accelrt.cuda.random``) has the module's seeding and RNG-state functions.

    Example::

        >>> import accelrt as acc
        >>> acc.cpu.random.initial_seed() == acc.cpu.initial_seed()
        True
    """

    def __init__(self, dm: RandomFunctions) -> None:
        super().__init__(f"{dm.module}.random", f"``torch.cuda.random`` of {dm.module}.")
        self.__all__ = list(_RANDOM_NAMES)
        for name in _RANDOM_NAMES:
            setattr(self, name, getattr(dm, name))
