/* Read dispatch (docs/mount.rst, "Read dispatch"): a read of at least mount.dispatch_min_bytes
 * whose stripe pieces several mirrors hold on healthy OSTs has each piece's OST chosen by the
 * replica-selection paper's solver (scratchkeeper/solver/native/replica_select.h, the
 * slot-search algorithm) and its pieces read in parallel by a small fixed pool of threads
 * owned by the mount; the request's own thread reads pieces too while it waits, so a request
 * always makes progress whatever the pool is doing.
 *
 * The solver's model: disk d serves its k-th bucket at D_d + X_d + k * C_d. Here a bucket is a
 * stripe piece of the request, a disk an OST, and the figures are measured, per OST, from every
 * object read the mount does (ost_read): an exponentially weighted least-squares fit of the
 * seconds of one pread on its bytes gives seconds per byte (slope) and per-request latency
 * (intercept); C_d = slope * the request's mean piece size, D_d = intercept, X_d = the OST's
 * queued and in-flight bytes * slope.
 *
 * SK_MOUNT_DISPATCH=solver|primary|round-robin (default solver) chooses the policy, for the
 * benchmark: primary takes the first mirror in layout order (what the per-piece path reads),
 * round-robin alternates the mirrors piece by piece. The counters are the read-only virtual
 * attribute user.scratchkeeper.dispatch of the mount's root (JSON).
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314

#include "skfs_int.h"
#include "replica_select.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/uio.h>
#include <unistd.h>

#define EWMA_ALPHA 0.1        /* weight of the newest object read in the fit */
#define DEFAULT_SPB 1e-9      /* seconds per byte of an OST never measured (1 GB/s) */

struct ost_stat {
    pthread_mutex_t lock;     /* the fit */
    uint64_t samples;
    double mx, my, mxx, mxy;  /* EW means of bytes, seconds, bytes^2, bytes*seconds */
    double spb, lat;          /* the fit: seconds per byte, seconds per request */
    atomic_uint_fast64_t inflight;      /* bytes queued or being read */
    atomic_uint_fast64_t reads, read_bytes;     /* every object read */
    atomic_uint_fast64_t pieces, piece_bytes;   /* dispatched pieces */
};

struct piece {
    int fd;
    char *dst;
    uint64_t n;
    off_t oo;
    uint32_t ost;
    int err;
    struct iovec *iov;        /* iovcnt > 0: n bytes of the object from oo into these, in order */
    int iovcnt;
};

struct batch {
    struct piece *pieces;
    uint32_t count;
    uint32_t next;            /* pool.lock: the first piece nobody took */
    uint32_t done;            /* pool.lock */
    bool queued;              /* pool.lock */
    pthread_cond_t all_done;
    struct batch *qnext;
};

#define POOL_THREADS 8
/* how much slower (by the model) reading each piece from its first mirror may be than the
 * solver's assignment and still be preferred */
#define IN_ORDER_SLACK 0.25

static struct {
    int policy;
    uint64_t min_bytes;
    struct ost_stat *osts;    /* fs.cfg.ost_count */
    atomic_uint_fast64_t requests, fallbacks, solver_errors, in_order;
    atomic_uint_fast64_t striped, striped_fallbacks;  /* dispatch_striped's requests */
    atomic_uint rr;
    pthread_mutex_t lock;     /* the queue */
    pthread_cond_t work;
    struct batch *head, *tail;
    bool stop;
    pthread_t threads[POOL_THREADS];
    unsigned nthreads;
} pool;

static const char *const policy_names[] = {"solver", "primary", "round-robin"};
enum { POLICY_SOLVER, POLICY_PRIMARY, POLICY_ROUND_ROBIN };

/* -- measurements -------------------------------------------------------------------------- */

static void ost_measured(uint32_t ost, uint64_t bytes, double seconds)
{
    if (!pool.osts || ost >= fs.cfg.ost_count || bytes == 0)
        return;
    struct ost_stat *s = &pool.osts[ost];
    double x = (double)bytes, y = seconds;
    pthread_mutex_lock(&s->lock);
    if (s->samples++ == 0) {
        s->mx = x;
        s->my = y;
        s->mxx = x * x;
        s->mxy = x * y;
    } else {
        double a = EWMA_ALPHA;
        s->mx += a * (x - s->mx);
        s->my += a * (y - s->my);
        s->mxx += a * (x * x - s->mxx);
        s->mxy += a * (x * y - s->mxy);
    }
    double var = s->mxx - s->mx * s->mx;
    double slope = 0, icept = 0;
    if (var > 0.01 * s->mx * s->mx) {  /* sizes vary enough (CV > 10 %) to separate latency */
        slope = (s->mxy - s->mx * s->my) / var;
        icept = s->my - slope * s->mx;
    }
    if (!(slope > 0) || !(icept >= 0)) {  /* all the time proportional to the bytes */
        slope = s->my / s->mx;
        icept = 0;
    }
    s->spb = slope;
    s->lat = icept;
    pthread_mutex_unlock(&s->lock);
}

static void inflight_add(uint32_t ost, uint64_t n)
{
    if (pool.osts && ost < fs.cfg.ost_count)
        atomic_fetch_add(&pool.osts[ost].inflight, n);
}

static void inflight_sub(uint32_t ost, uint64_t n)
{
    if (pool.osts && ost < fs.cfg.ost_count)
        atomic_fetch_sub(&pool.osts[ost].inflight, n);
}

/* The iovecs' first `skip` bytes are read: advance past them (the array is the caller's). */
static int iov_advance(struct iovec **iov, int *iovcnt, uint64_t skip)
{
    while (*iovcnt > 0 && skip >= (*iov)->iov_len) {
        skip -= (*iov)->iov_len;
        (*iov)++;
        (*iovcnt)--;
    }
    if (*iovcnt > 0) {
        (*iov)->iov_base = (char *)(*iov)->iov_base + skip;
        (*iov)->iov_len -= skip;
    }
    return *iovcnt;
}

/* pread (iovcnt 0: into dst) or preadv of n bytes at oo, zeros past the object's end. */
static int read_object(int fd, char *dst, struct iovec *iov, int iovcnt, uint64_t n, off_t oo)
{
    uint64_t got = 0;
    while (got < n) {
        ssize_t r = iovcnt > 0 ? preadv(fd, iov, iovcnt, oo + (off_t)got)
                               : pread(fd, dst + got, n - got, oo + (off_t)got);
        if (r > 0) {
            got += (uint64_t)r;
            if (iovcnt > 0 && got < n)
                iov_advance(&iov, &iovcnt, (uint64_t)r);
        } else if (r == 0) {  /* a hole at the object's end */
            if (iovcnt == 0)
                memset(dst + got, 0, n - got);
            for (int i = 0; i < iovcnt; i++)
                memset(iov[i].iov_base, 0, iov[i].iov_len);
            break;
        } else if (errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

static int ost_read_iov(int fd, char *dst, struct iovec *iov, int iovcnt, uint64_t n, off_t oo,
                        uint32_t ost, bool queued)
{
    if (!queued)
        inflight_add(ost, n);
    double t0 = monotonic();
    int rc = read_object(fd, dst, iov, iovcnt, n, oo);
    double t = monotonic() - t0;
    inflight_sub(ost, n);
    if (rc == 0 && pool.osts && ost < fs.cfg.ost_count) {
        atomic_fetch_add(&pool.osts[ost].reads, 1);
        atomic_fetch_add(&pool.osts[ost].read_bytes, n);
        ost_measured(ost, n, t);
    }
    return rc;
}

int ost_read(int fd, char *dst, uint64_t n, off_t oo, uint32_t ost, bool queued)
{
    return ost_read_iov(fd, dst, NULL, 0, n, oo, ost, queued);
}

/* -- the pool ------------------------------------------------------------------------------ */

/* Caller holds pool.lock: take the batch's next piece (NULL when all are taken). */
static struct piece *take(struct batch *b)
{
    if (b->next >= b->count)
        return NULL;
    struct piece *p = &b->pieces[b->next++];
    if (b->next == b->count && b->queued) {  /* nothing left to take: off the queue */
        struct batch **link = &pool.head, *prev = NULL;
        while (*link != b) {
            prev = *link;
            link = &(*link)->qnext;
        }
        *link = b->qnext;
        if (pool.tail == b)
            pool.tail = prev;
        b->queued = false;
    }
    return p;
}

static void run_piece(struct piece *p)
{
    p->err = ost_read_iov(p->fd, p->dst, p->iov, p->iovcnt, p->n, p->oo, p->ost, true);
}

/* Caller holds pool.lock. */
static void finish(struct batch *b)
{
    if (++b->done == b->count)
        pthread_cond_signal(&b->all_done);
}

static void *worker(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (!pool.head && !pool.stop)
            pthread_cond_wait(&pool.work, &pool.lock);
        if (!pool.head)
            break;
        struct batch *b = pool.head;
        struct piece *p = take(b);
        pthread_mutex_unlock(&pool.lock);
        run_piece(p);
        pthread_mutex_lock(&pool.lock);
        finish(b);
    }
    pthread_mutex_unlock(&pool.lock);
    return NULL;
}

/* Read every piece of the batch: the pool and the calling thread together. */
static void run_batch(struct batch *b)
{
    pthread_cond_init(&b->all_done, NULL);
    pthread_mutex_lock(&pool.lock);
    b->queued = true;
    b->qnext = NULL;
    if (pool.tail)
        pool.tail->qnext = b;
    else
        pool.head = b;
    pool.tail = b;
    pthread_cond_broadcast(&pool.work);
    struct piece *p;
    while ((p = take(b))) {
        pthread_mutex_unlock(&pool.lock);
        run_piece(p);
        pthread_mutex_lock(&pool.lock);
        finish(b);
    }
    while (b->done < b->count)
        pthread_cond_wait(&b->all_done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_cond_destroy(&b->all_done);
}

int dispatch_start(const struct skfs_config *cfg, char *err, size_t errlen)
{
    memset(&pool, 0, sizeof pool);
    const char *policy = getenv("SK_MOUNT_DISPATCH");
    pool.policy = POLICY_SOLVER;
    if (policy && *policy) {
        int found = -1;
        for (int i = 0; i < 3; i++)
            if (strcmp(policy, policy_names[i]) == 0)
                found = i;
        if (found < 0) {
            snprintf(err, errlen, "SK_MOUNT_DISPATCH=%s: not solver, primary or round-robin",
                     policy);
            return -EINVAL;
        }
        pool.policy = found;
    }
    pool.min_bytes = cfg->dispatch_min_bytes;
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.work, NULL);
    if (!(pool.osts = calloc(cfg->ost_count, sizeof *pool.osts))) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    for (unsigned i = 0; i < cfg->ost_count; i++)
        pthread_mutex_init(&pool.osts[i].lock, NULL);
    if (pool.min_bytes == 0)
        return 0;  /* never dispatched: no pool */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (unsigned i = 0; i < POOL_THREADS; i++) {
        int rc = pthread_create(&pool.threads[i], NULL, worker, NULL);
        if (rc) {
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            snprintf(err, errlen, "starting the read pool: %s", strerror(rc));
            dispatch_stop();
            return -rc;
        }
        pool.nthreads++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    logmsg("read dispatch: %s, requests of %" PRIu64 " bytes and more, %u threads",
           policy_names[pool.policy], pool.min_bytes, pool.nthreads);
    return 0;
}

void dispatch_stop(void)
{
    pthread_mutex_lock(&pool.lock);
    pool.stop = true;
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);
    for (unsigned i = 0; i < pool.nthreads; i++)
        pthread_join(pool.threads[i], NULL);
    pool.nthreads = 0;
    if (pool.osts) {
        for (unsigned i = 0; i < fs.cfg.ost_count; i++)
            pthread_mutex_destroy(&pool.osts[i].lock);
        free(pool.osts);
        pool.osts = NULL;
    }
    pthread_cond_destroy(&pool.work);
    pthread_mutex_destroy(&pool.lock);
}

/* -- choosing ------------------------------------------------------------------------------ */

/* One piece of the request and the components (mirrors) able to serve it. */
struct span {
    uint64_t at, end;
    uint32_t nrep;
    uint32_t rep[8];          /* component indices, distinct OSTs, preferred first */
};

/* The solver's candidates: span i may be read from the disks disks[offsets[i]] ..
 * disks[offsets[i + 1] - 1], positions in osts of the OSTs its replicas are on. Returns the
 * bytes of all spans. */
static uint64_t span_disks(const struct sk_lov *lov, const struct span *spans, uint32_t nspans,
                           const uint32_t *osts, uint32_t nosts, int32_t *offsets,
                           int32_t *disks)
{
    uint64_t total = 0;
    offsets[0] = 0;
    for (uint32_t i = 0; i < nspans; i++) {
        total += spans[i].end - spans[i].at;
        int32_t n = offsets[i];
        for (uint32_t r = 0; r < spans[i].nrep; r++) {
            const struct sk_comp *c = &lov->comps[spans[i].rep[r]];
            uint32_t ost = c->objs[sk_comp_position(c, spans[i].at)].ost;
            for (uint32_t d = 0; d < nosts; d++)
                if (osts[d] == ost)
                    disks[n++] = (int32_t)d;
        }
        offsets[i + 1] = n;
    }
    return total;
}

/* Each OST's time for a span of `mean` bytes (cost), its latency (delay) and the work queued on
 * it (load), from its measurements; 0, or -1 when one is not finite. */
static int ost_costs(const uint32_t *osts, uint32_t nosts, double mean, double *cost,
                     double *delay, double *load)
{
    double known = 0;  /* the fastest measured: an unmeasured OST is tried as that fast */
    for (uint32_t d = 0; d < nosts; d++) {
        struct ost_stat *s = &pool.osts[osts[d]];
        pthread_mutex_lock(&s->lock);
        if (s->samples && (known == 0 || s->spb < known))
            known = s->spb;
        pthread_mutex_unlock(&s->lock);
    }
    if (!(known > 0))
        known = DEFAULT_SPB;
    for (uint32_t d = 0; d < nosts; d++) {
        struct ost_stat *s = &pool.osts[osts[d]];
        pthread_mutex_lock(&s->lock);
        double spb = s->samples && s->spb > 0 ? s->spb : known;
        double lat = s->samples ? s->lat : 0;
        pthread_mutex_unlock(&s->lock);
        cost[d] = spb * mean > 1e-12 ? spb * mean : 1e-12;
        delay[d] = isfinite(lat) && lat > 0 ? lat : 0;
        load[d] = (double)atomic_load(&s->inflight) * spb;
        if (!isfinite(cost[d]) || !isfinite(load[d]))
            return -1;
    }
    return 0;
}

/* The same model's time for reading every piece from its first mirror, each object front to
 * back (counts: room for nosts counters). */
static double in_order_time(uint32_t nspans, const int32_t *offsets, const int32_t *disks,
                            uint32_t nosts, const double *cost, const double *delay,
                            const double *load, int32_t *counts)
{
    double in_order = 0;
    for (uint32_t d = 0; d < nosts; d++)
        counts[d] = 0;
    for (uint32_t i = 0; i < nspans; i++)
        counts[disks[offsets[i]]]++;
    for (uint32_t d = 0; d < nosts; d++)
        if (counts[d] && delay[d] + load[d] + counts[d] * cost[d] > in_order)
            in_order = delay[d] + load[d] + counts[d] * cost[d];
    return in_order;
}

/* Choose a component per span (chosen[i]); 0, or -1 when the solver failed. */
static int choose(const struct sk_view *v, struct span *spans, uint32_t nspans,
                  const uint32_t *osts, uint32_t nosts, uint32_t *chosen, double *estimate)
{
    const struct sk_lov *lov = &v->lov;
    if (pool.policy == POLICY_PRIMARY) {
        for (uint32_t i = 0; i < nspans; i++)
            chosen[i] = spans[i].rep[0];
        return 0;
    }
    if (pool.policy == POLICY_ROUND_ROBIN) {
        unsigned start = atomic_fetch_add(&pool.rr, 1);
        for (uint32_t i = 0; i < nspans; i++)
            chosen[i] = spans[i].rep[(start + i) % spans[i].nrep];
        return 0;
    }
    int32_t *offsets = malloc((nspans + 1) * sizeof *offsets);
    int32_t *disks = malloc((size_t)nspans * 8 * sizeof *disks);
    double *cost = malloc(nosts * sizeof *cost), *delay = malloc(nosts * sizeof *delay);
    double *load = malloc(nosts * sizeof *load);
    int32_t *assignment = malloc(nspans * sizeof *assignment);
    int32_t *counts = malloc(nosts * sizeof *counts);
    int rc = -1;
    if (!offsets || !disks || !cost || !delay || !load || !assignment || !counts)
        goto out;
    uint64_t total = span_disks(lov, spans, nspans, osts, nosts, offsets, disks);
    if (ost_costs(osts, nosts, (double)total / nspans, cost, delay, load) < 0)
        goto out;
    sk_request request = {(int32_t)nspans, (int32_t)nosts, offsets, disks, cost, delay, load};
    sk_selection sel = {.assignment = assignment, .counts = counts};
    int st = sk_select_replicas(&request, SK_ALG_SLOTSEARCH, 1, &sel);
    if (st != SK_OK) {
        atomic_fetch_add(&pool.solver_errors, 1);
        logmsg("read dispatch: the solver failed (%s): the per-piece path reads",
               sk_status_text(st));
        goto out;
    }
    *estimate = sel.response_time;
    /* The solver's answer is taken only when it is clearly faster than reading in order.
     * Alternating stripes between mirrors that serve equally fast costs the objects' sequential
     * readahead (measured: 0.56x of in-order reads with every OST fast), which the model does
     * not see. */
    double in_order = in_order_time(nspans, offsets, disks, nosts, cost, delay, load, counts);
    if (in_order <= sel.response_time * (1 + IN_ORDER_SLACK)) {
        atomic_fetch_add(&pool.in_order, 1);
        *estimate = in_order;
        for (uint32_t i = 0; i < nspans; i++)
            chosen[i] = spans[i].rep[0];
        rc = 0;
        goto out;
    }
    for (uint32_t i = 0; i < nspans; i++) {
        chosen[i] = spans[i].rep[0];
        for (uint32_t r = 0; r < spans[i].nrep; r++) {
            const struct sk_comp *c = &lov->comps[spans[i].rep[r]];
            if (c->objs[sk_comp_position(c, spans[i].at)].ost == osts[assignment[i]]) {
                chosen[i] = spans[i].rep[r];
                break;
            }
        }
    }
    rc = 0;
out:
    free(offsets);
    free(disks);
    free(cost);
    free(delay);
    free(load);
    free(assignment);
    free(counts);
    return rc;
}

/* Split [off, end) into pieces at every stripe or component edge of the usable components.
 * 1 with *out when the request can be dispatched (every piece of data has a healthy replica
 * and one has two on distinct OSTs), 0 when not; holes are zeroed here. */
static int split(const struct sk_view *v, char *buf, uint64_t off, uint64_t end,
                 struct span **out, uint32_t *nout)
{
    const struct sk_lov *lov = &v->lov;
    uint32_t cap = 32, n = 0;
    struct span *spans = malloc(cap * sizeof *spans);
    bool several = false;
    if (!spans)
        return 0;
    for (uint64_t at = off; at < end;) {
        uint64_t next = end;
        bool covered = false;
        struct span sp = {.at = at, .nrep = 0};
        for (uint32_t i = 0; i < 2 * lov->ncomp; i++) {  /* prefer-flagged mirrors first */
            uint32_t k = i % lov->ncomp;
            const struct sk_comp *c = &lov->comps[k];
            if (c->prefer != (i < lov->ncomp) || !c->init || !sk_comp_covers(c, at))
                continue;
            covered = true;
            uint64_t edge = (at / c->stripe_size + 1) * c->stripe_size;
            if (c->end < edge)
                edge = c->end;
            if (edge < next)
                next = edge;
            uint32_t pos = sk_comp_position(c, at);
            uint32_t ost = c->objs[pos].ost;
            if (c->stale || v->fds[k][pos] < 0 || ost_failed(ost) || ost >= fs.cfg.ost_count)
                continue;
            bool dup = false;
            for (uint32_t r = 0; r < sp.nrep; r++) {
                const struct sk_comp *o = &lov->comps[sp.rep[r]];
                dup |= o->objs[sk_comp_position(o, at)].ost == ost;
            }
            if (!dup && sp.nrep < 8)
                sp.rep[sp.nrep++] = k;
        }
        if (!covered) {  /* no instantiated component: a hole up to the next one */
            for (uint32_t k = 0; k < lov->ncomp; k++)
                if (lov->comps[k].init && lov->comps[k].start > at && lov->comps[k].start < next)
                    next = lov->comps[k].start;
            memset(buf + (at - off), 0, next - at);
            at = next;
            continue;
        }
        if (sp.nrep == 0)
            goto no;  /* the per-piece path waits for recovery */
        several |= sp.nrep > 1;
        sp.end = next;
        if (n == cap) {
            struct span *grown = realloc(spans, 2 * cap * sizeof *spans);
            if (!grown)
                goto no;
            spans = grown;
            cap *= 2;
        }
        spans[n++] = sp;
        at = next;
    }
    if (!several || n == 0)
        goto no;
    *out = spans;
    *nout = n;
    return 1;
no:
    free(spans);
    return 0;
}

int dispatch_read(struct sk_view *v, char *buf, uint64_t off, uint64_t end,
                  const struct sk_inode *in)
{
    if (pool.min_bytes == 0 || end - off < pool.min_bytes || !v->raw || pool.nthreads == 0)
        return 1;
    struct span *spans;
    uint32_t n;
    if (!split(v, buf, off, end, &spans, &n))
        return 1;
    uint32_t osts[64], nosts = 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t r = 0; r < spans[i].nrep; r++) {
            const struct sk_comp *c = &v->lov.comps[spans[i].rep[r]];
            uint32_t ost = c->objs[sk_comp_position(c, spans[i].at)].ost;
            bool seen = false;
            for (uint32_t d = 0; d < nosts; d++)
                seen |= osts[d] == ost;
            if (!seen) {
                if (nosts == 64) {
                    free(spans);
                    return 1;
                }
                osts[nosts++] = ost;
            }
        }
    uint32_t *chosen = malloc(n * sizeof *chosen);
    struct piece *pieces = calloc(n, sizeof *pieces);
    double estimate = -1;
    if (!chosen || !pieces || choose(v, spans, n, osts, nosts, chosen, &estimate) < 0) {
        free(chosen);
        free(pieces);
        free(spans);
        atomic_fetch_add(&pool.fallbacks, 1);
        return 1;
    }
    for (uint32_t i = 0; i < n; i++) {
        const struct sk_comp *c = &v->lov.comps[chosen[i]];
        uint32_t pos = sk_comp_position(c, spans[i].at);
        struct piece *p = &pieces[i];
        p->fd = v->fds[chosen[i]][pos];
        p->dst = buf + (spans[i].at - off);
        p->n = spans[i].end - spans[i].at;
        p->oo = (off_t)sk_comp_object_offset(c, spans[i].at);
        p->ost = c->objs[pos].ost;
        inflight_add(p->ost, p->n);
    }
    struct batch b = {.pieces = pieces, .count = n};
    run_batch(&b);
    int rc = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct piece *p = &pieces[i];
        if (p->err) {
            logmsg("MDT inode %ju: OST %u: dispatched read: %s: the per-piece path reads again",
                   (uintmax_t)in->ino, p->ost, strerror(-p->err));
            rc = 1;
        }
        atomic_fetch_add(&pool.osts[p->ost].pieces, 1);
        atomic_fetch_add(&pool.osts[p->ost].piece_bytes, p->n);
    }
    atomic_fetch_add(rc ? &pool.fallbacks : &pool.requests, 1);
    if (fs.cfg.debug) {
        char line[512];
        int len = 0;
        for (uint32_t d = 0; d < nosts && len < 400; d++) {
            unsigned count = 0;
            for (uint32_t i = 0; i < n; i++)
                count += pieces[i].ost == osts[d];
            len += snprintf(line + len, sizeof line - (size_t)len, " OST%u=%u", osts[d], count);
        }
        logmsg("dispatch: MDT inode %ju [%" PRIu64 ", %" PRIu64 ") %u pieces by %s:%s"
               " (estimated %.3f ms)%s", (uintmax_t)in->ino, off, end, n,
               policy_names[pool.policy], line, estimate * 1e3, rc ? ", failed" : "");
    }
    free(chosen);
    free(pieces);
    free(spans);
    return rc;
}

/* Group the pieces (one per stripe, in request order) by object: a piece joins the group of
 * its object whose bytes it continues (stripes k and k + count of a component are adjacent in
 * their object), so each group is one preadv, as a Lustre client sends one RPC per OST.
 * groups[] gets the groups (their iov into iovs[]); returns how many, or 0 when out of
 * memory. */
static uint32_t group_pieces(const struct piece *pieces, uint32_t n, struct piece *groups,
                             struct iovec *iovs)
{
    uint32_t *of = malloc(n * sizeof *of), ng = 0;
    if (!of)
        return 0;
    for (uint32_t i = 0; i < n; i++) {
        const struct piece *p = &pieces[i];
        uint32_t g = 0;
        while (g < ng && !(groups[g].fd == p->fd && groups[g].oo + (off_t)groups[g].n == p->oo &&
                           groups[g].iovcnt < IOV_MAX))
            g++;
        if (g == ng)
            groups[ng++] = (struct piece){.fd = p->fd, .oo = p->oo, .ost = p->ost};
        groups[g].n += p->n;
        groups[g].iovcnt++;
        of[i] = g;
    }
    uint32_t at = 0;
    for (uint32_t g = 0; g < ng; g++) {
        groups[g].iov = iovs + at;
        at += (uint32_t)groups[g].iovcnt;
        groups[g].iovcnt = 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        struct piece *g = &groups[of[i]];
        g->iov[g->iovcnt++] = (struct iovec){.iov_base = pieces[i].dst, .iov_len = pieces[i].n};
    }
    free(of);
    return ng;
}

int dispatch_mirror(struct sk_view *v, char *buf, uint64_t off, uint64_t end, uint32_t mirror,
                    const struct sk_inode *in)
{
    const struct sk_lov *lov = &v->lov;
    uint32_t cap = 16, n = 0;
    struct piece *pieces = malloc(cap * sizeof *pieces), *groups = NULL;
    struct iovec *iovs = NULL;
    if (!pieces)
        return 1;
    for (uint64_t at = off; at < end;) {
        const struct sk_comp *c = NULL;
        uint32_t k;
        for (k = 0; k < lov->ncomp && !c; k++)
            if (lov->comps[k].mirror == mirror && lov->comps[k].init && !lov->comps[k].stale &&
                sk_comp_covers(&lov->comps[k], at))
                c = &lov->comps[k];
        if (!c)
            goto no;  /* a hole, or an extent this mirror lacks: the per-piece path */
        k--;
        uint32_t pos = sk_comp_position(c, at);
        if (v->fds[k][pos] < 0 || ost_failed(c->objs[pos].ost))
            goto no;
        uint64_t next = (at / c->stripe_size + 1) * c->stripe_size;
        if (c->end < next)
            next = c->end;
        if (end < next)
            next = end;
        if (n == cap) {
            struct piece *grown = realloc(pieces, 2 * cap * sizeof *pieces);
            if (!grown)
                goto no;
            pieces = grown;
            cap *= 2;
        }
        pieces[n++] = (struct piece){.fd = v->fds[k][pos], .dst = buf + (at - off),
                                     .n = next - at, .oo = (off_t)sk_comp_object_offset(c, at),
                                     .ost = c->objs[pos].ost};
        at = next;
    }
    groups = calloc(n, sizeof *groups);
    iovs = malloc(n * sizeof *iovs);
    uint32_t ng = groups && iovs ? group_pieces(pieces, n, groups, iovs) : 0;
    if (ng == 0)
        goto no;
    for (uint32_t g = 0; g < ng; g++)
        inflight_add(groups[g].ost, groups[g].n);
    if (ng == 1) {
        run_piece(&groups[0]);
    } else {
        struct batch b = {.pieces = groups, .count = ng};
        run_batch(&b);
    }
    int rc = 0;
    for (uint32_t g = 0; g < ng; g++)
        if (groups[g].err) {
            logmsg("MDT inode %ju: OST %u: read of mirror %u: %s: the per-piece path reads "
                   "again", (uintmax_t)in->ino, groups[g].ost, mirror, strerror(-groups[g].err));
            rc = 1;
        }
    free(pieces);
    free(groups);
    free(iovs);
    return rc;
no:
    free(pieces);
    free(groups);
    free(iovs);
    return 1;
}

int dispatch_striped(struct sk_view *v, char *buf, uint64_t off, uint64_t end,
                     const struct sk_inode *in)
{
    const struct sk_lov *lov = &v->lov;
    if (pool.nthreads == 0 || lov->ncomp == 0)
        return 1;
    const struct sk_comp *first = NULL;
    for (uint32_t k = 0; k < lov->ncomp; k++) {
        const struct sk_comp *c = &lov->comps[k];
        if (c->mirror != lov->comps[0].mirror)
            return 1;  /* mirrored: read dispatch or the per-piece path choose the copies */
        if (!first && c->init && sk_comp_covers(c, off))
            first = c;
    }
    if (!first || first->stale)
        return 1;
    uint64_t edge = (off / first->stripe_size + 1) * first->stripe_size;
    if (end <= edge || (first->count < 2 && end <= first->end))
        return 1;  /* one object's bytes: one pread, the per-piece path does just that */
    int rc = dispatch_mirror(v, buf, off, end, first->mirror, in);
    atomic_fetch_add(rc ? &pool.striped_fallbacks : &pool.striped, 1);
    return rc;
}

/* -- the counters ---------------------------------------------------------------------------- */

int dispatch_stats(char **out, size_t *len)
{
    size_t cap = 512 + (size_t)fs.cfg.ost_count * 400, used = 0;
    char *text = malloc(cap);
    if (!text)
        return -ENOMEM;
    used += (size_t)snprintf(text, cap,
                             "{\"policy\": \"%s\", \"min_bytes\": %" PRIu64 ", \"threads\": %u, "
                             "\"requests\": %" PRIuFAST64 ", \"fallbacks\": %" PRIuFAST64
                             ", \"solver_errors\": %" PRIuFAST64 ", \"in_order\": %"
                             PRIuFAST64 ", \"striped\": %" PRIuFAST64 ", \"striped_fallbacks\": %"
                             PRIuFAST64 ", \"osts\": [",
                             policy_names[pool.policy], pool.min_bytes, pool.nthreads,
                             atomic_load(&pool.requests), atomic_load(&pool.fallbacks),
                             atomic_load(&pool.solver_errors), atomic_load(&pool.in_order),
                             atomic_load(&pool.striped), atomic_load(&pool.striped_fallbacks));
    bool first = true;
    for (unsigned i = 0; pool.osts && i < fs.cfg.ost_count; i++) {
        struct ost_stat *s = &pool.osts[i];
        if (!atomic_load(&s->reads) && !atomic_load(&s->pieces))
            continue;
        if (used + 400 > cap)
            break;  /* cannot happen: 400 bytes per OST are more than a line takes */
        pthread_mutex_lock(&s->lock);
        double spb = s->spb, lat = s->lat;
        pthread_mutex_unlock(&s->lock);
        used += (size_t)snprintf(text + used, cap - used,
                                 "%s{\"ost\": %u, \"pieces\": %" PRIuFAST64 ", \"bytes\": %"
                                 PRIuFAST64 ", \"reads\": %" PRIuFAST64 ", \"read_bytes\": %"
                                 PRIuFAST64 ", \"seconds_per_byte\": %.6g, \"latency\": %.6g, "
                                 "\"inflight\": %" PRIuFAST64 "}",
                                 first ? "" : ", ", i, atomic_load(&s->pieces),
                                 atomic_load(&s->piece_bytes), atomic_load(&s->reads),
                                 atomic_load(&s->read_bytes), spb, lat,
                                 atomic_load(&s->inflight));
        first = false;
    }
    used += (size_t)snprintf(text + used, cap - used, "]}\n");
    *out = text;
    *len = used;
    return 0;
}
