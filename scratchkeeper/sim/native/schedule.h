/*
 * schedule.h - the trace replay's scheduler model in C: FCFS or FCFS with EASY backfilling on
 * whole nodes, OST failures and the three recovery policies, event for event as
 * scratchkeeper/sim/scheduler.py (the reference the tests compare it with).
 *
 * Plain C11, no globals. Times are doubles and are added in the same order as the Python
 * model, so every start time, every log entry and every total is bit-identical to it.
 */
#ifndef SK_SIM_SCHEDULE_H
#define SK_SIM_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

/* recovery policies, the order of POLICIES in scheduler.py */
enum { SK_POLICY_NONE = 0, SK_POLICY_PRE_EXECUTION = 1, SK_POLICY_ON_THE_FLY = 2 };

/* kinds of the chronological log (LOG_* in scheduler.py) */
enum { SK_LOG_ENTER = 0, SK_LOG_START = 1, SK_LOG_REQUEUE = 2, SK_LOG_STOP = 3 };

/* results other than 0 */
enum {
    SK_SCHEDULE_E_MEMORY = 1,    /* out of memory */
    SK_SCHEDULE_E_STUCK = 2,     /* queued jobs that nothing can ever start (a model bug) */
    SK_SCHEDULE_E_RESERVE = 3,   /* a head larger than every node there is (a model bug) */
    SK_SCHEDULE_E_PROGRESS = 4,  /* the progress callback asked to stop */
};

/* What the replay is given: the jobs sorted by submit time, the outages in the order given. */
typedef struct {
    int64_t job_count;
    const double *submit;
    const double *run_time;
    const double *limit;         /* the requested time, which backfilling trusts */
    const double *input_bytes;
    const int32_t *nodes;
    const int64_t *ost_offsets;  /* job j's OSTs are osts[ost_offsets[j] .. ost_offsets[j+1]) */
    const int32_t *osts;         /* dense OST numbers, each below ost_slots */
    int32_t ost_slots;
    int64_t system_nodes;
    int backfill;
    int policy;
    double patch_bandwidth;      /* bytes/s from the remote source */
    double patch_latency;        /* seconds before a patch starts */
    int64_t outage_count;
    const int32_t *outage_ost;
    const double *outage_down;
    const double *outage_up;
} sk_schedule_input;

/* Each job's state, read at the start (as the jobs carry it) and written as the replay goes. */
typedef struct {
    double *ready_at;
    double *first_start;
    double *start;
    double *end;
    double *recovery_seconds;
    int64_t *kills;
    int64_t *version;
    uint8_t *affected;
} sk_schedule_state;

/* The chronological log, grown by the replay; free it with sk_schedule_log_free. */
typedef struct {
    double *time;
    int8_t *kind;
    long *job;
    size_t count;
    size_t capacity;
} sk_schedule_log;

/* What the replay adds up. */
typedef struct {
    double busy_node_seconds;
    int64_t failures;
    int64_t stuck_jobs;          /* with SK_SCHEDULE_E_STUCK: the queued jobs */
    int64_t stuck_job;           /* with SK_SCHEDULE_E_RESERVE: the head */
} sk_schedule_totals;

/* Called (when not NULL) every 4096 ended jobs and once at the end; non-zero stops the replay. */
typedef int (*sk_schedule_progress)(void *context, int64_t ended, int64_t jobs);

int sk_schedule_run(const sk_schedule_input *input, sk_schedule_state *state,
                    sk_schedule_log *log, sk_schedule_totals *totals,
                    sk_schedule_progress progress, void *context);

void sk_schedule_log_free(sk_schedule_log *log);

#endif
