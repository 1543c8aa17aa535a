"""Serving the scratch mount: :func:`serve` checks the mount point, opens the store once (so
the MDT and OST directories exist and garbage collection has run), gathers what the C side takes
(QoS settings, the layout model's constants, the callbacks to recoveryd and to the store's
placement) and runs the C session loop (:mod:`._fuse`) with the GIL released until the file
system is unmounted (``fusermount3 -u``) or the process gets SIGINT, SIGTERM or SIGHUP.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

from ..config import SiteConfig
from ..errors import ConfigError, InputError, StorageError

# log lines carry the package's name (scratchkeeper.mount), the one its users know
log = logging.getLogger(__package__)

MDT = "mdt"


def check_mount_point(mountpoint: str) -> bool:
    """Refuse a mount point that is not an empty directory; True when a stale FUSE mount of a
    killed instance sits there (``ENOTCONN``) and must be detached first."""
    try:
        st = os.stat(mountpoint)
    except OSError as err:
        if err.errno == errno.ENOTCONN:
            return True
        raise InputError(f"mount point {mountpoint}: {err.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"mount point {mountpoint}: not a directory")
    if _mounted_at(mountpoint):
        try:
            os.statvfs(mountpoint)  # a stat may come from attributes the kernel still caches
        except OSError as err:
            if err.errno == errno.ENOTCONN:
                return True
        raise InputError(f"mount point {mountpoint}: something is mounted there already")
    with os.scandir(mountpoint) as entries:
        if next(entries, None) is not None:
            raise InputError(f"mount point {mountpoint}: not an empty directory")
    return False


def _mounted_at(mountpoint: str) -> bool:
    """Whether /proc/self/mountinfo lists a mount at ``mountpoint``."""
    target = os.path.realpath(mountpoint)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as info:
        for line in info:
            fields = line.split(" ")
            if len(fields) > 4 and _unescape(fields[4]) == target:
                return True
    return False


def _unescape(field: str) -> str:
    """A mountinfo path: spaces, tabs, newlines and backslashes are octal escapes."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field


def detach_stale(mountpoint: str) -> None:
    """Lazily unmount the dead FUSE mount of a killed instance (``fusermount3 -u -z``)."""
    from ..runner import run

    log.warning("mount point %s: a stale mount of a killed instance; detaching it", mountpoint)
    run(["fusermount3", "-u", "-z", mountpoint], timeout=30)


#: what the mount's root shows ("mode=O uid=U gid=G"), kept on the MDT directory, which is
#: root's and 0700 itself (docs/mount.rst "Permissions and ACLs"; native/access.c)
ROOT_XATTR = "trusted.scratchkeeper.root"
ROOT_DEFAULT = (0o755, 0, 0)


def prepare_store(config: SiteConfig) -> tuple[Path, dict[str, tuple[int, ...]]]:
    """Open the store once (OST directories, garbage collection; the store closes the MDT
    directory to 0700); its MDT and its pools."""
    if config.storage.backend != "local":
        raise ConfigError(f"key 'storage.backend': the scratch mount serves the local store, "
                          f"not {config.storage.backend!r}", path=config.source)
    from ..storage import open_backend

    mdt = Path(config.storage.store_root) / MDT
    shown = _root_shown(mdt)  # before the open closes a directory of an older store
    backend = open_backend(config)
    _ = backend.db  # opening creates the OST directories and runs garbage collection
    if backend.read_only:
        raise StorageError(f"the store at {config.storage.store_root} cannot be written by this "
                           f"process (uid {os.geteuid()}): the mount runs as the store's owner")
    try:
        mdt.mkdir(mode=0o700)
        os.chmod(mdt, 0o700)
    except FileExistsError:
        pass
    if shown is not None:
        os.setxattr(mdt, ROOT_XATTR, "mode={:04o} uid={} gid={}".format(*shown).encode())
    return mdt, backend.pools


def _root_shown(mdt: Path) -> tuple[int, int, int] | None:
    """The mode, owner and group the mount's root is to show when the MDT directory has no
    ``ROOT_XATTR`` yet (None when it has one): the directory's own when others could enter it
    (a store from before directories were closed: what users saw), else 0755 root's."""
    try:
        os.getxattr(mdt, ROOT_XATTR)
        return None
    except FileNotFoundError:
        return ROOT_DEFAULT
    except OSError as err:
        if err.errno != errno.ENODATA:
            raise StorageError(f"{mdt}: {ROOT_XATTR}: {err.strerror}") from None
    info = os.stat(mdt)
    if not info.st_mode & 0o077:
        return ROOT_DEFAULT
    return stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid


def _recover_callback(config: SiteConfig):
    """What a read calls when a stripe no mirror holds is needed: ``report`` once, then
    ``wait`` on recoveryd (one request per connection) for at most ``timeout`` seconds (one
    slice of the read's wait; docs/mount.rst, "Transparent recovery").

    It returns as soon as recoveryd says the file is whole, and at once when recoveryd says it
    is lost (the C side then sees the file's ``user.scratchkeeper.lost`` mark and fails the
    read). Otherwise it never returns early: a wait recoveryd answered before its timeout
    without the file being whole sleeps the rest of the slice, and any failure (recoveryd not
    running, an error) is logged and sleeps ``min(timeout, 0.5)`` seconds, so that the read
    polls the OSTs and recoveryd at that pace, never in a busy loop, until
    ``mount.recovery_timeout``.
    """
    import time

    from ..recovery import records
    from ..recovery.client import RecoveryClient

    def recover(path: str, ost_index: int, timeout: float, report: bool) -> None:
        started = time.monotonic()
        client = RecoveryClient.for_site(config, connect_timeout=min(timeout, 5.0))
        try:
            if report:
                client.report(path, ost_index, timeout=timeout)
                log.info("%s: reported OST %d to recoveryd", path, ost_index)
            status = client.wait(path, max(0.0, timeout - (time.monotonic() - started)))
        except Exception as err:  # noqa: BLE001 - a C request thread is waiting for us
            log.warning("%s: recoveryd: %s", path, err)
            time.sleep(max(0.0, min(timeout, 0.5) - (time.monotonic() - started)))
            return
        if status.get("whole"):
            return
        if status.get("state") == records.LOST:
            log.warning("%s: recoveryd reports it lost: %s", path, status.get("reason", ""))
            return
        time.sleep(max(0.0, timeout - (time.monotonic() - started)))

    return recover


def _place_callback(config: SiteConfig):
    """With ``storage.placement = "suora"``: what the mount calls for a new file's OSTs, the
    store's own SUORA placement (``docs/placement.rst``), so files created through the mount
    are placed as files the store creates. None otherwise (the mount's round-robin). An
    answer the mount cannot use, or an error (logged), makes it place the file itself."""
    if config.storage.placement != "suora":
        return None
    import threading

    from ..storage import open_backend

    backend = open_backend(config)
    lock = threading.Lock()

    def place(first_id: str, stripe_count: int, pool: str | None) -> tuple[int, ...] | None:
        try:
            with lock:
                return backend.place_new_file(first_id, stripe_count, pool)
        except Exception as err:  # noqa: BLE001 - a C request thread is creating a file
            log.warning("placing a new file (pool %s): %s; the mount places it", pool, err)
            return None

    return place


QOS_MODES = {"off": 0, "deterministic": 1, "statistical": 2}
QOS_RETRIEVALS = {"online": 0, "interval": 1}


def qos_settings(config: SiteConfig) -> tuple | None:
    """What the C side's read QoS takes (docs/qos.rst "On the mount"): mode, c, M, T, epsilon,
    P_k sampled for the (N, c, 1) design of the store's OSTs (statistical admission), and the
    uids under QoS. None when ``qos.admission`` is off."""
    qos = config.qos
    if qos.admission == "off":
        return None
    import pwd

    from ..errors import ScratchkeeperError

    uids = []
    for user in qos.users:
        if user.isdigit():
            uids.append(int(user))
            continue
        try:
            uids.append(pwd.getpwnam(user).pw_uid)
        except KeyError:
            raise ConfigError(f"key 'qos.users': no user {user!r}", path=config.source) from None
    probabilities: list[float] = []
    if qos.admission == "statistical":
        from ..qos.admission import sample_retrieval_probabilities
        from ..qos.designs import design_for
        from ..qos.placement import design_allocation

        devices = config.storage.ost_count
        try:
            allocation = design_allocation(design_for(devices, qos.copies))
        except ScratchkeeperError as err:
            raise ConfigError(f"key 'qos.copies': statistical admission samples P_k on the "
                              f"design of the store's {devices} OSTs: {err}",
                              path=config.source) from None
        found = sample_retrieval_probabilities(allocation, qos.accesses,
                                               devices * qos.accesses, qos.samples)
        probabilities = [found[k] for k in range(1, devices * qos.accesses + 1)]
    from ..qos.designs import retrieval_guarantee

    limit = retrieval_guarantee(qos.copies, qos.accesses)
    if qos.retrieval == "interval" and config.mount.threads < limit:
        # each admitted read holds a request thread until the next interval: the reads of a
        # full interval beyond the threads stay in the kernel and are served intervals late
        log.warning("%s: mount.threads = %d is below S = %d, the reads qos.retrieval = "
                    "\"interval\" holds until the next interval; a full interval's reads beyond "
                    "%d are served late", config.source, config.mount.threads, limit,
                    config.mount.threads)
    return (QOS_MODES[qos.admission], qos.copies, qos.accesses, float(qos.interval),
            float(qos.epsilon), min(float(qos.batch), qos.interval / 4),
            QOS_RETRIEVALS[qos.retrieval], tuple(probabilities), tuple(uids))


def model_constants(config: SiteConfig) -> tuple[float, ...]:
    """The layout paper's model constants for the mount's choice of a hybrid file's mirror
    (e, v, alpha sequential, alpha random, beta read, beta write; ``[layout]``)."""
    from ..advisor import params_from_config

    params = params_from_config(config.layout)
    return (params.e, params.v, params.alpha_sequential, params.alpha_random,
            params.beta_read, params.beta_write)


def serve(config: SiteConfig, mountpoint: str, *, debug: bool = False) -> None:
    """Mount the store at ``mountpoint`` and serve it in the foreground until unmounted."""
    if os.geteuid() != 0:
        raise InputError("scratchkeeper mount runs as root (it mounts with allow_other and "
                         "gives new files their creators' owners)")
    mountpoint = os.path.abspath(mountpoint)
    if check_mount_point(mountpoint):
        detach_stale(mountpoint)
        check_mount_point(mountpoint)
    mdt, pools = prepare_store(config)
    qos = qos_settings(config)
    from . import _fuse

    storage, mount = config.storage, config.mount
    log.info("mounting %s at %s", mdt, mountpoint)
    try:
        _fuse.run(mountpoint=mountpoint, mdt=str(mdt), store_root=storage.store_root,
                  scratch_root=storage.scratch_root.rstrip("/") or "/",
                  ost_count=storage.ost_count,
                  stripe_count=storage.stripe_count, stripe_size=storage.stripe_size,
                  threads=mount.threads, attr_timeout=float(mount.attr_timeout),
                  max_request=mount.max_request,
                  recovery_timeout=float(mount.recovery_timeout), debug=debug,
                  dispatch_min_bytes=mount.dispatch_min_bytes,
                  pools=tuple(pools.items()),
                  read_log_interval=float(mount.read_log_interval),
                  log_max_bytes=mount.log_max_bytes,
                  place=_place_callback(config), qos=qos, model=model_constants(config),
                  recover=_recover_callback(config))
    except OSError as err:
        raise StorageError(f"mount {mountpoint}: {err.strerror}") from None
