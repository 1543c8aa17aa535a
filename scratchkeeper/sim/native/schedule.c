/*
 * schedule.c - the scheduler model's event loop (schedule.h), written to follow
 * scratchkeeper/sim/scheduler.py step by step: the same events in the same order (time, kind,
 * push sequence), the queue in FCFS order with a move to the tail, the running jobs in start
 * order, the same sums in the same order.
 *
 * The queue is an array in FCFS order with holes where jobs left it (compacted when it is
 * full of holes), with a tree of minimum node counts and limits over it: the backfilling pass
 * jumps from one job it can start to the next instead of reading the thousands between (which
 * the Python model reads and skips). The running jobs' expected-end order is a sorted
 * array, as in the Python model.
 */
#include "schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* event kinds, in the order events of one instant are handled */
enum { _END = 0, _DOWN = 1, _UP = 2, _READY = 3 };

#define _PROGRESS_JOBS 4096

typedef struct {
    double when;
    int64_t seq;
    int64_t version;     /* _END: the job's version when pushed */
    int32_t kind;
    int32_t ref;         /* _END: job; _DOWN, _UP: outage; _READY: -1 */
} _event;

typedef struct {
    double ready_at;
    double limit;
    int32_t nodes;
    int32_t job;         /* -1: a hole left by a job that left the queue */
} _queued;

typedef struct {
    double expected_end;
    int32_t job;
    int32_t nodes;
} _expected;

typedef struct {
    const sk_schedule_input *in;
    sk_schedule_state *st;
    sk_schedule_log *log;
    _event *events;
    size_t event_count, event_capacity;
    int64_t seq;
    _queued *queue;
    size_t queue_len, queue_capacity, queue_first, queue_live;
    int64_t *queue_pos;          /* per job: its place in queue, or -1 */
    int32_t *fit_nodes;          /* min nodes over queue places (holes: INT32_MAX), 1-based heap */
    double *fit_limit;           /* min limit over the same (holes: infinity) */
    size_t fit_base;             /* leaves start here: a power of two >= queue_capacity */
    int32_t *run_prev, *run_next;
    uint8_t *is_running;
    int32_t run_head, run_tail;
    int64_t running;
    _expected *by_end;           /* capacity: one per job */
    size_t by_end_len;
    double *expected_end;        /* per running job: its key in by_end */
    double *down_until;          /* per OST */
    uint8_t *down;
    int64_t down_count;
    int32_t *hits;               /* scratch: the jobs one outage hits */
    int64_t free;
    double busy;
    int64_t ended;
    int32_t head;                /* the blocked head of the last full pass, or -1 */
    double shadow;
    int64_t extra;
    int64_t failures;
} _replay;

/* ------------------------------------------------------------------ events */

static int _event_before(const _event *a, const _event *b)
{
    if (a->when != b->when)
        return a->when < b->when;
    if (a->kind != b->kind)
        return a->kind < b->kind;
    return a->seq < b->seq;
}

static int _push(_replay *r, double when, int32_t kind, int32_t ref, int64_t version)
{
    if (r->event_count == r->event_capacity) {
        size_t capacity = r->event_capacity ? 2 * r->event_capacity : 1024;
        _event *grown = realloc(r->events, capacity * sizeof *grown);
        if (!grown)
            return SK_SCHEDULE_E_MEMORY;
        r->events = grown;
        r->event_capacity = capacity;
    }
    _event item = {when, ++r->seq, version, kind, ref};
    size_t i = r->event_count++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!_event_before(&item, &r->events[parent]))
            break;
        r->events[i] = r->events[parent];
        i = parent;
    }
    r->events[i] = item;
    return 0;
}

static _event _pop(_replay *r)
{
    _event top = r->events[0];
    _event last = r->events[--r->event_count];
    size_t n = r->event_count, i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && _event_before(&r->events[child + 1], &r->events[child]))
            child++;
        if (!_event_before(&r->events[child], &last))
            break;
        r->events[i] = r->events[child];
        i = child;
    }
    if (n)
        r->events[i] = last;
    return top;
}

static int _log(_replay *r, double when, int8_t kind, int32_t job)
{
    sk_schedule_log *log = r->log;
    if (log->count == log->capacity) {
        size_t capacity = log->capacity ? 2 * log->capacity : 4096;
        double *time = realloc(log->time, capacity * sizeof *time);
        if (time)
            log->time = time;
        int8_t *kinds = realloc(log->kind, capacity * sizeof *kinds);
        if (kinds)
            log->kind = kinds;
        long *jobs = realloc(log->job, capacity * sizeof *jobs);
        if (jobs)
            log->job = jobs;
        if (!time || !kinds || !jobs)
            return SK_SCHEDULE_E_MEMORY;
        log->capacity = capacity;
    }
    log->time[log->count] = when;
    log->kind[log->count] = kind;
    log->job[log->count] = job;
    log->count++;
    return 0;
}

/* ------------------------------------------------------------------ the queue (FCFS order) */

static void _fit_set(_replay *r, size_t place, int32_t nodes, double limit)
{
    size_t i = r->fit_base + place;
    r->fit_nodes[i] = nodes;
    r->fit_limit[i] = limit;
    for (i /= 2; i; i /= 2) {
        int32_t left = r->fit_nodes[2 * i], right = r->fit_nodes[2 * i + 1];
        double left_limit = r->fit_limit[2 * i], right_limit = r->fit_limit[2 * i + 1];
        int32_t low = left < right ? left : right;
        double short_limit = left_limit < right_limit ? left_limit : right_limit;
        if (r->fit_nodes[i] == low && r->fit_limit[i] == short_limit)
            break;
        r->fit_nodes[i] = low;
        r->fit_limit[i] = short_limit;
    }
}

/* The tree over every place of the queue, rebuilt after the places moved or grew. */
static int _fit_rebuild(_replay *r)
{
    size_t base = 1;
    while (base < r->queue_capacity)
        base *= 2;
    if (base != r->fit_base) {
        int32_t *nodes = realloc(r->fit_nodes, 2 * base * sizeof *nodes);
        if (nodes)
            r->fit_nodes = nodes;
        double *limits = realloc(r->fit_limit, 2 * base * sizeof *limits);
        if (limits)
            r->fit_limit = limits;
        if (!nodes || !limits)
            return SK_SCHEDULE_E_MEMORY;
        r->fit_base = base;
    }
    for (size_t i = 0; i < base; i++) {
        int live = i < r->queue_len && r->queue[i].job >= 0;
        r->fit_nodes[base + i] = live ? r->queue[i].nodes : INT32_MAX;
        r->fit_limit[base + i] = live ? r->queue[i].limit : INFINITY;
    }
    for (size_t i = base - 1; i; i--) {
        int32_t left = r->fit_nodes[2 * i], right = r->fit_nodes[2 * i + 1];
        double left_limit = r->fit_limit[2 * i], right_limit = r->fit_limit[2 * i + 1];
        r->fit_nodes[i] = left < right ? left : right;
        r->fit_limit[i] = left_limit < right_limit ? left_limit : right_limit;
    }
    return 0;
}

/* Whether tree node i may hold a job that backfilling starts: one that fits in the free nodes
 * and either ends by the shadow time or takes no more than the extra nodes. Exact for a place,
 * a bound for a subtree (now + limit grows with the limit, rounding included). */
static int _may_backfill(const _replay *r, size_t i, double now, int64_t extra)
{
    int32_t nodes = r->fit_nodes[i];
    return nodes <= r->free && (now + r->fit_limit[i] <= r->shadow || nodes <= extra);
}

/* The first place at or after from holding a job backfilling starts (held jobs aside), or
 * queue_len: an in-order walk of the tree that skips every subtree without one. */
static size_t _next_backfill(const _replay *r, size_t from, double now, int64_t extra)
{
    if (from >= r->queue_len)
        return r->queue_len;
    size_t i = r->fit_base + from;
    for (;;) {
        if (_may_backfill(r, i, now, extra)) {
            if (i >= r->fit_base)
                break;
            i = 2 * i;
            continue;
        }
        while (i & 1)
            i /= 2;         /* a right child: its parent's subtree is done */
        if (i == 0)
            return r->queue_len;
        i++;
    }
    size_t place = i - r->fit_base;
    return place < r->queue_len ? place : r->queue_len;
}

static void _queue_compact(_replay *r)
{
    size_t kept = 0;
    for (size_t i = r->queue_first; i < r->queue_len; i++) {
        if (r->queue[i].job < 0)
            continue;
        r->queue[kept] = r->queue[i];
        r->queue_pos[r->queue[kept].job] = (int64_t)kept;
        kept++;
    }
    r->queue_len = kept;
    r->queue_first = 0;
}

static int _queue_push(_replay *r, int32_t job)
{
    if (r->queue_len == r->queue_capacity) {
        if (r->queue_live <= r->queue_len / 2 && r->queue_len > 0) {
            _queue_compact(r);
        } else {
            size_t capacity = r->queue_capacity ? 2 * r->queue_capacity : 1024;
            _queued *grown = realloc(r->queue, capacity * sizeof *grown);
            if (!grown)
                return SK_SCHEDULE_E_MEMORY;
            r->queue = grown;
            r->queue_capacity = capacity;
        }
        if (_fit_rebuild(r))
            return SK_SCHEDULE_E_MEMORY;
    }
    const sk_schedule_input *in = r->in;
    r->queue[r->queue_len] = (_queued){r->st->ready_at[job], in->limit[job], in->nodes[job], job};
    r->queue_pos[job] = (int64_t)r->queue_len;
    _fit_set(r, r->queue_len, in->nodes[job], in->limit[job]);
    r->queue_len++;
    r->queue_live++;
    return 0;
}

static void _queue_remove(_replay *r, int32_t job)
{
    size_t place = (size_t)r->queue_pos[job];
    r->queue[place].job = -1;
    _fit_set(r, place, INT32_MAX, INFINITY);
    r->queue_pos[job] = -1;
    r->queue_live--;
    while (r->queue_first < r->queue_len && r->queue[r->queue_first].job < 0)
        r->queue_first++;
    if (r->queue_live == 0)
        r->queue_len = r->queue_first = 0;
}

/* ------------------------------------------------------------------ running jobs */

static int _expected_before(double end, int32_t job, const _expected *entry)
{
    return end < entry->expected_end || (end == entry->expected_end && job < entry->job);
}

static void _by_end_add(_replay *r, double expected_end, int32_t job)
{
    r->expected_end[job] = expected_end;
    if (!r->in->backfill)
        return;     /* only backfilling's reservation reads the order */
    size_t lo = 0, hi = r->by_end_len;
    while (lo < hi) {       /* bisect_right on (expected end, job) */
        size_t mid = lo + (hi - lo) / 2;
        if (_expected_before(expected_end, job, &r->by_end[mid]))
            hi = mid;
        else
            lo = mid + 1;
    }
    memmove(&r->by_end[lo + 1], &r->by_end[lo], (r->by_end_len - lo) * sizeof *r->by_end);
    r->by_end[lo] = (_expected){expected_end, job, r->in->nodes[job]};
    r->by_end_len++;
}

static void _by_end_remove(_replay *r, int32_t job)
{
    if (!r->in->backfill)
        return;
    double expected_end = r->expected_end[job];
    size_t lo = 0, hi = r->by_end_len;
    while (lo < hi) {       /* bisect_left: the job's own entry */
        size_t mid = lo + (hi - lo) / 2;
        const _expected *entry = &r->by_end[mid];
        if (entry->expected_end < expected_end
            || (entry->expected_end == expected_end && entry->job < job))
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(&r->by_end[lo], &r->by_end[lo + 1], (r->by_end_len - lo - 1) * sizeof *r->by_end);
    r->by_end_len--;
}

static void _running_add(_replay *r, int32_t job)
{
    r->is_running[job] = 1;
    r->run_prev[job] = r->run_tail;
    r->run_next[job] = -1;
    if (r->run_tail >= 0)
        r->run_next[r->run_tail] = job;
    else
        r->run_head = job;
    r->run_tail = job;
    r->running++;
}

static void _running_remove(_replay *r, int32_t job)
{
    int32_t prev = r->run_prev[job], next = r->run_next[job];
    if (prev >= 0)
        r->run_next[prev] = next;
    else
        r->run_head = next;
    if (next >= 0)
        r->run_prev[next] = prev;
    else
        r->run_tail = prev;
    r->is_running[job] = 0;
    r->running--;
}

/* ------------------------------------------------------------------ job life */

static int _hold(_replay *r, int32_t job, double until)
{
    if (until > r->st->ready_at[job]) {
        r->st->ready_at[job] = until;
        if (r->queue_pos[job] >= 0)
            r->queue[r->queue_pos[job]].ready_at = until;
        return _push(r, until, _READY, -1, 0);
    }
    return 0;
}

static double _patch_seconds(_replay *r, int32_t job, int64_t lost_stripes)
{
    const sk_schedule_input *in = r->in;
    double per_ost = in->input_bytes[job]
                     / (double)(in->ost_offsets[job + 1] - in->ost_offsets[job]);
    double seconds = in->patch_latency + (double)lost_stripes * per_ost / in->patch_bandwidth;
    r->st->recovery_seconds[job] += seconds;
    return seconds;
}

static int _submit(_replay *r, int32_t job, double now)
{
    const sk_schedule_input *in = r->in;
    if (_queue_push(r, job) || _log(r, now, SK_LOG_ENTER, job))
        return SK_SCHEDULE_E_MEMORY;
    if (!r->down_count)
        return 0;
    int64_t lost = 0;
    double until = 0.0;
    for (int64_t k = in->ost_offsets[job]; k < in->ost_offsets[job + 1]; k++) {
        int32_t ost = in->osts[k];
        if (!r->down[ost])
            continue;
        if (!lost || r->down_until[ost] > until)
            until = r->down_until[ost];
        lost++;
    }
    if (!lost)
        return 0;
    /* The stage-in landed on a failed target: affected before it ever ran. */
    r->st->affected[job] = 1;
    if (in->policy == SK_POLICY_NONE)
        return _hold(r, job, until);
    return _hold(r, job, now + _patch_seconds(r, job, lost));
}

static int _start(_replay *r, int32_t job, double now)
{
    sk_schedule_state *st = r->st;
    _queue_remove(r, job);
    r->free -= r->in->nodes[job];
    st->start[job] = now;
    if (st->first_start[job] < 0)
        st->first_start[job] = now;
    st->end[job] = now + r->in->run_time[job];
    _running_add(r, job);
    _by_end_add(r, now + r->in->limit[job], job);
    if (_push(r, st->end[job], _END, job, st->version[job]))
        return SK_SCHEDULE_E_MEMORY;
    return _log(r, now, SK_LOG_START, job);
}

static int _finish(_replay *r, int32_t job, double now)
{
    int32_t nodes = r->in->nodes[job];
    r->free += nodes;
    _running_remove(r, job);
    _by_end_remove(r, job);
    r->busy += (double)nodes * (now - r->st->start[job]);
    r->ended++;
    return _log(r, now, SK_LOG_STOP, job);
}

/* Move job to the tail of the queue, killing it first if it runs. */
static int _requeue(_replay *r, int32_t job, double now)
{
    sk_schedule_state *st = r->st;
    if (r->is_running[job]) {
        int32_t nodes = r->in->nodes[job];
        st->version[job]++;         /* its pending end event is void now */
        st->kills[job]++;
        r->free += nodes;
        _running_remove(r, job);
        _by_end_remove(r, job);
        r->busy += (double)nodes * (now - st->start[job]);
        st->end[job] = -1.0;
        if (_log(r, now, SK_LOG_STOP, job))
            return SK_SCHEDULE_E_MEMORY;
    } else {
        _queue_remove(r, job);
        if (_log(r, now, SK_LOG_REQUEUE, job))
            return SK_SCHEDULE_E_MEMORY;
    }
    if (_queue_push(r, job))
        return SK_SCHEDULE_E_MEMORY;
    return _log(r, now, SK_LOG_ENTER, job);
}

static int _uses_ost(const sk_schedule_input *in, int32_t job, int32_t ost)
{
    for (int64_t k = in->ost_offsets[job]; k < in->ost_offsets[job + 1]; k++)
        if (in->osts[k] == ost)
            return 1;
    return 0;
}

static int _ost_down(_replay *r, int32_t outage, double now)
{
    const sk_schedule_input *in = r->in;
    sk_schedule_state *st = r->st;
    int32_t ost = in->outage_ost[outage];
    double up = in->outage_up[outage];
    int policy = in->policy;
    int status;
    r->failures++;
    double before = r->down[ost] ? r->down_until[ost] : 0.0;
    r->down_until[ost] = before > up ? before : up;
    if (!r->down[ost]) {
        r->down[ost] = 1;
        r->down_count++;
    }
    if ((status = _push(r, up, _UP, outage, 0)))
        return status;
    /* the jobs it hits, queued (in queue order) then running (in start order), before any moves */
    size_t queued_hits = 0, hit_count = 0;
    for (size_t i = r->queue_first; i < r->queue_len; i++) {
        int32_t job = r->queue[i].job;
        if (job >= 0 && _uses_ost(in, job, ost))
            r->hits[hit_count++] = job;
    }
    queued_hits = hit_count;
    for (int32_t job = r->run_head; job >= 0; job = r->run_next[job])
        if (_uses_ost(in, job, ost))
            r->hits[hit_count++] = job;
    for (size_t i = 0; i < queued_hits; i++) {
        int32_t job = r->hits[i];
        st->affected[job] = 1;
        if (policy == SK_POLICY_NONE) {
            if ((status = _requeue(r, job, now)) || (status = _hold(r, job, r->down_until[ost])))
                return status;
        } else if ((status = _hold(r, job, now + _patch_seconds(r, job, 1)))) {
            return status;
        }
    }
    for (size_t i = queued_hits; i < hit_count; i++) {
        int32_t job = r->hits[i];
        st->affected[job] = 1;
        if (policy == SK_POLICY_ON_THE_FLY) {
            /* The job keeps running while the stripe is patched and ends later by that much;
             * the scheduler knows it, so the reservation counts on the later end too. */
            st->version[job]++;
            double extension = _patch_seconds(r, job, 1);
            st->end[job] += extension;
            if ((status = _push(r, st->end[job], _END, job, st->version[job])))
                return status;
            double expected_end = r->expected_end[job];
            _by_end_remove(r, job);
            _by_end_add(r, expected_end + extension, job);
            continue;
        }
        if ((status = _requeue(r, job, now)))
            return status;
        double until = policy == SK_POLICY_NONE ? r->down_until[ost]
                                                : now + _patch_seconds(r, job, 1);
        if ((status = _hold(r, job, until)))
            return status;
    }
    return 0;
}

/* ------------------------------------------------------------------ scheduling passes */

/* Shadow time (when the head can start) and the nodes spare at that time. */
static int _reserve(_replay *r, int32_t head, double now, sk_schedule_totals *totals)
{
    int64_t available = r->free, need = r->in->nodes[head];
    for (size_t i = 0; i < r->by_end_len; i++) {
        available += r->by_end[i].nodes;
        if (available < need)
            continue;
        double expected_end = r->by_end[i].expected_end;
        double shadow = now > expected_end ? now : expected_end;
        /* every job expected to end by the shadow time frees its nodes then */
        for (size_t k = i + 1; k < r->by_end_len && !(r->by_end[k].expected_end > shadow); k++)
            available += r->by_end[k].nodes;
        r->shadow = shadow;
        r->extra = available - need;
        return 0;
    }
    totals->stuck_job = head;
    return SK_SCHEDULE_E_RESERVE;
}

/* FCFS from the head; then, with backfilling, EASY around the first job that does not fit. */
static int _full_pass(_replay *r, double now, sk_schedule_totals *totals)
{
    int32_t head = -1;
    int status;
    for (size_t i = r->queue_first; i < r->queue_len; i++) {
        _queued entry = r->queue[i];
        if (entry.job < 0 || entry.ready_at > now)
            continue;       /* held (data not there yet): it neither runs nor blocks */
        if (entry.nodes <= r->free) {
            if ((status = _start(r, entry.job, now)))
                return status;
        } else {
            head = entry.job;
            break;
        }
    }
    r->head = head;
    if (head < 0 || !r->in->backfill)
        return 0;
    if ((status = _reserve(r, head, now, totals)))
        return status;
    if (r->free == 0)
        return 0;
    int64_t extra = r->extra;
    double shadow = r->shadow;
    /* the jobs past the head that backfilling starts, one after the other: the Python model
     * reads the others and skips them */
    for (size_t i = _next_backfill(r, (size_t)r->queue_pos[head] + 1, now, extra);
         i < r->queue_len; i = _next_backfill(r, i + 1, now, extra)) {
        _queued entry = r->queue[i];
        if (entry.ready_at > now)
            continue;
        if (now + entry.limit <= shadow) {
            if ((status = _start(r, entry.job, now)))
                return status;
        } else if (entry.nodes <= extra) {
            extra -= entry.nodes;
            if ((status = _start(r, entry.job, now)))
                return status;
        }
        if (r->free == 0)
            break;
    }
    r->extra = extra;
    return 0;
}

/* Only new jobs arrived since the last full pass: each may backfill, nothing else changed. */
static int _arrivals_pass(_replay *r, double now, int64_t first, int64_t stop)
{
    const sk_schedule_input *in = r->in;
    int status;
    for (int64_t job = first; job < stop; job++) {
        if (r->st->ready_at[job] > now || in->nodes[job] > r->free)
            continue;
        if (now + in->limit[job] <= r->shadow) {
            if ((status = _start(r, (int32_t)job, now)))
                return status;
        } else if (in->nodes[job] <= r->extra) {
            r->extra -= in->nodes[job];
            if ((status = _start(r, (int32_t)job, now)))
                return status;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ main loop */

static int _handle_events(_replay *r, double now, int *full)
{
    int status;
    while (r->event_count && r->events[0].when == now) {
        _event event = _pop(r);
        if (event.kind == _END) {
            if (event.version == r->st->version[event.ref]) {
                if ((status = _finish(r, event.ref, now)))
                    return status;
                *full = 1;
            }
        } else if (event.kind == _DOWN) {
            if ((status = _ost_down(r, event.ref, now)))
                return status;
            *full = 1;
        } else if (event.kind == _UP) {
            int32_t ost = r->in->outage_ost[event.ref];
            if (r->down[ost] && r->down_until[ost] == r->in->outage_up[event.ref]) {
                r->down[ost] = 0;
                r->down_count--;
            }
        } else {
            *full = 1;
        }
    }
    return 0;
}

static int _loop(_replay *r, sk_schedule_totals *totals, sk_schedule_progress progress,
                 void *context)
{
    const sk_schedule_input *in = r->in;
    int64_t n = in->job_count, pointer = 0, last_report = 0;
    int status;
    for (int64_t job = 0; job < n; job++)
        r->st->ready_at[job] = in->submit[job];
    for (int64_t k = 0; k < in->outage_count; k++)
        if ((status = _push(r, in->outage_down[k], _DOWN, (int32_t)k, 0)))
            return status;
    /* Until every job has ended: outages after that change nothing and are not counted. */
    while (pointer < n || r->running || r->queue_live) {
        double next_submit = pointer < n ? in->submit[pointer] : INFINITY;
        double now;
        if (r->event_count && r->events[0].when <= next_submit) {
            now = r->events[0].when;
        } else if (pointer < n) {
            now = next_submit;
        } else {
            totals->stuck_jobs = (int64_t)r->queue_live;
            return SK_SCHEDULE_E_STUCK;
        }
        int full = 0;
        if ((status = _handle_events(r, now, &full)))
            return status;
        int64_t first_arrival = pointer;
        while (pointer < n && in->submit[pointer] == now) {
            if ((status = _submit(r, (int32_t)pointer, now)))
                return status;
            pointer++;
        }
        if (full || r->head < 0 || !in->backfill)
            status = _full_pass(r, now, totals);
        else
            status = _arrivals_pass(r, now, first_arrival, pointer);
        if (status)
            return status;
        if (progress && r->ended - last_report >= _PROGRESS_JOBS) {
            last_report = r->ended;
            if (progress(context, r->ended, n))
                return SK_SCHEDULE_E_PROGRESS;
        }
    }
    if (progress && progress(context, r->ended, n))
        return SK_SCHEDULE_E_PROGRESS;
    return 0;
}

int sk_schedule_run(const sk_schedule_input *input, sk_schedule_state *state,
                    sk_schedule_log *log, sk_schedule_totals *totals,
                    sk_schedule_progress progress, void *context)
{
    size_t n = (size_t)input->job_count, slots = (size_t)input->ost_slots;
    _replay r = {.in = input, .st = state, .log = log, .run_head = -1, .run_tail = -1,
                 .free = input->system_nodes, .head = -1};
    memset(totals, 0, sizeof *totals);
    r.queue_pos = malloc((n ? n : 1) * sizeof *r.queue_pos);
    r.run_prev = malloc((n ? n : 1) * sizeof *r.run_prev);
    r.run_next = malloc((n ? n : 1) * sizeof *r.run_next);
    r.is_running = calloc(n ? n : 1, 1);
    r.by_end = malloc((n ? n : 1) * sizeof *r.by_end);
    r.expected_end = malloc((n ? n : 1) * sizeof *r.expected_end);
    r.hits = malloc((n ? n : 1) * sizeof *r.hits);
    r.down_until = calloc(slots ? slots : 1, sizeof *r.down_until);
    r.down = calloc(slots ? slots : 1, 1);
    int status = SK_SCHEDULE_E_MEMORY;
    if (r.queue_pos && r.run_prev && r.run_next && r.is_running && r.by_end && r.expected_end
        && r.hits && r.down_until && r.down) {
        for (size_t job = 0; job < n; job++)
            r.queue_pos[job] = -1;
        status = _loop(&r, totals, progress, context);
    }
    totals->busy_node_seconds = r.busy;
    totals->failures = r.failures;
    free(r.events);
    free(r.queue);
    free(r.fit_nodes);
    free(r.fit_limit);
    free(r.queue_pos);
    free(r.run_prev);
    free(r.run_next);
    free(r.is_running);
    free(r.by_end);
    free(r.expected_end);
    free(r.hits);
    free(r.down_until);
    free(r.down);
    return status;
}

void sk_schedule_log_free(sk_schedule_log *log)
{
    free(log->time);
    free(log->kind);
    free(log->job);
    log->time = NULL;
    log->kind = NULL;
    log->job = NULL;
    log->count = log->capacity = 0;
}
