/*
 * py_input.c - the solver binding's input readers (py_input.h): every check of
 * select_replicas() on the hot path, each error one line naming the bucket or disk.
 */
#include "py_input.h"

#include <math.h>
#include <string.h>

/* Decimal inputs (13.2 ms) are scaled by 10**k, k <= _MAX_DECIMALS, to whole time units; the
 * doubles then hold integers below 2**53, so sums, products and ties are exact. */
#define _MAX_DECIMALS 6
#define _EXACT_INTEGER_LIMIT 9007199254740992.0 /* 2**53 */

/* ---------------------------------------------------------------- error text ------- */

/* repr(value) cut to one readable line: a 401-digit number, a bucket of 10**5 ids. */
static PyObject *_short_repr(PyObject *value)
{
    PyObject *text = PyObject_Repr(value);
    if (!text)
        return NULL;
    Py_ssize_t length = PyUnicode_GetLength(text);
    if (length <= 80)
        return text;
    PyObject *head = PyUnicode_Substring(text, 0, 60);
    Py_DECREF(text);
    if (!head)
        return NULL;
    PyObject *cut = PyUnicode_FromFormat("%U... (%zd characters)", head, length);
    Py_DECREF(head);
    return cut;
}

/* Raise InputError("<prefix><short repr of value><suffix>"). */
static void _input_error_quoting(skpy_state *state, const char *prefix, PyObject *value,
                                 const char *suffix)
{
    PyObject *quoted = _short_repr(value);
    if (!quoted)
        return;
    PyObject *message = PyUnicode_FromFormat("%s%U%s", prefix, quoted, suffix);
    Py_DECREF(quoted);
    if (message) {
        PyErr_SetObject(state->input_error, message);
        Py_DECREF(message);
    }
}

static void _input_error_double(skpy_state *state, Py_ssize_t disk, const char *name,
                                const char *what, double value)
{
    PyObject *number = PyFloat_FromDouble(value);
    if (!number)
        return;
    PyErr_Format(state->input_error, "disk %zd: %s %s, got %R", disk, name, what, number);
    Py_DECREF(number);
}

/* The one-line error for a status of the core; offsets/disks give the culprit's context. */
void skpy_status_error(skpy_state *state, int status, int32_t index, int32_t bucket_count,
                          const int32_t *offsets, const int32_t *disks, Py_ssize_t disk_items,
                          int32_t disk_count)
{
    switch (status) {
    case SK_E_NOMEM:
        PyErr_NoMemory();
        return;
    case SK_E_EMPTY_BUCKET:
        PyErr_Format(state->input_error, "bucket %d: has no replica", (int)index);
        return;
    case SK_E_DISK_RANGE:
        for (int32_t i = offsets[index]; i < offsets[index + 1]; i++)
            if (disks[i] < 0 || disks[i] >= disk_count) {
                PyErr_Format(state->input_error,
                             "bucket %d: disk id %d out of range (there are %d disks, ids 0..%d)",
                             (int)index, (int)disks[i], (int)disk_count, (int)disk_count - 1);
                return;
            }
        /* the core saw a bad id that is gone now: another thread changed the buffer */
        PyErr_Format(state->input_error, "bucket %d: disk ids changed while being solved",
                     (int)index);
        return;
    case SK_E_OFFSETS:
        PyErr_Format(state->input_error, "bucket %d: %s", (int)index, sk_status_text(status));
        return;
    case SK_E_COST:
    case SK_E_DELAY:
    case SK_E_LOAD:
        PyErr_Format(state->input_error, "disk %d: %s", (int)index, sk_status_text(status));
        return;
    case SK_E_RANGE: {
        /* the largest slot of the disk: one per requested bucket holding a replica on it */
        long requested = 0;
        for (int32_t b = 0; b < bucket_count; b++)
            for (int32_t i = offsets[b]; i < offsets[b + 1]; i++)
                if (disks[i] == index) {
                    requested++;
                    break;
                }
        PyErr_Format(state->input_error, "disk %d: delay + load + %ld bucket(s) x cost "
                     "overflows a double: costs or times too large", (int)index, requested);
        return;
    }
    case SK_E_SIZE:
        PyErr_Format(state->input_error, "%s: %d buckets, %zd replicas, %d disks",
                     sk_status_text(status), (int)bucket_count, disk_items, (int)disk_count);
        return;
    default:
        break;
    }
    PyErr_Format(state->solver_error, "replica selection failed: %s", sk_status_text(status));
}

/* ---------------------------------------------------------------- disk columns ----- */


void skpy_disk_columns_free(skpy_disk_columns *columns)
{
    PyMem_Free(columns->raw);
    columns->raw = columns->units = NULL;
}

static int _is_float64_format(const char *format)
{
    return format && (!strcmp(format, "d") || !strcmp(format, "<d") || !strcmp(format, "=d"));
}

static int _is_int32_format(const char *format, Py_ssize_t itemsize)
{
    return itemsize == 4 && format &&
           (!strcmp(format, "i") || !strcmp(format, "<i") || !strcmp(format, "=i"));
}

/* One value of a column: a real number (not a bool) that fits a double. */
static int _column_value(skpy_state *state, PyObject *item, Py_ssize_t disk,
                         const char *name, double *out)
{
    if (PyFloat_CheckExact(item)) {
        *out = PyFloat_AS_DOUBLE(item);
        return 0;
    }
    int real = !PyBool_Check(item) && (PyLong_Check(item) || PyFloat_Check(item));
    if (!real && !PyBool_Check(item)) {
        if (!state->real_type) {
            PyObject *numbers = PyImport_ImportModule("numbers");
            if (!numbers)
                return -1;
            state->real_type = PyObject_GetAttrString(numbers, "Real");
            Py_DECREF(numbers);
            if (!state->real_type)
                return -1;
        }
        real = PyObject_IsInstance(item, state->real_type);
        if (real < 0)
            return -1;
    }
    if (!real) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "disk %zd: %s must be a number, got ", disk, name);
        _input_error_quoting(state, prefix, item, "");
        return -1;
    }
    double value = PyLong_Check(item) ? PyLong_AsDouble(item) : PyFloat_AsDouble(item);
    if (value == -1.0 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear(); /* an integer beyond every double */
        char prefix[64];
        snprintf(prefix, sizeof prefix, "disk %zd: %s ", disk, name);
        _input_error_quoting(state, prefix, item, " is too large (at most 1.79769e+308)");
        return -1;
    }
    *out = value;
    return 0;
}

/* A converted value: finite, and > 0 (cost) or >= 0 (delay, load). */
static int _check_value(skpy_state *state, Py_ssize_t disk, const char *name, double value)
{
    int positive = !strcmp(name, "cost");
    if (!isfinite(value))
        _input_error_double(state, disk, name, "must be finite", value);
    else if (positive && value <= 0.0)
        _input_error_double(state, disk, name, "must be > 0", value);
    else if (!positive && value < 0.0)
        _input_error_double(state, disk, name, "must be >= 0", value);
    else
        return 0;
    return -1;
}

/* Read and check one column (a float64 buffer as it is, else any sequence of real numbers);
 * values are checked in order, each fully before the next, so the first bad disk is named. */
static int _read_column(skpy_state *state, PyObject *column, const char *name,
                        Py_ssize_t disk_count, double *out)
{
    if (!PyList_CheckExact(column) && !PyTuple_CheckExact(column) &&
        PyObject_CheckBuffer(column)) {
        Py_buffer view;
        if (PyObject_GetBuffer(column, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
            int usable = view.ndim == 1 && view.itemsize == 8 && _is_float64_format(view.format)
                         && view.len == disk_count * 8;
            if (usable)
                memcpy(out, view.buf, (size_t)view.len);
            PyBuffer_Release(&view);
            if (usable) {
                for (Py_ssize_t d = 0; d < disk_count; d++)
                    if (_check_value(state, d, name, out[d]))
                        return -1;
                return 0;
            }
        } else {
            PyErr_Clear(); /* not a contiguous buffer: read it as a sequence */
        }
    }
    PyObject *items = PySequence_Fast(column, "cost, delay and load must be sequences of numbers");
    if (!items)
        return -1;
    int status = 0;
    if (PySequence_Fast_GET_SIZE(items) != disk_count) { /* a sequence whose len() lied */
        PyErr_Format(state->input_error, "%s: expected %zd values, got %zd", name, disk_count,
                     PySequence_Fast_GET_SIZE(items));
        status = -1;
    }
    PyObject **item = PySequence_Fast_ITEMS(items);
    for (Py_ssize_t d = 0; status == 0 && d < disk_count; d++)
        status = _column_value(state, item[d], d, name, &out[d]) ||
                 _check_value(state, d, name, out[d]) ? -1 : 0;
    Py_DECREF(items);
    return status;
}

static int _is_decimal_with(double value, double scale)
{
    double scaled = value * scale;
    if (!(scaled < _EXACT_INTEGER_LIMIT)) /* too large to be whole units (or inf) */
        return 0;
    double whole = nearbyint(scaled); /* round half to even, as Python's round() */
    /* the double nearest whole/scale is the value itself: it *is* that decimal */
    return whole < _EXACT_INTEGER_LIMIT && whole / scale == value;
}

/* Check and convert cost, delay and load; the errors name the disk. */
int skpy_disk_columns_read(skpy_state *state, PyObject *cost, PyObject *delay,
                              PyObject *load, skpy_disk_columns *out)
{
    memset(out, 0, sizeof *out);
    Py_ssize_t lengths[3] = {PyObject_Size(cost), PyObject_Size(delay), PyObject_Size(load)};
    if (lengths[0] < 0 || lengths[1] < 0 || lengths[2] < 0)
        return -1;
    if (lengths[0] != lengths[1] || lengths[1] != lengths[2]) {
        PyErr_Format(state->input_error, "cost, delay and load must have one value per disk "
                     "(got %zd, %zd, %zd)", lengths[0], lengths[1], lengths[2]);
        return -1;
    }
    Py_ssize_t n = lengths[0];
    if (n > INT32_MAX) {
        PyErr_Format(state->input_error, "%zd disks: at most %d", n, INT32_MAX);
        return -1;
    }
    out->disk_count = n;
    out->raw = PyMem_Malloc(sizeof(double) * (size_t)(6 * n + 1));
    if (!out->raw) {
        PyErr_NoMemory();
        return -1;
    }
    double *raw_cost = out->raw, *raw_delay = out->raw + n, *raw_load = out->raw + 2 * n;
    if (_read_column(state, cost, "cost", n, raw_cost) ||
        _read_column(state, delay, "delay", n, raw_delay) ||
        _read_column(state, load, "load", n, raw_load))
        goto fail;
    for (Py_ssize_t d = 0; d < n; d++)
        if (!isfinite(raw_delay[d] + raw_load[d])) {
            PyObject *delay_value = PyFloat_FromDouble(raw_delay[d]);
            PyObject *load_value = PyFloat_FromDouble(raw_load[d]);
            if (delay_value && load_value)
                PyErr_Format(state->input_error, "disk %zd: delay + load (%R + %R) is too "
                             "large to represent", d, delay_value, load_value);
            Py_XDECREF(delay_value);
            Py_XDECREF(load_value);
            goto fail;
        }
    /* the smallest 10**k (k <= 6) turning every value into a whole number, if any */
    double scale = 1.0;
    out->scale = 0;
    for (int decimals = 0; decimals <= _MAX_DECIMALS && !out->scale; decimals++, scale *= 10) {
        Py_ssize_t i = 0;
        while (i < 3 * n && _is_decimal_with(out->raw[i], scale))
            i++;
        if (i == 3 * n)
            out->scale = (long)scale;
    }
    const double *base_columns = out->raw;
    if (out->scale) {
        out->units = out->raw + 3 * n;
        for (Py_ssize_t i = 0; i < 3 * n; i++)
            out->units[i] = nearbyint(out->raw[i] * (double)out->scale);
        base_columns = out->units;
    }
    out->largest_base = out->largest_cost = 0.0;
    for (Py_ssize_t d = 0; d < n; d++) {
        double base = base_columns[n + d] + base_columns[2 * n + d];
        if (base > out->largest_base)
            out->largest_base = base;
        if (base_columns[d] > out->largest_cost)
            out->largest_cost = base_columns[d];
    }
    return 0;
fail:
    skpy_disk_columns_free(out);
    return -1;
}

/* Whole units are exact for this many buckets: the largest time the core may form, the
 * largest base plus bucket_count slots of the dearest disk, stays below 2**53. */
int skpy_fits_in_units(const skpy_disk_columns *columns, Py_ssize_t bucket_count)
{
    return columns->scale &&
           columns->largest_base + (double)bucket_count * columns->largest_cost <
               _EXACT_INTEGER_LIMIT;
}

/* ---------------------------------------------------------------- buckets ---------- */


void skpy_buckets_free(skpy_buckets *buckets)
{
    PyMem_Free(buckets->offsets);
    PyMem_Free(buckets->owned_disks);
    if (buckets->has_view)
        PyBuffer_Release(&buckets->view);
    memset(buckets, 0, sizeof *buckets);
}

static int _buckets_reserve(skpy_buckets *buckets, Py_ssize_t *capacity, Py_ssize_t needed)
{
    if (needed <= *capacity)
        return 0;
    if (needed > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 2**31 disk ids");
        return -1;
    }
    Py_ssize_t grown = *capacity * 2 > needed ? *capacity * 2 : needed;
    int32_t *disks = PyMem_Realloc(buckets->owned_disks, sizeof(int32_t) * (size_t)grown);
    if (!disks) {
        PyErr_NoMemory();
        return -1;
    }
    buckets->owned_disks = disks;
    *capacity = grown;
    return 0;
}

/* An int whose value fits one internal digit (every disk id below 2**30): read in place,
 * without the call and checks of PyLong_AsLongAndOverflow; 0 if it does not fit. */
static inline int _compact_int(PyObject *item, long *value)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (!PyUnstable_Long_IsCompact((PyLongObject *)item))
        return 0;
    *value = (long)PyUnstable_Long_CompactValue((PyLongObject *)item);
    return 1;
#else
    Py_ssize_t size = Py_SIZE(item);
    if (size < -1 || size > 1)
        return 0;
    *value = size * (long)((PyLongObject *)item)->ob_digit[0];
    return 1;
#endif
}

/* The disk id of one replica: an int (or __index__) in int32 range, never a bool.
 * Returns 0, or -1 with an exception set (TypeError or OverflowError for a bad id). */
static int _disk_id_slow(PyObject *item, int32_t *out)
{
    if (PyBool_Check(item)) {
        PyErr_SetString(PyExc_TypeError, "bool");
        return -1;
    }
    long value;
    int overflow;
    if (PyLong_Check(item)) {
        value = PyLong_AsLongAndOverflow(item, &overflow);
    } else if (PyIndex_Check(item) && !PyFloat_Check(item)) {
        PyObject *index = PyNumber_Index(item);
        if (!index)
            return -1;
        value = PyLong_AsLongAndOverflow(index, &overflow);
        Py_DECREF(index);
    } else {
        PyErr_SetString(PyExc_TypeError, "not an integer");
        return -1;
    }
    if (value == -1 && PyErr_Occurred())
        return -1;
    if (overflow || value < INT32_MIN || value > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "disk id beyond int32");
        return -1;
    }
    *out = (int32_t)value;
    return 0;
}

static inline int _disk_id(PyObject *item, int32_t *out)
{
    long value;
    if (PyLong_CheckExact(item) && _compact_int(item, &value)) {
        *out = (int32_t)value;
        return 0;
    }
    return _disk_id_slow(item, out);
}

/* Replace the exception raised for bucket `index` by its one-line InputError: a bool
 * anywhere in the bucket (looked for first, whatever failed) or a non-integer id is "must be
 * integers", an id beyond int32 is "out of range"; other exceptions of an id's own __index__
 * pass through. */
static void _bucket_id_error(skpy_state *state, Py_ssize_t index, PyObject *replicas,
                             PyObject *items)
{
    int has_bool = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items); i++)
        has_bool |= PyBool_Check(PySequence_Fast_GET_ITEM(items, i));
    int overflow = PyErr_ExceptionMatches(PyExc_OverflowError) && !has_bool;
    if (!has_bool && !overflow && !PyErr_ExceptionMatches(PyExc_TypeError))
        return;
    PyErr_Clear();
    PyObject *as_list = PySequence_List(replicas);
    if (!as_list)
        return;
    char prefix[96];
    snprintf(prefix, sizeof prefix, overflow ? "bucket %zd: disk id out of range (got "
             : "bucket %zd: disk ids must be integers (got ", index);
    _input_error_quoting(state, prefix, as_list, ")");
    Py_DECREF(as_list);
}

/* An int32 buffer of shape (buckets, replicas), C-contiguous: its ids are used in place. */
static int _buckets_from_matrix(skpy_state *state, PyObject *source, skpy_buckets *out)
{
    if (PyList_CheckExact(source) || PyTuple_CheckExact(source) || !PyObject_CheckBuffer(source))
        return 0;
    if (PyObject_GetBuffer(source, &out->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyErr_Clear();
        return 0;
    }
    out->has_view = 1;
    if (out->view.ndim != 2 || !_is_int32_format(out->view.format, out->view.itemsize)) {
        PyBuffer_Release(&out->view);
        out->has_view = 0;
        return 0; /* read as a sequence of buckets */
    }
    Py_ssize_t rows = out->view.shape[0], width = out->view.shape[1];
    if (rows > INT32_MAX || (width && rows > INT32_MAX / width)) {
        PyErr_Format(state->input_error, "%s: %zd buckets of %zd replicas",
                     sk_status_text(SK_E_SIZE), rows, width);
        return -1;
    }
    out->offsets = PyMem_Malloc(sizeof(int32_t) * (size_t)(rows + 1));
    if (!out->offsets) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t b = 0; b <= rows; b++)
        out->offsets[b] = (int32_t)(b * width);
    out->bucket_count = (int32_t)rows;
    out->disks = out->view.buf;
    out->disk_items = rows * width;
    return 1;
}

/* Read buckets (a sequence of replica lists, or an int32 matrix) into CSR form. */
int skpy_buckets_read(skpy_state *state, PyObject *source, skpy_buckets *out)
{
    memset(out, 0, sizeof *out);
    int matrix = _buckets_from_matrix(state, source, out);
    if (matrix)
        return matrix < 0 ? (skpy_buckets_free(out), -1) : 0;
    PyObject *buckets = PySequence_Fast(source, "buckets must be iterable");
    if (!buckets) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;
        PyErr_Clear();
        PyErr_Format(state->input_error, "buckets: expected a list of replica lists, got %s",
                     _PyType_Name(Py_TYPE(source)));
        return -1;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(buckets), capacity = 0, used = 0;
    if (count > INT32_MAX - 1) {
        PyErr_Format(state->input_error, "%s: %zd buckets", sk_status_text(SK_E_SIZE), count);
        goto fail;
    }
    out->offsets = PyMem_Malloc(sizeof(int32_t) * (size_t)(count + 1));
    if (!out->offsets || _buckets_reserve(out, &capacity, 3 * count + 16)) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto fail;
    }
    out->offsets[0] = 0;
    PyObject **bucket = PySequence_Fast_ITEMS(buckets);
    for (Py_ssize_t b = 0; b < count; b++) {
        PyObject *replicas = bucket[b];
        /* the replica lists lie scattered in memory: fetch a few buckets ahead, header first
         * and then its items, so reading ids does not wait on every cache miss in turn */
        if (b + 8 < count)
            __builtin_prefetch(bucket[b + 8]);
        if (b + 4 < count && PyList_CheckExact(bucket[b + 4]))
            __builtin_prefetch(((PyListObject *)bucket[b + 4])->ob_item);
        if (!PyList_CheckExact(replicas) && !PyTuple_CheckExact(replicas)) {
            PyTypeObject *type = Py_TYPE(replicas);
            int sized = (type->tp_as_sequence && type->tp_as_sequence->sq_length) ||
                        (type->tp_as_mapping && type->tp_as_mapping->mp_length);
            if (PyUnicode_Check(replicas) || PyBytes_Check(replicas) || !sized) {
                PyErr_Format(state->input_error, "bucket %zd: expected a list of disk ids, "
                             "got %s", b, _PyType_Name(type));
                goto fail;
            }
            Py_buffer view;
            if (PyObject_CheckBuffer(replicas) &&
                PyObject_GetBuffer(replicas, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
                int usable = view.ndim == 1 && _is_int32_format(view.format, view.itemsize);
                if (usable && _buckets_reserve(out, &capacity, used + view.len / 4) == 0) {
                    memcpy(out->owned_disks + used, view.buf, (size_t)view.len);
                    used += view.len / 4;
                }
                PyBuffer_Release(&view);
                if (PyErr_Occurred())
                    goto fail;
                if (usable) {
                    out->offsets[b + 1] = (int32_t)used;
                    continue;
                }
            }
            PyErr_Clear();
        }
        /* a list or tuple is read in place (the common case); anything else is iterated */
        PyObject *items = PyList_CheckExact(replicas) || PyTuple_CheckExact(replicas)
                              ? Py_NewRef(replicas)
                              : PySequence_Fast(replicas, "a bucket must be iterable");
        if (!items)
            goto fail;
        Py_ssize_t size = PySequence_Fast_GET_SIZE(items);
        PyObject **item = PySequence_Fast_ITEMS(items);
        int32_t *disk = out->owned_disks + used;
        if (used + size > capacity) {
            if (_buckets_reserve(out, &capacity, used + size)) {
                Py_DECREF(items);
                goto fail;
            }
            disk = out->owned_disks + used;
        }
        for (Py_ssize_t i = 0; i < size; i++)
            if (_disk_id(item[i], &disk[i])) {
                _bucket_id_error(state, b, replicas, items);
                Py_DECREF(items);
                goto fail;
            }
        Py_DECREF(items);
        used += size;
        out->offsets[b + 1] = (int32_t)used;
    }
    Py_DECREF(buckets);
    out->bucket_count = (int32_t)count;
    out->disks = out->owned_disks;
    out->disk_items = used;
    return 0;
fail:
    Py_DECREF(buckets);
    skpy_buckets_free(out);
    return -1;
}
