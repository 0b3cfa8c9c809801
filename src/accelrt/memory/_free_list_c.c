/* The caching allocator's free lists, in C: the compiled build's FreeList.
 *
 * A FreeList holds the free blocks of one pool on one stream, ordered by (size, address)
 * (PyTorch's BlockComparatorSize), so that the first entry at or above (rounded, 0) is the best
 * fit of a request. accelrt/memory/_free_list.py holds the same type in Python, which the pure
 * build runs and which documents every method; tests/memory/test_free_list.py runs both against
 * a model. The keys are two unsigned 64-bit integers in C where the Python type builds one
 * 128-bit integer per key (size << 64 | address): the arithmetic and comparisons of those long
 * integers were a third of the compiled allocator's work on the replays.
 *
 * Entries sit in sorted buckets of at most bucket_max entries (an insertion or removal moves
 * at most one bucket's entries; a bucket splits in two when it grows past the limit and is
 * dropped when it empties); a lookup is a bisection over the buckets' last keys and one inside
 * a bucket. Each entry holds a reference to its block.
 *
 *     FreeList(bucket_max=512)
 *     add(size, addr, block)           insert (ValueError if (size, addr) is present)
 *     remove(size, addr) -> block      take out (KeyError if absent)
 *     replace(size, addr, new_size, new_addr, block)   remove, then add (one call)
 *     pop_ge(size) -> block | None     take out the first entry at or above (size, 0)
 *     first_ge(size, addr=0) -> block | None           the first entry at or above, kept
 *     iter_ge(size, addr=0), iter_lt(size, addr=0)     blocks ascending / descending
 *     keys() -> [(size, addr), ...]    bucket_sizes() -> [n, ...]
 *     len(), iter() (blocks ascending), bool()
 *
 * Iterators raise RuntimeError if the list changes while they run.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_pyint.h"

typedef struct {
    uint64_t size;
    uint64_t addr;
    PyObject *blk;   /* owned */
} Entry;

typedef struct {
    Py_ssize_t n;
    Py_ssize_t cap;
    Entry *e;
} Bucket;

typedef struct {
    PyObject_HEAD
    Bucket *b;            /* nb buckets, sorted, none empty */
    Py_ssize_t nb;
    Py_ssize_t cap;       /* of b */
    Py_ssize_t len;
    Py_ssize_t bucket_max;
    uint64_t version;     /* bumped by every change (iterators check it) */
} FreeListObject;

typedef struct {
    PyObject_HEAD
    FreeListObject *fl;   /* NULL once exhausted */
    Py_ssize_t j, i;      /* next entry: bucket j, index i */
    uint64_t version;
    int desc;
} FreeListIterObject;

static PyTypeObject FreeListType;
static PyTypeObject FreeListIterType;

#define DEFAULT_BUCKET_MAX 512

static inline int key_lt(uint64_t s1, uint64_t a1, uint64_t s2, uint64_t a2)
{
    return s1 < s2 || (s1 == s2 && a1 < a2);
}

/* The first bucket whose last key is >= (s, a); nb if none. */
static inline Py_ssize_t bucket_ge(FreeListObject *fl, uint64_t s, uint64_t a)
{
    Py_ssize_t lo = 0, hi = fl->nb;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) >> 1;
        Bucket *bk = &fl->b[mid];
        Entry *last = &bk->e[bk->n - 1];
        if (key_lt(last->size, last->addr, s, a))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The first index in bucket bk whose key is >= (s, a). */
static inline Py_ssize_t entry_ge(Bucket *bk, uint64_t s, uint64_t a)
{
    Py_ssize_t lo = 0, hi = bk->n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) >> 1;
        Entry *x = &bk->e[mid];
        if (key_lt(x->size, x->addr, s, a))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int parse_u64(PyObject *o, uint64_t *out, const char *what)
{
    if (pyint_u64_fast(o, out))
        return 0;
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "FreeList: %s must be an int, not %.100s", what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    /* (PyLong_AsLongLongAndOverflow reads the digits directly; CPython 3.11's
     * PyLong_AsUnsignedLongLong goes through _PyLong_AsByteArray for every multi-digit
     * value, a large share of a replay's cost) */
    int overflow;
    long long sv = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (!overflow && sv >= 0) {
        *out = (uint64_t)sv;
        return 0;
    }
    if (sv == -1 && PyErr_Occurred())
        return -1;
    unsigned long long v = overflow > 0 ? PyLong_AsUnsignedLongLong(o) : (unsigned long long)-1;
    if (v == (unsigned long long)-1 && (overflow <= 0 || PyErr_Occurred())) {
        PyErr_Clear();
        PyErr_Format(PyExc_OverflowError,
                     "FreeList: %s must be in [0, 2**64), got %R", what, o);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* Take entry i out of bucket j (its reference passes to the caller). */
static PyObject *take_at(FreeListObject *fl, Py_ssize_t j, Py_ssize_t i)
{
    Bucket *bk = &fl->b[j];
    PyObject *blk = bk->e[i].blk;
    bk->n--;
    if (i < bk->n)
        memmove(&bk->e[i], &bk->e[i + 1], (size_t)(bk->n - i) * sizeof(Entry));
    if (bk->n == 0) {
        PyMem_Free(bk->e);
        fl->nb--;
        if (j < fl->nb)
            memmove(&fl->b[j], &fl->b[j + 1], (size_t)(fl->nb - j) * sizeof(Bucket));
    }
    fl->len--;
    fl->version++;
    return blk;
}

/* ValueError: (s, a) is listed already; -1. (PyErr_Format has no "%llx" before Python 3.12:
 * it printed the format itself, so the address is written here.) */
static int listed(uint64_t s, uint64_t a)
{
    char addr[24];
    snprintf(addr, sizeof(addr), "0x%llx", (unsigned long long)a);
    PyErr_Format(PyExc_ValueError, "FreeList.add: a block of %llu bytes at %s is already listed",
                 (unsigned long long)s, addr);
    return -1;
}

/* Insert (s, a, blk) (a new reference is taken); -1 with an exception set on failure. */
static int insert(FreeListObject *fl, uint64_t s, uint64_t a, PyObject *blk)
{
    Py_ssize_t j, i;
    Bucket *bk;
    if (fl->nb == 0) {
        if (fl->cap == 0) {
            fl->b = PyMem_New(Bucket, 4);
            if (fl->b == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            fl->cap = 4;
        }
        Entry *e = PyMem_New(Entry, 4);
        if (e == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        fl->b[0].n = 0;
        fl->b[0].cap = 4;
        fl->b[0].e = e;
        fl->nb = 1;
        j = 0;
        i = 0;
        bk = &fl->b[0];
    }
    else {
        j = bucket_ge(fl, s, a);
        if (j == fl->nb) {
            j--;
            bk = &fl->b[j];
            i = bk->n;
        }
        else {
            bk = &fl->b[j];
            i = entry_ge(bk, s, a);
            if (i < bk->n && bk->e[i].size == s && bk->e[i].addr == a) {
                return listed(s, a);
            }
        }
    }
    if (bk->n == bk->cap) {
        Py_ssize_t ncap = bk->cap * 2;
        if (ncap - 1 > fl->bucket_max)     /* (bucket_max + 1 may overflow) */
            ncap = fl->bucket_max + 1;
        if (ncap <= bk->n)
            ncap = bk->n + 1;
        /* (PyMem_Resize would set bk->e to NULL when it fails: the entries would be lost) */
        Entry *e = (size_t)ncap > PY_SSIZE_T_MAX / sizeof(Entry)
                   ? NULL : PyMem_Realloc(bk->e, (size_t)ncap * sizeof(Entry));
        if (e == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        bk->e = e;
        bk->cap = ncap;
    }
    if (i < bk->n)
        memmove(&bk->e[i + 1], &bk->e[i], (size_t)(bk->n - i) * sizeof(Entry));
    bk->e[i].size = s;
    bk->e[i].addr = a;
    Py_INCREF(blk);
    bk->e[i].blk = blk;
    bk->n++;
    fl->len++;
    fl->version++;
    if (bk->n > fl->bucket_max) {
        /* split bucket j in two halves */
        if (fl->nb == fl->cap) {
            Py_ssize_t ncap = fl->cap * 2;
            Bucket *nbk = (size_t)ncap > PY_SSIZE_T_MAX / sizeof(Bucket)
                          ? NULL : PyMem_Realloc(fl->b, (size_t)ncap * sizeof(Bucket));
            if (nbk == NULL)
                return 0;   /* (fl->b is kept: the bucket stays long, still correct) */
            fl->b = nbk;
            fl->cap = ncap;
            bk = &fl->b[j];
        }
        Py_ssize_t half = bk->n >> 1;
        Py_ssize_t rest = bk->n - half;
        Py_ssize_t rcap = rest < 4 ? 4 : rest;
        Entry *e = PyMem_New(Entry, rcap);
        if (e == NULL)
            return 0;       /* (likewise) */
        memcpy(e, &bk->e[half], (size_t)rest * sizeof(Entry));
        bk->n = half;
        if (j + 1 < fl->nb)
            memmove(&fl->b[j + 2], &fl->b[j + 1], (size_t)(fl->nb - j - 1) * sizeof(Bucket));
        fl->b[j + 1].n = rest;
        fl->b[j + 1].cap = rcap;
        fl->b[j + 1].e = e;
        fl->nb++;
    }
    return 0;
}

/* Find (s, a): 1 with *jp, *ip set, or 0. */
static int locate(FreeListObject *fl, uint64_t s, uint64_t a, Py_ssize_t *jp, Py_ssize_t *ip)
{
    Py_ssize_t j = bucket_ge(fl, s, a);
    if (j == fl->nb)
        return 0;
    Bucket *bk = &fl->b[j];
    Py_ssize_t i = entry_ge(bk, s, a);
    if (bk->e[i].size != s || bk->e[i].addr != a)
        return 0;
    *jp = j;
    *ip = i;
    return 1;
}

/* KeyError((size, addr)) of the caller's objects, as the Python type raises it (the key in
 * a 1-tuple: PyErr_SetObject takes a tuple for the arguments, and args[0] would be size) */
static PyObject *missing(PyObject *size, PyObject *addr)
{
    PyObject *args = Py_BuildValue("((OO))", size, addr);
    if (args != NULL) {
        PyErr_SetObject(PyExc_KeyError, args);
        Py_DECREF(args);
    }
    return NULL;
}

/* ------------------------------------------------------------------ the type */

static PyObject *FreeList_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"bucket_max", NULL};
    Py_ssize_t bucket_max = DEFAULT_BUCKET_MAX;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|n:FreeList", kwlist, &bucket_max))
        return NULL;
    if (bucket_max < 2) {
        PyErr_Format(PyExc_ValueError, "FreeList: bucket_max must be at least 2, got %zd",
                     bucket_max);
        return NULL;
    }
    FreeListObject *fl = (FreeListObject *)type->tp_alloc(type, 0);
    if (fl == NULL)
        return NULL;
    fl->b = NULL;
    fl->nb = fl->cap = fl->len = 0;
    fl->bucket_max = bucket_max;
    fl->version = 0;
    return (PyObject *)fl;
}

static int FreeList_clear(FreeListObject *fl)
{
    Bucket *b = fl->b;
    Py_ssize_t nb = fl->nb;
    fl->b = NULL;
    fl->nb = fl->cap = fl->len = 0;
    fl->version++;
    for (Py_ssize_t j = 0; j < nb; j++) {
        for (Py_ssize_t i = 0; i < b[j].n; i++)
            Py_DECREF(b[j].e[i].blk);
        PyMem_Free(b[j].e);
    }
    PyMem_Free(b);
    return 0;
}

static int FreeList_traverse(FreeListObject *fl, visitproc visit, void *arg)
{
    for (Py_ssize_t j = 0; j < fl->nb; j++)
        for (Py_ssize_t i = 0; i < fl->b[j].n; i++)
            Py_VISIT(fl->b[j].e[i].blk);
    return 0;
}

static void FreeList_dealloc(FreeListObject *fl)
{
    PyObject_GC_UnTrack(fl);
    /* (the trashcan defers the release of deeply nested objects, as a list's dealloc does: a
     * chain of a million lists, each holding the next, would overflow the C stack) */
    Py_TRASHCAN_BEGIN(fl, FreeList_dealloc)
    FreeList_clear(fl);
    Py_TYPE(fl)->tp_free((PyObject *)fl);
    Py_TRASHCAN_END
}

static Py_ssize_t FreeList_len(FreeListObject *fl)
{
    return fl->len;
}

static PyObject *FreeList_add(FreeListObject *fl, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t s, a;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "FreeList.add takes (size, addr, block), %zd given",
                     nargs);
        return NULL;
    }
    if (parse_u64(args[0], &s, "size") < 0 || parse_u64(args[1], &a, "addr") < 0)
        return NULL;
    if (insert(fl, s, a, args[2]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *FreeList_remove(FreeListObject *fl, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t s, a;
    Py_ssize_t j, i;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "FreeList.remove takes (size, addr), %zd given", nargs);
        return NULL;
    }
    if (parse_u64(args[0], &s, "size") < 0 || parse_u64(args[1], &a, "addr") < 0)
        return NULL;
    if (!locate(fl, s, a, &j, &i))
        return missing(args[0], args[1]);
    return take_at(fl, j, i);
}

static PyObject *FreeList_replace(FreeListObject *fl, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t s, a, ns, na;
    Py_ssize_t j, i;
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError,
                     "FreeList.replace takes (size, addr, new_size, new_addr, block), "
                     "%zd given", nargs);
        return NULL;
    }
    if (parse_u64(args[0], &s, "size") < 0 || parse_u64(args[1], &a, "addr") < 0
        || parse_u64(args[2], &ns, "new_size") < 0 || parse_u64(args[3], &na, "new_addr") < 0)
        return NULL;
    if (!locate(fl, s, a, &j, &i))
        return missing(args[0], args[1]);
    Bucket *bk = &fl->b[j];
    PyObject *blk = args[4];
    /* in place when the new key keeps the entry's place (between its neighbours in the
     * bucket, and not past the next bucket's first key) */
    int after_prev = i > 0 ? key_lt(bk->e[i - 1].size, bk->e[i - 1].addr, ns, na)
                           : (j == 0 || key_lt(fl->b[j - 1].e[fl->b[j - 1].n - 1].size,
                                               fl->b[j - 1].e[fl->b[j - 1].n - 1].addr, ns, na));
    int before_next = i + 1 < bk->n ? key_lt(ns, na, bk->e[i + 1].size, bk->e[i + 1].addr)
                                    : (j + 1 == fl->nb
                                       || key_lt(ns, na, fl->b[j + 1].e[0].size,
                                                 fl->b[j + 1].e[0].addr));
    if (after_prev && before_next) {
        PyObject *old = bk->e[i].blk;
        Py_INCREF(blk);
        bk->e[i].size = ns;
        bk->e[i].addr = na;
        bk->e[i].blk = blk;
        fl->version++;
        Py_DECREF(old);
        Py_RETURN_NONE;
    }
    /* a new key that is listed already: refused with the list unchanged (as the Python type
     * does), not taken out and put back (which would move entries between buckets) */
    Py_ssize_t j2, i2;
    if (locate(fl, ns, na, &j2, &i2)) {
        listed(ns, na);
        return NULL;
    }
    uint64_t was_s = s, was_a = a;
    PyObject *old = take_at(fl, j, i);
    if (insert(fl, ns, na, blk) < 0) {
        /* (no memory) put the old entry back (its place is free again) */
        PyObject *exc_type, *exc_value, *exc_tb;
        PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
        if (insert(fl, was_s, was_a, old) < 0)
            PyErr_Clear();
        PyErr_Restore(exc_type, exc_value, exc_tb);
        Py_DECREF(old);
        return NULL;
    }
    Py_DECREF(old);
    Py_RETURN_NONE;
}

static PyObject *FreeList_pop_ge(FreeListObject *fl, PyObject *arg)
{
    uint64_t s;
    if (parse_u64(arg, &s, "size") < 0)
        return NULL;
    Py_ssize_t j = bucket_ge(fl, s, 0);
    if (j == fl->nb)
        Py_RETURN_NONE;
    return take_at(fl, j, entry_ge(&fl->b[j], s, 0));
}

static int parse_key(PyObject *const *args, Py_ssize_t nargs, const char *name,
                     uint64_t *s, uint64_t *a)
{
    *a = 0;
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "FreeList.%s takes (size, addr=0), %zd arguments given",
                     name, nargs);
        return -1;
    }
    if (parse_u64(args[0], s, "size") < 0)
        return -1;
    if (nargs == 2 && parse_u64(args[1], a, "addr") < 0)
        return -1;
    return 0;
}

static PyObject *FreeList_first_ge(FreeListObject *fl, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t s, a;
    if (parse_key(args, nargs, "first_ge", &s, &a) < 0)
        return NULL;
    Py_ssize_t j = bucket_ge(fl, s, a);
    if (j == fl->nb)
        Py_RETURN_NONE;
    PyObject *blk = fl->b[j].e[entry_ge(&fl->b[j], s, a)].blk;
    Py_INCREF(blk);
    return blk;
}

/* A new iterator over fl, its position to be set by the caller. Its allocation may run the
 * garbage collector, whose finalisers may change fl: the caller reads fl (the position and
 * version) only after this returns, and no Python code runs in between. */
static FreeListIterObject *new_iter(FreeListObject *fl, int desc)
{
    FreeListIterObject *it = PyObject_GC_New(FreeListIterObject, &FreeListIterType);
    if (it == NULL)
        return NULL;
    Py_INCREF(fl);
    it->fl = fl;
    it->j = it->i = 0;
    it->version = fl->version;
    it->desc = desc;
    PyObject_GC_Track(it);
    return it;
}

static PyObject *FreeList_iter_ge(FreeListObject *fl, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t s, a;
    if (parse_key(args, nargs, "iter_ge", &s, &a) < 0)
        return NULL;
    FreeListIterObject *it = new_iter(fl, 0);
    if (it == NULL)
        return NULL;
    Py_ssize_t j = bucket_ge(fl, s, a);
    it->j = j;
    it->i = j < fl->nb ? entry_ge(&fl->b[j], s, a) : 0;
    it->version = fl->version;
    return (PyObject *)it;
}

static PyObject *FreeList_iter_lt(FreeListObject *fl, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t s, a;
    if (parse_key(args, nargs, "iter_lt", &s, &a) < 0)
        return NULL;
    FreeListIterObject *it = new_iter(fl, 1);
    if (it == NULL)
        return NULL;
    Py_ssize_t j = bucket_ge(fl, s, a);
    Py_ssize_t i;
    if (j < fl->nb) {
        i = entry_ge(&fl->b[j], s, a) - 1;
        if (i < 0) {
            j--;
            i = j >= 0 ? fl->b[j].n - 1 : 0;
        }
    }
    else {
        j = fl->nb - 1;
        i = j >= 0 ? fl->b[j].n - 1 : 0;
    }
    it->j = j;
    it->i = i;
    it->version = fl->version;
    return (PyObject *)it;
}

static PyObject *FreeList_iter(FreeListObject *fl)
{
    return (PyObject *)new_iter(fl, 0);
}

/* keys() and bucket_sizes() copy what they return out of the list before they make the first
 * Python object: making the list and its tuples may run the garbage collector, whose
 * finalisers may change the list (a list made from its length before would be filled past
 * its end, or left with empty items). */
static PyObject *FreeList_keys(FreeListObject *fl, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t n = fl->len, k = 0;
    uint64_t *kv = PyMem_New(uint64_t, 2 * (size_t)(n ? n : 1));
    if (kv == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t j = 0; j < fl->nb; j++)
        for (Py_ssize_t i = 0; i < fl->b[j].n; i++, k++) {
            kv[2 * k] = fl->b[j].e[i].size;
            kv[2 * k + 1] = fl->b[j].e[i].addr;
        }
    PyObject *out = PyList_New(n);
    for (k = 0; out != NULL && k < n; k++) {
        PyObject *t = Py_BuildValue("(KK)", (unsigned long long)kv[2 * k],
                                    (unsigned long long)kv[2 * k + 1]);
        if (t == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, k, t);
    }
    PyMem_Free(kv);
    return out;
}

static PyObject *FreeList_bucket_sizes(FreeListObject *fl, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t nb = fl->nb;
    Py_ssize_t *sizes = PyMem_New(Py_ssize_t, (size_t)(nb ? nb : 1));
    if (sizes == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t j = 0; j < nb; j++)
        sizes[j] = fl->b[j].n;
    PyObject *out = PyList_New(nb);
    for (Py_ssize_t j = 0; out != NULL && j < nb; j++) {
        PyObject *n = PyLong_FromSsize_t(sizes[j]);
        if (n == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, j, n);
    }
    PyMem_Free(sizes);
    return out;
}

static PyObject *FreeList_get_bucket_max(FreeListObject *fl, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(fl->bucket_max);
}

static PyObject *FreeList_repr(FreeListObject *fl)
{
    PyObject *keys = FreeList_keys(fl, NULL);
    if (keys == NULL)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("FreeList(%R)", keys);
    Py_DECREF(keys);
    return r;
}

static PyMethodDef FreeList_methods[] = {
    {"add", (PyCFunction)(void (*)(void))FreeList_add, METH_FASTCALL,
     "add(size, addr, block): list block under the key (size, addr)."},
    {"remove", (PyCFunction)(void (*)(void))FreeList_remove, METH_FASTCALL,
     "remove(size, addr) -> block: take out the entry of key (size, addr)."},
    {"replace", (PyCFunction)(void (*)(void))FreeList_replace, METH_FASTCALL,
     "replace(size, addr, new_size, new_addr, block): remove(size, addr), then add."},
    {"pop_ge", (PyCFunction)FreeList_pop_ge, METH_O,
     "pop_ge(size) -> block | None: take out the first entry at or above (size, 0)."},
    {"first_ge", (PyCFunction)(void (*)(void))FreeList_first_ge, METH_FASTCALL,
     "first_ge(size, addr=0) -> block | None: the first entry at or above the key."},
    {"iter_ge", (PyCFunction)(void (*)(void))FreeList_iter_ge, METH_FASTCALL,
     "iter_ge(size, addr=0): the blocks at or above the key, ascending."},
    {"iter_lt", (PyCFunction)(void (*)(void))FreeList_iter_lt, METH_FASTCALL,
     "iter_lt(size, addr=0): the blocks below the key, descending."},
    {"keys", (PyCFunction)FreeList_keys, METH_NOARGS,
     "keys() -> list of (size, addr), ascending."},
    {"bucket_sizes", (PyCFunction)FreeList_bucket_sizes, METH_NOARGS,
     "bucket_sizes() -> the number of entries of each bucket."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef FreeList_getset[] = {
    {"bucket_max", (getter)FreeList_get_bucket_max, NULL,
     "A bucket splits in two when it grows past this many entries.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods FreeList_as_sequence = {
    .sq_length = (lenfunc)FreeList_len,
};

static PyTypeObject FreeListType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "accelrt.memory._free_list_c.FreeList",
    .tp_basicsize = sizeof(FreeListObject),
    .tp_dealloc = (destructor)FreeList_dealloc,
    .tp_repr = (reprfunc)FreeList_repr,
    .tp_as_sequence = &FreeList_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The free blocks of one pool on one stream, by (size, address) "
              "(accelrt.memory._free_list.FreeList, in C).",
    .tp_traverse = (traverseproc)FreeList_traverse,
    .tp_clear = (inquiry)FreeList_clear,
    .tp_iter = (getiterfunc)FreeList_iter,
    .tp_methods = FreeList_methods,
    .tp_getset = FreeList_getset,
    .tp_new = FreeList_new,
};

/* ------------------------------------------------------------------ the iterator */

static int FreeListIter_traverse(FreeListIterObject *it, visitproc visit, void *arg)
{
    Py_VISIT(it->fl);
    return 0;
}

static int FreeListIter_clear(FreeListIterObject *it)
{
    Py_CLEAR(it->fl);
    return 0;
}

static void FreeListIter_dealloc(FreeListIterObject *it)
{
    PyObject_GC_UnTrack(it);
    Py_XDECREF(it->fl);
    PyObject_GC_Del(it);
}

static PyObject *FreeListIter_next(FreeListIterObject *it)
{
    FreeListObject *fl = it->fl;
    if (fl == NULL)
        return NULL;
    if (fl->version != it->version) {
        Py_CLEAR(it->fl);
        PyErr_SetString(PyExc_RuntimeError, "FreeList changed during iteration");
        return NULL;
    }
    Py_ssize_t j = it->j, i = it->i;
    if (j < 0 || j >= fl->nb) {
        Py_CLEAR(it->fl);
        return NULL;
    }
    if (!it->desc && i >= fl->b[j].n) {   /* (an iter_ge start past a bucket's end) */
        j++;
        i = 0;
        if (j >= fl->nb) {
            Py_CLEAR(it->fl);
            return NULL;
        }
    }
    PyObject *blk = fl->b[j].e[i].blk;
    Py_INCREF(blk);
    if (it->desc) {
        if (--i < 0) {
            j--;
            i = j >= 0 ? fl->b[j].n - 1 : 0;
        }
    }
    else if (++i == fl->b[j].n) {
        j++;
        i = 0;
    }
    it->j = j;
    it->i = i;
    return blk;
}

static PyTypeObject FreeListIterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "accelrt.memory._free_list_c.FreeListIterator",
    .tp_basicsize = sizeof(FreeListIterObject),
    .tp_dealloc = (destructor)FreeListIter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)FreeListIter_traverse,
    .tp_clear = (inquiry)FreeListIter_clear,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)FreeListIter_next,
};

/* ------------------------------------------------------------------ the module */

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "accelrt.memory._free_list_c",
    .m_doc = "The caching allocator's free lists in C (the compiled build's "
             "accelrt.memory._free_list.FreeList).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__free_list_c(void)
{
    if (PyType_Ready(&FreeListType) < 0 || PyType_Ready(&FreeListIterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&FreeListType);
    if (PyModule_AddObject(m, "FreeList", (PyObject *)&FreeListType) < 0) {
        Py_DECREF(&FreeListType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
