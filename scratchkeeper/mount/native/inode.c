/* The scratch mount's inode table and the requests on inodes (docs/mount.rst): every inode the
 * kernel knows is an entry keyed by the MDT's (st_dev, st_ino), holding an O_PATH descriptor of
 * its MDT inode and the kernel's lookup count, released by forget; lookup, getattr and setattr,
 * and the requests that open and close regular files (create, open, release, flush), whose
 * handles keep the inode in the table. */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314

#include "skfs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* -- the inode table ------------------------------------------------------------------------- */

struct sk_inode *get_inode(fuse_ino_t ino)
{
    return ino == FUSE_ROOT_ID ? &fs.root : (struct sk_inode *)(uintptr_t)ino;
}

static size_t bucket_of(dev_t dev, ino_t ino)
{
    uint64_t h = (uint64_t)ino * 0x9E3779B97F4A7C15ULL ^ (uint64_t)dev * 0xC2B2AE3D27D4EB4FULL;
    return (size_t)(h >> 48) & (NBUCKETS - 1);
}

/* Caller holds table_lock. */
struct sk_inode *table_find(dev_t dev, ino_t ino)
{
    for (struct sk_inode *in = fs.buckets[bucket_of(dev, ino)]; in; in = in->next)
        if (in->dev == dev && in->ino == ino && !in->superseded)
            return in;
    return NULL;
}

/* Caller holds table_lock; frees `in` if nothing refers to it any more. */
static void table_drop_if_unused(struct sk_inode *in)
{
    if (in == &fs.root || in->nlookup || in->nopen)
        return;
    struct sk_inode **link = &fs.buckets[bucket_of(in->dev, in->ino)];
    while (*link != in)
        link = &(*link)->next;
    *link = in->next;
    reads_flush_inode(in);
    inode_fd_drop(in);
    pthread_mutex_destroy(&in->lock);
    free(in->handle);
    free(in->doomed);
    free(in);
}

void procpath(int fd, char *buf)
{
    snprintf(buf, 64, "/proc/self/fd/%d", fd);
}

static bool is_regular(const struct sk_inode *in)
{
    return in->type == S_IFREG;
}

static void fix_attr(struct stat *st)
{
    if (S_ISREG(st->st_mode)) {
        /* the MDT inode is sparse: report the blocks the data takes (one mirror's worth) */
        blkcnt_t blocks = (blkcnt_t)((st->st_size + 511) / 512);
        if (st->st_blocks < blocks)
            st->st_blocks = blocks;
        st->st_blksize = (blksize_t)fs.max_request;
    }
}

/* `name` in `parent` opened O_PATH (a new descriptor), or -errno. */
static int open_child(fuse_ino_t parent, const char *name)
{
    struct sk_inode *pin = get_inode(parent);
    int pfd = inode_fd(pin);
    if (pfd < 0)
        return pfd;
    int fd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    int err = fd < 0 ? -errno : 0;
    inode_fd_put(pin);
    return fd < 0 ? err : fd;
}

/* A new entry of the table for the MDT inode `st` with handle `h` (taken over). Caller holds
 * table_lock. */
static struct sk_inode *table_add(const struct stat *st, struct file_handle *h)
{
    struct sk_inode *in = calloc(1, sizeof *in);
    if (!in)
        return NULL;
    in->handle = h;
    in->fd = -1;
    in->backing_fd = -1;
    in->dev = st->st_dev;
    in->ino = st->st_ino;
    in->type = st->st_mode & S_IFMT;
    in->nlookup = 1;
    pthread_mutex_init(&in->lock, NULL);
    size_t b = bucket_of(in->dev, in->ino);
    in->next = fs.buckets[b];
    fs.buckets[b] = in;
    return in;
}

int do_lookup(fuse_ino_t parent, const char *name, struct fuse_entry_param *e)
{
    memset(e, 0, sizeof *e);
    e->attr_timeout = fs.cfg.attr_timeout;
    e->entry_timeout = fs.cfg.attr_timeout;
    int fd = open_child(parent, name);
    if (fd < 0)
        return -fd;
    struct file_handle *h = NULL;
    if (fstatat(fd, "", &e->attr, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ||
        !(h = handle_of(fd))) {
        int err = errno;
        close(fd);
        return err;
    }
    fix_attr(&e->attr);
    pthread_mutex_lock(&fs.table_lock);
    struct sk_inode *in = table_find(e->attr.st_dev, e->attr.st_ino);
    if (in && !same_handle(in->handle, h)) {
        /* the number of an inode gone from the MDT, now another's (no descriptor of ours kept
         * the old one): the old entry stays until the kernel forgets it, found no more */
        in->superseded = true;
        in = NULL;
    }
    if (in) {
        in->nlookup++;
        free(h);
    } else if (!(in = table_add(&e->attr, h))) {
        pthread_mutex_unlock(&fs.table_lock);
        free(h);
        close(fd);
        return ENOMEM;
    }
    pthread_mutex_unlock(&fs.table_lock);
    inode_fd_adopt(in, fd);  /* the kernel holds a lookup of it: not freed meanwhile */
    passthrough_attr(in, &e->attr);
    e->ino = (fuse_ino_t)(uintptr_t)in;
    return 0;
}

void forget_one(fuse_ino_t ino, uint64_t n)
{
    struct sk_inode *in = get_inode(ino);
    if (in == &fs.root)
        return;
    pthread_mutex_lock(&fs.table_lock);
    in->nlookup = n > in->nlookup ? 0 : in->nlookup - n;
    table_drop_if_unused(in);
    pthread_mutex_unlock(&fs.table_lock);
}

/* -- requests ------------------------------------------------------------------------------- */

void sk_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fuse_entry_param e;
    int err = do_lookup(parent, name, &e);
    if (err)
        fuse_reply_err(req, err);
    else
        fuse_reply_entry(req, &e);
}

void sk_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    forget_one(ino, nlookup);
    fuse_reply_none(req);
}

void sk_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
    for (size_t i = 0; i < count; i++)
        forget_one(forgets[i].ino, forgets[i].nlookup);
    fuse_reply_none(req);
}

void sk_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct stat st;
    struct sk_inode *in = get_inode(ino);
    int fd = inode_fd(in);
    if (fd < 0) {
        fuse_reply_err(req, -fd);
        return;
    }
    int rc = fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
    int err = errno;
    inode_fd_put(in);
    if (rc < 0) {
        fuse_reply_err(req, err);
        return;
    }
    fix_attr(&st);
    if (ino == FUSE_ROOT_ID)
        root_attr(&st);
    else
        passthrough_attr(in, &st);
    fuse_reply_attr(req, &st, fs.cfg.attr_timeout);
}

/* The caller's groups include gid (for the set-group-id rules). */
bool caller_in_group(fuse_req_t req, gid_t gid)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    if (ctx->uid == 0 || ctx->gid == gid)
        return true;
    gid_t groups[256];
    int n = fuse_req_getgroups(req, 256, groups);
    for (int i = 0; i < n && i < 256; i++)
        if (groups[i] == gid)
            return true;
    return false;
}

/* The MDT inode open as `pathfd` (O_PATH) opened O_RDWR (root opens any file). */
static int reopen_rdwr(int pathfd)
{
    char path[64];
    procpath(pathfd, path);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

static int open_mdt(struct sk_inode *in)
{
    int pathfd = inode_fd(in);
    if (pathfd < 0)
        return pathfd;
    int fd = reopen_rdwr(pathfd);
    inode_fd_put(in);
    return fd;
}

/* The setattr of `in`, its MDT inode open as `ifd` (O_PATH): 0 or -errno. */
static int do_setattr(fuse_req_t req, struct sk_inode *in, int ifd, struct stat *attr,
                      int valid, struct fuse_file_info *fi)
{
    char path[64];
    int rc = 0;
    procpath(ifd, path);
    if (in == &fs.root && (valid & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID |
                                    FUSE_SET_ATTR_GID))) {
        if ((rc = root_setattr(attr, valid)) < 0)
            return rc;
        valid &= ~(FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID);
    }
    if (valid & FUSE_SET_ATTR_MODE) {
        if (in->type == S_IFLNK)
            return -EOPNOTSUPP;
        if (chmod(path, attr->st_mode & 07777) < 0)
            return -errno;
    }
    if (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
        uid_t uid = valid & FUSE_SET_ATTR_UID ? attr->st_uid : (uid_t)-1;
        gid_t gid = valid & FUSE_SET_ATTR_GID ? attr->st_gid : (gid_t)-1;
        if (fchownat(ifd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
            return -errno;
    }
    /* objects are 0600 whatever the file's mode: only their owner changes with the file's */
    if ((valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) && is_regular(in))
        chown_objects(in, ifd, valid & FUSE_SET_ATTR_UID ? attr->st_uid : (uid_t)-1,
                      valid & FUSE_SET_ATTR_GID ? attr->st_gid : (gid_t)-1);
    if (valid & FUSE_SET_ATTR_SIZE) {
        if (!is_regular(in))
            return in->type == S_IFDIR ? -EISDIR : -EINVAL;
        int fd = fi ? ((struct sk_file *)(uintptr_t)fi->fh)->fd : reopen_rdwr(ifd);
        if (fd < 0)
            return fd;
        pthread_mutex_lock(&in->lock);
        rc = truncate_locked(in, fd, attr->st_size, fuse_req_ctx(req)->uid);
        pthread_mutex_unlock(&in->lock);
        if (!fi)
            close(fd);
        if (rc < 0)
            return rc;
    }
    if (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) {
        struct timespec tv[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
        if (valid & FUSE_SET_ATTR_ATIME_NOW)
            tv[0].tv_nsec = UTIME_NOW;
        else if (valid & FUSE_SET_ATTR_ATIME)
            tv[0] = attr->st_atim;
        if (valid & FUSE_SET_ATTR_MTIME_NOW)
            tv[1].tv_nsec = UTIME_NOW;
        else if (valid & FUSE_SET_ATTR_MTIME)
            tv[1] = attr->st_mtim;
        if (utimensat(ifd, "", tv, AT_EMPTY_PATH) < 0 &&
            (errno != EINVAL || utimensat(AT_FDCWD, path, tv, 0) < 0))
            return -errno;
    }
    return 0;
}

void sk_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
                struct fuse_file_info *fi)
{
    struct sk_inode *in = get_inode(ino);
    int ifd = inode_fd(in);
    int rc = ifd < 0 ? ifd : do_setattr(req, in, ifd, attr, valid, fi);
    if (ifd >= 0)
        inode_fd_put(in);
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        sk_getattr(req, ino, fi);
}

/* Owner and group of a new inode: the caller's, the group of a set-group-id parent. */
void new_owner(fuse_req_t req, int pfd, uid_t *uid, gid_t *gid, bool *sgid_parent)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    struct stat pst;
    *uid = ctx->uid;
    *gid = ctx->gid;
    *sgid_parent = false;
    if (fstatat(pfd, "", &pst, AT_EMPTY_PATH) == 0 && (pst.st_mode & S_ISGID)) {
        *gid = pst.st_gid;
        *sgid_parent = true;
    }
}

mode_t masked(fuse_req_t req, mode_t mode)
{
    return mode & ~(fuse_req_ctx(req)->umask & 0777);
}

/* A new regular file `name` in the directory `pfd`, open O_RDWR in *fdp, with its layout. */
static int make_regular_in(fuse_req_t req, int pfd, const char *name, mode_t mode, int *fdp)
{
    uid_t uid;
    gid_t gid;
    bool sgid_parent;
    new_owner(req, pfd, &uid, &gid, &sgid_parent);
    bool inherits;
    mode = create_mode(req, pfd, mode, &inherits);
    if ((mode & S_ISGID) && !caller_in_group(req, gid))
        mode &= ~(mode_t)S_ISGID;
    /* with a default ACL the MDT's file system makes the mode from it and this one */
    int fd = openat(pfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    inherits ? mode & 0777 : 0600);
    if (fd < 0)
        return -errno;
    int rc = 0;
    mode = created_mode(fd, "", mode, inherits);
    if (fchown(fd, uid, gid) < 0 || fchmod(fd, mode) < 0)
        rc = -errno;
    if (!rc)
        rc = assign_layout(pfd, fd, uid, gid);
    if (rc < 0) {
        close(fd);
        unlinkat(pfd, name, 0);
        return rc;
    }
    *fdp = fd;
    return 0;
}

int make_regular(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, int *fdp)
{
    struct sk_inode *pin = get_inode(parent);
    int pfd = inode_fd(pin);
    if (pfd < 0)
        return pfd;
    int rc = make_regular_in(req, pfd, name, mode, fdp);
    inode_fd_put(pin);
    return rc;
}

/* A handle of `in` on its MDT inode open as `fd`, with the one descriptor charged to the
 * caller already (file_close gives both back). 0, or -ENOMEM with both given back. */
static int file_open(fuse_req_t req, struct sk_inode *in, int fd, int flags,
                     struct fuse_file_info *fi)
{
    struct sk_file *fh = calloc(1, sizeof *fh);
    if (!fh) {
        close(fd);
        fds_release(fuse_req_ctx(req)->uid, 1);
        return -ENOMEM;
    }
    fh->inode = in;
    fh->fd = fd;
    fh->opener = fuse_req_ctx(req)->uid;
    fh->writable = (flags & O_ACCMODE) != O_RDONLY;
    fh->append = (flags & O_APPEND) != 0;
    atomic_init(&fh->written, fh->writable && (flags & (O_CREAT | O_TRUNC)));
    pthread_mutex_init(&fh->lock, NULL);
    pthread_mutex_lock(&fs.table_lock);
    in->nopen++;
    pthread_mutex_unlock(&fs.table_lock);
    fi->fh = (uint64_t)(uintptr_t)fh;
    fi->keep_cache = 0;
    passthrough_choose(req, fh, flags, fi);
    return 0;
}

static void file_close(fuse_req_t req, struct sk_file *fh)
{
    struct sk_inode *in = fh->inode;
    passthrough_release(req, fh);
    view_put(fh->view);
    close(fh->fd);
    fds_release(fh->opener, 1);
    pthread_mutex_destroy(&fh->lock);
    free(fh);
    pthread_mutex_lock(&fs.table_lock);
    char *doomed = NULL;
    size_t doomed_len = 0;
    ino_t ino = in->ino;
    if (--in->nopen == 0 && in->doomed) {
        doomed = in->doomed;
        doomed_len = in->doomed_len;
        in->doomed = NULL;
    }
    table_drop_if_unused(in);
    pthread_mutex_unlock(&fs.table_lock);
    if (doomed) {
        delete_objects(doomed, doomed_len, ino);
        free(doomed);
    }
}

/* The create found `name` made meanwhile by someone else: open it as it is (the caller's
 * descriptor charged already). */
static void create_existing(fuse_req_t req, fuse_ino_t parent, const char *name,
                            struct fuse_file_info *fi)
{
    struct fuse_entry_param e;
    uid_t uid = fuse_req_ctx(req)->uid;
    int err = do_lookup(parent, name, &e);
    if (err) {
        fds_release(uid, 1);
        fuse_reply_err(req, err);
        return;
    }
    struct sk_inode *in = get_inode(e.ino);
    int fd = is_regular(in) ? open_mdt(in) : in->type == S_IFDIR ? -EISDIR : -EEXIST;
    if (fd < 0)
        fds_release(uid, 1);
    int rc = fd < 0 ? fd : file_open(req, in, fd, fi->flags, fi);
    if (rc < 0) {
        forget_one(e.ino, 1);
        fuse_reply_err(req, -rc);
        return;
    }
    if (fuse_reply_create(req, &e, fi) == -ENOENT) {
        file_close(req, (struct sk_file *)(uintptr_t)fi->fh);
        forget_one(e.ino, 1);
    }
}

void sk_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
               struct fuse_file_info *fi)
{
    struct fuse_entry_param e;
    int fd = -1;
    uid_t uid = fuse_req_ctx(req)->uid;
    /* charged before the file is made: a user beyond their share creates nothing */
    int rc = fds_charge(uid, 1);
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    rc = make_regular(req, parent, name, mode, &fd);
    if (rc == -EEXIST && !(fi->flags & O_EXCL)) {
        create_existing(req, parent, name, fi);
        return;
    }
    if (rc < 0) {
        fds_release(uid, 1);
        fuse_reply_err(req, -rc);
        return;
    }
    int err = do_lookup(parent, name, &e);
    if (err) {
        close(fd);
        fds_release(uid, 1);
        fuse_reply_err(req, err);
        return;
    }
    if ((rc = file_open(req, get_inode(e.ino), fd, fi->flags, fi)) < 0) {
        forget_one(e.ino, 1);
        fuse_reply_err(req, -rc);
        return;
    }
    if (fuse_reply_create(req, &e, fi) == -ENOENT) {
        /* the caller was interrupted: nobody holds this handle */
        file_close(req, (struct sk_file *)(uintptr_t)fi->fh);
        forget_one(e.ino, 1);
    }
}

/* A regular file made on the MDT without a layout (mknod by the store, or a crash after the
 * create), open as `fd`, gets one now: laid out by its directory's default. */
static int layout_now(int fd, const struct stat *st)
{
    char ppath[PATH_MAX];
    char self[64];
    procpath(fd, self);
    ssize_t n = readlink(self, ppath, sizeof ppath - 1);
    int pfd = -1;
    if (n > 0) {
        ppath[n] = '\0';
        char *slash = strrchr(ppath, '/');
        if (slash && slash != ppath)
            *slash = '\0';
        pfd = open(ppath, O_PATH | O_DIRECTORY | O_CLOEXEC);
    }
    int rc = assign_layout(pfd >= 0 ? pfd : fs.root.fd, fd, st->st_uid, st->st_gid);
    if (pfd >= 0)
        close(pfd);
    return rc;
}

/* What an open of the MDT inode `fd` of `in` does before its handle is made: a layout for a
 * file without one, the truncate of O_TRUNC. 0 or -errno. */
static int open_prepare(struct sk_inode *in, int fd, int flags, uid_t uid)
{
    int rc = 0;
    bool writable = (flags & O_ACCMODE) != O_RDONLY;
    pthread_mutex_lock(&in->lock);
    struct stat st;
    char *raw = NULL;
    size_t len;
    if (fstat(fd, &st) < 0)
        rc = -errno;
    else if ((rc = read_lov_fd(fd, &raw, &len)) == 0 && !raw && st.st_size > 0) {
        logmsg("MDT inode %ju: a regular file of %jd bytes without a layout", (uintmax_t)in->ino,
               (intmax_t)st.st_size);
        rc = -EIO;
    } else if (!rc && !raw && writable) {
        rc = layout_now(fd, &st);
    }
    free(raw);
    if (!rc && writable && (flags & O_TRUNC))
        rc = truncate_locked(in, fd, 0, uid);
    pthread_mutex_unlock(&in->lock);
    return rc;
}

void sk_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct sk_inode *in = get_inode(ino);
    if (!is_regular(in)) {
        fuse_reply_err(req, in->type == S_IFDIR ? EISDIR : ENXIO);
        return;
    }
    uid_t uid = fuse_req_ctx(req)->uid;
    int rc = fds_charge(uid, 1);
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    int fd = open_mdt(in);
    if (fd < 0 || (rc = open_prepare(in, fd, fi->flags, uid)) < 0) {
        if (fd >= 0)
            close(fd);
        fds_release(uid, 1);
        fuse_reply_err(req, fd < 0 ? -fd : -rc);
        return;
    }
    if ((rc = file_open(req, in, fd, fi->flags, fi)) < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    if (fuse_reply_open(req, fi) == -ENOENT)
        file_close(req, (struct sk_file *)(uintptr_t)fi->fh);
}

void sk_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    struct sk_file *fh = (struct sk_file *)(uintptr_t)fi->fh;
    passthrough_settle(fh);
    if (atomic_load(&fh->written))
        close_record(fh);
    file_close(req, fh);
    fuse_reply_err(req, 0);
}

void sk_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    (void)fi;
    fuse_reply_err(req, 0);
}
