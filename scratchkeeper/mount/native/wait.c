/* The failed-OST wait of a read (docs/mount.rst, "Failed OSTs"): a stripe that no mirror can
 * serve is reported to recoveryd once and waited for in slices of RECOVERY_SLICE seconds (each
 * through the Python callback, skfs_config.recover), the file's objects opened again after
 * every slice, until mount.recovery_timeout, an interrupted caller, the session's end, or
 * recoveryd's word that the file is lost (docs/mount.rst, "Transparent recovery"). */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314

#include "skfs_int.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

bool scratch_path(int fd, char *out, size_t outlen)
{
    char self[64], target[PATH_MAX];
    procpath(fd, self);
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

/* recoveryd's mark on a file it could not patch (recovery/service.py, _mark_lost) */
#define LOST_XATTR "user.scratchkeeper.lost"

/* A slice the callback answered in less than this share of it was not a wait: recoveryd said
 * at once that the file is lost (the callback sleeps at least min(slice, 0.5 s) on anything
 * else that leaves the stripe unreadable: a timeout, recoveryd not running, an error). */
#define EARLY_ANSWER 0.125

bool marked_lost(int fd)
{
    return fgetxattr(fd, LOST_XATTR, NULL, 0) >= 0;
}

double monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int wait_for_stripe(fuse_req_t req, struct sk_file *fh, struct sk_wait *w, uint64_t cur,
                    uint32_t ost)
{
    double now = monotonic();
    if (w->deadline == 0) {
        w->deadline = now + fs.cfg.recovery_timeout;
        logmsg("MDT inode %ju: offset %" PRIu64 " is on failed OST %u and no mirror holds it:"
               " waiting up to %gs for recovery", (uintmax_t)fh->inode->ino, cur, ost,
               fs.cfg.recovery_timeout);
    }
    if (now >= w->deadline || fuse_req_interrupted(req) || fuse_session_exited(fs.se)) {
        logmsg("MDT inode %ju: offset %" PRIu64 " not recovered: EIO",
               (uintmax_t)fh->inode->ino, cur);
        return -EIO;
    }
    double slice = w->deadline - now < RECOVERY_SLICE ? w->deadline - now : RECOVERY_SLICE;
    char path[PATH_MAX];
    if (fs.cfg.recover && scratch_path(fh->fd, path, sizeof path)) {
        fs.cfg.recover(fs.cfg.recover_ctx, path, ost, slice, !w->reported);
        w->reported = true;
        /* lost: recoveryd answered at once and marked the file. The stripe gets one more
         * try (an OST back, a patch committed meanwhile); if it still needs recovery, the
         * deadline has passed and the read fails with EIO now, not at the timeout. */
        if (monotonic() - now < slice * EARLY_ANSWER && marked_lost(fh->fd)) {
            logmsg("MDT inode %ju: recoveryd reports it lost: no wait", (uintmax_t)fh->inode->ino);
            w->deadline = monotonic();
        }
    } else {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    view_reset(fh);  /* open the objects again: a rebuild, or the OST back */
    return 0;
}
