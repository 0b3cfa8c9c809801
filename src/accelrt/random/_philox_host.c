/* Philox4x32-10 on the host, in C: the compiled build's arithmetic for accelrt.random.
 *
 * The algorithm, the counter layout and the standard uniform conversions are those of
 * accelrt/random/_philox.py's module docstring (the host reference, vectorised with numpy),
 * which the pure build runs; this module computes the same words, faster, for the compiled
 * build. tests/random/test_philox_host.py checks both against each other bit for bit.
 *
 * Block j of a request (seed, offset) has the counter (b & 0xFFFFFFFF, b >> 32, 0, 0) with
 * b = (offset + j) mod 2**64, under the key (seed & 0xFFFFFFFF, seed >> 32).
 *
 * Both functions write to a raw host address, which the caller owns and has checked (the
 * random factories queue them on a stream with the address of the array's memory); they
 * release the GIL for large requests, so the threads of accelrt.random._philox.fill run in
 * parallel.
 *
 *     words_at(ptr, nblocks, seed, offset)
 *         16 * nblocks bytes at ptr: the four uint32 words of each block (native order).
 *     uniform_at(ptr, count, itemsize, seed, offset)
 *         count standard uniform numbers in [0, 1) at ptr: float32 (itemsize 4, four per
 *         block, (w >> 8) * 2**-24) or float64 (itemsize 8, two per block,
 *         ((w1 << 32 | w0) >> 11) * 2**-53); the last block's unused numbers are not written.
 *     isa(), isas(), use_isa(name)
 *         the instruction set whose loops run (the loops are compiled for the baseline and,
 *         on x86-64 with GCC or Clang, for AVX-512; the best the CPU runs is chosen at
 *         import), those this CPU runs, and a choice among them (for tests and benchmarks:
 *         every variant computes the same numbers).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define M0 0xD2511F53u
#define M1 0xCD9E8D57u
#define W0 0x9E3779B9u
#define W1 0xBB67AE85u

/* Requests of at least this many blocks run without the GIL (below it, releasing and
 * taking it back costs more than the arithmetic). */
#define NOGIL_BLOCKS 4096

/* The four words of block b under key (k0, k1), one block at a time: the last blocks of a
 * request, which do not fill the SIMD lanes of _philox_kernels.h's loops (setup.py compiles
 * this file with -O3, which those loops need to run in SIMD registers). */
static inline void philox_block(uint64_t b, uint32_t k0, uint32_t k1, uint32_t w[4])
{
    uint32_t c0 = (uint32_t)b, c1 = (uint32_t)(b >> 32), c2 = 0, c3 = 0;
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)M0 * c0;
        uint64_t p1 = (uint64_t)M1 * c2;
        c0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        c2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        k0 += W0;
        k1 += W1;
    }
    w[0] = c0;
    w[1] = c1;
    w[2] = c2;
    w[3] = c3;
}

static inline float f32_of(uint32_t w)
{
    return (float)(int32_t)(w >> 8) * (1.0f / 16777216.0f);             /* 2**-24, exact */
}

static inline double f64_of(uint32_t lo, uint32_t hi)
{
    /* ((hi << 32 | lo) >> 11) * 2**-53, from two parts that fit an int32 (its top 27 bits,
     * its low 26): int32 -> double converts in SIMD registers where int64 -> double does not
     * (before AVX-512DQ), and the sum is exact, so the number is the same. */
    int32_t top = (int32_t)(hi >> 5);
    int32_t low = (int32_t)((hi & 0x1Fu) << 21 | lo >> 11);
    return ((double)top * 67108864.0 + (double)low) * (1.0 / 9007199254740992.0);  /* 2**26, 2**-53 */
}

/* Number of blocks run side by side in the loops of _philox_kernels.h (4: measured fastest
 * with SSE2, AVX2 and AVX-512 on 1,000 to 10 million numbers; 8 and 16 were slower). */
#define PHILOX_LANES 4

/* One variant of the loops, for one instruction set. */
struct philox_kernels {
    const char *isa;
    void (*words)(uint32_t *out, uint64_t nblocks, uint64_t seed, uint64_t offset);
    void (*uniform_f32)(float *out, uint64_t count, uint64_t seed, uint64_t offset);
    void (*uniform_f64)(double *out, uint64_t count, uint64_t seed, uint64_t offset);
};

/* The baseline variant: the compiler's default instruction set (SSE2 on x86-64). */
#define PHILOX_TARGET
#define PHILOX_NAME(name) name##_base
#define PHILOX_ISA "baseline"
#include "_philox_kernels.h"
#undef PHILOX_TARGET
#undef PHILOX_NAME
#undef PHILOX_ISA

/* On x86-64 with GCC or Clang, also an AVX-512 variant, chosen at import where the CPU (and
 * the OS, which must save the wider registers) supports it: about twice the baseline's speed
 * there. (An AVX2 variant was measured within 4% of the baseline and is not built.) Other
 * compilers and CPUs have the baseline alone. */
#if (defined(__x86_64__) || defined(__amd64__)) && (defined(__GNUC__) || defined(__clang__))
#define PHILOX_X86_VARIANTS 1
#define PHILOX_TARGET __attribute__((target("avx512f")))
#define PHILOX_NAME(name) name##_avx512
#define PHILOX_ISA "avx512f"
#include "_philox_kernels.h"
#undef PHILOX_TARGET
#undef PHILOX_NAME
#undef PHILOX_ISA
#else
#define PHILOX_X86_VARIANTS 0
#endif

/* The variants this CPU can run, best first, and the one in use (the first, unless
 * use_isa chose another). */
static const struct philox_kernels *usable[2];
static int n_usable;
static const struct philox_kernels *kernels;

static void find_variants(void)
{
    n_usable = 0;
#if PHILOX_X86_VARIANTS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        usable[n_usable++] = &kernels_avx512;
    }
#endif
    usable[n_usable++] = &kernels_base;
    kernels = usable[0];
}

/* An address (a Python int) as a pointer; NULL with an exception set when it is not one. */
static void *as_address(PyObject *obj)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "the address must be an int, got %s",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    /* (PyLong_AsVoidPtr reads a negative int -n as the address 2**64 - n) */
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow < 0 || (overflow == 0 && v < 0)) {
        PyErr_Format(PyExc_ValueError, "the address must not be negative, got %R", obj);
        return NULL;
    }
    void *p = PyLong_AsVoidPtr(obj);
    if (p == NULL && !PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "the address must not be 0");
    }
    return p;
}

/* A 64-bit word (seed or offset): an int in [0, 2**64). */
static int as_u64(PyObject *obj, const char *what, uint64_t *out)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s must be in [0, 2**64)", what);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* A count: an int in [0, limit]. */
static int as_count(PyObject *obj, const char *what, uint64_t limit, uint64_t *out)
{
    if (as_u64(obj, what, out) < 0) {
        return -1;
    }
    if (*out > limit) {
        PyErr_Format(PyExc_ValueError, "%s must be at most %llu", what,
                     (unsigned long long)limit);
        return -1;
    }
    return 0;
}

static PyObject *py_words_at(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    uint64_t nblocks, seed, offset;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "words_at(ptr, nblocks, seed, offset) takes 4 arguments");
        return NULL;
    }
    void *ptr = as_address(args[0]);
    if (ptr == NULL || as_count(args[1], "nblocks", PY_SSIZE_T_MAX / 16, &nblocks) < 0
            || as_u64(args[2], "seed", &seed) < 0 || as_u64(args[3], "offset", &offset) < 0) {
        return NULL;
    }
    const struct philox_kernels *k = kernels;
    if (nblocks >= NOGIL_BLOCKS) {
        Py_BEGIN_ALLOW_THREADS
        k->words((uint32_t *)ptr, nblocks, seed, offset);
        Py_END_ALLOW_THREADS
    } else {
        k->words((uint32_t *)ptr, nblocks, seed, offset);
    }
    Py_RETURN_NONE;
}

static PyObject *py_uniform_at(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    uint64_t count, itemsize, seed, offset;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "uniform_at(ptr, count, itemsize, seed, offset) takes 5 arguments");
        return NULL;
    }
    void *ptr = as_address(args[0]);
    if (ptr == NULL || as_count(args[1], "count", PY_SSIZE_T_MAX / 8, &count) < 0
            || as_u64(args[2], "itemsize", &itemsize) < 0 || as_u64(args[3], "seed", &seed) < 0
            || as_u64(args[4], "offset", &offset) < 0) {
        return NULL;
    }
    if (itemsize != 4 && itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "itemsize must be 4 (float32) or 8 (float64)");
        return NULL;
    }
    const struct philox_kernels *k = kernels;
    int nogil = count / (16 / itemsize) >= NOGIL_BLOCKS;
    PyThreadState *state = nogil ? PyEval_SaveThread() : NULL;
    if (itemsize == 4) {
        k->uniform_f32((float *)ptr, count, seed, offset);
    } else {
        k->uniform_f64((double *)ptr, count, seed, offset);
    }
    if (nogil) {
        PyEval_RestoreThread(state);
    }
    Py_RETURN_NONE;
}

static PyObject *py_isa(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyUnicode_FromString(kernels->isa);
}

static PyObject *py_isas(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyObject *names = PyTuple_New(n_usable);
    for (int i = 0; names != NULL && i < n_usable; i++) {
        PyObject *name = PyUnicode_FromString(usable[i]->isa);
        if (name == NULL) {
            Py_CLEAR(names);
            break;
        }
        PyTuple_SET_ITEM(names, i, name);
    }
    return names;
}

static PyObject *py_use_isa(PyObject *self, PyObject *name)
{
    (void)self;
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "use_isa() takes a str, got %s", Py_TYPE(name)->tp_name);
        return NULL;
    }
    for (int i = 0; i < n_usable; i++) {
        if (PyUnicode_CompareWithASCIIString(name, usable[i]->isa) == 0) {
            PyObject *previous = PyUnicode_FromString(kernels->isa);
            if (previous != NULL) {
                kernels = usable[i];
            }
            return previous;
        }
    }
    PyObject *names = py_isas(NULL, NULL);
    if (names != NULL) {
        PyErr_Format(PyExc_ValueError, "use_isa(%R): this CPU runs only %R; pass one of them",
                     name, names);
        Py_DECREF(names);
    }
    return NULL;
}

static PyMethodDef methods[] = {
    {"words_at", (PyCFunction)(void (*)(void))py_words_at, METH_FASTCALL,
     "words_at(ptr, nblocks, seed, offset): the uint32 words of nblocks Philox4x32-10 blocks "
     "from counter offset under key seed, written to the host address ptr (16 bytes a block)."},
    {"uniform_at", (PyCFunction)(void (*)(void))py_uniform_at, METH_FASTCALL,
     "uniform_at(ptr, count, itemsize, seed, offset): count standard uniform float32 "
     "(itemsize 4) or float64 (itemsize 8) numbers of the blocks from offset, written to the "
     "host address ptr."},
    {"isa", py_isa, METH_NOARGS,
     "isa(): the instruction set of the loops in use ('avx512f' or 'baseline')."},
    {"isas", py_isas, METH_NOARGS,
     "isas(): the instruction sets this CPU runs the loops with, best first (the first is "
     "used unless use_isa chose another)."},
    {"use_isa", py_use_isa, METH_O,
     "use_isa(name): run the loops of instruction set name (one of isas()) from now on; "
     "returns the previous one's name. Every variant computes the same numbers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_philox_host",
    "Philox4x32-10 on the host in C: the compiled build's arithmetic for accelrt.random\n"
    "(the numpy reference is accelrt.random._philox; the pure build has no such module).\n"
    "\n"
    "Example::\n"
    "\n"
    "    >>> import numpy as np\n"
    "    >>> from accelrt.random import _philox, _philox_host\n"
    "    >>> w = np.empty((1, 4), np.uint32)\n"
    "    >>> _philox_host.words_at(w.ctypes.data, 1, 0, 0)\n"
    "    >>> [hex(int(x)) for x in w[0]]\n"
    "    ['0x6627e8d5', '0xe169c58d', '0xbc57ac4c', '0x9b00dbd8']\n"
    "    >>> a = np.empty(5, np.float32)\n"
    "    >>> _philox_host.uniform_at(a.ctypes.data, 5, 4, 42, 0)\n"
    "    >>> b = np.empty(5, np.float32)\n"
    "    >>> _philox.fill(b, 'uniform', 42, 0, (0.0, 1.0))\n"
    "    2\n"
    "    >>> a.tobytes() == b.tobytes()\n"
    "    True\n",
    0, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__philox_host(void)
{
    find_variants();
    return PyModule_Create(&module);
}
