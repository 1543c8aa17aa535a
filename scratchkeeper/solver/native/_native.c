/*
 * _native.c - thin CPython binding of replica_select.h: buffers in, one call, buffers out.
 * Type conversion and error wording live in scratchkeeper/solver/__init__.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "replica_select.h"

static int _check_buffer(Py_buffer *view, Py_ssize_t items, Py_ssize_t item_size,
                         const char *name)
{
    if (view->itemsize != item_size || view->len != items * item_size) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items of %zd bytes", name, items,
                     item_size);
        return -1;
    }
    return 0;
}

/* solve(offsets, disks, cost, delay, load, algorithm, threads, assignment, counts)
 *   -> (status, error_index, response_time, probes)
 * offsets/disks: int32 buffers (CSR); cost/delay/load: float64 buffers;
 * assignment/counts: writable int32 buffers of bucket_count / disk_count items. */
static PyObject *native_solve(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer offsets, disks, cost, delay, load, assignment, counts;
    int algorithm, threads;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*iiw*w*", &offsets, &disks, &cost, &delay, &load,
                          &algorithm, &threads, &assignment, &counts))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t bucket_count = offsets.len / 4 - 1;
    Py_ssize_t disk_count = cost.len / 8;
    if (bucket_count < 0 || bucket_count > INT32_MAX || disk_count > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "offsets must hold bucket_count + 1 items");
        goto done;
    }
    if (_check_buffer(&offsets, bucket_count + 1, 4, "offsets") ||
        _check_buffer(&disks, disks.len / 4, 4, "disks") ||
        _check_buffer(&cost, disk_count, 8, "cost") ||
        _check_buffer(&delay, disk_count, 8, "delay") ||
        _check_buffer(&load, disk_count, 8, "load") ||
        _check_buffer(&assignment, bucket_count, 4, "assignment") ||
        _check_buffer(&counts, disk_count, 4, "counts"))
        goto done;
    const int32_t *offset_items = offsets.buf;
    if (offset_items[bucket_count] < 0 || offset_items[bucket_count] > disks.len / 4) {
        PyErr_SetString(PyExc_ValueError, "offsets point past the end of disks");
        goto done;
    }
    for (Py_ssize_t b = 0; b < bucket_count; b++)
        if (offset_items[b] < 0 || offset_items[b] > offset_items[bucket_count]) {
            PyErr_Format(PyExc_ValueError, "bucket %zd: offset %d is outside the disk ids", b,
                         (int)offset_items[b]);
            goto done;
        }
    sk_request request = {(int32_t)bucket_count, (int32_t)disk_count, offsets.buf, disks.buf,
                          cost.buf, delay.buf, load.buf};
    sk_selection selection = {0.0, assignment.buf, counts.buf, 0, -1};
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = sk_select_replicas(&request, algorithm, threads, &selection);
    Py_END_ALLOW_THREADS
    if (status == SK_E_NOMEM) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_BuildValue("iidL", status, (int)selection.error_index, selection.response_time,
                           (long long)selection.probes);
done:
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&disks);
    PyBuffer_Release(&cost);
    PyBuffer_Release(&delay);
    PyBuffer_Release(&load);
    PyBuffer_Release(&assignment);
    PyBuffer_Release(&counts);
    return result;
}

static PyObject *native_status_text(PyObject *self, PyObject *args)
{
    (void)self;
    int status;
    if (!PyArg_ParseTuple(args, "i", &status))
        return NULL;
    return PyUnicode_FromString(sk_status_text(status));
}

static PyMethodDef native_methods[] = {
    {"solve", native_solve, METH_VARARGS, "Solve one request given in CSR buffers."},
    {"status_text", native_status_text, METH_VARARGS, "Text of a solver status code."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_native", "Binding of the replica-selection core (replica_select.h).",
    -1, native_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
    PyObject *module = PyModule_Create(&native_module);
    if (!module)
        return NULL;
    if (PyModule_AddIntConstant(module, "BLACKBOX", SK_ALG_BLACKBOX) ||
        PyModule_AddIntConstant(module, "INTEGRATED", SK_ALG_INTEGRATED) ||
        PyModule_AddIntConstant(module, "PARALLEL", SK_ALG_PARALLEL) ||
        PyModule_AddIntConstant(module, "SLOTSEARCH", SK_ALG_SLOTSEARCH) ||
        PyModule_AddIntConstant(module, "OK", SK_OK) ||
        PyModule_AddIntConstant(module, "E_OFFSETS", SK_E_OFFSETS) ||
        PyModule_AddIntConstant(module, "E_EMPTY_BUCKET", SK_E_EMPTY_BUCKET) ||
        PyModule_AddIntConstant(module, "E_DISK_RANGE", SK_E_DISK_RANGE) ||
        PyModule_AddIntConstant(module, "E_COST", SK_E_COST) ||
        PyModule_AddIntConstant(module, "E_DELAY", SK_E_DELAY) ||
        PyModule_AddIntConstant(module, "E_LOAD", SK_E_LOAD) ||
        PyModule_AddIntConstant(module, "E_RANGE", SK_E_RANGE) ||
        PyModule_AddIntConstant(module, "E_SIZE", SK_E_SIZE)) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
