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

/* The four words of block b under key (k0, k1). The loops over blocks that call it are
 * simple enough for the compiler to run several blocks side by side in SIMD registers
 * (setup.py compiles this file with -O3). */
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

static void words(uint32_t *out, uint64_t nblocks, uint64_t seed, uint64_t offset)
{
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (uint64_t j = 0; j < nblocks; j++) {
        philox_block(offset + j, k0, k1, out + 4 * j);
    }
}

static inline float f32_of(uint32_t w)
{
    return (float)(int32_t)(w >> 8) * (1.0f / 16777216.0f);             /* 2**-24, exact */
}

static inline double f64_of(uint32_t lo, uint32_t hi)
{
    return (double)(int64_t)(((uint64_t)hi << 32 | lo) >> 11) * (1.0 / 9007199254740992.0);
}

static void uniform_f32(float *out, uint64_t count, uint64_t seed, uint64_t offset)
{
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32), w[4];
    uint64_t full = count / 4;
    for (uint64_t j = 0; j < full; j++) {
        philox_block(offset + j, k0, k1, w);
        for (uint64_t k = 0; k < 4; k++) {
            out[4 * j + k] = f32_of(w[k]);
        }
    }
    if (count % 4) {                        /* the last block's first count % 4 numbers */
        philox_block(offset + full, k0, k1, w);
        for (uint64_t k = 0; k < count % 4; k++) {
            out[4 * full + k] = f32_of(w[k]);
        }
    }
}

static void uniform_f64(double *out, uint64_t count, uint64_t seed, uint64_t offset)
{
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32), w[4];
    uint64_t full = count / 2;
    for (uint64_t j = 0; j < full; j++) {
        philox_block(offset + j, k0, k1, w);
        out[2 * j] = f64_of(w[0], w[1]);
        out[2 * j + 1] = f64_of(w[2], w[3]);
    }
    if (count % 2) {
        philox_block(offset + full, k0, k1, w);
        out[2 * full] = f64_of(w[0], w[1]);
    }
}

/* An address (a Python int) as a pointer; NULL with an exception set when it is not one. */
static void *as_address(PyObject *obj)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "the address must be an int, got %s",
                     Py_TYPE(obj)->tp_name);
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
    if (nblocks >= NOGIL_BLOCKS) {
        Py_BEGIN_ALLOW_THREADS
        words((uint32_t *)ptr, nblocks, seed, offset);
        Py_END_ALLOW_THREADS
    } else {
        words((uint32_t *)ptr, nblocks, seed, offset);
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
    int nogil = count / (16 / itemsize) >= NOGIL_BLOCKS;
    PyThreadState *state = nogil ? PyEval_SaveThread() : NULL;
    if (itemsize == 4) {
        uniform_f32((float *)ptr, count, seed, offset);
    } else {
        uniform_f64((double *)ptr, count, seed, offset);
    }
    if (nogil) {
        PyEval_RestoreThread(state);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"words_at", (PyCFunction)(void (*)(void))py_words_at, METH_FASTCALL,
     "words_at(ptr, nblocks, seed, offset): the uint32 words of nblocks Philox4x32-10 blocks "
     "from counter offset under key seed, written to the host address ptr (16 bytes a block)."},
    {"uniform_at", (PyCFunction)(void (*)(void))py_uniform_at, METH_FASTCALL,
     "uniform_at(ptr, count, itemsize, seed, offset): count standard uniform float32 "
     "(itemsize 4) or float64 (itemsize 8) numbers of the blocks from offset, written to the "
     "host address ptr."},
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
    return PyModule_Create(&module);
}
