/* The mount's logs in store_root, bounded (docs/mount.rst "Bounded logs"): closes.log (CLOSE
 * records, read by offload at close) and reads.log (READS records, read by tiering).
 *
 * Both are written as root into the store's file system, where users' objects live too, and
 * every user causes records; so that no user can fill the store through them (issue 30: 40 KB
 * of user writes made 1.87 MB of closes.log):
 *
 *   - each append opens the log (O_APPEND), so a log its reader moved aside is followed by a
 *     new file; the file's identity (st_dev, st_ino) makes a *generation*, and what is counted
 *     below is counted per generation;
 *   - a CLOSE record is written once per inode and path per generation: the reader moves the
 *     log aside before it reads it (storage/mount_logs.py) and takes each file's size and mtime
 *     when it acts, so a later close of the same file adds nothing it would not see;
 *   - a record that would take the log past mount.log_max_bytes is dropped, and so is one
 *     beyond its user's share (1/LOG_SHARES of that; the user: who opened the file for a CLOSE
 *     record, who read it last for a READS record) and one that would leave less than
 *     mount.log_max_bytes free on the store's file system for users (f_bavail);
 *   - drops are counted (per user too) and said in one log line a minute at most; the counters
 *     are the root's read-only attribute user.scratchkeeper.logs, each user seeing their own.
 *
 * A dropped CLOSE record costs timeliness, never data: the stage-out at the end sends every
 * result not listed as offloaded unchanged (chain_service/offload.py, unchanged()).
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314

#include "skfs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define LOG_SHARES 16      /* a user's records take at most 1/16 of a log's cap */
#define LOG_MAX_USERS 4096 /* users counted per log; a record of one more is dropped */
#define WARN_EVERY 60      /* seconds between two log lines about dropped records */

struct log_user {
    uid_t uid;
    uint64_t bytes, records;  /* in this generation */
    uint64_t dropped;         /* since the mount started */
};

struct sk_log {
    const char *name;
    pthread_mutex_t lock;
    uint64_t gen;             /* 0: nothing appended yet */
    dev_t dev;
    ino_t ino;
    uint64_t size;            /* the file's size after the last append */
    struct log_user *users;
    size_t nusers;
    uint64_t written, coalesced, dropped_cap, dropped_share, dropped_space;
    uint64_t unwarned;        /* drops not said in the log yet */
    time_t warned;
    uid_t last_dropped;
};

static struct sk_log logs[LOG_COUNT] = {
    [LOG_CLOSES] = {.name = "closes.log", .lock = PTHREAD_MUTEX_INITIALIZER},
    [LOG_READS] = {.name = "reads.log", .lock = PTHREAD_MUTEX_INITIALIZER},
};
static uint64_t log_cap, log_share;

void logs_start(const struct skfs_config *cfg)
{
    log_cap = cfg->log_max_bytes;
    log_share = log_cap / LOG_SHARES;
    for (int i = 0; i < LOG_COUNT; i++) {  /* the counters start at zero with each mount */
        struct sk_log *l = &logs[i];
        pthread_mutex_lock(&l->lock);
        free(l->users);
        l->users = NULL;
        l->nusers = 0;
        l->gen = l->size = 0;
        l->written = l->coalesced = l->dropped_cap = l->dropped_share = l->dropped_space = 0;
        l->unwarned = 0;
        l->warned = 0;
        pthread_mutex_unlock(&l->lock);
    }
}

uint64_t path_hash(const char *path)
{
    uint64_t h = 0xcbf29ce484222325ULL;  /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)path; *p; p++)
        h = (h ^ *p) * 0x100000001b3ULL;
    return h;
}

/* Caller holds l->lock. NULL when the table is full or memory short. */
static struct log_user *user_of(struct sk_log *l, uid_t uid)
{
    for (size_t i = 0; i < l->nusers; i++)
        if (l->users[i].uid == uid)
            return &l->users[i];
    if (l->nusers >= LOG_MAX_USERS)
        return NULL;
    struct log_user *grown = realloc(l->users, (l->nusers + 1) * sizeof *grown);
    if (!grown)
        return NULL;
    l->users = grown;
    struct log_user *u = &l->users[l->nusers++];
    memset(u, 0, sizeof *u);
    u->uid = uid;
    return u;
}

/* Caller holds l->lock: the log file `st` is another than before: a new generation. */
static void follow(struct sk_log *l, const struct stat *st)
{
    if (l->gen && l->dev == st->st_dev && l->ino == st->st_ino)
        return;
    l->gen++;
    l->dev = st->st_dev;
    l->ino = st->st_ino;
    for (size_t i = 0; i < l->nusers; i++)
        l->users[i].bytes = l->users[i].records = 0;
}

/* Caller holds l->lock: one line a minute at most about the records dropped. */
static void warn_dropped(struct sk_log *l)
{
    time_t now = time(NULL);
    if (!l->unwarned || now - l->warned < WARN_EVERY)
        return;
    logmsg("%s: %" PRIu64 " record(s) dropped (the log holds at most %" PRIu64 " bytes, a user's "
           "records %" PRIu64 "; last dropped: uid %u); offload at close of those files waits "
           "for the stage-out, tiering misses those reads", l->name, l->unwarned, log_cap,
           log_share, (unsigned)l->last_dropped);
    l->unwarned = 0;
    l->warned = now;
}

/* Whether the record of `len` bytes by `u` fits (counted as dropped when not). */
static bool admit(struct sk_log *l, struct log_user *u, uid_t uid, size_t len, uint64_t size,
                  uint64_t avail)
{
    uint64_t *why = size + len > log_cap                    ? &l->dropped_cap
                    : !u || u->bytes + len > log_share      ? &l->dropped_share
                    : avail < log_cap + len                 ? &l->dropped_space
                                                            : NULL;
    if (!why)
        return true;
    (*why)++;
    if (u)
        u->dropped++;
    l->unwarned++;
    l->last_dropped = uid;
    return false;
}

void log_append(int which, const char *buf, const struct log_rec *recs, size_t n)
{
    struct sk_log *l = &logs[which];
    if (n == 0)
        return;
    pthread_mutex_lock(&l->lock);
    /* O_NONBLOCK: a FIFO put in its place is never waited on (and refused below) */
    int fd = openat(fs.store_fd, l->name,
                    O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    struct stat st;
    struct statvfs sv;
    int err = fd < 0 || fstat(fd, &st) < 0 || fstatvfs(fd, &sv) < 0 ? errno
              : !S_ISREG(st.st_mode)                                ? EINVAL
                                                                    : 0;
    if (err) {
        logmsg("%s: %s", l->name, err == EINVAL ? "not a regular file" : strerror(err));
        if (fd >= 0)
            close(fd);
        pthread_mutex_unlock(&l->lock);
        return;
    }
    follow(l, &st);
    uint64_t size = (uint64_t)st.st_size;
    uint64_t avail = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += recs[i].len;
    char *out = malloc(total ? total : 1);
    bool *taken = calloc(n, sizeof *taken);
    size_t len = 0, admitted = 0;
    for (size_t i = 0; out && taken && i < n; i++) {
        const struct log_rec *r = &recs[i];
        if (r->in && r->in->close_gen == l->gen && r->in->close_path == r->path) {
            l->coalesced++;  /* the reader has not taken this log: it sees the file as it is */
            continue;
        }
        struct log_user *u = user_of(l, r->uid);
        if (!admit(l, u, r->uid, r->len, size + len, avail))
            continue;
        memcpy(out + len, buf + r->off, r->len);
        len += r->len;
        u->bytes += r->len;
        u->records++;
        taken[i] = true;
        admitted++;
    }
    if (len > 0) {
        ssize_t w = write(fd, out, len);
        if (w != (ssize_t)len)
            logmsg("%s: short write: %s", l->name, w < 0 ? strerror(errno) : "no space");
        else {
            l->written += admitted;
            for (size_t i = 0; i < n; i++)
                if (taken[i] && recs[i].in) {
                    recs[i].in->close_gen = l->gen;
                    recs[i].in->close_path = recs[i].path;
                }
        }
    }
    l->size = size + len;
    close(fd);
    warn_dropped(l);
    pthread_mutex_unlock(&l->lock);
    free(out);
    free(taken);
}

/* A CLOSE record (as Lustre's changelog keeps them) of a handle that created, truncated or
 * wrote its file, for offload at close (docs/staging.rst): one line appended to
 * store_root/closes.log,
 *   CLOSE <time> <inode> <uid> <size> <mtime> <scratch path, %XX-encoded>
 * in one write of an O_APPEND file, so records of concurrent closes never interleave. The path
 * is encoded: a file name may hold any byte but '/' and NUL, newlines and spaces included. */
void close_record(struct sk_file *fh)
{
    char path[PATH_MAX];
    struct stat st;
    if (!scratch_path(fh->fd, path, sizeof path) || fstat(fh->fd, &st) < 0)
        return;
    const size_t size = sizeof path * 3 + 160;
    char *buf = malloc(size);
    if (!buf)
        return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    size_t n = (size_t)snprintf(buf, size, "CLOSE %lld.%09ld %ju %u %jd %lld.%09ld ",
                                (long long)now.tv_sec, now.tv_nsec, (uintmax_t)st.st_ino,
                                (unsigned)st.st_uid, (intmax_t)st.st_size,
                                (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    n += encode_path(path, buf + n);
    buf[n++] = '\n';
    struct log_rec rec = {.off = 0, .len = n, .uid = fh->opener, .in = fh->inode,
                          .path = path_hash(path)};
    log_append(LOG_CLOSES, buf, &rec, 1);
    free(buf);
}

/* -- counters ---------------------------------------------------------------------------------- */

struct text {
    char *data;
    size_t len, cap;
    bool failed;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = t->failed ? 0 : vsnprintf(t->data + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (t->failed || n < 0) {
            t->failed = true;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap * 2 + (size_t)n + 1;
        char *grown = realloc(t->data, cap);
        if (!grown) {
            t->failed = true;
            return;
        }
        t->data = grown;
        t->cap = cap;
    }
}

int logs_stats(uid_t caller, char **out, size_t *len)
{
    struct text t = {.data = malloc(1024), .cap = 1024};
    if (!t.data)
        return -ENOMEM;
    t.data[0] = '\0';
    put(&t, "{");
    for (int i = 0; i < LOG_COUNT; i++) {
        struct sk_log *l = &logs[i];
        pthread_mutex_lock(&l->lock);
        put(&t, "%s\"%s\": {\"cap\": %" PRIu64 ", \"share\": %" PRIu64 ", \"generation\": %" PRIu64
            ", \"size\": %" PRIu64 ", \"written\": %" PRIu64 ", \"coalesced\": %" PRIu64
            ", \"dropped\": {\"cap\": %" PRIu64 ", \"share\": %" PRIu64 ", \"space\": %" PRIu64
            "}, \"users\": {", i ? ", " : "", l->name, log_cap, log_share, l->gen, l->size,
            l->written, l->coalesced, l->dropped_cap, l->dropped_share, l->dropped_space);
        bool first = true;
        for (size_t k = 0; k < l->nusers; k++) {
            const struct log_user *u = &l->users[k];
            if (caller != 0 && u->uid != caller)
                continue;  /* another user's activity is not the caller's to see */
            put(&t, "%s\"%u\": {\"bytes\": %" PRIu64 ", \"records\": %" PRIu64 ", \"dropped\": %"
                PRIu64 "}", first ? "" : ", ", (unsigned)u->uid, u->bytes, u->records, u->dropped);
            first = false;
        }
        put(&t, "}}");
        pthread_mutex_unlock(&l->lock);
    }
    put(&t, "}");
    if (t.failed) {
        free(t.data);
        return -ENOMEM;
    }
    *out = t.data;
    *len = t.len;
    return 0;
}
