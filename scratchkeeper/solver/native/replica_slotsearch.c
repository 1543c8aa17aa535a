/*
 * replica_slotsearch.c - the candidate-time search (slotsearch, the fastest algorithm): greedy
 * assignment, shortest augmenting paths, and jumps of the threshold past saturated
 * (Hall-violating) disk sets.  The problem and its set-up helpers come from replica_select.c
 * (replica_select_int.h).
 */
#include "replica_select.h"
#include "replica_select_int.h"

#include <stdlib.h>
#include <string.h>

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

int rs_solve_slotsearch(const sk_problem *p, int32_t *assignment, int64_t *probes)
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

    double threshold = rs_lower_bound(p);
    rs_capacities_at(p, threshold, w.capacity);
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
            double bound = rs_smallest_time_for(p, members, count, slots + w.deficit[root]);
            if (bound > next_threshold)
                next_threshold = bound;
        }
        free(member_buffer);
        if (!(next_threshold > threshold)) {
            status = SK_E_INTERNAL;
            goto done;
        }
        threshold = next_threshold;
        rs_capacities_at(p, threshold, w.capacity);
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
