"""Scheduler backends, one module each, behind one small contract (see :mod:`.base`)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .base import JobRecord, JobState, QueueSnapshot, Scheduler, SubmitSpec

if TYPE_CHECKING:
    from ..config import SiteConfig

#: Backend name (its module's ``NAME``) -> its module in this package, imported when asked for.
BACKENDS = {"slurm": "slurm", "pbs": "pbs"}

__all__ = ["JobRecord", "JobState", "QueueSnapshot", "Scheduler", "SubmitSpec", "get_scheduler"]


def get_scheduler(config: SiteConfig, kind: str | None = None) -> Scheduler:
    """The configured backend (or ``kind``), wrapped with the site's timeout and retries."""
    name = kind or config.scheduler.kind
    if name not in BACKENDS:
        raise ConfigError(f"key 'scheduler.kind': expected one of {', '.join(BACKENDS)}, "
                          f"got {name!r}", path=config.source)
    backend = importlib.import_module(f"{__name__}.{BACKENDS[name]}")
    return Scheduler(backend, timeout=config.scheduler.command_timeout,
                     retries=config.scheduler.submit_retries)
