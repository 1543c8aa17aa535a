/* The scratch mount's namespace (docs/mount.rst): new inodes (mknod, mkdir, symlink, link) with
 * their callers' owners, names removed or renamed (a file's objects deleted with its last name
 * and handle), directories read, statfs, and extended attributes (which names pass: access.c).
 * Everything passes through to the MDT tree. */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314

#include "skfs_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

/* -- the namespace ----------------------------------------------------------------------------- */

/* A new non-regular inode `name` (mode's type) in the directory `pfd`. 0 or an errno. */
static int make_node(fuse_req_t req, int pfd, const char *name, mode_t mode, dev_t rdev)
{
    uid_t uid;
    gid_t gid;
    bool sgid, inherits;
    new_owner(req, pfd, &uid, &gid, &sgid);
    mode_t want = create_mode(req, pfd, mode, &inherits);
    if (mknodat(pfd, name, (mode & S_IFMT) | want, rdev) < 0)
        return errno;
    want = created_mode(pfd, name, want, inherits);
    if (fchownat(pfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0 ||
        fchmodat(pfd, name, want, 0) < 0) {
        int err = errno;
        unlinkat(pfd, name, 0);
        return err;
    }
    return 0;
}

void sk_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
              dev_t rdev)
{
    int err;
    if (S_ISREG(mode)) {
        int fd;
        int rc = make_regular(req, parent, name, mode, &fd);
        if (rc < 0) {
            fuse_reply_err(req, -rc);
            return;
        }
        close(fd);
        sk_lookup(req, parent, name);  /* the new entry */
        return;
    }
    struct sk_inode *pin = get_inode(parent);
    int pfd = inode_fd(pin);
    if (pfd < 0) {
        fuse_reply_err(req, -pfd);
        return;
    }
    err = make_node(req, pfd, name, mode, rdev);
    inode_fd_put(pin);
    if (err)
        fuse_reply_err(req, err);
    else
        sk_lookup(req, parent, name);  /* the new entry */
}

/* A new directory `name` in the directory `pfd`, with its parent's default layout. 0 or an
 * errno. */
static int make_dir(fuse_req_t req, int pfd, const char *name, mode_t mode)
{
    uid_t uid;
    gid_t gid;
    bool sgid, inherits;
    new_owner(req, pfd, &uid, &gid, &sgid);
    /* the caller's umask, not the mount process's: mkdirat masks with the latter, so the
     * mode is set again after the chown (a set-group-id parent's bit is kept, as ext4 does);
     * under a default ACL the MDT's file system makes the mode (and the ACLs) itself */
    mode_t want = create_mode(req, pfd, mode, &inherits) | (sgid ? S_ISGID : 0);
    if (mkdirat(pfd, name, want) < 0)
        return errno;
    int dfd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0)
        want = created_mode(dfd, "", want, inherits);
    if (dfd < 0 || fchownat(dfd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ||
        fchmodat(pfd, name, want, 0) < 0) {
        int err = errno;
        if (dfd >= 0)
            close(dfd);
        unlinkat(pfd, name, AT_REMOVEDIR);
        return err;
    }
    /* a new directory inherits its parent's default layout */
    char ppath[64], dpath[64], buf[512];
    procpath(pfd, ppath);
    procpath(dfd, dpath);
    ssize_t n = getxattr(ppath, SK_DIRLOV_XATTR, buf, sizeof buf);
    if (n >= 0 && setxattr(dpath, SK_DIRLOV_XATTR, buf, (size_t)n, 0) < 0)
        logmsg("mkdir %s: default layout not inherited: %s", name, strerror(errno));
    close(dfd);
    return 0;
}

void sk_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    struct sk_inode *pin = get_inode(parent);
    int pfd = inode_fd(pin);
    if (pfd < 0) {
        fuse_reply_err(req, -pfd);
        return;
    }
    int err = make_dir(req, pfd, name, mode);
    inode_fd_put(pin);
    if (err)
        fuse_reply_err(req, err);
    else
        sk_lookup(req, parent, name);  /* the new entry */
}

void sk_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    struct sk_inode *pin = get_inode(parent);
    int pfd = inode_fd(pin);
    if (pfd < 0) {
        fuse_reply_err(req, -pfd);
        return;
    }
    uid_t uid;
    gid_t gid;
    bool sgid;
    new_owner(req, pfd, &uid, &gid, &sgid);
    int err = 0;
    if (symlinkat(link, pfd, name) < 0) {
        err = errno;
    } else if (fchownat(pfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0) {
        err = errno;
        unlinkat(pfd, name, 0);
    }
    inode_fd_put(pin);
    if (err)
        fuse_reply_err(req, err);
    else
        sk_lookup(req, parent, name);  /* the new entry */
}

void sk_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char *name)
{
    struct sk_inode *in = get_inode(ino), *pin = get_inode(parent);
    int fd = inode_fd(in);
    if (fd < 0) {
        fuse_reply_err(req, -fd);
        return;
    }
    int pfd = inode_fd(pin);
    int err = pfd < 0 ? -pfd : 0;
    if (!err) {
        char path[64];
        procpath(fd, path);
        if (linkat(AT_FDCWD, path, pfd, name, AT_SYMLINK_FOLLOW) < 0)
            err = errno;
        inode_fd_put(pin);
    }
    inode_fd_put(in);
    if (err)
        fuse_reply_err(req, err);
    else
        sk_lookup(req, parent, name);  /* the new entry */
}

/* `vfd` (O_PATH) lost a name: delete its objects if that was its last one, now or (an open
 * file) at its last release. */
static void lost_a_name(int vfd)
{
    struct stat st;
    if (fstatat(vfd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
        st.st_nlink > 0)
        return;
    char path[64], *raw;
    size_t len;
    procpath(vfd, path);
    if (read_lov_path(path, &raw, &len) < 0 || !raw)
        return;
    pthread_mutex_lock(&fs.table_lock);
    struct sk_inode *in = table_find(st.st_dev, st.st_ino);
    if (in && in->nopen > 0) {
        free(in->doomed);
        in->doomed = raw;
        in->doomed_len = len;
        pthread_mutex_unlock(&fs.table_lock);
        return;
    }
    pthread_mutex_unlock(&fs.table_lock);
    delete_objects(raw, len, st.st_ino);
    free(raw);
}

/* Reply to an unlink or a rename (err: 0 or its errno); on success the inode `vfd` (O_PATH,
 * -1 if none) has lost the name (a file's objects go with its last name and handle). */
static void reply_name_gone(fuse_req_t req, int err, int vfd)
{
    if (vfd >= 0) {
        if (!err)
            lost_a_name(vfd);
        close(vfd);
    }
    fuse_reply_err(req, err);
}

void sk_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct sk_inode *pin = get_inode(parent);
    int pfd = inode_fd(pin);
    if (pfd < 0) {
        fuse_reply_err(req, -pfd);
        return;
    }
    int vfd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    int err = unlinkat(pfd, name, 0) < 0 ? errno : 0;
    inode_fd_put(pin);
    reply_name_gone(req, err, vfd);
}

void sk_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct sk_inode *pin = get_inode(parent);
    int pfd = inode_fd(pin);
    if (pfd < 0) {
        fuse_reply_err(req, -pfd);
        return;
    }
    int err = unlinkat(pfd, name, AT_REMOVEDIR) < 0 ? errno : 0;
    inode_fd_put(pin);
    fuse_reply_err(req, err);
}

void sk_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
               const char *newname, unsigned int flags)
{
    struct sk_inode *pin = get_inode(parent), *npin = get_inode(newparent);
    int pfd = inode_fd(pin);
    if (pfd < 0) {
        fuse_reply_err(req, -pfd);
        return;
    }
    int npfd = inode_fd(npin);
    if (npfd < 0) {
        inode_fd_put(pin);
        fuse_reply_err(req, -npfd);
        return;
    }
    int vfd = -1;
    if (!(flags & RENAME_EXCHANGE))
        vfd = openat(npfd, newname, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    int err = renameat2(pfd, name, npfd, newname, flags) < 0 ? errno : 0;
    inode_fd_put(npin);
    inode_fd_put(pin);
    reply_name_gone(req, err, vfd);
}

void sk_readlink(fuse_req_t req, fuse_ino_t ino)
{
    struct sk_inode *in = get_inode(ino);
    int fd = inode_fd(in);
    if (fd < 0) {
        fuse_reply_err(req, -fd);
        return;
    }
    char buf[PATH_MAX + 1];
    ssize_t n = readlinkat(fd, "", buf, sizeof buf);
    int err = errno;
    inode_fd_put(in);
    if (n < 0) {
        fuse_reply_err(req, err);
        return;
    }
    if (n >= (ssize_t)sizeof buf) {
        fuse_reply_err(req, ENAMETOOLONG);
        return;
    }
    buf[n] = '\0';
    fuse_reply_readlink(req, buf);
}

/* The directory `in` opened for reading, or -errno. */
static int open_dir(struct sk_inode *in)
{
    int ifd = inode_fd(in);
    if (ifd < 0)
        return ifd;
    int fd = openat(ifd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int err = errno;
    inode_fd_put(in);
    return fd < 0 ? -err : fd;
}

void sk_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    uid_t uid = fuse_req_ctx(req)->uid;
    int rc = fds_charge(uid, 1);  /* the handle's descriptor, held until releasedir */
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    struct sk_dir *d = calloc(1, sizeof *d);
    int fd = d ? open_dir(get_inode(ino)) : -ENOMEM;
    if (fd >= 0 && !(d->dp = fdopendir(fd))) {
        int err = errno;
        close(fd);
        fd = -err;
    }
    if (fd < 0) {
        free(d);
        fds_release(uid, 1);
        fuse_reply_err(req, -fd);
        return;
    }
    d->opener = uid;
    fi->fh = (uint64_t)(uintptr_t)d;
    if (fuse_reply_open(req, fi) == -ENOENT) {
        closedir(d->dp);
        free(d);
        fds_release(uid, 1);
    }
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
                       struct fuse_file_info *fi, bool plus)
{
    struct sk_dir *d = (struct sk_dir *)(uintptr_t)fi->fh;
    char *buf = malloc(size);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    if (offset != d->offset) {
        seekdir(d->dp, offset);
        d->entry = NULL;
        d->offset = offset;
    }
    size_t used = 0;
    int err = 0;
    for (;;) {
        if (!d->entry) {
            errno = 0;
            d->entry = readdir(d->dp);
            if (!d->entry) {
                err = errno;
                break;
            }
        }
        off_t next = d->entry->d_off;
        const char *name = d->entry->d_name;
        size_t entsize;
        if (plus) {
            struct fuse_entry_param e;
            bool dots = strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
            if (dots) {
                memset(&e, 0, sizeof e);
                e.attr.st_ino = d->entry->d_ino;
                e.attr.st_mode = (mode_t)d->entry->d_type << 12;
            } else if ((err = do_lookup(ino, name, &e)) != 0) {
                if (err == ENOENT) {  /* removed meanwhile */
                    err = 0;
                    d->entry = NULL;
                    d->offset = next;
                    continue;
                }
                break;
            }
            entsize = fuse_add_direntry_plus(req, buf + used, size - used, name, &e, next);
            if (entsize > size - used) {
                if (!dots)
                    forget_one(e.ino, 1);
                break;
            }
        } else {
            struct stat st = {.st_ino = d->entry->d_ino,
                              .st_mode = (mode_t)d->entry->d_type << 12};
            entsize = fuse_add_direntry(req, buf + used, size - used, name, &st, next);
            if (entsize > size - used)
                break;
        }
        used += entsize;
        d->entry = NULL;
        d->offset = next;
    }
    if (err && used == 0)
        fuse_reply_err(req, err);
    else
        fuse_reply_buf(req, buf, used);
    free(buf);
}

void sk_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
                struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, offset, fi, false);
}

void sk_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
                    struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, offset, fi, true);
}

void sk_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    struct sk_dir *d = (struct sk_dir *)(uintptr_t)fi->fh;
    closedir(d->dp);
    fds_release(d->opener, 1);
    free(d);
    fuse_reply_err(req, 0);
}

void sk_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    (void)ino;
    int fd = dirfd(((struct sk_dir *)(uintptr_t)fi->fh)->dp);
    fuse_reply_err(req, (datasync ? fdatasync(fd) : fsync(fd)) < 0 ? errno : 0);
}

void sk_statfs(fuse_req_t req, fuse_ino_t ino)
{
    (void)ino;
    struct statvfs sv;
    if (fstatvfs(fs.root.fd, &sv) < 0)
        fuse_reply_err(req, errno);
    else
        fuse_reply_statfs(req, &sv);
}

/* The read dispatch (dispatch.c), read QoS (qos.c), hybrid replica (hybrid.c), log (logs.c),
 * descriptor (fds.c) and passthrough (passthrough.c) counters, answered by the mount on its
 * root, read-only. */
static bool stats_xattr(fuse_ino_t ino, const char *name)
{
    return ino == FUSE_ROOT_ID &&
           (strcmp(name, SK_DISPATCH_XATTR) == 0 || strcmp(name, SK_QOS_XATTR) == 0 ||
            strcmp(name, SK_HYBRID_XATTR) == 0 || strcmp(name, SK_LOGS_XATTR) == 0 ||
            strcmp(name, SK_FDS_XATTR) == 0 || strcmp(name, SK_PASSTHROUGH_XATTR) == 0);
}

/* Whether the caller may change the layout of the inode `st` or the default layout of a
 * directory (set or remove user.scratchkeeper.stripe): the kernel checked write permission
 * (default_permissions); as Lustre's MDS, the mount also wants the caller to own it (or be
 * root: CAP_FOWNER), so a group or ACL writer of another user's file or directory cannot
 * change where its data goes. 0 or EPERM. */
static int may_lay_out(fuse_req_t req, const struct stat *st)
{
    uid_t caller = fuse_req_ctx(req)->uid;
    return caller == 0 || caller == st->st_uid ? 0 : EPERM;
}

/* user.scratchkeeper.stripe set on a directory (its default layout, lfs setstripe DIR; kept
 * as security.scratchkeeper.dirlov, which only root may write) or on an empty regular file
 * (its layout, lfs setstripe FILE: what a user's stage-in does before its transfer writes
 * the file), by its owner (may_lay_out); the MDT inode is open as `fd`. The value says stripe
 * count, size and pool only: no OST list, a pool of the store's, and for a file at most the
 * store's OSTs (docs/storage.rst). */
static int set_stripe(fuse_req_t req, struct sk_inode *in, int fd, const char *value,
                      size_t size, int flags)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return errno;
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
        return EINVAL;
    int err = may_lay_out(req, &st);
    if (err)
        return err;
    int stripe_count;
    uint64_t stripe_size;
    char pool[128];
    if (sk_dirlov_parse(value, size, &stripe_count, &stripe_size, pool) < 0 ||
        (pool[0] && !find_pool(pool)))
        return EINVAL;  /* as store setstripe -p: a pool must be one of the store's */
    char path[64];
    procpath(fd, path);
    if (S_ISDIR(st.st_mode))
        return setxattr(path, SK_DIRLOV_XATTR, value, size, flags) < 0 ? errno : 0;
    if (flags & XATTR_CREATE)
        return EEXIST;  /* a file always has a layout: only replacing it is asked for */
    if (stripe_count > 0 && (unsigned)stripe_count > fs.cfg.ost_count)
        return EINVAL;
    return -relayout_empty(in, path, stripe_count, stripe_size, pool);
}

/* setfattr -x user.scratchkeeper.stripe DIR: the directory's default layout removed, by whom
 * may set it (issue 39: a group writer removed another user's); a regular file has none. */
static int remove_stripe(fuse_req_t req, int fd)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return errno;
    if (!S_ISDIR(st.st_mode))
        return EINVAL;
    int err = may_lay_out(req, &st);
    if (err)
        return err;
    char path[64];
    procpath(fd, path);
    return removexattr(path, SK_DIRLOV_XATTR) < 0 ? errno : 0;
}

void sk_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                 size_t size, int flags)
{
    struct sk_inode *in = get_inode(ino);
    bool stripe = strcmp(name, SK_STRIPE_XATTR) == 0;
    int err = stats_xattr(ino, name) ? EPERM : stripe ? 0 : xattr_set_allowed(req, ino, name);
    if (err) {
        fuse_reply_err(req, err);  /* security.* and trusted.* are the store's and the mount's */
        return;
    }
    int fd = inode_fd(in);
    if (fd < 0) {
        fuse_reply_err(req, -fd);
        return;
    }
    if (stripe) {
        err = set_stripe(req, in, fd, value, size, flags);
    } else {
        char path[64];
        procpath(fd, path);
        /* an ACL goes to the MDT inode, whose file system updates the mode from it */
        err = setxattr(path, name, value, size, flags) < 0 ? errno : 0;
        if (!err && strcmp(name, ACL_ACCESS) == 0)
            acl_kill_sgid(req, in, fd);
    }
    inode_fd_put(in);
    fuse_reply_err(req, err);
}

/* Reply with a counters attribute: its JSON text (malloc'd, freed here) or -errno. */
static void reply_stats(fuse_req_t req, size_t size, int rc, char *text, size_t len)
{
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else if (size == 0)
        fuse_reply_xattr(req, len);
    else if (size < len)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, text, len);
    if (rc == 0)
        free(text);
}

static void get_stats(fuse_req_t req, const char *name, size_t size)
{
    char *text = NULL;
    size_t len = 0;
    uid_t caller = fuse_req_ctx(req)->uid;
    int rc = strcmp(name, SK_QOS_XATTR) == 0      ? qos_stats(&text, &len)
             : strcmp(name, SK_HYBRID_XATTR) == 0 ? hybrid_stats(&text, &len)
             : strcmp(name, SK_LOGS_XATTR) == 0   ? logs_stats(caller, &text, &len)
             : strcmp(name, SK_FDS_XATTR) == 0    ? fds_stats(caller, &text, &len)
             : strcmp(name, SK_PASSTHROUGH_XATTR) == 0 ? passthrough_stats(&text, &len)
                                                  : dispatch_stats(&text, &len);
    reply_stats(req, size, rc, text, len);
}

/* getxattr of `name` (a name the caller may read) of the MDT inode open as `fd`: its length,
 * its value in *out (malloc'd) when `size` is not 0, or -errno. */
static ssize_t get_attr(int fd, const char *name, size_t size, char **out)
{
    *out = NULL;
    if (strcmp(name, SK_STRIPE_XATTR) == 0) {
        /* a directory's default layout; a regular file has none */
        struct stat st;
        if (fstat(fd, &st) < 0)
            return -errno;
        if (!S_ISDIR(st.st_mode))
            return -ENODATA;
        name = SK_DIRLOV_XATTR;
    }
    char path[64];
    procpath(fd, path);
    if (size == 0) {
        ssize_t n = getxattr(path, name, NULL, 0);
        return n < 0 ? -errno : n;
    }
    char *buf = malloc(size);
    if (!buf)
        return -ENOMEM;
    ssize_t n = getxattr(path, name, buf, size);
    if (n < 0) {
        int err = errno;
        free(buf);
        return -err;
    }
    *out = buf;
    return n;
}

void sk_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    if (stats_xattr(ino, name)) {
        get_stats(req, name, size);
        return;
    }
    int err = xattr_get_allowed(req, ino, name);
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    struct sk_inode *in = get_inode(ino);
    int fd = inode_fd(in);
    if (fd < 0) {
        fuse_reply_err(req, -fd);
        return;
    }
    char *buf;
    ssize_t n = get_attr(fd, name, size, &buf);
    /* given back before the reply: the kernel holds the inode only until it has its answer,
     * and may forget it (and this entry be freed) at once after */
    inode_fd_put(in);
    if (n < 0)
        fuse_reply_err(req, (int)-n);
    else if (size == 0)
        fuse_reply_xattr(req, (size_t)n);
    else
        fuse_reply_buf(req, buf, (size_t)n);
    free(buf);
}

/* The names of the MDT inode at `path`, read whole (malloc'd in *out); its length or -errno. */
static ssize_t list_names(const char *path, char **out)
{
    char *buf = NULL;
    ssize_t n;
    for (int tries = 0;; tries++) {
        n = listxattr(path, NULL, 0);
        if (n < 0)
            break;
        char *grown = realloc(buf, (size_t)n + 1);
        if (!grown) {
            n = -1;
            errno = ENOMEM;
            break;
        }
        buf = grown;
        n = listxattr(path, buf, (size_t)n + 1);
        if (n >= 0 || errno != ERANGE || tries == 8)
            break;  /* ERANGE: an attribute was added meanwhile */
    }
    if (n < 0) {
        int err = errno;
        free(buf);
        return -err;
    }
    *out = buf;
    return n;
}

/* The names the caller may see (access.c: trusted.* for root only), whatever the size it
 * asks with: the list is read whole and filtered, so its length is the filtered one. */
void sk_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    struct sk_inode *in = get_inode(ino);
    int fd = inode_fd(in);
    if (fd < 0) {
        fuse_reply_err(req, -fd);
        return;
    }
    char path[64];
    procpath(fd, path);
    char *buf = NULL;
    ssize_t n = list_names(path, &buf);
    inode_fd_put(in);
    if (n < 0) {
        fuse_reply_err(req, (int)-n);
        return;
    }
    size_t kept = xattr_filter_list(req, ino, buf, (size_t)n);
    if (size == 0)
        fuse_reply_xattr(req, kept);
    else if (size < kept)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, buf, kept);
    free(buf);
}

void sk_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    struct sk_inode *in = get_inode(ino);
    bool stripe = strcmp(name, SK_STRIPE_XATTR) == 0;
    int err = stats_xattr(ino, name) ? EPERM : stripe ? 0 : xattr_set_allowed(req, ino, name);
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    int fd = inode_fd(in);
    if (fd < 0) {
        fuse_reply_err(req, -fd);
        return;
    }
    if (stripe) {
        err = remove_stripe(req, fd);
    } else {
        char path[64];
        procpath(fd, path);
        err = removexattr(path, name) < 0 ? errno : 0;
    }
    inode_fd_put(in);
    fuse_reply_err(req, err);
}
