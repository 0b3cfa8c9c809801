/* Reading a Python int as an unsigned 64-bit address or size, for the allocator's C types
 * (_free_list_c.c, _block_map_c.c): they read two to four per call, on every cached malloc and
 * free.
 *
 * pyint_u64_fast() reads an exact, non-negative int of at most 64 bits straight from its
 * digits where CPython's layout allows (3.10 and 3.11: ob_size and ob_digit; 3.12 on: only
 * the "compact" one-digit values, through the public unstable API) and returns 1; otherwise
 * it returns 0 and sets no error, and the caller takes the general route (PyLong_AsLongLong-
 * AndOverflow and friends, which also handle int subclasses, negatives and errors). The
 * general call costs 35 - 55 instructions for the two-digit ints that addresses are;
 * tests/memory/test_free_list.py and test_block_map.py cover both routes (0, one, two and
 * three digits, 2**64 - 1, negatives, int subclasses).
 */
#ifndef ACCELRT_PYINT_H
#define ACCELRT_PYINT_H

#include <Python.h>
#include <stdint.h>
#if PY_VERSION_HEX < 0x030B0000
#include <longintrepr.h>
#endif

static inline int pyint_u64_fast(PyObject *o, uint64_t *out)
{
    if (!PyLong_CheckExact(o))
        return 0;
#if PY_VERSION_HEX < 0x030C0000
    const PyLongObject *v = (const PyLongObject *)o;
    Py_ssize_t n = Py_SIZE(v);
    if (n == 0) {
        *out = 0;
        return 1;
    }
    if (n == 1) {
        *out = (uint64_t)v->ob_digit[0];
        return 1;
    }
    if (n == 2) {
        *out = (uint64_t)v->ob_digit[0] | ((uint64_t)v->ob_digit[1] << PyLong_SHIFT);
        return 1;
    }
    return 0;   /* negative, or three digits and more: the general route */
#else
    if (PyUnstable_Long_IsCompact((PyLongObject *)o)) {
        Py_ssize_t c = PyUnstable_Long_CompactValue((PyLongObject *)o);
        if (c >= 0) {
            *out = (uint64_t)c;
            return 1;
        }
    }
    return 0;
#endif
}

#endif
