/* Who may reach what through the scratch mount (docs/mount.rst "Permissions and ACLs",
 * docs/security.rst):
 *
 *   - the mount's root: store_root/mdt is root's and 0700 (no user resolves a name under it
 *     outside the mount), so the mode, owner and group the mount's root shows are its own,
 *     kept in the MDT directory's trusted.scratchkeeper.root ("mode=O uid=U gid=G");
 *   - the mode of a new inode: the kernel hands the mount the caller's mode and umask
 *     (FUSE_CAP_DONT_MASK, implied by FUSE_CAP_POSIX_ACL); the umask is applied unless the
 *     parent directory has a default ACL, which the MDT's file system then applies itself
 *     (inherited as the new inode's ACLs), as ext4 does for a local caller;
 *   - extended attribute names: security.* and trusted.* are never set or removed through
 *     the mount (the store and the mount set theirs on the MDT directly), trusted.* is neither
 *     read nor listed for a caller who is not root, and the POSIX ACL attributes pass through
 *     to the MDT inode (where the kernel reads them to check every open and lookup).
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314

#include "skfs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#define ROOT_DEFAULT_MODE 0755

static bool prefixed(const char *name, const char *prefix)
{
    return strncmp(name, prefix, strlen(prefix)) == 0;
}

static bool acl_name(const char *name)
{
    return strcmp(name, ACL_ACCESS) == 0 || strcmp(name, ACL_DEFAULT) == 0;
}

/* -- the mount's root ------------------------------------------------------------------------ */

void root_load(void)
{
    char path[64], text[128];
    procpath(fs.root.fd, path);
    pthread_mutex_init(&fs.root_lock, NULL);
    fs.root_mode = ROOT_DEFAULT_MODE;
    fs.root_uid = 0;
    fs.root_gid = 0;
    ssize_t n = getxattr(path, SK_ROOT_XATTR, text, sizeof text - 1);
    if (n < 0) {
        logmsg("%s: no %s: the root shows 0%o, root's", fs.cfg.mdt, SK_ROOT_XATTR,
               ROOT_DEFAULT_MODE);
        return;
    }
    text[n] = '\0';
    unsigned mode, uid, gid;
    char end;
    if (sscanf(text, "mode=%o uid=%u gid=%u%c", &mode, &uid, &gid, &end) != 3 || mode > 07777) {
        logmsg("%s: %s is not \"mode=O uid=U gid=G\": the root shows 0%o, root's", fs.cfg.mdt,
               SK_ROOT_XATTR, ROOT_DEFAULT_MODE);
        return;
    }
    fs.root_mode = (mode_t)mode;
    fs.root_uid = (uid_t)uid;
    fs.root_gid = (gid_t)gid;
}

void root_attr(struct stat *st)
{
    pthread_mutex_lock(&fs.root_lock);
    st->st_mode = (st->st_mode & S_IFMT) | fs.root_mode;
    st->st_uid = fs.root_uid;
    st->st_gid = fs.root_gid;
    pthread_mutex_unlock(&fs.root_lock);
}

/* chmod and chown of the mount's root (the kernel checked the caller may): kept in the MDT
 * directory's attribute, never on the directory itself. 0 or -errno. */
int root_setattr(const struct stat *attr, int valid)
{
    pthread_mutex_lock(&fs.root_lock);
    mode_t mode = valid & FUSE_SET_ATTR_MODE ? attr->st_mode & 07777 : fs.root_mode;
    uid_t uid = valid & FUSE_SET_ATTR_UID ? attr->st_uid : fs.root_uid;
    gid_t gid = valid & FUSE_SET_ATTR_GID ? attr->st_gid : fs.root_gid;
    char path[64], text[128];
    procpath(fs.root.fd, path);
    int n = snprintf(text, sizeof text, "mode=%04o uid=%u gid=%u", (unsigned)mode, (unsigned)uid,
                     (unsigned)gid);
    int rc = 0;
    if (setxattr(path, SK_ROOT_XATTR, text, (size_t)n, 0) < 0)
        rc = -errno;
    else {
        fs.root_mode = mode;
        fs.root_uid = uid;
        fs.root_gid = gid;
    }
    pthread_mutex_unlock(&fs.root_lock);
    return rc;
}

/* -- new inodes ------------------------------------------------------------------------------ */

mode_t create_mode(fuse_req_t req, int pfd, mode_t mode, bool *inherits)
{
    char path[64];
    procpath(pfd, path);
    /* what the MDT's file system will do: it inherits whenever the directory has one */
    *inherits = getxattr(path, ACL_DEFAULT, NULL, 0) > 0;
    return *inherits ? mode & 07777 : masked(req, mode) & 07777;
}

mode_t created_mode(int fd, const char *name, mode_t want, bool inherits)
{
    struct stat st;
    if (!inherits || fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW | (*name ? 0 : AT_EMPTY_PATH)) < 0)
        return want;
    return (st.st_mode & 0777) | (want & 07000);
}

/* -- extended attributes --------------------------------------------------------------------- */

int xattr_set_allowed(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    (void)req;
    if (prefixed(name, "security.") || prefixed(name, "trusted."))
        return EPERM;  /* root included: labels and layouts are set on the MDT directly */
    if (prefixed(name, "system.")) {
        if (!acl_name(name))
            return EOPNOTSUPP;
        /* the root's access is its mode alone: an ACL there would be on the MDT directory,
         * opening it to a named user outside the mount */
        return ino == FUSE_ROOT_ID ? EPERM : 0;
    }
    return 0;
}

int xattr_get_allowed(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    if (prefixed(name, "trusted.") && fuse_req_ctx(req)->uid != 0)
        return ENODATA;  /* as the kernel answers a local caller without CAP_SYS_ADMIN */
    if (ino == FUSE_ROOT_ID && acl_name(name))
        return ENODATA;
    return 0;
}

size_t xattr_filter_list(fuse_req_t req, fuse_ino_t ino, char *list, size_t size)
{
    size_t kept = 0;
    for (size_t at = 0; at < size;) {
        const char *name = list + at;
        size_t len = strnlen(name, size - at) + 1;
        if (xattr_get_allowed(req, ino, name) == 0) {
            memmove(list + kept, name, len);
            kept += len;
        }
        at += len;
    }
    return kept;
}

void acl_kill_sgid(fuse_req_t req, const struct sk_inode *in, int fd)
{
    struct stat st;
    if (fstatat(fd, "", &st, AT_EMPTY_PATH) < 0 || !(st.st_mode & S_ISGID) ||
        caller_in_group(req, st.st_gid))
        return;
    char path[64];
    procpath(fd, path);
    if (chmod(path, st.st_mode & 07777 & ~(mode_t)S_ISGID) < 0)
        logmsg("MDT inode %ju: dropping S_ISGID after an ACL change: %s", (uintmax_t)in->ino,
               strerror(errno));
}
