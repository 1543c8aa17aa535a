/* Read records (docs/mount.rst, "Read records"): what feeds hotness-driven tiering
 * (scratchkeeper tierd, docs/tiering.rst).
 *
 * Every read served counts one read and its bytes on the file's inode. Every
 * mount.read_log_interval seconds a thread of the mount appends, for each inode read since the
 * last time, one record
 *   READS <time> <inode> <uid> <reads> <bytes> <scratch path, %XX-encoded>
 * to store_root/reads.log, all of one round in one write of the O_APPEND file; an inode dropped
 * from the table with reads not yet written, and every inode at unmount, writes its record
 * then. Counts are deltas: a record says how many reads happened since the inode's previous one,
 * so a reader adds them up and needs no state of the mount's. The log is bounded as closes.log
 * is (logs.c): a record counts against the user who read the file last. */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314

#include "skfs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static struct {
    double interval;          /* 0: no records */
    pthread_t thread;
    bool started;
    bool stopping;            /* lock */
    pthread_mutex_t lock;
    pthread_cond_t wake;
} rl = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

size_t encode_path(const char *path, char *out)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        unsigned char c = *p;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '/' || c == '.' || c == '_' || c == '-' || c == '+' || c == '~')
            out[n++] = (char)c;
        else
            n += (size_t)sprintf(out + n, "%%%02X", c);
    }
    out[n] = '\0';
    return n;
}

void reads_count(struct sk_inode *in, uint64_t bytes, uid_t reader)
{
    if (rl.interval <= 0)
        return;
    atomic_store(&in->last_reader, (unsigned)reader);
    atomic_fetch_add(&in->reads, 1);
    atomic_fetch_add(&in->read_bytes, bytes);
}

struct buf {
    char *data;
    size_t len, cap;
    struct log_rec *recs;   /* one per record in data */
    size_t nrecs, caprecs;
};

/* Append the record of `in`'s uncounted reads to b (nothing when none or out of memory: the
 * counts stay for the next round). Caller holds table_lock. */
static void record(struct sk_inode *in, struct buf *b, const struct timespec *now)
{
    if (atomic_load(&in->reads) == 0)
        return;
    char path[PATH_MAX];
    struct stat st;
    int fd = inode_fd(in);
    bool placed = fd >= 0 && scratch_path(fd, path, sizeof path) &&
                  fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0;
    if (fd >= 0)
        inode_fd_put(in);
    if (!placed) {
        /* unlinked (or gone from the MDT): nothing left to place */
        atomic_store(&in->reads, 0);
        atomic_store(&in->read_bytes, 0);
        return;
    }
    size_t need = strlen(path) * 3 + 128;
    if (b->len + need > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 65536) + need;
        char *data = realloc(b->data, cap);
        if (!data)
            return;
        b->data = data;
        b->cap = cap;
    }
    if (b->nrecs == b->caprecs) {
        size_t cap = b->caprecs ? b->caprecs * 2 : 256;
        struct log_rec *recs = realloc(b->recs, cap * sizeof *recs);
        if (!recs)
            return;
        b->recs = recs;
        b->caprecs = cap;
    }
    size_t start = b->len;
    uint64_t reads = atomic_exchange(&in->reads, 0);
    uint64_t bytes = atomic_exchange(&in->read_bytes, 0);
    b->len += (size_t)sprintf(b->data + b->len, "READS %lld.%09ld %ju %u %" PRIu64 " %" PRIu64 " ",
                              (long long)now->tv_sec, now->tv_nsec, (uintmax_t)st.st_ino,
                              (unsigned)st.st_uid, reads, bytes);
    b->len += encode_path(path, b->data + b->len);
    b->data[b->len++] = '\n';
    b->recs[b->nrecs++] = (struct log_rec){.off = start, .len = b->len - start,
                                           .uid = (uid_t)atomic_load(&in->last_reader)};
}

static void write_records(struct buf *b)
{
    log_append(LOG_READS, b->data, b->recs, b->nrecs);
    b->len = 0;
    b->nrecs = 0;
}

void reads_flush_inode(struct sk_inode *in)
{
    if (rl.interval <= 0 || atomic_load(&in->reads) == 0)
        return;
    struct buf b = {0};
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    record(in, &b, &now);
    write_records(&b);
    free(b.data);
    free(b.recs);
}

/* One round: every inode of the table read since its last record. */
static void flush_all(struct buf *b)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    pthread_mutex_lock(&fs.table_lock);
    for (size_t k = 0; k < NBUCKETS; k++)
        for (struct sk_inode *in = fs.buckets[k]; in; in = in->next)
            if (in->type == S_IFREG)
                record(in, b, &now);
    pthread_mutex_unlock(&fs.table_lock);
    write_records(b);
}

static void *run(void *arg)
{
    (void)arg;
    struct buf b = {0};
    pthread_mutex_lock(&rl.lock);
    while (!rl.stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double whole = (double)until.tv_nsec / 1e9 + rl.interval;
        until.tv_sec += (time_t)whole;
        until.tv_nsec = (long)((whole - (double)(time_t)whole) * 1e9);
        pthread_cond_timedwait(&rl.wake, &rl.lock, &until);
        pthread_mutex_unlock(&rl.lock);
        flush_all(&b);
        pthread_mutex_lock(&rl.lock);
    }
    pthread_mutex_unlock(&rl.lock);
    free(b.data);
    free(b.recs);
    return NULL;
}

int reads_start(const struct skfs_config *cfg, char *err, size_t errlen)
{
    rl.interval = cfg->read_log_interval;
    rl.stopping = false;
    rl.started = false;
    if (rl.interval <= 0)
        return 0;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&rl.thread, NULL, run, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        snprintf(err, errlen, "starting the read records: %s", strerror(rc));
        return -rc;
    }
    rl.started = true;
    return 0;
}

void reads_stop(void)
{
    if (!rl.started)
        return;
    pthread_mutex_lock(&rl.lock);
    rl.stopping = true;
    pthread_cond_signal(&rl.wake);
    pthread_mutex_unlock(&rl.lock);
    pthread_join(rl.thread, NULL);  /* its last round wrote what was left */
    rl.started = false;
}
