"""What recovery believes about a file's sources, and where it may fetch from.

recoveryd runs as root and fetches with the site's credentials, so a file's sources come only
from a record users cannot write: the ``trusted.scratchkeeper.*`` attributes ``stage commit``
set on the inode (:func:`scratchkeeper.planner.records.write_recovery_record`; the kernel
keeps ``trusted.*`` from anyone without ``CAP_SYS_ADMIN``). A file committed before they
existed is taken from its ``staged_files`` row, if the state database is root's alone. The
``user.scratchkeeper.*`` copies are the user's to read and change; recovery never acts on
them, and says in one log line (per file, per hour, and at most :data:`LOG_BUDGET` lines a
minute in all) when they differ from the record.

Every source also has to pass the site's allow-list (``recovery.allowed_sources``; empty: the
endpoints the site's data jobs staged from, as ``stage commit`` recorded them), and so does
every HTTP redirect a source answers with, before it is followed
(:meth:`SourcePolicy.why_endpoint_refused`, passed to the readers).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from ..errors import ScratchkeeperError
from ..ownership import Owner
from ..planner import records as planner_records
from ..planner.records import RECORD_NAMES, TRUSTED_PREFIX
from ..planner.sources import SourceAllowList, root_only
from ..state import StateStore
from ..storage.base import XATTR_PREFIX

log = logging.getLogger(__name__)

#: seconds between two log lines about the same file
LOG_INTERVAL = 3600.0
#: most mismatch lines a minute, all files together (a user owns many files)
LOG_BUDGET = 20
#: files remembered by the per-file limit (the oldest are forgotten first)
LOG_MEMORY = 65536
TRUSTED, STATE = "trusted", "state"


@dataclass(frozen=True)
class FileHints:
    """The recovery metadata of a file, as root recorded it at stage-in."""

    sources: tuple[str, ...]
    sha256: str | None
    size: int | None
    #: whose rights a local (file://) source is read with: the file's owner
    owner: Owner | None = None
    #: why recorded sources were left out (not allowed by the site)
    refused: tuple[str, ...] = ()

    @classmethod
    def read(cls, backend, path: str, owner: Owner | None = None, *,
             size: int | None = None, store: StateStore | None = None) -> FileHints:
        """The trusted record of ``path`` (never its ``user.*`` attributes, which its owner
        may change); ``size``: the file's size now (a record without its own size, or the
        state database's row of an older commit, must match it)."""
        if size is None:
            size = backend.stat(path).size
        record = read_record(backend, path, owner.uid if owner else -1, size, store)
        return cls(record.sources, record.sha256, record.size, owner)

    def why_none(self) -> str:
        """Why there is no source to patch from (for the error that says so)."""
        if self.refused:
            return "the site allows: " + "; ".join(self.refused)
        return ("(stage commit recorded none: trusted.scratchkeeper.source is not set; the "
                "user.scratchkeeper.* attributes are not used)")


@dataclass(frozen=True)
class Record:
    """A file's sources, digest and size as root recorded them (``origin``: where from)."""

    sources: tuple[str, ...]
    sha256: str | None
    size: int | None
    origin: str = ""


def read_record(backend, full: str, uid: int, size: int,
                store: StateStore | None) -> Record:
    """The record of ``full`` (a file of ``uid``, ``size`` bytes now); an empty one if none.

    The trusted attributes first; without them (files committed before they existed) the
    newest committed ``staged_files`` row of the path whose owner and size still match, when
    the state database is root's alone. Any ``user.scratchkeeper.*`` value that differs from
    the record is logged (rate-limited), never used.
    """
    trusted = {name: backend.get_xattr(full, TRUSTED_PREFIX + name) for name in RECORD_NAMES}
    record = _from_values({k: v.decode(errors="replace") for k, v in trusted.items()
                           if v is not None}, TRUSTED)
    if not record.sources and store is not None and root_only(store.path):
        try:
            row = planner_records.staged_record(store, full, uid, size)
        except ScratchkeeperError as err:
            log.warning("%s: reading its staged_files row: %s", full, err)
            row = None
        if row is not None:
            checksum = (row["checksum"] or "").removeprefix("sha256:") or None
            record = Record((row["source"],), checksum, size, STATE)
    _compare_user_copies(backend, full, record)
    return record


def _from_values(values: dict[str, str], origin: str) -> Record:
    primary = values.get("source", "").strip()
    extra = values.get("sources", "").split()
    sources = tuple(dict.fromkeys(s for s in [primary, *extra] if s))
    sha = values.get("sha256", "").strip().removeprefix("sha256:") or None
    size_text = values.get("size", "").strip()
    return Record(sources, sha, int(size_text) if size_text.isdigit() else None,
                  origin if sources else "")


def _compare_user_copies(backend, full: str, record: Record) -> None:
    try:
        user = {name: (backend.get_xattr(full, XATTR_PREFIX + name) or b"").decode(
            errors="replace") for name in RECORD_NAMES}
    except ScratchkeeperError:
        return
    copy = _from_values(user, "user")
    differs = [name for name, mine, theirs in (
        ("source", record.sources[:1], copy.sources[:1]),
        ("sources", record.sources[1:], copy.sources[1:]),
        ("sha256", record.sha256, copy.sha256),
        ("size", record.size, copy.size)) if (mine or theirs) and mine != theirs]
    if differs and record.sources:
        MISMATCHES.note(full, f"{full}: {', '.join(XATTR_PREFIX + n for n in differs)} differ "
                              f"from the record stage commit made ({record.origin}); ignored")


class RateLimitedLog:
    """One warning per key per ``interval``, and at most ``budget`` a minute in all; what the
    budget drops is counted and said in the next line that gets through."""

    def __init__(self, interval: float = LOG_INTERVAL, budget: int = LOG_BUDGET,
                 memory: int = LOG_MEMORY):
        self.interval, self.budget, self.memory = interval, budget, memory
        self.lock = threading.Lock()
        self.last: OrderedDict[str, float] = OrderedDict()
        self.window = (0.0, 0)  # start of the current minute, lines logged in it
        self.dropped = 0

    def note(self, key: str, message: str) -> bool:
        """Log ``message`` unless ``key`` was logged within the interval or the budget is
        spent; whether it was logged."""
        now = time.monotonic()
        with self.lock:
            seen = self.last.get(key)
            if seen is not None and now - seen < self.interval:
                return False
            start, count = self.window
            if now - start >= 60.0:
                start, count = now, 0
            if count >= self.budget:
                self.dropped += 1
                return False
            self.window = (start, count + 1)
            self.last[key] = now
            self.last.move_to_end(key)
            while len(self.last) > self.memory:
                self.last.popitem(last=False)
            dropped, self.dropped = self.dropped, 0
        log.warning("%s%s", message[:4096],
                    f" ({dropped} similar line(s) not logged)" if dropped else "")
        return True


MISMATCHES = RateLimitedLog()
REFUSALS = RateLimitedLog()


class SourcePolicy(SourceAllowList):
    """``recovery.allowed_sources`` (:class:`~scratchkeeper.planner.sources.SourceAllowList`)
    applied to what recovery believes about a file's sources."""

    def filter(self, full: str, hints: FileHints) -> FileHints:
        """``hints`` without the sources the site does not allow (each said in a rate-limited
        line: a record may name many); what is left may still be patched from a surviving
        mirror alone."""
        kept, refused = [], []
        for uri in hints.sources:
            why = self.why_refused(uri)
            if why is None:
                kept.append(uri)
            else:
                refused.append(why)
                REFUSALS.note(f"{full}\0{uri}", f"{full}: source {why}")
        if not refused:
            return hints
        return FileHints(tuple(kept), hints.sha256, hints.size, hints.owner, tuple(refused))
