/* The scratch mount's FUSE file system (docs/mount.rst): the libfuse3 low-level operations
 * over the MDT tree and the OST objects, run by skfs_run(). */
#ifndef SKFS_H
#define SKFS_H

#include <stdbool.h>
#include <sys/types.h>
#include <stddef.h>
#include <stdint.h>

/* Called from a request thread that needs a stripe no mirror holds: report the loss of
 * `ost` on `path` to recoveryd (when `report`) and wait at most `timeout` seconds for it to
 * be patched. `path` is NULL when the file has no name left. */
typedef void (*skfs_recover_fn)(void *ctx, const char *path, unsigned ost, double timeout,
                                bool report);

/* A new file's OSTs by the store's placement (storage.placement = suora): up to `max` OST
 * indices for the file whose first object is `first_id`, `stripe_count` stripes (-1: all), in
 * pool `pool` (NULL: none). The count written, or -1 to use the mount's own round-robin. */
typedef int (*skfs_place_fn)(void *ctx, const char *first_id, int stripe_count,
                             const char *pool, unsigned *osts, unsigned max);

struct skfs_config {
    const char *mountpoint;
    const char *mdt;            /* store_root/mdt */
    const char *store_root;
    const char *scratch_root;
    unsigned ost_count;
    int stripe_count;           /* -1: every healthy OST */
    uint64_t stripe_size;
    unsigned threads;
    double attr_timeout;
    unsigned max_request;
    double recovery_timeout;
    uint64_t dispatch_min_bytes; /* reads this large over several mirrors: the solver (0: never) */
    double read_log_interval;   /* seconds between read records in reads.log (0: none) */
    uint64_t log_max_bytes;     /* closes.log and reads.log: at most this many bytes each */
    bool debug;
    /* the store's OST pools (storage.pools): a directory default naming one places new
     * files on its OSTs only (lfs setstripe -p) */
    unsigned npools;
    struct skfs_pool {
        char name[128];
        unsigned count;
        unsigned *osts;         /* ascending */
    } *pools;
    skfs_recover_fn recover;
    void *recover_ctx;
    skfs_place_fn place;        /* NULL: round-robin */
    void *place_ctx;
    /* read QoS (qos.c): 0 off, 1 deterministic, 2 statistical admission */
    int qos_mode;
#define QOS_RETRIEVAL_ONLINE 0
#define QOS_RETRIEVAL_INTERVAL 1
    unsigned qos_copies, qos_accesses;
    double qos_interval, qos_epsilon;
    double qos_batch;           /* seconds requests admitted together wait to be assigned */
    int qos_retrieval;          /* QOS_RETRIEVAL_ONLINE or _INTERVAL (qos.retrieval) */
    unsigned qos_nprob;         /* P_k for k = 1..qos_nprob (statistical) */
    double *qos_prob;
    unsigned qos_nusers;        /* the users under QoS; none: every user */
    uid_t *qos_users;
    /* hybrid replicas (hybrid.c): the layout paper's model: e, v, alpha sequential, alpha random,
     * beta read, beta write ([layout]); model_on false: every mirror is read as before */
    bool model_on;
    double model[6];
};

/* Mount, serve until unmounted or signalled (SIGINT, SIGTERM, SIGHUP), unmount.
 * 0, or -errno with a message in err. */
int skfs_run(const struct skfs_config *config, char *err, size_t errlen);

#endif
