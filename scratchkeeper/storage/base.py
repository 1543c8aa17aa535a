"""The one storage interface: what the planner, the replication daemon and recovery call.

Two backends implement it: :class:`~scratchkeeper.storage.local.LocalStripedStore` (the
embedded striped store) and :class:`~scratchkeeper.storage.lustre.LustreBackend` (drives
``lfs``). Paths are scratch paths; every entry point confines them to ``scratch_root``.

Rebuilding lost stripes (the thesis, §4.6.3) is three steps so that both backends can keep a
reader from ever seeing a half-patched file: :meth:`StorageBackend.begin_rebuild` allocates the
substitute objects and records the intent, :meth:`StorageBackend.write_rebuild` patches byte
ranges into them (only ranges the rebuild lists as lost), and
:meth:`StorageBackend.commit_rebuild` checks every lost byte was written and switches the layout
in one atomic step (local: the file's MDT inode gets the new layout xattr in one
``setxattr``, the rebuild's record dropped in the same namespace transaction; Lustre:
``lfs swap_layouts``).

A caller patching many ranges may write them without journalling each
(``write_rebuild_batch(..., record=False)``) and record them as patched later, many at once
(:meth:`StorageBackend.record_patched`, or ``commit_rebuild(..., patched=...)`` for the last
ones): a journal update costs a few fsyncs, a write does not.
"""

from __future__ import annotations

import abc
import bisect
import concurrent.futures
import os
import posixpath
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field, replace

from ..errors import InputError, ScratchkeeperError, StorageError, TargetUnavailable
from .layout import Extent, FileLayout, LayoutRequest, StripeObject, merge_extents, subtract_extents
from .sources import read_sized, space_errors

# check_osts: threads probing at first, and how long before the rest get a thread each
PROBE_LANES = 4
PROBE_GRACE = 0.05

XATTR_PREFIX = "user.scratchkeeper."
DEFAULT_CHUNK = 4 << 20

#: The extended attributes a caller may name through a backend's ``set_xattr``,
#: ``get_xattr``, ``list_xattrs`` and ``remove_xattr``: every ``user.*`` name, and these
#: ``trusted.*`` names (docs/storage.rst, "Extended attributes"): the record of a staged
#: file's sources that ``stage commit`` writes as root and recovery trusts
#: (``planner.records.write_recovery_record``). Every other ``trusted.*`` name and every
#: ``security.*`` name is refused: the daemons calling these methods run as root, and a name
#: that came from a user (``security.selinux``, ``trusted.overlay.*``) must not become a change
#: only root may make. The store's own attributes (``security.scratchkeeper.lov``, ``.dirlov``,
#: ``.placement``) are set by the store and the mount directly on the MDT, never through these.
XATTR_USER_PREFIX = "user."
XATTR_TRUSTED_NAMES: frozenset[str] = frozenset(
    f"trusted.scratchkeeper.{name}" for name in ("source", "sources", "sha256", "size"))
XATTR_NAME_MAX = 255


def check_xattr_name(name: str) -> None:
    """Refuse (``InputError``) an attribute name outside :data:`XATTR_USER_PREFIX` and
    :data:`XATTR_TRUSTED_NAMES`, or one the kernel could not hold."""
    if not isinstance(name, str) or not (
            (name.startswith(XATTR_USER_PREFIX) and len(name) > len(XATTR_USER_PREFIX))
            or name in XATTR_TRUSTED_NAMES):
        allowed = "a 'user.' name" + "".join(f" or {n!r}" for n in sorted(XATTR_TRUSTED_NAMES))
        raise InputError(f"xattr name {str(name)[:60]!r}: expected {allowed} (security.* and "
                         "trusted.* attributes are the store's own)")
    if len(name.encode()) > XATTR_NAME_MAX or "\x00" in name:
        raise InputError(f"xattr name {name[:40]!r}...: longer than {XATTR_NAME_MAX} bytes or "
                         "holding a NUL")


def xattr_name_listed(name: str) -> bool:
    """Whether ``list_xattrs`` shows the attribute (the names :func:`check_xattr_name` takes)."""
    return (name.startswith(XATTR_USER_PREFIX) and len(name) > len(XATTR_USER_PREFIX)) or \
        name in XATTR_TRUSTED_NAMES

OST_ACTIVE = "active"          # answering
OST_FAILED = "failed"          # known dead (local store: failed by ``fail-ost``)
OST_UNREACHABLE = "unreachable"  # did not answer within the probe timeout
OST_INACTIVE = "inactive"      # administratively deactivated


@dataclass(frozen=True)
class FileStat:
    """What ``stat`` says about a managed file."""

    path: str
    size: int
    uid: int
    gid: int
    mode: int
    mtime: float


@dataclass(frozen=True)
class OstStatus:
    """One OST: its index, state and space in bytes (``None`` where the state hides them)."""

    ost_index: int
    name: str
    state: str
    total_bytes: int | None = None
    used_bytes: int | None = None
    available_bytes: int | None = None
    detail: str = ""

    @property
    def healthy(self) -> bool:
        return self.state == OST_ACTIVE

    def to_dict(self) -> dict:
        return {"ost_index": self.ost_index, "name": self.name, "state": self.state,
                "total_bytes": self.total_bytes, "used_bytes": self.used_bytes,
                "available_bytes": self.available_bytes, "detail": self.detail}


@dataclass
class Rebuild:
    """An in-flight rebuild of a file's stripes on substitute OSTs (``failed -> substitute``).

    ``lost`` are the byte ranges the caller must patch; ``patched`` grows as it does. The record
    is persisted by the backend, so a restarted recovery service finds it in
    :meth:`StorageBackend.open_rebuilds` and either finishes or aborts it.
    """

    rebuild_id: str
    path: str
    substitutes: dict[int, int]
    file_size: int
    base_layout_gen: int
    new_layout: FileLayout
    lost: list[Extent]
    patched: list[Extent] = field(default_factory=list)
    created: float = field(default_factory=time.time)
    # ``lost`` merged, and the starts of its extents: a patched range is checked by bisection
    _lost_index: tuple[list[Extent], list[Extent], list[int]] | None = field(
        default=None, init=False, repr=False, compare=False)

    @property
    def missing(self) -> list[Extent]:
        """Lost ranges not patched yet."""
        return subtract_extents(self.lost, self.patched)

    def within_lost(self, extent: Extent) -> bool:
        """Whether every byte of ``extent`` lies in a lost range (an empty one does)."""
        if self._lost_index is None or self._lost_index[0] is not self.lost:
            merged = merge_extents(self.lost)
            self._lost_index = (self.lost, merged, [e.offset for e in merged])
        _, merged, starts = self._lost_index
        index = bisect.bisect_right(starts, extent.offset) - 1
        return extent.length <= 0 or (index >= 0 and extent.end <= merged[index].end)

    def to_dict(self) -> dict:
        return {"rebuild_id": self.rebuild_id, "path": self.path,
                "substitutes": {str(k): v for k, v in self.substitutes.items()},
                "file_size": self.file_size, "base_layout_gen": self.base_layout_gen,
                "new_layout": self.new_layout.to_dict(),
                "lost": [list(e) for e in self.lost], "patched": [list(e) for e in self.patched],
                "created": self.created}

    @classmethod
    def from_dict(cls, raw: dict) -> Rebuild:
        return cls(rebuild_id=raw["rebuild_id"], path=raw["path"],
                   substitutes={int(k): int(v) for k, v in raw["substitutes"].items()},
                   file_size=int(raw["file_size"]), base_layout_gen=int(raw["base_layout_gen"]),
                   new_layout=FileLayout.from_dict(raw["new_layout"]),
                   lost=[Extent(*e) for e in raw["lost"]],
                   patched=[Extent(*e) for e in raw["patched"]],
                   created=float(raw.get("created", 0.0)))


def pwrite_all(handle: int, data, offset: int) -> None:
    """Write every byte of ``data`` at ``offset`` (``os.pwrite`` may write fewer)."""
    view, written = memoryview(data), 0
    while written < len(view):
        written += os.pwrite(handle, view[written:], offset + written)


def pwritev_all(handle: int, buffers: list, offset: int) -> None:
    """Write ``buffers`` one after another from ``offset`` in as few ``pwritev`` calls as the
    kernel takes (it may write fewer bytes than asked; the rest follows)."""
    views = [memoryview(b) for b in buffers]
    while views:
        written = os.pwritev(handle, views, offset)
        offset += written
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if written:
            views[0] = views[0][written:]


class ScratchPaths:
    """Confines paths to the scratch root: relative paths are taken from it, ``..`` is refused."""

    def __init__(self, scratch_root: str):
        root = posixpath.normpath(scratch_root)
        if not posixpath.isabs(root):
            raise InputError(f"scratch_root {scratch_root!r} must be an absolute path")
        self.root = root

    def resolve(self, path: str | os.PathLike) -> str:
        """The absolute, normalised scratch path of ``path``; refuses anything outside the root."""
        text = os.fspath(path)
        if not text or "\x00" in text:
            raise InputError(f"invalid path {text!r}")
        if ".." in text.split("/"):
            raise InputError(f"{text}: '..' is not allowed in a scratch path")
        full = posixpath.normpath(text if posixpath.isabs(text) else posixpath.join(self.root, text))
        if full != self.root and not full.startswith(self.root.rstrip("/") + "/"):
            raise InputError(f"{text}: outside the scratch root {self.root}")
        return full

    def relative(self, path: str | os.PathLike) -> str:
        """``path`` relative to the scratch root ('' for the root itself)."""
        full = self.resolve(path)
        return "" if full == self.root else full[len(self.root.rstrip("/")) + 1:]

    def absolute(self, relative: str) -> str:
        return posixpath.join(self.root, relative) if relative else self.root


class StorageBackend(abc.ABC):
    """One interface over the local striped store and Lustre; constructors run no command."""

    name: str = "abstract"

    def __init__(self, scratch_root: str, *, default_stripe_count: int, default_stripe_size: int):
        self.paths = ScratchPaths(scratch_root)
        self.default_stripe_count = default_stripe_count
        self.default_stripe_size = default_stripe_size

    @property
    def scratch_root(self) -> str:
        return self.paths.root

    # -- namespace -----------------------------------------------------------------------------
    @abc.abstractmethod
    def create(self, path: str, request: LayoutRequest = LayoutRequest(), *,
               owner: tuple[int, int] | None = None, mode: int = 0o644) -> FileLayout:
        """Create an empty file with the requested layout; an existing file is an error."""

    @abc.abstractmethod
    def import_file(self, path: str, *, stripe_count: int | None = None,
                    stripe_size: int | None = None,
                    owner: tuple[int, int] | None = None, replace: bool = False,
                    expect_uid: int | None = None) -> FileLayout:
        """Make the file a data job wrote at this scratch path a managed file; return its layout.

        ``replace``: a different managed file already at ``path`` is superseded atomically.
        ``expect_uid``: acting for that user, the file (not followed if a link) must be theirs,
        else PermissionDenied and nothing changes.
        """

    def put_file(self, path: str, source_fd: int, size: int,
                 request: LayoutRequest = LayoutRequest(), *, label: str | None = None,
                 owner: tuple[int, int] | None = None, mode: int = 0o644) -> FileLayout:
        """A new file at ``path`` holding the ``size`` bytes of the open regular file
        ``source_fd`` (``label`` names it in errors; see :mod:`.sources`); a failure (a full
        file system, a source that reads shorter or longer) leaves nothing at ``path``."""
        layout = self.create(path, request, owner=owner, mode=mode)
        try:
            with space_errors(layout.path):
                for offset, data in read_sized(source_fd, size, label or layout.path,
                                               DEFAULT_CHUNK):
                    self.write(layout.path, offset, data)
        except BaseException:
            self.remove(layout.path)
            raise
        return layout

    @abc.abstractmethod
    def layout(self, path: str) -> FileLayout:
        """The file's layout: components in order with their OST lists, mirrors included."""

    @abc.abstractmethod
    def stat(self, path: str) -> FileStat:
        """Size, owner, mode and mtime of a managed file."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """Whether a managed file exists at ``path``."""

    @abc.abstractmethod
    def remove(self, path: str) -> None:
        """Remove the file and all its objects."""

    @abc.abstractmethod
    def list_dir(self, path: str = "") -> list[str]:
        """Names directly below a scratch directory (sub-directories end with '/')."""

    @abc.abstractmethod
    def files_on_ost(self, ost_index: int) -> list[str]:
        """Every file with an object on ``ost_index`` (``lfs find --ost``): what a failure hits."""

    # -- data ----------------------------------------------------------------------------------
    @abc.abstractmethod
    def read(self, path: str, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset+length)`` (short at end of file).

        A stripe no mirror can serve raises :class:`TargetUnavailable` naming the OST.
        """

    @abc.abstractmethod
    def write(self, path: str, offset: int, data: bytes) -> None:
        """Write ``data`` at ``offset`` (every mirror is updated), growing the file if needed."""

    def open_reader(self, path: str, *, offset: int = 0, length: int | None = None,
                    chunk_size: int = DEFAULT_CHUNK) -> Iterator[bytes]:
        """Stream a byte range in chunks; a failed stripe raises :class:`TargetUnavailable`.

        The caller knows how far it got, so it can wait for recovery and resume from there.
        """
        size = self.stat(path).size
        end = size if length is None else min(size, offset + length)
        position = offset
        while position < end:
            chunk = self.read(path, position, min(chunk_size, end - position))
            if not chunk:
                break
            yield chunk
            position += len(chunk)

    # -- extended attributes (the thesis, §4.6.1: recovery hints) ------------------------------
    @abc.abstractmethod
    def set_xattr(self, path: str, name: str, value: bytes) -> None:
        """Set an extended attribute such as ``user.scratchkeeper.source``."""

    def set_xattrs(self, path: str, values: dict[str, bytes]) -> None:
        """Set several extended attributes (a backend may do it in one step); a name outside
        the list refuses them all, before any is set."""
        for name in values:
            check_xattr_name(name)
        for name, value in values.items():
            self.set_xattr(path, name, value)

    @abc.abstractmethod
    def get_xattr(self, path: str, name: str) -> bytes | None:
        """An extended attribute's value, or None when unset."""

    @abc.abstractmethod
    def list_xattrs(self, path: str) -> dict[str, bytes]:
        """Every ``user.*`` extended attribute of the file."""

    @abc.abstractmethod
    def remove_xattr(self, path: str, name: str) -> None:
        """Remove an extended attribute (absent is not an error)."""

    # -- OSTs ----------------------------------------------------------------------------------
    @abc.abstractmethod
    def list_osts(self) -> list[OstStatus]:
        """Every OST with its last known state and space, without probing it."""

    @abc.abstractmethod
    def _probe_ost(self, ost: OstStatus, timeout: float) -> OstStatus:
        """Check one OST now; may block up to ``timeout`` (the caller enforces the deadline)."""

    def check_osts(self, timeout: float, only: Collection[int] | None = None) -> list[OstStatus]:
        """Probe every OST (or those in ``only``); returns after at most ``timeout`` seconds
        whatever their number.

        The probes run in ``PROBE_LANES`` threads; those not started after ``PROBE_GRACE``
        seconds (lanes held by probes that hang) get a thread each, so that every OST is
        probed within the timeout. An OST whose probe has not answered by the deadline is
        reported ``unreachable``.
        """
        osts = [o for o in self.list_osts() if only is None or o.ost_index in only]
        if not osts:
            return []
        deadline = time.monotonic() + timeout
        # a few lanes first: a thread per OST costs more than the probes of healthy OSTs
        lanes = concurrent.futures.ThreadPoolExecutor(max_workers=min(PROBE_LANES, len(osts)),
                                                      thread_name_prefix="ost-probe")
        wide = None
        try:
            futures = {lanes.submit(self._probe_ost, ost, timeout): ost for ost in osts}
            _, pending = concurrent.futures.wait(futures, timeout=min(PROBE_GRACE, timeout))
            # probes that hang hold their lanes: those not started yet get a thread each
            moved = [future for future in pending if future.cancel()]
            if moved:
                wide = concurrent.futures.ThreadPoolExecutor(max_workers=len(moved),
                                                             thread_name_prefix="ost-probe")
                for future in moved:
                    ost = futures.pop(future)
                    futures[wide.submit(self._probe_ost, ost, timeout)] = ost
            done, _ = concurrent.futures.wait(futures,
                                              timeout=max(0.0, deadline - time.monotonic()))
            results = []
            for future, ost in futures.items():
                if future in done and future.exception() is None:
                    results.append(future.result())
                elif future in done:
                    results.append(replace(ost, state=OST_UNREACHABLE,
                                           detail=str(future.exception())))
                else:
                    results.append(replace(ost, state=OST_UNREACHABLE,
                                           detail=f"no answer within {timeout:g}s"))
            return sorted(results, key=lambda o: o.ost_index)
        finally:
            # a hung probe must not hold the caller past the deadline
            for pool in (lanes, wide):
                if pool is not None:
                    pool.shutdown(wait=False, cancel_futures=True)

    def pick_substitute(self, layout: FileLayout, *, exclude: set[int] = frozenset(),
                        osts: list[OstStatus] | None = None, failed: int | None = None) -> int:
        """A healthy OST not already holding part of the file, the least loaded first
        (``failed``: the OST it stands in for, which a placement may use)."""
        candidates = [o for o in (osts if osts is not None else self.list_osts())
                      if o.healthy and o.ost_index not in layout.osts()
                      and o.ost_index not in exclude]
        if not candidates:
            raise TargetUnavailable(f"{layout.path}: no healthy OST outside the file's stripe set "
                                    "to substitute", path=layout.path)
        return min(candidates, key=lambda o: (o.used_bytes or 0, o.ost_index)).ost_index

    def replica_osts(self, layout: FileLayout, size: int,
                     count: int | None = None) -> tuple[int, ...]:
        """OSTs for a temporal replica of the file (``size`` bytes): healthy ones outside its
        stripe set, least used first, ``count`` of them (default: as many as the primary's
        stripes; fewer where fewer are left)."""
        taken = layout.osts()
        candidates = [o for o in self.list_osts() if o.healthy and o.ost_index not in taken]
        if not candidates:
            raise TargetUnavailable(f"{layout.path}: no healthy OST outside the primary's "
                                    f"{sorted(taken)} for a replica", path=layout.path)
        candidates.sort(key=lambda o: (o.used_bytes or 0, o.ost_index))
        count = min(count or layout.stripe_count, len(candidates))
        return tuple(sorted(o.ost_index for o in candidates[:count]))

    @abc.abstractmethod
    def drop_cache(self, path: str) -> None:
        """Drop the file's data from the storage servers' page cache, so that the next reads
        reach the disks (as a benchmark or ``layout calibrate`` needs). Local store: every object
        of the file is synced and advised ``POSIX_FADV_DONTNEED``; Lustre: ``lfs ladvise -a
        dontneed`` over the file (the OSS read cache; Lustre 2.9 and later, the file's owner)."""

    def replica_room(self, layout: FileLayout) -> tuple[int, int]:
        """(healthy OSTs outside the file's stripe set, healthy OSTs): how wide a replica can
        be, and over how many OSTs files are spread."""
        healthy = [o.ost_index for o in self.list_osts() if o.healthy]
        taken = layout.osts()
        return sum(1 for i in healthy if i not in taken), len(healthy)

    # -- mirrors -------------------------------------------------------------------------------
    @abc.abstractmethod
    def add_mirror(self, path: str, request: LayoutRequest = LayoutRequest()) -> FileLayout:
        """Add a verified replica of the file on OSTs distinct from its other mirrors."""

    @abc.abstractmethod
    def remove_mirror(self, path: str, mirror_id: int) -> FileLayout:
        """Drop one mirror; the last one cannot be removed."""

    # -- rebuilding lost stripes (recovery) ----------------------------------------------------
    @abc.abstractmethod
    def begin_rebuild(self, path: str, substitutes: dict[int, int]) -> Rebuild:
        """Allocate objects on the substitute OSTs and record the rebuild; nothing visible yet."""

    def begin_rebuilds(self, items: list[tuple[str, dict[int, int]]]
                       ) -> list[Rebuild | ScratchkeeperError]:
        """Begin several rebuilds (``(path, substitutes)`` pairs); each one's rebuild or error,
        in order. A store that can records them in one step (fewer syncs); this one begins
        them one by one."""
        return _each(self.begin_rebuild, items)

    def write_rebuild(self, rebuild: Rebuild, offset: int, data: bytes) -> None:
        """Patch bytes of a lost range into the substitute objects and record them as patched."""
        self.write_rebuild_batch(rebuild, [(offset, data)])

    @abc.abstractmethod
    def write_rebuild_batch(self, rebuild: Rebuild, pieces: list[tuple[int, bytes]], *,
                            record: bool = True) -> None:
        """Patch several ``(offset, data)`` ranges into the substitute objects.

        The bytes are not synced (``commit_rebuild`` syncs them before the switch). With
        ``record`` they are journalled as patched in one update; without, the caller records
        them later (:meth:`record_patched`, or ``commit_rebuild(patched=...)``), and a crash
        before that makes a resumed rebuild fetch them again.
        """

    @abc.abstractmethod
    def record_patched(self, rebuild: Rebuild, extents: list[Extent]) -> None:
        """Journal ``extents``, written with ``record=False``, as patched (one update)."""

    @abc.abstractmethod
    def read_rebuild(self, rebuild: Rebuild, offset: int, length: int) -> bytes:
        """Bytes of the file as the rebuild will make it (to verify a checksum before commit)."""

    @abc.abstractmethod
    def commit_rebuild(self, rebuild: Rebuild, patched: list[Extent] = ()) -> FileLayout:
        """Switch the file to the new layout atomically, once every lost byte is patched.

        ``patched``: extents written with ``record=False`` and not recorded yet; they count
        as patched from this commit on (recorded in the same step as the switch).
        """

    def commit_rebuilds(self, items: list[tuple[Rebuild, list[Extent]]]
                        ) -> list[FileLayout | ScratchkeeperError]:
        """Commit several rebuilds (``(rebuild, patched)`` pairs); each one's new layout or
        error, in order. A store that can switches them in one step (fewer syncs); this one
        commits them one by one."""
        return _each(self.commit_rebuild, items)

    @abc.abstractmethod
    def abort_rebuild(self, rebuild: Rebuild) -> None:
        """Forget a rebuild and free its substitute objects; the file is left as it was."""

    @abc.abstractmethod
    def open_rebuilds(self) -> list[Rebuild]:
        """Rebuilds begun and neither committed nor aborted (after a crash, say)."""

    # -- helpers for backends ------------------------------------------------------------------
    def _check_patch(self, rebuild: Rebuild, offset: int, data: bytes) -> Extent:
        extent = Extent(offset, len(data))
        if not rebuild.within_lost(extent):
            raise StorageError(f"{rebuild.path}: rebuild {rebuild.rebuild_id}: bytes "
                               f"{offset}+{len(data)} are not in a lost range")
        return extent

    def _check_recorded(self, rebuild: Rebuild, extents: list[Extent]) -> list[Extent]:
        """``extents`` to be recorded as patched, each checked to lie in a lost range."""
        for extent in extents:
            if extent.length <= 0 or not rebuild.within_lost(extent):
                raise StorageError(f"{rebuild.path}: rebuild {rebuild.rebuild_id}: bytes "
                                   f"{extent.offset}+{extent.length} are not in a lost range")
        return list(extents)

    def _check_complete(self, rebuild: Rebuild) -> None:
        missing = rebuild.missing
        if missing:
            shown = ", ".join(f"{e.offset}+{e.length}" for e in missing[:3])
            raise StorageError(f"{rebuild.path}: rebuild {rebuild.rebuild_id} still misses "
                               f"{sum(e.length for e in missing)} bytes ({shown}"
                               f"{', ...' if len(missing) > 3 else ''})")

    def _rebuild_plan(self, layout: FileLayout, file_size: int,
                      substitutes: dict[int, int]) -> list[Extent]:
        """Validate a substitution and return the byte ranges the substitute objects must hold."""
        if not substitutes:
            raise InputError(f"{layout.path}: no OST to substitute")
        used = layout.osts()
        for failed, substitute in substitutes.items():
            if failed not in used:
                raise InputError(f"{layout.path}: OST {failed} holds no stripe of the file")
            if substitute in used:
                raise InputError(f"{layout.path}: substitute OST {substitute} already holds a "
                                 "stripe of the file")
        if len(set(substitutes.values())) != len(substitutes):
            raise InputError(f"{layout.path}: two failed OSTs mapped to the same substitute")
        return merge_extents(e for failed in substitutes
                             for e in layout.extents_on_ost(failed, file_size))


def substitute_layout(layout: FileLayout, substitutes: dict[int, int],
                      new_object_id: Callable[[int, int], str]) -> FileLayout:
    """``layout`` with each failed OST replaced by its substitute (same stripe position).

    ``new_object_id(component_index, position)`` names the new object.
    """
    components = []
    for index, comp in enumerate(layout.components):
        objects = tuple(StripeObject(substitutes[obj.ost_index], new_object_id(index, position))
                        if obj.ost_index in substitutes else obj
                        for position, obj in enumerate(comp.objects))
        components.append(replace(comp, objects=objects))
    return FileLayout(tuple(components), layout.layout_gen + 1, layout.path)


def _each(call: Callable, items: list[tuple]) -> list:
    """``call(*item)`` for every item: its result, or the store error it raised, in order."""
    results = []
    for item in items:
        try:
            results.append(call(*item))
        except ScratchkeeperError as err:
            results.append(err)
    return results
