/*
 * replica_select.c - the solver core: problem set-up shared by all algorithms, the
 * push-relabel engine behind the paper's algorithms (blackbox, integrated, parallel) and the
 * candidate-time search (slotsearch).
 *
 * Times are doubles computed one way only, _slot_time(): (delay + load) + k * cost.  Every
 * comparison is between values computed by that function, so the algorithms agree exactly;
 * the Python layer scales decimal inputs to whole time units first so ties are true ties.
 */
#define _POSIX_C_SOURCE 200809L

#include "replica_select.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- problem set-up ----- */

/* A request with duplicates removed and only the disks that hold a requested bucket kept
 * ("local" disks 0..disk_count-1, global id in global_disk[]). */
typedef struct {
    int32_t bucket_count;
    int32_t disk_count;
    int32_t *bucket_first; /* bucket_count + 1: replicas of a bucket, local disk ids */
    int32_t *bucket_disk;
    int32_t *disk_first;   /* disk_count + 1: buckets having a replica on the disk */
    int32_t *disk_bucket;
    int32_t *degree;       /* distinct requested buckets per disk (Proposition 2 bound) */
    int32_t *global_disk;
    double *base;          /* delay + load */
    double *cost;
    double min_cost;
    int homogeneous;       /* every used disk has the same cost */
} sk_problem;

static inline double _slot_time(const sk_problem *p, int32_t d, int64_t k)
{
    return p->base[d] + (double)k * p->cost[d];
}

/* Largest k <= degree with _slot_time(d, k) <= t: the disk's capacity at threshold t. */
static int32_t _slots_within(const sk_problem *p, int32_t d, double t)
{
    int32_t deg = p->degree[d];
    double estimate = floor((t - p->base[d]) / p->cost[d]);
    int32_t k;
    if (!(estimate > 0.0))
        k = 0;
    else if (estimate >= (double)deg)
        k = deg;
    else
        k = (int32_t)estimate;
    /* the division rounds; step to the exact answer of the canonical formula */
    while (k < deg && _slot_time(p, d, k + 1) <= t)
        k++;
    while (k > 0 && _slot_time(p, d, k) > t)
        k--;
    return k;
}

static int64_t _total_slots(const sk_problem *p, const int32_t *disk_list, int32_t count,
                            double t)
{
    int64_t total = 0;
    for (int32_t i = 0; i < count; i++)
        total += _slots_within(p, disk_list ? disk_list[i] : i, t);
    return total;
}

#define SK_ENUMERATE_LIMIT 64

static int _compare_times(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Slots the listed disks offer at threshold t, with the largest candidate time <= t
 * (*below, 0 if none) and the smallest one > t (*above, INFINITY if none). */
static int64_t _slots_around(const sk_problem *p, const int32_t *disk_list, int32_t count,
                             double t, double *below, double *above)
{
    int64_t total = 0;
    double largest = 0.0, smallest = INFINITY;
    for (int32_t i = 0; i < count; i++) {
        int32_t d = disk_list ? disk_list[i] : i;
        int32_t k = _slots_within(p, d, t);
        total += k;
        if (k > 0 && _slot_time(p, d, k) > largest)
            largest = _slot_time(p, d, k);
        if (k < p->degree[d] && _slot_time(p, d, k + 1) < smallest)
            smallest = _slot_time(p, d, k + 1);
    }
    *below = largest;
    *above = smallest;
    return total;
}

/* Smallest threshold t at which the listed disks (all disks if disk_list is NULL) offer at
 * least `need` slots; the answer is a candidate time itself.  Bisection keeps
 * total(low) < need <= total(high) with both ends snapped to candidate times, so equal
 * candidates (homogeneous disks) end it at once; when at most SK_ENUMERATE_LIMIT slots lie
 * in (low, high] they are listed and the right one picked. */
static double _smallest_time_for(const sk_problem *p, const int32_t *disk_list, int32_t count,
                                 int64_t need)
{
    if (need <= 0)
        return 0.0;
    double low = 0.0, high = 0.0, below, above;
    for (int32_t i = 0; i < count; i++) {
        int32_t d = disk_list ? disk_list[i] : i;
        double t = _slot_time(p, d, p->degree[d]);
        if (t > high)
            high = t;
    }
    int64_t total_low = 0, total_high = _total_slots(p, disk_list, count, high);
    while (total_high - total_low > SK_ENUMERATE_LIMIT) {
        double mid = low + (high - low) * 0.5;
        if (!(mid > low && mid < high))
            return high; /* no double in between: every slot in (low, high] equals high */
        int64_t total_mid = _slots_around(p, disk_list, count, mid, &below, &above);
        if (total_mid >= need) {
            high = below; /* same slots as at mid */
            total_high = total_mid;
            continue;
        }
        /* the answer is at least the first candidate above mid: try it directly */
        int64_t total_next = _total_slots(p, disk_list, count, above);
        if (total_next >= need)
            return above;
        low = above;
        total_low = total_next;
    }
    double between[SK_ENUMERATE_LIMIT];
    int listed = 0;
    for (int32_t i = 0; i < count; i++) {
        int32_t d = disk_list ? disk_list[i] : i;
        int32_t last = _slots_within(p, d, high);
        for (int32_t k = _slots_within(p, d, low) + 1; k <= last; k++)
            between[listed++] = _slot_time(p, d, k);
    }
    qsort(between, (size_t)listed, sizeof *between, _compare_times);
    return between[need - total_low - 1];
}

static void _problem_free(sk_problem *p)
{
    free(p->bucket_first);
    free(p->bucket_disk);
    free(p->disk_first);
    free(p->disk_bucket);
    free(p->degree);
    free(p->global_disk);
    free(p->base);
    free(p->cost);
    memset(p, 0, sizeof *p);
}

/* Largest buckets + replicas + disks: 2 * (that + 1) arcs and nodes still fit an int32. */
#define SK_MAX_ELEMENTS ((int64_t)(INT32_MAX / 2 - 2))

static int _validate(const sk_request *r, int32_t *error_index)
{
    *error_index = -1;
    if (r->bucket_count < 0 || r->disk_count < 0 || !r->offsets ||
        (r->disk_count > 0 && (!r->cost || !r->delay || !r->load)))
        return SK_E_ARGUMENTS;
    for (int32_t d = 0; d < r->disk_count; d++) {
        *error_index = d;
        if (!(isfinite(r->cost[d]) && r->cost[d] > 0.0))
            return SK_E_COST;
        if (!(isfinite(r->delay[d]) && r->delay[d] >= 0.0))
            return SK_E_DELAY;
        if (!(isfinite(r->load[d]) && r->load[d] >= 0.0))
            return SK_E_LOAD;
    }
    *error_index = 0;
    if (r->offsets[0] != 0)
        return SK_E_OFFSETS;
    for (int32_t b = 0; b < r->bucket_count; b++) {
        *error_index = b;
        int32_t first = r->offsets[b], last = r->offsets[b + 1];
        if (last < first)
            return SK_E_OFFSETS;
        if (last == first)
            return SK_E_EMPTY_BUCKET;
        for (int32_t i = first; i < last; i++)
            if (r->disks[i] < 0 || r->disks[i] >= r->disk_count)
                return SK_E_DISK_RANGE;
    }
    /* the flow network numbers 2 * (buckets + replicas + disks) arcs in int32 */
    if ((int64_t)r->bucket_count + r->offsets[r->bucket_count] + r->disk_count >
        SK_MAX_ELEMENTS) {
        *error_index = -1;
        return SK_E_SIZE;
    }
    *error_index = -1;
    return SK_OK;
}

int sk_validate(const sk_request *request, int32_t *error_index)
{
    int32_t ignored;
    return _validate(request, error_index ? error_index : &ignored);
}

/* Set up; on SK_E_RANGE *range_disk is the (global) disk whose largest time overflowed, on
 * SK_E_OFFSETS / SK_E_DISK_RANGE (the request changed after validation) the bucket. */
static int _problem_build(const sk_request *r, sk_problem *p, int32_t *range_disk)
{
    memset(p, 0, sizeof *p);
    int32_t S = r->bucket_count, N = r->disk_count;
    int32_t E = r->offsets[S];
    int32_t *local = malloc(sizeof(int32_t) * (size_t)(N > 0 ? N : 1));
    int32_t *seen = malloc(sizeof(int32_t) * (size_t)(N > 0 ? N : 1));
    p->bucket_first = malloc(sizeof(int32_t) * (size_t)(S + 1));
    p->bucket_disk = malloc(sizeof(int32_t) * (size_t)(E > 0 ? E : 1));
    if (!local || !seen || !p->bucket_first || !p->bucket_disk)
        goto nomem;
    for (int32_t d = 0; d < N; d++) {
        local[d] = -1;
        seen[d] = -1;
    }
    /* number used disks in order of first appearance and drop duplicates per bucket; the
     * offsets and ids were validated, but the caller's buffers may be shared with a thread
     * that changes them while the GIL is released, so every one is checked again as it is
     * read: a request that changed is refused, never read or written out of bounds */
    int32_t used = 0, kept = 0;
    for (int32_t b = 0; b < S; b++) {
        p->bucket_first[b] = kept;
        int32_t first = r->offsets[b], last = r->offsets[b + 1];
        if (first < 0 || last < first || last > E) {
            *range_disk = b;
            goto changed_offsets;
        }
        for (int32_t i = first; i < last; i++) {
            int32_t d = r->disks[i];
            if (d < 0 || d >= N || kept >= E) {
                *range_disk = b;
                goto changed_disks;
            }
            if (seen[d] == b)
                continue;
            seen[d] = b;
            if (local[d] < 0)
                local[d] = used++;
            p->bucket_disk[kept++] = local[d];
        }
    }
    p->bucket_first[S] = kept;
    p->bucket_count = S;
    p->disk_count = used;
    size_t n = (size_t)(used > 0 ? used : 1);
    p->disk_first = calloc(n + 1, sizeof(int32_t));
    p->disk_bucket = malloc(sizeof(int32_t) * (size_t)(kept > 0 ? kept : 1));
    p->degree = calloc(n, sizeof(int32_t));
    p->global_disk = malloc(sizeof(int32_t) * n);
    p->base = malloc(sizeof(double) * n);
    p->cost = malloc(sizeof(double) * n);
    if (!p->disk_first || !p->disk_bucket || !p->degree || !p->global_disk || !p->base ||
        !p->cost)
        goto nomem;
    for (int32_t d = 0; d < N; d++) {
        if (local[d] < 0)
            continue;
        int32_t l = local[d];
        p->global_disk[l] = d;
        p->base[l] = r->delay[d] + r->load[d];
        p->cost[l] = r->cost[d];
    }
    for (int32_t i = 0; i < kept; i++)
        p->degree[p->bucket_disk[i]]++;
    for (int32_t d = 0; d < used; d++)
        p->disk_first[d + 1] = p->disk_first[d] + p->degree[d];
    for (int32_t d = 0; d < used; d++)
        seen[d] = p->disk_first[d];
    for (int32_t b = 0; b < S; b++)
        for (int32_t i = p->bucket_first[b]; i < p->bucket_first[b + 1]; i++)
            p->disk_bucket[seen[p->bucket_disk[i]]++] = b;
    p->min_cost = INFINITY;
    p->homogeneous = 1;
    for (int32_t d = 0; d < used; d++) {
        if (p->cost[d] < p->min_cost)
            p->min_cost = p->cost[d];
        if (p->cost[d] != p->cost[0])
            p->homogeneous = 0;
        if (!isfinite(_slot_time(p, d, p->degree[d]))) {
            *range_disk = p->global_disk[d];
            free(local);
            free(seen);
            _problem_free(p);
            return SK_E_RANGE;
        }
    }
    free(local);
    free(seen);
    return SK_OK;
nomem:
    free(local);
    free(seen);
    _problem_free(p);
    return SK_E_NOMEM;
changed_offsets:
    free(local);
    free(seen);
    _problem_free(p);
    return SK_E_OFFSETS;
changed_disks:
    free(local);
    free(seen);
    _problem_free(p);
    return SK_E_DISK_RANGE;
}

/* Lower bound: enough slots overall for every bucket (Proposition 1) and, for each bucket,
 * its cheapest first slot. */
static double _lower_bound(const sk_problem *p)
{
    double bound = _smallest_time_for(p, NULL, p->disk_count, p->bucket_count);
    for (int32_t b = 0; b < p->bucket_count; b++) {
        double cheapest = INFINITY;
        for (int32_t i = p->bucket_first[b]; i < p->bucket_first[b + 1]; i++) {
            double t = _slot_time(p, p->bucket_disk[i], 1);
            if (t < cheapest)
                cheapest = t;
        }
        if (cheapest > bound)
            bound = cheapest;
    }
    return bound;
}

/* Largest useful threshold: every disk serving all its requested buckets (Proposition 3). */
static double _upper_bound(const sk_problem *p)
{
    double bound = 0.0;
    for (int32_t d = 0; d < p->disk_count; d++) {
        double t = _slot_time(p, d, p->degree[d]);
        if (t > bound)
            bound = t;
    }
    return bound;
}

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

static void _capacities_at(const sk_problem *p, double t, int32_t *capacity)
{
    for (int32_t d = 0; d < p->disk_count; d++)
        capacity[d] = _slots_within(p, d, t);
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
    double t_min = _smallest_time_for(p, NULL, p->disk_count, p->bucket_count) - p->min_cost;
    double t_max = _upper_bound(p);
    while (t_max - t_min >= p->min_cost) {
        double t_mid = t_min + (t_max - t_min) * 0.5;
        _capacities_at(p, t_mid, capacity);
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
            _capacities_at(p, _smallest_time_for(p, NULL, p->disk_count, p->bucket_count),
                           capacity);
            status = _increment_until_routed(p, g, &best, capacity, 0, probes);
        } else {
            double t_low;
            status = _binary_capacity_scaling(p, g, &trial, &best, capacity, conserve, &t_low,
                                              probes);
            if (status == SK_OK) {
                _capacities_at(p, t_low, capacity); /* LoadFlows + CapacityScale(t_min) */
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
    _capacities_at(task->problem, task->threshold, task->capacity);
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
        t_min = _smallest_time_for(p, NULL, p->disk_count, p->bucket_count) - p->min_cost;
        t_max = _upper_bound(p);
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
        _capacities_at(p, t_min, final_capacity);
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

/* ---------------------------------------------------------------- slot search ---------- */

/* Work arrays of the candidate-time search. */
typedef struct {
    int32_t *capacity, *used;           /* per disk */
    int32_t *dead_round, *visit_stamp;  /* per disk */
    int32_t *component, *deficit;       /* per disk: union-find parent, deficit at a root */
    int32_t *component_next, *component_head, *root_stamp; /* per disk */
    int32_t *dead_list;                 /* per disk */
    int32_t *bucket_stamp, *parent;     /* per bucket */
    int32_t *queue, *pending, *failed;  /* per bucket */
    int32_t *touched;                   /* per disk: dead components met by one search */
    int32_t *holder;     /* per replica slot: disk d's assigned buckets are
                          * holder[disk_first[d] .. disk_first[d] + used[d]) */
    int32_t *holder_at;  /* per bucket: its index in holder, if assigned */
} slot_work;

/* Record that bucket b now reads from disk `to` instead of `from` (-1: unassigned). */
static inline void _move_bucket(const sk_problem *p, slot_work *w, int32_t *assignment,
                                int32_t b, int32_t from, int32_t to)
{
    if (from >= 0) {
        int32_t last = w->holder[p->disk_first[from] + --w->used[from]];
        w->holder[w->holder_at[b]] = last;
        w->holder_at[last] = w->holder_at[b];
    }
    int32_t at = p->disk_first[to] + w->used[to]++;
    w->holder[at] = b;
    w->holder_at[b] = at;
    assignment[b] = to;
}

static int32_t _find(int32_t *component, int32_t d)
{
    while (component[d] != d) {
        component[d] = component[component[d]];
        d = component[d];
    }
    return d;
}

/* Route bucket u by a shortest alternating path bucket -> disk -> bucket ... -> disk with a
 * free slot.  On failure every disk reached is full and only reachable buckets use it: a
 * saturated (Hall-violating) set, marked dead for this threshold. */
static int _route_bucket(const sk_problem *p, slot_work *w, int32_t *assignment, int32_t u,
                         int32_t search, int32_t round, int32_t *dead_count)
{
    int32_t read = 0, write = 0, touched_count = 0;
    int32_t first_new = *dead_count;
    w->queue[write++] = u;
    w->bucket_stamp[u] = search;
    while (read < write) {
        int32_t b = w->queue[read++];
        for (int32_t i = p->bucket_first[b]; i < p->bucket_first[b + 1]; i++) {
            int32_t d = p->bucket_disk[i];
            if (w->dead_round[d] == round) {
                int32_t root = _find(w->component, d);
                if (w->root_stamp[root] != search) {
                    w->root_stamp[root] = search;
                    w->touched[touched_count++] = root;
                }
                continue;
            }
            if (w->visit_stamp[d] == search)
                continue;
            w->visit_stamp[d] = search;
            w->dead_list[(*dead_count)++] = d; /* provisional, undone on success */
            if (w->used[d] < w->capacity[d]) {
                /* augment: walk back, each bucket takes the disk its child gives up */
                int32_t bucket = b, disk = d;
                for (;;) {
                    int32_t previous = assignment[bucket];
                    _move_bucket(p, w, assignment, bucket, previous, disk);
                    if (bucket == u)
                        break;
                    disk = previous;
                    bucket = w->parent[bucket];
                }
                *dead_count = first_new;
                return 1;
            }
            int32_t *held = w->holder + p->disk_first[d];
            for (int32_t j = 0; j < w->used[d]; j++) {
                int32_t next = held[j];
                if (w->bucket_stamp[next] != search) {
                    w->bucket_stamp[next] = search;
                    w->parent[next] = b;
                    w->queue[write++] = next;
                }
            }
        }
    }
    /* failed: the reached disks plus the dead components touched form one saturated set */
    int32_t root;
    if (*dead_count > first_new)
        root = w->dead_list[first_new];
    else
        root = w->touched[0]; /* every replica was already dead */
    int32_t deficit = 1;
    for (int32_t i = first_new; i < *dead_count; i++) {
        int32_t d = w->dead_list[i];
        w->dead_round[d] = round;
        w->component[d] = root;
    }
    if (*dead_count == first_new)
        deficit = 1 + w->deficit[root];
    for (int32_t i = 0; i < touched_count; i++) {
        int32_t other = w->touched[i];
        if (other != root) {
            w->component[other] = root;
            deficit += w->deficit[other];
        }
    }
    w->deficit[root] = deficit;
    return 0;
}

/* Start over at the current capacities: each bucket to the replica with the most free
 * slots; the buckets left over go to w->pending.  Returns their number. */
static int32_t _greedy_assign(const sk_problem *p, slot_work *w, int32_t *assignment)
{
    int32_t pending_count = 0;
    int32_t *room = w->visit_stamp; /* borrowed: free slots per disk during the pass */
    for (int32_t d = 0; d < p->disk_count; d++)
        room[d] = w->capacity[d];
    for (int32_t b = 0; b < p->bucket_count; b++) {
        int32_t best = -1, best_room = 0;
        for (int32_t i = p->bucket_first[b]; i < p->bucket_first[b + 1]; i++) {
            int32_t d = p->bucket_disk[i];
            int32_t r = room[d];
            int better = r > best_room; /* written to compile to conditional moves */
            best = better ? d : best;
            best_room = better ? r : best_room;
        }
        assignment[b] = best;
        if (best >= 0)
            room[best]--;
        else
            w->pending[pending_count++] = b;
    }
    for (int32_t d = 0; d < p->disk_count; d++) {
        w->used[d] = 0;
        w->visit_stamp[d] = -1;
    }
    for (int32_t b = 0; b < p->bucket_count; b++)
        if (assignment[b] >= 0) {
            int32_t at = p->disk_first[assignment[b]] + w->used[assignment[b]]++;
            w->holder[at] = b;
            w->holder_at[b] = at;
        }
    return pending_count;
}

static int _solve_slotsearch(const sk_problem *p, int32_t *assignment, int64_t *probes)
{
    int32_t S = p->bucket_count, N = p->disk_count;
    size_t n = (size_t)(N > 0 ? N : 1), s = (size_t)(S > 0 ? S : 1);
    slot_work w;
    int32_t **disk_arrays[] = {&w.capacity, &w.used, &w.dead_round, &w.visit_stamp,
                               &w.component, &w.deficit, &w.component_next,
                               &w.component_head, &w.root_stamp, &w.dead_list, &w.touched};
    int32_t **bucket_arrays[] = {&w.bucket_stamp, &w.parent, &w.queue, &w.pending, &w.failed,
                                 &w.holder_at};
    int status = SK_OK;
    memset(&w, 0, sizeof w);
    for (size_t i = 0; i < sizeof disk_arrays / sizeof *disk_arrays; i++)
        if (!(*disk_arrays[i] = malloc(sizeof(int32_t) * n)))
            status = SK_E_NOMEM;
    for (size_t i = 0; i < sizeof bucket_arrays / sizeof *bucket_arrays; i++)
        if (!(*bucket_arrays[i] = malloc(sizeof(int32_t) * s)))
            status = SK_E_NOMEM;
    int32_t replica_count = p->bucket_first[S];
    if (!(w.holder = malloc(sizeof(int32_t) * (size_t)(replica_count > 0 ? replica_count : 1))))
        status = SK_E_NOMEM;
    if (status != SK_OK)
        goto done;

    double threshold = _lower_bound(p);
    _capacities_at(p, threshold, w.capacity);
    for (int32_t d = 0; d < N; d++) {
        w.used[d] = 0;
        w.dead_round[d] = -1;
        w.visit_stamp[d] = -1;
        w.root_stamp[d] = -1;
    }
    for (int32_t b = 0; b < S; b++)
        w.bucket_stamp[b] = -1;
    int32_t pending_count = _greedy_assign(p, &w, assignment);
    int32_t search = 0;
    for (int32_t round = 0; pending_count > 0; round++) {
        (*probes)++;
        int32_t failed_count = 0, dead_count = 0;
        for (int32_t i = 0; i < pending_count; i++) {
            int32_t u = w.pending[i];
            if (!_route_bucket(p, &w, assignment, u, search++, round, &dead_count))
                w.failed[failed_count++] = u;
        }
        if (failed_count == 0)
            break;
        /* every saturated set needs `deficit` more slots: the smallest threshold giving
         * them is a lower bound on the optimum; jump to the largest such bound */
        for (int32_t i = 0; i < dead_count; i++)
            w.component_head[_find(w.component, w.dead_list[i])] = -1;
        for (int32_t i = 0; i < dead_count; i++) {
            int32_t d = w.dead_list[i];
            int32_t root = _find(w.component, d);
            w.component_next[d] = w.component_head[root];
            w.component_head[root] = d;
        }
        double next_threshold = threshold;
        int32_t *members = w.queue; /* free now; S >= dead disks is not guaranteed */
        int32_t *member_buffer = NULL;
        if (dead_count > 0 && (size_t)dead_count > s) {
            member_buffer = malloc(sizeof(int32_t) * (size_t)dead_count);
            if (!member_buffer) {
                status = SK_E_NOMEM;
                goto done;
            }
            members = member_buffer;
        }
        for (int32_t i = 0; i < dead_count; i++) {
            int32_t root = w.dead_list[i];
            if (_find(w.component, root) != root || w.component_head[root] == -2)
                continue;
            int32_t count = 0;
            int64_t slots = 0;
            for (int32_t d = w.component_head[root]; d >= 0; d = w.component_next[d]) {
                members[count++] = d;
                slots += w.capacity[d];
            }
            w.component_head[root] = -2; /* done */
            double bound = _smallest_time_for(p, members, count, slots + w.deficit[root]);
            if (bound > next_threshold)
                next_threshold = bound;
        }
        free(member_buffer);
        if (!(next_threshold > threshold)) {
            status = SK_E_INTERNAL;
            goto done;
        }
        threshold = next_threshold;
        _capacities_at(p, threshold, w.capacity);
        if ((int64_t)failed_count * 16 > S) {
            /* far below the optimum: repairing one bucket at a time costs more than a new
             * greedy pass at the raised threshold */
            pending_count = _greedy_assign(p, &w, assignment);
        } else {
            /* keep the flow found so far; only the failed buckets still need a disk */
            memcpy(w.pending, w.failed, sizeof(int32_t) * (size_t)failed_count);
            pending_count = failed_count;
        }
    }
done:
    free(w.holder);
    for (size_t i = 0; i < sizeof disk_arrays / sizeof *disk_arrays; i++)
        free(*disk_arrays[i]);
    for (size_t i = 0; i < sizeof bucket_arrays / sizeof *bucket_arrays; i++)
        free(*bucket_arrays[i]);
    return status;
}

/* ---------------------------------------------------------------- entry point ---------- */

int sk_select_replicas(const sk_request *request, int algorithm, int threads,
                       sk_selection *selection)
{
    selection->error_index = -1;
    selection->probes = 0;
    selection->response_time = 0.0;
    if (algorithm < SK_ALG_BLACKBOX || algorithm > SK_ALG_SLOTSEARCH || threads < 1 ||
        threads > 1024)
        return SK_E_ARGUMENTS;
    int status = _validate(request, &selection->error_index);
    if (status != SK_OK)
        return status;
    for (int32_t d = 0; d < request->disk_count; d++)
        selection->counts[d] = 0;
    if (request->bucket_count == 0)
        return SK_OK;
    sk_problem problem;
    status = _problem_build(request, &problem, &selection->error_index);
    if (status != SK_OK)
        return status;
    int32_t *local_assignment = malloc(sizeof(int32_t) * (size_t)problem.bucket_count);
    if (!local_assignment) {
        _problem_free(&problem);
        return SK_E_NOMEM;
    }
    if (algorithm == SK_ALG_SLOTSEARCH) {
        status = _solve_slotsearch(&problem, local_assignment, &selection->probes);
    } else {
        pr_network network;
        status = _network_build(&problem, &network);
        if (status == SK_OK) {
            if (algorithm == SK_ALG_PARALLEL)
                status = _solve_parallel(&problem, &network, threads, local_assignment,
                                         &selection->probes);
            else
                status = _solve_flow_sequential(&problem, &network,
                                                algorithm == SK_ALG_INTEGRATED, local_assignment,
                                                &selection->probes);
            _network_free(&network);
        }
    }
    if (status == SK_OK) {
        int32_t *local_count = calloc((size_t)problem.disk_count, sizeof(int32_t));
        if (!local_count) {
            status = SK_E_NOMEM;
        } else {
            for (int32_t b = 0; b < problem.bucket_count; b++) {
                int32_t d = local_assignment[b];
                local_count[d]++;
                selection->assignment[b] = problem.global_disk[d];
            }
            double response = 0.0;
            for (int32_t d = 0; d < problem.disk_count; d++) {
                if (local_count[d] == 0)
                    continue;
                selection->counts[problem.global_disk[d]] = local_count[d];
                double t = _slot_time(&problem, d, local_count[d]);
                if (t > response)
                    response = t;
            }
            selection->response_time = response;
            free(local_count);
        }
    }
    free(local_assignment);
    _problem_free(&problem);
    return status;
}

const char *sk_status_text(int status)
{
    switch (status) {
    case SK_OK: return "ok";
    case SK_E_NOMEM: return "out of memory";
    case SK_E_ARGUMENTS: return "invalid arguments";
    case SK_E_OFFSETS: return "offsets must start at 0 and never decrease";
    case SK_E_EMPTY_BUCKET: return "bucket has no replica";
    case SK_E_DISK_RANGE: return "disk id out of range";
    case SK_E_COST: return "cost must be a finite number > 0";
    case SK_E_DELAY: return "delay must be a finite number >= 0";
    case SK_E_LOAD: return "load must be a finite number >= 0";
    case SK_E_RANGE: return "times too large to represent";
    case SK_E_THREAD: return "could not start a thread";
    case SK_E_INTERNAL: return "internal error";
    case SK_E_SIZE: return "too many buckets, replicas and disks (at most 2^30 together)";
    default: return "unknown status";
    }
}
