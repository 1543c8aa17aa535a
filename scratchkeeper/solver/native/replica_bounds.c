/*
 * replica_bounds.c - the prepared problem's slot counts and thresholds (replica_select_int.h):
 * how many slots each disk offers within a time, the smallest time at which listed disks offer
 * a number of slots, the lower and upper bounds of the search (Propositions 1 and 3) and the
 * flow network's disk capacities.  Used by the entry point's set-up and by both algorithms'
 * units; it calls none of them.
 */
#include "replica_select_int.h"

#include <math.h>
#include <stdlib.h>

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
double rs_smallest_time_for(const sk_problem *p, const int32_t *disk_list, int32_t count,
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

/* Lower bound: enough slots overall for every bucket (Proposition 1) and, for each bucket,
 * its cheapest first slot. */
double rs_lower_bound(const sk_problem *p)
{
    double bound = rs_smallest_time_for(p, NULL, p->disk_count, p->bucket_count);
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
double rs_upper_bound(const sk_problem *p)
{
    double bound = 0.0;
    for (int32_t d = 0; d < p->disk_count; d++) {
        double t = _slot_time(p, d, p->degree[d]);
        if (t > bound)
            bound = t;
    }
    return bound;
}

/* Every disk's capacity at threshold t (the flow network's disk -> sink capacities). */
void rs_capacities_at(const sk_problem *p, double t, int32_t *capacity)
{
    for (int32_t d = 0; d < p->disk_count; d++)
        capacity[d] = _slots_within(p, d, t);
}
