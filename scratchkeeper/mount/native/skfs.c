/* The scratch mount: a libfuse3 low-level file system in the shape of libfuse's
 * example/passthrough_hp (docs/mount.rst).
 *
 * Metadata passes through to the MDT tree (store_root/mdt): every inode the kernel knows is an
 * entry of a table keyed by the MDT's (st_dev, st_ino), holding an O_PATH descriptor of its MDT
 * inode and the kernel's lookup count, released by forget. The data of a regular file lives in
 * OST objects (store_root/ostNNNN/OBJECT_ID) laid out by its security.scratchkeeper.lov
 * attribute; its size is the MDT inode's st_size. Requests run with root's rights; the kernel
 * checks permissions (default_permissions) and new inodes get the caller's uid and gid.
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314

#include "skfs.h"
#include "lov.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define NBUCKETS (1u << 16)
#define NEED_RECOVERY 1
#define RECOVERY_SLICE 2.0 /* seconds of one wait on recoveryd between checks */

/* -- the inode table ------------------------------------------------------------------------- */

struct sk_inode {
    int fd;                 /* O_PATH of the MDT inode */
    dev_t dev;
    ino_t ino;
    mode_t type;            /* S_IFMT bits */
    uint64_t nlookup;       /* table_lock */
    uint64_t nopen;         /* table_lock: open handles */
    char *doomed;           /* table_lock: layout of objects to delete at the last release */
    size_t doomed_len;
    pthread_mutex_t lock;   /* size and layout changes of a regular file */
    struct sk_inode *next;  /* hash chain */
};

/* A layout as one open file uses it: the parsed attribute and its objects' descriptors. */
struct sk_view {
    atomic_int refs;
    char *raw;              /* NULL: the inode has no layout attribute */
    size_t rawlen;
    struct sk_lov lov;
    int **fds;              /* [component][position], -1 when the object could not be opened */
};

struct sk_file {
    struct sk_inode *inode;
    int fd;                 /* the MDT inode opened O_RDWR: size, times, layout */
    bool writable;
    bool append;
    pthread_mutex_t lock;   /* view */
    struct sk_view *view;
};

struct sk_dir {
    DIR *dp;
    off_t offset;
    struct dirent *entry;
};

static struct {
    struct skfs_config cfg;
    struct sk_inode root;
    pthread_mutex_t table_lock;
    struct sk_inode **buckets;
    int store_fd;           /* O_PATH of store_root */
    char mdt_real[PATH_MAX];
    size_t mdt_real_len;
    unsigned max_request;
    atomic_uchar failed[SK_MAX_OST + 1];
    atomic_uint rr;
    int inotify_fd;
    int stop_pipe[2];
    struct fuse_session *se;
} fs;

static void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void logmsg(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "scratchkeeper mount: %s\n", line);
}

static struct sk_inode *get_inode(fuse_ino_t ino)
{
    return ino == FUSE_ROOT_ID ? &fs.root : (struct sk_inode *)(uintptr_t)ino;
}

static size_t bucket_of(dev_t dev, ino_t ino)
{
    uint64_t h = (uint64_t)ino * 0x9E3779B97F4A7C15ULL ^ (uint64_t)dev * 0xC2B2AE3D27D4EB4FULL;
    return (size_t)(h >> 48) & (NBUCKETS - 1);
}

/* Caller holds table_lock. */
static struct sk_inode *table_find(dev_t dev, ino_t ino)
{
    for (struct sk_inode *in = fs.buckets[bucket_of(dev, ino)]; in; in = in->next)
        if (in->dev == dev && in->ino == ino)
            return in;
    return NULL;
}

/* Caller holds table_lock; frees `in` if nothing refers to it any more. Returns a layout whose
 * objects the caller must delete (the last handle of an unlinked file), or NULL. */
static void table_drop_if_unused(struct sk_inode *in)
{
    if (in == &fs.root || in->nlookup || in->nopen)
        return;
    struct sk_inode **link = &fs.buckets[bucket_of(in->dev, in->ino)];
    while (*link != in)
        link = &(*link)->next;
    *link = in->next;
    close(in->fd);
    pthread_mutex_destroy(&in->lock);
    free(in->doomed);
    free(in);
}

static void procpath(int fd, char *buf)
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

static int do_lookup(fuse_ino_t parent, const char *name, struct fuse_entry_param *e)
{
    memset(e, 0, sizeof *e);
    e->attr_timeout = fs.cfg.attr_timeout;
    e->entry_timeout = fs.cfg.attr_timeout;
    int fd = openat(get_inode(parent)->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno;
    if (fstatat(fd, "", &e->attr, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
        int err = errno;
        close(fd);
        return err;
    }
    fix_attr(&e->attr);
    pthread_mutex_lock(&fs.table_lock);
    struct sk_inode *in = table_find(e->attr.st_dev, e->attr.st_ino);
    if (in) {
        in->nlookup++;
        pthread_mutex_unlock(&fs.table_lock);
        close(fd);
    } else {
        in = calloc(1, sizeof *in);
        if (!in) {
            pthread_mutex_unlock(&fs.table_lock);
            close(fd);
            return ENOMEM;
        }
        in->fd = fd;
        in->dev = e->attr.st_dev;
        in->ino = e->attr.st_ino;
        in->type = e->attr.st_mode & S_IFMT;
        in->nlookup = 1;
        pthread_mutex_init(&in->lock, NULL);
        size_t b = bucket_of(in->dev, in->ino);
        in->next = fs.buckets[b];
        fs.buckets[b] = in;
        pthread_mutex_unlock(&fs.table_lock);
    }
    e->ino = (fuse_ino_t)(uintptr_t)in;
    return 0;
}

static void forget_one(fuse_ino_t ino, uint64_t n)
{
    struct sk_inode *in = get_inode(ino);
    if (in == &fs.root)
        return;
    pthread_mutex_lock(&fs.table_lock);
    in->nlookup = n > in->nlookup ? 0 : in->nlookup - n;
    table_drop_if_unused(in);
    pthread_mutex_unlock(&fs.table_lock);
}

/* -- OSTs, objects and layouts ---------------------------------------------------------------- */

static bool ost_failed(uint32_t ost)
{
    return atomic_load_explicit(&fs.failed[ost], memory_order_relaxed) != 0;
}

static void scan_osts(void)
{
    for (unsigned i = 0; i < fs.cfg.ost_count && i <= SK_MAX_OST; i++) {
        char name[32];
        struct stat st;
        snprintf(name, sizeof name, "ost%04u", i);
        bool down = fstatat(fs.store_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                    !S_ISDIR(st.st_mode);
        if (atomic_exchange(&fs.failed[i], down) != down)
            logmsg("OST %u is %s", i, down ? "failed: not read any more" : "back");
    }
}

static void *watch_osts(void *arg)
{
    (void)arg;
    char events[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    struct pollfd pfd[2] = {{fs.inotify_fd, POLLIN, 0}, {fs.stop_pipe[0], POLLIN, 0}};
    for (;;) {
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            logmsg("watching the OSTs: poll: %s", strerror(errno));
            return NULL;
        }
        if (pfd[1].revents)
            return NULL;
        while (read(fs.inotify_fd, events, sizeof events) > 0)
            ;
        scan_osts();
    }
}

static int object_name(char *buf, size_t len, const struct sk_obj *obj)
{
    return snprintf(buf, len, "ost%04u/%s", obj->ost, obj->id);
}

static int open_object(const struct sk_obj *obj, int flags)
{
    char name[64];
    if (obj->ost > SK_MAX_OST || ost_failed(obj->ost))
        return -1;
    object_name(name, sizeof name, obj);
    return openat(fs.store_fd, name, flags | O_CLOEXEC | O_NOFOLLOW);
}

/* The layout attribute of an open MDT inode: 0 with *raw malloc'd (NULL if it has none). */
static int read_lov_fd(int fd, char **raw, size_t *len)
{
    char stackbuf[4096];
    *raw = NULL;
    *len = 0;
    ssize_t n = fgetxattr(fd, SK_LOV_XATTR, stackbuf, sizeof stackbuf);
    if (n < 0 && errno == ENODATA)
        return 0;
    if (n >= 0) {
        if (!(*raw = malloc((size_t)n + 1)))
            return -ENOMEM;
        memcpy(*raw, stackbuf, (size_t)n);
    } else {
        if (errno != ERANGE)
            return -errno;
        for (;;) {
            ssize_t want = fgetxattr(fd, SK_LOV_XATTR, NULL, 0);
            if (want < 0)
                return errno == ENODATA ? 0 : -errno;
            char *buf = malloc((size_t)want + 1);
            if (!buf)
                return -ENOMEM;
            n = fgetxattr(fd, SK_LOV_XATTR, buf, (size_t)want);
            if (n >= 0) {
                *raw = buf;
                break;
            }
            free(buf);
            if (errno != ERANGE)
                return errno == ENODATA ? 0 : -errno;
        }
    }
    (*raw)[n] = '\0';
    *len = (size_t)n;
    return 0;
}

/* The same through a path (an O_PATH descriptor's /proc link). */
static int read_lov_path(const char *path, char **raw, size_t *len)
{
    *raw = NULL;
    *len = 0;
    for (;;) {
        ssize_t want = getxattr(path, SK_LOV_XATTR, NULL, 0);
        if (want < 0)
            return errno == ENODATA ? 0 : -errno;
        char *buf = malloc((size_t)want + 1);
        if (!buf)
            return -ENOMEM;
        ssize_t n = getxattr(path, SK_LOV_XATTR, buf, (size_t)want);
        if (n >= 0) {
            buf[n] = '\0';
            *raw = buf;
            *len = (size_t)n;
            return 0;
        }
        free(buf);
        if (errno != ERANGE)
            return errno == ENODATA ? 0 : -errno;
    }
}

static int parse_lov(const char *raw, size_t len, struct sk_lov *lov, const struct sk_inode *in)
{
    char err[200];
    int rc = sk_lov_parse(raw, len, lov, err, sizeof err);
    if (rc == -EIO)
        logmsg("MDT inode %ju: corrupt layout attribute (%s): %s", (uintmax_t)in->ino,
               SK_LOV_XATTR, err);
    return rc;
}

/* Delete the objects of a layout (the file's last name and handle are gone). */
static void delete_objects(const char *raw, size_t len, ino_t ino)
{
    struct sk_lov lov;
    char err[200];
    if (!raw)
        return;
    if (sk_lov_parse(raw, len, &lov, err, sizeof err) < 0) {
        logmsg("deleted MDT inode %ju: corrupt layout, its objects are left: %s",
               (uintmax_t)ino, err);
        return;
    }
    for (uint32_t i = 0; i < lov.ncomp; i++)
        for (uint32_t j = 0; j < lov.comps[i].count; j++) {
            char name[64];
            object_name(name, sizeof name, &lov.comps[i].objs[j]);
            if (unlinkat(fs.store_fd, name, 0) < 0 && errno != ENOENT)
                logmsg("deleted MDT inode %ju: object %s left: %s", (uintmax_t)ino, name,
                       strerror(errno));
        }
    sk_lov_free(&lov);
}

static void view_put(struct sk_view *v)
{
    if (!v || atomic_fetch_sub(&v->refs, 1) != 1)
        return;
    if (v->fds) {
        for (uint32_t i = 0; i < v->lov.ncomp; i++) {
            if (!v->fds[i])
                continue;
            for (uint32_t j = 0; j < v->lov.comps[i].count; j++)
                if (v->fds[i][j] >= 0)
                    close(v->fds[i][j]);
            free(v->fds[i]);
        }
        free(v->fds);
    }
    sk_lov_free(&v->lov);
    free(v->raw);
    free(v);
}

/* A view of `raw` (taken over) with its objects opened. */
static int view_make(struct sk_file *fh, char *raw, size_t len, struct sk_view **out)
{
    struct sk_view *v = calloc(1, sizeof *v);
    if (!v) {
        free(raw);
        return -ENOMEM;
    }
    atomic_init(&v->refs, 1);
    v->raw = raw;
    v->rawlen = len;
    if (raw) {
        int rc = parse_lov(raw, len, &v->lov, fh->inode);
        if (rc < 0) {
            view_put(v);
            return rc;
        }
        if (!(v->fds = calloc(v->lov.ncomp, sizeof *v->fds))) {
            view_put(v);
            return -ENOMEM;
        }
        for (uint32_t i = 0; i < v->lov.ncomp; i++) {
            const struct sk_comp *c = &v->lov.comps[i];
            if (!(v->fds[i] = malloc(c->count * sizeof **v->fds))) {
                view_put(v);
                return -ENOMEM;
            }
            for (uint32_t j = 0; j < c->count; j++)
                v->fds[i][j] = -1;
            if (!c->init)
                continue;
            for (uint32_t j = 0; j < c->count; j++)
                v->fds[i][j] = open_object(&c->objs[j], fh->writable ? O_RDWR : O_RDONLY);
        }
    }
    *out = v;
    return 0;
}

/* The file's current layout: the attribute is read again on every call, so a layout changed
 * by the store or recoveryd (a mirror, a rebuild) is used by the next request. */
static int view_get(struct sk_file *fh, struct sk_view **out)
{
    char *raw;
    size_t len;
    int rc = read_lov_fd(fh->fd, &raw, &len);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&fh->lock);
    struct sk_view *cur = fh->view;
    if (cur && ((!raw && !cur->raw) ||
                (raw && cur->raw && len == cur->rawlen && memcmp(raw, cur->raw, len) == 0))) {
        atomic_fetch_add(&cur->refs, 1);
        pthread_mutex_unlock(&fh->lock);
        free(raw);
        *out = cur;
        return 0;
    }
    struct sk_view *v;
    if ((rc = view_make(fh, raw, len, &v)) < 0) {
        pthread_mutex_unlock(&fh->lock);
        return rc;
    }
    fh->view = v;
    atomic_fetch_add(&v->refs, 1);
    pthread_mutex_unlock(&fh->lock);
    view_put(cur);
    *out = v;
    return 0;
}

/* Forget the cached view, so that objects are opened again (an OST came back). */
static void view_reset(struct sk_file *fh)
{
    pthread_mutex_lock(&fh->lock);
    struct sk_view *old = fh->view;
    fh->view = NULL;
    pthread_mutex_unlock(&fh->lock);
    view_put(old);
}

static void random_id(char *out)
{
    unsigned char bytes[16];
    size_t got = 0;
    while (got < sizeof bytes) {
        ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
        if (n > 0)
            got += (size_t)n;
    }
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", bytes[i]);
}

/* A new file's layout in parent directory `pfd` (its dirlov, else the site's defaults):
 * OSTs round-robin among the healthy ones. */
static int new_layout(int pfd, struct sk_lov *lov)
{
    int stripe_count = fs.cfg.stripe_count;
    uint64_t stripe_size = fs.cfg.stripe_size;
    char path[64], buf[512];
    procpath(pfd, path);
    ssize_t n = getxattr(path, SK_DIRLOV_XATTR, buf, sizeof buf);
    if (n >= 0 && sk_dirlov_parse(buf, (size_t)n, &stripe_count, &stripe_size) < 0) {
        logmsg("directory %s: corrupt %s, the site's default layout is used", path,
               SK_DIRLOV_XATTR);
        stripe_count = fs.cfg.stripe_count;
        stripe_size = fs.cfg.stripe_size;
    }
    unsigned healthy[SK_MAX_OST + 1];
    unsigned nhealthy = 0;
    for (unsigned i = 0; i < fs.cfg.ost_count && i <= SK_MAX_OST; i++)
        if (!ost_failed(i))
            healthy[nhealthy++] = i;
    if (nhealthy == 0) {
        logmsg("no healthy OST for a new file");
        return -ENOSPC;
    }
    unsigned count = stripe_count < 0 || (unsigned)stripe_count > nhealthy ?
                     nhealthy : (unsigned)stripe_count;
    unsigned start = atomic_fetch_add(&fs.rr, 1) % nhealthy;
    memset(lov, 0, sizeof *lov);
    if (!(lov->comps = calloc(1, sizeof *lov->comps)))
        return -ENOMEM;
    lov->ncomp = 1;
    struct sk_comp *c = &lov->comps[0];
    c->end = SK_EOF;
    c->stripe_size = stripe_size;
    strcpy(c->flags, "init");
    strcpy(c->pool, "-");
    c->init = true;
    if (!(c->objs = calloc(count, sizeof *c->objs))) {
        sk_lov_free(lov);
        return -ENOMEM;
    }
    c->count = count;
    for (unsigned i = 0; i < count; i++) {
        c->objs[i].ost = healthy[(start + i) % nhealthy];
        random_id(c->objs[i].id);
    }
    return 0;
}

/* Give the MDT inode `fd` (a new regular file of uid:gid, permission bits `mode`) a layout:
 * the attribute first, then its objects (created O_EXCL, owned by the file's owner, mode
 * (mode & 0666) | 0600). On failure the objects made are deleted and the attribute removed. */
static int assign_layout(int pfd, int fd, uid_t uid, gid_t gid, mode_t mode)
{
    struct sk_lov lov;
    int rc = new_layout(pfd, &lov);
    if (rc < 0)
        return rc;
    size_t len;
    char *raw = sk_lov_format(&lov, &len);
    if (!raw) {
        sk_lov_free(&lov);
        return -ENOMEM;
    }
    if (fsetxattr(fd, SK_LOV_XATTR, raw, len, XATTR_CREATE) < 0) {
        rc = -errno;
        goto out;
    }
    const struct sk_comp *c = &lov.comps[0];
    uint32_t made;
    for (made = 0; made < c->count; made++) {
        char name[64];
        object_name(name, sizeof name, &c->objs[made]);
        int ofd = openat(fs.store_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                         0600);
        if (ofd < 0 || fchown(ofd, uid, gid) < 0 || fchmod(ofd, (mode & 0666) | 0600) < 0) {
            rc = -errno;
            if (ofd >= 0) {
                close(ofd);
                made++;  /* created: delete it below */
            }
            break;
        }
        close(ofd);
    }
    if (rc < 0) {
        for (uint32_t i = 0; i < made; i++) {
            char name[64];
            object_name(name, sizeof name, &c->objs[i]);
            unlinkat(fs.store_fd, name, 0);
        }
        fremovexattr(fd, SK_LOV_XATTR);
    }
out:
    free(raw);
    sk_lov_free(&lov);
    return rc;
}

/* Mark components stale in the layout (their mirror missed a write or a truncate), if the
 * layout is still `raw`. Caller holds the inode lock. */
static void mark_stale(int fd, const struct sk_view *v, const bool *stale, const struct sk_inode *in)
{
    char *now;
    size_t len;
    if (read_lov_fd(fd, &now, &len) < 0 || !now)
        return;
    if (len != v->rawlen || memcmp(now, v->raw, len) != 0) {
        free(now);
        return;  /* changed meanwhile: whoever changed it decided */
    }
    free(now);
    struct sk_lov lov;
    if (parse_lov(v->raw, v->rawlen, &lov, in) < 0)
        return;
    for (uint32_t i = 0; i < lov.ncomp; i++)
        if (stale[i] && !lov.comps[i].stale && strlen(lov.comps[i].flags) + 7 < sizeof lov.comps[i].flags) {
            strcat(lov.comps[i].flags, ",stale");
            lov.comps[i].stale = true;
            logmsg("MDT inode %ju: component %u (mirror %u) is stale: one of its OSTs failed",
                   (uintmax_t)in->ino, lov.comps[i].id, lov.comps[i].mirror);
        }
    lov.gen++;
    char *text = sk_lov_format(&lov, &len);
    if (text && fsetxattr(fd, SK_LOV_XATTR, text, len, XATTR_REPLACE) < 0)
        logmsg("MDT inode %ju: cannot mark stale components: %s", (uintmax_t)in->ino,
               strerror(errno));
    free(text);
    sk_lov_free(&lov);
}

/* Whether the components written whole (`ok`) cover [lo, hi) in some mirror. */
static bool some_mirror_covers(const struct sk_lov *lov, const bool *ok, uint64_t lo, uint64_t hi)
{
    for (uint32_t m = 0; m < lov->ncomp; m++) {
        uint32_t mirror = lov->comps[m].mirror;
        bool first = true;
        for (uint32_t k = 0; k < m; k++)
            if (lov->comps[k].mirror == mirror)
                first = false;
        if (!first)
            continue;
        uint64_t covered = 0;
        for (uint32_t k = 0; k < lov->ncomp; k++) {
            const struct sk_comp *c = &lov->comps[k];
            if (c->mirror != mirror || !ok[k])
                continue;
            uint64_t a = c->start > lo ? c->start : lo;
            uint64_t b = c->end < hi ? c->end : hi;
            if (b > a)
                covered += b - a;
        }
        if (covered >= hi - lo)
            return true;
    }
    return false;
}

/* -- requests ------------------------------------------------------------------------------- */

static void sk_init(void *userdata, struct fuse_conn_info *conn)
{
    (void)userdata;
    if (conn->capable & FUSE_CAP_DONT_MASK)
        conn->want |= FUSE_CAP_DONT_MASK;
    else
        logmsg("the kernel applies the umask itself (no FUSE_CAP_DONT_MASK)");
    /* suid/sgid are cleared by the kernel's own setattr, not by us */
    conn->want &= ~(unsigned)FUSE_CAP_HANDLE_KILLPRIV;
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
        conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
        conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    conn->max_write = fs.max_request;
    conn->max_read = fs.max_request;  /* as the max_read mount option says */
    conn->max_readahead = fs.max_request;
}

static void sk_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fuse_entry_param e;
    int err = do_lookup(parent, name, &e);
    if (err)
        fuse_reply_err(req, err);
    else
        fuse_reply_entry(req, &e);
}

static void sk_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    forget_one(ino, nlookup);
    fuse_reply_none(req);
}

static void sk_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
    for (size_t i = 0; i < count; i++)
        forget_one(forgets[i].ino, forgets[i].nlookup);
    fuse_reply_none(req);
}

static void sk_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct stat st;
    if (fstatat(get_inode(ino)->fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
        fuse_reply_err(req, errno);
        return;
    }
    fix_attr(&st);
    fuse_reply_attr(req, &st, fs.cfg.attr_timeout);
}

/* The caller's groups include gid (for the set-group-id rules). */
static bool caller_in_group(fuse_req_t req, gid_t gid)
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

/* Truncate the file (MDT inode open as `fd`) to `size`: objects shrink, the MDT inode takes
 * the size. Caller holds the inode lock. */
static int truncate_locked(struct sk_inode *in, int fd, off_t size)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (size < st.st_size) {
        char *raw;
        size_t len;
        int rc = read_lov_fd(fd, &raw, &len);
        if (rc < 0)
            return rc;
        if (raw) {
            struct sk_lov lov;
            if ((rc = parse_lov(raw, len, &lov, in)) < 0) {
                free(raw);
                return rc;
            }
            bool *ok = calloc(lov.ncomp, sizeof *ok);
            bool *stale = calloc(lov.ncomp, sizeof *stale);
            bool any_stale = false;
            if (!ok || !stale) {
                free(ok);
                free(stale);
                sk_lov_free(&lov);
                free(raw);
                return -ENOMEM;
            }
            for (uint32_t i = 0; i < lov.ncomp; i++) {
                const struct sk_comp *c = &lov.comps[i];
                ok[i] = c->init && !c->stale;
                if (!c->init)
                    continue;
                for (uint32_t j = 0; j < c->count; j++) {
                    uint64_t keep = sk_comp_object_size(c, j, (uint64_t)size);
                    int ofd = open_object(&c->objs[j], O_WRONLY);
                    struct stat ost;
                    if (ofd >= 0 && fstat(ofd, &ost) == 0 &&
                        ((uint64_t)ost.st_size <= keep || ftruncate(ofd, (off_t)keep) == 0)) {
                        close(ofd);
                        continue;
                    }
                    if (ofd >= 0)
                        close(ofd);
                    ok[i] = false;
                    if (!c->stale)
                        stale[i] = any_stale = true;
                }
            }
            rc = 0;
            if (any_stale) {
                if (!some_mirror_covers(&lov, ok, (uint64_t)size, (uint64_t)st.st_size)) {
                    logmsg("MDT inode %ju: truncate: no mirror could be shrunk",
                           (uintmax_t)in->ino);
                    rc = -EIO;
                } else {
                    struct sk_view v = {.raw = raw, .rawlen = len};
                    mark_stale(fd, &v, stale, in);
                }
            }
            free(ok);
            free(stale);
            sk_lov_free(&lov);
            free(raw);
            if (rc < 0)
                return rc;
        }
    }
    if (ftruncate(fd, size) < 0)
        return -errno;
    return 0;
}

/* The MDT inode of `in` opened O_RDWR (root opens any file). */
static int open_mdt(struct sk_inode *in)
{
    char path[64];
    procpath(in->fd, path);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

static int chown_objects(struct sk_inode *in, uid_t uid, gid_t gid, mode_t mode, bool set_mode)
{
    char path[64], *raw;
    size_t len;
    struct sk_lov lov;
    procpath(in->fd, path);
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
            if ((uid != (uid_t)-1 || gid != (gid_t)-1) && fchown(ofd, uid, gid) < 0)
                logmsg("object %s: chown: %s", lov.comps[i].objs[j].id, strerror(errno));
            if (set_mode && fchmod(ofd, (mode & 0666) | 0600) < 0)
                logmsg("object %s: chmod: %s", lov.comps[i].objs[j].id, strerror(errno));
            close(ofd);
        }
    sk_lov_free(&lov);
    free(raw);
    return 0;
}

static void sk_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
                       struct fuse_file_info *fi)
{
    struct sk_inode *in = get_inode(ino);
    char path[64];
    int rc = 0;
    procpath(in->fd, path);
    if (valid & FUSE_SET_ATTR_MODE) {
        if (in->type == S_IFLNK) {
            rc = -EOPNOTSUPP;
            goto out;
        }
        if (chmod(path, attr->st_mode & 07777) < 0) {
            rc = -errno;
            goto out;
        }
    }
    if (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
        uid_t uid = valid & FUSE_SET_ATTR_UID ? attr->st_uid : (uid_t)-1;
        gid_t gid = valid & FUSE_SET_ATTR_GID ? attr->st_gid : (gid_t)-1;
        if (fchownat(in->fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
            rc = -errno;
            goto out;
        }
    }
    if ((valid & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) && is_regular(in))
        chown_objects(in, valid & FUSE_SET_ATTR_UID ? attr->st_uid : (uid_t)-1,
                      valid & FUSE_SET_ATTR_GID ? attr->st_gid : (gid_t)-1, attr->st_mode,
                      valid & FUSE_SET_ATTR_MODE);
    if (valid & FUSE_SET_ATTR_SIZE) {
        if (!is_regular(in)) {
            rc = in->type == S_IFDIR ? -EISDIR : -EINVAL;
            goto out;
        }
        int fd = fi ? ((struct sk_file *)(uintptr_t)fi->fh)->fd : open_mdt(in);
        if (fd < 0) {
            rc = fd;
            goto out;
        }
        pthread_mutex_lock(&in->lock);
        rc = truncate_locked(in, fd, attr->st_size);
        pthread_mutex_unlock(&in->lock);
        if (!fi)
            close(fd);
        if (rc < 0)
            goto out;
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
        if (utimensat(in->fd, "", tv, AT_EMPTY_PATH) < 0 &&
            (errno != EINVAL || utimensat(AT_FDCWD, path, tv, 0) < 0)) {
            rc = -errno;
            goto out;
        }
    }
out:
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        sk_getattr(req, ino, fi);
}

/* Owner and group of a new inode: the caller's, the group of a set-group-id parent. */
static void new_owner(fuse_req_t req, int pfd, uid_t *uid, gid_t *gid, bool *sgid_parent)
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

static mode_t masked(fuse_req_t req, mode_t mode)
{
    return mode & ~(fuse_req_ctx(req)->umask & 0777);
}

/* A new regular file `name` in `parent`, open O_RDWR in *fdp, with its layout. */
static int make_regular(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                        bool exclusive, int *fdp)
{
    int pfd = get_inode(parent)->fd;
    uid_t uid;
    gid_t gid;
    bool sgid_parent;
    new_owner(req, pfd, &uid, &gid, &sgid_parent);
    mode = masked(req, mode) & 07777;
    if ((mode & S_ISGID) && !caller_in_group(req, gid))
        mode &= ~(mode_t)S_ISGID;
    int fd = openat(pfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (fchown(fd, uid, gid) < 0 || fchmod(fd, mode) < 0)
        rc = -errno;
    if (!rc)
        rc = assign_layout(pfd, fd, uid, gid, mode);
    if (rc < 0) {
        close(fd);
        unlinkat(pfd, name, 0);
        return rc;
    }
    (void)exclusive;
    *fdp = fd;
    return 0;
}

static int file_open(struct sk_inode *in, int fd, int flags, struct fuse_file_info *fi)
{
    struct sk_file *fh = calloc(1, sizeof *fh);
    if (!fh) {
        close(fd);
        return -ENOMEM;
    }
    fh->inode = in;
    fh->fd = fd;
    fh->writable = (flags & O_ACCMODE) != O_RDONLY;
    fh->append = (flags & O_APPEND) != 0;
    pthread_mutex_init(&fh->lock, NULL);
    pthread_mutex_lock(&fs.table_lock);
    in->nopen++;
    pthread_mutex_unlock(&fs.table_lock);
    fi->fh = (uint64_t)(uintptr_t)fh;
    fi->keep_cache = 0;
    return 0;
}

static void file_close(struct sk_file *fh)
{
    struct sk_inode *in = fh->inode;
    view_put(fh->view);
    close(fh->fd);
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

static void sk_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    struct fuse_entry_param e;
    int fd = -1;
    int rc = make_regular(req, parent, name, mode, fi->flags & O_EXCL, &fd);
    if (rc == -EEXIST && !(fi->flags & O_EXCL)) {
        /* created meanwhile by someone else: open it as it is */
        int err = do_lookup(parent, name, &e);
        if (err) {
            fuse_reply_err(req, err);
            return;
        }
        struct sk_inode *in = get_inode(e.ino);
        if (!is_regular(in)) {
            forget_one(e.ino, 1);
            fuse_reply_err(req, in->type == S_IFDIR ? EISDIR : EEXIST);
            return;
        }
        fd = open_mdt(in);
        if (fd < 0 || (rc = file_open(in, fd, fi->flags, fi)) < 0) {
            forget_one(e.ino, 1);
            fuse_reply_err(req, fd < 0 ? -fd : -rc);
            return;
        }
        fuse_reply_create(req, &e, fi);
        return;
    }
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    int err = do_lookup(parent, name, &e);
    if (err) {
        close(fd);
        fuse_reply_err(req, err);
        return;
    }
    if ((rc = file_open(get_inode(e.ino), fd, fi->flags, fi)) < 0) {
        forget_one(e.ino, 1);
        fuse_reply_err(req, -rc);
        return;
    }
    if (fuse_reply_create(req, &e, fi) == -ENOENT) {
        /* the caller was interrupted: nobody holds this handle */
        file_close((struct sk_file *)(uintptr_t)fi->fh);
        forget_one(e.ino, 1);
    }
}

static void sk_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct sk_inode *in = get_inode(ino);
    if (!is_regular(in)) {
        fuse_reply_err(req, in->type == S_IFDIR ? EISDIR : ENXIO);
        return;
    }
    int fd = open_mdt(in);
    if (fd < 0) {
        fuse_reply_err(req, -fd);
        return;
    }
    int rc = 0;
    bool writable = (fi->flags & O_ACCMODE) != O_RDONLY;
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
        /* made on the MDT without one (mknod by the store, or a crash after the create):
         * an empty file gets its layout now */
        char ppath[PATH_MAX];
        char self[64];
        procpath(in->fd, self);
        ssize_t n = readlink(self, ppath, sizeof ppath - 1);
        int pfd = -1;
        if (n > 0) {
            ppath[n] = '\0';
            char *slash = strrchr(ppath, '/');
            if (slash && slash != ppath)
                *slash = '\0';
            pfd = open(ppath, O_PATH | O_DIRECTORY | O_CLOEXEC);
        }
        rc = assign_layout(pfd >= 0 ? pfd : fs.root.fd, fd, st.st_uid, st.st_gid, st.st_mode);
        if (pfd >= 0)
            close(pfd);
    }
    free(raw);
    if (!rc && writable && (fi->flags & O_TRUNC))
        rc = truncate_locked(in, fd, 0);
    pthread_mutex_unlock(&in->lock);
    if (rc < 0 || (rc = file_open(in, fd, fi->flags, fi)) < 0) {
        if (rc != -ENOMEM)
            close(fd);
        fuse_reply_err(req, -rc);
        return;
    }
    if (fuse_reply_open(req, fi) == -ENOENT)
        file_close((struct sk_file *)(uintptr_t)fi->fh);
}

static void sk_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    file_close((struct sk_file *)(uintptr_t)fi->fh);
    fuse_reply_err(req, 0);
}

static void sk_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    (void)fi;
    fuse_reply_err(req, 0);
}

static void sk_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
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

/* The file's name as a scratch path (for recoveryd), or false if it has none. */
static bool scratch_path(struct sk_inode *in, char *out, size_t outlen)
{
    char self[64], target[PATH_MAX];
    procpath(in->fd, self);
    ssize_t n = readlink(self, target, sizeof target - 1);
    if (n <= 0)
        return false;
    target[n] = '\0';
    if (n > 10 && strcmp(target + n - 10, " (deleted)") == 0)
        return false;
    if (strncmp(target, fs.mdt_real, fs.mdt_real_len) != 0 ||
        (target[fs.mdt_real_len] != '/' && target[fs.mdt_real_len] != '\0'))
        return false;
    snprintf(out, outlen, "%s%s", fs.cfg.scratch_root, target + fs.mdt_real_len);
    return true;
}

/* Fill buf (file bytes [base, end)) from *cur on; NEED_RECOVERY with *ost when a stripe no
 * mirror can serve is reached. */
static int read_pieces(struct sk_view *v, char *buf, uint64_t base, uint64_t *cur, uint64_t end,
                       uint32_t *ost_out, const struct sk_inode *in)
{
    const struct sk_lov *lov = &v->lov;
    bool excluded[64] = {false};
    while (*cur < end) {
        uint64_t at = *cur;
        bool covered = false, served = false;
        uint32_t want = UINT32_MAX;
        for (uint32_t k = 0; k < lov->ncomp && !served; k++) {
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
            uint64_t n = piece_end - at, got = 0;
            off_t oo = (off_t)sk_comp_object_offset(c, at);
            char *dst = buf + (at - base);
            bool failed = false;
            while (got < n) {
                ssize_t r = pread(fd, dst + got, n - got, oo + (off_t)got);
                if (r > 0) {
                    got += (uint64_t)r;
                } else if (r == 0) {
                    memset(dst + got, 0, n - got);  /* a hole at the object's end */
                    got = n;
                } else if (errno != EINTR) {
                    logmsg("MDT inode %ju: OST %u object %s: read: %s", (uintmax_t)in->ino, ost,
                           c->objs[pos].id, strerror(errno));
                    failed = true;
                    break;
                }
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

static double monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sk_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
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
    double deadline = 0;
    bool reported = false;
    int rc;
    for (;;) {
        struct sk_view *v;
        uint32_t ost = UINT32_MAX;
        if ((rc = view_get(fh, &v)) < 0)
            break;
        if (!v->raw) {
            /* no layout: an empty file, or bytes beyond what any object holds */
            memset(buf + (cur - (uint64_t)off), 0, end - cur);
            view_put(v);
            rc = 0;
            break;
        }
        rc = read_pieces(v, buf, (uint64_t)off, &cur, end, &ost, fh->inode);
        view_put(v);
        if (rc != NEED_RECOVERY)
            break;
        /* a stripe no mirror holds: wait for recoveryd (or the OST's return), as Lustre waits
         * for its target, then read the layout again */
        double now = monotonic();
        if (deadline == 0) {
            deadline = now + fs.cfg.recovery_timeout;
            logmsg("MDT inode %ju: offset %" PRIu64 " is on failed OST %u and no mirror holds it:"
                   " waiting up to %gs for recovery", (uintmax_t)fh->inode->ino, cur, ost,
                   fs.cfg.recovery_timeout);
        }
        if (now >= deadline || fuse_req_interrupted(req) || fuse_session_exited(fs.se)) {
            logmsg("MDT inode %ju: offset %" PRIu64 " not recovered: EIO",
                   (uintmax_t)fh->inode->ino, cur);
            rc = -EIO;
            break;
        }
        double slice = deadline - now < RECOVERY_SLICE ? deadline - now : RECOVERY_SLICE;
        char path[PATH_MAX];
        if (fs.cfg.recover && scratch_path(fh->inode, path, sizeof path)) {
            fs.cfg.recover(fs.cfg.recover_ctx, path, ost, slice, !reported);
            reported = true;
        } else {
            struct timespec ts = {0, 200 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        view_reset(fh);  /* open the objects again: a rebuild, or the OST back */
    }
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_buf(req, buf, end - (uint64_t)off);
    free(buf);
}

static void sk_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    (void)ino;
    struct sk_file *fh = (struct sk_file *)(uintptr_t)fi->fh;
    struct sk_inode *in = fh->inode;
    struct sk_view *v = NULL;
    bool *ok = NULL, *stale = NULL;
    bool any_stale = false;
    int rc;
    pthread_mutex_lock(&in->lock);
    if (fh->append) {
        struct stat st;
        if (fstat(fh->fd, &st) < 0) {
            rc = -errno;
            goto out;
        }
        off = st.st_size;
    } else {
        pthread_mutex_unlock(&in->lock);
    }
    if ((rc = view_get(fh, &v)) < 0)
        goto out;
    if (!v->raw) {
        logmsg("MDT inode %ju: write to a file without a layout", (uintmax_t)in->ino);
        rc = -EIO;
        goto out;
    }
    const struct sk_lov *lov = &v->lov;
    uint64_t lo = (uint64_t)off, hi = (uint64_t)off + size;
    ok = calloc(lov->ncomp, sizeof *ok);
    stale = calloc(lov->ncomp, sizeof *stale);
    if (!ok || !stale) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t k = 0; k < lov->ncomp; k++) {
        const struct sk_comp *c = &lov->comps[k];
        uint64_t a = c->start > lo ? c->start : lo;
        uint64_t b = c->end < hi ? c->end : hi;
        if (!c->init || c->stale || b <= a)
            continue;
        ok[k] = true;
        for (uint64_t at = a; at < b && ok[k];) {
            uint32_t pos = sk_comp_position(c, at);
            uint64_t piece_end = (at / c->stripe_size + 1) * c->stripe_size;
            if (piece_end > b)
                piece_end = b;
            int fd = v->fds[k][pos];
            if (fd < 0 || ost_failed(c->objs[pos].ost)) {
                ok[k] = false;
                break;
            }
            off_t oo = (off_t)sk_comp_object_offset(c, at);
            const char *src = data + (at - lo);
            uint64_t n = piece_end - at, put = 0;
            while (put < n) {
                ssize_t w = pwrite(fd, src + put, n - put, oo + (off_t)put);
                if (w > 0) {
                    put += (uint64_t)w;
                } else if (w < 0 && errno != EINTR) {
                    logmsg("MDT inode %ju: OST %u object %s: write: %s", (uintmax_t)in->ino,
                           c->objs[pos].ost, c->objs[pos].id, strerror(errno));
                    if (errno == ENOSPC || errno == EDQUOT || errno == EFBIG) {
                        rc = -errno;
                        goto out;
                    }
                    ok[k] = false;
                    break;
                }
            }
            at = piece_end;
        }
        if (!ok[k])
            stale[k] = any_stale = true;
    }
    if (!some_mirror_covers(lov, ok, lo, hi)) {
        logmsg("MDT inode %ju: write at %jd: no mirror could take it", (uintmax_t)in->ino,
               (intmax_t)off);
        rc = -EIO;
        goto out;
    }
    if (!fh->append)
        pthread_mutex_lock(&in->lock);
    if (any_stale)
        mark_stale(fh->fd, v, stale, in);
    struct stat st;
    if (fstat(fh->fd, &st) < 0)
        rc = -errno;
    else if ((uint64_t)st.st_size < hi)
        rc = ftruncate(fh->fd, (off_t)hi) < 0 ? -errno : 0;
    else {
        struct timespec tv[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
        rc = futimens(fh->fd, tv) < 0 ? -errno : 0;
    }
    pthread_mutex_unlock(&in->lock);
    free(ok);
    free(stale);
    view_put(v);
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_write(req, size);
    return;
out:
    if (fh->append)
        pthread_mutex_unlock(&in->lock);
    free(ok);
    free(stale);
    view_put(v);
    fuse_reply_err(req, -rc);
}

/* -- the namespace ----------------------------------------------------------------------------- */

static void reply_new_entry(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fuse_entry_param e;
    int err = do_lookup(parent, name, &e);
    if (err)
        fuse_reply_err(req, err);
    else
        fuse_reply_entry(req, &e);
}

static void sk_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                     dev_t rdev)
{
    int pfd = get_inode(parent)->fd;
    if (S_ISREG(mode)) {
        int fd;
        int rc = make_regular(req, parent, name, mode, true, &fd);
        if (rc < 0) {
            fuse_reply_err(req, -rc);
            return;
        }
        close(fd);
        reply_new_entry(req, parent, name);
        return;
    }
    uid_t uid;
    gid_t gid;
    bool sgid;
    new_owner(req, pfd, &uid, &gid, &sgid);
    if (mknodat(pfd, name, (mode & S_IFMT) | masked(req, mode & 07777), rdev) < 0) {
        fuse_reply_err(req, errno);
        return;
    }
    if (fchownat(pfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0 ||
        fchmodat(pfd, name, masked(req, mode & 07777), 0) < 0) {
        int err = errno;
        unlinkat(pfd, name, 0);
        fuse_reply_err(req, err);
        return;
    }
    reply_new_entry(req, parent, name);
}

static void sk_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    int pfd = get_inode(parent)->fd;
    uid_t uid;
    gid_t gid;
    bool sgid;
    new_owner(req, pfd, &uid, &gid, &sgid);
    if (mkdirat(pfd, name, masked(req, mode) & 07777) < 0) {
        fuse_reply_err(req, errno);
        return;
    }
    int dfd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fchownat(dfd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
        int err = errno;
        if (dfd >= 0)
            close(dfd);
        unlinkat(pfd, name, AT_REMOVEDIR);
        fuse_reply_err(req, err);
        return;
    }
    /* a new directory inherits its parent's default layout */
    char ppath[64], dpath[64], buf[512];
    procpath(pfd, ppath);
    procpath(dfd, dpath);
    ssize_t n = getxattr(ppath, SK_DIRLOV_XATTR, buf, sizeof buf);
    if (n >= 0 && setxattr(dpath, SK_DIRLOV_XATTR, buf, (size_t)n, 0) < 0)
        logmsg("mkdir %s: default layout not inherited: %s", name, strerror(errno));
    close(dfd);
    reply_new_entry(req, parent, name);
}

static void sk_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    int pfd = get_inode(parent)->fd;
    uid_t uid;
    gid_t gid;
    bool sgid;
    new_owner(req, pfd, &uid, &gid, &sgid);
    if (symlinkat(link, pfd, name) < 0) {
        fuse_reply_err(req, errno);
        return;
    }
    if (fchownat(pfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0) {
        int err = errno;
        unlinkat(pfd, name, 0);
        fuse_reply_err(req, err);
        return;
    }
    reply_new_entry(req, parent, name);
}

static void sk_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char *name)
{
    char path[64];
    procpath(get_inode(ino)->fd, path);
    if (linkat(AT_FDCWD, path, get_inode(parent)->fd, name, AT_SYMLINK_FOLLOW) < 0) {
        fuse_reply_err(req, errno);
        return;
    }
    reply_new_entry(req, parent, name);
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

static void sk_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    int pfd = get_inode(parent)->fd;
    int vfd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (unlinkat(pfd, name, 0) < 0) {
        int err = errno;
        if (vfd >= 0)
            close(vfd);
        fuse_reply_err(req, err);
        return;
    }
    if (vfd >= 0) {
        lost_a_name(vfd);
        close(vfd);
    }
    fuse_reply_err(req, 0);
}

static void sk_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    fuse_reply_err(req, unlinkat(get_inode(parent)->fd, name, AT_REMOVEDIR) < 0 ? errno : 0);
}

static void sk_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
    int npfd = get_inode(newparent)->fd;
    int vfd = -1;
    if (!(flags & RENAME_EXCHANGE))
        vfd = openat(npfd, newname, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (renameat2(get_inode(parent)->fd, name, npfd, newname, flags) < 0) {
        int err = errno;
        if (vfd >= 0)
            close(vfd);
        fuse_reply_err(req, err);
        return;
    }
    if (vfd >= 0) {
        lost_a_name(vfd);
        close(vfd);
    }
    fuse_reply_err(req, 0);
}

static void sk_readlink(fuse_req_t req, fuse_ino_t ino)
{
    char buf[PATH_MAX + 1];
    ssize_t n = readlinkat(get_inode(ino)->fd, "", buf, sizeof buf);
    if (n < 0) {
        fuse_reply_err(req, errno);
        return;
    }
    if (n >= (ssize_t)sizeof buf) {
        fuse_reply_err(req, ENAMETOOLONG);
        return;
    }
    buf[n] = '\0';
    fuse_reply_readlink(req, buf);
}

static void sk_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct sk_dir *d = calloc(1, sizeof *d);
    if (!d) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    int fd = openat(get_inode(ino)->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || !(d->dp = fdopendir(fd))) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        free(d);
        fuse_reply_err(req, err);
        return;
    }
    fi->fh = (uint64_t)(uintptr_t)d;
    if (fuse_reply_open(req, fi) == -ENOENT) {
        closedir(d->dp);
        free(d);
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

static void sk_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
                       struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, offset, fi, false);
}

static void sk_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
                           struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, offset, fi, true);
}

static void sk_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    struct sk_dir *d = (struct sk_dir *)(uintptr_t)fi->fh;
    closedir(d->dp);
    free(d);
    fuse_reply_err(req, 0);
}

static void sk_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    (void)ino;
    int fd = dirfd(((struct sk_dir *)(uintptr_t)fi->fh)->dp);
    fuse_reply_err(req, (datasync ? fdatasync(fd) : fsync(fd)) < 0 ? errno : 0);
}

static void sk_statfs(fuse_req_t req, fuse_ino_t ino)
{
    (void)ino;
    struct statvfs sv;
    if (fstatvfs(fs.root.fd, &sv) < 0)
        fuse_reply_err(req, errno);
    else
        fuse_reply_statfs(req, &sv);
}

static bool reserved_xattr(const char *name)
{
    return strncmp(name, SK_XATTR_PREFIX, strlen(SK_XATTR_PREFIX)) == 0;
}

static void sk_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
    if (reserved_xattr(name)) {
        fuse_reply_err(req, EPERM);  /* layouts are the store's and the mount's only */
        return;
    }
    char path[64];
    procpath(get_inode(ino)->fd, path);
    fuse_reply_err(req, setxattr(path, name, value, size, flags) < 0 ? errno : 0);
}

static void sk_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    char path[64];
    procpath(get_inode(ino)->fd, path);
    if (size == 0) {
        ssize_t n = getxattr(path, name, NULL, 0);
        if (n < 0)
            fuse_reply_err(req, errno);
        else
            fuse_reply_xattr(req, (size_t)n);
        return;
    }
    char *buf = malloc(size);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    ssize_t n = getxattr(path, name, buf, size);
    if (n < 0)
        fuse_reply_err(req, errno);
    else
        fuse_reply_buf(req, buf, (size_t)n);
    free(buf);
}

static void sk_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    char path[64];
    procpath(get_inode(ino)->fd, path);
    if (size == 0) {
        ssize_t n = listxattr(path, NULL, 0);
        if (n < 0)
            fuse_reply_err(req, errno);
        else
            fuse_reply_xattr(req, (size_t)n);
        return;
    }
    char *buf = malloc(size);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    ssize_t n = listxattr(path, buf, size);
    if (n < 0)
        fuse_reply_err(req, errno);
    else
        fuse_reply_buf(req, buf, (size_t)n);
    free(buf);
}

static void sk_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    if (reserved_xattr(name)) {
        fuse_reply_err(req, EPERM);
        return;
    }
    char path[64];
    procpath(get_inode(ino)->fd, path);
    fuse_reply_err(req, removexattr(path, name) < 0 ? errno : 0);
}

static const struct fuse_lowlevel_ops ops = {
    .init = sk_init,
    .lookup = sk_lookup,
    .forget = sk_forget,
    .forget_multi = sk_forget_multi,
    .getattr = sk_getattr,
    .setattr = sk_setattr,
    .readlink = sk_readlink,
    .mknod = sk_mknod,
    .mkdir = sk_mkdir,
    .unlink = sk_unlink,
    .rmdir = sk_rmdir,
    .symlink = sk_symlink,
    .rename = sk_rename,
    .link = sk_link,
    .open = sk_open,
    .read = sk_read,
    .write = sk_write,
    .flush = sk_flush,
    .release = sk_release,
    .fsync = sk_fsync,
    .opendir = sk_opendir,
    .readdir = sk_readdir,
    .readdirplus = sk_readdirplus,
    .releasedir = sk_releasedir,
    .fsyncdir = sk_fsyncdir,
    .statfs = sk_statfs,
    .setxattr = sk_setxattr,
    .getxattr = sk_getxattr,
    .listxattr = sk_listxattr,
    .removexattr = sk_removexattr,
    .create = sk_create,
};

/* -- the session ------------------------------------------------------------------------------ */

static void free_table(void)
{
    for (size_t b = 0; b < NBUCKETS; b++) {
        struct sk_inode *in = fs.buckets[b];
        while (in) {
            struct sk_inode *next = in->next;
            close(in->fd);
            pthread_mutex_destroy(&in->lock);
            free(in->doomed);
            free(in);
            in = next;
        }
    }
    free(fs.buckets);
    fs.buckets = NULL;
}

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

int skfs_run(const struct skfs_config *config, char *err, size_t errlen)
{
    int rc = 0;
    memset(&fs, 0, sizeof fs);
    fs.cfg = *config;
    fs.max_request = config->max_request > (1u << 20) ? (1u << 20) : config->max_request;
    fs.inotify_fd = fs.stop_pipe[0] = fs.stop_pipe[1] = -1;
    fs.root.fd = fs.store_fd = -1;
    pthread_mutex_init(&fs.table_lock, NULL);
    if (!(fs.buckets = calloc(NBUCKETS, sizeof *fs.buckets)))
        return fail(err, errlen, -ENOMEM, "out of memory");
    if (!realpath(config->mdt, fs.mdt_real)) {
        rc = fail(err, errlen, -errno, "%s: %s", config->mdt, strerror(errno));
        goto out;
    }
    fs.mdt_real_len = strlen(fs.mdt_real);
    fs.root.fd = open(config->mdt, O_PATH | O_DIRECTORY | O_CLOEXEC);
    fs.store_fd = open(config->store_root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fs.root.fd < 0 || fs.store_fd < 0) {
        rc = fail(err, errlen, -errno, "%s: %s", fs.root.fd < 0 ? config->mdt : config->store_root,
                  strerror(errno));
        goto out;
    }
    struct stat st;
    fstatat(fs.root.fd, "", &st, AT_EMPTY_PATH);
    fs.root.dev = st.st_dev;
    fs.root.ino = st.st_ino;
    fs.root.type = S_IFDIR;
    fs.root.nlookup = 2;
    pthread_mutex_init(&fs.root.lock, NULL);

    fs.inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fs.inotify_fd < 0 || pipe2(fs.stop_pipe, O_CLOEXEC) < 0 ||
        inotify_add_watch(fs.inotify_fd, config->store_root,
                          IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF |
                          IN_ONLYDIR) < 0) {
        rc = fail(err, errlen, -errno, "watching %s: %s", config->store_root, strerror(errno));
        goto out;
    }
    scan_osts();

    /* the watcher and libfuse's workers take no signals: the session loop's thread does */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_t watcher;
    int prc = pthread_create(&watcher, NULL, watch_osts, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (prc) {
        rc = fail(err, errlen, -prc, "starting the OST watcher: %s", strerror(prc));
        goto out;
    }

    char opts[512];
    snprintf(opts, sizeof opts,
             "allow_other,default_permissions,fsname=scratchkeeper,subtype=scratchkeeper,"
             "max_read=%u", fs.max_request);
    char *argv[] = {"scratchkeeper", "-o", opts, config->debug ? "-d" : NULL, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(config->debug ? 4 : 3, argv);
    fs.se = fuse_session_new(&args, &ops, sizeof ops, NULL);
    if (!fs.se) {
        rc = fail(err, errlen, -EINVAL, "cannot start the FUSE session (options %s)", opts);
        goto stop_watcher;
    }
    /* the default disposition first: fuse_set_signal_handlers leaves a handler it finds */
    struct sigaction dfl = {.sa_handler = SIG_DFL}, saved[3];
    const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++)
        sigaction(sigs[i], &dfl, &saved[i]);
    struct sigaction saved_pipe;
    sigaction(SIGPIPE, NULL, &saved_pipe);
    if (fuse_set_signal_handlers(fs.se) != 0) {
        rc = fail(err, errlen, -EINVAL, "cannot install the signal handlers");
        goto restore;
    }
    if (fuse_session_mount(fs.se, config->mountpoint) != 0) {
        rc = fail(err, errlen, -EIO, "cannot mount on %s (see the messages above)",
                  config->mountpoint);
        fuse_remove_signal_handlers(fs.se);
        goto restore;
    }
    logmsg("%s: serving %s (%u OSTs, %u threads)", config->mountpoint, config->mdt,
           config->ost_count, config->threads);
    struct fuse_loop_config *loop = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(loop, config->threads);
    fuse_loop_cfg_set_idle_threads(loop, config->threads / 2 ? config->threads / 2 : 1);
    fuse_loop_cfg_set_clone_fd(loop, 0);
    int lrc = fuse_session_loop_mt(fs.se, loop);
    fuse_loop_cfg_destroy(loop);
    if (lrc < 0)
        rc = fail(err, errlen, lrc, "the session ended: %s", strerror(-lrc));
    fuse_session_unmount(fs.se);
    fuse_remove_signal_handlers(fs.se);
    logmsg("%s: unmounted", config->mountpoint);
restore:
    for (int i = 0; i < 3; i++)
        sigaction(sigs[i], &saved[i], NULL);
    sigaction(SIGPIPE, &saved_pipe, NULL);
    fuse_session_destroy(fs.se);
    fs.se = NULL;
stop_watcher:
    if (write(fs.stop_pipe[1], "x", 1) != 1)
        logmsg("stopping the OST watcher: %s", strerror(errno));
    pthread_join(watcher, NULL);
out:
    free_table();
    if (fs.inotify_fd >= 0)
        close(fs.inotify_fd);
    for (int i = 0; i < 2; i++)
        if (fs.stop_pipe[i] >= 0)
            close(fs.stop_pipe[i]);
    if (fs.root.fd >= 0)
        close(fs.root.fd);
    if (fs.store_fd >= 0)
        close(fs.store_fd);
    return rc;
}
