// accelrt binary16 helpers shared by the kernel modules (philox.cu, reduce.cu include it).
//
// float16 values are stored as IEEE binary16 bit patterns (unsigned short), so no CUDA half
// header is needed. Included as "half.cuh": NVRTC gets it as a named header
// (backends/cuda/_kernels.py), the host build of the tests by the include path.

#ifndef ACCELRT_HALF_CUH
#define ACCELRT_HALF_CUH

// float64 -> binary16 bits, round to nearest even, subnormals and overflow handled
// (the same result as numpy's correctly rounded float64 -> float16 cast).
__device__ unsigned short accelrt_double_to_half(double d)
{
    unsigned long long b = (unsigned long long)__double_as_longlong(d);
    unsigned short sign = (unsigned short)((b >> 48) & 0x8000u);
    int exp = (int)((b >> 52) & 0x7ff);
    unsigned long long man = b & 0xFFFFFFFFFFFFFull;
    if (exp == 0x7ff) {                       // inf or nan
        return (unsigned short)(sign | 0x7c00u | (man ? 0x200u : 0u));
    }
    int e = exp - 1023 + 15;                  // biased half exponent
    if (e >= 31) {
        return (unsigned short)(sign | 0x7c00u);
    }
    unsigned long long m;
    int shift;
    if (e <= 0) {                             // half subnormal (or underflow to zero)
        if (e < -10) {
            return sign;
        }
        m = man | (1ull << 52);               // implicit bit
        shift = 42 + 1 - e;                   // 52 - 10 + (1 - e)
    } else {
        m = man;
        shift = 42;
    }
    unsigned long long q = m >> shift;
    unsigned long long rem = m & ((1ull << shift) - 1ull);
    unsigned long long half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (q & 1ull))) {
        q += 1ull;                            // may carry into the exponent: still correct
    }
    if (e <= 0) {
        return (unsigned short)(sign | (unsigned short)q);
    }
    return (unsigned short)(sign | (unsigned short)(((unsigned long long)e << 10) + q));
}

#endif  // ACCELRT_HALF_CUH
