/*
 * suora.c - SUORA placement; see suora.h.  scratchkeeper/placement/suora.py is the same
 * algorithm in Python, number for number (tests compare them).
 */
#include "suora.h"

#include <stddef.h>

#define GOLDEN_GAMMA 0x9E3779B97F4A7C15ULL
#define LEVEL_STEP 0xD6E8FEB86659FD93ULL

/* MurmurHash3's 64-bit finalizer: every input bit reaches every output bit. */
static inline uint64_t _fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

static inline double _range(int32_t level)
{
    return SK_SUORA_BASE_RANGE * (double)(1ULL << level);
}

/* Number counters[level] of level `level`'s own generator, in [0, 2^level). */
static inline double _generate(uint64_t key, int32_t level, uint32_t *counters)
{
    uint64_t raw = _fmix64(key + (uint64_t)(level + 1) * LEVEL_STEP
                           + (uint64_t)counters[level]++ * GOLDEN_GAMMA);
    return (double)(raw >> 11) * 0x1.0p-53 * _range(level);
}

/* The next number of the composed sequence R at level `top` (section 3.5): a number of level j
 * that falls inside level j-1's range is replaced by level j-1's next number. */
static inline double _next(uint64_t key, int32_t top, uint32_t *counters)
{
    int32_t level = top;
    for (;;) {
        double value = _generate(key, level, counters);
        if (level == 0 || value >= _range(level - 1))
            return value;
        level--;
    }
}

/* The first number of R at level `top`, as _next() from cleared counters would give it, with
 * the counters it leaves.  The top levels' first numbers are independent hashes, computed all
 * at once and chosen without a branch: descending level by level mispredicts about every other
 * time, and that, not hashing, is what a placement costs. */
#define SPECULATED_LEVELS 4
static inline double _first(uint64_t key, int32_t top, uint32_t *counters)
{
    int32_t low = top >= SPECULATED_LEVELS - 1 ? top - (SPECULATED_LEVELS - 1) : 0;
    double value = 0.0;
    int32_t chosen = -1;
    for (int32_t level = low; level <= top; level++) {
        uint64_t raw = _fmix64(key + (uint64_t)(level + 1) * LEVEL_STEP);
        double candidate = (double)(raw >> 11) * 0x1.0p-53 * _range(level);
        int upper = level == 0 || candidate >= _range(level - 1);
        value = upper ? candidate : value;
        chosen = upper ? level : chosen;
    }
    for (int32_t level = 0; level <= top; level++)
        counters[level] = level >= low && level >= chosen ? 1u : 0u;
    if (chosen >= 0)
        return value;
    /* every speculated level fell into the lower half: R's first number comes from below */
    return _next(key, low - 1, counters);
}

static inline int _taken(const int32_t *chosen, int32_t chosen_count, int32_t target)
{
    for (int32_t i = 0; i < chosen_count; i++)
        if (chosen[i] == target)
            return 1;
    return 0;
}

/* The first eligible, not yet chosen target that R hits in this bucket, or -1 if none is left. */
static inline int32_t _place_in_bucket(const sk_suora_map *map, const sk_suora_bucket *bucket,
                                uint64_t premix, const int32_t *chosen, int32_t chosen_count)
{
    if (bucket->slot_count <= 0 || bucket->eligible_count <= 0)
        return -1;
    if (bucket->eligible_count == 1)
        return _taken(chosen, chosen_count, bucket->sole_target) ? -1 : bucket->sole_target;
    /* the object's key is hashed only here, after the cases that need no number */
    uint64_t key = _fmix64(premix);
    uint32_t counters[SK_SUORA_MAX_LEVELS];
    double value = _first(key, bucket->levels, counters);
    for (int draws = 0; draws < SK_SUORA_MAX_DRAWS; draws++) {
        if (draws > 0)
            value = _next(key, bucket->levels, counters);
        int64_t slot = (int64_t)value;
        if (slot >= bucket->slot_count)
            continue;
        int32_t target = bucket->slot_target[slot];
        if (target < 0 || value - (double)slot >= bucket->slot_length[slot])
            continue;
        if (!map->eligible[target] || _taken(chosen, chosen_count, target))
            continue;
        return target;
    }
    /* Eligible segments cover a tiny share of the range: scan the slots from the last number on,
     * still deterministic, so placement always ends. */
    int64_t start = (int64_t)value % bucket->slot_count;
    for (int64_t step = 0; step < bucket->slot_count; step++) {
        int32_t target = bucket->slot_target[(start + step) % bucket->slot_count];
        if (target >= 0 && map->eligible[target] && !_taken(chosen, chosen_count, target))
            return target;
    }
    return -1;
}

static inline int _place(const sk_suora_map *map, uint64_t premix, int32_t replicas, int32_t first_bucket,
                  int32_t *out)
{
    int32_t bucket = first_bucket;
    for (int32_t replica = 0; replica < replicas; replica++) {
        int32_t target = -1;
        for (int32_t tried = 0; tried < map->bucket_count && target < 0; tried++) {
            target = _place_in_bucket(map, &map->buckets[bucket], premix, out, replica);
            bucket = (bucket + 1) % map->bucket_count;
        }
        if (target < 0)
            return SK_SUORA_E_TOO_FEW;
        out[replica] = target;
    }
    return SK_SUORA_OK;
}

static int _check(const sk_suora_map *map, int32_t replicas, int32_t first_bucket)
{
    if (!map || map->bucket_count < 1 || replicas < 1 || first_bucket < 0
        || first_bucket >= map->bucket_count)
        return SK_SUORA_E_ARGUMENTS;
    for (int32_t b = 0; b < map->bucket_count; b++)
        if (map->buckets[b].levels < 0 || map->buckets[b].levels >= SK_SUORA_MAX_LEVELS)
            return SK_SUORA_E_ARGUMENTS;
    return SK_SUORA_OK;
}

/* An object's key is _fmix64(object_id ^ _fmix64(seed + golden)); this is what goes in it. */
static inline uint64_t _premix(uint64_t seed, uint64_t object_id)
{
    return object_id ^ _fmix64(seed + GOLDEN_GAMMA);
}

int sk_suora_place(const sk_suora_map *map, uint64_t object_id, int32_t replicas,
                   int32_t first_bucket, int32_t *out)
{
    int status = _check(map, replicas, first_bucket);
    if (status != SK_SUORA_OK)
        return status;
    return _place(map, _premix(map->seed, object_id), replicas, first_bucket, out);
}

int sk_suora_place_many(const sk_suora_map *map, const uint64_t *object_ids, int64_t count,
                        int32_t replicas, int32_t first_bucket, int32_t *out)
{
    int status = _check(map, replicas, first_bucket);
    if (status != SK_SUORA_OK)
        return status;
    uint64_t seed_key = _fmix64(map->seed + GOLDEN_GAMMA);
    for (int64_t i = 0; i < count; i++) {
        status = _place(map, object_ids[i] ^ seed_key, replicas, first_bucket,
                        out + i * replicas);
        if (status != SK_SUORA_OK)
            return status;
    }
    return SK_SUORA_OK;
}
