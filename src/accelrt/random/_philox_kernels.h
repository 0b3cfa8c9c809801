/* The loops of _philox_host.c, included once per instruction set it is compiled for.
 *
 * The including file defines PHILOX_TARGET (a function attribute: empty, or GCC/Clang's
 * target("avx512f")), PHILOX_NAME(name) (the variant's names) and PHILOX_ISA (its name as a
 * string), includes this file, and undefines the three. Every variant computes the same words: integer arithmetic, and conversions
 * to float that are exact (24 or 53 bits).
 *
 * The bulk of a request runs PHILOX_LANES blocks side by side, one block per lane of arrays
 * the compiler keeps in SIMD registers (the lanes' 32 x 32 -> 64-bit products are one
 * pmuludq/vpmuludq each); the last blocks of a request that do not fill the lanes run one at a
 * time (philox_block).
 */

/* PHILOX_LANES blocks b, b + 1, ... (mod 2**64) under the key (k0, k1): word i of block
 * b + l in c[i][l]. */
PHILOX_TARGET static inline void PHILOX_NAME(philox_lanes)(uint64_t b, uint32_t k0, uint32_t k1,
                                                           uint32_t c[4][PHILOX_LANES])
{
    for (int l = 0; l < PHILOX_LANES; l++) {
        uint64_t x = b + (uint64_t)l;
        c[0][l] = (uint32_t)x;
        c[1][l] = (uint32_t)(x >> 32);
        c[2][l] = 0;
        c[3][l] = 0;
    }
    for (int r = 0; r < 10; r++) {
        for (int l = 0; l < PHILOX_LANES; l++) {
            uint64_t p0 = (uint64_t)M0 * c[0][l];
            uint64_t p1 = (uint64_t)M1 * c[2][l];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1][l] ^ k0;
            uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3][l] ^ k1;
            c[1][l] = (uint32_t)p1;
            c[3][l] = (uint32_t)p0;
            c[0][l] = n0;
            c[2][l] = n2;
        }
        k0 += W0;
        k1 += W1;
    }
}

PHILOX_TARGET static void PHILOX_NAME(words)(uint32_t *out, uint64_t nblocks, uint64_t seed,
                                             uint64_t offset)
{
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32), c[4][PHILOX_LANES];
    uint64_t j = 0;
    for (; j + PHILOX_LANES <= nblocks; j += PHILOX_LANES) {
        PHILOX_NAME(philox_lanes)(offset + j, k0, k1, c);
        uint32_t *o = out + 4 * j;
        for (int l = 0; l < PHILOX_LANES; l++) {
            for (int i = 0; i < 4; i++) {
                o[4 * l + i] = c[i][l];
            }
        }
    }
    for (; j < nblocks; j++) {
        philox_block(offset + j, k0, k1, out + 4 * j);
    }
}

PHILOX_TARGET static void PHILOX_NAME(uniform_f32)(float *out, uint64_t count, uint64_t seed,
                                                   uint64_t offset)
{
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32), c[4][PHILOX_LANES], w[4];
    uint64_t full = count / 4, j = 0;
    for (; j + PHILOX_LANES <= full; j += PHILOX_LANES) {
        PHILOX_NAME(philox_lanes)(offset + j, k0, k1, c);
        float *o = out + 4 * j;
        for (int l = 0; l < PHILOX_LANES; l++) {
            for (int i = 0; i < 4; i++) {
                o[4 * l + i] = f32_of(c[i][l]);
            }
        }
    }
    for (; j < full; j++) {
        philox_block(offset + j, k0, k1, w);
        for (int i = 0; i < 4; i++) {
            out[4 * j + i] = f32_of(w[i]);
        }
    }
    if (count % 4) {                        /* the last block's first count % 4 numbers */
        philox_block(offset + full, k0, k1, w);
        for (uint64_t i = 0; i < count % 4; i++) {
            out[4 * full + i] = f32_of(w[i]);
        }
    }
}

PHILOX_TARGET static void PHILOX_NAME(uniform_f64)(double *out, uint64_t count, uint64_t seed,
                                                   uint64_t offset)
{
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32), c[4][PHILOX_LANES], w[4];
    uint64_t full = count / 2, j = 0;
    for (; j + PHILOX_LANES <= full; j += PHILOX_LANES) {
        PHILOX_NAME(philox_lanes)(offset + j, k0, k1, c);
        double *o = out + 2 * j;
        for (int l = 0; l < PHILOX_LANES; l++) {
            o[2 * l] = f64_of(c[0][l], c[1][l]);
            o[2 * l + 1] = f64_of(c[2][l], c[3][l]);
        }
    }
    for (; j < full; j++) {
        philox_block(offset + j, k0, k1, w);
        out[2 * j] = f64_of(w[0], w[1]);
        out[2 * j + 1] = f64_of(w[2], w[3]);
    }
    if (count % 2) {
        philox_block(offset + full, k0, k1, w);
        out[2 * full] = f64_of(w[0], w[1]);
    }
}

static const struct philox_kernels PHILOX_NAME(kernels) = {
    PHILOX_ISA, PHILOX_NAME(words), PHILOX_NAME(uniform_f32), PHILOX_NAME(uniform_f64),
};
