/*
 * replication.h - temporal replication replayed over a finished schedule's log, in C, decision
 * for decision as scratchkeeper/sim/replication.py with the window of
 * scratchkeeper/replication/window.py (RankedWindow): the Python pair is the reference the
 * tests compare this with, number for number.
 *
 * Plain C11, no globals.
 */
#ifndef SK_SIM_REPLICATION_H
#define SK_SIM_REPLICATION_H

#include <stddef.h>
#include <stdint.h>

/* the queue order of the window (STRATEGIES in replication.py; shortcut is fcfs with T > 0) */
enum { SK_ORDER_FCFS = 0, SK_ORDER_DISPATCH = 1 };

enum {
    SK_REPLICATION_E_MEMORY = 1,
    SK_REPLICATION_E_LOG = 2,        /* a dispatch or move of a job not in the queue, or an
                                        entry of a job already there */
    SK_REPLICATION_E_NODES = 3,      /* a job larger than the system */
    SK_REPLICATION_E_PROGRESS = 4,   /* the progress callback asked to stop */
};

typedef struct {
    /* the schedule's log (LOG_* kinds of scheduler.py) */
    size_t log_count;
    const double *log_time;
    const int8_t *log_kind;
    const long *log_job;
    /* the jobs */
    int64_t job_count;
    const int32_t *nodes;
    const double *input_bytes;
    const double *end;
    int64_t system_nodes;
    double first_submit;
    double last_end;
    /* the configuration */
    int order;
    double alpha;                 /* may be INFINITY: the whole queue */
    double threshold;             /* the shortcut's T; 0: none */
    double copy_bandwidth;
    double scratch_bytes;
    int64_t samples;
    size_t progress_events;       /* queue events between two progress calls */
} sk_replication_input;

typedef struct {
    int64_t jobs_at_risk;
    int64_t replicated_jobs;
    double *space_samples;        /* samples values, allocated by the caller */
    uint8_t *at_risk;             /* NULL, or job_count bytes zeroed by the caller: 1 per job
                                     at risk */
} sk_replication_result;

/* Called (when not NULL) every progress_events queue events and at the end; non-zero stops. */
typedef int (*sk_replication_progress)(void *context, int64_t done, int64_t events);

int sk_replication_run(const sk_replication_input *input, sk_replication_result *result,
                       sk_replication_progress progress, void *context);

#endif
