/*
 * py_jobs.h - the jobs' attributes read into typed columns and written back, one pass over the
 * jobs with every attribute of a job at once (the binding's marshalling for schedule.c).
 */
#ifndef SK_SIM_PY_JOBS_H
#define SK_SIM_PY_JOBS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *sk_read_columns(PyObject *module, PyObject *args);
PyObject *sk_write_columns(PyObject *module, PyObject *args);
PyObject *sk_read_int_lists(PyObject *module, PyObject *args);

#endif
