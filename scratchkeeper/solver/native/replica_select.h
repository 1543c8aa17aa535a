/*
 * replica_select.h - exact optimal-response-time replica selection (the replica-selection paper, §2.3).
 *
 * S buckets, each readable from a set of disks; disk d serves its k-th bucket at
 * delay[d] + load[d] + k * cost[d].  sk_select_replicas() picks one disk per bucket so that
 * the largest such time over the used disks (the response time) is minimal.
 *
 * Plain C11, no globals: every call owns its memory, so calls may run concurrently.
 */
#ifndef SK_REPLICA_SELECT_H
#define SK_REPLICA_SELECT_H

#include <stdint.h>

/* Algorithms; every one is exact and returns the same optimal response time. */
enum sk_algorithm {
    SK_ALG_BLACKBOX = 0,   /* binary capacity scaling + increments, fresh max flow per probe */
    SK_ALG_INTEGRATED = 1, /* push-relabel conserving flow between probes (Algorithms 5 and 7) */
    SK_ALG_PARALLEL = 2,   /* multithreaded capacity scaling (Algorithm 10, pthreads) */
    SK_ALG_SLOTSEARCH = 3  /* candidate-time search with saturated-set jumps (fastest) */
};

enum sk_status {
    SK_OK = 0,
    SK_E_NOMEM = 1,        /* allocation failed */
    SK_E_ARGUMENTS = 2,    /* bad counts, algorithm or thread number */
    SK_E_OFFSETS = 3,      /* offsets not starting at 0 / decreasing; error_index = bucket */
    SK_E_EMPTY_BUCKET = 4, /* a bucket with no replica; error_index = bucket */
    SK_E_DISK_RANGE = 5,   /* disk id outside [0, disk_count); error_index = bucket */
    SK_E_COST = 6,         /* cost not finite and > 0; error_index = disk */
    SK_E_DELAY = 7,        /* delay not finite and >= 0; error_index = disk */
    SK_E_LOAD = 8,         /* load not finite and >= 0; error_index = disk */
    SK_E_RANGE = 9,        /* delay + load + degree * cost is not a finite double (it
                            * overflowed); error_index = disk */
    SK_E_THREAD = 10,      /* pthread_create failed */
    SK_E_INTERNAL = 11,    /* an invariant broke: a bug, never a valid answer */
    SK_E_SIZE = 12         /* buckets + replicas + disks past what int32 node and arc
                            * numbers of the flow network can count (2^30) */
};

/* One request: bucket b's replicas are disks[offsets[b] .. offsets[b+1]-1] (CSR form).
 * Duplicated disk ids inside one bucket are allowed and count once. */
typedef struct {
    int32_t bucket_count;
    int32_t disk_count;
    const int32_t *offsets; /* bucket_count + 1 entries, offsets[0] == 0 */
    const int32_t *disks;   /* offsets[bucket_count] entries */
    const double *cost;     /* per-bucket retrieval cost C_d > 0 */
    const double *delay;    /* network delay D_d >= 0 */
    const double *load;     /* initial load X_d >= 0 */
} sk_request;

typedef struct {
    double response_time; /* max over used disks of delay + load + count * cost */
    int32_t *assignment;  /* caller-allocated, bucket_count entries: disk per bucket */
    int32_t *counts;      /* caller-allocated, disk_count entries: buckets read per disk */
    int64_t probes;       /* max-flow runs (flow algorithms) or threshold raises (slotsearch) */
    int32_t error_index;  /* bucket or disk the error names, -1 if none */
} sk_selection;

/* Check a request without solving it; returns SK_OK or the first error found. */
int sk_validate(const sk_request *request, int32_t *error_index);

/* Solve; threads is used by SK_ALG_PARALLEL only (>= 1).  Returns an sk_status. */
int sk_select_replicas(const sk_request *request, int algorithm, int threads,
                       sk_selection *selection);

/* Human-readable text for a status code (static storage). */
const char *sk_status_text(int status);

#endif /* SK_REPLICA_SELECT_H */
