/*
 * replica_select_int.h - what the solver core's units share and the public header does not
 * show: the prepared problem, the canonical slot time and the set-up helpers the algorithms
 * call.  Units:
 *   replica_select.c      set-up (validation, the problem), the entry point
 *   replica_bounds.c      slot counts, thresholds and bounds (calls no other unit)
 *   replica_flow.c        the push-relabel engine: blackbox, integrated, parallel (Alg. 10)
 *   replica_slotsearch.c  the candidate-time search (slotsearch)
 *
 * Times are doubles computed one way only, _slot_time(): (delay + load) + k * cost.  Every
 * comparison is between values computed by that function, so the algorithms agree exactly;
 * the Python layer scales decimal inputs to whole time units first so ties are true ties.
 */
#ifndef SK_REPLICA_SELECT_INT_H
#define SK_REPLICA_SELECT_INT_H

#include "replica_select.h"

#include <stdint.h>

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

/* replica_bounds.c: slot counts and bounds */

/* Smallest threshold at which the listed disks (all if disk_list is NULL) offer `need` slots. */
double rs_smallest_time_for(const sk_problem *p, const int32_t *disk_list, int32_t count,
                            int64_t need);
double rs_lower_bound(const sk_problem *p);
double rs_upper_bound(const sk_problem *p);
/* capacity[d] = slots of disk d within threshold t */
void rs_capacities_at(const sk_problem *p, double t, int32_t *capacity);

/* replica_flow.c: SK_ALG_BLACKBOX, SK_ALG_INTEGRATED or SK_ALG_PARALLEL on `threads` */
int rs_solve_flow(const sk_problem *p, int algorithm, int threads, int32_t *local_assignment,
                  int64_t *probes);

/* replica_slotsearch.c: SK_ALG_SLOTSEARCH */
int rs_solve_slotsearch(const sk_problem *p, int32_t *assignment, int64_t *probes);

#endif /* SK_REPLICA_SELECT_INT_H */
