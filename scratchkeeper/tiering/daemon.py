"""``scratchkeeper tierd``: read records in, replicas up and down (docs/tiering.rst).

Each cycle:

1. The READS records the mount appended since the last cycle (``store_root/reads.log``,
   :class:`~scratchkeeper.storage.mount_logs.MountLog`) are counted in the hotness table, whose
   counters decay with ``tiering.half_life`` and are kept in the state database.
2. Every file tierd knows (read since it was last cold, or holding a replica it made) is looked
   up: its primary's class and its *tier replica*, the mirror flagged ``prefer`` in a faster
   class than the primary's. The layout is the only record of a tier replica, so a move a
   ``kill -9`` interrupted is seen as done or not done by the next cycle, never made twice.
3. The table decides (Algorithm 2: a class past ``upper_watermark`` of its room sheds its
   coldest replicas to ``lower_watermark``; Algorithm 3: a file whose hotness reaches a faster
   class's threshold gets a replica there), at most ``tiering.budget`` moves.
4. An up move adds a mirror in the target class, flagged ``prefer`` (the mount reads it
   first), and drops the file's old tier replica if it had one; a down move to the primary's
   class drops the tier replica. A primary is never moved or removed.

Only files whose primary is in the slowest class are tiered: a primary placed in a fast class
stays where it was put. A class's room is what tierd's replicas there take plus the free space
of the class's file systems.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from .. import stopping
from ..config import SiteConfig, parse_ost_ranges, tier_pools
from ..errors import ConfigError, ScratchkeeperError
from ..placement.hotness import HotnessTable, Move
from ..state import StateStore, daemon_lock
from ..storage import open_backend
from ..storage.base import StorageBackend
from ..storage.layout import FileLayout, LayoutRequest
from ..storage.mount_logs import MountLog
from . import records
from .reads import READ_LOG, ReadRecord, parse_reads

log = logging.getLogger(__name__)

HASHES = 4


@dataclass(frozen=True)
class Residency:
    """Where a known file's copies are: its primary's class and its tier replica, if any."""

    path: str
    size: int
    primary: int                  # class position, slowest first
    tier_mirror: int | None       # mirror id
    tier_class: int | None        # class position of the tier replica
    extra: tuple[int, ...] = ()   # more prefer-flagged replicas in fast classes (left by a crash)

    @property
    def served_from(self) -> int:
        return self.primary if self.tier_class is None else self.tier_class


@dataclass
class CycleReport:
    started: float
    records: int = 0
    tracked: int = 0
    moves: list[dict] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


class Tierd:
    def __init__(self, config: SiteConfig, *, backend: StorageBackend | None = None,
                 store: StateStore | None = None, clock: Callable[[], float] = time.time):
        if config.storage.backend != "local":
            raise ConfigError("tierd: tiering counts the reads the scratch mount records, so it "
                              "needs storage.backend = \"local\"", path=config.source)
        self.classes = tier_pools(config.storage)          # slowest first
        if len(self.classes) < 2:
            raise ConfigError("tierd: storage.pool_tiers must name pools of at least two "
                              "performance classes (storage.tier_order)", path=config.source)
        self.config = config
        self.settings = config.tiering
        self.backend = backend or open_backend(config)
        self.store = records.open_tiering(store or StateStore(config.state.database))
        self.clock = clock
        self.ost_class: dict[int, int] = {}
        for position, (_, pools) in enumerate(self.classes):
            for pool in pools:
                for index in parse_ost_ranges(config.storage.pools[pool]):
                    self.ost_class[index] = position
        self.thresholds = [0] + [self.settings.hot_reads * k
                                 for k in range(1, len(self.classes))]
        self.stop_event = threading.Event()
        self._lock_handle: TextIO | None = None

    # -- life cycle ----------------------------------------------------------------------------
    def acquire_lock(self) -> None:
        """One tierd per state database: two would move the same replicas."""
        self._lock_handle = daemon_lock(self.config.state.database, "tierd")

    def install_signal_handlers(self) -> None:
        stopping.on_stop_signals(self.stop_event.set)

    def run(self, *, max_cycles: int | None = None) -> int:
        self.acquire_lock()
        cycles, report = 0, None
        # the Prometheus endpoint (metrics.tierd); imported here: only the daemon serves it
        from ..metrics import serve
        from ..metrics.tiering import TieringCollector

        endpoint = serve(self.config, "tierd", [TieringCollector(
            functools.partial(records.move_counts, self.store),
            functools.partial(records.file_count, self.store))])
        try:
            self.reconcile()
            while not self.stop_event.is_set():
                report = self.cycle()
                cycles += 1
                if max_cycles is not None and cycles >= max_cycles:
                    break
                stopping.sleep(self.stop_event, self.settings.interval)
        finally:
            if endpoint is not None:
                endpoint.close()
            if self._lock_handle is not None:
                self._lock_handle.close()
                self._lock_handle = None
        return 1 if report is not None and not report.ok else 0

    def reconcile(self) -> int:
        """Moves a previous run left started: the layout says what happened (a tier replica is
        whatever the layout holds), so they are only closed here."""
        with self.store.transaction() as conn:
            closed = conn.execute(
                "UPDATE tier_moves SET state=?, ended=?, reason=? WHERE state=?",
                (records.FAILED, self.clock(), "interrupted: tierd stopped during the move; the "
                 "file's layout holds what was done", records.STARTED)).rowcount
        if closed:
            log.warning("tierd: %d move(s) interrupted by a stop; the layouts say what was done",
                        closed)
        return closed

    # -- one cycle -----------------------------------------------------------------------------
    def cycle(self) -> CycleReport:
        report = CycleReport(started=self.clock())
        try:
            self._cycle(report)
        except ScratchkeeperError as err:
            report.error = str(err)
            log.error("tierd: cycle failed: %s", err)
        return report

    def _cycle(self, report: CycleReport) -> None:
        reads, commit = MountLog(self.store, "tier_read_log", str(self.backend.store_root),
                                 READ_LOG, parse_reads).read()
        report.records = len(reads)
        now = self.clock()
        table = self._table(now)
        self._count(table, reads)
        known = self._known(table)
        report.tracked = len(known)
        for move in table.moves(self.settings.budget):
            done = self._move(known[move.object_id], move)
            report.moves.append(done)
            if done["state"] == records.DONE:
                table.commit(move)
        self._save(table, now)
        commit()
        if report.moves or reads:
            log.info("tierd: %d read record(s), %d file(s) tracked, %d move(s) done, %d failed",
                     len(reads), len(known),
                     sum(m["state"] == records.DONE for m in report.moves),
                     sum(m["state"] == records.FAILED for m in report.moves))

    def _table(self, now: float) -> HotnessTable:
        """The hotness table with the saved counters, decayed to ``now``; the classes' rooms
        are filled in by :meth:`_known`."""
        table = HotnessTable(self.thresholds, [1.0] * len(self.classes),
                             upper_watermark=self.settings.upper_watermark,
                             lower_watermark=self.settings.lower_watermark,
                             width=self.settings.counters, hashes=HASHES)
        rows = self.store.query("SELECT * FROM tier_counters WHERE id = 0")
        if rows and rows[0]["width"] == self.settings.counters and rows[0]["hashes"] == HASHES:
            counts = array("I")
            counts.frombytes(rows[0]["counts"])
            if len(counts) == self.settings.counters:
                table.counters.counts = counts
                elapsed = max(0.0, now - rows[0]["decayed_at"])
                if elapsed > 0:
                    table.decay(0.5 ** (elapsed / self.settings.half_life))
        return table

    def _save(self, table: HotnessTable, now: float) -> None:
        with self.store.transaction() as conn:
            conn.execute("INSERT INTO tier_counters VALUES (0, ?, ?, ?, ?) ON CONFLICT(id) DO "
                         "UPDATE SET width=excluded.width, hashes=excluded.hashes, "
                         "counts=excluded.counts, decayed_at=excluded.decayed_at",
                         (self.settings.counters, HASHES, table.counters.counts.tobytes(), now))

    def _count(self, table: HotnessTable, reads: list[ReadRecord]) -> None:
        scratch = self.backend.scratch_root.rstrip("/") + "/"
        with self.store.transaction() as conn:
            for record in reads:
                if not record.path.startswith(scratch):
                    log.warning("tierd: read record of %r outside the scratch root: ignored",
                                record.path)
                    continue
                table.record(record.object_id, record.reads)
                row = conn.execute("SELECT object_id FROM tier_files WHERE path=?",
                                   (record.path,)).fetchone()
                if row is not None and row[0] == record.object_id:
                    conn.execute("UPDATE tier_files SET reads=reads+?, bytes=bytes+?, "
                                 "last_read=?, uid=? WHERE path=?",
                                 (record.reads, record.bytes, record.time, record.uid,
                                  record.path))
                else:  # new, or another file now at that path
                    conn.execute("INSERT OR REPLACE INTO tier_files VALUES (?, ?, ?, ?, ?, ?)",
                                 (record.path, record.object_id, record.uid, record.reads,
                                  record.bytes, record.time))

    def residency(self, path: str) -> Residency | None:
        """Where the file's copies are; None when it is not tiered (gone, or its primary is not
        in the slowest class)."""
        try:
            layout = self.backend.layout(path)
            size = self.backend.stat(path).size
        except (FileNotFoundError, ScratchkeeperError):
            return None
        primary, fast = None, []
        for mirror_id in layout.mirror_ids:
            position = self._mirror_class(layout, mirror_id)
            preferred = any("prefer" in c.flags.split(",") for c in layout.mirror(mirror_id))
            if preferred and position is not None and position > 0 and len(layout.mirror_ids) > 1:
                fast.append((position, mirror_id))
            elif primary is None or (position is not None and position < primary):
                primary = position
        if primary != 0:
            return None
        if not fast:
            return Residency(path, size, 0, None, None)
        fast.sort(reverse=True)
        return Residency(path, size, 0, fast[0][1], fast[0][0], tuple(m for _, m in fast[1:]))

    def _mirror_class(self, layout: FileLayout, mirror_id: int) -> int | None:
        """The class of the mirror's OSTs (the slowest when they are in several); None when one
        is in no tiered pool."""
        positions = {self.ost_class.get(ost) for ost in layout.osts(mirror_id)}
        return None if None in positions or not positions else min(positions)

    def _known(self, table: HotnessTable) -> dict[int, Residency]:
        """Track every known file in the table; forget the cold ones without a tier replica."""
        known: dict[int, Residency] = {}
        used = [0.0] * len(self.classes)
        gone: list[str] = []
        for row in self.store.query("SELECT path, object_id FROM tier_files"):
            where = self.residency(row["path"])
            if where is None or (where.tier_mirror is None and
                                 table.hotness(row["object_id"]) == 0):
                gone.append(row["path"])
                continue
            for extra in where.extra:   # a crash between adding one and dropping the other
                self._drop_mirror(where.path, extra, "a second tier replica")
            known[row["object_id"]] = where
            table.track(row["object_id"], {where.served_from}, where.size)
            used[where.served_from] += where.size
        if gone:
            with self.store.transaction() as conn:
                conn.executemany("DELETE FROM tier_files WHERE path=?", [(p,) for p in gone])
        # a replica going down to its primary's (slowest) class takes no room there
        table.capacities = (float("inf"),) + tuple(
            max(1.0, used[position] + self._free(position))
            for position in range(1, len(self.classes)))
        return known

    def _free(self, position: int) -> float:
        """Free bytes of the file systems of the class's OSTs (each counted once)."""
        seen, free = set(), 0
        for index, of in self.ost_class.items():
            if of != position:
                continue
            directory = self.backend.store_root / f"ost{index:04d}"
            try:
                info = os.stat(directory)
                if info.st_dev in seen:
                    continue
                seen.add(info.st_dev)
                vfs = os.statvfs(directory)
            except OSError:
                continue
            free += vfs.f_bavail * vfs.f_frsize
        return float(free)

    def _pool_for(self, position: int) -> str:
        """The class's pool with the most free space."""
        pools = self.classes[position][1]
        if len(pools) == 1:
            return pools[0]

        def room(pool: str) -> float:
            total = 0
            for index in parse_ost_ranges(self.config.storage.pools[pool]):
                try:
                    vfs = os.statvfs(self.backend.store_root / f"ost{index:04d}")
                    total += vfs.f_bavail * vfs.f_frsize
                except OSError:
                    pass
            return total
        return max(pools, key=room)

    def _move(self, where: Residency, move: Move) -> dict:
        name = [c for c, _ in self.classes]
        entry = {"path": where.path, "direction": move.direction, "source": name[move.source],
                 "target": name[move.target], "size": move.size, "hotness": move.hotness}
        with self.store.transaction() as conn:
            move_id = conn.execute(
                "INSERT INTO tier_moves (path, direction, source, target, size, hotness, state, "
                "started) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (where.path, move.direction, entry["source"], entry["target"], move.size,
                 float(move.hotness), records.STARTED, self.clock())).lastrowid
        mirror, state, reason = None, records.DONE, ""
        try:
            if move.target > where.primary:
                pool = self._pool_for(move.target)
                layout = self.backend.add_mirror(where.path, LayoutRequest(pool=pool,
                                                                           prefer=True))
                mirror = max(layout.mirror_ids)
                if where.tier_mirror is not None:
                    self.backend.remove_mirror(where.path, where.tier_mirror)
                reason = f"hotness {move.hotness:g} reaches {self.thresholds[move.target]}"
            else:
                if where.tier_mirror is None:
                    raise ScratchkeeperError("no tier replica to drop")
                self.backend.remove_mirror(where.path, where.tier_mirror)
                mirror = where.tier_mirror
                reason = (f"class {name[move.source]} past its upper watermark; coldest "
                          f"(mean counter {move.hotness:g})")
        except (ScratchkeeperError, FileNotFoundError) as err:
            state, reason = records.FAILED, str(err)
            log.warning("tierd: %s %s -> %s: %s", where.path, entry["source"], entry["target"],
                        err)
        else:
            log.info("tierd: %s: replica %s %s -> %s (%s)", where.path, move.direction,
                     entry["source"], entry["target"], reason)
        with self.store.transaction() as conn:
            conn.execute("UPDATE tier_moves SET state=?, mirror=?, reason=?, ended=? WHERE id=?",
                         (state, mirror, reason, self.clock(), move_id))
        entry.update(state=state, mirror=mirror, reason=reason)
        return entry

    def _drop_mirror(self, path: str, mirror_id: int, why: str) -> None:
        try:
            self.backend.remove_mirror(path, mirror_id)
            log.info("tierd: %s: dropped mirror %d (%s)", path, mirror_id, why)
        except (ScratchkeeperError, FileNotFoundError) as err:
            log.warning("tierd: %s: dropping mirror %d: %s", path, mirror_id, err)


def report(config: SiteConfig, *, limit: int = 50) -> dict:
    """What ``scratchkeeper tiers`` shows: the hottest known files, where each is read from,
    and the latest moves."""
    daemon = Tierd(config)
    table = daemon._table(daemon.clock())
    names = [c for c, _ in daemon.classes]
    files = []
    for row in daemon.store.query("SELECT * FROM tier_files"):
        where = daemon.residency(row["path"])
        files.append({"path": row["path"], "hotness": table.hotness(row["object_id"]),
                      "reads": row["reads"], "bytes_read": row["bytes"],
                      "last_read": row["last_read"],
                      "served_from": None if where is None else names[where.served_from],
                      "tier_mirror": None if where is None else where.tier_mirror})
    files.sort(key=lambda f: (-f["hotness"], f["path"]))
    moves = [dict(r) for r in daemon.store.query(
        "SELECT * FROM tier_moves ORDER BY id DESC LIMIT ?", (limit,))]
    thresholds = {names[k]: daemon.thresholds[k] for k in range(1, len(names))}
    return {"classes": names[::-1], "thresholds": thresholds, "files": files[:limit],
            "known_files": len(files), "moves": moves,
            "half_life": config.tiering.half_life, "hot_reads": config.tiering.hot_reads}


def hot_objects_by_ost(config: SiteConfig) -> dict[int, int]:
    """Per OST, the files tierd counts as hot (hotness at least ``tiering.hot_reads``) that
    have a stripe object there (``store placement``)."""
    daemon = Tierd(config)
    table = daemon._table(daemon.clock())
    counts: dict[int, int] = {}
    for row in daemon.store.query("SELECT path, object_id FROM tier_files"):
        if table.hotness(row["object_id"]) < config.tiering.hot_reads:
            continue
        try:
            osts = daemon.backend.layout(row["path"]).osts()
        except (FileNotFoundError, ScratchkeeperError):
            continue
        for index in osts:
            counts[index] = counts.get(index, 0) + 1
    return counts
