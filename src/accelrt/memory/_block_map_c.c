/* The caching allocator's map of blocks by address, in C: the compiled build's BlockMap.
 *
 * accelrt/memory/_block_map.py holds the pure build's (a dict) and says what the type does;
 * this one has the same behaviour for every operation the allocator uses (subscript, store,
 * delete, `in`, len, get, values), in the same order for values() (the order keys were first
 * stored, as a dict's). tests/memory/test_block_map.py runs both against a model.
 *
 * Keys are addresses, unsigned 64-bit integers, kept unboxed in an open-addressed table
 * (Fibonacci hashing, linear probing, deletion by backward shift, at most half full): a
 * lookup multiplies, shifts and compares integers, where a dict hashes a Python int whose
 * low bits are all zero for aligned addresses and compares int objects. A key that is not
 * an int in [0, 2**64) is never present: lookups raise KeyError (get returns the default),
 * stores raise TypeError or OverflowError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_pyint.h"

typedef struct {
    uint64_t key;
    uint64_t seq;      /* when the key was first stored: values() keeps that order */
    PyObject *val;     /* NULL: an empty slot */
} Slot;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    Py_ssize_t used;
    int bits;          /* capacity 1 << bits */
    uint64_t next_seq;
} BlockMapObject;

#define MIN_BITS 3
#define FIB 0x9E3779B97F4A7C15ULL

static inline size_t home(const BlockMapObject *m, uint64_t key)
{
    return (size_t)((key * FIB) >> (64 - m->bits));
}

/* 1: `o` read into *out; 0: `o` is not an int in [0, 2**64) (no error set); -1: error. */
static int read_key(PyObject *o, uint64_t *out)
{
    if (pyint_u64_fast(o, out))
        return 1;
    if (!PyLong_Check(o))
        return 0;
    int overflow;
    long long sv = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (!overflow) {
        if (sv == -1 && PyErr_Occurred())
            return -1;
        if (sv < 0)
            return 0;
        *out = (uint64_t)sv;
        return 1;
    }
    if (overflow < 0)
        return 0;
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    *out = (uint64_t)v;
    return 1;
}

/* The slot holding `key`, or -1. */
static Py_ssize_t find(const BlockMapObject *m, uint64_t key)
{
    size_t mask = ((size_t)1 << m->bits) - 1;
    size_t i = home(m, key);
    for (;;) {
        const Slot *s = &m->slots[i];
        if (s->val == NULL)
            return -1;
        if (s->key == key)
            return (Py_ssize_t)i;
        i = (i + 1) & mask;
    }
}

static int grow(BlockMapObject *m)
{
    int bits = m->bits + 1;
    size_t cap = (size_t)1 << bits;
    Slot *fresh = PyMem_Calloc(cap, sizeof(Slot));
    if (fresh == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Slot *old = m->slots;
    size_t oldcap = (size_t)1 << m->bits;
    m->slots = fresh;
    m->bits = bits;
    size_t mask = cap - 1;
    for (size_t k = 0; k < oldcap; k++) {
        if (old[k].val == NULL)
            continue;
        size_t i = home(m, old[k].key);
        while (fresh[i].val != NULL)
            i = (i + 1) & mask;
        fresh[i] = old[k];
    }
    PyMem_Free(old);
    return 0;
}

/* Store (a new reference to) `val` under `key`. */
static int store(BlockMapObject *m, uint64_t key, PyObject *val)
{
    Py_ssize_t at = find(m, key);
    if (at >= 0) {
        PyObject *was = m->slots[at].val;
        Py_INCREF(val);
        m->slots[at].val = val;
        Py_DECREF(was);
        return 0;
    }
    if ((size_t)(m->used + 1) * 2 > ((size_t)1 << m->bits) && grow(m) < 0)
        return -1;
    size_t mask = ((size_t)1 << m->bits) - 1;
    size_t i = home(m, key);
    while (m->slots[i].val != NULL)
        i = (i + 1) & mask;
    m->slots[i].key = key;
    m->slots[i].seq = m->next_seq++;
    Py_INCREF(val);
    m->slots[i].val = val;
    m->used++;
    return 0;
}

/* Empty slot i, shifting back the entries after it that probed past it; returns the value
 * it held (the reference passes to the caller). */
static PyObject *take(BlockMapObject *m, size_t i)
{
    PyObject *val = m->slots[i].val;
    size_t mask = ((size_t)1 << m->bits) - 1;
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        Slot *s = &m->slots[j];
        if (s->val == NULL)
            break;
        size_t h = home(m, s->key);
        /* s may move to i unless its home lies cyclically in (i, j] */
        if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
            m->slots[i] = *s;
            i = j;
        }
    }
    m->slots[i].val = NULL;
    m->used--;
    return val;
}

static void key_error(PyObject *key)
{
    PyObject *t = PyTuple_Pack(1, key);   /* (a tuple: a tuple key reads as itself) */
    if (t != NULL) {
        PyErr_SetObject(PyExc_KeyError, t);
        Py_DECREF(t);
    }
}

static PyObject *BlockMap_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if ((kwds != NULL && PyDict_GET_SIZE(kwds)) || PyTuple_GET_SIZE(args)) {
        PyErr_SetString(PyExc_TypeError, "BlockMap() takes no arguments");
        return NULL;
    }
    BlockMapObject *m = (BlockMapObject *)type->tp_alloc(type, 0);
    if (m == NULL)
        return NULL;
    m->slots = PyMem_Calloc((size_t)1 << MIN_BITS, sizeof(Slot));
    if (m->slots == NULL) {
        Py_DECREF(m);
        return PyErr_NoMemory();
    }
    m->bits = MIN_BITS;
    return (PyObject *)m;
}

static int BlockMap_clear(BlockMapObject *m)
{
    /* detach the table first: a value's release may run code that uses this map */
    Slot *old = m->slots;
    size_t cap = (size_t)1 << m->bits;
    if (old == NULL || m->used == 0)
        return 0;
    Slot *fresh = PyMem_Calloc((size_t)1 << MIN_BITS, sizeof(Slot));
    if (fresh == NULL) {   /* (no memory: release in place, as a last resort) */
        for (size_t k = 0; k < cap; k++)
            Py_CLEAR(old[k].val);
        m->used = 0;
        return 0;
    }
    m->slots = fresh;
    m->bits = MIN_BITS;
    m->used = 0;
    for (size_t k = 0; k < cap; k++)
        Py_XDECREF(old[k].val);
    PyMem_Free(old);
    return 0;
}

static int BlockMap_traverse(BlockMapObject *m, visitproc visit, void *arg)
{
    if (m->slots == NULL)
        return 0;
    size_t cap = (size_t)1 << m->bits;
    for (size_t k = 0; k < cap; k++)
        Py_VISIT(m->slots[k].val);
    return 0;
}

static void BlockMap_dealloc(BlockMapObject *m)
{
    PyObject_GC_UnTrack(m);
    /* (the trashcan defers the release of deeply nested objects, as a dict's dealloc does: a
     * chain of a million maps, each holding the next, would overflow the C stack) */
    Py_TRASHCAN_BEGIN(m, BlockMap_dealloc)
    BlockMap_clear(m);
    PyMem_Free(m->slots);
    m->slots = NULL;
    Py_TYPE(m)->tp_free((PyObject *)m);
    Py_TRASHCAN_END
}

static Py_ssize_t BlockMap_length(BlockMapObject *m)
{
    return m->used;
}

static PyObject *BlockMap_subscript(BlockMapObject *m, PyObject *key)
{
    uint64_t k;
    int r = read_key(key, &k);
    if (r < 0)
        return NULL;
    Py_ssize_t at = r ? find(m, k) : -1;
    if (at < 0) {
        key_error(key);
        return NULL;
    }
    PyObject *v = m->slots[at].val;
    Py_INCREF(v);
    return v;
}

static int BlockMap_ass_subscript(BlockMapObject *m, PyObject *key, PyObject *val)
{
    uint64_t k;
    int r = read_key(key, &k);
    if (r < 0)
        return -1;
    if (val == NULL) {
        Py_ssize_t at = r ? find(m, k) : -1;
        if (at < 0) {
            key_error(key);
            return -1;
        }
        PyObject *was = take(m, (size_t)at);
        Py_DECREF(was);
        return 0;
    }
    if (r == 0) {
        if (PyLong_Check(key))
            PyErr_Format(PyExc_OverflowError,
                         "BlockMap: an address must be in [0, 2**64), got %R", key);
        else
            PyErr_Format(PyExc_TypeError, "BlockMap: an address must be an int, not %.100s",
                         Py_TYPE(key)->tp_name);
        return -1;
    }
    return store(m, k, val);
}

static int BlockMap_contains(BlockMapObject *m, PyObject *key)
{
    uint64_t k;
    int r = read_key(key, &k);
    if (r <= 0)
        return r;
    return find(m, k) >= 0;
}

static PyObject *BlockMap_get(BlockMapObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "BlockMap.get takes (key[, default]), %zd given", nargs);
        return NULL;
    }
    uint64_t k;
    int r = read_key(args[0], &k);
    if (r < 0)
        return NULL;
    Py_ssize_t at = r ? find(m, k) : -1;
    PyObject *v = at >= 0 ? m->slots[at].val : nargs == 2 ? args[1] : Py_None;
    Py_INCREF(v);
    return v;
}

typedef struct {
    uint64_t seq;
    size_t slot;
} Ordered;

static int by_seq(const void *a, const void *b)
{
    uint64_t x = ((const Ordered *)a)->seq, y = ((const Ordered *)b)->seq;
    return (x > y) - (x < y);
}

/* The occupied slots in the order their keys were first stored (a dict's order). */
static Ordered *ordered(BlockMapObject *m)
{
    Ordered *o = PyMem_Malloc((size_t)(m->used ? m->used : 1) * sizeof(Ordered));
    if (o == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    size_t cap = (size_t)1 << m->bits, n = 0;
    for (size_t k = 0; k < cap; k++) {
        if (m->slots[k].val != NULL) {
            o[n].seq = m->slots[k].seq;
            o[n].slot = k;
            n++;
        }
    }
    qsort(o, n, sizeof(Ordered), by_seq);
    return o;
}

/* values() and keys() take what they return out of the table (new references to the
 * values, copies of the keys) before they make the list: PyList_New may run the garbage
 * collector, whose finalisers may change the map (a list made from its length before would
 * be filled past its end, or left with empty items, from slots that moved or emptied). */
static PyObject *BlockMap_values(BlockMapObject *m, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t n = m->used;
    Ordered *o = ordered(m);
    if (o == NULL)
        return NULL;
    PyObject **vals = PyMem_New(PyObject *, (size_t)(n ? n : 1));
    if (vals == NULL) {
        PyMem_Free(o);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        vals[i] = m->slots[o[i].slot].val;
        Py_INCREF(vals[i]);
    }
    PyMem_Free(o);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (out != NULL)
            PyList_SET_ITEM(out, i, vals[i]);
        else
            Py_DECREF(vals[i]);
    }
    PyMem_Free(vals);
    return out;
}

static PyObject *BlockMap_keys(BlockMapObject *m, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t n = m->used;
    Ordered *o = ordered(m);
    if (o == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        o[i].seq = m->slots[o[i].slot].key;   /* (in order now: seq's place takes the key) */
    /* (boxing an int runs no Python code, and ints are not tracked by the collector) */
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *k = PyLong_FromUnsignedLongLong(o[i].seq);
        if (k == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, k);
    }
    PyMem_Free(o);
    return out;
}

static PyObject *BlockMap_iter(BlockMapObject *m)
{
    PyObject *keys = BlockMap_keys(m, NULL);
    if (keys == NULL)
        return NULL;
    PyObject *it = PyObject_GetIter(keys);
    Py_DECREF(keys);
    return it;
}

static PyObject *BlockMap_repr(BlockMapObject *m)
{
    return PyUnicode_FromFormat("<BlockMap of %zd blocks>", m->used);
}

static PyMappingMethods BlockMap_as_mapping = {
    .mp_length = (lenfunc)BlockMap_length,
    .mp_subscript = (binaryfunc)BlockMap_subscript,
    .mp_ass_subscript = (objobjargproc)BlockMap_ass_subscript,
};

static PySequenceMethods BlockMap_as_sequence = {
    .sq_contains = (objobjproc)BlockMap_contains,
};

static PyMethodDef BlockMap_methods[] = {
    {"get", (PyCFunction)(void (*)(void))BlockMap_get, METH_FASTCALL,
     "get(addr, default=None): the block at addr, or default."},
    {"values", (PyCFunction)BlockMap_values, METH_NOARGS,
     "values(): a list of the blocks, in the order their addresses were first stored."},
    {"keys", (PyCFunction)BlockMap_keys, METH_NOARGS,
     "keys(): a list of the addresses, in the order they were first stored."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BlockMapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "accelrt.memory._block_map_c.BlockMap",
    .tp_basicsize = sizeof(BlockMapObject),
    .tp_dealloc = (destructor)BlockMap_dealloc,
    .tp_repr = (reprfunc)BlockMap_repr,
    .tp_as_mapping = &BlockMap_as_mapping,
    .tp_as_sequence = &BlockMap_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The allocator's blocks by address (unboxed 64-bit keys), "
              "accelrt.memory._block_map.BlockMap's compiled form.",
    .tp_traverse = (traverseproc)BlockMap_traverse,
    .tp_clear = (inquiry)BlockMap_clear,
    .tp_iter = (getiterfunc)BlockMap_iter,
    .tp_methods = BlockMap_methods,
    .tp_new = BlockMap_new,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "accelrt.memory._block_map_c",
    .m_doc = "The allocator's map of blocks by address, in C (see _block_map.py).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__block_map_c(void)
{
    if (PyType_Ready(&BlockMapType) < 0)
        return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL)
        return NULL;
    Py_INCREF(&BlockMapType);
    if (PyModule_AddObject(mod, "BlockMap", (PyObject *)&BlockMapType) < 0) {
        Py_DECREF(&BlockMapType);
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
