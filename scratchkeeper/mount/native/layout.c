/* The scratch mount's layouts and objects (docs/mount.rst): which OSTs are failed (rescanned on
 * every inotify event on store_root and every 2 s), objects and their names, the layout
 * attribute read and parsed, the views open files read and write through, new files'
 * layouts, stale marks. */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314

#include "skfs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

bool ost_failed(uint32_t ost)
{
    return atomic_load_explicit(&fs.failed[ost], memory_order_relaxed) != 0;
}

void scan_osts(void)
{
    for (unsigned i = 0; i < fs.cfg.ost_count && i <= SK_MAX_OST; i++) {
        char name[32];
        struct stat st;
        snprintf(name, sizeof name, "ost%04u", i);
        bool down = fstatat(fs.store_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                    !S_ISDIR(st.st_mode);
        if (atomic_exchange(&fs.failed[i], down) != down) {
            logmsg("OST %u is %s", i, down ? "failed: not read any more" : "back");
            if (!down)
                doomed_sweep((int)i);
        }
    }
}

/* Every OST_RESCAN_MS the OSTs are scanned whatever inotify said: on a site of many hosts the
 * store's backing is shared, and a failure another host's server made (or a file system whose
 * changes inotify does not see, as over NFS) must reach this mount too (docs/topology.rst). */
#define OST_RESCAN_MS 2000

void *watch_osts(void *arg)
{
    (void)arg;
    char events[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    struct pollfd pfd[2] = {{fs.inotify_fd, POLLIN, 0}, {fs.stop_pipe[0], POLLIN, 0}};
    for (;;) {
        int n = poll(pfd, 2, OST_RESCAN_MS);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            logmsg("watching the OSTs: poll: %s", strerror(errno));
            return NULL;
        }
        if (pfd[1].revents)
            return NULL;
        if (n > 0 && pfd[0].revents)
            while (read(fs.inotify_fd, events, sizeof events) > 0)
                ;
        scan_osts();
    }
}

int object_name(char *buf, size_t len, const struct sk_obj *obj)
{
    return snprintf(buf, len, "ost%04u/%s", obj->ost, obj->id);
}

int open_object(const struct sk_obj *obj, int flags)
{
    char name[64];
    if (obj->ost > SK_MAX_OST || ost_failed(obj->ost))
        return -1;
    object_name(name, sizeof name, obj);
    return openat(fs.store_fd, name, flags | O_CLOEXEC | O_NOFOLLOW);
}

/* The layout attribute of an open MDT inode: 0 with *raw malloc'd (NULL if it has none). */
int read_lov_fd(int fd, char **raw, size_t *len)
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
int read_lov_path(const char *path, char **raw, size_t *len)
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

int parse_lov(const char *raw, size_t len, struct sk_lov *lov, const struct sk_inode *in)
{
    char err[200];
    int rc = sk_lov_parse(raw, len, lov, err, sizeof err);
    if (rc == -EIO)
        logmsg("MDT inode %ju: corrupt layout attribute (%s): %s", (uintmax_t)in->ino,
               SK_LOV_XATTR, err);
    return rc;
}

/* -- objects of removed files on failed OSTs ---------------------------------------------- */

/* A file's objects go with its last name and handle, but an object on a failed OST cannot be
 * reached then: it is named in store_root/doomed/ (an empty file NNNN.ID, NNNN the OST) and
 * deleted when its OST is back, by the mount (doomed_sweep, at start and at each return) or by
 * the store's restore-ost, as Lustre's MDS destroys an unlinked file's objects on an OST once
 * it reconnects. Without it a rename over a file, or its unlink, during an outage left the
 * object on the OST for ever. */
#define DOOMED_DIR "doomed"

static bool ost_present(uint32_t ost)
{
    char name[32];
    struct stat st;
    snprintf(name, sizeof name, "ost%04u", ost);
    return fstatat(fs.store_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

static bool object_id_valid(const char *id)
{
    size_t n = strspn(id, "0123456789abcdef");
    return n == SK_OBJID_LEN && id[n] == '\0';
}

/* One name of doomed/ (NNNN.ID): its object deleted, then the name, when the name is of `ost`
 * (every OST that is up when `ost` < 0). Whether it was. */
static bool sweep_one(int dfd, const char *entry, int ost)
{
    char *dot;
    unsigned long index = strtoul(entry, &dot, 10);
    if (dot == entry || *dot != '.' || index > SK_MAX_OST || !object_id_valid(dot + 1) ||
        (ost >= 0 && index != (unsigned long)ost) || ost_failed((uint32_t)index))
        return false;
    char name[64];
    snprintf(name, sizeof name, "ost%04lu/%s", index, dot + 1);
    if (unlinkat(fs.store_fd, name, 0) < 0 &&
        (errno != ENOENT || !ost_present((uint32_t)index))) {
        if (errno != ENOENT)
            logmsg("object %s of a removed file: %s", name, strerror(errno));
        return false;  /* failed again meanwhile: kept for its next return */
    }
    unlinkat(dfd, entry, 0);
    return true;
}

/* Name the object in doomed/ (and delete it at once if its OST is back already, the watcher
 * having swept before the name was there): 0, or -errno (the object is then left). */
static int doom_later(const struct sk_obj *obj)
{
    char name[64];
    snprintf(name, sizeof name, "%04u.%s", obj->ost, obj->id);
    if (mkdirat(fs.store_fd, DOOMED_DIR, 0700) < 0 && errno != EEXIST)
        return -errno;
    int dfd = openat(fs.store_fd, DOOMED_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    int rc = fd < 0 || fsync(dfd) < 0 ? -errno : 0;  /* the name is what must last */
    if (fd >= 0)
        close(fd);
    if (rc == 0)
        sweep_one(dfd, name, (int)obj->ost);
    close(dfd);
    return rc;
}

void doomed_sweep(int ost)
{
    int dfd = openat(fs.store_fd, DOOMED_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return;  /* none ever */
    DIR *dp = fdopendir(dfd);
    if (!dp) {
        close(dfd);
        return;
    }
    unsigned done = 0;
    struct dirent *e;
    while ((e = readdir(dp)))
        done += sweep_one(dirfd(dp), e->d_name, ost);
    closedir(dp);
    if (done)
        logmsg("%u object(s) of removed files deleted from OSTs back", done);
}

/* Delete the objects of a layout (the file's last name and handle are gone); those on failed
 * OSTs once their OST is back. */
void delete_objects(const char *raw, size_t len, ino_t ino)
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
            const struct sk_obj *obj = &lov.comps[i].objs[j];
            char name[64];
            object_name(name, sizeof name, obj);
            if (!ost_failed(obj->ost)) {
                if (unlinkat(fs.store_fd, name, 0) == 0)
                    continue;
                if (errno != ENOENT) {
                    logmsg("deleted MDT inode %ju: object %s left: %s", (uintmax_t)ino, name,
                           strerror(errno));
                    continue;
                }
                if (ost_present(obj->ost))
                    continue;  /* deleted already */
            }
            int rc = doom_later(obj);
            if (rc < 0)
                logmsg("deleted MDT inode %ju: object %s on a failed OST left: %s",
                       (uintmax_t)ino, name, strerror(-rc));
        }
    sk_lov_free(&lov);
}

void view_put(struct sk_view *v)
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
    fds_release(v->charged_to, v->charged);
    sk_lov_free(&v->lov);
    free(v->raw);
    free(v);
}

/* The objects a view of `lov` opens: those of its instantiated components. */
static unsigned objects_to_open(const struct sk_lov *lov)
{
    unsigned n = 0;
    for (uint32_t i = 0; i < lov->ncomp; i++)
        if (lov->comps[i].init)
            n += lov->comps[i].count;
    return n;
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
        /* the objects' descriptors are held as long as the view: the opener's (fds.c) */
        unsigned objects = objects_to_open(&v->lov);
        if ((rc = fds_charge(fh->opener, objects)) < 0) {
            view_put(v);
            return rc;
        }
        v->charged_to = fh->opener;
        v->charged = objects;
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
int view_get(struct sk_file *fh, struct sk_view **out)
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
void view_reset(struct sk_file *fh)
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

const struct skfs_pool *find_pool(const char *name)
{
    for (unsigned i = 0; i < fs.cfg.npools; i++)
        if (strcmp(fs.cfg.pools[i].name, name) == 0)
            return &fs.cfg.pools[i];
    return NULL;
}

static int ascending_unsigned(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return x < y ? -1 : x > y;
}

static bool in_pool(const struct skfs_pool *pool, unsigned ost)
{
    return bsearch(&ost, pool->osts, pool->count, sizeof ost, ascending_unsigned) != NULL;
}

/* A new file's layout in parent directory `pfd` (its dirlov, else the site's defaults):
 * OSTs round-robin among the healthy ones, of the dirlov's pool if it names one. A pool the
 * store does not know (storage.pools changed since) is ignored, as Lustre's allocator does; a
 * pool without a healthy OST is ENOSPC. */
/* The placement callback's OSTs for a new file, checked: distinct, healthy, in the pool. The
 * count, or 0 when the callback declined or answered something unusable. */
static unsigned placed_osts(const char *first_id, int stripe_count, const struct skfs_pool *pool,
                            const char *pool_name, unsigned *out)
{
    if (!fs.cfg.place)
        return 0;
    int n = fs.cfg.place(fs.cfg.place_ctx, first_id, stripe_count, pool ? pool_name : NULL,
                         out, SK_MAX_OST + 1);
    if (n <= 0)
        return 0;
    for (int i = 0; i < n; i++) {
        bool dup = false;
        for (int j = 0; j < i; j++)
            dup |= out[j] == out[i];
        if (dup || out[i] >= fs.cfg.ost_count || ost_failed(out[i]) ||
            (pool && !in_pool(pool, out[i]))) {
            logmsg("placement answered OST %u for a new file: not usable, round-robin instead",
                   out[i]);
            return 0;
        }
    }
    return (unsigned)n;
}

/* A layout of `stripe_count` stripes of `stripe_size` in pool `pool_name` ("" none; one the
 * store does not know is ignored, the message naming `where`). */
static int layout_of(int stripe_count, uint64_t stripe_size, char pool_name[128],
                     const char *where, struct sk_lov *lov, bool *suora)
{
    const struct skfs_pool *pool = NULL;
    if (pool_name[0] && !(pool = find_pool(pool_name))) {
        logmsg("%s: pool %s is not one of the store's, every OST is used", where, pool_name);
        pool_name[0] = '\0';
    }
    unsigned healthy[SK_MAX_OST + 1];
    unsigned nhealthy = 0;
    for (unsigned i = 0; i < fs.cfg.ost_count && i <= SK_MAX_OST; i++)
        if (!ost_failed(i) && (!pool || in_pool(pool, i)))
            healthy[nhealthy++] = i;
    if (nhealthy == 0) {
        logmsg(pool ? "no healthy OST in pool %s for a new file" : "no healthy OST for a new file",
               pool_name);
        return -ENOSPC;
    }
    unsigned count = stripe_count < 0 || (unsigned)stripe_count > nhealthy ?
                     nhealthy : (unsigned)stripe_count;
    char first_id[SK_OBJID_LEN + 1];
    random_id(first_id);
    unsigned *placed = fs.cfg.place ? malloc((SK_MAX_OST + 1) * sizeof *placed) : NULL;
    unsigned nplaced = placed ? placed_osts(first_id, stripe_count, pool, pool_name, placed) : 0;
    *suora = nplaced > 0;
    if (nplaced)
        count = nplaced;
    unsigned start = atomic_fetch_add(&fs.rr, 1) % nhealthy;
    memset(lov, 0, sizeof *lov);
    if (!(lov->comps = calloc(1, sizeof *lov->comps))) {
        free(placed);
        return -ENOMEM;
    }
    lov->ncomp = 1;
    struct sk_comp *c = &lov->comps[0];
    c->end = SK_EOF;
    c->stripe_size = stripe_size;
    strcpy(c->flags, "init");
    strcpy(c->pool, pool ? pool_name : "-");
    c->init = true;
    if (!(c->objs = calloc(count, sizeof *c->objs))) {
        free(placed);
        sk_lov_free(lov);
        return -ENOMEM;
    }
    c->count = count;
    for (unsigned i = 0; i < count; i++) {
        c->objs[i].ost = nplaced ? placed[i] : healthy[(start + i) % nhealthy];
        if (i == 0)
            memcpy(c->objs[i].id, first_id, sizeof first_id);
        else
            random_id(c->objs[i].id);
    }
    free(placed);
    return 0;
}

static int new_layout(int pfd, struct sk_lov *lov, bool *suora)
{
    int stripe_count = fs.cfg.stripe_count;
    uint64_t stripe_size = fs.cfg.stripe_size;
    char path[64], buf[512], pool_name[128] = "", where[96];
    procpath(pfd, path);
    ssize_t n = getxattr(path, SK_DIRLOV_XATTR, buf, sizeof buf);
    if (n >= 0 && sk_dirlov_parse(buf, (size_t)n, &stripe_count, &stripe_size, pool_name) < 0) {
        logmsg("directory %s: corrupt %s, the site's default layout is used", path,
               SK_DIRLOV_XATTR);
        stripe_count = fs.cfg.stripe_count;
        stripe_size = fs.cfg.stripe_size;
        pool_name[0] = '\0';
    }
    snprintf(where, sizeof where, "directory %s", path);
    return layout_of(stripe_count, stripe_size, pool_name, where, lov, suora);
}

/* Create the objects of component `c`, owned by uid:gid, mode 0600; on failure delete those
 * made. 0 or -errno. */
static int make_objects(const struct sk_comp *c, uid_t uid, gid_t gid)
{
    int rc = 0;
    uint32_t made;
    for (made = 0; made < c->count; made++) {
        char name[64];
        object_name(name, sizeof name, &c->objs[made]);
        int ofd = openat(fs.store_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                         0600);
        if (ofd < 0 || fchown(ofd, uid, gid) < 0 || fchmod(ofd, 0600) < 0) {
            rc = -errno;
            if (ofd >= 0) {
                close(ofd);
                made++;  /* created: delete it below */
            }
            break;
        }
        close(ofd);
    }
    if (rc < 0)
        for (uint32_t i = 0; i < made; i++) {
            char name[64];
            object_name(name, sizeof name, &c->objs[i]);
            unlinkat(fs.store_fd, name, 0);
        }
    return rc;
}

/* Give the MDT inode `fd` (a new regular file of uid:gid) a layout: the attribute first, then
 * its objects (created O_EXCL, owned by the file's owner so that the OSTs' file systems charge
 * it, mode 0600 whatever the file's: users reach data through the mount's permission checks
 * only, docs/security.rst). On failure the objects made are deleted and the attribute
 * removed. */
int assign_layout(int pfd, int fd, uid_t uid, gid_t gid)
{
    struct sk_lov lov;
    bool suora = false;
    int rc = new_layout(pfd, &lov, &suora);
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
    if (suora) {
        /* as the store marks the files SUORA placed (storage/local/placement.py): store
         * rebalance looks at these only */
        char mark[16 + SK_OBJID_LEN];
        int n = snprintf(mark, sizeof mark, "suora %s", lov.comps[0].objs[0].id);
        if (fsetxattr(fd, SK_PLACEMENT_XATTR, mark, (size_t)n, XATTR_CREATE) < 0)
            logmsg("%s of a new file: %s", SK_PLACEMENT_XATTR, strerror(errno));
    }
    if ((rc = make_objects(&lov.comps[0], uid, gid)) < 0)
        fremovexattr(fd, SK_LOV_XATTR);
out:
    free(raw);
    sk_lov_free(&lov);
    return rc;
}

/* Lay out the empty regular file `in` (MDT path `path`) anew: `stripe_count` stripes (-1:
 * every healthy OST) of `stripe_size` in pool `pool` (""), as its owner asked with
 * user.scratchkeeper.stripe (lfs setstripe FILE). Under the inode's lock, with no write in
 * flight and the file still empty: the new objects are made (owned by the file's owner), the
 * attribute switched in one setxattr, then the old objects, which hold no byte, deleted (an
 * open handle reads the attribute again at its next request). A crash in between leaves
 * empty objects no layout names, never a file without its objects. 0 or -errno: ENOTEMPTY
 * for a file holding data (as Lustre refuses to lay out a written file), ENOSPC when no OST
 * may take it. Writes hold the same lock, so none is in flight meanwhile. */
int relayout_empty(struct sk_inode *in, const char *path, int stripe_count,
                   uint64_t stripe_size, char pool[128])
{
    struct sk_lov lov;
    bool suora = false;
    char *raw = NULL, *old = NULL;
    size_t len, oldlen = 0;
    struct stat st;
    int rc;
    pthread_mutex_lock(&in->lock);
    if (stat(path, &st) < 0) {
        rc = -errno;
        goto unlock;
    }
    if (!S_ISREG(st.st_mode) || st.st_size != 0) {
        rc = S_ISREG(st.st_mode) ? -ENOTEMPTY : -EINVAL;
        goto unlock;
    }
    if ((rc = read_lov_path(path, &old, &oldlen)) < 0)
        goto unlock;
    char where[96];
    snprintf(where, sizeof where, "MDT inode %ju", (uintmax_t)in->ino);
    if ((rc = layout_of(stripe_count, stripe_size, pool, where, &lov, &suora)) < 0)
        goto unlock;
    if (!(raw = sk_lov_format(&lov, &len))) {
        rc = -ENOMEM;
        goto free_lov;
    }
    if ((rc = make_objects(&lov.comps[0], st.st_uid, st.st_gid)) < 0)
        goto free_lov;
    if (setxattr(path, SK_LOV_XATTR, raw, len, old ? XATTR_REPLACE : XATTR_CREATE) < 0) {
        rc = -errno;
        delete_objects(raw, len, in->ino);
        goto free_lov;
    }
    /* the placement mark names a layout's first object: the old one's is gone */
    if (suora) {
        char mark[16 + SK_OBJID_LEN];
        int n = snprintf(mark, sizeof mark, "suora %s", lov.comps[0].objs[0].id);
        if (setxattr(path, SK_PLACEMENT_XATTR, mark, (size_t)n, 0) < 0)
            logmsg("%s of a laid out file: %s", SK_PLACEMENT_XATTR, strerror(errno));
    } else if (removexattr(path, SK_PLACEMENT_XATTR) < 0 && errno != ENODATA) {
        logmsg("%s of a laid out file: %s", SK_PLACEMENT_XATTR, strerror(errno));
    }
    pthread_mutex_unlock(&in->lock);
    delete_objects(old, oldlen, in->ino);
    free(old);
    free(raw);
    sk_lov_free(&lov);
    return 0;
free_lov:
    sk_lov_free(&lov);
unlock:
    pthread_mutex_unlock(&in->lock);
    free(old);
    free(raw);
    return rc;
}

/* Mark components stale in the layout (their mirror cannot take a write or a truncate), if
 * the layout is still `raw`; before the change goes to the other mirrors, so that a mirror
 * that missed it is never read again. Caller holds the inode lock. 0, -EAGAIN when the layout
 * changed meanwhile (the caller reads it again), or -errno. */
int mark_stale(int fd, const char *raw, size_t rawlen, const bool *stale,
               const struct sk_inode *in)
{
    char *now;
    size_t len;
    int rc = read_lov_fd(fd, &now, &len);
    if (rc < 0)
        return rc;
    if (!now || len != rawlen || memcmp(now, raw, len) != 0) {
        free(now);
        return -EAGAIN;
    }
    free(now);
    struct sk_lov lov;
    if ((rc = parse_lov(raw, rawlen, &lov, in)) < 0)
        return rc;
    for (uint32_t i = 0; i < lov.ncomp; i++)
        if (stale[i] && !lov.comps[i].stale) {
            if (strlen(lov.comps[i].flags) + 7 >= sizeof lov.comps[i].flags) {
                sk_lov_free(&lov);
                return -EIO;
            }
            strcat(lov.comps[i].flags, ",stale");
            lov.comps[i].stale = true;
            logmsg("MDT inode %ju: component %u (mirror %u) is stale: it cannot take a change",
                   (uintmax_t)in->ino, lov.comps[i].id, lov.comps[i].mirror);
        }
    lov.gen++;
    char *text = sk_lov_format(&lov, &len);
    rc = !text ? -ENOMEM : fsetxattr(fd, SK_LOV_XATTR, text, len, XATTR_REPLACE) < 0 ? -errno : 0;
    if (rc < 0)
        logmsg("MDT inode %ju: cannot mark stale components: %s", (uintmax_t)in->ino,
               strerror(-rc));
    free(text);
    sk_lov_free(&lov);
    return rc;
}

/* Whether the components written whole (`ok`) cover [lo, hi) in some mirror. */
bool some_mirror_covers(const struct sk_lov *lov, const bool *ok, uint64_t lo, uint64_t hi)
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
