"""What ``scontrol show bbstat`` prints: the scratch pool and the jobs in the burst-buffer path.

Slurm 22.05 passes ``slurm_bb_get_status`` no caller (its uid and gid arrive only from 23.02 on:
docs/slurm-plugins.rst quotes the slurmctld log line), so the text holds only what ``squeue``
already shows every user: job ids, their stage and its timing, and byte counts. No path, no
source, no owner: a user sees their own chains, with their files, in ``scratchkeeper status``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

from ..config import SiteConfig
from ..state import StateStore
from ..storage.df import human_size
from . import records

#: at most this many jobs are listed (the counts cover all)
LISTED = 50


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


def status_text(config: SiteConfig, store: StateStore, *, now: float | None = None) -> str:
    now = time.time() if now is None else now
    free = pool_free(config)
    held = records.held_bytes(store)
    lines = [f"scratchkeeper burst buffer: scratch {config.storage.scratch_root}: "
             + (f"{human_size(free)} free" if free is not None else "free space unknown")
             + f", {human_size(held)} held by staged jobs"]
    counts = records.stage_counts(store)
    lines.append("jobs by stage: " + (", ".join(f"{stage} {n}" for stage, n in counts)
                                      if counts else "none"))
    active = records.active_jobs(store, LISTED)
    if active:
        lines.append(f"{'JOBID':>10} {'STAGE':<17} {'STAGED':>10} {'STAGE-IN':>9} "
                     f"{'STAGE-OUT':>9}")
        for row in active:
            lines.append(f"{row['job_id']:>10} {row['stage']:<17} "
                         f"{human_size(int(row['staged_bytes'])):>10} "
                         f"{_seconds(row['data_in_started'], row['data_in_ended'], now):>9} "
                         f"{_seconds(row['data_out_started'], row['data_out_ended'], now):>9}")
    lines.append("your own chains and files: scratchkeeper status")
    return "\n".join(lines) + "\n"
