/*
 * _native.c - CPython binding of replica_select.h.
 *
 * The hot path of select_replicas() lives here: disk columns and buckets are read and checked
 * in one pass (py_input.c), decimal times are scaled to whole units, the core solves with the
 * GIL released.  Every input error is raised as InputError (a ValueError) with the one-line
 * text naming the bucket or disk; the Python layer turns it into SolverInputError.  DiskTable
 * and BucketsCSR use the same readers, so the prepared path and the list path cannot word an
 * error differently.
 */
#include "py_input.h"

#include <string.h>

static skpy_state *_state(PyObject *module)
{
    return (skpy_state *)PyModule_GetState(module);
}

/* ---------------------------------------------------------------- solving ---------- */

/* array(typecode) holding a copy of size bytes at data (zeros when data is NULL). */
static PyObject *_typed_array(skpy_state *state, const char *typecode, const void *data,
                              Py_ssize_t size)
{
    PyObject *bytes = PyBytes_FromStringAndSize(data, size);
    if (!bytes)
        return NULL;
    if (!data)
        memset(PyBytes_AS_STRING(bytes), 0, (size_t)size);
    PyObject *array = PyObject_CallFunction(state->array_type, "sO", typecode, bytes);
    Py_DECREF(bytes);
    return array;
}

/* Solve one CSR request; returns (response_time / divisor, assignment, counts, probes). */
static PyObject *_solve(skpy_state *state, const sk_request *request, Py_ssize_t disk_items,
                        int algorithm, int threads, double divisor)
{
    PyObject *assignment = _typed_array(state, "i", NULL, (Py_ssize_t)request->bucket_count * 4);
    PyObject *counts = assignment ? _typed_array(state, "i", NULL, (Py_ssize_t)request->disk_count * 4) : NULL;
    Py_buffer assignment_view, counts_view;
    if (!counts || PyObject_GetBuffer(assignment, &assignment_view, PyBUF_WRITABLE)) {
        Py_XDECREF(assignment);
        Py_XDECREF(counts);
        return NULL;
    }
    if (PyObject_GetBuffer(counts, &counts_view, PyBUF_WRITABLE)) {
        PyBuffer_Release(&assignment_view);
        Py_DECREF(assignment);
        Py_DECREF(counts);
        return NULL;
    }
    sk_selection selection = {0.0, assignment_view.buf, counts_view.buf, 0, -1};
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = sk_select_replicas(request, algorithm, threads, &selection);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&assignment_view);
    PyBuffer_Release(&counts_view);
    PyObject *result = NULL;
    if (status != SK_OK)
        skpy_status_error(state, status, selection.error_index, request->bucket_count,
                      request->offsets, request->disks, disk_items, request->disk_count);
    else
        result = Py_BuildValue("dOOL", divisor != 1.0 ? selection.response_time / divisor
                                                        : selection.response_time,
                               assignment, counts, (long long)selection.probes);
    Py_DECREF(assignment);
    Py_DECREF(counts);
    return result;
}

static int _check_options(skpy_state *state, int algorithm, int threads)
{
    if (algorithm < SK_ALG_BLACKBOX || algorithm > SK_ALG_SLOTSEARCH || threads < 1) {
        PyErr_SetString(state->input_error, "invalid algorithm or thread count");
        return -1;
    }
    return 0;
}

/* select(buckets, cost, delay, load, algorithm, threads)
 *   -> (response_time, assignment, counts, probes)
 * The whole of select_replicas() for list (or buffer) input. */
static PyObject *native_select(PyObject *self, PyObject *args)
{
    skpy_state *state = _state(self);
    PyObject *buckets_source, *cost, *delay, *load;
    int algorithm, threads;
    if (!PyArg_ParseTuple(args, "OOOOii", &buckets_source, &cost, &delay, &load, &algorithm,
                          &threads) || _check_options(state, algorithm, threads))
        return NULL;
    skpy_disk_columns columns;
    if (skpy_disk_columns_read(state, cost, delay, load, &columns))
        return NULL;
    skpy_buckets buckets;
    if (skpy_buckets_read(state, buckets_source, &buckets)) {
        skpy_disk_columns_free(&columns);
        return NULL;
    }
    Py_ssize_t n = columns.disk_count;
    int units = skpy_fits_in_units(&columns, buckets.bucket_count);
    const double *times = units ? columns.units : columns.raw;
    sk_request request = {buckets.bucket_count, (int32_t)n, buckets.offsets, buckets.disks,
                          times, times + n, times + 2 * n};
    PyObject *result = _solve(state, &request, buckets.disk_items, algorithm, threads,
                              units ? (double)columns.scale : 1.0);
    skpy_buckets_free(&buckets);
    skpy_disk_columns_free(&columns);
    return result;
}

/* disk_table(cost, delay, load) -> (raw cost, delay, load arrays, unit cost, delay, load
 * arrays, scale, largest unit base, largest unit cost); the unit arrays are the raw ones
 * when scale == 0. */
static PyObject *native_disk_table(PyObject *self, PyObject *args)
{
    skpy_state *state = _state(self);
    PyObject *cost, *delay, *load;
    if (!PyArg_ParseTuple(args, "OOO", &cost, &delay, &load))
        return NULL;
    skpy_disk_columns columns;
    if (skpy_disk_columns_read(state, cost, delay, load, &columns))
        return NULL;
    Py_ssize_t n = columns.disk_count;
    const double *units = columns.scale ? columns.units : columns.raw;
    PyObject *arrays[6] = {NULL};
    PyObject *result = NULL;
    for (int i = 0; i < 6; i++)
        if (!(arrays[i] = _typed_array(state, "d", (i < 3 ? columns.raw : units) + (i % 3) * n, n * 8)))
            goto done;
    result = Py_BuildValue("OOOOOOldd", arrays[0], arrays[1], arrays[2], arrays[3], arrays[4],
                           arrays[5], columns.scale, columns.largest_base,
                           columns.largest_cost);
done:
    for (int i = 0; i < 6; i++)
        Py_XDECREF(arrays[i]);
    skpy_disk_columns_free(&columns);
    return result;
}

/* flatten(buckets) -> (offsets, disks) as array('i'): BucketsCSR.from_lists. */
static PyObject *native_flatten(PyObject *self, PyObject *source)
{
    skpy_state *state = _state(self);
    skpy_buckets buckets;
    if (skpy_buckets_read(state, source, &buckets))
        return NULL;
    PyObject *offsets = _typed_array(state, "i", buckets.offsets,
                                     ((Py_ssize_t)buckets.bucket_count + 1) * 4);
    PyObject *disks = offsets ? _typed_array(state, "i", buckets.disks, buckets.disk_items * 4) : NULL;
    PyObject *result = disks ? PyTuple_Pack(2, offsets, disks) : NULL;
    Py_XDECREF(offsets);
    Py_XDECREF(disks);
    skpy_buckets_free(&buckets);
    return result;
}

/* solve(offsets, disks, cost, delay, load, algorithm, threads, divisor)
 *   -> (response_time / divisor, assignment, counts, probes)
 * offsets/disks: int32 buffers (CSR); cost/delay/load: float64 buffers of a DiskTable. */
static PyObject *native_solve(PyObject *self, PyObject *args)
{
    skpy_state *state = _state(self);
    Py_buffer offsets, disks, cost, delay, load;
    int algorithm, threads;
    double divisor;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*iid", &offsets, &disks, &cost, &delay, &load,
                          &algorithm, &threads, &divisor))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t bucket_count = offsets.len / 4 - 1, disk_items = disks.len / 4;
    Py_ssize_t disk_count = cost.len / 8;
    if (_check_options(state, algorithm, threads))
        goto done;
    if (bucket_count < 0 || bucket_count > INT32_MAX || disk_count > INT32_MAX ||
        offsets.len % 4 || disks.len % 4 || cost.len % 8 || delay.len != cost.len ||
        load.len != cost.len) {
        PyErr_SetString(state->input_error, "offsets must hold bucket_count + 1 items, disk "
                        "ids 4 bytes each, cost, delay and load one double per disk");
        goto done;
    }
    /* the offsets are copied (bucket_count + 1 ints): checked here, they bound every read of
     * the disk ids, which the core reads in place and checks again as it reads them */
    int32_t *offset_items = PyMem_Malloc(sizeof(int32_t) * (size_t)(bucket_count + 1));
    if (!offset_items) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(offset_items, offsets.buf, sizeof(int32_t) * (size_t)(bucket_count + 1));
    if (offset_items[bucket_count] < 0 || offset_items[bucket_count] > disk_items) {
        PyErr_SetString(state->input_error, "offsets point past the end of disks");
    } else {
        Py_ssize_t b = 0;
        while (b < bucket_count && offset_items[b] >= 0 &&
               offset_items[b] <= offset_items[bucket_count])
            b++;
        if (b < bucket_count) {
            PyErr_Format(state->input_error, "bucket %zd: offset %d is outside the disk ids",
                         b, (int)offset_items[b]);
        } else {
            sk_request request = {(int32_t)bucket_count, (int32_t)disk_count, offset_items,
                                  disks.buf, cost.buf, delay.buf, load.buf};
            result = _solve(state, &request, disk_items, algorithm, threads, divisor);
        }
    }
    PyMem_Free(offset_items);
done:
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&disks);
    PyBuffer_Release(&cost);
    PyBuffer_Release(&delay);
    PyBuffer_Release(&load);
    return result;
}

static PyMethodDef native_methods[] = {
    {"select", native_select, METH_VARARGS,
     "select(buckets, cost, delay, load, algorithm, threads): check, convert and solve."},
    {"disk_table", native_disk_table, METH_VARARGS,
     "disk_table(cost, delay, load): checked columns, whole-unit columns and scale."},
    {"flatten", native_flatten, METH_O, "flatten(buckets): (offsets, disks) int32 arrays."},
    {"solve", native_solve, METH_VARARGS, "Solve one request given in CSR buffers."},
    {NULL, NULL, 0, NULL},
};

static int native_traverse(PyObject *module, visitproc visit, void *arg)
{
    skpy_state *state = _state(module);
    Py_VISIT(state->input_error);
    Py_VISIT(state->solver_error);
    Py_VISIT(state->array_type);
    Py_VISIT(state->real_type);
    return 0;
}

static int native_clear(PyObject *module)
{
    skpy_state *state = _state(module);
    Py_CLEAR(state->input_error);
    Py_CLEAR(state->solver_error);
    Py_CLEAR(state->array_type);
    Py_CLEAR(state->real_type);
    return 0;
}

static void native_free(void *module)
{
    native_clear((PyObject *)module);
}

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_native", "Binding of the replica-selection core (replica_select.h).",
    sizeof(skpy_state), native_methods, NULL, native_traverse, native_clear, native_free,
};

PyMODINIT_FUNC PyInit__native(void)
{
    PyObject *module = PyModule_Create(&native_module);
    if (!module)
        return NULL;
    skpy_state *state = _state(module);
    PyObject *array_module = PyImport_ImportModule("array");
    if (array_module) {
        state->array_type = PyObject_GetAttrString(array_module, "array");
        Py_DECREF(array_module);
    }
    state->input_error = PyErr_NewException("scratchkeeper.solver._native.InputError",
                                            PyExc_ValueError, NULL);
    state->solver_error = PyErr_NewException("scratchkeeper.solver._native.SolverFailure",
                                             PyExc_RuntimeError, NULL);
    if (!state->array_type || !state->input_error || !state->solver_error ||
        PyModule_AddObjectRef(module, "InputError", state->input_error) ||
        PyModule_AddObjectRef(module, "SolverFailure", state->solver_error) ||
        PyModule_AddIntConstant(module, "BLACKBOX", SK_ALG_BLACKBOX) ||
        PyModule_AddIntConstant(module, "INTEGRATED", SK_ALG_INTEGRATED) ||
        PyModule_AddIntConstant(module, "PARALLEL", SK_ALG_PARALLEL) ||
        PyModule_AddIntConstant(module, "SLOTSEARCH", SK_ALG_SLOTSEARCH)) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
