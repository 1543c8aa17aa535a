"""What ``scontrol show bbstat [JOBID...]`` prints: the scratch pool and the jobs in the
burst-buffer path.

Slurm passes ``slurm_bb_get_status`` the words after ``bbstat``: job ids, which list those jobs
(whatever their stage, torn down too) instead of the live ones. Slurm 22.05 passes no caller
(its uid and gid arrive only from 23.02 on, before the words: docs/slurm-plugins.rst quotes the
slurmctld log line), so the text holds only what ``squeue`` already shows every user: job ids,
their stage and its timing, and byte counts. No path, no source, no owner: a user sees their
own chains, with their files, in ``scratchkeeper status``. Given the caller (23.02 on), the
live jobs listed are the caller's own (root's: all).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
import time
from collections.abc import Sequence

from ..config import SiteConfig
from ..state import StateStore
from ..storage.df import human_size
from . import records

#: at most this many jobs are listed (the counts cover all)
LISTED = 50
USAGE = "scontrol show bbstat [JOBID ...]"
_JOB_ID = re.compile(r"^[0-9]{1,10}$")


def _seconds(start: float | None, end: float | None, now: float) -> str:
    if start is None:
        return "-"
    return f"{(end if end is not None else now) - start:.0f}s" + ("" if end is not None else "+")


def pool_free(config: SiteConfig, timeout: float = 2.0) -> int | None:
    """Bytes free on the scratch file system, or None when it cannot be asked: a hung file
    system gets ``timeout`` seconds (its thread is left behind; the command ends soon after),
    as burst_buffer.lua's ``df`` does."""
    found: list[int] = []

    def ask() -> None:
        with contextlib.suppress(OSError):
            vfs = os.statvfs(config.storage.scratch_root)
            found.append(vfs.f_bavail * vfs.f_frsize)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(timeout)
    return found[0] if found else None


def status_text(config: SiteConfig, store: StateStore, *, now: float | None = None,
                words: Sequence[str] = (), caller_uid: int | None = None) -> str:
    """The text for ``scontrol show bbstat WORDS``: the pool, the counts by stage, then the
    jobs ``words`` name, or the live ones (of ``caller_uid`` when given and not root). A word
    that is not a job id gets the usage instead: Slurm shows what this returns, not an error."""
    bad = [w for w in words if not _JOB_ID.match(w)]
    if bad:
        return f"scratchkeeper: {USAGE}: {bad[0][:40]!r} is not a job id\n"
    if len(words) > LISTED:
        return f"scratchkeeper: {USAGE}: at most {LISTED} job ids\n"
    now = time.time() if now is None else now
    free = pool_free(config)
    held, staged = records.held_bytes(store), records.staged_bytes(store)
    lines = [f"scratchkeeper burst buffer: scratch {config.storage.scratch_root}: "
             + (f"{human_size(free)} free" if free is not None else "free space unknown")
             + f", {human_size(staged)} staged by jobs, {human_size(held)} of it held in the "
             "pool (by jobs that asked for capacity)"]
    counts = records.stage_counts(store)
    lines.append("jobs by stage: " + (", ".join(f"{stage} {n}" for stage, n in counts)
                                      if counts else "none"))
    if words:
        listed = records.jobs(store, list(dict.fromkeys(words)))
        missing = sorted(set(words) - {row["job_id"] for row in listed}, key=int)
        if missing:
            lines.append("not in the burst-buffer path: " + ", ".join(missing))
    else:
        listed = records.active_jobs(store, LISTED,
                                     uid=caller_uid if caller_uid not in (None, 0) else None)
    lines += _job_lines(listed, now)
    lines.append("your own chains and files: scratchkeeper status")
    return "\n".join(lines) + "\n"


def _job_lines(rows: list[sqlite3.Row], now: float) -> list[str]:
    if not rows:
        return []
    lines = [f"{'JOBID':>10} {'STAGE':<17} {'STAGED':>10} {'STAGE-IN':>9} {'STAGE-OUT':>9}"]
    for row in rows:
        lines.append(f"{row['job_id']:>10} {row['stage']:<17} "
                     f"{human_size(int(row['staged_bytes'])):>10} "
                     f"{_seconds(row['data_in_started'], row['data_in_ended'], now):>9} "
                     f"{_seconds(row['data_out_started'], row['data_out_ended'], now):>9}")
    return lines
