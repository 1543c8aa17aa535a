/*
 * py_jobs.c - read_columns(jobs, names, kinds) and write_columns(jobs, names, kinds, columns):
 * attribute ``names[k]`` of every job as a column of kind ``kinds[k]`` ('d' float64, 'q' int64,
 * 'i' int32, '?' one byte 0/1), and back. A column is bytes out and a writable buffer in.
 * read_int_lists(jobs, name): attribute ``name`` of every job, a sequence of 32-bit integers,
 * flattened (offsets, values) with the lowest and highest value.
 */
#include "py_jobs.h"

#include <stdint.h>
#include <string.h>

static Py_ssize_t _item_size(char kind)
{
    switch (kind) {
    case 'd': return sizeof(double);
    case 'q': return sizeof(int64_t);
    case 'i': return sizeof(int32_t);
    case '?': return 1;
    default: return 0;
    }
}

/* names and kinds checked: a tuple of str and a str of as many known kinds */
static int _check_names(PyObject *names, const char *kinds, Py_ssize_t *count)
{
    if (!PyTuple_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "names must be a tuple");
        return -1;
    }
    *count = PyTuple_GET_SIZE(names);
    if ((Py_ssize_t)strlen(kinds) != *count) {
        PyErr_SetString(PyExc_ValueError, "one kind per name");
        return -1;
    }
    for (Py_ssize_t k = 0; k < *count; k++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(names, k)) || !_item_size(kinds[k])) {
            PyErr_SetString(PyExc_ValueError, "names are str, kinds among d, q, i, ?");
            return -1;
        }
    }
    return 0;
}

static int _store(char kind, char *column, Py_ssize_t row, PyObject *value)
{
    if (kind == 'd') {
        double number = PyFloat_AsDouble(value);
        if (number == -1.0 && PyErr_Occurred())
            return -1;
        ((double *)column)[row] = number;
    } else if (kind == '?') {
        int truth = PyObject_IsTrue(value);
        if (truth < 0)
            return -1;
        column[row] = (char)truth;
    } else {
        long long number = PyLong_AsLongLong(value);
        if (number == -1 && PyErr_Occurred())
            return -1;
        if (kind == 'q') {
            ((int64_t *)column)[row] = number;
        } else if (number < INT32_MIN || number > INT32_MAX) {
            PyErr_Format(PyExc_OverflowError, "%lld does not fit in 32 bits", number);
            return -1;
        } else {
            ((int32_t *)column)[row] = (int32_t)number;
        }
    }
    return 0;
}

PyObject *sk_read_columns(PyObject *module, PyObject *args)
{
    PyObject *jobs, *names, *items = NULL, *columns = NULL;
    const char *kinds;
    Py_ssize_t count;
    (void)module;
    if (!PyArg_ParseTuple(args, "OO!s", &jobs, &PyTuple_Type, &names, &kinds)
        || _check_names(names, kinds, &count))
        return NULL;
    items = PySequence_Fast(jobs, "jobs must be a sequence");
    if (!items)
        return NULL;
    Py_ssize_t rows = PySequence_Fast_GET_SIZE(items);
    columns = PyTuple_New(count);
    if (!columns)
        goto fail;
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *column = PyBytes_FromStringAndSize(NULL, rows * _item_size(kinds[k]));
        if (!column)
            goto fail;
        PyTuple_SET_ITEM(columns, k, column);
    }
    for (Py_ssize_t row = 0; row < rows; row++) {
        PyObject *job = PySequence_Fast_GET_ITEM(items, row);
        for (Py_ssize_t k = 0; k < count; k++) {
            PyObject *value = PyObject_GetAttr(job, PyTuple_GET_ITEM(names, k));
            if (!value)
                goto fail;
            int status = _store(kinds[k], PyBytes_AS_STRING(PyTuple_GET_ITEM(columns, k)), row,
                                value);
            Py_DECREF(value);
            if (status)
                goto fail;
        }
    }
    Py_DECREF(items);
    return columns;
fail:
    Py_XDECREF(columns);
    Py_DECREF(items);
    return NULL;
}

static PyObject *_load(char kind, const char *column, Py_ssize_t row)
{
    switch (kind) {
    case 'd': return PyFloat_FromDouble(((const double *)column)[row]);
    case 'q': return PyLong_FromLongLong(((const int64_t *)column)[row]);
    case 'i': return PyLong_FromLong(((const int32_t *)column)[row]);
    default: return PyBool_FromLong(column[row]);
    }
}

PyObject *sk_write_columns(PyObject *module, PyObject *args)
{
    PyObject *jobs, *names, *buffers, *items = NULL, *answer = NULL;
    const char *kinds;
    Py_ssize_t count, done = 0;
    Py_buffer views[16];
    (void)module;
    if (!PyArg_ParseTuple(args, "OO!sO!", &jobs, &PyTuple_Type, &names, &kinds, &PyTuple_Type,
                          &buffers)
        || _check_names(names, kinds, &count))
        return NULL;
    if (count > 16 || PyTuple_GET_SIZE(buffers) != count) {
        PyErr_SetString(PyExc_ValueError, "one column per name, at most 16");
        return NULL;
    }
    items = PySequence_Fast(jobs, "jobs must be a sequence");
    if (!items)
        return NULL;
    Py_ssize_t rows = PySequence_Fast_GET_SIZE(items);
    for (; done < count; done++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(buffers, done), &views[done], PyBUF_SIMPLE))
            goto release;
        if (views[done].len != rows * _item_size(kinds[done])) {
            PyErr_Format(PyExc_ValueError, "column %zd: %zd bytes for %zd jobs", done,
                         views[done].len, rows);
            done++;
            goto release;
        }
    }
    for (Py_ssize_t row = 0; row < rows; row++) {
        PyObject *job = PySequence_Fast_GET_ITEM(items, row);
        for (Py_ssize_t k = 0; k < count; k++) {
            PyObject *value = _load(kinds[k], views[k].buf, row);
            if (!value)
                goto release;
            int status = PyObject_SetAttr(job, PyTuple_GET_ITEM(names, k), value);
            Py_DECREF(value);
            if (status)
                goto release;
        }
    }
    answer = Py_NewRef(Py_None);
release:
    for (Py_ssize_t k = 0; k < done; k++)
        PyBuffer_Release(&views[k]);
    Py_DECREF(items);
    return answer;
}

PyObject *sk_read_int_lists(PyObject *module, PyObject *args)
{
    PyObject *jobs, *name, *items, *offsets = NULL, *values = NULL, *answer = NULL;
    long low = 0, high = -1;
    (void)module;
    if (!PyArg_ParseTuple(args, "OU", &jobs, &name))
        return NULL;
    items = PySequence_Fast(jobs, "jobs must be a sequence");
    if (!items)
        return NULL;
    Py_ssize_t rows = PySequence_Fast_GET_SIZE(items), total = 0, capacity = 4 * rows + 4;
    offsets = PyBytes_FromStringAndSize(NULL, (rows + 1) * (Py_ssize_t)sizeof(int64_t));
    int32_t *flat = PyMem_Malloc((size_t)capacity * sizeof *flat);
    if (!offsets || !flat) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *offset = (int64_t *)PyBytes_AS_STRING(offsets);
    offset[0] = 0;
    for (Py_ssize_t row = 0; row < rows; row++) {
        PyObject *list = PyObject_GetAttr(PySequence_Fast_GET_ITEM(items, row), name);
        PyObject *fast = list ? PySequence_Fast(list, "not a sequence") : NULL;
        Py_XDECREF(list);
        if (!fast)
            goto done;
        Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
        if (total + count > capacity) {
            capacity = 2 * (total + count);
            int32_t *grown = PyMem_Realloc(flat, (size_t)capacity * sizeof *flat);
            if (!grown) {
                Py_DECREF(fast);
                PyErr_NoMemory();
                goto done;
            }
            flat = grown;
        }
        for (Py_ssize_t k = 0; k < count; k++) {
            long value = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, k));
            if ((value == -1 && PyErr_Occurred()) || value < INT32_MIN || value > INT32_MAX) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_OverflowError, "does not fit in 32 bits");
                Py_DECREF(fast);
                goto done;
            }
            if (total == 0 || value < low)
                low = value;
            if (total == 0 || value > high)
                high = value;
            flat[total++] = (int32_t)value;
        }
        Py_DECREF(fast);
        offset[row + 1] = total;
    }
    values = PyBytes_FromStringAndSize((const char *)flat, total * (Py_ssize_t)sizeof *flat);
    if (values) {
        if (total)
            answer = Py_BuildValue("OOll", offsets, values, low, high);
        else
            answer = Py_BuildValue("OOOO", offsets, values, Py_None, Py_None);
    }
done:
    PyMem_Free(flat);
    Py_XDECREF(offsets);
    Py_XDECREF(values);
    Py_DECREF(items);
    return answer;
}
