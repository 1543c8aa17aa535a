/*
 * suora.h - SUORA placement (the SUORA paper, §3, Algorithms 1 and 3).
 *
 * Targets of one performance class form a bucket; a bucket is a number line of integer slots,
 * each slot holding at most one segment [slot, slot + length), length in (0, 1], owned by one
 * target (a target's capacity / the bucket's unit p, eq. 1, split over consecutive slots).
 * An object id gives a deterministic pseudo-random sequence R of numbers in [0, 2^J) (the
 * smallest such range covering the slots); the first number that falls inside an eligible
 * segment names the target.  The range of level j is made of level j's generator with every
 * number below the level j-1 range replaced by the next number of level j-1 (section 3.5), so
 * growing the line past a power of two keeps every existing hit.
 *
 * Replica i goes to bucket (first_bucket + i) mod bucket_count, each bucket starting R afresh
 * (the same R in every bucket, Algorithm 3); a bucket met again (more replicas than buckets) or
 * a bucket whose hit is already chosen skips chosen targets; a bucket with no eligible target
 * left is passed over for the next one.
 *
 * Plain C11, no globals: the map is read-only during calls, so calls may run concurrently.
 */
#ifndef SK_SUORA_H
#define SK_SUORA_H

#include <stdint.h>

/* numbers drawn in one bucket before the deterministic slot scan takes over (a bucket whose
 * eligible segments cover a tiny share of its range would otherwise loop for long) */
#define SK_SUORA_MAX_DRAWS 4096
/* the first range is [0, 1), doubled per level (the SUORA paper starts at [0, 16); from 1, a bucket of
 * fewer than 16 slots does not miss most of its draws, and from 16 slots on the levels are the
 * same ranges) */
#define SK_SUORA_BASE_RANGE 1.0
#define SK_SUORA_MAX_LEVELS 40

enum sk_suora_status {
    SK_SUORA_OK = 0,
    SK_SUORA_E_ARGUMENTS = 1,  /* bad counts, replicas < 1, first_bucket out of range */
    SK_SUORA_E_TOO_FEW = 2     /* fewer eligible targets than replicas */
};

typedef struct {
    int32_t slot_count;          /* integer slots on the line */
    int32_t levels;              /* J: range 2^J >= slot_count */
    const int32_t *slot_target;  /* dense target number per slot, -1 for a gap */
    const double *slot_length;   /* segment length in (0, 1] per slot (0 for a gap) */
    int32_t eligible_count;      /* eligible targets in the bucket */
    int32_t sole_target;         /* the eligible target when eligible_count == 1: any sequence
                                  * ends there, so no number is drawn */
} sk_suora_bucket;

typedef struct {
    int32_t bucket_count;
    int32_t target_count;         /* dense target numbers 0 .. target_count-1 */
    const sk_suora_bucket *buckets;   /* slowest first */
    const uint8_t *eligible;      /* per dense target: 1 up and not full, 0 skipped */
    uint64_t seed;
} sk_suora_map;

/* The replicas' dense target numbers for one object, written to out[0 .. replicas-1]. */
int sk_suora_place(const sk_suora_map *map, uint64_t object_id, int32_t replicas,
                   int32_t first_bucket, int32_t *out);

/* The same for count objects; out holds count * replicas numbers, row by row. */
int sk_suora_place_many(const sk_suora_map *map, const uint64_t *object_ids, int64_t count,
                        int32_t replicas, int32_t first_bucket, int32_t *out);

#endif
