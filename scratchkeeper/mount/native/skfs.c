/* The scratch mount: a libfuse3 low-level file system in the shape of libfuse's
 * example/passthrough_hp (docs/mount.rst). This part holds the session (skfs_run: the state,
 * the OST watcher, mount, the session loop, unmount), init and the operation table; the
 * inode table and the requests that open files are in inode.c, the other parts are listed in
 * skfs_int.h.
 *
 * Metadata passes through to the MDT tree (store_root/mdt): every inode the kernel knows is an
 * entry of a table keyed by the MDT's (st_dev, st_ino), holding its MDT inode's file handle
 * (and, within a bound, an O_PATH descriptor: fds.c) and the kernel's lookup count, released
 * by forget. The data of a regular file lives in
 * OST objects (store_root/ostNNNN/OBJECT_ID) laid out by its security.scratchkeeper.lov
 * attribute; its size is the MDT inode's st_size. Requests run with root's rights; the kernel
 * checks permissions against the MDT inodes' modes and POSIX ACLs (default_permissions and
 * FUSE_CAP_POSIX_ACL; access.c) and new inodes get the caller's uid and gid.
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314

#include "skfs_int.h"

#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

struct skfs_state fs;


void logmsg(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "scratchkeeper mount: %s\n", line);
}

/* -- init and the operation table ------------------------------------------------------------ */

static void sk_init(void *userdata, struct fuse_conn_info *conn)
{
    (void)userdata;
    if (conn->capable & FUSE_CAP_DONT_MASK)
        conn->want |= FUSE_CAP_DONT_MASK;
    else
        logmsg("the kernel applies the umask itself (no FUSE_CAP_DONT_MASK)");
    /* the kernel checks every open and lookup against the MDT inode's POSIX ACLs too
     * (system.posix_acl_access, read through getxattr and cached until a setattr or setxattr
     * of the inode), and leaves the umask to the mount (access.c: create_mode) */
    if (conn->capable & FUSE_CAP_POSIX_ACL)
        conn->want |= FUSE_CAP_POSIX_ACL;
    else
        logmsg("the kernel offers no POSIX ACLs (FUSE_CAP_POSIX_ACL): modes only");
    /* suid/sgid are cleared by the kernel's own setattr, not by us */
    conn->want &= ~(unsigned)FUSE_CAP_HANDLE_KILLPRIV;
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
        conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
        conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    conn->max_write = fs.max_request;
    conn->max_read = fs.max_request;  /* as the max_read mount option says */
    conn->max_readahead = fs.max_request;
    /* The kernel hands the mount at most max_background asynchronous requests at once
     * (readahead, and direct reads: a Python or fio O_DIRECT read is one), 12 by default, and
     * queues the rest itself. A request that waits in the mount (read QoS's interval, a
     * recovery) holds one, so with 12 waiting the 13th never reached the mount: a full
     * interval of 14 or 27 reads came in waves of 12, each wave a whole interval later.
     * As many as the mount has request threads. */
    unsigned background = fs.cfg.threads < 12 ? 12 : fs.cfg.threads;
    conn->max_background = background > 65535 ? 65535 : background;
    conn->congestion_threshold = conn->max_background * 3 / 4;
    passthrough_init(conn);
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
    .fallocate = sk_fallocate,
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

/* The kernel's readahead of a FUSE mount is its bdi's read_ahead_kb (128 KiB by default),
 * whatever max_readahead says: raised to mount.max_request, so that large reads reach the mount
 * as requests of max_request bytes (read dispatch needs them). Run by a thread of its own once
 * mounted: the stat of the mount point is served by the session loop. */
static void *raise_readahead(void *arg)
{
    (void)arg;
    struct stat st;
    if (stat(fs.cfg.mountpoint, &st) < 0)
        return NULL;  /* unmounted meanwhile */
    char path[96], now[32];
    snprintf(path, sizeof path, "/sys/class/bdi/%u:%u/read_ahead_kb", major(st.st_dev),
             minor(st.st_dev));
    unsigned want = fs.max_request / 1024;
    FILE *f = fopen(path, "r+");
    if (!f) {
        logmsg("%s: %s: readahead left as it is", path, strerror(errno));
        return NULL;
    }
    if (fgets(now, sizeof now, f) && (unsigned)strtoul(now, NULL, 10) < want) {
        rewind(f);
        if (fprintf(f, "%u\n", want) < 0 || fflush(f) != 0)
            logmsg("%s: %s: readahead left as it is", path, strerror(errno));
    }
    fclose(f);
    return NULL;
}

static void free_table(void)
{
    for (size_t b = 0; b < NBUCKETS; b++) {
        struct sk_inode *in = fs.buckets[b];
        while (in) {
            struct sk_inode *next = in->next;
            inode_fd_drop(in);
            pthread_mutex_destroy(&in->lock);
            free(in->handle);
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

/* Start a thread that takes no signals: the session loop's thread takes them (libfuse's
 * workers block them too). 0, or the error number of pthread_create. */
static int start_quiet_thread(pthread_t *thread, void *(*run)(void *))
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int prc = pthread_create(thread, NULL, run, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return prc;
}

/* The state of a new session, nothing open yet (the inode table allocated). */
static int state_init(const struct skfs_config *config, char *err, size_t errlen)
{
    memset(&fs, 0, sizeof fs);
    fs.cfg = *config;
    fs.max_request = config->max_request > (1u << 20) ? (1u << 20) : config->max_request;
    fs.inotify_fd = fs.stop_pipe[0] = fs.stop_pipe[1] = -1;
    fs.root.fd = fs.store_fd = -1;
    pthread_mutex_init(&fs.table_lock, NULL);
    if (!(fs.buckets = calloc(NBUCKETS, sizeof *fs.buckets)))
        return fail(err, errlen, -ENOMEM, "out of memory");
    return 0;
}

/* The MDT (the root inode) and the store root opened; the root's mode and the logs set up. */
static int root_open(const struct skfs_config *config, char *err, size_t errlen)
{
    if (!realpath(config->mdt, fs.mdt_real))
        return fail(err, errlen, -errno, "%s: %s", config->mdt, strerror(errno));
    fs.mdt_real_len = strlen(fs.mdt_real);
    fs.root.fd = open(config->mdt, O_PATH | O_DIRECTORY | O_CLOEXEC);
    fs.store_fd = open(config->store_root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fs.root.fd < 0 || fs.store_fd < 0)
        return fail(err, errlen, -errno, "%s: %s",
                    fs.root.fd < 0 ? config->mdt : config->store_root, strerror(errno));
    struct stat st;
    fstatat(fs.root.fd, "", &st, AT_EMPTY_PATH);
    fs.root.dev = st.st_dev;
    fs.root.ino = st.st_ino;
    fs.root.type = S_IFDIR;
    fs.root.nlookup = 2;
    pthread_mutex_init(&fs.root.lock, NULL);
    root_load();
    logs_start(config);
    return 0;
}

/* The OSTs scanned and the thread that watches them for failures and returns started. */
static int watcher_start(const struct skfs_config *config, pthread_t *watcher, char *err,
                         size_t errlen)
{
    fs.inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fs.inotify_fd < 0 || pipe2(fs.stop_pipe, O_CLOEXEC) < 0)
        return fail(err, errlen, -errno, "watching %s: %s", config->store_root, strerror(errno));
    /* SK_MOUNT_INOTIFY=0: the OSTs by their rescan alone (layout.c), as on a store whose
     * changes inotify does not report (a network file system, another host's server) */
    const char *env = getenv("SK_MOUNT_INOTIFY");
    if ((!env || strcmp(env, "0") != 0) &&
        inotify_add_watch(fs.inotify_fd, config->store_root,
                          IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF |
                          IN_ONLYDIR) < 0)
        return fail(err, errlen, -errno, "watching %s: %s", config->store_root, strerror(errno));
    scan_osts();
    doomed_sweep(-1);  /* objects of files removed during an outage, whose OST came back since */
    int prc = start_quiet_thread(watcher, watch_osts);
    if (prc)
        return fail(err, errlen, -prc, "starting the OST watcher: %s", strerror(prc));
    return 0;
}

static void watcher_stop(pthread_t watcher)
{
    if (write(fs.stop_pipe[1], "x", 1) != 1)
        logmsg("stopping the OST watcher: %s", strerror(errno));
    pthread_join(watcher, NULL);
}

/* A signal's short name (SEGV), or "?". */
static const char *signame(int sig)
{
    const char *name = sigabbrev_np(sig);
    return name ? name : "?";
}

/* Mounted: serve requests until the file system is unmounted or a signal ends the loop, then
 * unmount. */
static int session_loop(const struct skfs_config *config, char *err, size_t errlen)
{
    int rc = 0;
    logmsg("%s: serving %s (%u OSTs, %u threads)", config->mountpoint, config->mdt,
           config->ost_count, config->threads);
    pthread_t readahead;
    bool readahead_started = false;
    if (config->dispatch_min_bytes > 0)
        readahead_started = start_quiet_thread(&readahead, raise_readahead) == 0;
    struct fuse_loop_config *loop = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(loop, config->threads);
    fuse_loop_cfg_set_idle_threads(loop, config->threads / 2 ? config->threads / 2 : 1);
    fuse_loop_cfg_set_clone_fd(loop, 0);
    int lrc = fuse_session_loop_mt(fs.se, loop);
    fuse_loop_cfg_destroy(loop);
    if (lrc < 0)
        rc = fail(err, errlen, lrc, "the session ended: %s", strerror(-lrc));
    else if (lrc > 0)  /* libfuse's handler of SIGINT, SIGTERM, SIGHUP ended the loop */
        logmsg("%s: signal %d (%s): unmounting", config->mountpoint, lrc, signame(lrc));
    fuse_session_unmount(fs.se);
    if (readahead_started)
        pthread_join(readahead, NULL);
    fuse_remove_signal_handlers(fs.se);
    logmsg("%s: unmounted", config->mountpoint);
    return rc;
}

/* The FUSE session: created, its signal handlers installed, mounted and served
 * (session_loop); the signal dispositions it found are restored when it ends. */
static int session_serve(const struct skfs_config *config, char *err, size_t errlen)
{
    int rc;
    char opts[512];
    snprintf(opts, sizeof opts,
             "allow_other,default_permissions,fsname=scratchkeeper,subtype=scratchkeeper,"
             "max_read=%u", fs.max_request);
    char *argv[] = {"scratchkeeper", "-o", opts, config->debug ? "-d" : NULL, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(config->debug ? 4 : 3, argv);
    fs.se = fuse_session_new(&args, &ops, sizeof ops, NULL);
    if (!fs.se)
        return fail(err, errlen, -EINVAL, "cannot start the FUSE session (options %s)", opts);
    /* the default disposition first: fuse_set_signal_handlers leaves a handler it finds */
    struct sigaction dfl = {.sa_handler = SIG_DFL}, saved[3];
    const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++)
        sigaction(sigs[i], &dfl, &saved[i]);
    struct sigaction saved_pipe;
    sigaction(SIGPIPE, NULL, &saved_pipe);
    if (fuse_set_signal_handlers(fs.se) != 0) {
        rc = fail(err, errlen, -EINVAL, "cannot install the signal handlers");
    } else if (fuse_session_mount(fs.se, config->mountpoint) != 0) {
        rc = fail(err, errlen, -EIO, "cannot mount on %s (see the messages above)",
                  config->mountpoint);
        fuse_remove_signal_handlers(fs.se);
    } else {
        rc = session_loop(config, err, errlen);
    }
    for (int i = 0; i < 3; i++)
        sigaction(sigs[i], &saved[i], NULL);
    sigaction(SIGPIPE, &saved_pipe, NULL);
    fuse_session_destroy(fs.se);
    fs.se = NULL;
    return rc;
}

/* Everything state_init, root_open and watcher_start opened, closed. */
static void state_release(void)
{
    free_table();
    fds_stop();
    if (fs.inotify_fd >= 0)
        close(fs.inotify_fd);
    for (int i = 0; i < 2; i++)
        if (fs.stop_pipe[i] >= 0)
            close(fs.stop_pipe[i]);
    if (fs.root.fd >= 0)
        close(fs.root.fd);
    if (fs.store_fd >= 0)
        close(fs.store_fd);
}

/* A fatal signal (a fault in the server) writes its number and the faulting thread's stack to
 * the log (stderr) before the default action ends the process with a core: a mount that died
 * leaves its clients only ENOTCONN. The names are the extension's exported ones; the others are
 * offsets into _fuse*.so, for addr2line. */
static const int FATAL_SIGNALS[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
#define NFATAL (sizeof FATAL_SIGNALS / sizeof FATAL_SIGNALS[0])

static void on_fatal(int sig)
{
    char line[96];
    int n = snprintf(line, sizeof line, "scratchkeeper mount: fatal signal %d (%s); its stack:\n",
                     sig, signame(sig));
    if (n > 0)
        (void)!write(STDERR_FILENO, line, (size_t)n);
    void *frames[48];
    backtrace_symbols_fd(frames, backtrace(frames, 48), STDERR_FILENO);
    raise(sig);  /* SA_RESETHAND: the default action now, with its core */
}

static void fatal_handlers(struct sigaction *saved, bool install)
{
    if (install) {
        void *warm[1];
        backtrace(warm, 1);  /* loads libgcc_s now, not in the handler */
    }
    struct sigaction sa = {.sa_handler = on_fatal, .sa_flags = SA_RESETHAND | SA_NODEFER};
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < NFATAL; i++)
        sigaction(FATAL_SIGNALS[i], install ? &sa : &saved[i], install ? &saved[i] : NULL);
}

int skfs_run(const struct skfs_config *config, char *err, size_t errlen)
{
    struct sigaction saved_fatal[NFATAL];
    fatal_handlers(saved_fatal, true);
    int rc = state_init(config, err, errlen);
    if (rc < 0) {
        fatal_handlers(saved_fatal, false);
        return rc;
    }
    pthread_t watcher;
    if ((rc = root_open(config, err, errlen)) < 0 ||
        (rc = watcher_start(config, &watcher, err, errlen)) < 0)
        goto out;
    if ((rc = fds_start(config, err, errlen)) < 0)
        goto stop_watcher;
    if ((rc = dispatch_start(config, err, errlen)) < 0)
        goto stop_watcher;
    hybrid_start(config);
    if ((rc = reads_start(config, err, errlen)) >= 0 && (rc = qos_start(config, err, errlen)) >= 0)
        rc = session_serve(config, err, errlen);
    reads_stop();  /* its last round records what is left, before the table goes */
    qos_stop();
    hybrid_stop();
    dispatch_stop();
stop_watcher:
    watcher_stop(watcher);
out:
    state_release();
    fatal_handlers(saved_fatal, false);
    return rc;
}
