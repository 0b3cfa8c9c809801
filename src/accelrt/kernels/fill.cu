// accelrt fill kernels: write a 1/2/4/8-byte pattern `count` times from `dst`.
//
// The CUDA backend uses cuMemsetD8/D16/D32Async for aligned 1/2/4-byte patterns and these
// kernels for 8-byte patterns and for destinations not aligned to the pattern size.
// Compiled at run time with NVRTC, or loaded from fill.ptx (scripts/gen_ptx.py).
// Pattern bytes are little-endian: byte k of the pattern is (pattern >> 8k) & 0xff.

extern "C" __global__ void accelrt_fill_u64(unsigned long long* dst,
                                            unsigned long long value,
                                            unsigned long long count)
{
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < count; i += stride) {
        dst[i] = value;
    }
}

extern "C" __global__ void accelrt_fill_bytes(unsigned char* dst,
                                              unsigned long long pattern,
                                              unsigned int width,
                                              unsigned long long count)
{
    unsigned long long nbytes = count * width;
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < nbytes; i += stride) {
        dst[i] = (unsigned char)(pattern >> (8u * (unsigned int)(i % width)));
    }
}
