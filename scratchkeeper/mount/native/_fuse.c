/* scratchkeeper.mount._fuse: the CPython binding of the scratch mount (skfs.c).
 *
 * run(...) mounts and serves with the GIL released until the file system is unmounted or the
 * process gets SIGINT, SIGTERM or SIGHUP. The `recover` callable is called from request
 * threads (taking the GIL) when a read needs a stripe no mirror holds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>

#include "skfs.h"

static void call_recover(void *ctx, const char *path, unsigned ost, double timeout, bool report)
{
    PyGILState_STATE state = PyGILState_Ensure();
    PyObject *result = PyObject_CallFunction((PyObject *)ctx, "sIdO", path, ost, timeout,
                                             report ? Py_True : Py_False);
    if (!result)
        PyErr_WriteUnraisable((PyObject *)ctx);  /* the read goes on waiting, then EIO */
    Py_XDECREF(result);
    PyGILState_Release(state);
}

static PyObject *fuse_run(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *keywords[] = {"mountpoint", "mdt", "store_root", "scratch_root", "ost_count",
                               "stripe_count", "stripe_size", "threads", "attr_timeout",
                               "max_request", "recovery_timeout", "debug", "recover",
                               "dispatch_min_bytes", NULL};
    struct skfs_config cfg = {0};
    unsigned long long stripe_size, dispatch_min_bytes = 0;
    int debug = 0;
    PyObject *recover = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "ssssIiKIdIdp|OK:run", keywords,
                                     &cfg.mountpoint, &cfg.mdt, &cfg.store_root,
                                     &cfg.scratch_root, &cfg.ost_count, &cfg.stripe_count,
                                     &stripe_size, &cfg.threads, &cfg.attr_timeout,
                                     &cfg.max_request, &cfg.recovery_timeout, &debug, &recover,
                                     &dispatch_min_bytes))
        return NULL;
    if (recover != Py_None && !PyCallable_Check(recover)) {
        PyErr_SetString(PyExc_TypeError, "recover must be callable or None");
        return NULL;
    }
    if (cfg.stripe_count == 0 || stripe_size == 0 || stripe_size % 65536 || cfg.threads == 0 ||
        cfg.ost_count == 0 || cfg.recovery_timeout <= 0 || cfg.attr_timeout < 0) {
        PyErr_SetString(PyExc_ValueError, "bad mount configuration");
        return NULL;
    }
    cfg.stripe_size = stripe_size;
    cfg.dispatch_min_bytes = dispatch_min_bytes;
    cfg.debug = debug != 0;
    if (recover != Py_None) {
        cfg.recover = call_recover;
        cfg.recover_ctx = recover;
    }
    Py_INCREF(recover);
    char err[512] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = skfs_run(&cfg, err, sizeof err);
    Py_END_ALLOW_THREADS
    Py_DECREF(recover);
    if (rc < 0) {
        PyObject *exc = Py_BuildValue("(is)", -rc, err);
        if (exc) {
            PyErr_SetObject(PyExc_OSError, exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"run", (PyCFunction)(void (*)(void))fuse_run, METH_VARARGS | METH_KEYWORDS,
     "run(mountpoint, mdt, store_root, scratch_root, ost_count, stripe_count, stripe_size, "
     "threads, attr_timeout, max_request, recovery_timeout, debug, recover=None, "
     "dispatch_min_bytes=0): mount and "
     "serve until unmounted or signalled."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "scratchkeeper.mount._fuse",
    "The scratch mount's libfuse3 low-level file system (docs/mount.rst).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fuse(void)
{
    return PyModule_Create(&module);
}
