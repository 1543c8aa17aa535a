/*
 * replication.c - the replication daemon's decisions over a schedule's log (replication.h):
 * queue stints and their ranks, the ranked window (a Fenwick tree over the ranks, a min-heap of
 * the ranks not yet replicated, the pending shortcuts), jobs at risk and the replica space, in
 * the order and with the arithmetic of scratchkeeper/sim/replication.py.
 */
#include "replication.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* kinds of the schedule's log (LOG_* in scheduler.py) */
enum { _ENTER = 0, _START = 1, _REQUEUE = 2, _STOP = 3 };

typedef struct {
    int64_t size;
    int64_t top_bit;
    int64_t total;
    int64_t *tree;               /* Fenwick tree of requested nodes over the ranks, 1-based */
    int32_t *nodes;
    uint8_t *present;
    uint8_t *targeted;
    int64_t *unseen;             /* min-heap of present, untargeted ranks */
    int64_t unseen_count;
    int64_t *pending_shortcuts;
    int64_t pending_count;
    int64_t system_nodes;
    double alpha;
    double threshold;
} _window;

typedef struct {
    double close;
    int64_t stint;
} _closing;

typedef struct {
    double when;
    double bytes;
} _change;

static void _heap_push(_window *w, int64_t rank)
{
    int64_t i = w->unseen_count++;
    while (i > 0) {
        int64_t parent = (i - 1) / 2;
        if (w->unseen[parent] <= rank)
            break;
        w->unseen[i] = w->unseen[parent];
        i = parent;
    }
    w->unseen[i] = rank;
}

static void _heap_pop(_window *w)
{
    int64_t last = w->unseen[--w->unseen_count], n = w->unseen_count, i = 0;
    for (;;) {
        int64_t child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && w->unseen[child + 1] < w->unseen[child])
            child++;
        if (w->unseen[child] >= last)
            break;
        w->unseen[i] = w->unseen[child];
        i = child;
    }
    if (n)
        w->unseen[i] = last;
}

static int _is_shortcut(const _window *w, int32_t nodes)
{
    return w->threshold > 0 && (double)nodes <= w->threshold * (double)w->system_nodes;
}

static int _enter(_window *w, int64_t rank, int32_t nodes)
{
    if (w->present[rank])
        return SK_REPLICATION_E_LOG;
    w->present[rank] = 1;
    w->nodes[rank] = nodes;
    w->total += nodes;
    for (int64_t i = rank + 1; i <= w->size; i += i & -i)
        w->tree[i] += nodes;
    if (!w->targeted[rank]) {
        _heap_push(w, rank);
        if (_is_shortcut(w, nodes))
            w->pending_shortcuts[w->pending_count++] = rank;
    }
    return 0;
}

static int _leave(_window *w, int64_t rank)
{
    if (!w->present[rank])
        return SK_REPLICATION_E_LOG;
    w->present[rank] = 0;
    int32_t nodes = w->nodes[rank];
    w->total -= nodes;
    for (int64_t i = rank + 1; i <= w->size; i += i & -i)
        w->tree[i] -= nodes;
    return 0;
}

/* Highest rank inside the window: the smallest prefix reaching required nodes. */
static int64_t _boundary(const _window *w, double required)
{
    if (required <= 0)
        return -1;
    if ((double)w->total < required)
        return w->size - 1;     /* never reached: the whole queue */
    int64_t position = 0;
    double remaining = required;
    for (int64_t bit = w->top_bit; bit; bit >>= 1) {
        int64_t next = position + bit;
        if (next <= w->size && (double)w->tree[next] < remaining) {
            position = next;
            remaining -= (double)w->tree[next];
        }
    }
    return position;
}

static int _compare_closing(const void *a, const void *b)
{
    const _closing *x = a, *y = b;
    if (x->close != y->close)
        return x->close < y->close ? -1 : 1;
    return (x->stint > y->stint) - (x->stint < y->stint);
}

static int _compare_change(const void *a, const void *b)
{
    const _change *x = a, *y = b;
    if (x->when != y->when)
        return x->when < y->when ? -1 : 1;
    return (x->bytes > y->bytes) - (x->bytes < y->bytes);
}

/* Queue stints (one per entry into the queue) and the window rank of each. */
static int _stints(const sk_replication_input *in, int64_t *stint_job, int64_t *stint_of_rank,
                   int64_t count)
{
    int64_t *open_stint = malloc((size_t)(in->job_count ? in->job_count : 1) * sizeof *open_stint);
    _closing *closing = malloc((size_t)(count ? count : 1) * sizeof *closing);
    int status = SK_REPLICATION_E_MEMORY;
    if (!open_stint || !closing)
        goto done;
    for (int64_t job = 0; job < in->job_count; job++)
        open_stint[job] = -1;
    int64_t stints = 0;
    status = SK_REPLICATION_E_LOG;
    for (size_t i = 0; i < in->log_count; i++) {
        long job = in->log_job[i];
        int8_t kind = in->log_kind[i];
        if (job < 0 || job >= in->job_count)
            goto done;
        if (kind == _ENTER) {
            open_stint[job] = stints;
            stint_job[stints] = job;
            closing[stints] = (_closing){INFINITY, stints};
            stints++;
        } else if (kind == _START || kind == _REQUEUE) {
            if (open_stint[job] < 0)
                goto done;
            closing[open_stint[job]].close = in->log_time[i];
            open_stint[job] = -1;
        }
    }
    /* the oracle's queue order is the order in which jobs actually leave the queue */
    if (in->order == SK_ORDER_DISPATCH)
        qsort(closing, (size_t)count, sizeof *closing, _compare_closing);
    for (int64_t rank = 0; rank < count; rank++)
        stint_of_rank[rank] = closing[rank].stint;
    status = 0;
done:
    free(open_stint);
    free(closing);
    return status;
}

static void _advance(_window *w, int64_t largest, double now, const int64_t *stint_job,
                     const int64_t *stint_of_rank, double *requested_at)
{
    double required = INFINITY;
    if (!isinf(w->alpha)) {
        double share = w->alpha * (double)w->system_nodes;
        required = share > (double)largest ? share : (double)largest;
    }
    int64_t boundary = _boundary(w, required);
    while (w->unseen_count && w->unseen[0] <= boundary) {
        int64_t rank = w->unseen[0];
        _heap_pop(w);
        if (w->present[rank] && !w->targeted[rank]) {
            w->targeted[rank] = 1;
            int64_t job = stint_job[stint_of_rank[rank]];
            if (requested_at[job] < 0)
                requested_at[job] = now;
        }
    }
    for (int64_t k = 0; k < w->pending_count; k++) {
        int64_t rank = w->pending_shortcuts[k];
        if (w->present[rank] && !w->targeted[rank]) {
            w->targeted[rank] = 1;
            int64_t job = stint_job[stint_of_rank[rank]];
            if (requested_at[job] < 0)
                requested_at[job] = now;
        }
    }
    w->pending_count = 0;
}

typedef struct {
    int64_t *rank_of;            /* per stint */
    int64_t *current_rank;       /* per job: the rank of its open stint, or -1 */
    int64_t *running_count;      /* per node count */
    uint8_t *dispatched;
} _replay_state;

/* One instant of the log from index i: every queue event of it, then the window's decisions. */
static int _instant(const sk_replication_input *in, _window *w, _replay_state *s, size_t *index,
                    int64_t *stint_number, int64_t *largest, sk_replication_result *result,
                    const int64_t *stint_job, const int64_t *stint_of_rank, double *requested_at)
{
    size_t i = *index;
    double now = in->log_time[i];
    int status;
    for (; i < in->log_count && in->log_time[i] == now; i++) {
        int8_t kind = in->log_kind[i];
        long job = in->log_job[i];
        int32_t nodes = in->nodes[job];
        if (kind == _ENTER) {
            int64_t rank = s->rank_of[(*stint_number)++];
            s->current_rank[job] = rank;
            if ((status = _enter(w, rank, nodes)))
                return status;
            continue;
        }
        if (kind == _REQUEUE || kind == _START) {
            if (s->current_rank[job] < 0)
                return SK_REPLICATION_E_LOG;
            if ((status = _leave(w, s->current_rank[job])))
                return status;
            s->current_rank[job] = -1;
        }
        if (kind == _REQUEUE)
            continue;
        if (nodes < 0 || nodes > in->system_nodes)
            return SK_REPLICATION_E_NODES;
        if (kind == _START) {
            if (!s->dispatched[job]) {
                s->dispatched[job] = 1;
                double asked = requested_at[job];
                if (asked < 0 || asked + in->input_bytes[job] / in->copy_bandwidth > now) {
                    result->jobs_at_risk++;
                    if (result->at_risk)
                        result->at_risk[job] = 1;
                }
            }
            s->running_count[nodes]++;
            if (nodes > *largest)
                *largest = nodes;
        } else {
            s->running_count[nodes]--;
            while (*largest && s->running_count[*largest] == 0)
                (*largest)--;
        }
    }
    *index = i;
    _advance(w, *largest, now, stint_job, stint_of_rank, requested_at);
    return 0;
}

/* Replica bytes / scratch bytes at evenly spread instants of the replay. */
static int _space_samples(const sk_replication_input *in, const double *requested_at,
                          double *samples)
{
    int64_t replicated = 0;
    for (int64_t job = 0; job < in->job_count; job++)
        replicated += requested_at[job] >= 0;
    _change *changes = malloc((size_t)(replicated ? 2 * replicated : 1) * sizeof *changes);
    if (!changes)
        return SK_REPLICATION_E_MEMORY;
    size_t count = 0;
    for (int64_t job = 0; job < in->job_count; job++) {
        if (requested_at[job] >= 0) {
            changes[count++] = (_change){requested_at[job], in->input_bytes[job]};
            changes[count++] = (_change){in->end[job], -in->input_bytes[job]};
        }
    }
    qsort(changes, count, sizeof *changes, _compare_change);
    double start = in->first_submit, stop = in->last_end;
    double step = stop > start ? (stop - start) / (double)in->samples : 0.0;
    double held = 0.0;
    size_t k = 0;
    for (int64_t sample = 0; sample < in->samples; sample++) {
        double point = start + step * ((double)sample + 0.5);
        while (k < count && changes[k].when <= point)
            held += changes[k++].bytes;
        samples[sample] = (0.0 > held ? 0.0 : held) / in->scratch_bytes;
    }
    free(changes);
    return 0;
}

static int _replay(const sk_replication_input *in, _window *w, _replay_state *s,
                   const int64_t *stint_job, const int64_t *stint_of_rank, double *requested_at,
                   sk_replication_result *result, sk_replication_progress progress,
                   void *context)
{
    int64_t stint_number = 0, largest = 0;
    size_t i = 0, next_report = in->progress_events;
    int status;
    while (i < in->log_count) {
        if (progress && i >= next_report) {
            if (progress(context, (int64_t)i, (int64_t)in->log_count))
                return SK_REPLICATION_E_PROGRESS;
            next_report = i + in->progress_events;
        }
        if ((status = _instant(in, w, s, &i, &stint_number, &largest, result, stint_job,
                               stint_of_rank, requested_at)))
            return status;
    }
    if (progress && progress(context, (int64_t)in->log_count, (int64_t)in->log_count))
        return SK_REPLICATION_E_PROGRESS;
    for (int64_t job = 0; job < in->job_count; job++)
        result->replicated_jobs += requested_at[job] >= 0;
    return _space_samples(in, requested_at, result->space_samples);
}

int sk_replication_run(const sk_replication_input *in, sk_replication_result *result,
                       sk_replication_progress progress, void *context)
{
    int64_t count = 0;
    for (size_t i = 0; i < in->log_count; i++)
        count += in->log_kind[i] == _ENTER;
    size_t stints = (size_t)(count ? count : 1), jobs = (size_t)(in->job_count ? in->job_count : 1);
    _window w = {.size = count, .top_bit = 1, .system_nodes = in->system_nodes,
                 .alpha = in->alpha, .threshold = in->threshold};
    while (w.top_bit * 2 <= count)
        w.top_bit *= 2;         /* 1 << max(count.bit_length() - 1, 0) */
    w.tree = calloc(stints + 1, sizeof *w.tree);
    w.nodes = calloc(stints, sizeof *w.nodes);
    w.present = calloc(stints, 1);
    w.targeted = calloc(stints, 1);
    w.unseen = malloc(stints * sizeof *w.unseen);
    w.pending_shortcuts = malloc(stints * sizeof *w.pending_shortcuts);
    int64_t *stint_job = malloc(stints * sizeof *stint_job);
    int64_t *stint_of_rank = malloc(stints * sizeof *stint_of_rank);
    double *requested_at = malloc(jobs * sizeof *requested_at);
    _replay_state s = {
        .rank_of = malloc(stints * sizeof *s.rank_of),
        .current_rank = malloc(jobs * sizeof *s.current_rank),
        .running_count = calloc((size_t)in->system_nodes + 1, sizeof *s.running_count),
        .dispatched = calloc(jobs, 1),
    };
    result->jobs_at_risk = result->replicated_jobs = 0;
    int status = SK_REPLICATION_E_MEMORY;
    if (w.tree && w.nodes && w.present && w.targeted && w.unseen && w.pending_shortcuts
        && stint_job && stint_of_rank && requested_at && s.rank_of && s.current_rank
        && s.running_count && s.dispatched) {
        status = _stints(in, stint_job, stint_of_rank, count);
    }
    if (!status) {
        for (int64_t rank = 0; rank < count; rank++)
            s.rank_of[stint_of_rank[rank]] = rank;
        for (int64_t job = 0; job < in->job_count; job++) {
            requested_at[job] = -1.0;
            s.current_rank[job] = -1;
        }
        status = _replay(in, &w, &s, stint_job, stint_of_rank, requested_at, result, progress,
                         context);
    }
    free(w.tree);
    free(w.nodes);
    free(w.present);
    free(w.targeted);
    free(w.unseen);
    free(w.pending_shortcuts);
    free(stint_job);
    free(stint_of_rank);
    free(requested_at);
    free(s.rank_of);
    free(s.current_rank);
    free(s.running_count);
    free(s.dispatched);
    return status;
}
