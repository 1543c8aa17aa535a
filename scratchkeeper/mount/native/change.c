/* The scratch mount's changes of a regular file's data and size: truncate, write, fallocate,
 * each all or nothing across the file's objects (docs/mount.rst, "All or nothing").
 *
 * Each opens (or finds open) every object it must change and checks its OST before it changes
 * any: an object that cannot be reached makes its mirror stale first when another mirror takes
 * the whole change, else the change fails with EIO and nothing changed. Issue 46: a truncate
 * cut the objects on the live OSTs, then failed on the one on a failed OST and kept the size;
 * once the OST was back the file read zeros where its bytes had been.
 *
 * A write keeps the bytes it overwrites and puts them back if a piece fails (an I/O error, a
 * full OST), and grows the MDT inode last. A truncate sets the MDT inode's size before it cuts
 * the objects: bytes past the end are never read, so a cut that fails, or a crash in between,
 * leaves the new file whole. Whatever grows a file first cuts the objects it exposes to the
 * file's end, so such bytes never come back as the file's. All run under the inode's lock. */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314

#include "skfs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHANGE_TRIES 4  /* a layout changed by the store meanwhile: read again, at most so often */

/* Object `pos` of `c` holds the object bytes [osize(a), osize(b)) of file bytes [a, b) (object
 * offsets grow with file offsets): it takes part in a change of [a, b) when that is not empty. */
static uint64_t osize(const struct sk_comp *c, uint32_t pos, uint64_t size)
{
    return sk_comp_object_size(c, pos, size);
}

static bool reachable(int fd, const struct sk_obj *obj)
{
    return fd >= 0 && !ost_failed(obj->ost);
}

static int pwrite_all(int fd, const char *buf, uint64_t n, uint64_t at)
{
    for (uint64_t done = 0; done < n;) {
        ssize_t w = pwrite(fd, buf + done, n - done, (off_t)(at + done));
        if (w > 0)
            done += (uint64_t)w;
        else if (w == 0 || errno != EINTR)
            return w == 0 ? -EIO : -errno;
    }
    return 0;
}

static int pread_all(int fd, char *buf, uint64_t n, uint64_t at)
{
    for (uint64_t done = 0; done < n;) {
        ssize_t r = pread(fd, buf + done, n - done, (off_t)(at + done));
        if (r < 0 && errno != EINTR)
            return -errno;
        if (r == 0) {
            memset(buf + done, 0, n - done);  /* past the object's end: nothing there */
            break;
        }
        if (r > 0)
            done += (uint64_t)r;
    }
    return 0;
}

/* Object `fd` cut to `keep` bytes if it holds more: 0 or -errno. */
static int cut_to(int fd, uint64_t keep)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if ((uint64_t)st.st_size > keep && ftruncate(fd, (off_t)keep) < 0)
        return -errno;
    return 0;
}

/* Before the file grows from `cur` to `next` bytes: each object of a component read from
 * (`skip[k]` false) whose share of the file grows loses what it holds past the file's end now
 * (a cut that failed, a crash between the MDT inode's size and the objects), so that the new
 * bytes read as zeros. `fds`: the objects open ([component][position]), or NULL to open each
 * here. Objects on failed OSTs are passed over: a truncate never succeeds without cutting
 * them. 0 or -errno, nothing visible changed either way. */
static int cut_tails(const struct sk_lov *lov, int *const *fds, const bool *skip, uint64_t cur,
                     uint64_t next, const struct sk_inode *in)
{
    for (uint32_t k = 0; k < lov->ncomp; k++) {
        const struct sk_comp *c = &lov->comps[k];
        if (!c->init || c->stale || (skip && skip[k]))
            continue;
        for (uint32_t pos = 0; pos < c->count; pos++) {
            uint64_t keep = osize(c, pos, cur);
            if (osize(c, pos, next) <= keep)
                continue;
            int fd = fds ? fds[k][pos] : open_object(&c->objs[pos], O_WRONLY);
            if (!reachable(fd, &c->objs[pos])) {
                if (!fds && fd >= 0)
                    close(fd);
                continue;
            }
            int rc = cut_to(fd, keep);
            if (!fds)
                close(fd);
            if (rc < 0) {
                logmsg("MDT inode %ju: OST %u object %s: cutting it to the file's end: %s",
                       (uintmax_t)in->ino, c->objs[pos].ost, c->objs[pos].id, strerror(-rc));
                return rc;
            }
        }
    }
    return 0;
}

/* -- truncate ------------------------------------------------------------------------------ */

static int **object_table(const struct sk_lov *lov)
{
    int **fds = calloc(lov->ncomp, sizeof *fds);
    for (uint32_t k = 0; fds && k < lov->ncomp; k++) {
        if (!(fds[k] = malloc((lov->comps[k].count + 1) * sizeof **fds))) {
            while (k--)
                free(fds[k]);
            free(fds);
            return NULL;
        }
        for (uint32_t pos = 0; pos < lov->comps[k].count; pos++)
            fds[k][pos] = -1;
    }
    return fds;
}

static void object_table_free(const struct sk_lov *lov, int **fds)
{
    for (uint32_t k = 0; fds && k < lov->ncomp; k++) {
        for (uint32_t pos = 0; pos < lov->comps[k].count; pos++)
            if (fds[k][pos] >= 0)
                close(fds[k][pos]);
        free(fds[k]);
    }
    free(fds);
}

/* The objects a shrink from `old` to `size` cuts, opened into `fds`; blocked[k]: an in-sync
 * component with one that cannot be opened (its OST failed). Whether any is blocked. */
static bool open_cut(const struct sk_lov *lov, int **fds, uint64_t old, uint64_t size,
                     bool *blocked)
{
    bool any = false;
    for (uint32_t k = 0; k < lov->ncomp; k++) {
        const struct sk_comp *c = &lov->comps[k];
        for (uint32_t pos = 0; c->init && pos < c->count; pos++) {
            if (osize(c, pos, old) <= osize(c, pos, size))
                continue;
            fds[k][pos] = open_object(&c->objs[pos], O_WRONLY);
            if (fds[k][pos] < 0 && !c->stale)
                blocked[k] = any = true;
        }
    }
    return any;
}

static unsigned objects_cut(const struct sk_lov *lov, uint64_t old, uint64_t size)
{
    unsigned n = 0;
    for (uint32_t k = 0; k < lov->ncomp; k++)
        for (uint32_t pos = 0; lov->comps[k].init && pos < lov->comps[k].count; pos++)
            n += osize(&lov->comps[k], pos, old) > osize(&lov->comps[k], pos, size);
    return n;
}

/* Shrink the file from `old` to `size` bytes (layout `raw`, parsed as `lov`). */
static int shrink(struct sk_inode *in, int fd, const char *raw, size_t len,
                  const struct sk_lov *lov, uint64_t old, uint64_t size, uid_t uid)
{
    unsigned charged = objects_cut(lov, old, size);
    int rc = fds_charge(uid, charged);
    if (rc < 0)
        return rc;
    int **fds = object_table(lov);
    bool *blocked = calloc(lov->ncomp, sizeof *blocked);
    bool *ok = calloc(lov->ncomp, sizeof *ok);
    if (!fds || !blocked || !ok) {
        rc = -ENOMEM;
        goto out;
    }
    if (open_cut(lov, fds, old, size, blocked)) {
        for (uint32_t k = 0; k < lov->ncomp; k++)
            ok[k] = lov->comps[k].init && !lov->comps[k].stale && !blocked[k];
        if (!some_mirror_covers(lov, ok, size, old)) {
            logmsg("MDT inode %ju: truncate to %ju: an object to cut cannot be reached (a "
                   "failed OST) and no other mirror can take it: nothing changed",
                   (uintmax_t)in->ino, (uintmax_t)size);
            rc = -EIO;
            goto out;
        }
        if ((rc = mark_stale(fd, raw, len, blocked, in)) < 0)
            goto out;
    }
    /* the size first: what lies past it is never read, so the cuts cannot leave a mix */
    if (ftruncate(fd, (off_t)size) < 0) {
        rc = -errno;
        goto out;
    }
    for (uint32_t k = 0; k < lov->ncomp; k++)
        for (uint32_t pos = 0; pos < lov->comps[k].count; pos++) {
            const struct sk_comp *c = &lov->comps[k];
            int err = fds[k][pos] >= 0 ? cut_to(fds[k][pos], osize(c, pos, size)) : 0;
            if (err < 0 && !c->stale && !blocked[k])
                logmsg("MDT inode %ju: OST %u object %s: truncate: %s (its bytes past the end "
                       "are cut when the file grows)", (uintmax_t)in->ino, c->objs[pos].ost,
                       c->objs[pos].id, strerror(-err));
        }
out:
    if (fds)
        object_table_free(lov, fds);
    free(blocked);
    free(ok);
    fds_release(uid, charged);
    return rc;
}

static int truncate_once(struct sk_inode *in, int fd, off_t size, uid_t uid)
{
    struct stat st;
    passthrough_sync_size(in, fd);  /* what the kernel wrote past the MDT's end is the file's */
    if (fstat(fd, &st) < 0)
        return -errno;
    char *raw;
    size_t len;
    int rc = read_lov_fd(fd, &raw, &len);
    if (rc < 0)
        return rc;
    if (!raw)
        return ftruncate(fd, size) < 0 ? -errno : 0;
    struct sk_lov lov;
    if ((rc = parse_lov(raw, len, &lov, in)) < 0) {
        free(raw);
        return rc;
    }
    if (size < st.st_size)
        rc = shrink(in, fd, raw, len, &lov, (uint64_t)st.st_size, (uint64_t)size, uid);
    else if ((rc = cut_tails(&lov, NULL, NULL, (uint64_t)st.st_size, (uint64_t)size, in)) == 0 &&
             (rc = passthrough_grown(in, (uint64_t)size)) == 0)
        /* a larger size changes no object (but the one the kernel reads, passthrough.c) */
        rc = ftruncate(fd, size) < 0 ? -errno : 0;
    sk_lov_free(&lov);
    free(raw);
    return rc;
}

int truncate_locked(struct sk_inode *in, int fd, off_t size, uid_t uid)
{
    int rc = -EAGAIN;
    for (int i = 0; rc == -EAGAIN && i < CHANGE_TRIES; i++)
        rc = truncate_once(in, fd, size, uid);
    return rc == -EAGAIN ? -EIO : rc;
}

/* -- views of open files --------------------------------------------------------------------- */

/* Whether the view could not open an object whose OST is up now (made during an outage). */
static bool missed_object(const struct sk_view *v)
{
    for (uint32_t k = 0; k < v->lov.ncomp; k++)
        for (uint32_t pos = 0; v->lov.comps[k].init && pos < v->lov.comps[k].count; pos++)
            if (v->fds[k][pos] < 0 && !ost_failed(v->lov.comps[k].objs[pos].ost))
                return true;
    return false;
}

/* The handle's view, made again when it misses an object whose OST is back. */
static int change_view(struct sk_file *fh, struct sk_view **out)
{
    int rc = view_get(fh, out);
    if (rc < 0 || !(*out)->raw || !missed_object(*out))
        return rc;
    view_put(*out);
    view_reset(fh);
    return view_get(fh, out);
}

/* Whether every object of component k holding a byte of [a, b) is open on an OST that is up. */
static bool component_reachable(const struct sk_view *v, uint32_t k, uint64_t a, uint64_t b)
{
    const struct sk_comp *c = &v->lov.comps[k];
    for (uint32_t pos = 0; pos < c->count; pos++)
        if (osize(c, pos, b) > osize(c, pos, a) && !reachable(v->fds[k][pos], &c->objs[pos]))
            return false;
    return true;
}

/* -- write ------------------------------------------------------------------------------------- */

/* One stripe piece of a write: the object bytes it changes and what they were. */
struct piece {
    int fd;
    const struct sk_obj *obj;
    const char *src;
    uint64_t at, len;       /* object offset and bytes written there */
    uint64_t size;          /* the object's size before the write */
    char *old;              /* its bytes [at, at + oldlen) before (within that size) */
    uint64_t oldlen;
};

/* Where a request thread keeps the bytes its writes overwrite: kept from one write to the
 * next (at most mount.max_request times the mirrors), so that an overwrite costs a copy, not
 * fresh pages; freed with the thread (libfuse ends idle ones). */
struct undo_space {
    char *buf;
    uint64_t cap;
};
static pthread_key_t undo_key;
static pthread_once_t undo_once = PTHREAD_ONCE_INIT;
static int undo_keyed;  /* 0, or the error of pthread_key_create */

static void undo_space_free(void *arg)
{
    struct undo_space *u = arg;
    free(u->buf);
    free(u);
}

static void undo_key_make(void)
{
    if ((undo_keyed = pthread_key_create(&undo_key, undo_space_free)) != 0)
        logmsg("writes cannot keep what they overwrite: %s", strerror(undo_keyed));
}

/* n bytes of the thread's space, or NULL (a write over bytes then fails with ENOMEM). */
static char *undo_space(uint64_t n)
{
    pthread_once(&undo_once, undo_key_make);
    if (undo_keyed)
        return NULL;
    struct undo_space *u = pthread_getspecific(undo_key);
    if (!u) {
        if (!(u = calloc(1, sizeof *u)) || pthread_setspecific(undo_key, u) != 0) {
            free(u);
            return NULL;
        }
    }
    if (n > u->cap) {
        char *grown = realloc(u->buf, n);
        if (!grown)
            return NULL;
        u->buf = grown;
        u->cap = n;
    }
    return u->buf;
}

/* The pieces of [lo, hi) in the components taken (take[k]), their old bytes read: 0 with
 * *out (n pieces; free it), or -errno. */
static int pieces_of(const struct sk_view *v, const bool *take, const char *data, uint64_t lo,
                     uint64_t hi, struct piece **out, unsigned *n)
{
    const struct sk_lov *lov = &v->lov;
    unsigned cap = 0;
    for (uint32_t k = 0; k < lov->ncomp; k++)
        if (take[k])
            cap += (unsigned)((hi - 1) / lov->comps[k].stripe_size -
                              lo / lov->comps[k].stripe_size + 1);
    struct piece *p = calloc(cap ? cap : 1, sizeof *p);
    if (!p)
        return -ENOMEM;
    *out = p;
    *n = 0;
    uint64_t saved = 0;
    for (uint32_t k = 0; k < lov->ncomp; k++) {
        const struct sk_comp *c = &lov->comps[k];
        uint64_t a = c->start > lo ? c->start : lo, b = c->end < hi ? c->end : hi;
        for (uint64_t at = a; take[k] && at < b;) {
            uint64_t end = (at / c->stripe_size + 1) * c->stripe_size;
            end = end < b ? end : b;
            uint32_t pos = sk_comp_position(c, at);
            struct piece *q = &p[(*n)++];
            struct stat st;
            q->fd = v->fds[k][pos];
            q->obj = &c->objs[pos];
            q->src = data + (at - lo);
            q->at = sk_comp_object_offset(c, at);
            q->len = end - at;
            at = end;
            if (fstat(q->fd, &st) < 0)
                return -errno;
            q->size = (uint64_t)st.st_size;
            q->oldlen = q->size <= q->at ? 0 : q->size - q->at < q->len ? q->size - q->at : q->len;
            saved += q->oldlen;
        }
    }
    char *space = saved ? undo_space(saved) : NULL;
    if (saved && !space)
        return -ENOMEM;
    for (unsigned i = 0; i < *n; i++) {
        p[i].old = space;
        space += p[i].oldlen;
        int rc = p[i].oldlen ? pread_all(p[i].fd, p[i].old, p[i].oldlen, p[i].at) : 0;
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Put back what the first n pieces held. */
static void undo(const struct piece *p, unsigned n, const struct sk_inode *in)
{
    for (unsigned i = 0; i < n; i++) {
        int rc = p[i].oldlen ? pwrite_all(p[i].fd, p[i].old, p[i].oldlen, p[i].at) : 0;
        if (rc == 0)
            rc = cut_to(p[i].fd, p[i].size);
        if (rc < 0)
            logmsg("MDT inode %ju: OST %u object %s: a failed write could not be undone: %s",
                   (uintmax_t)in->ino, p[i].obj->ost, p[i].obj->id, strerror(-rc));
    }
}

/* The mirror a hybrid file's write goes to, the one the model finds cheapest for it (-1: every
 * mirror). The others are then marked stale (the layout paper's §5.1; Lustre FLR does the
 * same), so after the first write every later one goes to that mirror, the only one in sync. */
static int write_mirror(fuse_req_t req, const struct sk_view *v, uint64_t lo, uint64_t hi,
                        struct sk_inode *in)
{
    if (v->lov.ncomp <= 1)
        return -1;
    pid_t pid = fuse_req_ctx(req)->pid;
    struct hybrid_seen seen;
    hybrid_enter(pid, in, &seen);
    int k = hybrid_choose(v, lo, hi, &seen, false, true, in);
    hybrid_leave(pid, in);
    return k >= 0 ? (int)v->lov.comps[k].mirror : -1;
}

/* Which in-sync components the write of [lo, hi) goes to (take) and which go stale: those of
 * a mirror other than `only` (>= 0), and those with an object it cannot reach. Whether some
 * are to be marked stale. */
static bool choose_components(const struct sk_view *v, uint64_t lo, uint64_t hi, int only,
                              bool *take, bool *stale)
{
    bool any = false;
    for (uint32_t k = 0; k < v->lov.ncomp; k++) {
        const struct sk_comp *c = &v->lov.comps[k];
        uint64_t a = c->start > lo ? c->start : lo, b = c->end < hi ? c->end : hi;
        if (!c->init || c->stale || b <= a)
            continue;
        if (only >= 0 && (int)c->mirror != only) {
            hybrid_invalidated();
            stale[k] = any = true;
        } else if (component_reachable(v, k, a, b)) {
            take[k] = true;
        } else {
            stale[k] = any = true;
        }
    }
    return any;
}

/* Write `data` to [lo, hi) of the file through view `v` (the file `cur` bytes now), all or
 * nothing: 0, or -errno with no byte changed. */
static int write_through(fuse_req_t req, struct sk_file *fh, struct sk_view *v, const char *data,
                         uint64_t lo, uint64_t hi, uint64_t cur)
{
    struct sk_inode *in = fh->inode;
    const struct sk_lov *lov = &v->lov;
    bool *take = calloc(lov->ncomp, sizeof *take), *stale = calloc(lov->ncomp, sizeof *stale);
    struct piece *p = NULL;
    unsigned n = 0, done = 0;
    int rc = take && stale ? 0 : -ENOMEM;
    bool any_stale = rc == 0 &&
        choose_components(v, lo, hi, write_mirror(req, v, lo, hi, in), take, stale);
    if (rc == 0 && !some_mirror_covers(lov, take, lo, hi)) {
        logmsg("MDT inode %ju: write at %ju: no mirror can take it (an object on a failed "
               "OST): nothing written", (uintmax_t)in->ino, (uintmax_t)lo);
        rc = -EIO;
    }
    if (rc == 0 && any_stale)
        rc = mark_stale(fh->fd, v->raw, v->rawlen, stale, in);
    if (rc == 0 && hi > cur)
        rc = cut_tails(lov, v->fds, stale, cur, hi, in);
    if (rc == 0)
        rc = pieces_of(v, take, data, lo, hi, &p, &n);
    while (rc == 0 && done < n) {
        const struct piece *q = &p[done++];  /* counted before: written in part, maybe */
        if ((rc = pwrite_all(q->fd, q->src, q->len, q->at)) < 0)
            logmsg("MDT inode %ju: OST %u object %s: write: %s", (uintmax_t)in->ino,
                   q->obj->ost, q->obj->id, strerror(-rc));
    }
    if (rc == 0) {
        /* the size last: it makes the bytes past the old end the file's */
        struct timespec now[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
        if (hi > cur ? ftruncate(fh->fd, (off_t)hi) < 0 : futimens(fh->fd, now) < 0)
            rc = -errno;
    }
    if (rc < 0)
        undo(p, done, in);
    free(p);
    free(take);
    free(stale);
    if (rc < 0 && rc != -ENOSPC && rc != -EDQUOT && rc != -EFBIG && rc != -ENOMEM &&
        rc != -EAGAIN)
        rc = -EIO;
    return rc;
}

static int write_locked(fuse_req_t req, struct sk_file *fh, const char *data, size_t size,
                        off_t off)
{
    struct stat st;
    if (fstat(fh->fd, &st) < 0)
        return -errno;
    if (fh->append)
        off = st.st_size;
    struct sk_view *v;
    int rc = change_view(fh, &v);
    if (rc < 0)
        return rc;
    if (!v->raw) {
        logmsg("MDT inode %ju: write to a file without a layout", (uintmax_t)fh->inode->ino);
        rc = -EIO;
    } else {
        rc = write_through(req, fh, v, data, (uint64_t)off, (uint64_t)off + size,
                           (uint64_t)st.st_size);
    }
    view_put(v);
    return rc;
}

void sk_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
              struct fuse_file_info *fi)
{
    (void)ino;
    struct sk_file *fh = (struct sk_file *)(uintptr_t)fi->fh;
    struct sk_inode *in = fh->inode;
    int rc = -EAGAIN;
    /* one change of the file at a time (the kernel holds the inode's lock over a write
     * already, but for asynchronous direct I/O): what a failed write puts back is what it
     * overwrote, not another write's bytes */
    pthread_mutex_lock(&in->lock);
    for (int i = 0; rc == -EAGAIN && i < CHANGE_TRIES; i++)
        rc = size ? write_locked(req, fh, data, size, off) : 0;
    pthread_mutex_unlock(&in->lock);
    if (rc < 0) {
        fuse_reply_err(req, rc == -EAGAIN ? EIO : -rc);
        return;
    }
    atomic_store(&fh->written, true);
    fuse_reply_write(req, size);
}

/* -- fallocate ----------------------------------------------------------------------------- */

/* Space of one object reserved by a fallocate, and its size before (what is past it is given
 * back if the fallocate fails). */
struct reserved {
    int fd;
    uint64_t lo, hi, size;
};

/* Reserve [lo, hi) of the file in every object of the components taken. 0, or -errno with
 * the space reserved past the objects' ends given back. */
static int reserve(const struct sk_view *v, const bool *take, uint64_t lo, uint64_t hi,
                   struct reserved *r, unsigned *n)
{
    *n = 0;
    for (uint32_t k = 0; k < v->lov.ncomp; k++) {
        const struct sk_comp *c = &v->lov.comps[k];
        for (uint32_t pos = 0; take[k] && pos < c->count; pos++) {
            uint64_t a = osize(c, pos, lo), b = osize(c, pos, hi);
            struct stat st;
            if (b <= a)
                continue;
            int fd = v->fds[k][pos];
            if (fstat(fd, &st) < 0 ||
                fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)a, (off_t)(b - a)) < 0)
                return -errno;
            r[(*n)++] = (struct reserved){fd, a, b, (uint64_t)st.st_size};
        }
    }
    return 0;
}

static void unreserve(const struct reserved *r, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        uint64_t from = r[i].lo > r[i].size ? r[i].lo : r[i].size;
        if (r[i].hi > from)
            fallocate(r[i].fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)from,
                      (off_t)(r[i].hi - from));
    }
}

/* posix_fallocate's modes (0, FALLOC_FL_KEEP_SIZE): the space of [lo, hi) reserved in every
 * in-sync mirror whose objects are reachable (a mirror that is not keeps its bytes, which
 * this changes not), then the size grown. Whether the size changed, or -errno. */
static int fallocate_locked(struct sk_file *fh, int mode, uint64_t lo, uint64_t hi)
{
    passthrough_sync_size(fh->inode, fh->fd);
    struct sk_inode *in = fh->inode;
    struct stat st;
    if (fstat(fh->fd, &st) < 0)
        return -errno;
    uint64_t cur = (uint64_t)st.st_size;
    uint64_t next = (mode & FALLOC_FL_KEEP_SIZE) || hi <= cur ? cur : hi;
    struct sk_view *v;
    int rc = change_view(fh, &v);
    if (rc < 0)
        return rc;
    const struct sk_lov *lov = &v->lov;
    bool *take = v->raw ? calloc(lov->ncomp, sizeof *take) : NULL;
    unsigned objects = 0, n = 0;
    for (uint32_t k = 0; take && k < lov->ncomp; k++) {
        const struct sk_comp *c = &lov->comps[k];
        uint64_t a = c->start > lo ? c->start : lo, b = c->end < hi ? c->end : hi;
        take[k] = c->init && !c->stale && b > a && component_reachable(v, k, a, b);
        objects += take[k] ? c->count : 0;
    }
    struct reserved *r = take ? calloc(objects + 1, sizeof *r) : NULL;
    if (!r) {
        rc = v->raw ? -ENOMEM : -EIO;
    } else if (!some_mirror_covers(lov, take, lo, hi)) {
        logmsg("MDT inode %ju: fallocate: an object is on a failed OST and no other mirror "
               "can take it: nothing changed", (uintmax_t)in->ino);
        rc = -EIO;
    } else if ((rc = next > cur ? cut_tails(lov, v->fds, NULL, cur, next, in) : 0) == 0 &&
               (rc = reserve(v, take, lo, hi, r, &n)) == 0 && next > cur &&
               ftruncate(fh->fd, (off_t)next) < 0) {
        rc = -errno;
    }
    if (rc < 0)
        unreserve(r, n);
    free(r);
    free(take);
    view_put(v);
    return rc < 0 ? rc : next > cur;
}

void sk_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                  struct fuse_file_info *fi)
{
    (void)ino;
    struct sk_file *fh = (struct sk_file *)(uintptr_t)fi->fh;
    if (mode & ~FALLOC_FL_KEEP_SIZE) {
        fuse_reply_err(req, EOPNOTSUPP);  /* punching and zeroing change bytes: not here */
        return;
    }
    if (offset < 0 || length <= 0) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    pthread_mutex_lock(&fh->inode->lock);
    int rc = fallocate_locked(fh, mode, (uint64_t)offset, (uint64_t)offset + (uint64_t)length);
    pthread_mutex_unlock(&fh->inode->lock);
    if (rc > 0)
        atomic_store(&fh->written, true);
    fuse_reply_err(req, rc < 0 ? -rc : 0);
}
