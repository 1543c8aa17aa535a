/*
 * replica_flow.c - the push-relabel engine behind the paper's flow algorithms: blackbox,
 * integrated (Algorithms 5 and 7) and parallel (Algorithm 10, pthreads).  The problem and its
 * set-up helpers come from replica_select.c (replica_select_int.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "replica_select.h"
#include "replica_select_int.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- push-relabel engine -- */

/* The flow network of the replica-selection paper's Fig. 5: source -> bucket (1) -> disk (1)
 * -> sink (capacity of the disk at the current threshold).  Topology is shared read-only between threads. */
typedef struct {
    int32_t node_count, arc_count, source, sink;
    int32_t *first;      /* node_count + 1 */
    int32_t *head;
    int32_t *reverse;
    int32_t *initial;    /* capacity of each arc at zero flow (disk->sink arcs: 0) */
    int32_t *sink_arc;   /* per disk: its arc to the sink */
    int32_t *source_arc; /* per bucket: the source's arc to it */
} pr_network;

/* Everything a max-flow run changes: one per thread, copied to conserve flow. */
typedef struct {
    int32_t *residual;    /* arc_count */
    int32_t *excess;      /* node_count */
    int32_t *capacity;    /* per disk: current disk->sink capacity */
    /* scratch, not part of the conserved state */
    int32_t *height, *current, *active_next, *level_next, *level_prev, *queue;
    int32_t *active_top, *level_top; /* per height */
    int32_t max_active, max_level;
    int64_t work;
} pr_state;

static void _network_free(pr_network *g)
{
    free(g->first);
    free(g->head);
    free(g->reverse);
    free(g->initial);
    free(g->sink_arc);
    free(g->source_arc);
    memset(g, 0, sizeof *g);
}

static int _network_build(const sk_problem *p, pr_network *g)
{
    memset(g, 0, sizeof *g);
    int32_t S = p->bucket_count, N = p->disk_count;
    int32_t E = p->bucket_first[S];
    g->node_count = S + N + 2;
    g->source = S + N;
    g->sink = S + N + 1;
    g->arc_count = 2 * (S + E + N);
    g->first = calloc((size_t)g->node_count + 1, sizeof(int32_t));
    g->head = malloc(sizeof(int32_t) * (size_t)g->arc_count);
    g->reverse = malloc(sizeof(int32_t) * (size_t)g->arc_count);
    g->initial = malloc(sizeof(int32_t) * (size_t)g->arc_count);
    g->sink_arc = malloc(sizeof(int32_t) * (size_t)(N > 0 ? N : 1));
    g->source_arc = malloc(sizeof(int32_t) * (size_t)(S > 0 ? S : 1));
    int32_t *fill = malloc(sizeof(int32_t) * (size_t)g->node_count);
    if (!g->first || !g->head || !g->reverse || !g->initial || !g->sink_arc || !g->source_arc ||
        !fill) {
        free(fill);
        _network_free(g);
        return SK_E_NOMEM;
    }
    /* arc counts per node; a bucket lists its disks before its arc back to the source */
    for (int32_t b = 0; b < S; b++)
        g->first[b + 1] = p->bucket_first[b + 1] - p->bucket_first[b] + 1;
    for (int32_t d = 0; d < N; d++)
        g->first[S + d + 1] = p->degree[d] + 1;
    g->first[g->source + 1] = S;
    g->first[g->sink + 1] = N;
    for (int32_t v = 0; v < g->node_count; v++)
        g->first[v + 1] += g->first[v];
    memcpy(fill, g->first, sizeof(int32_t) * (size_t)g->node_count);
#define ADD_ARC(u, v, cap, out)                                                          \
    do {                                                                                 \
        int32_t a_ = fill[(u)]++, b_ = fill[(v)]++;                                      \
        g->head[a_] = (v);                                                               \
        g->head[b_] = (u);                                                               \
        g->reverse[a_] = b_;                                                             \
        g->reverse[b_] = a_;                                                             \
        g->initial[a_] = (cap);                                                          \
        g->initial[b_] = 0;                                                              \
        (out) = a_;                                                                      \
    } while (0)
    int32_t arc;
    for (int32_t b = 0; b < S; b++)
        for (int32_t i = p->bucket_first[b]; i < p->bucket_first[b + 1]; i++)
            ADD_ARC(b, S + p->bucket_disk[i], 1, arc);
    for (int32_t b = 0; b < S; b++)
        ADD_ARC(g->source, b, 1, g->source_arc[b]);
    for (int32_t d = 0; d < N; d++)
        ADD_ARC(S + d, g->sink, 0, g->sink_arc[d]);
#undef ADD_ARC
    (void)arc;
    free(fill);
    return SK_OK;
}

static void _state_free(pr_state *st)
{
    free(st->residual);
    free(st->excess);
    free(st->capacity);
    free(st->height);
    free(st->current);
    free(st->active_next);
    free(st->level_next);
    free(st->level_prev);
    free(st->queue);
    free(st->active_top);
    free(st->level_top);
    memset(st, 0, sizeof *st);
}

static int _state_init(const pr_network *g, int32_t disk_count, pr_state *st)
{
    memset(st, 0, sizeof *st);
    size_t n = (size_t)g->node_count, levels = n + 1;
    st->residual = malloc(sizeof(int32_t) * (size_t)g->arc_count);
    st->excess = calloc(n, sizeof(int32_t));
    st->capacity = calloc((size_t)(disk_count > 0 ? disk_count : 1), sizeof(int32_t));
    st->height = malloc(sizeof(int32_t) * n);
    st->current = malloc(sizeof(int32_t) * n);
    st->active_next = malloc(sizeof(int32_t) * n);
    st->level_next = malloc(sizeof(int32_t) * n);
    st->level_prev = malloc(sizeof(int32_t) * n);
    st->queue = malloc(sizeof(int32_t) * n);
    st->active_top = malloc(sizeof(int32_t) * levels);
    st->level_top = malloc(sizeof(int32_t) * levels);
    if (!st->residual || !st->excess || !st->capacity || !st->height || !st->current ||
        !st->active_next || !st->level_next || !st->level_prev || !st->queue ||
        !st->active_top || !st->level_top) {
        _state_free(st);
        return SK_E_NOMEM;
    }
    memcpy(st->residual, g->initial, sizeof(int32_t) * (size_t)g->arc_count);
    return SK_OK;
}

/* Forget all flow: the black-box restart. */
static void _state_reset(const pr_network *g, int32_t disk_count, pr_state *st)
{
    memcpy(st->residual, g->initial, sizeof(int32_t) * (size_t)g->arc_count);
    memset(st->excess, 0, sizeof(int32_t) * (size_t)g->node_count);
    memset(st->capacity, 0, sizeof(int32_t) * (size_t)(disk_count > 0 ? disk_count : 1));
}

/* Copy the conserved part (flows, excesses, capacities): StoreFlows/LoadFlows. */
static void _state_copy(const pr_network *g, int32_t disk_count, pr_state *to,
                        const pr_state *from)
{
    memcpy(to->residual, from->residual, sizeof(int32_t) * (size_t)g->arc_count);
    memcpy(to->excess, from->excess, sizeof(int32_t) * (size_t)g->node_count);
    memcpy(to->capacity, from->capacity, sizeof(int32_t) * (size_t)(disk_count > 0 ? disk_count : 1));
}

/* Set disk->sink capacities; the flow already on an arc must fit (callers only raise, or
 * lower after restoring a flow saved at a lower threshold). */
static int _state_set_capacities(const pr_network *g, int32_t disk_count, pr_state *st,
                                 const int32_t *capacity)
{
    for (int32_t d = 0; d < disk_count; d++) {
        int32_t a = g->sink_arc[d];
        int32_t flow = st->residual[g->reverse[a]];
        if (capacity[d] < flow)
            return SK_E_INTERNAL;
        st->residual[a] = capacity[d] - flow;
        st->capacity[d] = capacity[d];
    }
    return SK_OK;
}

static inline void _level_insert(pr_state *st, int32_t v, int32_t h)
{
    st->level_prev[v] = -1;
    st->level_next[v] = st->level_top[h];
    if (st->level_top[h] >= 0)
        st->level_prev[st->level_top[h]] = v;
    st->level_top[h] = v;
    if (h > st->max_level)
        st->max_level = h;
}

static inline void _level_remove(pr_state *st, int32_t v, int32_t h)
{
    if (st->level_prev[v] >= 0)
        st->level_next[st->level_prev[v]] = st->level_next[v];
    else
        st->level_top[h] = st->level_next[v];
    if (st->level_next[v] >= 0)
        st->level_prev[st->level_next[v]] = st->level_prev[v];
}

static inline void _activate(pr_state *st, int32_t v, int32_t h)
{
    st->active_next[v] = st->active_top[h];
    st->active_top[h] = v;
    if (h > st->max_active)
        st->max_active = h;
}

/* Exact distances to the sink in the residual graph (global relabelling); nodes that cannot
 * reach the sink get height n and sleep for this run. */
static void _global_relabel(const pr_network *g, pr_state *st)
{
    int32_t n = g->node_count;
    for (int32_t v = 0; v < n; v++)
        st->height[v] = n;
    for (int32_t h = 0; h <= n; h++) {
        st->active_top[h] = -1;
        st->level_top[h] = -1;
    }
    st->max_active = -1;
    st->max_level = 0;
    int32_t read = 0, write = 0;
    st->height[g->sink] = 0;
    st->queue[write++] = g->sink;
    while (read < write) {
        int32_t w = st->queue[read++];
        int32_t hw = st->height[w] + 1;
        for (int32_t a = g->first[w]; a < g->first[w + 1]; a++) {
            int32_t u = g->head[a];
            if (st->height[u] == n && u != g->source && st->residual[g->reverse[a]] > 0) {
                st->height[u] = hw;
                st->queue[write++] = u;
            }
        }
    }
    for (int32_t i = 0; i < write; i++) {
        int32_t v = st->queue[i];
        st->current[v] = g->first[v];
        _level_insert(st, v, st->height[v]);
        if (v != g->sink && st->excess[v] > 0)
            _activate(st, v, st->height[v]);
    }
    st->work = 0;
}

/* Gap: no node is left at height `gap`, so nothing above it can reach the sink. */
static void _gap(const pr_network *g, pr_state *st, int32_t gap)
{
    int32_t n = g->node_count;
    for (int32_t h = gap + 1; h <= st->max_level; h++) {
        for (int32_t v = st->level_top[h]; v >= 0; v = st->level_next[v])
            st->height[v] = n;
        st->level_top[h] = -1;
        st->active_top[h] = -1;
    }
    st->max_level = gap - 1;
    if (st->max_active > gap - 1)
        st->max_active = gap - 1;
}

/* Phase one of highest-label push-relabel from the state's preflow: afterwards excess[sink]
 * is the maximum flow value for the current capacities.  Unrouted excess stays where it is,
 * a valid preflow for any higher capacities. */
static int32_t _push_relabel(const pr_network *g, pr_state *st)
{
    int32_t n = g->node_count;
    /* INIT (Algorithm 6): saturate source arcs that still have room, keep all other flow */
    for (int32_t a = g->first[g->source]; a < g->first[g->source + 1]; a++) {
        int32_t delta = st->residual[a];
        if (delta > 0) {
            st->residual[a] = 0;
            st->residual[g->reverse[a]] += delta;
            st->excess[g->head[a]] += delta;
        }
    }
    const int64_t relabel_budget = 2 * (6 * (int64_t)n + g->arc_count);
    _global_relabel(g, st);
    while (st->max_active >= 0) {
        int32_t v = st->active_top[st->max_active];
        if (v < 0) {
            st->max_active--;
            continue;
        }
        st->active_top[st->max_active] = st->active_next[v];
        if (st->height[v] != st->max_active || st->excess[v] == 0)
            continue; /* stale entry */
        /* discharge v */
        while (st->excess[v] > 0) {
            int32_t hv = st->height[v];
            int32_t last = g->first[v + 1];
            int32_t a;
            for (a = st->current[v]; a < last; a++) {
                if (st->residual[a] == 0)
                    continue;
                int32_t w = g->head[a];
                if (st->height[w] != hv - 1)
                    continue;
                int32_t delta = st->excess[v] < st->residual[a] ? st->excess[v] : st->residual[a];
                st->residual[a] -= delta;
                st->residual[g->reverse[a]] += delta;
                if (w != g->sink && st->excess[w] == 0)
                    _activate(st, w, hv - 1);
                st->excess[w] += delta;
                st->excess[v] -= delta;
                if (st->excess[v] == 0)
                    break;
            }
            if (st->excess[v] == 0) {
                st->current[v] = a;
                break;
            }
            /* relabel */
            int32_t lowest = n, lowest_arc = g->first[v];
            for (a = g->first[v]; a < last; a++) {
                if (st->residual[a] > 0 && st->height[g->head[a]] < lowest) {
                    lowest = st->height[g->head[a]];
                    lowest_arc = a;
                }
            }
            st->work += 12 + (last - g->first[v]);
            _level_remove(st, v, hv);
            if (st->level_top[hv] < 0) {
                st->height[v] = n;
                _gap(g, st, hv);
                break;
            }
            int32_t new_height = lowest + 1;
            if (new_height >= n) {
                st->height[v] = n;
                break;
            }
            st->height[v] = new_height;
            st->current[v] = lowest_arc;
            _level_insert(st, v, new_height);
            if (new_height > st->max_active)
                st->max_active = new_height; /* keeps the loop invariant; v is not stacked */
        }
        if (st->work > relabel_budget)
            _global_relabel(g, st);
    }
    return st->excess[g->sink];
}

/* Read one disk per bucket off a complete flow. */
static int _flow_assignment(const sk_problem *p, const pr_network *g, const pr_state *st,
                            int32_t *local_assignment)
{
    int32_t S = p->bucket_count;
    for (int32_t b = 0; b < S; b++) {
        local_assignment[b] = -1;
        for (int32_t a = g->first[b]; a < g->first[b + 1]; a++) {
            int32_t w = g->head[a];
            if (w >= S && w < S + p->disk_count && st->residual[a] == 0 && g->initial[a] == 1) {
                local_assignment[b] = w - S;
                break;
            }
        }
        if (local_assignment[b] < 0)
            return SK_E_INTERNAL;
    }
    return SK_OK;
}

/* CapacityIncrement (Algorithm 3): raise every disk whose next slot is the cheapest, the
 * Proposition 2 bound respected.  Returns 0 when no disk can grow. */
static int _capacity_increment(const sk_problem *p, int32_t *capacity)
{
    double cheapest = INFINITY;
    for (int32_t d = 0; d < p->disk_count; d++)
        if (capacity[d] < p->degree[d]) {
            double t = _slot_time(p, d, capacity[d] + 1);
            if (t < cheapest)
                cheapest = t;
        }
    if (cheapest == INFINITY)
        return 0;
    for (int32_t d = 0; d < p->disk_count; d++)
        if (capacity[d] < p->degree[d] && _slot_time(p, d, capacity[d] + 1) == cheapest)
            capacity[d]++;
    return 1;
}

/* One probe of the capacity search: capacities for threshold t, then max flow. */
static int _probe(const sk_problem *p, const pr_network *g, pr_state *st, int32_t *capacity,
                  int fresh, int32_t *flow)
{
    if (fresh)
        _state_reset(g, p->disk_count, st);
    int status = _state_set_capacities(g, p->disk_count, st, capacity);
    if (status != SK_OK)
        return status;
    *flow = _push_relabel(g, st);
    return SK_OK;
}

/* Capacity incrementation until every bucket is routed (Algorithm 5's loop). */
static int _increment_until_routed(const sk_problem *p, const pr_network *g, pr_state *st,
                                   int32_t *capacity, int fresh, int64_t *probes)
{
    for (;;) {
        int32_t flow;
        int status = _probe(p, g, st, capacity, fresh, &flow);
        (*probes)++;
        if (status != SK_OK)
            return status;
        if (flow == p->bucket_count)
            return SK_OK;
        if (!_capacity_increment(p, capacity))
            return SK_E_INTERNAL;
    }
}

/* Binary capacity scaling (Algorithm 7 lines 1-15); conserve = keep flow between probes.
 * On return `best` holds the state at the largest infeasible threshold *t_low. */
static int _binary_capacity_scaling(const sk_problem *p, const pr_network *g, pr_state *trial,
                                    pr_state *best, int32_t *capacity, int conserve,
                                    double *t_low, int64_t *probes)
{
    double t_min = rs_smallest_time_for(p, NULL, p->disk_count, p->bucket_count) - p->min_cost;
    double t_max = rs_upper_bound(p);
    while (t_max - t_min >= p->min_cost) {
        double t_mid = t_min + (t_max - t_min) * 0.5;
        rs_capacities_at(p, t_mid, capacity);
        if (conserve)
            _state_copy(g, p->disk_count, trial, best);
        int32_t flow;
        int status = _probe(p, g, trial, capacity, !conserve, &flow);
        (*probes)++;
        if (status != SK_OK)
            return status;
        if (flow != p->bucket_count) {
            if (conserve)
                _state_copy(g, p->disk_count, best, trial); /* StoreFlows */
            t_min = t_mid;
        } else {
            t_max = t_mid;
        }
    }
    *t_low = t_min;
    return SK_OK;
}

static int _solve_flow_sequential(const sk_problem *p, const pr_network *g, int conserve,
                                  int32_t *local_assignment, int64_t *probes)
{
    pr_state trial, best;
    int32_t *capacity = calloc((size_t)(p->disk_count > 0 ? p->disk_count : 1), sizeof(int32_t));
    int status = _state_init(g, p->disk_count, &trial);
    if (status == SK_OK)
        status = _state_init(g, p->disk_count, &best);
    else
        memset(&best, 0, sizeof best);
    if (!capacity && status == SK_OK)
        status = SK_E_NOMEM;
    if (status == SK_OK) {
        if (conserve && p->homogeneous) {
            /* Algorithm 5: start at the Proposition 1 capacities and increment */
            rs_capacities_at(p, rs_smallest_time_for(p, NULL, p->disk_count, p->bucket_count),
                             capacity);
            status = _increment_until_routed(p, g, &best, capacity, 0, probes);
        } else {
            double t_low;
            status = _binary_capacity_scaling(p, g, &trial, &best, capacity, conserve, &t_low,
                                              probes);
            if (status == SK_OK) {
                rs_capacities_at(p, t_low, capacity); /* LoadFlows + CapacityScale(t_min) */
                status = _increment_until_routed(p, g, &best, capacity, !conserve, probes);
            }
        }
    }
    if (status == SK_OK)
        status = _flow_assignment(p, g, &best, local_assignment);
    _state_free(&trial);
    _state_free(&best);
    free(capacity);
    return status;
}

/* ---------------------------------------------------------------- parallel (Alg. 10) --- */

typedef struct {
    const sk_problem *problem;
    const pr_network *network;
    const pr_state *base;
    pr_state *state;
    int32_t *capacity;
    double threshold;
    int routed;
    int status;
} pr_probe_task;

static void _run_probe_task(pr_probe_task *task)
{
    _state_copy(task->network, task->problem->disk_count, task->state, task->base);
    rs_capacities_at(task->problem, task->threshold, task->capacity);
    int32_t flow = 0;
    task->status = _probe(task->problem, task->network, task->state, task->capacity, 0, &flow);
    task->routed = task->status == SK_OK && flow == task->problem->bucket_count;
}

/* Worker threads kept for one solve: each round the caller publishes one task per thread,
 * bumps `round` and waits until `remaining` drops to zero. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t wake, finished;
    pr_probe_task *tasks;
    int64_t round;
    int remaining;
    int stop;
} pr_pool;

typedef struct {
    pr_pool *pool;
    int index;
} pr_worker;

static void *_worker_main(void *arg)
{
    pr_worker *worker = arg;
    pr_pool *pool = worker->pool;
    int64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&pool->lock);
        while (!pool->stop && pool->round == seen)
            pthread_cond_wait(&pool->wake, &pool->lock);
        if (pool->stop) {
            pthread_mutex_unlock(&pool->lock);
            return NULL;
        }
        seen = pool->round;
        pthread_mutex_unlock(&pool->lock);
        _run_probe_task(&pool->tasks[worker->index]);
        pthread_mutex_lock(&pool->lock);
        if (--pool->remaining == 0)
            pthread_cond_signal(&pool->finished);
        pthread_mutex_unlock(&pool->lock);
    }
}

static int _solve_parallel(const sk_problem *p, const pr_network *g, int threads,
                           int32_t *local_assignment, int64_t *probes)
{
    int status = SK_OK;
    int slots = threads + 1; /* one state per thread plus the conserved base */
    pr_state *states = calloc((size_t)slots, sizeof(pr_state));
    pr_probe_task *tasks = calloc((size_t)threads, sizeof(pr_probe_task));
    pthread_t *threads_started = calloc((size_t)threads, sizeof(pthread_t));
    pr_worker *workers = calloc((size_t)threads, sizeof(pr_worker));
    int32_t *capacity = calloc((size_t)slots * (size_t)(p->disk_count > 0 ? p->disk_count : 1),
                               sizeof(int32_t));
    pr_pool pool = {.tasks = tasks, .round = 0, .remaining = 0, .stop = 0};
    int initialised = 0, started = 0, pool_ready = 0;
    if (!states || !tasks || !threads_started || !workers || !capacity)
        status = SK_E_NOMEM;
    for (; status == SK_OK && initialised < slots; initialised++)
        status = _state_init(g, p->disk_count, &states[initialised]);
    if (status == SK_OK && threads > 1) {
        if (pthread_mutex_init(&pool.lock, NULL) != 0)
            status = SK_E_THREAD;
        else if (pthread_cond_init(&pool.wake, NULL) != 0) {
            pthread_mutex_destroy(&pool.lock);
            status = SK_E_THREAD;
        } else if (pthread_cond_init(&pool.finished, NULL) != 0) {
            pthread_cond_destroy(&pool.wake);
            pthread_mutex_destroy(&pool.lock);
            status = SK_E_THREAD;
        } else {
            pool_ready = 1;
        }
        for (int i = 1; status == SK_OK && i < threads; i++) {
            workers[i] = (pr_worker){&pool, i};
            if (pthread_create(&threads_started[i], NULL, _worker_main, &workers[i]) != 0)
                status = SK_E_THREAD;
            else
                started = i;
        }
    }
    size_t stride = (size_t)(p->disk_count > 0 ? p->disk_count : 1);
    int base = 0;
    double t_min = 0.0, t_max = 0.0;
    if (status == SK_OK) {
        t_min = rs_smallest_time_for(p, NULL, p->disk_count, p->bucket_count) - p->min_cost;
        t_max = rs_upper_bound(p);
    }
    while (status == SK_OK && t_max - t_min >= p->min_cost) {
        /* thread i probes the i-th of `threads` evenly spaced points inside (t_min, t_max) */
        int slot = 0;
        for (int i = 0; i < threads; i++) {
            if (slot == base)
                slot++;
            tasks[i] = (pr_probe_task){p, g, &states[base], &states[slot],
                                       capacity + stride * (size_t)slot,
                                       t_min + (t_max - t_min) * (double)(i + 1) / (double)(threads + 1),
                                       0, SK_OK};
            slot++;
        }
        if (threads > 1) {
            pthread_mutex_lock(&pool.lock);
            pool.remaining = threads - 1;
            pool.round++;
            pthread_cond_broadcast(&pool.wake);
            pthread_mutex_unlock(&pool.lock);
        }
        _run_probe_task(&tasks[0]);
        if (threads > 1) {
            pthread_mutex_lock(&pool.lock);
            while (pool.remaining > 0)
                pthread_cond_wait(&pool.finished, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
        }
        *probes += threads;
        int first_routed = threads;
        for (int i = 0; i < threads; i++) {
            if (tasks[i].status != SK_OK)
                status = tasks[i].status;
            if (tasks[i].routed && first_routed == threads)
                first_routed = i;
        }
        if (status != SK_OK)
            break;
        if (first_routed < threads)
            t_max = tasks[first_routed].threshold;
        if (first_routed > 0) {
            /* conserve the flow of the highest infeasible probe below the optimum */
            pr_probe_task *below = &tasks[first_routed - 1];
            t_min = below->threshold;
            base = (int)(below->state - states);
        }
    }
    if (pool_ready) {
        pthread_mutex_lock(&pool.lock);
        pool.stop = 1;
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
        for (int i = 1; i <= started; i++)
            pthread_join(threads_started[i], NULL);
        pthread_cond_destroy(&pool.finished);
        pthread_cond_destroy(&pool.wake);
        pthread_mutex_destroy(&pool.lock);
    }
    if (status == SK_OK) {
        /* the rest is Algorithm 5 on the conserved flow, one thread */
        int32_t *final_capacity = capacity + stride * (size_t)base;
        rs_capacities_at(p, t_min, final_capacity);
        status = _increment_until_routed(p, g, &states[base], final_capacity, 0, probes);
    }
    if (status == SK_OK)
        status = _flow_assignment(p, g, &states[base], local_assignment);
    for (int i = 0; i < initialised; i++)
        _state_free(&states[i]);
    free(states);
    free(tasks);
    free(threads_started);
    free(workers);
    free(capacity);
    return status;
}

/* ---------------------------------------------------------------- entry ---------------- */

/* Build p's flow network and run blackbox, integrated or parallel on it. */
int rs_solve_flow(const sk_problem *p, int algorithm, int threads, int32_t *local_assignment,
                  int64_t *probes)
{
    pr_network network;
    int status = _network_build(p, &network);
    if (status == SK_OK) {
        if (algorithm == SK_ALG_PARALLEL)
            status = _solve_parallel(p, &network, threads, local_assignment, probes);
        else
            status = _solve_flow_sequential(p, &network, algorithm == SK_ALG_INTEGRATED,
                                            local_assignment, probes);
        _network_free(&network);
    }
    return status;
}
