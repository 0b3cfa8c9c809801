// accelrt elementwise-add kernels: out[i] = a[i] + b[i] for i < n (accelrt.comm.reduce_add).
//
// The CUDA backend's elementwise_add(index, out, a, b, count, dtype, stream) picks one by
// numpy dtype (see backends/cuda/_ops.py):
//   accelrt_add_u8/_u16/_u32/_u64  every 1/2/4/8-byte integer, signed or not: the sum is
//                                  computed on the unsigned bit patterns, which wraps modulo
//                                  2**bits exactly like numpy's two's complement integers
//   accelrt_add_f16                float16 as binary16 bits: widened exactly to float, added
//                                  in float, rounded to nearest-even binary16 (float has
//                                  2*11+2 bits, so the result is the correctly rounded half
//                                  sum, numpy's float16 result)
//   accelrt_add_f32/_f64           float32/float64 (complex64/complex128 use them on 2n parts)
//   accelrt_add_bool               numpy's bool add: logical or, stored as 0/1
// `out` may alias `a` or `b` (in-place accumulation): each element is read then written by
// the same thread, so no __restrict__. Each thread handles elements in a grid-stride loop, so
// any grid works. Compiled by NVRTC (or committed reduce.ptx, scripts/gen_ptx.py) with half.cuh.

typedef unsigned int u32;
typedef unsigned long long u64;

#include "half.cuh"

template <typename T>
__device__ __forceinline__ void accelrt_add_loop(T* out, const T* a, const T* b, u64 n)
{
    u64 stride = (u64)blockDim.x * gridDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = (T)(a[i] + b[i]);
    }
}

extern "C" __global__ void accelrt_add_u8(unsigned char* out, const unsigned char* a,
                                          const unsigned char* b, u64 n)
{
    accelrt_add_loop(out, a, b, n);
}

extern "C" __global__ void accelrt_add_u16(unsigned short* out, const unsigned short* a,
                                           const unsigned short* b, u64 n)
{
    accelrt_add_loop(out, a, b, n);
}

extern "C" __global__ void accelrt_add_u32(u32* out, const u32* a, const u32* b, u64 n)
{
    accelrt_add_loop(out, a, b, n);
}

extern "C" __global__ void accelrt_add_u64(u64* out, const u64* a, const u64* b, u64 n)
{
    accelrt_add_loop(out, a, b, n);
}

extern "C" __global__ void accelrt_add_f32(float* out, const float* a, const float* b, u64 n)
{
    accelrt_add_loop(out, a, b, n);
}

extern "C" __global__ void accelrt_add_f64(double* out, const double* a, const double* b,
                                           u64 n)
{
    accelrt_add_loop(out, a, b, n);
}

extern "C" __global__ void accelrt_add_bool(unsigned char* out, const unsigned char* a,
                                            const unsigned char* b, u64 n)
{
    u64 stride = (u64)blockDim.x * gridDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = (a[i] != 0 || b[i] != 0) ? 1 : 0;
    }
}

// binary16 bits -> float, exact (subnormals, infinities and NaN payloads kept).
__device__ __forceinline__ float accelrt_half_to_float(unsigned short h)
{
    u32 sign = (u32)(h & 0x8000u) << 16;
    u32 exp = (h >> 10) & 0x1fu;
    u32 man = h & 0x3ffu;
    u32 bits;
    if (exp == 0x1fu) {                           // inf or nan
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0u) {                       // normal
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0u) {                       // signed zero
        bits = sign;
    } else {                                      // subnormal: normalise
        int e = -1;
        do {
            man <<= 1;
            ++e;
        } while ((man & 0x400u) == 0u);
        bits = sign | ((u32)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    return __int_as_float((int)bits);
}

extern "C" __global__ void accelrt_add_f16(unsigned short* out, const unsigned short* a,
                                           const unsigned short* b, u64 n)
{
    u64 stride = (u64)blockDim.x * gridDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float s = __fadd_rn(accelrt_half_to_float(a[i]), accelrt_half_to_float(b[i]));
        out[i] = accelrt_double_to_half((double)s);   // float -> double is exact
    }
}
