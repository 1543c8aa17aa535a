/* scratchkeeper.mount._fuse: the CPython binding of the scratch mount (skfs.c).
 *
 * run(...) mounts and serves with the GIL released until the file system is unmounted or the
 * process gets SIGINT, SIGTERM or SIGHUP. The `recover` callable is called from request
 * threads (taking the GIL) when a read needs a stripe no mirror holds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
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

static int call_place(void *ctx, const char *first_id, int stripe_count, const char *pool,
                      unsigned *osts, unsigned max)
{
    PyGILState_STATE state = PyGILState_Ensure();
    int n = -1;
    PyObject *result = PyObject_CallFunction((PyObject *)ctx, "siz", first_id, stripe_count,
                                             pool);
    PyObject *seq = result && result != Py_None ?
                    PySequence_Fast(result, "place must return a sequence of OSTs") : NULL;
    if (seq) {
        Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
        if (count > 0 && (size_t)count <= max) {
            n = (int)count;
            for (Py_ssize_t i = 0; i < count; i++) {
                long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
                if (v < 0 || v > 65535) {
                    n = -1;
                    break;
                }
                osts[i] = (unsigned)v;
            }
        }
        Py_DECREF(seq);
    }
    if (PyErr_Occurred())
        PyErr_WriteUnraisable((PyObject *)ctx);  /* the mount places the file itself */
    Py_XDECREF(result);
    PyGILState_Release(state);
    return n;
}

/* qos: None or (mode, copies, accesses, interval, epsilon, batch, retrieval, (P_1, ...),
 * (uid, ...)); retrieval 0 online, 1 interval. 0, or -1 with an exception set. */
static int parse_qos(PyObject *qos, struct skfs_config *cfg)
{
    PyObject *prob, *users;
    if (!PyArg_ParseTuple(qos, "iIIdddiOO:qos", &cfg->qos_mode, &cfg->qos_copies,
                          &cfg->qos_accesses, &cfg->qos_interval, &cfg->qos_epsilon,
                          &cfg->qos_batch, &cfg->qos_retrieval, &prob, &users))
        return -1;
    if (cfg->qos_retrieval != QOS_RETRIEVAL_ONLINE &&
        cfg->qos_retrieval != QOS_RETRIEVAL_INTERVAL) {
        PyErr_SetString(PyExc_ValueError, "qos retrieval must be 0 (online) or 1 (interval)");
        return -1;
    }
    if (!(cfg->qos_batch >= 0 && cfg->qos_batch < 1)) {
        PyErr_SetString(PyExc_ValueError, "qos batch must be in [0, 1) seconds");
        return -1;
    }
    PyObject *p = PySequence_Fast(prob, "qos probabilities must be a sequence");
    PyObject *u = p ? PySequence_Fast(users, "qos users must be a sequence") : NULL;
    if (!u) {
        Py_XDECREF(p);
        return -1;
    }
    Py_ssize_t np = PySequence_Fast_GET_SIZE(p), nu = PySequence_Fast_GET_SIZE(u);
    cfg->qos_prob = np ? calloc((size_t)np, sizeof *cfg->qos_prob) : NULL;
    cfg->qos_users = nu ? calloc((size_t)nu, sizeof *cfg->qos_users) : NULL;
    int rc = 0;
    if ((np && !cfg->qos_prob) || (nu && !cfg->qos_users)) {
        PyErr_NoMemory();
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == 0 && i < np; i++) {
        double v = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(p, i));
        if (PyErr_Occurred() || !(v >= 0 && v <= 1)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "qos probabilities must be in [0, 1]");
            rc = -1;
        }
        if (rc == 0)
            cfg->qos_prob[i] = v;
    }
    for (Py_ssize_t i = 0; rc == 0 && i < nu; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(u, i));
        if (PyErr_Occurred() || v < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "qos users must be uids");
            rc = -1;
        }
        if (rc == 0)
            cfg->qos_users[i] = (uid_t)v;
    }
    cfg->qos_nprob = (unsigned)np;
    cfg->qos_nusers = (unsigned)nu;
    if (rc == 0 && (cfg->qos_mode < 0 || cfg->qos_mode > 2)) {
        PyErr_SetString(PyExc_ValueError, "qos mode must be 0, 1 or 2");
        rc = -1;
    }
    Py_DECREF(p);
    Py_DECREF(u);
    return rc;
}

static void free_qos(struct skfs_config *cfg)
{
    free(cfg->qos_prob);
    free(cfg->qos_users);
    cfg->qos_prob = NULL;
    cfg->qos_users = NULL;
}

static void free_pools(struct skfs_config *cfg)
{
    for (unsigned i = 0; i < cfg->npools; i++)
        free(cfg->pools[i].osts);
    free(cfg->pools);
    cfg->pools = NULL;
    cfg->npools = 0;
}

static int ascending(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return x < y ? -1 : x > y;
}

/* pools: a sequence of (name, sequence of OST indexes below ost_count). 0, or -1 with an
 * exception set. */
static int parse_pools(PyObject *pools, struct skfs_config *cfg)
{
    PyObject *seq = PySequence_Fast(pools, "pools must be a sequence of (name, OSTs)");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > 0 && !(cfg->pools = calloc((size_t)n, sizeof *cfg->pools))) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i), *osts;
        const char *name;
        struct skfs_pool *pool = &cfg->pools[cfg->npools];
        if (!PyArg_ParseTuple(item, "sO:pool", &name, &osts))
            goto fail;
        if (strlen(name) == 0 || strlen(name) >= sizeof pool->name) {
            PyErr_Format(PyExc_ValueError, "pool name %R: 1 to 127 characters", item);
            goto fail;
        }
        PyObject *members = PySequence_Fast(osts, "a pool's OSTs must be a sequence");
        if (!members)
            goto fail;
        Py_ssize_t m = PySequence_Fast_GET_SIZE(members);
        strcpy(pool->name, name);
        pool->osts = malloc((size_t)(m ? m : 1) * sizeof *pool->osts);
        cfg->npools++;
        if (!pool->osts) {
            Py_DECREF(members);
            PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t j = 0; j < m; j++) {
            unsigned long v = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(members, j));
            if (PyErr_Occurred() || v >= cfg->ost_count) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_ValueError, "pool %s: OST %lu beyond ost_count", name, v);
                Py_DECREF(members);
                goto fail;
            }
            pool->osts[pool->count++] = (unsigned)v;
        }
        Py_DECREF(members);
        qsort(pool->osts, pool->count, sizeof *pool->osts, ascending);
    }
    Py_DECREF(seq);
    return 0;
fail:
    Py_DECREF(seq);
    free_pools(cfg);
    return -1;
}

static PyObject *fuse_run(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *keywords[] = {"mountpoint", "mdt", "store_root", "scratch_root", "ost_count",
                               "stripe_count", "stripe_size", "threads", "attr_timeout",
                               "max_request", "recovery_timeout", "debug", "recover",
                               "dispatch_min_bytes", "pools", "read_log_interval", "place",
                               "qos", "model", "log_max_bytes", NULL};
    struct skfs_config cfg = {0};
    unsigned long long stripe_size, dispatch_min_bytes = 0, log_max_bytes = 64ULL << 20;
    int debug = 0;
    PyObject *recover = Py_None, *pools = NULL, *place = Py_None, *qos = Py_None;
    PyObject *model = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "ssssIiKIdIdp|OKOdOOOK:run", keywords,
                                     &cfg.mountpoint, &cfg.mdt, &cfg.store_root,
                                     &cfg.scratch_root, &cfg.ost_count, &cfg.stripe_count,
                                     &stripe_size, &cfg.threads, &cfg.attr_timeout,
                                     &cfg.max_request, &cfg.recovery_timeout, &debug, &recover,
                                     &dispatch_min_bytes, &pools, &cfg.read_log_interval, &place,
                                     &qos, &model, &log_max_bytes))
        return NULL;
    if (model != Py_None) {
        if (!PyArg_ParseTuple(model, "dddddd:model", &cfg.model[0], &cfg.model[1],
                              &cfg.model[2], &cfg.model[3], &cfg.model[4], &cfg.model[5]))
            return NULL;
        for (int i = 0; i < 6; i++)
            if (!(cfg.model[i] >= 0) || !isfinite(cfg.model[i])) {
                PyErr_SetString(PyExc_ValueError, "model constants must be finite, >= 0");
                return NULL;
            }
        cfg.model_on = true;
    }
    if ((recover != Py_None && !PyCallable_Check(recover)) ||
        (place != Py_None && !PyCallable_Check(place))) {
        PyErr_SetString(PyExc_TypeError, "recover and place must be callable or None");
        return NULL;
    }
    if (cfg.stripe_count == 0 || stripe_size == 0 || stripe_size % 65536 || cfg.threads == 0 ||
        cfg.ost_count == 0 || cfg.recovery_timeout <= 0 || cfg.attr_timeout < 0 ||
        !(cfg.read_log_interval >= 0)) {
        PyErr_SetString(PyExc_ValueError, "bad mount configuration");
        return NULL;
    }
    if (pools && parse_pools(pools, &cfg) < 0)
        return NULL;
    if (qos != Py_None && parse_qos(qos, &cfg) < 0) {
        free_qos(&cfg);
        free_pools(&cfg);
        return NULL;
    }
    cfg.stripe_size = stripe_size;
    cfg.dispatch_min_bytes = dispatch_min_bytes;
    cfg.log_max_bytes = log_max_bytes;
    cfg.debug = debug != 0;
    if (recover != Py_None) {
        cfg.recover = call_recover;
        cfg.recover_ctx = recover;
    }
    if (place != Py_None) {
        cfg.place = call_place;
        cfg.place_ctx = place;
    }
    Py_INCREF(recover);
    Py_INCREF(place);
    char err[512] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = skfs_run(&cfg, err, sizeof err);
    Py_END_ALLOW_THREADS
    Py_DECREF(recover);
    Py_DECREF(place);
    free_pools(&cfg);
    free_qos(&cfg);
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
     "dispatch_min_bytes=0, pools=None, read_log_interval=0, place=None, qos=None, "
     "model=None, log_max_bytes=64 MiB): mount "
     "and "
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
