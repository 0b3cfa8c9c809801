/* The memory owner of an accelrt.Array in C: the compiled build's _memory_owner._Memory.
 *
 * accelrt/_memory_owner.py holds the same class in Python, which the pure build runs and which
 * documents it: five fields (ptr, nbytes, alloc, base, host), no __dict__, weakly
 * referenceable, and a finalizer that gives the block back to its allocator with
 * `alloc.free(ptr, True)` (the non-blocking free: the garbage collector may run it inside the
 * allocator's own critical section) once, unless `alloc` is None or `ptr` is 0, and never at
 * interpreter shutdown. Its creation and its __del__ were about 8 of the 40 calls of
 * `acc.empty(256)` + free in the compiled build (docs/memory.md, "The memory owner in C").
 *
 * What the Python class gets from CPython, this type does itself:
 *  - the fields are object members (T_OBJECT_EX, as __slots__ are): any value, deletable, an
 *    AttributeError when unset;
 *  - the finalizer is a PEP 442 tp_finalize that sets aside an exception being raised and
 *    restores it after (as slot_tp_finalize does for a Python __del__: an array dropped while
 *    an exception propagates must not run `free` with it set), and reports an exception of
 *    `free` as an unraisable one, with the type's __del__ as the object (as CPython reports one
 *    raised by a Python __del__);
 *  - it is GC-tracked (it holds `alloc` and `base`, which may lead back to it); a cycle's
 *    owner is finalized (its block freed) before the collector clears it;
 *  - weak references are cleared after the finalizer ran (a callback sees the block freed);
 *  - it is a heap type named `accelrt._memory_owner._Memory` with `_Memory` as its tp_name
 *    (messages say '_Memory' object, as for the Python class), and may be subclassed.
 *
 * Calling the type with three to five positional arguments (what accelrt does) takes a
 * vectorcall path that skips type_call's tp_new + tp_init; keywords go through tp_init.
 * Copying or pickling an owner is refused (a copy would free the block a second time).
 * tests/runtime/test_memory_owner_s41.py runs both types.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <string.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *ptr;      /* the block's address (an int), 0 for no memory */
    PyObject *nbytes;   /* its size in bytes (an int) */
    PyObject *alloc;    /* the caching allocator it came from, or None (borrowed memory) */
    PyObject *base;     /* the object lending borrowed memory, kept alive, or None */
    PyObject *host;     /* True for plain host memory (a zero-copy numpy import) */
    PyObject *weakreflist;
} MemoryObject;

static PyTypeObject *MemoryType;   /* the type (a heap type, made once per process) */
static PyObject *DelDescr;         /* MemoryType.__del__: the unraisable report's object */
static PyObject *FreeName;         /* "free" */

/* sys.is_finalizing(), in C: the private function until 3.13 made it public */
#if PY_VERSION_HEX >= 0x030D0000
#define OWNER_FINALIZING() Py_IsFinalizing()
#else
#define OWNER_FINALIZING() _Py_IsFinalizing()
#endif

static void Memory_finalize(PyObject *op)
{
    MemoryObject *self = (MemoryObject *)op;
    PyObject *alloc = self->alloc;
    if (alloc == NULL || alloc == Py_None || self->ptr == NULL)
        return;
    /* set aside an exception being raised (the array may be dropped while it propagates) */
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *saved = PyErr_GetRaisedException();
#else
    PyObject *saved_type, *saved_value, *saved_tb;
    PyErr_Fetch(&saved_type, &saved_value, &saved_tb);
#endif
    PyObject *ptr = Py_NewRef(self->ptr);
    int nonzero = PyObject_IsTrue(ptr);   /* `not self.ptr` */
    if (nonzero > 0) {
        self->alloc = Py_NewRef(Py_None);   /* once: alloc is None from here on */
        /* At interpreter shutdown the allocator and backend may already be torn down; the
           process is releasing everything anyway. */
        if (!OWNER_FINALIZING()) {
            PyObject *args[3] = {alloc, ptr, Py_True};
            PyObject *r = PyObject_VectorcallMethod(
                FreeName, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            if (r == NULL)
                nonzero = -1;
            Py_XDECREF(r);
        }
        Py_DECREF(alloc);   /* the field's reference */
    }
    if (nonzero < 0) {
        /* as CPython reports an exception of a Python __del__ (slot_tp_finalize) */
#if PY_VERSION_HEX >= 0x030E0000
        PyErr_FormatUnraisable("Exception ignored while calling deallocator %R", DelDescr);
#else
        PyErr_WriteUnraisable(DelDescr);
#endif
    }
    Py_DECREF(ptr);
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(saved);
#else
    PyErr_Restore(saved_type, saved_value, saved_tb);
#endif
}

static int Memory_traverse(MemoryObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->ptr);
    Py_VISIT(self->nbytes);
    Py_VISIT(self->alloc);
    Py_VISIT(self->base);
    Py_VISIT(self->host);
    return 0;
}

static int Memory_clear(MemoryObject *self)
{
    Py_CLEAR(self->ptr);
    Py_CLEAR(self->nbytes);
    Py_CLEAR(self->alloc);
    Py_CLEAR(self->base);
    Py_CLEAR(self->host);
    return 0;
}

static void Memory_dealloc(MemoryObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    /* the finalizer first, still tracked (as subtype_dealloc runs a Python __del__) */
    if (PyObject_CallFinalizerFromDealloc((PyObject *)self) < 0)
        return;   /* resurrected */
    PyObject_GC_UnTrack(self);
    Py_TRASHCAN_BEGIN(self, Memory_dealloc)
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    Memory_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
    Py_TRASHCAN_END
}

/* a new owner of `ptr` (borrowed references; base and host may be NULL for their defaults) */
static PyObject *Memory_make(PyTypeObject *type, PyObject *ptr, PyObject *nbytes,
                             PyObject *alloc, PyObject *base, PyObject *host)
{
    MemoryObject *self = (MemoryObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->ptr = Py_NewRef(ptr);
    self->nbytes = Py_NewRef(nbytes);
    self->alloc = Py_NewRef(alloc);
    self->base = Py_NewRef(base != NULL ? base : Py_None);
    self->host = Py_NewRef(host != NULL ? host : Py_False);
    return (PyObject *)self;
}

static PyObject *Memory_new(PyTypeObject *type, PyObject *Py_UNUSED(args),
                            PyObject *Py_UNUSED(kwds))
{
    /* the fields stay unset until __init__ (object.__new__ of the Python class) */
    return type->tp_alloc(type, 0);
}

static const char *const FieldNames[5] = {"ptr", "nbytes", "alloc", "base", "host"};

/* Bind __init__'s arguments (`n` positional in `pos`, then keywords: the names `kwnames` with
   values `kwvalues`, or the dict `kwds`) to the five fields in `out` (borrowed; the defaults of
   base and host filled in), with the messages of the Python class's __init__. */
static int Memory_bind(PyObject *const *pos, Py_ssize_t n, PyObject *kwnames,
                       PyObject *const *kwvalues, PyObject *kwds, PyObject *out[5])
{
    if (n > 5) {
        PyErr_Format(PyExc_TypeError, "_Memory.__init__() takes from 4 to 6 positional "
                     "arguments but %zd were given", n + 1);
        return -1;
    }
    for (Py_ssize_t i = 0; i < 5; i++)
        out[i] = i < n ? pos[i] : NULL;
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    Py_ssize_t at = 0;
    PyObject *key, *value;
    for (Py_ssize_t k = 0;; k++) {
        if (kwds != NULL) {
            if (!PyDict_Next(kwds, &at, &key, &value))
                break;
        }
        else if (k < nkw) {
            key = PyTuple_GET_ITEM(kwnames, k);
            value = kwvalues[k];
        }
        else
            break;
        if (!PyUnicode_Check(key)) {
            PyErr_SetString(PyExc_TypeError, "_Memory.__init__() keywords must be strings");
            return -1;
        }
        Py_ssize_t i = 0;
        while (i < 5 && PyUnicode_CompareWithASCIIString(key, FieldNames[i]) != 0)
            i++;
        if (i == 5) {
            PyErr_Format(PyExc_TypeError, "_Memory.__init__() got an unexpected keyword "
                         "argument '%U'", key);
            return -1;
        }
        if (out[i] != NULL) {
            PyErr_Format(PyExc_TypeError, "_Memory.__init__() got multiple values for "
                         "argument '%s'", FieldNames[i]);
            return -1;
        }
        out[i] = value;
    }
    int missing = (out[0] == NULL) + (out[1] == NULL) + (out[2] == NULL);
    if (missing) {
        const char *m[3];
        int k = 0;
        for (int i = 0; i < 3; i++)
            if (out[i] == NULL)
                m[k++] = FieldNames[i];
        if (missing == 1)
            PyErr_Format(PyExc_TypeError, "_Memory.__init__() missing 1 required positional "
                         "argument: '%s'", m[0]);
        else if (missing == 2)
            PyErr_Format(PyExc_TypeError, "_Memory.__init__() missing 2 required positional "
                         "arguments: '%s' and '%s'", m[0], m[1]);
        else
            PyErr_Format(PyExc_TypeError, "_Memory.__init__() missing 3 required positional "
                         "arguments: '%s', '%s', and '%s'", m[0], m[1], m[2]);
        return -1;
    }
    if (out[3] == NULL)
        out[3] = Py_None;
    if (out[4] == NULL)
        out[4] = Py_False;
    return 0;
}

static void Memory_set(MemoryObject *self, PyObject *const in[5])
{
    Py_XSETREF(self->ptr, Py_NewRef(in[0]));
    Py_XSETREF(self->nbytes, Py_NewRef(in[1]));
    Py_XSETREF(self->alloc, Py_NewRef(in[2]));
    Py_XSETREF(self->base, Py_NewRef(in[3]));
    Py_XSETREF(self->host, Py_NewRef(in[4]));
}

static int Memory_init(MemoryObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *in[5];
    if (Memory_bind(((PyTupleObject *)args)->ob_item, PyTuple_GET_SIZE(args), NULL, NULL,
                    kwds != NULL && PyDict_GET_SIZE(kwds) ? kwds : NULL, in) < 0)
        return -1;
    Memory_set(self, in);
    return 0;
}

/* _Memory(ptr, nbytes, alloc[, base[, host]]): the factories' call, without type_call */
static PyObject *Memory_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames == NULL && n >= 3 && n <= 5)
        return Memory_make((PyTypeObject *)type, args[0], args[1], args[2],
                           n > 3 ? args[3] : NULL, n > 4 ? args[4] : NULL);
    PyObject *in[5];   /* keywords, or a wrong count */
    if (Memory_bind(args, n, kwnames, args + n, NULL, in) < 0)
        return NULL;
    return Memory_make((PyTypeObject *)type, in[0], in[1], in[2], in[3], in[4]);
}

static PyObject *Memory_reduce_ex(PyObject *self, PyObject *Py_UNUSED(protocol))
{
    PyErr_Format(PyExc_TypeError,
                 "cannot copy or pickle '%.200s' object: a memory owner frees its block when "
                 "it is collected, and a copy would free it twice; copy or pickle the "
                 "accelrt.Array instead (copy.deepcopy, pickle)", Py_TYPE(self)->tp_name);
    return NULL;
}

static PyMemberDef Memory_members[] = {
    {"ptr", T_OBJECT_EX, offsetof(MemoryObject, ptr), 0,
     "The block's address (0 for no memory)."},
    {"nbytes", T_OBJECT_EX, offsetof(MemoryObject, nbytes), 0, "The block's size in bytes."},
    {"alloc", T_OBJECT_EX, offsetof(MemoryObject, alloc), 0,
     "The caching allocator the block came from, or None for borrowed memory."},
    {"base", T_OBJECT_EX, offsetof(MemoryObject, base), 0,
     "The object lending borrowed memory (kept alive), or None."},
    {"host", T_OBJECT_EX, offsetof(MemoryObject, host), 0,
     "True when the memory is plain host memory."},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(MemoryObject, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef Memory_methods[] = {
    {"__reduce_ex__", Memory_reduce_ex, METH_O, NULL},
    {"__reduce__", (PyCFunction)Memory_reduce_ex, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Memory_slots[] = {
    {Py_tp_doc, "_Memory(ptr, nbytes, alloc, base=None, host=False)\n--\n\n"
                "Owns one block of memory of an array and returns it to the allocator when "
                "collected (accelrt._memory_owner._Memory, in C)."},
    {Py_tp_dealloc, (void *)Memory_dealloc},
    {Py_tp_finalize, (void *)Memory_finalize},
    {Py_tp_traverse, (void *)Memory_traverse},
    {Py_tp_clear, (void *)Memory_clear},
    {Py_tp_new, (void *)Memory_new},
    {Py_tp_init, (void *)Memory_init},
    {Py_tp_members, Memory_members},
    {Py_tp_methods, Memory_methods},
    {0, NULL},
};

static PyType_Spec Memory_spec = {
    .name = "accelrt._memory_owner._Memory",
    .basicsize = sizeof(MemoryObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = Memory_slots,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "accelrt._memory_owner_c",
    .m_doc = "The memory owner of an accelrt.Array in C (the compiled build's "
             "accelrt._memory_owner._Memory).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__memory_owner_c(void)
{
    if (MemoryType == NULL) {
        PyTypeObject *type = (PyTypeObject *)PyType_FromSpec(&Memory_spec);
        if (type == NULL)
            return NULL;
        /* the class's short name in messages ("'_Memory' object has no attribute ..."), as a
           Python class has; tp_name points into the type's own copy of the spec's name */
        const char *dot = strrchr(type->tp_name, '.');
        if (dot != NULL)
            type->tp_name = dot + 1;
        type->tp_vectorcall = Memory_vectorcall;   /* (never inherited by subclasses) */
        PyObject *del = PyObject_GetAttrString((PyObject *)type, "__del__");
        PyObject *name = PyUnicode_InternFromString("free");
        if (del == NULL || name == NULL) {
            Py_XDECREF(del);
            Py_XDECREF(name);
            Py_DECREF(type);
            return NULL;
        }
        MemoryType = type;
        DelDescr = del;
        FreeName = name;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "_Memory", (PyObject *)MemoryType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
