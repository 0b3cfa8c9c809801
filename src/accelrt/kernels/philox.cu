// accelrt Philox4x32-10 kernels: the CUDA twin of accelrt/random/_philox.py.
//
// Same counter layout and conversions as the numpy reference (docs/random.md):
//   key     = (seed & 0xffffffff, seed >> 32)
//   block j = offset + j (mod 2**64), counter = (lo32(j'), hi32(j'), 0, 0), j' = offset + j
//   element i of a request uses block i / e, words w * (i % e) .. w * (i % e) + w - 1,
//   with w words per element and e = 4 / w elements per block.
// Floating-point steps use explicit round-to-nearest intrinsics (__dmul_rn, __dadd_rn, ...)
// so that the compiler cannot contract them into fused multiply-adds: uniform numbers and
// integers are bit-identical to the numpy path. Normals call the device log/sin/cos, which
// agree with the host's libm to a few float64 ulp (see docs/random.md).
//
// Each thread handles whole Philox blocks in a grid-stride loop. Every kernel takes
//   (out, n, seed, offset, ...) with n elements and the generator's seed/offset.
// float16 results are stored as IEEE binary16 bit patterns (unsigned short), rounded from
// double to nearest-even exactly like numpy's float64 -> float16 cast (half.cuh).
//
// Compiled at run time with NVRTC (or loaded from philox.ptx, scripts/gen_ptx.py).

typedef unsigned int u32;
typedef unsigned long long u64;

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define ACCELRT_TWO_PI 6.283185307179586
// exact powers of two (hex float literals need C++17)
#define ACCELRT_2M11 0.00048828125                                   /* 2**-11 */
#define ACCELRT_2M24F 5.9604644775390625e-08f                        /* 2**-24 */
#define ACCELRT_2M53 1.1102230246251565404236316680908203125e-16     /* 2**-53 */

#include "half.cuh"

struct accelrt_u32x4 { u32 x, y, z, w; };

__device__ __forceinline__ accelrt_u32x4 accelrt_philox(u64 block, u64 seed)
{
    u32 c0 = (u32)block, c1 = (u32)(block >> 32), c2 = 0u, c3 = 0u;
    u32 k0 = (u32)seed, k1 = (u32)(seed >> 32);
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        u32 hi0 = __umulhi(PHILOX_M0, c0), lo0 = PHILOX_M0 * c0;
        u32 hi1 = __umulhi(PHILOX_M1, c2), lo1 = PHILOX_M1 * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    accelrt_u32x4 out = {c0, c1, c2, c3};
    return out;
}

__device__ __forceinline__ u32 accelrt_word(const accelrt_u32x4& v, int k)
{
    return k == 0 ? v.x : (k == 1 ? v.y : (k == 2 ? v.z : v.w));
}

// ------------------------------------------------------------------ uniform
// standard != 0: exact [0, 1) numbers. Otherwise t = a + range * u in float64 (range = b - a,
// computed by the host in float64), rounded to the dtype; a result equal to b becomes a.

// float32 and float16 take four numbers per block: one loop, each dtype's numbers made by its
// Dtype::uniform from a word (Dtype::of rounds a double to the dtype, for the bounds).
struct accelrt_f32 {
    typedef float T;
    static __device__ __forceinline__ float of(double v) { return __double2float_rn(v); }
    static __device__ __forceinline__ float uniform(u32 word, int standard, double a,
                                                    double range, float fa, float fb)
    {
        float u = __fmul_rn((float)(word >> 8), ACCELRT_2M24F);
        if (!standard) {
            double t = __dadd_rn(__dmul_rn((double)u, range), a);
            u = __double2float_rn(t);
            if (u == fb) u = fa;
        }
        return u;
    }
};

struct accelrt_f16 {
    typedef unsigned short T;
    static __device__ __forceinline__ unsigned short of(double v)
    {
        return accelrt_double_to_half(v);
    }
    static __device__ __forceinline__ unsigned short uniform(u32 word, int standard, double a,
                                                             double range, unsigned short ha,
                                                             unsigned short hb)
    {
        double u = (double)(word >> 21) * ACCELRT_2M11;   // exact
        if (standard) {
            return accelrt_double_to_half(u);
        }
        unsigned short h = accelrt_double_to_half(__dadd_rn(__dmul_rn(u, range), a));
        // compare values, not bits (+0 == -0), like numpy's ==
        if (h == hb || ((h & 0x7fffu) == 0u && (hb & 0x7fffu) == 0u)) h = ha;
        return h;
    }
};

template <typename Dtype>
__device__ __forceinline__ void accelrt_uniform4_loop(typename Dtype::T* out, u64 n, u64 seed,
                                                      u64 offset, double a, double range,
                                                      double b, int standard)
{
    u64 nblocks = (n + 3ull) / 4ull;
    u64 stride = (u64)blockDim.x * gridDim.x;
    typename Dtype::T ta = Dtype::of(a), tb = Dtype::of(b);
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < nblocks; j += stride) {
        accelrt_u32x4 v = accelrt_philox(offset + j, seed);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            u64 i = 4ull * j + (u64)k;
            if (i < n) {
                out[i] = Dtype::uniform(accelrt_word(v, k), standard, a, range, ta, tb);
            }
        }
    }
}

extern "C" __global__ void accelrt_philox_uniform_f32(float* out, u64 n, u64 seed, u64 offset,
                                                      double a, double range, double b,
                                                      int standard)
{
    accelrt_uniform4_loop<accelrt_f32>(out, n, seed, offset, a, range, b, standard);
}

extern "C" __global__ void accelrt_philox_uniform_f16(unsigned short* out, u64 n, u64 seed,
                                                      u64 offset, double a, double range,
                                                      double b, int standard)
{
    accelrt_uniform4_loop<accelrt_f16>(out, n, seed, offset, a, range, b, standard);
}

extern "C" __global__ void accelrt_philox_uniform_f64(double* out, u64 n, u64 seed, u64 offset,
                                                      double a, double range, double b,
                                                      int standard)
{
    u64 nblocks = (n + 1ull) / 2ull;
    u64 stride = (u64)blockDim.x * gridDim.x;
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < nblocks; j += stride) {
        accelrt_u32x4 v = accelrt_philox(offset + j, seed);
        u64 V[2] = {((u64)v.y << 32) | v.x, ((u64)v.w << 32) | v.z};
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            u64 i = 2ull * j + (u64)k;
            if (i < n) {
                double u = __dmul_rn((double)(V[k] >> 11), ACCELRT_2M53);
                if (!standard) {
                    u = __dadd_rn(__dmul_rn(u, range), a);
                    if (u == b) u = a;
                }
                out[i] = u;
            }
        }
    }
}

// ------------------------------------------------------------------ normal (Box-Muller)
// u1, u2 = 53-bit uniforms from words (0, 1) and (2, 3); r = sqrt(-2 log(1 - u1));
// t = 2 pi u2; elements 2j, 2j+1 = r cos t, r sin t; then mean + std * z (if not standard).

__device__ __forceinline__ void accelrt_normal_pair(u64 block, u64 seed, double mean,
                                                    double std, int standard, double* z)
{
    accelrt_u32x4 v = accelrt_philox(block, seed);
    double u1 = __dmul_rn((double)((((u64)v.y << 32) | v.x) >> 11), ACCELRT_2M53);
    double u2 = __dmul_rn((double)((((u64)v.w << 32) | v.z) >> 11), ACCELRT_2M53);
    double r = __dsqrt_rn(__dmul_rn(log(__dsub_rn(1.0, u1)), -2.0));
    double t = __dmul_rn(ACCELRT_TWO_PI, u2);
    z[0] = __dmul_rn(cos(t), r);
    z[1] = __dmul_rn(sin(t), r);
    if (!standard) {
        z[0] = __dadd_rn(__dmul_rn(z[0], std), mean);
        z[1] = __dadd_rn(__dmul_rn(z[1], std), mean);
    }
}

// The three normal kernels: one grid-stride loop over pairs, each dtype's kernel storing the
// pair rounded by its Dtype::of (accelrt_f32, accelrt_f16 above).
struct accelrt_f64 {
    typedef double T;
    static __device__ __forceinline__ double of(double v) { return v; }
};

template <typename Dtype>
__device__ __forceinline__ void accelrt_normal_loop(typename Dtype::T* out, u64 n, u64 seed,
                                                    u64 offset, double mean, double std,
                                                    int standard)
{
    u64 nblocks = (n + 1ull) / 2ull;
    u64 stride = (u64)blockDim.x * gridDim.x;
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < nblocks; j += stride) {
        double z[2];
        accelrt_normal_pair(offset + j, seed, mean, std, standard, z);
        out[2ull * j] = Dtype::of(z[0]);
        if (2ull * j + 1ull < n) out[2ull * j + 1ull] = Dtype::of(z[1]);
    }
}

extern "C" __global__ void accelrt_philox_normal_f32(float* out, u64 n, u64 seed, u64 offset,
                                                     double mean, double std, int standard)
{
    accelrt_normal_loop<accelrt_f32>(out, n, seed, offset, mean, std, standard);
}

extern "C" __global__ void accelrt_philox_normal_f16(unsigned short* out, u64 n, u64 seed,
                                                     u64 offset, double mean, double std,
                                                     int standard)
{
    accelrt_normal_loop<accelrt_f16>(out, n, seed, offset, mean, std, standard);
}

extern "C" __global__ void accelrt_philox_normal_f64(double* out, u64 n, u64 seed, u64 offset,
                                                     double mean, double std, int standard)
{
    accelrt_normal_loop<accelrt_f64>(out, n, seed, offset, mean, std, standard);
}

// ------------------------------------------------------------------ randint
// range = range_hi * 2**64 + range_lo in [1, 2**64]. w = 2 words (64-bit V) when range <= 2**32,
// else 4 words (128-bit V). value = low + floor(V * range / 2**(32 w)) (mod 2**64), stored as:
//   kind 0: integer of `itemsize` bytes (1, 2, 4, 8; the low bytes, little-endian)
//   kind 1: bool (value != 0)
//   kind 2: float16 bits, 3: float32, 4: float64  (from int64 if is_signed, else uint64,
//           through float64 for float16: exact for |value| <= 2048)
// is_signed: the value is read as int64 (signed dtypes or low < 0).

__device__ __forceinline__ void accelrt_store_int(unsigned char* out, u64 i, u64 value,
                                                  int kind, int itemsize, int is_signed)
{
    switch (kind) {
    case 0:
        if (itemsize == 8) ((u64*)out)[i] = value;
        else if (itemsize == 4) ((u32*)out)[i] = (u32)value;
        else if (itemsize == 2) ((unsigned short*)out)[i] = (unsigned short)value;
        else out[i] = (unsigned char)value;
        break;
    case 1:
        out[i] = value != 0ull ? 1 : 0;
        break;
    case 2: {
        double d = is_signed ? (double)(long long)value : (double)value;
        ((unsigned short*)out)[i] = accelrt_double_to_half(d);
        break;
    }
    case 3:
        ((float*)out)[i] = is_signed ? __ll2float_rn((long long)value) : __ull2float_rn(value);
        break;
    default:
        ((double*)out)[i] = is_signed ? __ll2double_rn((long long)value)
                                      : __ull2double_rn(value);
        break;
    }
}

extern "C" __global__ void accelrt_philox_randint(unsigned char* out, u64 n, u64 seed,
                                                  u64 offset, long long low, u64 range_lo,
                                                  u32 range_hi, int kind, int itemsize,
                                                  int is_signed)
{
    int wide = range_hi != 0u || range_lo > 0x100000000ull;   // 4 words per element
    u64 per = wide ? 1ull : 2ull;
    u64 nblocks = (n + per - 1ull) / per;
    u64 stride = (u64)blockDim.x * gridDim.x;
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < nblocks; j += stride) {
        accelrt_u32x4 v = accelrt_philox(offset + j, seed);
        u64 V0 = ((u64)v.y << 32) | v.x, V1 = ((u64)v.w << 32) | v.z;
        if (!wide) {
            u64 h0 = __umul64hi(V0, range_lo);     // floor(V * range / 2**64), range <= 2**32
            u64 h1 = __umul64hi(V1, range_lo);
            accelrt_store_int(out, 2ull * j, (u64)low + h0, kind, itemsize, is_signed);
            if (2ull * j + 1ull < n) {
                accelrt_store_int(out, 2ull * j + 1ull, (u64)low + h1, kind, itemsize,
                                  is_signed);
            }
        } else {
            u64 h;
            if (range_hi != 0u) {                 // range == 2**64: the top 64 bits of V
                h = V1;
            } else {                              // floor((V1 * 2**64 + V0) * r / 2**128)
                u64 a1 = __umul64hi(V0, range_lo);
                u64 b0 = V1 * range_lo, b1 = __umul64hi(V1, range_lo);
                u64 mid = b0 + a1;
                h = b1 + (mid < b0 ? 1ull : 0ull);
            }
            accelrt_store_int(out, j, (u64)low + h, kind, itemsize, is_signed);
        }
    }
}
