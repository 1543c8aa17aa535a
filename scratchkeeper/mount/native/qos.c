/* Read QoS (the flash QoS paper; docs/qos.rst "On the mount"): admission per interval and online
 * retrieval for reads of files with at least qos.copies mirrors.
 *
 * Time is cut into intervals of qos.interval seconds (CLOCK_MONOTONIC). A read request of such
 * a file by a user under QoS (qos.users, or everyone) asks to be admitted with its buckets, one
 * per stripe piece it spans. Deterministic admission takes a request while the interval's
 * buckets stay within S = (c-1)M^2 + cM (c = qos.copies, M = qos.accesses), the count an
 * (N, c, 1) design reads in M accesses; statistical admission goes beyond S while
 * Q = sum_k (1 - P_k) R_k over the busy intervals so far, this one included, stays below
 * qos.epsilon (P_k sampled by the caller for the pool's design, R_k the share of busy intervals
 * that ended with k buckets). A request that does not fit waits for the next interval, in
 * arrival order (tickets: no request overtakes one that waits). A request larger than the
 * limit alone is admitted into an empty interval.
 *
 * Online retrieval: each piece of an admitted request is read from the copy whose OST has
 * been sent the fewest pieces of admitted requests in this interval (earliest finish with
 * equal service times, Theorem 1), preferred mirrors on ties; the piece is counted on that OST
 * as it is chosen, so requests choosing at the same moment spread over the copies.
 *
 * A violation: an admitted request that had not been served qos.interval seconds after its
 * admission (the interval is to be at least the time M accesses take). Counters are the
 * read-only attribute user.scratchkeeper.qos of the mount's root (JSON); `scratchkeeper store
 * stats` prints them. */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314

#include "skfs_int.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const mode_names[] = {"off", "deterministic", "statistical"};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t turn;
    int mode;
    unsigned copies, accesses;
    double interval, epsilon;
    uint64_t limit;
    /* lock: */
    int64_t current;          /* the interval now */
    uint64_t count;           /* its admitted buckets */
    uint64_t next_ticket, head;
    uint64_t busy;            /* intervals that admitted something */
    double failure_mass;      /* sum over busy intervals of (1 - P_k) */
    uint64_t admitted, delayed, violations, bypassed, buckets;
    int64_t last_violated;
    /* per OST, under `choose`: pieces of admitted requests sent there in interval `stamp` */
    pthread_mutex_t choose;
    uint64_t *stamp;
    unsigned *pieces;
} q = {.lock = PTHREAD_MUTEX_INITIALIZER, .turn = PTHREAD_COND_INITIALIZER,
       .choose = PTHREAD_MUTEX_INITIALIZER, .last_violated = -1};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double failure(uint64_t buckets)
{
    if (buckets <= q.limit)
        return 0.0;
    if (buckets > fs.cfg.qos_nprob)
        return 1.0;
    return 1.0 - fs.cfg.qos_prob[buckets - 1];
}

/* Caller holds q.lock: move to the interval of `t`, closing the one before. */
static void roll(double t)
{
    int64_t index = (int64_t)floor(t / q.interval);
    if (index == q.current)
        return;
    if (q.count > 0) {
        q.busy++;
        q.failure_mass += failure(q.count);
    }
    q.current = index;
    q.count = 0;
    pthread_cond_broadcast(&q.turn);
}

static bool fits(uint64_t buckets)
{
    uint64_t total = q.count + buckets;
    if (total <= q.limit || q.count == 0)
        return true;
    return q.mode == 2 &&
           (q.failure_mass + failure(total)) / (double)(q.busy + 1) < q.epsilon;
}

static bool under_qos(uid_t uid)
{
    if (fs.cfg.qos_nusers == 0)
        return true;
    for (unsigned i = 0; i < fs.cfg.qos_nusers; i++)
        if (fs.cfg.qos_users[i] == uid)
            return true;
    return false;
}

int qos_admit(fuse_req_t req, unsigned copies, uint64_t buckets, struct qos_ticket *t)
{
    t->active = false;
    if (q.mode == 0 || buckets == 0)
        return 0;
    if (copies < q.copies || !under_qos(fuse_req_ctx(req)->uid)) {
        __atomic_fetch_add(&q.bypassed, 1, __ATOMIC_RELAXED);
        return 0;
    }
    pthread_mutex_lock(&q.lock);
    roll(now_seconds());
    uint64_t mine = q.next_ticket++;
    bool waited = false;
    while (q.head != mine || !fits(buckets)) {
        waited = true;
        double next = ((double)q.current + 1) * q.interval;
        /* the condition variable runs on CLOCK_REALTIME: wait the same span from now */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double span = next - now_seconds();
        if (span < 0)
            span = 0;
        double whole = (double)until.tv_nsec / 1e9 + span + 1e-4;
        until.tv_sec += (time_t)whole;
        until.tv_nsec = (long)((whole - floor(whole)) * 1e9);
        pthread_cond_timedwait(&q.turn, &q.lock, &until);
        roll(now_seconds());
    }
    q.count += buckets;
    q.head++;
    q.admitted++;
    q.buckets += buckets;
    if (waited)
        q.delayed++;
    t->active = true;
    t->interval = q.current;
    t->admitted_at = now_seconds();
    pthread_cond_broadcast(&q.turn);
    pthread_mutex_unlock(&q.lock);
    return 1;
}

void qos_done(const struct qos_ticket *t)
{
    if (!t->active)
        return;
    /* online: served within T of its admission; interval retrieval: within the interval
     * after the one that admitted it (its retrieval's) */
    double deadline = fs.cfg.qos_retrieval == QOS_RETRIEVAL_INTERVAL
                          ? (double)(t->interval + 2) * q.interval
                          : t->admitted_at + q.interval;
    if (now_seconds() <= deadline)
        return;
    pthread_mutex_lock(&q.lock);
    if (q.last_violated != t->interval) {
        q.violations++;
        q.last_violated = t->interval;
    }
    pthread_mutex_unlock(&q.lock);
}

static int64_t current_index(void)
{
    return (int64_t)floor(now_seconds() / q.interval);
}

/* Caller holds q.choose: the pieces counted on `ost` in interval `index`. */
static unsigned load_of(uint32_t ost, uint64_t index)
{
    if (q.stamp[ost] != index) {
        q.stamp[ost] = index;
        q.pieces[ost] = 0;
    }
    return q.pieces[ost];
}

unsigned qos_choose(const uint32_t *osts, unsigned n)
{
    if (!q.pieces || n == 0)
        return 0;
    uint64_t index = (uint64_t)current_index();
    unsigned best = 0, best_load = UINT_MAX;
    pthread_mutex_lock(&q.choose);
    for (unsigned i = 0; i < n; i++) {
        if (osts[i] >= fs.cfg.ost_count)
            continue;
        unsigned load = load_of(osts[i], index);
        if (load < best_load) {
            best = i;
            best_load = load;
        }
    }
    if (best_load != UINT_MAX)
        q.pieces[osts[best]]++;
    pthread_mutex_unlock(&q.choose);
    return best;
}

/* -- batch assignment ------------------------------------------------------------------- */

struct batch_req {
    struct qos_item *items;
    unsigned n;
    int64_t batch;              /* online: 0; interval retrieval: the admission's interval */
    bool leader;                /* collects the batch's requests and assigns them */
    bool done;
    struct batch_req *next;
};

static struct {
    struct batch_req *head;     /* q.choose: requests waiting to be assigned */
    pthread_cond_t assigned;
} qb = {.assigned = PTHREAD_COND_INITIALIZER};

/* Caller holds q.choose: each piece on its least loaded copy, the pieces with the fewest copies
 * first. */
static void assign_greedy(struct qos_item **all, unsigned m, uint64_t index)
{
    for (unsigned c = 1; c <= QOS_MAX_COPIES; c++)
        for (unsigned i = 0; i < m; i++) {
            struct qos_item *it = all[i];
            if (it->n != c)
                continue;
            unsigned best = 0, best_load = UINT_MAX;
            for (unsigned j = 0; j < it->n; j++) {
                unsigned load = load_of(it->osts[j], index);
                if (load < best_load) {
                    best = j;
                    best_load = load;
                }
            }
            it->chosen = best;
            q.pieces[it->osts[best]]++;
        }
}

/* The breadth-first search of shift_along_path: per OST, the search that saw it last (stamp)
 * and the piece it was reached by; the OSTs to visit. */
struct path_search {
    unsigned *seen;
    int *via;
    uint32_t *queue;
};

/* Caller holds q.choose: from `start`, a fullest OST (`top` pieces), look for an OST with at
 * least two pieces fewer, each step moving a piece to another of its copies; when there is one,
 * shift each piece on the path one step along it and return true. `stamp` is new per search. */
static bool shift_along_path(struct qos_item **all, unsigned m, uint32_t start, unsigned top,
                             unsigned stamp, uint64_t index, struct path_search *ps)
{
    unsigned head = 0, tail = 0;
    ps->seen[start] = stamp;
    ps->via[start] = -1;
    ps->queue[tail++] = start;
    while (head < tail) {
        uint32_t u = ps->queue[head++];
        for (unsigned i = 0; i < m; i++) {
            struct qos_item *it = all[i];
            if (it->osts[it->chosen] != u)
                continue;
            for (unsigned j = 0; j < it->n; j++) {
                uint32_t b = it->osts[j];
                if (b >= fs.cfg.ost_count || ps->seen[b] == stamp)
                    continue;
                ps->seen[b] = stamp;
                ps->via[b] = (int)i;
                load_of(b, index);
                if (q.pieces[b] + 2 <= top) {
                    uint32_t at = b;
                    while (ps->via[at] >= 0) {
                        struct qos_item *step = all[ps->via[at]];
                        uint32_t from = step->osts[step->chosen];
                        for (unsigned k = 0; k < step->n; k++)
                            if (step->osts[k] == at)
                                step->chosen = k;
                        at = from;
                    }
                    q.pieces[start]--;
                    q.pieces[b]++;
                    return true;
                }
                ps->queue[tail++] = b;
            }
        }
    }
    return false;
}

/* Caller holds q.choose: alternating paths, each moving a piece off a fullest OST, until none
 * lowers the fullest (or a bound on the rounds). */
static void balance_paths(struct qos_item **all, unsigned m, uint64_t index,
                          struct path_search *ps)
{
    for (unsigned round = 0; round < 4 * m + 8; round++) {
        unsigned top = 0;
        for (unsigned i = 0; i < m; i++) {
            unsigned load = q.pieces[all[i]->osts[all[i]->chosen]];
            if (load > top)
                top = load;
        }
        if (top < 2)
            break;
        bool moved = false;
        for (unsigned s = 0; s < m && !moved; s++) {
            uint32_t start = all[s]->osts[all[s]->chosen];
            if (q.pieces[start] != top)
                continue;
            moved = shift_along_path(all, m, start, top, round * (m + 1) + s + 1, index, ps);
        }
        if (!moved)
            break;
    }
}

/* Caller holds q.choose: the items of every request in `reqs`, each on one of its copies, the
 * most pieces on one OST this interval (the ones sent before counted) as few as possible:
 * greedy (fewest copies first), then alternating paths from a fullest OST to one with at
 * least two pieces fewer, as design-theoretic retrieval remaps. */
static void assign_batch(struct batch_req *reqs)
{
    unsigned total = 0;
    for (struct batch_req *r = reqs; r; r = r->next)
        total += r->n;
    if (total == 0)
        return;
    struct qos_item **all = malloc(total * sizeof *all);
    struct path_search ps = {calloc(fs.cfg.ost_count, sizeof *ps.seen),
                             malloc(fs.cfg.ost_count * sizeof *ps.via),
                             malloc(fs.cfg.ost_count * sizeof *ps.queue)};
    if (all && ps.seen && ps.via && ps.queue) {
        uint64_t index = (uint64_t)current_index();
        unsigned m = 0;
        for (struct batch_req *r = reqs; r; r = r->next)
            for (unsigned i = 0; i < r->n; i++)
                all[m++] = &r->items[i];
        assign_greedy(all, m, index);
        balance_paths(all, m, index, &ps);
    } else {
        for (struct batch_req *r = reqs; r; r = r->next)   /* greedy, one at a time */
            for (unsigned i = 0; i < r->n; i++)
                r->items[i].chosen = 0;
    }
    free(all);
    free(ps.seen);
    free(ps.via);
    free(ps.queue);
}

/* Sleep until CLOCK_MONOTONIC reads `t` seconds (at once when it is past). */
static void sleep_until(double t)
{
    struct timespec until = {(time_t)floor(t), (long)((t - floor(t)) * 1e9)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
        ;
}

void qos_assign(struct qos_item *items, unsigned n, int64_t admitted)
{
    if (!q.pieces || n == 0)
        return;
    for (unsigned i = 0; i < n; i++)
        items[i].chosen = 0;
    bool by_interval = fs.cfg.qos_retrieval == QOS_RETRIEVAL_INTERVAL;
    struct batch_req me = {.items = items, .n = n, .batch = by_interval ? admitted : 0,
                           .leader = true};
    pthread_mutex_lock(&q.choose);
    for (struct batch_req *r = qb.head; r; r = r->next)
        if (r->leader && r->batch == me.batch)
            me.leader = false;  /* a leader of this batch collects it */
    me.next = qb.head;
    qb.head = &me;
    if (me.leader) {
        /* online: collect the requests admitted within qos.batch; interval retrieval (the
         * flash QoS paper's design-theoretic retrieval): those admitted in the interval, given their
         * copies together at the start of the next one */
        pthread_mutex_unlock(&q.choose);
        if (by_interval)
            sleep_until((double)(admitted + 1) * q.interval);
        else if (fs.cfg.qos_batch > 0)
            sleep_until(now_seconds() + fs.cfg.qos_batch);
        pthread_mutex_lock(&q.choose);
        struct batch_req *mine = NULL, **link = &qb.head;
        while (*link) {
            struct batch_req *r = *link;
            if (r->batch == me.batch) {
                *link = r->next;
                r->next = mine;
                mine = r;
            } else {
                link = &r->next;
            }
        }
        assign_batch(mine);
        for (struct batch_req *r = mine; r; r = r->next)
            r->done = true;
        pthread_cond_broadcast(&qb.assigned);
    }
    while (!me.done)
        pthread_cond_wait(&qb.assigned, &q.choose);
    pthread_mutex_unlock(&q.choose);
}

int qos_start(const struct skfs_config *cfg, char *err, size_t errlen)
{
    q.mode = cfg->qos_mode;
    if (q.mode == 0)
        return 0;
    if (cfg->qos_copies < 2 || cfg->qos_accesses < 1 || !(cfg->qos_interval > 0)) {
        snprintf(err, errlen, "read QoS: copies >= 2, accesses >= 1 and interval > 0 needed");
        return -EINVAL;
    }
    q.copies = cfg->qos_copies;
    q.accesses = cfg->qos_accesses;
    q.interval = cfg->qos_interval;
    q.epsilon = cfg->qos_epsilon;
    q.limit = (uint64_t)(cfg->qos_copies - 1) * cfg->qos_accesses * cfg->qos_accesses +
              (uint64_t)cfg->qos_copies * cfg->qos_accesses;
    q.current = current_index();
    q.count = q.next_ticket = q.head = q.busy = 0;
    q.failure_mass = 0;
    q.admitted = q.delayed = q.violations = q.bypassed = q.buckets = 0;
    q.last_violated = -1;
    q.stamp = calloc(cfg->ost_count, sizeof *q.stamp);
    q.pieces = calloc(cfg->ost_count, sizeof *q.pieces);
    if (!q.stamp || !q.pieces) {
        free(q.stamp);
        free(q.pieces);
        q.stamp = NULL;
        q.pieces = NULL;
        snprintf(err, errlen, "read QoS: out of memory");
        return -ENOMEM;
    }
    return 0;
}

void qos_stop(void)
{
    free(q.stamp);
    free(q.pieces);
    q.stamp = NULL;
    q.pieces = NULL;
    q.mode = 0;
}

int qos_stats(char **out, size_t *len)
{
    size_t cap = 1024;
    char *text = malloc(cap);
    if (!text)
        return -ENOMEM;
    pthread_mutex_lock(&q.lock);
    roll(now_seconds());
    double risk = q.busy ? q.failure_mass / (double)q.busy : 0.0;
    int n = snprintf(text, cap,
                     "{\"mode\": \"%s\", \"retrieval\": \"%s\", \"copies\": %u, "
                     "\"accesses\": %u, \"interval\": %.6g, "
                     "\"limit\": %" PRIu64 ", \"epsilon\": %.6g, \"admitted\": %" PRIu64
                     ", \"admitted_buckets\": %" PRIu64 ", \"delayed\": %" PRIu64
                     ", \"violations\": %" PRIu64 ", \"busy_intervals\": %" PRIu64
                     ", \"risk\": %.6g, \"bypassed\": %" PRIu64 ", \"users\": %u}\n",
                     mode_names[q.mode],
                     fs.cfg.qos_retrieval == QOS_RETRIEVAL_INTERVAL ? "interval" : "online",
                     q.copies, q.accesses, q.interval, q.limit, q.epsilon,
                     q.admitted, q.buckets, q.delayed, q.violations, q.busy, risk,
                     __atomic_load_n(&q.bypassed, __ATOMIC_RELAXED), fs.cfg.qos_nusers);
    pthread_mutex_unlock(&q.lock);
    *out = text;
    *len = (size_t)n;
    return 0;
}
