/* The allocator's mutex in C: the compiled build's FastLock.
 *
 * accelrt/memory/_lock.py holds the same type in Python, which the pure build runs and which
 * documents it: a non-reentrant mutex whose uncontended acquire and release are single cheap
 * calls. The Python one holds a token in a queue.SimpleQueue (get acquires, put releases);
 * their argument parsing and queue work were about a third of a compiled cached malloc + free.
 *
 * This one is a flag that the GIL guards (every method runs holding it, and the uncontended
 * ones never let it go), so an uncontended acquire or release is a test and a store: no
 * atomic instruction, no system call, no clock. (A PyThread lock per acquire measured slower
 * than the queue on the allocator's loop, for all its fewer instructions: its semaphore's
 * atomics and the clock read of a timed acquire.) A contended acquire counts itself in
 * `waiters` and sleeps on `wake`, a PyThread lock held locked, with the GIL released; a
 * release with waiters posts `wake` once (`posted`), and a woken waiter takes the lock if it
 * is free, else sleeps again: the lock is never free with waiters and no post outstanding or
 * waiter awake. An interrupted sleep runs the signal handlers (as threading.Lock.acquire
 * does), which may raise out of acquire. tests/memory/test_memory_lock.py runs both types.
 *
 * A contended acquire first calls the contention hook (set_contention_hook, the Python
 * type's _hook: accelrt._stream_callback.contended) with the lock: it may raise (a host
 * function whose holder waits for streams, `stream_waits`), and a true answer makes the
 * thread sleep in slices of POLL_US, calling it again after each (the holder may start
 * waiting for streams later); a slice that ends with the lock free takes it.
 *
 *     FastLock()
 *     acquire()            block until free, then take it
 *     acquire_nowait()     take it if free, else raise queue.Empty
 *     try_acquire() -> bool
 *     release(), put(x)    give it back (RuntimeError if not held)
 *     locked() -> bool
 *     stream_waits         the holder's waits for streams (an int attribute)
 *     with lock: ...
 *     set_contention_hook(hook or None)   (a module function)
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <stddef.h>
#include <structmember.h>

/* microseconds between two calls of the contention hook by a thread it told to ask again
   (the Python type's POLL) */
#define POLL_US 20000

typedef struct {
    PyObject_HEAD
    char locked;              /* held (the GIL guards the three fields below) */
    char posted;              /* `wake` released once for the waiters, not yet taken */
    Py_ssize_t waiters;       /* threads sleeping (or about to) in acquire */
    Py_ssize_t stream_waits;  /* the holder's waits for streams (set by it, read by the hook) */
    PyThread_type_lock wake;  /* held locked; released to wake one waiter */
    PyObject *weakreflist;
} FastLockObject;

static PyTypeObject FastLockType;
static PyObject *QueueEmpty;   /* queue.Empty */
static PyObject *Hook;         /* the contention hook, or NULL */

static PyObject *FastLock_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) || (kwds != NULL && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "FastLock() takes no arguments");
        return NULL;
    }
    FastLockObject *self = (FastLockObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->locked = 0;
    self->posted = 0;
    self->waiters = 0;
    self->stream_waits = 0;
    self->weakreflist = NULL;
    self->wake = PyThread_allocate_lock();
    if (self->wake == NULL) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_MemoryError, "FastLock: cannot allocate a lock");
        return NULL;
    }
    PyThread_acquire_lock(self->wake, WAIT_LOCK);   /* (free: at once) */
    return (PyObject *)self;
}

static void FastLock_dealloc(FastLockObject *self)
{
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    if (self->wake != NULL) {
        /* (nobody waits: a waiter holds a reference) */
        if (!self->posted)
            PyThread_release_lock(self->wake);
        PyThread_free_lock(self->wake);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Call the contention hook: -1 if it raised, else whether to ask it again while waiting. */
static int FastLock_ask(FastLockObject *self)
{
    PyObject *hook = Hook;
    if (hook == NULL)
        return 0;
    Py_INCREF(hook);
    PyObject *r = PyObject_CallOneArg(hook, (PyObject *)self);
    Py_DECREF(hook);
    if (r == NULL)
        return -1;
    int again = PyObject_IsTrue(r);
    Py_DECREF(r);
    return again;
}

static PyObject *FastLock_acquire(FastLockObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->locked) {
        self->locked = 1;
        Py_RETURN_NONE;
    }
    self->waiters++;
    int poll = FastLock_ask(self);   /* (may let the GIL go) */
    if (poll < 0) {
        self->waiters--;
        return NULL;
    }
    for (;;) {
        PyLockStatus r;
        if (!self->locked) {   /* freed while the hook ran, or at the end of a slice */
            self->locked = 1;
            self->waiters--;   /* (a post left outstanding wakes a waiter, who sleeps again) */
            Py_RETURN_NONE;
        }
        Py_BEGIN_ALLOW_THREADS
        r = PyThread_acquire_lock_timed(self->wake, poll ? POLL_US : -1, 1);
        Py_END_ALLOW_THREADS
        if (r == PY_LOCK_FAILURE && poll) {   /* a slice ended: ask the hook again */
            poll = FastLock_ask(self);
            if (poll < 0) {
                self->waiters--;
                return NULL;
            }
            continue;
        }
        if (r == PY_LOCK_ACQUIRED) {
            self->posted = 0;
            if (!self->locked) {
                self->locked = 1;
                self->waiters--;   /* (the next release posts for the others) */
                Py_RETURN_NONE;
            }
            continue;   /* another thread took it first: sleep until its release */
        }
        if (r == PY_LOCK_INTR) {
            /* a signal: run its handlers (which may raise), then sleep again */
            if (Py_MakePendingCalls() < 0) {
                self->waiters--;
                return NULL;
            }
            continue;
        }
        self->waiters--;
        PyErr_SetString(PyExc_RuntimeError, "FastLock: cannot wait for the lock");
        return NULL;
    }
}

static PyObject *FastLock_acquire_nowait(FastLockObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->locked) {
        PyErr_SetNone(QueueEmpty);
        return NULL;
    }
    self->locked = 1;
    Py_RETURN_NONE;
}

static PyObject *FastLock_try_acquire(FastLockObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->locked)
        Py_RETURN_FALSE;
    self->locked = 1;
    Py_RETURN_TRUE;
}

static PyObject *FastLock_release(FastLockObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->locked) {
        PyErr_SetString(PyExc_RuntimeError, "FastLock: release of a lock that is not held");
        return NULL;
    }
    self->locked = 0;
    if (self->waiters && !self->posted) {
        self->posted = 1;
        PyThread_release_lock(self->wake);
    }
    Py_RETURN_NONE;
}

static PyObject *FastLock_put(FastLockObject *self, PyObject *Py_UNUSED(item))
{
    return FastLock_release(self, NULL);
}

static PyObject *FastLock_exit(FastLockObject *self, PyObject *const *Py_UNUSED(args),
                               Py_ssize_t Py_UNUSED(nargs))
{
    return FastLock_release(self, NULL);
}

static PyObject *FastLock_locked(FastLockObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(self->locked);
}

static PyObject *FastLock_repr(FastLockObject *self)
{
    return PyUnicode_FromString(self->locked ? "<FastLock locked>" : "<FastLock unlocked>");
}

static PyMemberDef FastLock_members[] = {
    {"stream_waits", T_PYSSIZET, offsetof(FastLockObject, stream_waits), 0,
     "How many waits for streams the holder is in (accelrt.memory._lock.StreamWait)."},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef FastLock_methods[] = {
    {"acquire", (PyCFunction)FastLock_acquire, METH_NOARGS,
     "Block until the lock is free, then take it."},
    {"acquire_nowait", (PyCFunction)FastLock_acquire_nowait, METH_NOARGS,
     "Take the lock if it is free, else raise queue.Empty."},
    {"try_acquire", (PyCFunction)FastLock_try_acquire, METH_NOARGS,
     "Take the lock if it is free: True, or False if some thread holds it."},
    {"release", (PyCFunction)FastLock_release, METH_NOARGS,
     "Give the lock back (RuntimeError if it is not held)."},
    {"put", (PyCFunction)FastLock_put, METH_O,
     "put(x): give the lock back (the Python FastLock's queue put)."},
    {"locked", (PyCFunction)FastLock_locked, METH_NOARGS,
     "True while some thread holds the lock."},
    {"__enter__", (PyCFunction)FastLock_acquire, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))FastLock_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FastLockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "accelrt.memory._lock_c.FastLock",
    .tp_basicsize = sizeof(FastLockObject),
    .tp_dealloc = (destructor)FastLock_dealloc,
    .tp_repr = (reprfunc)FastLock_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A non-reentrant mutex (accelrt.memory._lock.FastLock, in C).",
    .tp_weaklistoffset = offsetof(FastLockObject, weakreflist),
    .tp_methods = FastLock_methods,
    .tp_members = FastLock_members,
    .tp_new = FastLock_new,
};

static PyObject *set_contention_hook(PyObject *Py_UNUSED(module), PyObject *hook)
{
    if (hook != Py_None && !PyCallable_Check(hook)) {
        PyErr_SetString(PyExc_TypeError, "set_contention_hook: the hook must be callable or None");
        return NULL;
    }
    PyObject *old = Hook;
    Hook = hook == Py_None ? NULL : Py_NewRef(hook);
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"set_contention_hook", set_contention_hook, METH_O,
     "set_contention_hook(hook): call hook(lock) on a contended acquire (None: never)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "accelrt.memory._lock_c",
    .m_doc = "The allocator's mutex in C (the compiled build's accelrt.memory._lock.FastLock).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__lock_c(void)
{
    PyObject *queue = PyImport_ImportModule("queue");
    if (queue == NULL)
        return NULL;
    QueueEmpty = PyObject_GetAttrString(queue, "Empty");
    Py_DECREF(queue);
    if (QueueEmpty == NULL)
        return NULL;
    if (PyType_Ready(&FastLockType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&FastLockType);
    if (PyModule_AddObject(m, "FastLock", (PyObject *)&FastLockType) < 0) {
        Py_DECREF(&FastLockType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
