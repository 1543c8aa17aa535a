/*
 * _native.c - thin CPython binding of the replay's C cores: simulate() runs schedule.c on the
 * jobs' columns (typed buffers that scratchkeeper/sim/scheduler.py fills and reads back with
 * read_columns() and write_columns() of py_jobs.c), replicate() runs replication.c on a
 * schedule's log. Both check every buffer's size, call the progress callable as the Python
 * model does, and answer with bytes and numbers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "py_jobs.h"
#include "replication.h"
#include "schedule.h"
#include "workload.h"

static int _call_progress(void *context, int64_t done, int64_t total)
{
    PyObject *answer = PyObject_CallFunction((PyObject *)context, "LL", (long long)done,
                                             (long long)total);
    if (!answer)
        return 1;
    Py_DECREF(answer);
    return 0;
}

/* buffer holds count items of size bytes each, or a ValueError naming it */
static int _sized(const Py_buffer *buffer, Py_ssize_t count, Py_ssize_t size, const char *name)
{
    if (buffer->len == count * size)
        return 0;
    PyErr_Format(PyExc_ValueError, "%s: %zd bytes, expected %zd items of %zd bytes", name,
                 buffer->len, count, size);
    return -1;
}

/* simulate()'s buffers: the sizes, the OST offsets in order and every OST number below slots */
static int _check_simulate(const Py_buffer *in, const Py_buffer *outage, const Py_buffer *state,
                           Py_ssize_t n, int ost_slots)
{
    Py_ssize_t outages = outage[0].len / (Py_ssize_t)sizeof(int32_t);
    Py_ssize_t ost_total = in[6].len / (Py_ssize_t)sizeof(int32_t);
    if (_sized(&in[0], n, sizeof(double), "submit") || _sized(&in[1], n, sizeof(double), "run_time")
        || _sized(&in[2], n, sizeof(double), "limit")
        || _sized(&in[3], n, sizeof(double), "input_bytes")
        || _sized(&in[4], n, sizeof(int32_t), "nodes")
        || _sized(&in[5], n + 1, sizeof(int64_t), "ost_offsets")
        || _sized(&outage[1], outages, sizeof(double), "outage_down")
        || _sized(&outage[2], outages, sizeof(double), "outage_up")
        || _sized(&state[0], n, sizeof(double), "ready_at")
        || _sized(&state[1], n, sizeof(double), "first_start")
        || _sized(&state[2], n, sizeof(double), "start")
        || _sized(&state[3], n, sizeof(double), "end")
        || _sized(&state[4], n, sizeof(double), "recovery_seconds")
        || _sized(&state[5], n, sizeof(int64_t), "kills")
        || _sized(&state[6], n, sizeof(int64_t), "version")
        || _sized(&state[7], n, 1, "affected"))
        return -1;
    const int64_t *offsets = in[5].buf;
    const int32_t *osts = in[6].buf, *outage_ost = outage[0].buf;
    for (Py_ssize_t job = 0; job < n; job++) {
        if (offsets[job] < 0 || offsets[job] > offsets[job + 1] || offsets[job + 1] > ost_total) {
            PyErr_Format(PyExc_ValueError, "job %zd: OST offsets out of order", job);
            return -1;
        }
    }
    for (Py_ssize_t k = 0; k < ost_total; k++) {
        if (osts[k] < 0 || osts[k] >= ost_slots) {
            PyErr_Format(PyExc_ValueError, "OST number %d is outside 0..%d", osts[k], ost_slots - 1);
            return -1;
        }
    }
    for (Py_ssize_t k = 0; k < outages; k++) {
        if (outage_ost[k] < 0 || outage_ost[k] >= ost_slots) {
            PyErr_Format(PyExc_ValueError, "outage %zd: OST number %d is outside 0..%d", k,
                         outage_ost[k], ost_slots - 1);
            return -1;
        }
    }
    return 0;
}

static PyObject *_simulate(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {
        "submit", "run_time", "limit", "input_bytes", "nodes", "ost_offsets", "osts",
        "ost_slots", "system_nodes", "backfill", "policy", "patch_bandwidth", "patch_latency",
        "outage_ost", "outage_down", "outage_up", "ready_at", "first_start", "start", "end",
        "recovery_seconds", "kills", "version", "affected", "progress", NULL};
    enum { _INPUTS = 7, _OUTAGES = 3, _STATES = 8 };
    Py_buffer in[_INPUTS] = {{0}}, outage[_OUTAGES] = {{0}}, state[_STATES] = {{0}};
    int ost_slots, backfill, policy;
    long long system_nodes;
    double patch_bandwidth, patch_latency;
    PyObject *progress, *answer = NULL;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(
            args, kwargs, "y*y*y*y*y*y*y*iLpiddy*y*y*w*w*w*w*w*w*w*w*O", keywords, &in[0],
            &in[1], &in[2], &in[3], &in[4], &in[5], &in[6], &ost_slots, &system_nodes, &backfill,
            &policy, &patch_bandwidth, &patch_latency, &outage[0], &outage[1], &outage[2],
            &state[0], &state[1], &state[2], &state[3], &state[4], &state[5], &state[6],
            &state[7], &progress))
        return NULL;
    Py_ssize_t n = in[0].len / (Py_ssize_t)sizeof(double);
    sk_schedule_log log = {0};
    if (n >= INT32_MAX || ost_slots < 0 || policy < SK_POLICY_NONE || policy > SK_POLICY_ON_THE_FLY) {
        PyErr_SetString(PyExc_ValueError, "too many jobs, or a bad OST count or policy");
        goto release;
    }
    if (_check_simulate(in, outage, state, n, ost_slots))
        goto release;
    const int64_t *offsets = in[5].buf;
    const int32_t *osts = in[6].buf, *outage_ost = outage[0].buf;
    Py_ssize_t outages = outage[0].len / (Py_ssize_t)sizeof(int32_t);
    sk_schedule_input input = {
        .job_count = n, .submit = in[0].buf, .run_time = in[1].buf, .limit = in[2].buf,
        .input_bytes = in[3].buf, .nodes = in[4].buf, .ost_offsets = offsets, .osts = osts,
        .ost_slots = ost_slots, .system_nodes = system_nodes, .backfill = backfill,
        .policy = policy, .patch_bandwidth = patch_bandwidth, .patch_latency = patch_latency,
        .outage_count = outages, .outage_ost = outage_ost, .outage_down = outage[1].buf,
        .outage_up = outage[2].buf};
    sk_schedule_state st = {state[0].buf, state[1].buf, state[2].buf, state[3].buf, state[4].buf,
                            state[5].buf, state[6].buf, state[7].buf};
    sk_schedule_totals totals;
    int status = sk_schedule_run(&input, &st, &log, &totals,
                                 progress == Py_None ? NULL : _call_progress, progress);
    if (status == SK_SCHEDULE_E_MEMORY) {
        PyErr_NoMemory();
    } else if (status == SK_SCHEDULE_E_STUCK) {
        PyErr_Format(PyExc_AssertionError, "%lld queued job(s) can never start",
                     (long long)totals.stuck_jobs);
    } else if (status == SK_SCHEDULE_E_RESERVE) {
        PyErr_Format(PyExc_AssertionError, "job at index %lld can never start",
                     (long long)totals.stuck_job);
    } else if (status == 0) {
        answer = Py_BuildValue(
            "y#y#y#dL", (const char *)log.time, (Py_ssize_t)(log.count * sizeof *log.time),
            (const char *)log.kind, (Py_ssize_t)(log.count * sizeof *log.kind),
            (const char *)log.job, (Py_ssize_t)(log.count * sizeof *log.job),
            totals.busy_node_seconds, (long long)totals.failures);
    }
release:
    sk_schedule_log_free(&log);
    for (int i = 0; i < _INPUTS; i++)
        PyBuffer_Release(&in[i]);
    for (int i = 0; i < _OUTAGES; i++)
        PyBuffer_Release(&outage[i]);
    for (int i = 0; i < _STATES; i++)
        PyBuffer_Release(&state[i]);
    return answer;
}

static PyObject *_replicate(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {
        "log_time", "log_kind", "log_job", "nodes", "input_bytes", "end", "system_nodes",
        "first_submit", "last_end", "order", "alpha", "threshold", "copy_bandwidth",
        "scratch_bytes", "samples", "progress", "progress_events", NULL};
    Py_buffer buffers[6] = {{0}};
    long long system_nodes, samples, progress_events;
    double first_submit, last_end, alpha, threshold, copy_bandwidth, scratch_bytes;
    int order;
    PyObject *progress, *answer = NULL;
    double *space = NULL;
    uint8_t *at_risk = NULL;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*y*y*y*y*y*LddiddddLOL", keywords,
                                     &buffers[0], &buffers[1], &buffers[2], &buffers[3],
                                     &buffers[4], &buffers[5], &system_nodes, &first_submit,
                                     &last_end, &order, &alpha, &threshold, &copy_bandwidth,
                                     &scratch_bytes, &samples, &progress, &progress_events))
        return NULL;
    Py_ssize_t events = buffers[0].len / (Py_ssize_t)sizeof(double);
    Py_ssize_t jobs = buffers[3].len / (Py_ssize_t)sizeof(int32_t);
    if (system_nodes < 0 || samples < 1 || progress_events < 1
        || (order != SK_ORDER_FCFS && order != SK_ORDER_DISPATCH)) {
        PyErr_SetString(PyExc_ValueError, "bad system size, samples, progress step or order");
        goto release;
    }
    if (_sized(&buffers[1], events, 1, "log_kind") || _sized(&buffers[2], events, sizeof(long), "log_job")
        || _sized(&buffers[4], jobs, sizeof(double), "input_bytes")
        || _sized(&buffers[5], jobs, sizeof(double), "end"))
        goto release;
    space = malloc((size_t)samples * sizeof *space);
    at_risk = calloc(jobs > 0 ? (size_t)jobs : 1, 1);
    if (!space || !at_risk) {
        PyErr_NoMemory();
        goto release;
    }
    sk_replication_input input = {
        .log_count = (size_t)events, .log_time = buffers[0].buf, .log_kind = buffers[1].buf,
        .log_job = buffers[2].buf, .job_count = jobs, .nodes = buffers[3].buf,
        .input_bytes = buffers[4].buf, .end = buffers[5].buf, .system_nodes = system_nodes,
        .first_submit = first_submit, .last_end = last_end, .order = order, .alpha = alpha,
        .threshold = threshold, .copy_bandwidth = copy_bandwidth, .scratch_bytes = scratch_bytes,
        .samples = samples, .progress_events = (size_t)progress_events};
    sk_replication_result result = {.space_samples = space, .at_risk = at_risk};
    int status = sk_replication_run(&input, &result,
                                    progress == Py_None ? NULL : _call_progress, progress);
    if (status == SK_REPLICATION_E_MEMORY)
        PyErr_NoMemory();
    else if (status == SK_REPLICATION_E_LOG)
        PyErr_SetString(PyExc_ValueError, "the schedule's log moves a job that is not queued");
    else if (status == SK_REPLICATION_E_NODES)
        PyErr_SetString(PyExc_ValueError, "the schedule's log runs a job larger than the system");
    else if (status == 0)
        answer = Py_BuildValue("LLy#y#", (long long)result.jobs_at_risk,
                               (long long)result.replicated_jobs, (const char *)space,
                               (Py_ssize_t)((size_t)samples * sizeof *space),
                               (const char *)at_risk, jobs);
release:
    free(space);
    free(at_risk);
    for (int i = 0; i < 6; i++)
        PyBuffer_Release(&buffers[i]);
    return answer;
}

/* parse_swf(text, limit): None when the text is not plain SWF (the Python reader's), else
 * (ints int64 bytes, floats float64 bytes, header offsets and lengths int64 bytes, records) */
static PyObject *_parse_swf(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer text;
    long long limit;
    if (!PyArg_ParseTuple(args, "y*L", &text, &limit))
        return NULL;
    struct sk_swf swf;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = sk_parse_swf(text.buf, (size_t)text.len, (int64_t)limit, &swf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&text);
    PyObject *answer = NULL;
    if (status == SK_SWF_E_MEMORY)
        PyErr_NoMemory();
    else if (status == SK_SWF_NOT_PLAIN)
        answer = Py_NewRef(Py_None);
    else
        /* y# makes None of a NULL buffer: none is NULL here (an empty one is "") */
        answer = Py_BuildValue(
            "y#y#y#L", swf.ints ? (const char *)swf.ints : "",
            (Py_ssize_t)((size_t)swf.records * SK_SWF_FIELDS * sizeof *swf.ints),
            swf.floats ? (const char *)swf.floats : "",
            (Py_ssize_t)((size_t)swf.records * 2 * sizeof *swf.floats),
            swf.headers ? (const char *)swf.headers : "",
            (Py_ssize_t)((size_t)swf.header_lines * 2 * sizeof *swf.headers),
            (long long)swf.records);
    sk_swf_free(&swf);
    return answer;
}

/* draw_inputs(words, index, count, mu, sigma, n, k, setsize): (fallback float64 bytes, osts
 * int32 bytes) as random.Random with that state draws them */
static PyObject *_draw_inputs(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer words;
    int index, k;
    long long count, n, setsize;
    double mu, sigma;
    if (!PyArg_ParseTuple(args, "y*iLddLiL", &words, &index, &count, &mu, &sigma, &n, &k,
                          &setsize))
        return NULL;
    struct sk_mt mt;
    if (_sized(&words, SK_MT_WORDS, sizeof(uint32_t), "words") || index < 0
        || index > SK_MT_WORDS || count < 0 || n < 1 || n >= (1LL << 31) || k < 1 || k > n) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "draw_inputs: index, count, n or k out of range");
        PyBuffer_Release(&words);
        return NULL;
    }
    memcpy(mt.words, words.buf, sizeof mt.words);
    mt.index = index;
    PyBuffer_Release(&words);
    double *fallback = malloc((size_t)(count ? count : 1) * sizeof *fallback);
    int32_t *osts = malloc((size_t)(count ? count : 1) * (size_t)k * sizeof *osts);
    PyObject *answer = NULL;
    int status = -1;
    if (fallback && osts) {
        Py_BEGIN_ALLOW_THREADS
        status = sk_draw_inputs(&mt, count, mu, sigma, n, k, setsize, fallback, osts);
        Py_END_ALLOW_THREADS
    }
    if (status)
        PyErr_NoMemory();
    else
        answer = Py_BuildValue("y#y#", (const char *)fallback,
                               (Py_ssize_t)((size_t)count * sizeof *fallback),
                               (const char *)osts,
                               (Py_ssize_t)((size_t)count * (size_t)k * sizeof *osts));
    free(fallback);
    free(osts);
    return answer;
}

static PyMethodDef _methods[] = {
    {"simulate", (PyCFunction)(void (*)(void))_simulate, METH_VARARGS | METH_KEYWORDS,
     "Replay the jobs' columns (schedule.h); returns (log times, kinds, jobs as bytes, busy "
     "node-seconds, failures) and writes each job's state into its buffers."},
    {"replicate", (PyCFunction)(void (*)(void))_replicate, METH_VARARGS | METH_KEYWORDS,
     "The replication decisions over a schedule's log (replication.h); returns (jobs at risk, "
     "replicated jobs, space samples as float64 bytes)."},
    {"read_columns", sk_read_columns, METH_VARARGS,
     "read_columns(jobs, names, kinds): attribute names[k] of every job as bytes of kind "
     "kinds[k] (d float64, q int64, i int32, ? 0/1), one pass over the jobs."},
    {"write_columns", sk_write_columns, METH_VARARGS,
     "write_columns(jobs, names, kinds, columns): the columns' values set back on the jobs."},
    {"read_int_lists", sk_read_int_lists, METH_VARARGS,
     "read_int_lists(jobs, name): every job's sequence of int32 attribute name flattened: "
     "(offsets int64 bytes, values int32 bytes, lowest, highest), None for both without values."},
    {"parse_swf", _parse_swf, METH_VARARGS,
     "parse_swf(text, limit): an SWF text's records as columns (workload.h), None when a "
     "line is not plain SWF."},
    {"draw_inputs", _draw_inputs, METH_VARARGS,
     "draw_inputs(words, index, count, mu, sigma, n, k, setsize): build_workload's random "
     "sizes and stripes as random.Random with that state draws them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef _module = {
    PyModuleDef_HEAD_INIT, "scratchkeeper.sim._native",
    "The trace replay's scheduler and replication cores in C (scratchkeeper/sim/native).", -1,
    _methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
    return PyModule_Create(&_module);
}
