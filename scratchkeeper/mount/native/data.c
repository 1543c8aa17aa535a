/* The scratch mount's data path (docs/mount.rst): reads and syncs of regular files through their
 * layouts' objects, and object owners following the file's. A stripe no mirror can serve makes
 * a read wait (wait.c). Writes, truncates and fallocates are change.c's. */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314

#include "skfs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int chown_objects(struct sk_inode *in, int fd, uid_t uid, gid_t gid)
{
    char path[64], *raw;
    size_t len;
    struct sk_lov lov;
    procpath(fd, path);
    int rc = read_lov_path(path, &raw, &len);
    if (rc < 0 || !raw)
        return rc;
    if ((rc = parse_lov(raw, len, &lov, in)) < 0) {
        free(raw);
        return rc;
    }
    for (uint32_t i = 0; i < lov.ncomp; i++)
        for (uint32_t j = 0; j < lov.comps[i].count; j++) {
            int ofd = open_object(&lov.comps[i].objs[j], O_RDONLY);
            if (ofd < 0)
                continue;  /* a failed OST: the store's restore gives it the owner back */
            if (fchown(ofd, uid, gid) < 0)
                logmsg("object %s: chown: %s", lov.comps[i].objs[j].id, strerror(errno));
            close(ofd);
        }
    sk_lov_free(&lov);
    free(raw);
    return 0;
}

void sk_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    (void)ino;
    struct sk_file *fh = (struct sk_file *)(uintptr_t)fi->fh;
    struct sk_view *v;
    int rc = view_get(fh, &v);
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    for (uint32_t i = 0; i < v->lov.ncomp && !rc; i++)
        for (uint32_t j = 0; j < v->lov.comps[i].count && !rc; j++) {
            int ofd = v->fds[i][j];
            if (ofd >= 0 && (datasync ? fdatasync(ofd) : fsync(ofd)) < 0)
                rc = -errno;
        }
    view_put(v);
    /* the size and the layout are the MDT inode's: sync it whole */
    if (!rc && fsync(fh->fd) < 0)
        rc = -errno;
    fuse_reply_err(req, -rc);
}

/* Fill buf (file bytes [base, end)) from *cur on; NEED_RECOVERY with *ost when a stripe no
 * mirror can serve is reached. */
/* For a QoS request: the usable component covering `at` whose OST has the fewest pieces of
 * admitted requests this interval (preferred, then layout order, on ties), that piece counted
 * on it at once so that requests choosing at the same time spread (qos_choose); -1 if none. */
static int least_loaded_copy(const struct sk_view *v, uint64_t at, const bool *excluded)
{
    const struct sk_lov *lov = &v->lov;
    uint32_t comps[lov->ncomp + 1], osts[lov->ncomp + 1];
    unsigned n = 0;
    for (uint32_t i = 0; i < 2 * lov->ncomp; i++) {
        uint32_t k = i % lov->ncomp;
        const struct sk_comp *c = &lov->comps[k];
        if (c->prefer != (i < lov->ncomp) || !c->init || c->stale || !sk_comp_covers(c, at) ||
            (k < 64 && excluded[k]))
            continue;
        uint32_t pos = sk_comp_position(c, at), ost = c->objs[pos].ost;
        if (v->fds[k][pos] < 0 || ost_failed(ost))
            continue;
        comps[n] = k;
        osts[n++] = ost;
    }
    if (n == 0)
        return -1;
    return (int)comps[qos_choose(osts, n)];
}

/* The copy the plan chose for the piece at `at`, if it is still usable; -1 otherwise. */
static int planned_copy(const struct sk_view *v, const struct qos_plan *plan, uint64_t at,
                        const bool *excluded)
{
    unsigned lo = 0, hi = plan->n;
    while (lo < hi) {  /* the items are in file order */
        unsigned mid = (lo + hi) / 2;
        if (plan->items[mid].start < at)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == plan->n || plan->items[lo].start != at)
        return -1;
    const struct qos_item *it = &plan->items[lo];
    uint32_t k = it->comps[it->chosen];
    if (k >= v->lov.ncomp || (k < 64 && excluded[k]))
        return -1;
    return (int)k;
}

/* The pieces of [off, end) (cut at the stripes of the first copy covering each) and the usable
 * copies of each; then a copy for each, assigned with the requests admitted together. */
static void build_plan(const struct sk_view *v, uint64_t off, uint64_t end, int64_t admitted,
                       struct qos_plan *plan)
{
    const struct sk_lov *lov = &v->lov;
    unsigned cap = 0;
    plan->items = NULL;
    plan->n = 0;
    for (uint64_t at = off; at < end;) {
        uint64_t next = end;
        struct qos_item item = {.start = at};
        bool covered = false;
        for (uint32_t i = 0; i < 2 * lov->ncomp; i++) {
            uint32_t k = i % lov->ncomp;
            const struct sk_comp *c = &lov->comps[k];
            if (c->prefer != (i < lov->ncomp) || !c->init || !sk_comp_covers(c, at))
                continue;
            if (!covered) {
                covered = true;
                next = (at / c->stripe_size + 1) * c->stripe_size;
                if (c->end < next)
                    next = c->end;
                if (next > end)
                    next = end;
            }
            uint32_t pos = sk_comp_position(c, at), ost = c->objs[pos].ost;
            if (c->stale || v->fds[k][pos] < 0 || ost_failed(ost) || item.n == QOS_MAX_COPIES)
                continue;
            item.comps[item.n] = k;
            item.osts[item.n++] = ost;
        }
        if (!covered)
            break;  /* a hole: the read path zeroes it */
        if (item.n > 0) {
            if (plan->n == cap) {
                unsigned grown = cap ? cap * 2 : 16;
                struct qos_item *items = realloc(plan->items, grown * sizeof *items);
                if (!items)
                    break;
                plan->items = items;
                cap = grown;
            }
            plan->items[plan->n++] = item;
        }
        at = next;
    }
    qos_assign(plan->items, plan->n, admitted);
}

int read_pieces(struct sk_view *v, char *buf, uint64_t base, uint64_t *cur, uint64_t end,
                const struct qos_plan *plan, int prefer_mirror, uint32_t *ost_out,
                const struct sk_inode *in)
{
    const struct sk_lov *lov = &v->lov;
    bool excluded[64] = {false};
    while (*cur < end) {
        uint64_t at = *cur;
        bool covered = false, served = false;
        uint32_t want = UINT32_MAX;
        /* the order the copies are tried in: for a QoS request the least loaded one first
         * (online retrieval), for a hybrid file the mirror the model chose (hybrid.c); then
         * mirrors flagged prefer (Lustre FLR's read preference), then the others, each in
         * layout order */
        uint32_t order[lov->ncomp + 1], norder = 0;
        int chosen = plan ? planned_copy(v, plan, at, excluded) : -1;
        if (plan && chosen < 0)
            chosen = least_loaded_copy(v, at, excluded);
        for (uint32_t k = 0; chosen < 0 && prefer_mirror >= 0 && k < lov->ncomp; k++)
            if ((int)lov->comps[k].mirror == prefer_mirror && sk_comp_covers(&lov->comps[k], at))
                chosen = (int)k;
        if (chosen >= 0)
            order[norder++] = (uint32_t)chosen;
        for (uint32_t i = 0; i < 2 * lov->ncomp; i++) {
            uint32_t k = i % lov->ncomp;
            if (lov->comps[k].prefer == (i < lov->ncomp) && (int)k != chosen)
                order[norder++] = k;
        }
        for (uint32_t o = 0; o < norder && !served; o++) {
            uint32_t k = order[o];
            const struct sk_comp *c = &lov->comps[k];
            if (!c->init || !sk_comp_covers(c, at))
                continue;
            covered = true;
            uint32_t pos = sk_comp_position(c, at);
            uint32_t ost = c->objs[pos].ost;
            if (c->stale || (k < 64 && excluded[k]))
                continue;
            int fd = v->fds[k][pos];
            if (fd < 0 || ost_failed(ost)) {
                if (want == UINT32_MAX)
                    want = ost;
                continue;
            }
            uint64_t piece_end = (at / c->stripe_size + 1) * c->stripe_size;
            if (piece_end > end)
                piece_end = end;
            if (c->end < piece_end)
                piece_end = c->end;
            uint64_t n = piece_end - at;
            off_t oo = (off_t)sk_comp_object_offset(c, at);
            bool failed = false;
            int err = ost_read(fd, buf + (at - base), n, oo, ost, false);
            if (err < 0) {
                logmsg("MDT inode %ju: OST %u object %s: read: %s", (uintmax_t)in->ino, ost,
                       c->objs[pos].id, strerror(-err));
                failed = true;
            }
            if (failed) {
                if (k < 64)
                    excluded[k] = true;
                if (want == UINT32_MAX)
                    want = ost;
                continue;
            }
            *cur = piece_end;
            served = true;
        }
        if (served)
            continue;
        if (covered) {
            *ost_out = want;
            return NEED_RECOVERY;
        }
        /* no instantiated component: nothing was ever written there */
        uint64_t next = end;
        for (uint32_t k = 0; k < lov->ncomp; k++)
            if (lov->comps[k].init && lov->comps[k].start > at && lov->comps[k].start < next)
                next = lov->comps[k].start;
        memset(buf + (at - base), 0, next - at);
        *cur = next;
    }
    return 0;
}

/* Copies of [off, end) a read can use (mirrors instantiated, not stale, covering `off`) and
 * the buckets (stripe pieces) the request spans. */
static unsigned usable_copies(const struct sk_view *v, uint64_t off, uint64_t end,
                              uint64_t *buckets)
{
    unsigned copies = 0;
    uint64_t stripe = 0;
    for (uint32_t k = 0; k < v->lov.ncomp; k++) {
        const struct sk_comp *c = &v->lov.comps[k];
        if (c->init && !c->stale && sk_comp_covers(c, off)) {
            copies++;
            if (!stripe)
                stripe = c->stripe_size;
        }
    }
    *buckets = stripe ? (end - 1) / stripe - off / stripe + 1 : 0;
    return copies;
}

void sk_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
             struct fuse_file_info *fi)
{
    (void)ino;
    struct sk_file *fh = (struct sk_file *)(uintptr_t)fi->fh;
    struct stat st;
    if (fstat(fh->fd, &st) < 0) {
        fuse_reply_err(req, errno);
        return;
    }
    if (off >= st.st_size || size == 0) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    uint64_t end = (uint64_t)off + size;
    if (end > (uint64_t)st.st_size)
        end = (uint64_t)st.st_size;
    char *buf = malloc(end - (uint64_t)off);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    uint64_t cur = (uint64_t)off;
    struct sk_wait wait = {0};
    struct qos_ticket ticket = {0};
    struct qos_plan plan = {0};
    bool asked = false;
    int rc, prefer_mirror = -1;
    pid_t pid = fuse_req_ctx(req)->pid;
    struct hybrid_seen seen;
    hybrid_enter(pid, fh->inode, &seen);
    bool random = atomic_exchange(&fh->inode->last_end, end) != (uint64_t)off;
    for (;;) {
        struct sk_view *v;
        uint32_t ost = UINT32_MAX;
        if ((rc = view_get(fh, &v)) < 0)
            break;
        if (!asked && v->raw && fs.cfg.qos_mode) {
            asked = true;
            uint64_t buckets;
            unsigned copies = usable_copies(v, (uint64_t)off, end, &buckets);
            if (qos_admit(req, copies, buckets, &ticket) > 0) {
                view_put(v);   /* it may have waited: the layout as it is now */
                if ((rc = view_get(fh, &v)) < 0)
                    break;
                if (v->raw)
                    build_plan(v, (uint64_t)off, end, ticket.interval, &plan);
            }
        }
        if (!v->raw) {
            /* no layout: an empty file, or bytes beyond what any object holds */
            memset(buf + (cur - (uint64_t)off), 0, end - cur);
            view_put(v);
            rc = 0;
            break;
        }
        if (cur == (uint64_t)off && wait.deadline == 0) {
            /* a QoS request's copies are the plan's (docs/qos.rst): no hybrid choice */
            int k = ticket.active ? -1 : hybrid_choose(v, (uint64_t)off, end, &seen, random,
                                                       false, fh->inode);
            if (k >= 0) {
                prefer_mirror = (int)v->lov.comps[k].mirror;
                rc = dispatch_mirror(v, buf, (uint64_t)off, end, (uint32_t)prefer_mirror,
                                     fh->inode);
            } else {
                rc = dispatch_read(v, buf, (uint64_t)off, end, fh->inode);
                if (rc)
                    rc = dispatch_striped(v, buf, (uint64_t)off, end, fh->inode);
            }
            if (rc == 0) {
                view_put(v);
                break;
            }
        }
        rc = read_pieces(v, buf, (uint64_t)off, &cur, end, ticket.active ? &plan : NULL,
                         prefer_mirror, &ost, fh->inode);
        view_put(v);
        if (rc != NEED_RECOVERY)
            break;
        /* a stripe no mirror holds: wait for recoveryd (or the OST's return), as Lustre waits
         * for its target, then read the layout again */
        if ((rc = wait_for_stripe(req, fh, &wait, cur, ost)) < 0)
            break;
    }
    qos_done(&ticket);
    hybrid_leave(pid, fh->inode);
    free(plan.items);
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else {
        reads_count(fh->inode, end - (uint64_t)off, fuse_req_ctx(req)->uid);
        fuse_reply_buf(req, buf, end - (uint64_t)off);
    }
    free(buf);
}
