"""The CUDA compute kernels (``kernels/philox.cu``, ``kernels/reduce.cu``) and the backend
hooks that launch them (``CudaBackend.philox_fill``, ``CudaBackend.elementwise_add``).

Without a GPU:

* the launch plans (:func:`philox_launch`, :func:`add_launch`): kernel names, parameter C
  types and order as ``docs/random.md`` tabulates them, grid sizes, argument errors;
* the kernels themselves, built for the host with a C++ compiler (CUDA intrinsics mapped to
  the IEEE C operations they denote) and called through ctypes with the very argument lists
  the plans produce, simulating a grid of several blocks: Philox output must equal
  ``accelrt.random``'s numpy path bit for bit (uniform, randint; normals to 1 float32 ulp /
  4 float64 ulp) and the adds must equal numpy's ``+``.

On a GPU (skipped with the reason elsewhere): ``acc.rand``/``randint``/``randn`` on
``cuda`` against ``cpu``, and ``comm.reduce_add`` through ``elementwise_add``.
"""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt import _backend as registry
from accelrt.backends.cuda import _kernels
from accelrt.backends.cuda._memory import fill_launch
from accelrt.backends.cuda._ops import BLOCK, add_launch, grid_for, philox_launch
from accelrt.random import _philox

CUDA_REASON = registry.unavailable_reason("cuda")
gpu = pytest.mark.skipif(CUDA_REASON is not None, reason=f"needs a CUDA GPU: {CUDA_REASON}")
CXX = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")

# ====================================================================== launch plans


def _types(args: list[Any]) -> list[str]:
    return [a.dtype.name for a in args]


HEAD = ["uint64"] * 4   # out, n, seed, offset


@pytest.mark.parametrize(("dtype", "suffix"), [("float16", "f16"), ("float32", "f32"),
                                                ("float64", "f64")])
def test_uniform_and_normal_plans_follow_the_table(dtype: str, suffix: str) -> None:
    k, args, _ = philox_launch(0x1000, 9, dtype, "uniform", 5, 7, (-1.0, 3.0), sms=4)
    assert k == f"accelrt_philox_uniform_{suffix}"
    assert _types(args) == HEAD + ["float64", "float64", "float64", "int32"]
    assert [float(a) for a in args[4:7]] == [-1.0, 4.0, 3.0] and int(args[7]) == 0
    assert [int(a) for a in args[:4]] == [0x1000, 9, 5, 7]
    _, args, _ = philox_launch(0x1000, 9, dtype, "uniform", 5, 7, (0, 1), sms=4)
    assert int(args[7]) == 1
    k, args, _ = philox_launch(0x1000, 9, dtype, "normal", 5, 7, (2.0, 0.5), sms=4)
    assert k == f"accelrt_philox_normal_{suffix}"
    assert _types(args) == HEAD + ["float64", "float64", "int32"]
    assert [float(a) for a in args[4:6]] == [2.0, 0.5] and int(args[6]) == 0
    assert int(philox_launch(1, 1, dtype, "normal", 0, 0, (0.0, 1.0), sms=1)[1][6]) == 1


@pytest.mark.parametrize(("dtype", "low", "rng", "expect"), [
    ("int64", -5, 10, [-5, 10, 0, 0, 8, 1]),
    ("uint8", 0, 256, [0, 256, 0, 0, 1, 0]),
    ("bool", 0, 2, [0, 2, 0, 1, 1, 0]),
    ("float16", -3, 7, [-3, 7, 0, 2, 2, 1]),
    ("float32", 1, 1 << 40, [1, 1 << 40, 0, 3, 4, 0]),
    ("float64", 0, 9, [0, 9, 0, 4, 8, 0]),
    ("uint64", (1 << 64) - 2, 1, [-2, 1, 0, 0, 8, 0]),
    ("int64", -(1 << 63), 1 << 64, [-(1 << 63), 0, 1, 0, 8, 1]),
])
def test_randint_plan_follows_the_table(dtype: str, low: int, rng: int,
                                        expect: list[int]) -> None:
    k, args, _ = philox_launch(0x1000, 3, dtype, "randint", 1, 2, (low, rng), sms=4)
    assert k == "accelrt_philox_randint"
    assert _types(args) == HEAD + ["int64", "uint64", "uint32", "int32", "int32", "int32"]
    assert [int(a) for a in args[4:]] == expect


def test_grids_cover_the_blocks_and_stop_at_four_waves() -> None:
    assert grid_for(0, 132) == 1 and grid_for(BLOCK, 132) == 1 and grid_for(BLOCK + 1, 8) == 2
    assert grid_for(10**12, 132) == 528
    # blocks, not elements: 4 float32 (2 float64, 2 normals, 2 or 1 randint) per block
    assert philox_launch(1, 4 * BLOCK * 3, "float32", "uniform", 0, 0, (0, 1), sms=99)[2] == 3
    assert philox_launch(1, 2 * BLOCK * 3, "float64", "uniform", 0, 0, (0, 1), sms=99)[2] == 3
    assert philox_launch(1, 2 * BLOCK * 3, "float32", "normal", 0, 0, (0, 1), sms=99)[2] == 3
    assert philox_launch(1, BLOCK * 3, "int64", "randint", 0, 0, (0, 1 << 40), sms=99)[2] == 3
    assert philox_launch(1, 10**9, "float32", "uniform", 0, 0, (0, 1), sms=2)[2] == 8


@pytest.mark.parametrize(("call", "exc", "match"), [
    (lambda: philox_launch(1, 4, "int32", "uniform", 0, 0, (0, 1), sms=1), ValueError, "float"),
    (lambda: philox_launch(1, 4, "complex64", "randint", 0, 0, (0, 2), sms=1), ValueError,
     "integer, bool or float"),
    (lambda: philox_launch(1, 4, "float32", "gamma", 0, 0, (0, 1), sms=1), ValueError,
     "distribution"),
    (lambda: philox_launch(1, 4, "float32", "uniform", 0, 0, (0, float("inf")), sms=1),
     ValueError, "finite"),
    (lambda: philox_launch(1, 4, "float32", "normal", 0, 0, (0, float("nan")), sms=1),
     ValueError, "not nan"),
    (lambda: philox_launch(1, 4, "float32", "normal", 0, 0, (0, -1.0), sms=1),
     ValueError, ">= 0"),
    (lambda: philox_launch(1, 4, "float32", "normal", 0, 0, (0,), sms=1), TypeError, "pair"),
    (lambda: philox_launch(1, 4, "int8", "randint", 0, 0, (0, 0), sms=1), ValueError,
     r"\[1, 2\*\*64\]"),
    (lambda: philox_launch(1, 4, "int8", "randint", 0, 0, (True, 2), sms=1), TypeError, "bool"),
    (lambda: philox_launch(1, 4, "float32", "uniform", -1, 0, (0, 1), sms=1), ValueError,
     "seed"),
    (lambda: philox_launch(1, 4, "float32", "uniform", 0, 1 << 64, (0, 1), sms=1), ValueError,
     "offset"),
    (lambda: philox_launch(1, 0, "float32", "uniform", 0, 0, (0, 1), sms=1), ValueError, "n"),
    (lambda: philox_launch(1, 4, np.float32, "uniform", 0, 0, (0, 1), sms=1), TypeError,
     "dtype name"),
    (lambda: add_launch(1, 1, 1, 4, "object", sms=1), ValueError, "supports"),
    (lambda: add_launch(1, 1, 1, -1, "int32", sms=1), ValueError, "count"),
])
def test_plan_argument_errors(call: Any, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.parametrize(("dtype", "kernel", "n"), [
    ("int8", "accelrt_add_u8", 5), ("uint8", "accelrt_add_u8", 5),
    ("int16", "accelrt_add_u16", 5), ("uint32", "accelrt_add_u32", 5),
    ("int32", "accelrt_add_u32", 5), ("int64", "accelrt_add_u64", 5),
    ("uint64", "accelrt_add_u64", 5), ("float16", "accelrt_add_f16", 5),
    ("float32", "accelrt_add_f32", 5), ("float64", "accelrt_add_f64", 5),
    ("bool", "accelrt_add_bool", 5), ("complex64", "accelrt_add_f32", 10),
    ("complex128", "accelrt_add_f64", 10),
])
def test_add_plan_picks_the_kernel(dtype: str, kernel: str, n: int) -> None:
    k, args, grid = add_launch(16, 32, 48, 5, dtype, sms=4)
    assert (k, [int(a) for a in args], grid) == (kernel, [16, 32, 48, n], 1)
    assert _types(args) == ["uint64"] * 4


# ====================================================================== kernels on the host

SHIM = r"""
#include <cmath>
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
struct accelrt_dim3 { unsigned int x, y, z; };
extern "C" {
accelrt_dim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0};
accelrt_dim3 blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
}
typedef unsigned long long accelrt_host_u64;
static inline unsigned int __umulhi(unsigned int a, unsigned int b)
{ return (unsigned int)(((accelrt_host_u64)a * b) >> 32); }
static inline accelrt_host_u64 __umul64hi(accelrt_host_u64 a, accelrt_host_u64 b)
{ return (accelrt_host_u64)(((unsigned __int128)a * b) >> 64); }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dsqrt_rn(double a) { return std::sqrt(a); }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __double2float_rn(double a) { return (float)a; }
static inline long long __double_as_longlong(double d)
{ long long r; std::memcpy(&r, &d, 8); return r; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
static inline float __ll2float_rn(long long v) { return (float)v; }
static inline float __ull2float_rn(accelrt_host_u64 v) { return (float)v; }
static inline double __ll2double_rn(long long v) { return (double)v; }
static inline double __ull2double_rn(accelrt_host_u64 v) { return (double)v; }
"""

_CTYPES = {"uint64": ctypes.c_uint64, "int64": ctypes.c_int64, "uint32": ctypes.c_uint32,
           "int32": ctypes.c_int32, "float64": ctypes.c_double}


class HostKernels:
    """A ``.cu`` module built as a host shared library; launches simulate a small grid."""

    GRID, BLOCK = 3, 8   # several blocks and threads: exercises the grid-stride loops

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.dims = {n: (ctypes.c_uint * 3).in_dll(lib, n)
                     for n in ("blockIdx", "threadIdx", "blockDim", "gridDim")}

    def launch(self, kernel: str, args: list[np.generic]) -> None:
        fn = getattr(self.lib, kernel)
        fn.restype = None
        fn.argtypes = [_CTYPES[a.dtype.name] for a in args]
        values = [a.item() for a in args]
        self.dims["blockDim"][0], self.dims["gridDim"][0] = self.BLOCK, self.GRID
        for bx in range(self.GRID):
            for tx in range(self.BLOCK):
                self.dims["blockIdx"][0], self.dims["threadIdx"][0] = bx, tx
                fn(*values)


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostKernels]:
    if CXX is None:
        pytest.skip("no C++ compiler (g++/clang++) to build the kernels for the host")
    out = {}
    tmp = tmp_path_factory.mktemp("host_kernels")
    for name in ("philox", "reduce", "fill"):
        src = tmp / f"{name}_host.cpp"
        src.write_text(SHIM + f'#include "{_kernels.KERNEL_DIR / (name + ".cu")}"\n')
        lib = tmp / f"{name}.so"
        subprocess.run([CXX, "-std=c++14", "-O1", "-ffp-contract=off", "-fno-fast-math",
                        "-Wno-unknown-pragmas", "-shared", "-fPIC", "-o", str(lib), str(src)],
                       check=True, capture_output=True, timeout=90)
        out[name] = HostKernels(ctypes.CDLL(str(lib)))
    return out


@pytest.mark.parametrize(("width", "offset"), [(8, 0), (8, 4), (8, 3), (4, 2), (2, 1), (1, 0),
                                               (4, 0)])
@pytest.mark.parametrize("count", [1, 5, 37])
def test_host_fill_kernels_write_exactly_the_pattern(host_kernels: dict[str, HostKernels],
                                                     width: int, offset: int,
                                                     count: int) -> None:
    pattern = bytes(range(0xA1, 0xA1 + width))
    buf = np.zeros(16 + count * width + 16, np.uint8)   # room around the range: no overrun
    base = buf.ctypes.data
    start = base + (-base % 8) + offset                  # an 8-aligned address plus offset
    kernel, args, grid = fill_launch(start, int.from_bytes(pattern, "little"), width, count)
    assert kernel == ("accelrt_fill_u64" if width == 8 and offset % 8 == 0
                      else "accelrt_fill_bytes")
    assert grid >= 1
    host_kernels["fill"].launch(kernel, args)
    want = np.zeros_like(buf)
    lo = start - base
    want[lo:lo + count * width] = np.frombuffer(pattern * count, np.uint8)
    assert buf.tobytes() == want.tobytes()


def _philox_host(hk: HostKernels, n: int, dtype: str, dist: str, seed: int, offset: int,
                 params: tuple[Any, ...]) -> np.ndarray:
    buf = np.full(n * np.dtype(dtype).itemsize, 0x5A, np.uint8)
    out = buf.view(dtype)
    kernel, args, _ = philox_launch(out.ctypes.data, n, dtype, dist, seed, offset, params,
                                    sms=1)
    hk.launch(kernel, args)
    return out


def _philox_ref(n: int, dtype: str, dist: str, seed: int, offset: int,
                params: tuple[Any, ...]) -> np.ndarray:
    ref = np.empty(n, dtype)
    _philox.fill(ref, dist, seed, offset, params)
    return ref


SEED = 0x0123_4567_89AB_CDEF


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("params", [(0.0, 1.0), (-2.5, 3.0), (1e-3, 1e-3 + 1e-6)])
@pytest.mark.parametrize("n", [1, 7, 203])
def test_host_uniform_is_bit_identical(host_kernels: dict[str, HostKernels], dtype: str,
                                       params: tuple[float, float], n: int) -> None:
    got = _philox_host(host_kernels["philox"], n, dtype, "uniform", SEED, 12345, params)
    ref = _philox_ref(n, dtype, "uniform", SEED, 12345, params)
    assert got.tobytes() == ref.tobytes()


@pytest.mark.parametrize(("dtype", "low", "high"), [
    ("int64", -9, 9), ("int32", -(1 << 31), 1 << 31), ("uint8", 0, 256), ("int8", -128, 0),
    ("uint16", 3, 1000), ("bool", 0, 2), ("float16", -50, 50), ("float32", 0, 1 << 40),
    ("float64", -(1 << 62), 1 << 62), ("uint64", 0, 1 << 64), ("int64", -(1 << 63), 1 << 63),
    ("uint64", (1 << 64) - 5, (1 << 64) - 1), ("int64", 0, (1 << 32) + 1),
])
def test_host_randint_is_bit_identical(host_kernels: dict[str, HostKernels], dtype: str,
                                       low: int, high: int) -> None:
    for n, offset in ((1, 0), (61, (1 << 64) - 3)):   # the counter wraps around 2**64
        got = _philox_host(host_kernels["philox"], n, dtype, "randint", SEED, offset,
                           (low, high - low))
        ref = _philox_ref(n, dtype, "randint", SEED, offset, (low, high - low))
        assert got.tobytes() == ref.tobytes(), (dtype, low, high, n)


def _ulps(a: np.ndarray, b: np.ndarray) -> int:
    ia = a.view(f"int{a.itemsize * 8}").astype(np.int64)
    ib = b.view(f"int{b.itemsize * 8}").astype(np.int64)
    assert np.all(np.sign(a) == np.sign(b))
    return int(np.abs(ia - ib).max())


@pytest.mark.parametrize(("dtype", "tol"), [("float16", 1), ("float32", 1), ("float64", 4)])
@pytest.mark.parametrize("params", [(0.0, 1.0), (3.0, 0.25)])
def test_host_normal_matches_to_the_documented_ulps(host_kernels: dict[str, HostKernels],
                                                    dtype: str, tol: int,
                                                    params: tuple[float, float]) -> None:
    n = 301   # odd: the last pair's second value is dropped
    got = _philox_host(host_kernels["philox"], n, dtype, "normal", SEED, 99, params)
    ref = _philox_ref(n, dtype, "normal", SEED, 99, params)
    assert np.all(np.isfinite(got)) and _ulps(got, ref) <= tol



@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("params", [(math.nan, 1.0), (math.inf, 2.0), (0.0, math.inf),
                                    (-math.inf, math.inf)])
def test_host_normal_takes_non_finite_params_as_the_host_path(
        host_kernels: dict[str, HostKernels], dtype: str, params: tuple[float, float]) -> None:
    # torch's normal_ takes a nan or infinite mean and an infinite std (session 41): the
    # kernel's numbers are nan or infinite where the numpy path's are, with the same signs
    n = 101
    got = _philox_host(host_kernels["philox"], n, dtype, "normal", SEED, 5, params)
    ref = _philox_ref(n, dtype, "normal", SEED, 5, params)
    assert not np.isfinite(ref).any()
    assert (np.isnan(got) == np.isnan(ref)).all()
    inf = np.isinf(ref)
    assert (np.isinf(got) == inf).all() and (got[inf] == ref[inf]).all()

ADD_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
              "float16", "float32", "float64", "complex64", "complex128"]


def _operands(dtype: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    dt = np.dtype(dtype)
    if dt.kind in "iub":
        raw = rng.integers(0, 256, size=(2, n * dt.itemsize), dtype=np.uint8)
        a, b = raw[0].view(dt).copy(), raw[1].view(dt).copy()
        if dt.kind == "b":
            a, b = a.view(np.uint8) % 2 == 1, b.view(np.uint8) % 2 == 1
        return a, b
    parts = 2 if dt.kind == "c" else 1
    scale = np.array([1e-7, 1.0, 2e3] * n)[:n * parts]
    fdt = np.dtype(f"float{dt.itemsize * 8 // parts}")
    x = (rng.standard_normal((2, n * parts)) * scale).astype(fdt)
    if fdt == np.float16:   # include subnormals, overflow to inf and signed zeros
        x[0, :4] = [6e-8, 65504.0, -0.0, 1e-5]
        x[1, :4] = [6e-8, 65504.0, 0.0, -3e-5]
    return x[0].view(dt).copy(), x[1].view(dt).copy()


@pytest.mark.parametrize("dtype", ADD_DTYPES)
def test_host_add_matches_numpy(host_kernels: dict[str, HostKernels], dtype: str) -> None:
    n = 77
    a, b = _operands(dtype, n)
    with np.errstate(over="ignore"):
        ref = a + b
    out = np.zeros_like(a)
    kernel, args, _ = add_launch(out.ctypes.data, a.ctypes.data, b.ctypes.data, n, dtype,
                                 sms=1)
    host_kernels["reduce"].launch(kernel, args)
    assert out.tobytes() == ref.tobytes()
    # in place, as reduce_add accumulates: out = out + b
    kernel, args, _ = add_launch(a.ctypes.data, a.ctypes.data, b.ctypes.data, n, dtype, sms=1)
    host_kernels["reduce"].launch(kernel, args)
    assert a.tobytes() == ref.tobytes()


def test_host_f16_add_is_correctly_rounded_everywhere(
        host_kernels: dict[str, HostKernels]) -> None:
    # every finite half against a handful of partners: ties, subnormals, carries, overflow
    a = np.arange(0, 0x7C00, 7, dtype=np.uint16).view(np.float16)
    a = np.concatenate([a, -a])
    for partner in (np.float16(1.0), np.float16(-6e-8), np.float16(2048), np.float16(0.333)):
        b = np.full_like(a, partner)
        out = np.empty_like(a)
        kernel, args, _ = add_launch(out.ctypes.data, a.ctypes.data, b.ctypes.data, a.size,
                                     "float16", sms=1)
        host_kernels["reduce"].launch(kernel, args)
        with np.errstate(over="ignore"):
            assert out.tobytes() == (a + b).tobytes()


# ====================================================================== on a GPU

@gpu
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_gpu_rand_equals_cpu_bit_for_bit(dtype: str) -> None:
    for shape, params in (((1000, 3), None), ((12345,), (-4.0, 2.5))):
        gc = acc.random.Generator("cuda:0").manual_seed(2024)
        gh = acc.random.Generator("cpu:0").manual_seed(2024)
        for _ in range(2):   # the second draw starts at the advanced offset
            if params is None:
                x = acc.rand(*shape, dtype=dtype, device="cuda:0", generator=gc).numpy()
                y = acc.rand(*shape, dtype=dtype, device="cpu:0", generator=gh).numpy()
            else:
                x = acc.random.uniform_(acc.empty(shape, dtype=dtype, device="cuda:0"), *params,
                                        generator=gc).numpy()
                y = acc.random.uniform_(acc.empty(shape, dtype=dtype, device="cpu:0"), *params,
                                        generator=gh).numpy()
            assert x.tobytes() == y.tobytes()
            assert gc.get_offset() == gh.get_offset()


@gpu
@pytest.mark.parametrize(("dtype", "low", "high"), [
    ("int64", -100, 100), ("int32", 0, 1 << 31), ("uint8", 0, 256), ("bool", 0, 2),
    ("float32", -7, 7), ("int64", -(1 << 63), 1 << 63), ("uint64", 0, 1 << 64),
])
def test_gpu_randint_equals_cpu_bit_for_bit(dtype: str, low: int, high: int) -> None:
    gc = acc.random.Generator("cuda:0").manual_seed(77)
    gh = acc.random.Generator("cpu:0").manual_seed(77)
    x = acc.randint(low, high, (4097,), dtype=dtype, device="cuda:0", generator=gc).numpy()
    y = acc.randint(low, high, (4097,), dtype=dtype, device="cpu:0", generator=gh).numpy()
    assert x.tobytes() == y.tobytes()


@gpu
@pytest.mark.parametrize(("dtype", "tol"), [("float16", 1), ("float32", 1), ("float64", 4)])
def test_gpu_randn_matches_cpu_to_the_documented_ulps(dtype: str, tol: int) -> None:
    gc = acc.random.Generator("cuda:0").manual_seed(5)
    gh = acc.random.Generator("cpu:0").manual_seed(5)
    x = acc.randn(100_001, dtype=dtype, device="cuda:0", generator=gc).numpy()
    y = acc.randn(100_001, dtype=dtype, device="cpu:0", generator=gh).numpy()
    assert _ulps(x, y) <= tol
    if dtype != "float64":   # docs/random.md: float32/float16 almost always agree exactly
        assert np.count_nonzero(x != y) <= 2
    x = acc.random.normal_(acc.empty(999, dtype=dtype, device="cuda:0"), 3.0, 0.5,
                           generator=gc).numpy()
    y = acc.random.normal_(acc.empty(999, dtype=dtype, device="cpu:0"), 3.0, 0.5,
                           generator=gh).numpy()
    assert _ulps(x, y) <= tol


@gpu
def test_gpu_rand_is_generated_on_the_device_on_the_current_stream() -> None:
    b = registry.get_backend("cuda")
    calls: list[tuple[Any, ...]] = []
    real = b.philox_fill
    s = acc.Stream("cuda:0")

    def spy(*args: Any) -> None:
        calls.append(args)
        real(*args)

    b.philox_fill = spy  # type: ignore[method-assign]
    try:
        with s:
            x = acc.rand(1 << 20, device="cuda:0")
    finally:
        del b.philox_fill
    assert len(calls) == 1 and calls[0][-1] == s.stream_id and calls[0][2] == 1 << 20
    v = x.numpy()
    assert 0.0 <= float(v.min()) and float(v.max()) < 1.0


@gpu
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64", "uint8",
                                   "complex64", "bool"])
def test_gpu_reduce_add_uses_the_kernel(dtype: str) -> None:
    n = acc.cuda.device_count()
    a, b = _operands(dtype, 10_001)
    xs = [acc.asarray(a, device="cuda:0"), acc.asarray(b, device=f"cuda:{min(1, n - 1)}")]
    with np.errstate(over="ignore"):
        ref = a + b
    out = acc.comm.reduce_add(xs, destination=0)
    assert out.device == acc.device("cuda:0") and out.numpy().tobytes() == ref.tobytes()
    # three inputs: accumulates in place in the result
    out = acc.cuda.comm.reduce_add([xs[0], xs[0], xs[1]], destination=0)
    with np.errstate(over="ignore"):
        # torch's order: the root is the LAST input on the destination, then the others in
        # order; on one GPU that is xs[1] (b), so the float sum is (b + a) + a
        ref = (b + a + a) if n == 1 else (a + a + b)
    assert out.numpy().tobytes() == ref.tobytes()


@gpu
def test_gpu_reduce_kernel_is_stream_ordered() -> None:
    cuda = registry.get_backend("cuda")
    s = acc.Stream("cuda:0")
    x = acc.zeros(1 << 22, dtype="float32", device="cuda:0")
    y = acc.full((1 << 22,), 1.0, dtype="float32", device="cuda:0")
    acc.synchronize("cuda:0")
    with s:
        for _ in range(8):
            cuda.elementwise_add(0, x.data_ptr(), x.data_ptr(), y.data_ptr(), x.size, "float32",
                                 s.stream_id)
    s.synchronize()
    assert float(x.numpy().min()) == float(x.numpy().max()) == 8.0
