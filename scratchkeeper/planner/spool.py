"""A chain's spool folder: its jobs' scripts, their output and the list of results offloaded
at close, under ``state.spool`` (``<spool>/spool/<chain id>/``; by default the state database's
folder), which data jobs on other hosts write: shared with them.

The renderer names files in it (the stage-out reads ``offloaded.list``), submission writes the
scripts, the chain service writes the list: each of them asks this module where they are.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..config import SiteConfig

#: a chain's spool folder: its owner's alone (the data jobs' scripts name the job's sources and
#: destinations, their logs hold the transfers' output); the data jobs write their logs in it
SPOOL_DIR_MODE = 0o700

#: written by the chain service, read by a ``-when close`` stage-out (``stage unchanged``)
OFFLOADED_LIST = "offloaded.list"


def spool_dir(config: SiteConfig, chain_id: str) -> Path:
    return Path(config.state.spool_root).resolve() / "spool" / chain_id


def make_spool(config: SiteConfig, chain_id: str, owner: tuple[int, int] | None = None) -> Path:
    """The chain's spool folder, made when missing and set to SPOOL_DIR_MODE, ``owner``'s
    (uid, gid) when root makes it for a user. Opened without following a link, so an entry a
    user put in its place is refused, not changed."""
    spool = spool_dir(config, chain_id)
    spool.mkdir(mode=SPOOL_DIR_MODE, parents=True, exist_ok=True)
    folder = os.open(spool, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if owner is not None:
            os.fchown(folder, *owner)
        os.fchmod(folder, SPOOL_DIR_MODE)
    finally:
        os.close(folder)
    return spool


def script_path(spool: Path, job_key: str) -> Path:
    """Where the script of job ``job_key`` is written."""
    return spool / f"{job_key}.sh"


def output_path(spool: Path, job_key: str) -> str:
    """Where a data job's output goes (``%j``: the job id, filled in by the scheduler)."""
    return str(spool / f"{job_key}.%j.out")


def write_script(spool: Path, job_key: str, text: str, mode: int) -> Path:
    """Write one job's script into the spool folder with ``mode``; its path."""
    path = script_path(spool, job_key)
    path.write_text(text)
    path.chmod(mode)
    return path
