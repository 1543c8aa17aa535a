"""Scheduler backends, one module each, behind one small contract (see :mod:`.base`)."""

from __future__ import annotations

from ..config import SiteConfig
from ..errors import ConfigError
from . import pbs, slurm
from .base import JobRecord, JobState, QueueSnapshot, Scheduler, SubmitSpec

BACKENDS = {slurm.NAME: slurm, pbs.NAME: pbs}

__all__ = ["JobRecord", "JobState", "QueueSnapshot", "Scheduler", "SubmitSpec", "get_scheduler"]


def get_scheduler(config: SiteConfig, kind: str | None = None) -> Scheduler:
    """The configured backend (or ``kind``), wrapped with the site's timeout and retries."""
    name = kind or config.scheduler.kind
    if name not in BACKENDS:
        raise ConfigError(f"key 'scheduler.kind': expected one of {', '.join(BACKENDS)}, "
                          f"got {name!r}", path=config.source)
    return Scheduler(BACKENDS[name], timeout=config.scheduler.command_timeout,
                     retries=config.scheduler.submit_retries)
