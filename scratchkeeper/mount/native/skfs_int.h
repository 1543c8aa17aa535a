/* The scratch mount's private declarations, shared by its parts (docs/mount.rst):
 *
 *   skfs.c       the session, init, the operation table
 *   inode.c      the inode table, lookup/forget, getattr/setattr, open/create/release
 *   namespace.c  names, directories, statfs, extended attributes
 *   layout.c     OST states, objects, layout attributes, views, new layouts, stale marks
 *   data.c       reads and fsync of regular files, object owners
 *   change.c     truncate, write and fallocate, each all or nothing across the objects
 *   dispatch.c   reads dispatched over the mirrors by the replica-selection solver, a read pool
 *   wait.c       the read's wait for recoveryd (or the OST's return) on a stripe no mirror holds
 *   access.c     the root's shown mode, new inodes' modes under default ACLs, xattr names
 *   logs.c       closes.log and reads.log appended within bounds, CLOSE records
 *   fds.c        the open-file limit: inodes' descriptors cached within a bound, users' shares
 *   passthrough.c  kernel FUSE passthrough of read-only opens of one-object files
 *
 * Every symbol here is hidden in the extension (-fvisibility=hidden).
 */
#ifndef SKFS_INT_H
#define SKFS_INT_H

#include "skfs.h"
#include "lov.h"

#include <dirent.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define NBUCKETS (1u << 16)
#define NEED_RECOVERY 1
#define RECOVERY_SLICE 2.0 /* seconds of one wait on recoveryd between checks */

/* -- the inode table ------------------------------------------------------------------------- */

struct file_handle;

struct sk_inode {
    /* The MDT inode: its handle, and an O_PATH descriptor while it is among the most recently
     * used (fds.c); a request takes it with inode_fd() and gives it back with inode_fd_put(),
     * before it answers: the kernel holds the inode only until the answer, and may forget it
     * (forget_one frees the entry) at once after. */
    struct file_handle *handle;
    int fd;                 /* fds.c's lock: -1 when not cached (the root's: always open) */
    unsigned fd_users;      /* fds.c's lock: requests using fd, which is not closed meanwhile */
    struct sk_inode *lru_prev, *lru_next;  /* fds.c's lock: newer, older */
    bool superseded;        /* table_lock: its number is a newer MDT inode's: table_find skips it */
    dev_t dev;
    ino_t ino;
    mode_t type;            /* S_IFMT bits */
    uint64_t nlookup;       /* table_lock */
    uint64_t nopen;         /* table_lock: open handles */
    unsigned pt_opens;      /* table_lock: handles the kernel reads through passthrough.c */
    unsigned cached_opens;  /* table_lock: handles the kernel opened with its page cache */
    unsigned pt_writers;    /* table_lock: of which opened for writing */
    int backing_id;         /* table_lock: the backing id of pt_opens' object (0: none) */
    int backing_fd;         /* table_lock: that object, open read-write (-1: none) */
    char backing_obj[SK_OBJID_LEN + 1];  /* table_lock: its id */
    char *doomed;           /* table_lock: layout of objects to delete at the last release */
    size_t doomed_len;
    pthread_mutex_t lock;   /* data, size and layout changes of a regular file, one at a time */
    atomic_uint_fast64_t reads, read_bytes;  /* served since its last read record */
    unsigned reading;       /* hybrid.c's lock: reads in flight */
    atomic_uint_fast64_t last_end;  /* where the last read ended: the next one is sequential */
    atomic_int hybrid_last; /* 1 + the mirror last chosen (hybrid.c), 0: none */
    atomic_uint last_reader; /* uid of the last read: reads.log counts its record against it */
    uint64_t close_gen;     /* closes.log's lock: the log generation holding its CLOSE record */
    uint64_t close_path;    /* closes.log's lock: a hash of the path that record names */
    struct sk_inode *next;  /* hash chain */
};

/* A layout as one open file uses it: the parsed attribute and its objects' descriptors. */
struct sk_view {
    atomic_int refs;
    uid_t charged_to;       /* its objects' descriptors count against this user (fds.c) */
    unsigned charged;
    char *raw;              /* NULL: the inode has no layout attribute */
    size_t rawlen;
    struct sk_lov lov;
    int **fds;              /* [component][position], -1 when the object could not be opened */
};

/* How the kernel was told to do a handle's I/O (passthrough.c) */
enum sk_io { SK_IO_NONE, SK_IO_CACHED, SK_IO_PASSTHROUGH };

struct sk_file {
    struct sk_inode *inode;
    enum sk_io io;          /* set by passthrough_choose at the open */
    struct timespec pt_mtime;  /* passed through for writing: the object's mtime at the open */
    int fd;                 /* the MDT inode opened O_RDWR: size, times, layout */
    uid_t opener;           /* the caller of the open: its CLOSE record counts against it */
    bool writable;
    bool append;
    atomic_bool written;    /* created, truncated or written through: its close is recorded */
    pthread_mutex_t lock;   /* view */
    struct sk_view *view;
};

struct sk_dir {
    DIR *dp;
    uid_t opener;           /* its descriptor counts against this user (fds.c) */
    off_t offset;
    struct dirent *entry;
};

struct skfs_state {
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
    bool passthrough;       /* the kernel passes one-object files through (passthrough.c) */
    /* what the mount's root shows (access.c): the MDT directory itself is root's, 0700 */
    pthread_mutex_t root_lock;
    mode_t root_mode;       /* permission bits, set-id and sticky */
    uid_t root_uid;
    gid_t root_gid;
};

extern struct skfs_state fs;  /* the one mount of the process (skfs.c) */

/* skfs.c */
void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* fds.c: the mount's descriptors (docs/mount.rst "Descriptors") */
#define SK_FDS_XATTR "user.scratchkeeper.descriptors"  /* read-only, on the mount's root */
/* Raise the soft open-file limit to the hard one, open the MDT for open_by_handle_at and set
 * the reserve (what is open now, and each request thread's). 0, or -errno with err. */
int fds_start(const struct skfs_config *cfg, char *err, size_t errlen);
void fds_stop(void);
/* The handle of the file `fd` (malloc'd), or NULL with errno. */
struct file_handle *handle_of(int fd);
bool same_handle(const struct file_handle *a, const struct file_handle *b);
/* The O_PATH descriptor of `in`'s MDT inode, kept open until inode_fd_put: from the cache, or
 * opened again from its handle; -errno (ESTALE: the inode is gone). */
int inode_fd(struct sk_inode *in);
void inode_fd_put(struct sk_inode *in);
/* A descriptor of `in` a lookup opened: kept in the cache (closed if it has one). */
void inode_fd_adopt(struct sk_inode *in, int fd);
/* The entry is freed: its descriptor closed (no request uses it). */
void inode_fd_drop(struct sk_inode *in);
/* Count n descriptors against `uid`'s share: 0, -EMFILE beyond the user's share, -ENFILE
 * when the users' part is taken. */
int fds_charge(uid_t uid, unsigned n);
void fds_release(uid_t uid, unsigned n);
int fds_stats(uid_t caller, char **out, size_t *len);

/* passthrough.c: kernel FUSE passthrough (docs/mount.rst "Passthrough") */
#define SK_PASSTHROUGH_XATTR "user.scratchkeeper.passthrough"  /* read-only, on the mount's root */
/* At init: ask for passthrough where libfuse and the kernel have it; say which, once. */
void passthrough_init(struct fuse_conn_info *conn);
/* At an open (`flags` its open flags), the handle `fh` counted on its inode: pass it through
 * (fi's backing id), or open it direct-I/O (the inode has passthrough handles) or cached. */
void passthrough_choose(fuse_req_t req, struct sk_file *fh, int flags, struct fuse_file_info *fi);
/* The handle is closed: the inode's counts, and its backing closed with its last user. */
void passthrough_release(fuse_req_t req, struct sk_file *fh);
/* Before the close record of a handle passed through for writing: the MDT inode takes the
 * object's size; the handle counts as written if the object changed. */
void passthrough_settle(struct sk_file *fh);
/* While the kernel writes the object of `in` (its MDT inode open as `fd`): the MDT inode takes
 * the object's size where it is larger, before the mount changes the size itself. Caller holds
 * the inode lock. */
void passthrough_sync_size(struct sk_inode *in, int fd);
/* The attributes of `in` as getattr shows them: the object's size while the kernel writes it. */
void passthrough_attr(struct sk_inode *in, struct stat *st);
/* The file `in` grows to `size` by a truncate: the object its passthrough handles read grows
 * too, so that the kernel reads the new bytes (zeros). Caller holds the inode lock. 0 or
 * -errno. */
int passthrough_grown(struct sk_inode *in, uint64_t size);
/* The counters as JSON text (malloc'd). */
int passthrough_stats(char **out, size_t *len);

/* inode.c: the inode table and the requests on inodes (the operation table's in skfs.c) */
struct sk_inode *get_inode(fuse_ino_t ino);
struct sk_inode *table_find(dev_t dev, ino_t ino);
void procpath(int fd, char *buf);
int do_lookup(fuse_ino_t parent, const char *name, struct fuse_entry_param *e);
void forget_one(fuse_ino_t ino, uint64_t n);
bool caller_in_group(fuse_req_t req, gid_t gid);
void new_owner(fuse_req_t req, int pfd, uid_t *uid, gid_t *gid, bool *sgid_parent);
/* The store's pool `name` (storage.pools), or NULL. */
const struct skfs_pool *find_pool(const char *name);
/* Reply to a LOOKUP of `name` in `parent` (also the reply to a new entry). */
void sk_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
mode_t masked(fuse_req_t req, mode_t mode);
int make_regular(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, int *fdp);
void sk_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void sk_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets);
void sk_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void sk_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
                struct fuse_file_info *fi);
void sk_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
               struct fuse_file_info *fi);
void sk_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void sk_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void sk_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

/* access.c: the mount root's attributes, the mode of new inodes (umask, default ACLs), which
 * extended attributes pass */
#define SK_ROOT_XATTR "trusted.scratchkeeper.root"  /* the root's "mode=O uid=U gid=G" */
#define ACL_ACCESS "system.posix_acl_access"
#define ACL_DEFAULT "system.posix_acl_default"
void root_load(void);
void root_attr(struct stat *st);
int root_setattr(const struct stat *attr, int valid);
/* The mode to create a new inode with in the directory `pfd`: the caller's umask applied
 * unless the directory has a default ACL (*inherits), which then makes the mode, as ext4 does. */
mode_t create_mode(fuse_req_t req, int pfd, mode_t mode, bool *inherits);
/* The new inode's permission bits as its file system made them (an inherited ACL), with the
 * set-id and sticky bits of `want`; `want` when nothing was inherited. */
mode_t created_mode(int fd, const char *name, mode_t want, bool inherits);
/* 0 when the caller may set or remove the attribute `name` of `ino`, else the errno. */
int xattr_set_allowed(fuse_req_t req, fuse_ino_t ino, const char *name);
/* 0 when the caller may read it, else the errno (ENODATA: hidden). */
int xattr_get_allowed(fuse_req_t req, fuse_ino_t ino, const char *name);
/* Remove from the list (size bytes of NUL-ended names) what the caller may not see; new size. */
size_t xattr_filter_list(fuse_req_t req, fuse_ino_t ino, char *list, size_t size);
/* After an access ACL was set on `in` (its MDT inode open as `fd`): drop S_ISGID if the
 * caller is not in the file's group, as the kernel does for a local caller
 * (posix_acl_update_mode). */
void acl_kill_sgid(fuse_req_t req, const struct sk_inode *in, int fd);

/* logs.c: closes.log and reads.log, bounded (docs/mount.rst "Bounded logs") */
#define SK_LOGS_XATTR "user.scratchkeeper.logs"  /* read-only, on the mount's root */
struct log_rec {
    size_t off, len;        /* the record's bytes in the batch */
    uid_t uid;              /* counted against this user */
    struct sk_inode *in;    /* closes.log: its inode (coalesced per inode), NULL otherwise */
    uint64_t path;          /* with in: a hash of the path the record names */
};
enum { LOG_CLOSES, LOG_READS, LOG_COUNT };
void logs_start(const struct skfs_config *cfg);
/* Append the batch's records that fit (the log's cap, the user's share, the space left) in
 * one write; a CLOSE record of an inode the current log holds one of, for the same path, is
 * skipped. */
void log_append(int which, const char *buf, const struct log_rec *recs, size_t n);
uint64_t path_hash(const char *path);
/* The CLOSE record of a handle that created, truncated or wrote its file. */
void close_record(struct sk_file *fh);
int logs_stats(uid_t caller, char **out, size_t *len);

/* namespace.c */
void sk_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev);
void sk_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void sk_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name);
void sk_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char *name);
void sk_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void sk_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void sk_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
               const char *newname, unsigned int flags);
void sk_readlink(fuse_req_t req, fuse_ino_t ino);
void sk_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void sk_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
                struct fuse_file_info *fi);
void sk_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
                    struct fuse_file_info *fi);
void sk_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void sk_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void sk_statfs(fuse_req_t req, fuse_ino_t ino);
void sk_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                 size_t size, int flags);
void sk_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void sk_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void sk_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);

/* layout.c */
bool ost_failed(uint32_t ost);
void scan_osts(void);
void *watch_osts(void *arg);
int object_name(char *buf, size_t len, const struct sk_obj *obj);
int open_object(const struct sk_obj *obj, int flags);
int read_lov_fd(int fd, char **raw, size_t *len);
int read_lov_path(const char *path, char **raw, size_t *len);
int parse_lov(const char *raw, size_t len, struct sk_lov *lov, const struct sk_inode *in);
void delete_objects(const char *raw, size_t len, ino_t ino);
void view_put(struct sk_view *v);
int view_get(struct sk_file *fh, struct sk_view **out);
void view_reset(struct sk_file *fh);
int assign_layout(int pfd, int fd, uid_t uid, gid_t gid);
int relayout_empty(struct sk_inode *in, const char *path, int stripe_count,
                   uint64_t stripe_size, char pool[128]);
int mark_stale(int fd, const char *raw, size_t rawlen, const bool *stale,
               const struct sk_inode *in);
/* Delete the objects of removed files named in store_root/doomed/ whose OST `ost` is up (every
 * OST that is up: -1). */
void doomed_sweep(int ost);
bool some_mirror_covers(const struct sk_lov *lov, const bool *ok, uint64_t lo, uint64_t hi);

/* change.c (docs/mount.rst "All or nothing"); callers of truncate_locked hold the inode lock */
/* Truncate the file (its MDT inode open as `fd`) to `size`, the objects it opens counted
 * against `uid`: 0, or -errno with nothing changed (EIO: an object to cut is on a failed OST
 * and no other mirror takes the truncate). */
int truncate_locked(struct sk_inode *in, int fd, off_t size, uid_t uid);
void sk_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
              struct fuse_file_info *fi);
void sk_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                  struct fuse_file_info *fi);

/* data.c */
/* Give the objects of `in` (its MDT inode open as `fd`) its new owner or group ((uid_t)-1,
 * (gid_t)-1: unchanged); their mode stays 0600 (docs/security.rst). */
int chown_objects(struct sk_inode *in, int fd, uid_t uid, gid_t gid);
struct qos_plan;
int read_pieces(struct sk_view *v, char *buf, uint64_t base, uint64_t *cur, uint64_t end,
                const struct qos_plan *plan, int prefer_mirror, uint32_t *ost_out,
                const struct sk_inode *in);
void sk_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void sk_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);

/* dispatch.c */
#define SK_DISPATCH_XATTR "user.scratchkeeper.dispatch"  /* read-only, on the mount's root */
#define SK_STRIPE_XATTR "user.scratchkeeper.stripe"  /* a directory's default layout (dirlov) */
/* Start (the policy from SK_MOUNT_DISPATCH, the pool) and stop read dispatch. */
int dispatch_start(const struct skfs_config *cfg, char *err, size_t errlen);
void dispatch_stop(void);
/* pread n bytes of an object of OST `ost` at oo into dst whole (zeros past its end), timed
 * into the OST's figures; `queued`: the bytes were counted in flight already. 0 or -errno. */
int ost_read(int fd, char *dst, uint64_t n, off_t oo, uint32_t ost, bool queued);
/* Fill buf (file bytes [off, end)) by dispatch: 0 done, 1 when the request is not for
 * dispatch or a piece failed (the per-piece path reads it all again). */
int dispatch_read(struct sk_view *v, char *buf, uint64_t off, uint64_t end,
                  const struct sk_inode *in);
/* The counters as JSON text (malloc'd). */
int dispatch_stats(char **out, size_t *len);

/* Fill buf (file bytes [off, end)) from mirror `mirror` alone, each object's bytes one preadv
 * and the objects read in parallel: 0 done, 1 when a piece of it cannot be read (the per-piece path reads). */
int dispatch_mirror(struct sk_view *v, char *buf, uint64_t off, uint64_t end, uint32_t mirror,
                    const struct sk_inode *in);
/* A request of an unmirrored file over several of its objects: dispatch_mirror of its one
 * mirror (each object's bytes one preadv, the objects in parallel by the read pool). 0 done,
 * 1 when not such a request, no pool, or a piece failed (the per-piece path reads). */
int dispatch_striped(struct sk_view *v, char *buf, uint64_t off, uint64_t end,
                     const struct sk_inode *in);

/* hybrid.c: hybrid replicas, a request to the mirror the layout paper's model finds cheapest */
#define SK_HYBRID_XATTR "user.scratchkeeper.hybrid"  /* read-only, on the mount's root */
struct hybrid_seen {
    unsigned readers;       /* processes with a read in flight on the mount */
    unsigned files;         /* files with a read in flight */
};
int hybrid_start(const struct skfs_config *cfg);
void hybrid_stop(void);
/* A read by `pid` of `in` starts (what is in flight then, in *seen) and ends. */
void hybrid_enter(pid_t pid, struct sk_inode *in, struct hybrid_seen *seen);
void hybrid_leave(pid_t pid, struct sk_inode *in);
/* The component (of the mirror) with the lowest modelled cost for [off, end) when the usable
 * mirrors covering `off` differ in layout; -1 when they do not (or hybrid is off). */
int hybrid_choose(const struct sk_view *v, uint64_t off, uint64_t end,
                  const struct hybrid_seen *seen, bool random, bool write,
                  const struct sk_inode *in);
void hybrid_invalidated(void);
int hybrid_stats(char **out, size_t *len);

/* wait.c: a read's wait on a stripe no mirror holds */
struct sk_wait {
    double deadline;        /* 0 until the first wait */
    bool reported;          /* recoveryd was told */
};
double monotonic(void);
/* Whether recoveryd marked the file (its MDT inode open as `fd`) lost. */
bool marked_lost(int fd);
/* The scratch path of the MDT inode open as `fd` (for recoveryd and the logs), or false. */
bool scratch_path(int fd, char *out, size_t outlen);
/* qos.c: read QoS admission and online retrieval */
struct qos_ticket {
    bool active;
    int64_t interval;
    double admitted_at;
};
int qos_start(const struct skfs_config *cfg, char *err, size_t errlen);
void qos_stop(void);
/* 1: admitted (wait done); 0: the request is not under QoS */
int qos_admit(fuse_req_t req, unsigned copies, uint64_t buckets, struct qos_ticket *t);
void qos_done(const struct qos_ticket *t);
/* Of n candidate OSTs, the index of the one sent the fewest admitted pieces this interval
 * (the first on ties), that piece counted on it. */
unsigned qos_choose(const uint32_t *osts, unsigned n);
/* One piece of an admitted request: the copies that can serve it, and the one chosen. */
#define QOS_MAX_COPIES 8
struct qos_item {
    uint64_t start;
    unsigned n, chosen;
    uint32_t comps[QOS_MAX_COPIES], osts[QOS_MAX_COPIES];
};
struct qos_plan {
    struct qos_item *items;     /* in file order */
    unsigned n;
};
/* Choose a copy for each item, together with the pieces of requests admitted at the same
 * moment (online: within qos.batch; qos.retrieval = "interval": in the same interval,
 * `admitted`, the call returning at the start of the next one): the greatest number of
 * pieces on one OST this interval made as small as it can be (alternating paths, as
 * design-theoretic retrieval). */
void qos_assign(struct qos_item *items, unsigned n, int64_t admitted);
int qos_stats(char **out, size_t *len);
#define SK_QOS_XATTR "user.scratchkeeper.qos"   /* read-only, on the mount's root */

/* reads.c: read records for tiering (reads.log) */
size_t encode_path(const char *path, char *out);  /* %XX-encoded into out (3x + 1 bytes) */
void reads_count(struct sk_inode *in, uint64_t bytes, uid_t reader);
void reads_flush_inode(struct sk_inode *in);       /* caller holds table_lock */
int reads_start(const struct skfs_config *cfg, char *err, size_t errlen);
void reads_stop(void);
/* The read of `fh` at file offset `cur` needs OST `ost`, failed, and no mirror holds the
 * stripe: wait one slice (recoveryd, or the OST's return), then forget the file's view so its
 * objects are opened again. 0: read again; -EIO: past mount.recovery_timeout, the caller
 * interrupted or the session ending. */
int wait_for_stripe(fuse_req_t req, struct sk_file *fh, struct sk_wait *w, uint64_t cur,
                    uint32_t ost);

#endif
