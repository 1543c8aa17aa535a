/*
 * replica_select.c - the solver core's set-up and entry point (replica_select.h): validation,
 * the prepared problem shared by all algorithms (replica_select_int.h; its slot counts and
 * bounds in replica_bounds.c), and sk_select_replicas(), which hands the problem to the
 * push-relabel algorithms (replica_flow.c: blackbox, integrated, parallel) or the
 * candidate-time search (replica_slotsearch.c).
 */
#include "replica_select.h"
#include "replica_select_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- problem set-up ----- */

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
    if (algorithm == SK_ALG_SLOTSEARCH)
        status = rs_solve_slotsearch(&problem, local_assignment, &selection->probes);
    else
        status = rs_solve_flow(&problem, algorithm, threads, local_assignment,
                               &selection->probes);
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
