/* Kernel FUSE passthrough (docs/mount.rst "Passthrough"): a read-only open of a file whose bytes
 * are one backing object is answered with FOPEN_PASSTHROUGH and that object's backing id, so
 * the kernel reads it directly, without a request per read.
 *
 * Only where nothing the mount does per read would change the answer: a layout of one
 * component (no mirrors the solver, hybrid replicas or read QoS would choose between), stripe
 * count 1 over the whole file, instantiated and not stale, its OST up, its object open and
 * holding every byte of the file (a shorter object is read by the mount, which gives zeros past
 * its end), the file not marked lost by recoveryd. Writes go through the mount (all or nothing,
 * the size on the MDT inode, CLOSE records), into the same object the kernel reads from.
 *
 * The kernel takes every passthrough open of an inode on one backing file, refuses one on an
 * inode open with its page cache, and refuses any open of an inode open for passthrough that
 * is not one too. So the inode's backing (the object opened read-write, and its id) is kept
 * while it has passthrough handles; a passthrough open of an inode with cached handles is not
 * made; and an open for writing of an inode with passthrough handles is passed through as well
 * (the kernel writes the object): at its close the MDT inode takes the object's size and, if
 * the object changed, the handle's CLOSE record is written as for any written file; until
 * then getattr reports the object's size where it is larger.
 *
 * Built against a libfuse without passthrough (< 3.16), or on a kernel that offers none, every
 * open is as before; the mount says once at start which it is.
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314

#include "skfs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef FUSE_CAP_PASSTHROUGH
#define SK_HAVE_PASSTHROUGH 1
#else
#define SK_HAVE_PASSTHROUGH 0
#endif

/* what user.scratchkeeper.passthrough shows */
static struct {
    atomic_uint_fast64_t opens;     /* handles passed through */
    atomic_uint_fast64_t writers;   /* of which opened for writing */
    atomic_uint_fast64_t direct;    /* opens not passed through beside passed-through ones */
    atomic_uint_fast64_t refused;   /* backing files the kernel refused */
    atomic_uint_fast64_t served;    /* handles open now that the mount serves (not passed
                                     * through): the kernel's RELEASE of a closed file comes
                                     * after close(2) returned, and until it does an open of
                                     * the same inode is not passed through */
} pt;

void passthrough_init(struct fuse_conn_info *conn)
{
    const char *env = getenv("SK_MOUNT_PASSTHROUGH");
    fs.passthrough = false;
#if SK_HAVE_PASSTHROUGH
    if (env && strcmp(env, "0") == 0) {
        logmsg("passthrough: off (SK_MOUNT_PASSTHROUGH=0); libfuse %d.%d", FUSE_MAJOR_VERSION,
               FUSE_MINOR_VERSION);
        return;
    }
    if (!(conn->capable & FUSE_CAP_PASSTHROUGH)) {
        logmsg("passthrough: off (the kernel offers none); libfuse %d.%d", FUSE_MAJOR_VERSION,
               FUSE_MINOR_VERSION);
        return;
    }
    conn->want |= FUSE_CAP_PASSTHROUGH;
    /* the objects are on a plain file system: one stacked over this mount stays possible */
    conn->max_backing_stack_depth = FUSE_BACKING_STACKED_UNDER;
    fs.passthrough = true;
    logmsg("passthrough: on for files whose bytes are one object; libfuse %d.%d",
           FUSE_MAJOR_VERSION, FUSE_MINOR_VERSION);
#else
    (void)conn;
    (void)env;
    logmsg("passthrough: off (libfuse %d.%d has none; scripts/bootstrap builds one that has)",
           FUSE_MAJOR_VERSION, FUSE_MINOR_VERSION);
#endif
}

#if SK_HAVE_PASSTHROUGH
/* The object holding every byte of the file of `fh` (see above), or NULL. */
static const struct sk_obj *single_object(struct sk_file *fh, struct sk_view *v)
{
    if (!v->raw || v->lov.ncomp != 1 || fs.cfg.qos_mode)
        return NULL;
    const struct sk_comp *c = &v->lov.comps[0];
    if (!c->init || c->stale || c->count != 1 || c->start != 0 || c->end != SK_EOF ||
        ost_failed(c->objs[0].ost) || v->fds[0][0] < 0 || marked_lost(fh->fd))
        return NULL;
    struct stat file, object;
    if (fstat(fh->fd, &file) < 0 || fstat(v->fds[0][0], &object) < 0 ||
        object.st_size != file.st_size)
        return NULL;
    return &c->objs[0];
}

/* The inode's backing id for the object `obj` (opened read-write, given to the kernel, if the
 * inode has none); 0 when the kernel cannot take it, or the inode's passthrough handles are on
 * another object (its layout changed since). Caller holds table_lock. */
static int backing_for(fuse_req_t req, struct sk_inode *in, const struct sk_obj *obj)
{
    if (in->pt_opens > 0) {
        struct stat st;
        return strcmp(obj->id, in->backing_obj) == 0 && fstat(in->backing_fd, &st) == 0
                   ? in->backing_id : 0;
    }
    int ofd = open_object(obj, O_RDWR);
    int id = ofd >= 0 ? fuse_passthrough_open(req, ofd) : 0;
    if (id <= 0) {
        atomic_fetch_add(&pt.refused, 1);
        static atomic_bool said;
        if (!atomic_exchange(&said, true))
            logmsg("passthrough: the kernel refused a backing file (%s): such opens are served"
                   " by the mount", strerror(errno));
        if (ofd >= 0)
            close(ofd);
        return 0;
    }
    in->backing_id = id;
    in->backing_fd = ofd;
    snprintf(in->backing_obj, sizeof in->backing_obj, "%s", obj->id);
    return id;
}
#endif

void passthrough_choose(fuse_req_t req, struct sk_file *fh, int flags, struct fuse_file_info *fi)
{
    struct sk_inode *in = fh->inode;
    bool writable = (flags & O_ACCMODE) != O_RDONLY;
#if SK_HAVE_PASSTHROUGH
    struct sk_view *v = NULL;
    const struct sk_obj *obj = NULL;
    if (fs.passthrough) {
        /* what a passed-through writer wrote past the MDT's end is the file's: the object and
         * the file have one size again */
        pthread_mutex_lock(&in->lock);
        passthrough_sync_size(in, fh->fd);
        pthread_mutex_unlock(&in->lock);
        if (view_get(fh, &v) == 0)
            obj = single_object(fh, v);
    }
#else
    (void)req;
    (void)fi;
    (void)writable;
#endif
    pthread_mutex_lock(&fs.table_lock);
#if SK_HAVE_PASSTHROUGH
    /* read-only opens start passthrough; one for writing joins it */
    int id = obj && in->cached_opens == 0 && (!writable || in->pt_opens > 0)
                 ? backing_for(req, in, obj) : 0;
    if (id > 0) {
        in->pt_opens++;
        atomic_fetch_add(&pt.opens, 1);
        fh->io = SK_IO_PASSTHROUGH;
        fi->backing_id = id;
        fi->direct_io = 0;
        fi->keep_cache = 0;
        /* the mount's flush does nothing (skfs.c): a close that costs no request */
        fi->noflush = 1;
        if (writable) {
            in->pt_writers++;
            atomic_fetch_add(&pt.writers, 1);
            struct stat st;
            if (fstat(in->backing_fd, &st) == 0)
                fh->pt_mtime = st.st_mtim;
        }
    }
#endif
    if (fh->io != SK_IO_PASSTHROUGH) {
        fh->io = SK_IO_CACHED;
        in->cached_opens++;
        atomic_fetch_add(&pt.served, 1);
        /* the kernel refuses this open (EIO) of an inode open for passthrough: only when its
         * layout changed under its passthrough handles, or the object cannot be opened */
        if (in->pt_opens > 0)
            atomic_fetch_add(&pt.direct, 1);
    }
    pthread_mutex_unlock(&fs.table_lock);
#if SK_HAVE_PASSTHROUGH
    if (v)
        view_put(v);
    if (fh->io == SK_IO_PASSTHROUGH) {
        /* the kernel holds the object now: the handle's descriptors are given back */
        view_reset(fh);
        /* the kernel reads it: the open counts as one read for the read records, its bytes
         * unknown (reads.c: passed-through files count opens, not each read) */
        if (!writable)
            reads_count(in, 0, fh->opener);
    }
#endif
}

void passthrough_sync_size(struct sk_inode *in, int fd)
{
    struct stat object, file;
    pthread_mutex_lock(&fs.table_lock);
    bool written = in->pt_writers > 0 && fstat(in->backing_fd, &object) == 0;
    pthread_mutex_unlock(&fs.table_lock);
    if (written && fstat(fd, &file) == 0 && object.st_size > file.st_size &&
        ftruncate(fd, object.st_size) < 0)
        logmsg("MDT inode %ju: passthrough: size %jd: %s", (uintmax_t)in->ino,
               (intmax_t)object.st_size, strerror(errno));
}

void passthrough_settle(struct sk_file *fh)
{
    struct sk_inode *in = fh->inode;
    if (fh->io != SK_IO_PASSTHROUGH || !fh->writable)
        return;
    pthread_mutex_lock(&in->lock);
    passthrough_sync_size(in, fh->fd);
    struct stat object;
    pthread_mutex_lock(&fs.table_lock);
    bool ok = fstat(in->backing_fd, &object) == 0;
    pthread_mutex_unlock(&fs.table_lock);
    if (ok && (object.st_mtim.tv_sec != fh->pt_mtime.tv_sec ||
               object.st_mtim.tv_nsec != fh->pt_mtime.tv_nsec))
        atomic_store(&fh->written, true);  /* the kernel wrote it: a CLOSE record */
    pthread_mutex_unlock(&in->lock);
}

void passthrough_attr(struct sk_inode *in, struct stat *st)
{
    if (!S_ISREG(st->st_mode))
        return;
    pthread_mutex_lock(&fs.table_lock);
    struct stat object;
    if (in->pt_writers > 0 && fstat(in->backing_fd, &object) == 0 && object.st_size > st->st_size)
        st->st_size = object.st_size;
    pthread_mutex_unlock(&fs.table_lock);
}

void passthrough_release(fuse_req_t req, struct sk_file *fh)
{
    struct sk_inode *in = fh->inode;
    int close_id = 0, close_fd = -1;
    pthread_mutex_lock(&fs.table_lock);
    if (fh->io == SK_IO_CACHED) {
        in->cached_opens--;
        atomic_fetch_sub(&pt.served, 1);
    }
    else if (fh->io == SK_IO_PASSTHROUGH) {
        if (fh->writable)
            in->pt_writers--;
        if (--in->pt_opens == 0) {
            close_id = in->backing_id;
            close_fd = in->backing_fd;
            in->backing_id = 0;
            in->backing_fd = -1;
        }
    }
    pthread_mutex_unlock(&fs.table_lock);
#if SK_HAVE_PASSTHROUGH
    if (close_id > 0 && fuse_passthrough_close(req, close_id) < 0)
        logmsg("passthrough: closing backing id %d: %s", close_id, strerror(errno));
#else
    (void)req;
    (void)close_id;
#endif
    if (close_fd >= 0)
        close(close_fd);
    fh->io = SK_IO_NONE;
}

int passthrough_grown(struct sk_inode *in, uint64_t size)
{
    /* the kernel reads the object to its end: it holds the new size too (a hole) */
    int rc = 0;
    struct stat st;
    pthread_mutex_lock(&fs.table_lock);
    if (in->pt_opens > 0 && fstat(in->backing_fd, &st) == 0 && (uint64_t)st.st_size < size &&
        ftruncate(in->backing_fd, (off_t)size) < 0)
        rc = -errno;
    pthread_mutex_unlock(&fs.table_lock);
    return rc;
}

int passthrough_stats(char **out, size_t *len)
{
    char *text = malloc(320);
    if (!text)
        return -ENOMEM;
    int n = snprintf(text, 320,
                     "{\"on\": %s, \"opens\": %" PRIuFAST64 ", \"writers\": %" PRIuFAST64
                     ", \"refused_beside\": %" PRIuFAST64 ", \"refused\": %" PRIuFAST64
                     ", \"served_open\": %" PRIuFAST64 "}\n",
                     fs.passthrough ? "true" : "false", atomic_load(&pt.opens),
                     atomic_load(&pt.writers), atomic_load(&pt.direct), atomic_load(&pt.refused),
                     atomic_load(&pt.served));
    *out = text;
    *len = (size_t)n;
    return 0;
}
