/*
 * py_input.h - reading the Python inputs of the solver binding: disk columns (lists of numbers
 * or float64 buffers) and buckets (lists of lists, int32 vectors or an int32 matrix used in
 * place), checked in one pass with one-line errors naming the bucket or disk.
 */
#ifndef SK_PY_INPUT_H
#define SK_PY_INPUT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "replica_select.h"

/* The binding's module state (no globals): its exception types and the types it builds. */
typedef struct {
    PyObject *input_error; /* _native.InputError(ValueError) */
    PyObject *solver_error; /* _native.SolverFailure(RuntimeError): not the input's fault */
    PyObject *array_type;  /* array.array, for the assignment and counts returned */
    PyObject *real_type;   /* numbers.Real, imported on first use (rare value types) */
} skpy_state;

/* Checked cost, delay and load of every disk, with their whole-unit form. */
typedef struct {
    Py_ssize_t disk_count;
    double *raw;       /* cost, delay, load: 3 * disk_count, as given */
    double *units;     /* the same scaled to whole units, or NULL when scale == 0 */
    long scale;        /* 10**k making every value whole, 0 if none (k <= _MAX_DECIMALS) */
    double largest_base, largest_cost; /* over the unit (or raw) columns */
} skpy_disk_columns;

/* A request in CSR form, owned or pointing into the caller's int32 buffer. */
typedef struct {
    int32_t bucket_count;
    int32_t *offsets;      /* owned, bucket_count + 1 */
    const int32_t *disks;  /* owned_disks, or the caller's int32 buffer (no copy) */
    int32_t *owned_disks;
    Py_ssize_t disk_items;
    Py_buffer view;        /* held while disks points into it */
    int has_view;
} skpy_buckets;

/* Check and convert cost, delay and load (InputError naming the disk); 0 or -1. */
int skpy_disk_columns_read(skpy_state *state, PyObject *cost, PyObject *delay, PyObject *load,
                           skpy_disk_columns *out);
void skpy_disk_columns_free(skpy_disk_columns *columns);

/* Whole units are exact for this many buckets (the largest time stays below 2**53). */
int skpy_fits_in_units(const skpy_disk_columns *columns, Py_ssize_t bucket_count);

/* Read buckets (a sequence of replica lists, or an int32 matrix) into CSR form; 0 or -1. */
int skpy_buckets_read(skpy_state *state, PyObject *source, skpy_buckets *out);
void skpy_buckets_free(skpy_buckets *buckets);

/* Set the one-line error (InputError, SolverFailure or MemoryError) for a core status. */
void skpy_status_error(skpy_state *state, int status, int32_t index, int32_t bucket_count,
                       const int32_t *offsets, const int32_t *disks, Py_ssize_t disk_items,
                       int32_t disk_count);

#endif /* SK_PY_INPUT_H */
