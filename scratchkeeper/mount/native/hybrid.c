/* Hybrid replicas (the layout paper's §5; docs/layout.rst, "Hybrid replicas"): a file whose
 * usable mirrors have different layouts (stripe count or size) has each request served by the
 * one mirror the layout paper's cost model finds cheapest for it, and each write written to one
 * mirror, the others marked stale.
 *
 * A mirror of `count` stripes of `size` bytes serves a request of s bytes at `off` from the k
 * OSTs the request spans (at most `count`): the model's 1-DV for k = 1, 1-DH for k = n, else
 * 2-D with groups of k OSTs (scratchkeeper/advisor/hybrid.py's mirror_request_cost, in C).
 * The concurrent readers p are the processes with a read in flight on the mount (all on this
 * node: m = p); n, the OSTs their data is on, is the mirror's stripe count times the files
 * being read at once, at most the store's OSTs (one shared file: its stripes; a file per
 * process: spread over the OSTs). A request is sequential when it starts where the file's
 * previous read ended, random otherwise (alpha differs).
 *
 * The choice is logged when it changes for a file, and counted per layout in the read-only
 * attribute user.scratchkeeper.hybrid of the mount's root (JSON).
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314

#include "skfs_int.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_READERS 256

enum { ONE_DV, TWO_D, ONE_DH };
static const char *const layout_names[] = {"1-DV", "2-D", "1-DH"};

static struct {
    bool on;
    double e, v, alpha_seq, alpha_rand, beta_read, beta_write;
    pthread_mutex_t lock;                 /* the readers */
    struct { pid_t pid; unsigned n; } readers[MAX_READERS];
    unsigned nreaders, overflow, files;   /* distinct pids, pids past the table, inodes */
    atomic_uint_fast64_t reads[3], writes[3], invalidated;
} hy;

int hybrid_start(const struct skfs_config *cfg)
{
    memset(&hy, 0, sizeof hy);
    pthread_mutex_init(&hy.lock, NULL);
    if (!cfg->model_on)
        return 0;
    hy.on = true;
    hy.e = cfg->model[0];
    hy.v = cfg->model[1];
    hy.alpha_seq = cfg->model[2];
    hy.alpha_rand = cfg->model[3];
    hy.beta_read = cfg->model[4];
    hy.beta_write = cfg->model[5];
    return 0;
}

void hybrid_stop(void)
{
    pthread_mutex_destroy(&hy.lock);
}

/* -- who reads ------------------------------------------------------------------------------ */

void hybrid_enter(pid_t pid, struct sk_inode *in, struct hybrid_seen *seen)
{
    pthread_mutex_lock(&hy.lock);
    unsigned i;
    for (i = 0; i < hy.nreaders && hy.readers[i].pid != pid; i++)
        ;
    if (i < hy.nreaders)
        hy.readers[i].n++;
    else if (hy.nreaders < MAX_READERS)
        hy.readers[hy.nreaders++] = (typeof(hy.readers[0])){pid, 1};
    else
        hy.overflow++;
    if (in->reading++ == 0)
        hy.files++;
    seen->readers = hy.nreaders + hy.overflow;
    seen->files = hy.files;
    pthread_mutex_unlock(&hy.lock);
}

void hybrid_leave(pid_t pid, struct sk_inode *in)
{
    pthread_mutex_lock(&hy.lock);
    unsigned i;
    for (i = 0; i < hy.nreaders && hy.readers[i].pid != pid; i++)
        ;
    if (i < hy.nreaders) {
        if (--hy.readers[i].n == 0)
            hy.readers[i] = hy.readers[--hy.nreaders];
    } else if (hy.overflow) {
        hy.overflow--;
    }
    if (--in->reading == 0)
        hy.files--;
    pthread_mutex_unlock(&hy.lock);
}

/* -- the model (the layout paper's Table 2; scratchkeeper/advisor/model.py request_cost) ------ */

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return (a + b - 1) / b;
}

static double request_cost(int layout, uint64_t p, uint64_t m, uint64_t n, uint64_t s,
                           uint64_t g, bool random, bool write)
{
    double e = hy.e, v = hy.v, alpha = random ? hy.alpha_rand : hy.alpha_seq;
    double beta = write ? hy.beta_write : hy.beta_read, sz = (double)s;
    if (layout == ONE_DV) {
        uint64_t per_ost = ceil_div(p, n);
        uint64_t serial = (p <= n || m > per_ost) ? m : per_ost;
        return serial * e + serial * sz * v + per_ost * alpha + per_ost * sz * beta;
    }
    if (layout == ONE_DH) {
        double te, tx;
        if (m <= ceil_div(p, n)) {
            te = p * e;
            tx = p * sz * v / n;
        } else {
            te = m * n * e;
            tx = m * sz * v;
        }
        return te + tx + p * alpha + p * sz * beta / n;
    }
    uint64_t per_group = ceil_div(p, g), group_osts = ceil_div(n, g);
    double te, tx;
    if (p <= g) {
        te = m * group_osts * e;
        tx = m * sz * v;
    } else if (m * group_osts <= per_group) {
        te = per_group * e;
        tx = per_group * sz * v / group_osts;
    } else {
        te = m * group_osts * e;
        tx = m * sz * v;
    }
    return te + tx + per_group * alpha + per_group * sz * beta / group_osts;
}

/* The modelled seconds of [off, end) on component c, and its layout class in *layout. */
static double comp_cost(const struct sk_comp *c, uint64_t off, uint64_t end,
                        const struct hybrid_seen *seen, bool random, bool write, int *layout)
{
    uint64_t s = end - off, p = seen->readers ? seen->readers : 1;
    uint64_t k = (end - 1) / c->stripe_size - off / c->stripe_size + 1;
    if (k > c->count)
        k = c->count;
    uint64_t n = (uint64_t)c->count * (seen->files ? seen->files : 1);
    if (n > fs.cfg.ost_count)
        n = fs.cfg.ost_count;
    if (n < c->count)
        n = c->count;
    *layout = k == 1 ? ONE_DV : k == n ? ONE_DH : TWO_D;
    uint64_t g = n / k ? n / k : 1;
    return request_cost(*layout, p, p, n, s, g, random, write);
}

/* -- the choice ----------------------------------------------------------------------------- */

int hybrid_choose(const struct sk_view *v, uint64_t off, uint64_t end,
                  const struct hybrid_seen *seen, bool random, bool write,
                  const struct sk_inode *in)
{
    const struct sk_lov *lov = &v->lov;
    if (!hy.on || lov->ncomp < 2 || end <= off)
        return -1;
    int best = -1, best_layout = ONE_DV;
    double best_cost = INFINITY;
    bool differ = false;
    const struct sk_comp *first = NULL;
    for (uint32_t i = 0; i < 2 * lov->ncomp; i++) {  /* preferred mirrors first on ties */
        uint32_t k = i % lov->ncomp;
        const struct sk_comp *c = &lov->comps[k];
        if (c->prefer != (i < lov->ncomp) || !c->init || c->stale || !sk_comp_covers(c, off))
            continue;
        uint32_t pos = sk_comp_position(c, off);
        if (v->fds[k][pos] < 0 || ost_failed(c->objs[pos].ost))
            continue;
        if (!first)
            first = c;
        else if (c->count != first->count || c->stripe_size != first->stripe_size)
            differ = true;
        int layout;
        double cost = comp_cost(c, off, end, seen, random, write, &layout);
        if (cost < best_cost) {
            best_cost = cost;
            best = (int)k;
            best_layout = layout;
        }
    }
    if (!differ || best < 0)
        return -1;
    atomic_fetch_add(write ? &hy.writes[best_layout] : &hy.reads[best_layout], 1);
    const struct sk_comp *c = &lov->comps[best];
    int mirror = (int)c->mirror;
    int last = atomic_exchange(&((struct sk_inode *)in)->hybrid_last, mirror + 1);
    if (last != mirror + 1 || fs.cfg.debug)
        logmsg("hybrid: MDT inode %ju: %s of %" PRIu64 " bytes (%s, %u readers of %u files) "
               "from mirror %d (%u x %" PRIu64 ", %s): %.3f ms modelled", (uintmax_t)in->ino,
               write ? "write" : "read", end - off, random ? "random" : "sequential",
               seen->readers, seen->files, mirror, c->count, c->stripe_size,
               layout_names[best_layout], best_cost * 1e3);
    return best;
}

void hybrid_invalidated(void)
{
    atomic_fetch_add(&hy.invalidated, 1);
}

int hybrid_stats(char **out, size_t *len)
{
    char *text = malloc(512);
    if (!text)
        return -ENOMEM;
    int n = snprintf(text, 512,
                     "{\"on\": %s, \"reads\": {\"1-DV\": %" PRIuFAST64 ", \"2-D\": %" PRIuFAST64
                     ", \"1-DH\": %" PRIuFAST64 "}, \"writes\": {\"1-DV\": %" PRIuFAST64
                     ", \"2-D\": %" PRIuFAST64 ", \"1-DH\": %" PRIuFAST64 "}, \"invalidated\": %"
                     PRIuFAST64 "}\n", hy.on ? "true" : "false",
                     atomic_load(&hy.reads[0]), atomic_load(&hy.reads[1]),
                     atomic_load(&hy.reads[2]), atomic_load(&hy.writes[0]),
                     atomic_load(&hy.writes[1]), atomic_load(&hy.writes[2]),
                     atomic_load(&hy.invalidated));
    *out = text;
    *len = (size_t)n;
    return 0;
}
