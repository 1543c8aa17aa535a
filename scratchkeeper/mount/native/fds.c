/* The mount's descriptors (docs/mount.rst "Descriptors"; issue 39): one process serves every
 * user of the node, so its open-file limit is a resource all of them share, and no user may
 * spend another's part of it.
 *
 *   - the limit: the soft RLIMIT_NOFILE is raised to the hard one at start; what follows is
 *     computed from the soft limit as it is at each charge (getrlimit), so an administrator's
 *     prlimit on the running mount takes effect at once;
 *   - a reserve: what was open at start, plus RESERVE_FIXED and RESERVE_PER_THREAD for each
 *     request thread (the descriptors a request opens and closes within itself);
 *   - inodes: the kernel may cache any number of inodes, each an entry of the inode table.
 *     An entry keeps its MDT inode's file handle (name_to_handle_at) and, while it is among
 *     the most recently used, an O_PATH descriptor; at most a quarter of what is left after the
 *     reserve (CACHE_MAX at most) is kept, the least recently used closed first, and a request
 *     on an entry without one opens it again from the handle (open_by_handle_at), as
 *     passthrough_hp does when it must. A descriptor in use by a request is never closed;
 *   - users: the rest is for what users hold open through the mount (an open file's MDT
 *     inode, the objects its reads and writes opened, an open directory), charged to the user
 *     who opened it. A user holds at most 1/USER_SHARES of it: beyond that the user's own open
 *     fails with EMFILE, never another user's; with every share taken, ENFILE.
 *
 * The counters are the root's read-only attribute user.scratchkeeper.descriptors, each user
 * seeing their own count.
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314

#include "skfs_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define RESERVE_FIXED 64       /* logs, the OST watcher, /dev/fuse, the Python side's own */
/* A request's own: the inodes it uses beyond the cache's bound (a rename: both directories and
 * the target), a lookup's new descriptor, an object a new layout opens or a growing file has
 * cut to its end (one at a time), the Python side's connection to recoveryd; 16 leaves room.
 * A truncate holds every object it cuts at once: those count against its caller. */
#define RESERVE_PER_THREAD 16
#define CACHE_MIN 16
#define CACHE_MAX 65536        /* each pins an MDT dentry and inode (~1 KiB of kernel memory) */
#define USER_SHARES 8          /* a user holds at most 1/8 of the users' part */
#define UID_BUCKETS 256

struct uid_use {
    uid_t uid;
    unsigned long held;
    struct uid_use *next;
};

static struct {
    pthread_mutex_t lock;       /* the cache's list and counts, every entry's fd and fd_users */
    struct sk_inode *newest, *oldest;
    unsigned long cached;       /* entries with a descriptor (the root's not counted) */
    unsigned long cache_bound;  /* the bound as the last trim computed it */
    unsigned long reserve;
    int handle_dir;             /* the MDT opened O_RDONLY: open_by_handle_at's mount_fd */
    pthread_mutex_t users_lock;
    unsigned long users_held;
    unsigned long refused_share, refused_pool;
    struct uid_use *uids[UID_BUCKETS];
} fds = {.lock = PTHREAD_MUTEX_INITIALIZER, .users_lock = PTHREAD_MUTEX_INITIALIZER,
         .handle_dir = -1};

struct budget {
    unsigned long limit, cache, users, share;
};

static struct budget budget_now(void)
{
    struct rlimit rl;
    struct budget b = {0};
    b.limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ?
              (unsigned long)rl.rlim_cur : 1UL << 20;
    unsigned long left = b.limit > fds.reserve ? b.limit - fds.reserve : 0;
    b.cache = left / 4;
    if (b.cache < CACHE_MIN)
        b.cache = CACHE_MIN;
    if (b.cache > CACHE_MAX)
        b.cache = CACHE_MAX;
    b.users = left > b.cache ? left - b.cache : 0;
    b.share = b.users / USER_SHARES;
    return b;
}

static unsigned long open_now(void)
{
    DIR *d = opendir("/proc/self/fd");
    unsigned long n = 0;
    if (!d)
        return 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

int fds_start(const struct skfs_config *cfg, char *err, size_t errlen)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            logmsg("open files: the soft limit stays %ju: %s", (uintmax_t)was, strerror(errno));
    }
    fds.handle_dir = open(cfg->mdt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fds.handle_dir < 0) {
        snprintf(err, errlen, "%s: %s", cfg->mdt, strerror(errno));
        return -errno;
    }
    struct file_handle *h = handle_of(fds.handle_dir);
    if (!h) {
        int e = errno;
        snprintf(err, errlen, "%s: its file system gives no file handles (name_to_handle_at: "
                 "%s); the mount needs them to bound its descriptors", cfg->mdt, strerror(e));
        return -e;
    }
    free(h);
    fds.reserve = open_now() + RESERVE_FIXED + RESERVE_PER_THREAD * (unsigned long)cfg->threads;
    struct budget b = budget_now();
    fds.cache_bound = b.cache;
    logmsg("open files: limit %lu, %lu reserved, %lu for cached inodes, %lu for users' open "
           "files (%lu each at most)", b.limit, fds.reserve, b.cache, b.users, b.share);
    if (b.share == 0) {
        snprintf(err, errlen, "the open-file limit %lu leaves no room for users' files (%lu "
                 "reserved for %u threads): raise LimitNOFILE", b.limit, fds.reserve,
                 cfg->threads);
        return -EMFILE;
    }
    return 0;
}

void fds_stop(void)
{
    if (fds.handle_dir >= 0)
        close(fds.handle_dir);
    fds.handle_dir = -1;
    for (size_t i = 0; i < UID_BUCKETS; i++)
        while (fds.uids[i]) {
            struct uid_use *u = fds.uids[i];
            fds.uids[i] = u->next;
            free(u);
        }
    fds.users_held = fds.refused_share = fds.refused_pool = 0;
    fds.newest = fds.oldest = NULL;
    fds.cached = 0;
}

/* -- file handles --------------------------------------------------------------------------- */

struct file_handle *handle_of(int fd)
{
    struct file_handle *h = malloc(sizeof *h + MAX_HANDLE_SZ);
    if (!h) {
        errno = ENOMEM;
        return NULL;
    }
    h->handle_bytes = MAX_HANDLE_SZ;
    int mount_id;
    if (name_to_handle_at(fd, "", h, &mount_id, AT_EMPTY_PATH) < 0) {
        int e = errno;
        free(h);
        errno = e;
        return NULL;
    }
    struct file_handle *fit = realloc(h, sizeof *h + h->handle_bytes);
    return fit ? fit : h;
}

bool same_handle(const struct file_handle *a, const struct file_handle *b)
{
    return a->handle_type == b->handle_type && a->handle_bytes == b->handle_bytes &&
           memcmp(a->f_handle, b->f_handle, a->handle_bytes) == 0;
}

/* -- the cache of inodes' descriptors ------------------------------------------------------- */

/* fds.lock held for all of these. */
static void lru_unlink(struct sk_inode *in)
{
    if (in->lru_prev)
        in->lru_prev->lru_next = in->lru_next;
    else
        fds.newest = in->lru_next;
    if (in->lru_next)
        in->lru_next->lru_prev = in->lru_prev;
    else
        fds.oldest = in->lru_prev;
    in->lru_prev = in->lru_next = NULL;
}

static void lru_push(struct sk_inode *in)
{
    in->lru_prev = NULL;
    in->lru_next = fds.newest;
    if (fds.newest)
        fds.newest->lru_prev = in;
    fds.newest = in;
    if (!fds.oldest)
        fds.oldest = in;
}

/* Close the least recently used descriptors no request is using, down to the bound. */
static void lru_trim(void)
{
    unsigned long bound = fds.cache_bound = budget_now().cache;
    struct sk_inode *in = fds.oldest;
    while (fds.cached > bound && in) {
        struct sk_inode *newer = in->lru_prev;
        if (in->fd_users == 0) {
            lru_unlink(in);
            close(in->fd);
            in->fd = -1;
            fds.cached--;
        }
        in = newer;
    }
}

static void cache_insert(struct sk_inode *in, int fd)
{
    in->fd = fd;
    lru_push(in);
    fds.cached++;
    lru_trim();
}

void inode_fd_adopt(struct sk_inode *in, int fd)
{
    pthread_mutex_lock(&fds.lock);
    if (in->fd < 0)
        cache_insert(in, fd);
    else
        close(fd);
    pthread_mutex_unlock(&fds.lock);
}

int inode_fd(struct sk_inode *in)
{
    if (in == &fs.root)
        return fs.root.fd;
    pthread_mutex_lock(&fds.lock);
    if (in->fd >= 0) {
        in->fd_users++;
        lru_unlink(in);
        lru_push(in);
        pthread_mutex_unlock(&fds.lock);
        return in->fd;
    }
    pthread_mutex_unlock(&fds.lock);
    /* O_PATH does not follow a symbolic link: the handle names the link itself */
    int fd = open_by_handle_at(fds.handle_dir, in->handle, O_PATH | O_CLOEXEC);
    if (fd < 0)
        return -errno;  /* ESTALE: the inode is gone from the MDT */
    pthread_mutex_lock(&fds.lock);
    if (in->fd >= 0) {  /* another request opened it meanwhile */
        close(fd);
        lru_unlink(in);
        lru_push(in);
    } else {
        cache_insert(in, fd);
    }
    in->fd_users++;
    fd = in->fd;
    pthread_mutex_unlock(&fds.lock);
    return fd;
}

void inode_fd_put(struct sk_inode *in)
{
    if (in == &fs.root)
        return;
    pthread_mutex_lock(&fds.lock);
    in->fd_users--;
    if (in->fd_users == 0 && fds.cached > fds.cache_bound)
        lru_trim();  /* what was in use while the cache was full */
    pthread_mutex_unlock(&fds.lock);
}

void inode_fd_drop(struct sk_inode *in)
{
    pthread_mutex_lock(&fds.lock);
    if (in->fd >= 0) {
        lru_unlink(in);
        close(in->fd);
        in->fd = -1;
        fds.cached--;
    }
    pthread_mutex_unlock(&fds.lock);
}

/* -- what users hold open ------------------------------------------------------------------- */

static struct uid_use **uid_slot(uid_t uid)
{
    struct uid_use **u = &fds.uids[(uid * 2654435761u) % UID_BUCKETS];
    while (*u && (*u)->uid != uid)
        u = &(*u)->next;
    return u;
}

int fds_charge(uid_t uid, unsigned n)
{
    if (n == 0)
        return 0;
    struct budget b = budget_now();
    pthread_mutex_lock(&fds.users_lock);
    struct uid_use **slot = uid_slot(uid);
    unsigned long held = *slot ? (*slot)->held : 0;
    int rc = 0;
    if (held + n > b.share) {
        fds.refused_share++;
        rc = -EMFILE;
    } else if (fds.users_held + n > b.users) {
        fds.refused_pool++;
        rc = -ENFILE;
    } else if (!*slot && !(*slot = calloc(1, sizeof **slot))) {
        rc = -ENOMEM;
    } else {
        (*slot)->uid = uid;
        (*slot)->held += n;
        fds.users_held += n;
    }
    pthread_mutex_unlock(&fds.users_lock);
    return rc;
}

void fds_release(uid_t uid, unsigned n)
{
    if (n == 0)
        return;
    pthread_mutex_lock(&fds.users_lock);
    struct uid_use **slot = uid_slot(uid), *u = *slot;
    if (u) {
        unsigned long take = n > u->held ? u->held : n;
        u->held -= take;
        fds.users_held -= take;
        if (u->held == 0) {
            *slot = u->next;
            free(u);
        }
    }
    pthread_mutex_unlock(&fds.users_lock);
}

int fds_stats(uid_t caller, char **out, size_t *len)
{
    struct budget b = budget_now();
    pthread_mutex_lock(&fds.lock);
    unsigned long cached = fds.cached;
    pthread_mutex_unlock(&fds.lock);
    pthread_mutex_lock(&fds.users_lock);
    struct uid_use **slot = uid_slot(caller);
    unsigned long yours = *slot ? (*slot)->held : 0;
    char text[512];
    int n = snprintf(text, sizeof text,
                     "{\"limit\": %lu, \"reserved\": %lu, \"inodes\": {\"max\": %lu, \"open\": %lu}, "
                     "\"users\": {\"max\": %lu, \"share\": %lu, \"held\": %lu, \"refused\": "
                     "{\"share\": %lu, \"all\": %lu}}, \"yours\": %lu}",
                     b.limit, fds.reserve, b.cache, cached, b.users, b.share, fds.users_held,
                     fds.refused_share, fds.refused_pool, yours);
    pthread_mutex_unlock(&fds.users_lock);
    if (!(*out = strdup(text)))
        return -ENOMEM;
    *len = (size_t)n;
    return 0;
}
