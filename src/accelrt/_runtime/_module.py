"""The ``torch.cuda`` runtime bound to one backend: :class:`DeviceModule`, the memory and
random functions (:mod:`._memory`, :mod:`._random`) with devices, streams, properties,
sync debugging and monitoring, written once for every backend.

Example::

    >>> import accelrt as acc
    >>> m = acc.backends.device_module("cpu")
    >>> m.device_count() >= 1, type(m.current_stream()).__name__
    (True, 'Stream')
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import _graph, _stream
from .. import _device as _dev
from .. import _sync_debug as _sd
from .._device import _lazy_init, _tls
from .._errors import AcceleratorTypeError, BackendUnavailableError, type_shown
from ._args import current_if_negative, index_of, typed
from ._classes import Event, ExternalStream, Stream, StreamContext, device, device_of
from ._memory import MemoryFunctions, MemoryModule
from ._random import RandomFunctions, RandomModule
from ._submodules import GraphsModule, ProfilerModule, StreamsModule

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._properties import DeviceProperties
    from .._typing import DeviceLike

__all__ = ["DeviceModule"]

_S = TypeVar("_S", bound="Stream[Any]")
_E = TypeVar("_E", bound=Event)


class DeviceModule(MemoryFunctions, RandomFunctions, Generic[_S, _E]):
    """The ``torch.cuda`` runtime bound to one backend; device modules bind its methods to
    module-level names.

    Args:
        backend_name: a registered backend name (it need not be usable here).
        module: the name of the device module, e.g. ``"accelrt.cuda"``.
        stream_class: the module's :class:`Stream` subclass.
        external_stream: the module's :class:`ExternalStream` (a subclass of it and of the
            module's ``Stream``).
        event_class: the module's :class:`Event` subclass.
        stream_context_class: the module's :class:`StreamContext` subclass.
        graph_class: the module's graph class (``accelrt.cuda.CUDAGraph``).

    Example::

        >>> from accelrt._runtime import device_module
        >>> device_module("cpu").memory_allocated(0) >= 0
        True
    """

    def __init__(self, backend_name: str, module: str, *, stream: type[_S],
                 external_stream: type[ExternalStream[Any]], event: type[_E],
                 stream_context: type[StreamContext], device: type[device],
                 device_of: type[device_of], device_index: type[_dev.device_index],
                 graph_class: type[_graph.DeviceGraph], graph: type[_graph.graph]) -> None:
        super().__init__(backend_name, module)
        self.Stream = stream
        self.ExternalStream = external_stream
        self.Event = event
        self.StreamContext = stream_context
        self.device = device
        self.device_of = device_of
        self.device_index = device_index
        self.Graph = self.CUDAGraph = graph_class
        self.graph = graph
        self.export_dot = _graph.export_dot
        #: ``torch.cuda.memory`` of this module (:class:`MemoryModule`).
        self.memory = MemoryModule(self)
        #: ``torch.cuda.random`` and ``torch.cuda.streams`` of this module.
        self.random = RandomModule(self)
        self.streams = StreamsModule(self)
        #: ``torch.cuda.profiler`` of this module (:class:`ProfilerModule`).
        self.profiler = ProfilerModule(self)
        #: ``torch.cuda.nvtx``: NVTX annotates host threads, the same on every module.
        from ..backends.cuda import _nvtx
        self.nvtx = _nvtx
        #: ``torch.cuda.graphs`` of this module (:class:`GraphsModule`).
        self.graphs = GraphsModule(self)

    def __repr__(self) -> str:
        return f"<accelrt device module {self.module!r} for backend {self.name!r}>"

    def is_initialized(self) -> bool:
        """True once some device of the backend was initialised in this process (by
        :meth:`init` or any use). Never raises.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.init()
            >>> acc.cpu.is_initialized()
            True
        """
        return any(name == self.name for name, _ in list(_dev._initialized))

    def init(self) -> None:
        """Initialise the backend's current device now (``torch.cuda.init``); other calls do
        it lazily. Does nothing more if it is initialised already.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.init()
        """
        b = self._b()
        _lazy_init(b, _tls.device.get(b.name, 0))

    @property
    def _initialized(self) -> bool:
        """:meth:`is_initialized` under ``torch.cuda._initialized``'s name: the module flag that
        ``torch.utils.checkpoint`` reads (``getattr(device_module, "_initialized", False)``)
        to decide whether to save and restore the devices' RNG states, as copies of it in
        FairScale, ColossalAI and others do (``if torch.cuda._initialized:``). Assigning a
        true value initialises the backend (:meth:`init`), as scripts that set the flag after
        ``current_device()`` mean it; a false value, and ``del``, change nothing: accelrt
        cannot un-initialise a device, and the flag keeps reading the backend's state (so
        ``monkeypatch.setattr`` and ``mock.patch.object`` restore without an error). Like
        PyTorch's module flag, it takes any value without raising: one without a truth value
        (its ``__bool__`` raises) changes nothing, and a true one on a backend that cannot
        start leaves the flag ``False`` (the next use of the backend raises its error).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.init()
            >>> acc.cpu._initialized
            True
        """
        return self.is_initialized()

    @_initialized.setter
    def _initialized(self, value: object) -> None:
        # (a false value is no request accelrt can act on: a test's monkeypatch undo, which
        # sets the value it read back, or a script forcing PyTorch's lazy init to rerun).
        # PyTorch's assignment never fails: neither may this one
        try:
            wanted = bool(value)
        except Exception:  # noqa: BLE001 - no truth value: nothing to act on
            return
        if wanted:
            try:
                self.init()
            except Exception:  # noqa: BLE001 - the flag stays False; init() raises on use
                pass

    @_initialized.deleter
    def _initialized(self) -> None:
        # nothing to remove (the flag is is_initialized()): `del` and the restore of
        # unittest.mock.patch.object(module, "_initialized", ...), which deletes what it set
        # on a module without it in its __dict__, leave the flag as the backend's state
        pass

    def _lazy_init(self) -> None:
        """:meth:`init` under ``torch.cuda._lazy_init``'s name: PyTorch's name is private, but
        Megatron-LM and DeepSpeed import it (``from torch.cuda import _lazy_init``).

        Raises:
            BackendUnavailableError: the backend cannot be used here (where PyTorch raises
                ``RuntimeError``/``AssertionError``; it is a ``RuntimeError`` too).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu._lazy_init()
            >>> acc.cpu.is_initialized()
            True
        """
        self.init()

    def _lazy_call(self, callable: Callable[[], object],  # noqa: A002 - torch's name
                   **kwargs: object) -> None:
        """``torch.cuda._lazy_call`` (private in PyTorch; Megatron-LM's, apex's and
        DeepSpeed's RNG-state helpers call it): run ``callable()`` now where the backend can
        be used; where it cannot, drop it. ``kwargs`` (PyTorch's ``seed=``/``seed_all=``)
        are accepted and unused.

        PyTorch runs the callable at once when CUDA is initialised and otherwise queues it
        for its lazy initialisation. accelrt runs no deferred calls: a device starts on first
        use and the default generators live on the host, so what the callable does works
        now (starting the device where it needs one). Where the backend cannot be used,
        PyTorch's queue never runs, as its initialisation fails; accelrt drops the call,
        and :meth:`_lazy_init` raises :class:`~accelrt.BackendUnavailableError`.

        Example::

            >>> import accelrt as acc
            >>> state = acc.cpu.get_rng_state()
            >>> acc.cpu._lazy_call(lambda: acc.cpu.default_generators[0].set_state(state))
            >>> bool((acc.cpu.get_rng_state() == state).all())
            True
        """
        if self._usable() is not None:
            callable()

    def ipc_collect(self) -> None:
        """``torch.cuda.ipc_collect``: free the memory this process shared with other processes
        through :mod:`accelrt.multiprocessing` once every consumer released it (returning it to
        the caching allocator); initialises the backend, as PyTorch's does.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.ipc_collect()
        """
        self.init()
        refs = sys.modules.get("accelrt.multiprocessing._refs")
        if refs is not None:   # nothing was shared unless accelrt.multiprocessing is loaded
            refs.collect()

    # ------------------------------------------------------------------ current device
    def current_device(self) -> int:
        """Index of the calling thread's current device of the backend.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.current_device()
            0
        """
        b = self._b()
        return _tls.device.get(b.name, 0)

    def current_device_index(self) -> int:
        """Same as :meth:`current_device` (``torch.accelerator``'s name).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.current_device_index()
            0
        """
        return self.current_device()

    def set_device(self, device: DeviceLike) -> None:
        """Set the calling thread's current device of the backend; a negative index is a
        no-op (``torch.cuda.set_device``).

        Raises:
            ValueError: the device is of another backend, or is ``None``/has no index.
            IndexError: the index is out of range.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.set_device(0)
            >>> acc.cpu.current_device()
            0
        """
        d = typed(self.name, device)
        if isinstance(d, int) and d < 0:
            return
        b = self._b()
        if d is None or (isinstance(d, _dev.device) and d.index is None):
            raise ValueError(f"Expected a device with a specified index or an integer, but "
                             f"got: {device}")
        _dev._set_index(b, index_of(b, d))   # (cuda: its context follows)

    def set_device_index(self, device: DeviceLike, /) -> None:
        """Same as :meth:`set_device` (``torch.accelerator``'s name).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.set_device_index(0)
        """
        self.set_device(device)

    def _DeviceGuard(self, index: int) -> device:  # noqa: N802 - torch.cuda._DeviceGuard's name
        """``torch.cuda._DeviceGuard(index)`` (private in PyTorch; TorchInductor's generated
        code enters it, PyTorch's tests use it): a context manager that makes device
        ``index`` current and restores the previous device on exit, a no-op for a negative
        index. It is the module's :class:`device` context manager of that index; unlike it,
        only an ``int`` is taken, as PyTorch's ``_exchange_device`` takes one.

        Raises:
            AcceleratorTypeError: ``index`` is not an int (a bool included), a ``TypeError``
                and PyTorch's ``RuntimeError`` ("invalid argument to exchangeDevice").
            IndexError: (on entry) the index is out of range.

        Example::

            >>> import accelrt as acc
            >>> with acc.cpu._DeviceGuard(0):
            ...     acc.cpu.current_device()
            0
        """
        if not isinstance(index, int) or isinstance(index, bool):
            raise AcceleratorTypeError(
                f"invalid argument to exchangeDevice: {self.module}._DeviceGuard takes a "
                f"device index (an int), got {type_shown(index)}; pass the index, or use "
                f"{self.module}.device(...) for a device or a string")
        return self.device(index)

    # ------------------------------------------------------------------ streams
    def current_stream(self, device: DeviceLike = None) -> _S:
        """The calling thread's current stream of a device (the current one by default, or for
        ``-1``, as in ``torch.cuda``), as an object of the module's ``Stream`` class.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.current_stream()
            <accelrt.cpu.Stream device=cpu:0 stream_id=0x0 priority=0>
        """
        if device is not None:   # (None, the common case, needs no check)
            device = current_if_negative(self.name, device, only=-1)
        b, index = self._resolve(device)
        return self.Stream._view(_stream._current(b, index))

    def default_stream(self, device: DeviceLike = None) -> _S:
        """The default stream of a device (the current one by default, or for ``-1``, as in
        ``torch.cuda``).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.default_stream() == acc.cpu.current_stream()
            True
        """
        b, index = self._resolve(current_if_negative(self.name, device, only=-1))
        return self.Stream._view(_stream._default(b, (b.name, index)))

    def set_stream(self, stream: _stream.Stream | None) -> None:
        """Make ``stream`` current on its device and its device the current device of the
        backend; ``None`` is a no-op (``torch.cuda.set_stream``).

        Raises:
            TypeError: ``stream`` is not a Stream.
            ValueError: ``stream`` belongs to another backend.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.set_stream(acc.cpu.current_stream())
        """
        if stream is None:
            return
        if isinstance(stream, _stream.Stream) and stream.device_type != self.name:
            raise ValueError(f"set_stream() of {self.module} takes a {self.name} stream, got a "
                             f"{stream.device_type} stream; use accelrt.set_stream()")
        _stream.set_stream(stream)

    def stream(self, stream: _stream.Stream | None) -> StreamContext:
        """``with stream(s):`` makes ``s`` current (and its device), restoring both on exit;
        ``None`` is a no-op (``torch.cuda.stream``): a :class:`StreamContext` of the module.

        Example::

            >>> import accelrt as acc
            >>> isinstance(acc.cpu.stream(None), acc.cpu.StreamContext)
            True
        """
        return self.StreamContext(stream)

    def synchronize(self, device: DeviceLike = None) -> None:
        """Wait for all streams of a device (the current one by default, or for a negative
        index, as ``torch.cuda.synchronize`` reads one); a no-op before the device is
        initialised.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.synchronize()
        """
        b, index = self._resolve(current_if_negative(self.name, device))
        if _dev._is_initialized(b, index):
            b.synchronize(index)
            if _sd.active:
                _sd.check(b.name)

    def is_current_stream_capturing(self) -> bool:
        """True if the current stream of the backend's current device is capturing a graph;
        False where the backend was never used or cannot be used (no context is created).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.is_current_stream_capturing()
            False
        """
        b = self._usable()
        if b is None:
            return False
        index = _tls.device.get(b.name, 0)
        if not _dev._is_initialized(b, index):
            return False
        return bool(b.stream_is_capturing(index, _stream._current(b, index)._handle))

    def graph_pool_handle(self) -> tuple[int, int]:
        """A new memory-pool id that graphs can share (``torch.cuda.graph_pool_handle``).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.graph_pool_handle() != acc.cpu.graph_pool_handle()
            True
        """
        return _graph.graph_pool_handle()

    # ------------------------------------------------------------------ properties
    def get_device_properties(self, device: DeviceLike = None) -> DeviceProperties:
        """Properties of a device with PyTorch's attributes (``name``, ``total_memory``,
        ``multi_processor_count``, ``major``, ``minor``, ``uuid``, ...) and the backend's extras
        by item: :func:`accelrt.get_device_properties` for this backend.

        Raises:
            AssertionError: (also accelrt's ``IndexError``/``ValueError``, both
                ``RuntimeError`` errors) the index is out of range or negative, with
                ``torch.cuda``'s "Invalid device id" first in the message; as
                :meth:`get_device_name` and :meth:`get_device_capability`.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_device_properties().total_memory > 0
            True
        """
        b, index = self._resolve_id(device)
        return _dev.get_device_properties(_dev._device_obj(b.name, index))

    def get_device_capability(self, device: DeviceLike = None) -> dict[str, Any]:
        """Capabilities of a device (at least ``supported_dtypes``), as
        :func:`accelrt.get_device_capability` (``accelrt.cuda`` returns PyTorch's
        ``(major, minor)`` instead).

        Example::

            >>> import accelrt as acc
            >>> "float32" in acc.cpu.get_device_capability()["supported_dtypes"]
            True
        """
        b, index = self._resolve_id(device)
        return _dev.get_device_capability(_dev._device_obj(b.name, index))

    def get_device_name(self, device: DeviceLike = None) -> str:
        """The name of a device (``get_device_properties(device)["name"]``).

        Example::

            >>> import accelrt as acc
            >>> isinstance(acc.cpu.get_device_name(), str)
            True
        """
        b, index = self._resolve_id(device)
        return str(b.get_device_properties(index)["name"])

    def can_device_access_peer(self, device: DeviceLike, peer_device: DeviceLike) -> bool:
        """True if ``device`` can access memory of ``peer_device`` directly.

        ``device`` may be ``None`` (the current device); ``peer_device`` must name one
        device, as in ``torch.cuda``.

        Raises:
            ValueError: ``peer_device`` is ``None`` or a device without an index.
            AssertionError: (also accelrt's ``IndexError``/``ValueError``) an index out of
                range or negative: "Invalid device id" / "Invalid peer device id", as
                ``torch.cuda``.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.can_device_access_peer(0, 0)
            True
        """
        b, index = self._resolve_id(device)
        _, peer = self._resolve_id(peer_device, "peer device", optional=False)
        return bool(b.can_access_peer(index, peer))

    def get_arch_list(self) -> list[str]:
        """The architectures accelrt's device kernels are built for (``torch.cuda``'s
        ``sm_XY``/``compute_XY`` names; on CUDA: NVRTC's target for each visible device and
        the committed PTX's virtual architecture); ``[]`` where the backend cannot be used or
        compiles no kernels of its own (cpu, opencl).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_arch_list()
            []
        """
        b = self._usable()
        if b is None:
            return []
        return [str(a) for a in b.arch_list()]

    def get_gencode_flags(self) -> str:
        """:meth:`get_arch_list` as ``nvcc`` ``-gencode`` flags (``""`` when it is empty).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_gencode_flags()
            ''
        """
        flags = []
        for arch in self.get_arch_list():
            kind, _, number = arch.partition("_")
            flags.append(f"-gencode compute=compute_{number},code={kind}_{number}")
        return " ".join(flags)

    # ------------------------------------------------------------------ sync debug mode
    def set_sync_debug_mode(self, debug_mode: int | str) -> None:
        """Warn (``"warn"``/1) or raise (``"error"``/2) on every synchronizing operation of this
        backend, or stop (``"default"``/0): ``torch.cuda.set_sync_debug_mode``. See
        :func:`accelrt.set_sync_debug_mode`.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.set_sync_debug_mode("warn"); acc.cpu.get_sync_debug_mode()
            1
            >>> acc.cpu.set_sync_debug_mode(0)
        """
        from .._sync_debug import set_sync_debug_mode
        set_sync_debug_mode(debug_mode, self.name)

    def get_sync_debug_mode(self) -> int:
        """This backend's sync debug mode: 0 (default), 1 (warn) or 2 (error).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_sync_debug_mode()
            0
        """
        from .._sync_debug import get_sync_debug_mode
        return get_sync_debug_mode(self.name)

    def get_stream_from_external(self, data_ptr: int, device: DeviceLike = None) -> _S:
        """A stream object of this module for a stream made elsewhere, from its raw handle
        (``torch.cuda.get_stream_from_external``); it does not own the stream, which must
        outlive it. On cuda the handle is a ``CUstream``/``cudaStream_t``; on other backends
        it is the ``stream_id`` of a live stream of theirs.

        Raises:
            TypeError: ``data_ptr`` is not an int.
            ValueError: the backend does not know the stream on that device.

        Example::

            >>> import accelrt as acc
            >>> s = acc.cpu.Stream()
            >>> acc.cpu.get_stream_from_external(s.stream_id) == s
            True
        """
        if not isinstance(data_ptr, int) or isinstance(data_ptr, bool):
            raise TypeError(f"get_stream_from_external() takes the stream handle as an int, "
                            f"got {type_shown(data_ptr)}")
        b, index = self._resolve(device)
        return self.Stream(stream_id=data_ptr, device_index=index, device_type=b.name)

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        """Whether the current device computes in bfloat16 (``torch.cuda.is_bf16_supported``):
        natively per its properties (``has_bfloat16``: CUDA compute capability 8.0 or newer;
        OpenCL's ``cl_intel_bfloat16_conversions``; a CPU's AVX512-BF16, AMX-BF16 or Arm BF16
        instructions), or, with ``including_emulation``, in software on any device. False
        where the backend cannot be used. Never raises for that.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.is_bf16_supported()
            True
        """
        return self._has_property("has_bfloat16") or (bool(including_emulation)
                                                      and self.is_available())

    def is_tf32_supported(self) -> bool:
        """Whether the current device has TensorFloat-32 matrix units
        (``torch.cuda.is_tf32_supported``), per its properties (``has_tf32``: CUDA compute
        capability 8.0 or newer; OpenCL's ``cl_intel_subgroup_matrix_multiply_accumulate``;
        never a CPU). False where the backend cannot be used.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.is_tf32_supported()
            False
        """
        return self._has_property("has_tf32")

    def _has_property(self, key: str) -> bool:
        """The current device's boolean property ``key``; False where the backend cannot be
        used."""
        return self.is_available() and bool(self.get_device_properties().get(key, False))

    # ------------------------------------------------------------------ monitoring
    def _monitor(self, what: str, device: DeviceLike) -> int | str | None:
        """The answer of the backend's device monitoring library to ``what`` (the name of a
        monitoring function, or ``"memory_used"``), or ``None`` where the backend has none
        (every backend but cuda, whose module answers through NVML)."""
        return None

    def _monitored(self, what: str, device: DeviceLike) -> int | str:
        """:meth:`_monitor`'s answer, or :class:`~accelrt.BackendUnavailableError` naming the
        missing library (after the device argument is checked)."""
        value = self._monitor(what, device)
        if value is None:
            self._resolve(device)   # a bad device argument is reported first
            raise BackendUnavailableError(
                f"{self.name}: {what}() needs a device monitoring library for {self.name} "
                f"devices, which accelrt does not have (NVML answers it for NVIDIA GPUs: "
                f"accelrt.cuda.{what}())")
        return value

    def device_memory_used(self, device: DeviceLike = None) -> int:
        """Bytes of a device's memory in use, as the device reports them
        (``torch.cuda.device_memory_used``): NVML's on cuda (every process's, as
        ``nvidia-smi``), ``total - free`` of :meth:`mem_get_info` elsewhere (on opencl, which
        has no such query, what this process allocated).

        Example::

            >>> import accelrt as acc
            >>> 0 <= acc.cpu.device_memory_used() <= acc.cpu.mem_get_info()[1]
            True
        """
        used = self._monitor("memory_used", device)
        if used is not None:
            return int(used)
        free, total = self.mem_get_info(device)
        return total - free

    def utilization(self, device: DeviceLike = None) -> int:
        """Percent of the last sample period in which a kernel ran
        (``torch.cuda.utilization``). This and :meth:`memory_usage`, :meth:`temperature`,
        :meth:`power_draw`, :meth:`clock_rate` and :meth:`list_gpu_processes` are the device
        monitoring functions: NVML answers them on cuda (no CUDA context is created).

        Raises:
            BackendUnavailableError: the backend has no device monitoring (cpu, opencl), or
                cannot be used here.

        Example::

            >>> import accelrt as acc
            >>> monitoring = (acc.cpu.utilization, acc.cpu.memory_usage, acc.cpu.temperature,
            ...               acc.cpu.power_draw, acc.cpu.clock_rate, acc.cpu.list_gpu_processes)
            >>> for query in monitoring:
            ...     try:
            ...         query()
            ...     except acc.BackendUnavailableError as e:
            ...         assert "monitoring library" in str(e)
            >>> acc.cuda.is_available() is False or 0 <= acc.cuda.utilization() <= 100
            True
        """
        return int(self._monitored("utilization", device))

    def memory_usage(self, device: DeviceLike = None) -> int:
        """Percent of the last sample period in which device memory was read or written
        (``torch.cuda.memory_usage``; a monitoring function, see :meth:`utilization`)."""
        return int(self._monitored("memory_usage", device))

    def temperature(self, device: DeviceLike = None) -> int:
        """Device temperature in degrees Celsius (``torch.cuda.temperature``; a monitoring
        function, see :meth:`utilization`)."""
        return int(self._monitored("temperature", device))

    def power_draw(self, device: DeviceLike = None) -> int:
        """Power draw in milliwatts (``torch.cuda.power_draw``; a monitoring function, see
        :meth:`utilization`)."""
        return int(self._monitored("power_draw", device))

    def clock_rate(self, device: DeviceLike = None) -> int:
        """Current clock of the device's cores in MHz (``torch.cuda.clock_rate``, NVML's SM
        clock on cuda; a monitoring function, see :meth:`utilization`)."""
        return int(self._monitored("clock_rate", device))

    def list_gpu_processes(self, device: DeviceLike = None) -> str:
        """The processes using the device and their memory, one line each
        (``torch.cuda.list_gpu_processes``; a monitoring function, see :meth:`utilization`).

        Example::

            >>> import accelrt as acc
            >>> acc.cuda.is_available() is False or acc.cuda.list_gpu_processes().startswith("GPU:")
            True
        """
        return str(self._monitored("list_gpu_processes", device))

    def _profiler_start(self) -> None:
        """``profiler.start()`` on the current device (the cuda module overrides it)."""
        raise self._no_profiler("start")

    def _profiler_stop(self) -> None:
        """``profiler.stop()`` on the current device (the cuda module overrides it)."""
        raise self._no_profiler("stop")

    def _no_profiler(self, what: str) -> BackendUnavailableError:
        self._b()
        return BackendUnavailableError(
            f"{self.name}: profiler.{what}() switches a device profiler's collection "
            f"(cuProfilerStart/cuProfilerStop on cuda: accelrt.cuda.profiler), and {self.name} "
            "devices have none; profile host code with cProfile or a sampling profiler, and "
            "annotate it with nvtx ranges")
