/*
 * _native.c - thin CPython binding of suora.c: a Map holds copies of the bucket lines and the
 * eligibility table (scratchkeeper/placement/suora.py builds them), place() and place_many()
 * answer with dense target numbers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>
#include <string.h>

#include "suora.h"

typedef struct {
    PyObject_HEAD
    sk_suora_map map;
    sk_suora_bucket *buckets;
    int32_t *slot_targets;   /* every bucket's slots, one allocation */
    double *slot_lengths;
    uint8_t *eligible;
} MapObject;

static void _map_dealloc(MapObject *self)
{
    free(self->buckets);
    free(self->slot_targets);
    free(self->slot_lengths);
    free(self->eligible);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *_error(int status)
{
    if (status == SK_SUORA_E_TOO_FEW)
        PyErr_SetString(PyExc_LookupError, "fewer eligible targets than replicas");
    else
        PyErr_SetString(PyExc_ValueError, "bad placement arguments");
    return NULL;
}

/* Map(seed, eligible: bytes, buckets: sequence of (slot_target int32 buffer, slot_length
 * float64 buffer, levels, eligible_count, sole_target)) */
static int _map_init(MapObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"seed", "eligible", "buckets", NULL};
    unsigned long long seed;
    Py_buffer eligible;
    PyObject *buckets;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Ky*O", keywords, &seed, &eligible, &buckets))
        return -1;
    if (self->buckets) {
        PyBuffer_Release(&eligible);
        PyErr_SetString(PyExc_TypeError, "Map is initialised once");
        return -1;
    }
    int result = -1;
    Py_buffer *targets = NULL, *lengths = NULL;
    int *levels = NULL, *eligible_counts = NULL, *sole_targets = NULL;
    Py_ssize_t parsed = 0, total = 0, bucket_count = 0;
    PyObject *items = PySequence_Fast(buckets, "buckets must be a sequence");
    if (!items)
        goto release;
    bucket_count = PySequence_Fast_GET_SIZE(items);
    if (bucket_count < 1 || bucket_count > INT32_MAX || eligible.len > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "need 1 or more buckets");
        goto release;
    }
    targets = calloc((size_t)bucket_count, sizeof *targets);
    lengths = calloc((size_t)bucket_count, sizeof *lengths);
    levels = calloc((size_t)bucket_count, sizeof *levels);
    eligible_counts = calloc((size_t)bucket_count, sizeof *eligible_counts);
    sole_targets = calloc((size_t)bucket_count, sizeof *sole_targets);
    if (!targets || !lengths || !levels || !eligible_counts || !sole_targets) {
        PyErr_NoMemory();
        goto release;
    }
    for (; parsed < bucket_count; parsed++) {
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(items, parsed), "y*y*iii", &targets[parsed],
                              &lengths[parsed], &levels[parsed], &eligible_counts[parsed],
                              &sole_targets[parsed]))
            goto release;
        if (targets[parsed].len % 4 || lengths[parsed].len != targets[parsed].len * 2) {
            PyBuffer_Release(&targets[parsed]);
            PyBuffer_Release(&lengths[parsed]);
            PyErr_SetString(PyExc_ValueError, "slot tables of different lengths");
            goto release;
        }
        total += targets[parsed].len / 4;
    }
    self->buckets = calloc((size_t)bucket_count, sizeof *self->buckets);
    self->slot_targets = malloc((size_t)(total ? total : 1) * sizeof(int32_t));
    self->slot_lengths = malloc((size_t)(total ? total : 1) * sizeof(double));
    self->eligible = malloc((size_t)(eligible.len ? eligible.len : 1));
    if (!self->buckets || !self->slot_targets || !self->slot_lengths || !self->eligible) {
        PyErr_NoMemory();
        goto release;
    }
    memcpy(self->eligible, eligible.buf, (size_t)eligible.len);
    Py_ssize_t offset = 0;
    for (Py_ssize_t b = 0; b < bucket_count; b++) {
        Py_ssize_t slots = targets[b].len / 4;
        memcpy(self->slot_targets + offset, targets[b].buf, (size_t)targets[b].len);
        memcpy(self->slot_lengths + offset, lengths[b].buf, (size_t)lengths[b].len);
        for (Py_ssize_t s = 0; s < slots; s++) {
            int32_t target = self->slot_targets[offset + s];
            if (target >= (int32_t)eligible.len || target < -1) {
                PyErr_SetString(PyExc_ValueError, "slot names an unknown target");
                goto release;
            }
        }
        if (sole_targets[b] >= (int32_t)eligible.len) {
            PyErr_SetString(PyExc_ValueError, "sole target unknown");
            goto release;
        }
        self->buckets[b] = (sk_suora_bucket){(int32_t)slots, levels[b], self->slot_targets + offset,
                                             self->slot_lengths + offset, eligible_counts[b],
                                             sole_targets[b]};
        offset += slots;
    }
    self->map = (sk_suora_map){(int32_t)bucket_count, (int32_t)eligible.len, self->buckets,
                               self->eligible, seed};
    result = 0;
release:
    for (Py_ssize_t b = 0; b < parsed; b++) {
        PyBuffer_Release(&targets[b]);
        PyBuffer_Release(&lengths[b]);
    }
    free(targets);
    free(lengths);
    free(levels);
    free(eligible_counts);
    free(sole_targets);
    Py_XDECREF(items);
    PyBuffer_Release(&eligible);
    return result;
}

static PyObject *_map_place(MapObject *self, PyObject *args)
{
    unsigned long long object_id;
    int replicas, first_bucket;
    if (!PyArg_ParseTuple(args, "Kii", &object_id, &replicas, &first_bucket))
        return NULL;
    if (replicas < 1 || replicas > 64)
        return _error(SK_SUORA_E_ARGUMENTS);
    int32_t out[64];
    int status = sk_suora_place(&self->map, object_id, replicas, first_bucket, out);
    if (status != SK_SUORA_OK)
        return _error(status);
    PyObject *result = PyTuple_New(replicas);
    if (!result)
        return NULL;
    for (int i = 0; i < replicas; i++)
        PyTuple_SET_ITEM(result, i, PyLong_FromLong(out[i]));
    return result;
}

/* place_many(object_ids: uint64 buffer, replicas, first_bucket) -> bytes of int32, row by row */
static PyObject *_map_place_many(MapObject *self, PyObject *args)
{
    Py_buffer ids;
    int replicas, first_bucket;
    if (!PyArg_ParseTuple(args, "y*ii", &ids, &replicas, &first_bucket))
        return NULL;
    PyObject *result = NULL;
    if (ids.len % 8 || replicas < 1) {
        PyErr_SetString(PyExc_ValueError, "object ids must be a uint64 buffer, replicas >= 1");
        goto done;
    }
    int64_t count = ids.len / 8;
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * replicas * 4));
    if (!result)
        goto done;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = sk_suora_place_many(&self->map, (const uint64_t *)ids.buf, count, replicas,
                                 first_bucket, (int32_t *)PyBytes_AS_STRING(result));
    Py_END_ALLOW_THREADS
    if (status != SK_SUORA_OK) {
        Py_CLEAR(result);
        _error(status);
    }
done:
    PyBuffer_Release(&ids);
    return result;
}

static PyMethodDef _map_methods[] = {
    {"place", (PyCFunction)_map_place, METH_VARARGS,
     "place(object_id, replicas, first_bucket) -> tuple of dense target numbers"},
    {"place_many", (PyCFunction)_map_place_many, METH_VARARGS,
     "place_many(object_ids uint64 buffer, replicas, first_bucket) -> bytes of int32"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject MapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "scratchkeeper.placement._native.Map",
    .tp_basicsize = sizeof(MapObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A placement map's bucket lines, copied for the C core.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)_map_init,
    .tp_dealloc = (destructor)_map_dealloc,
    .tp_methods = _map_methods,
};

static struct PyModuleDef _module = {
    PyModuleDef_HEAD_INIT, "_native", "SUORA placement's C core (suora.c).", -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
    if (PyType_Ready(&MapType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&_module);
    if (!module)
        return NULL;
    Py_INCREF(&MapType);
    if (PyModule_AddObject(module, "Map", (PyObject *)&MapType) < 0) {
        Py_DECREF(&MapType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
