"""Names of the local store's processes that outlive pid reuse (``pid:PID:START``), and whether
the process a name gives is still running.

A store process claims object intents and names its staging entries after itself
(:mod:`.namespace`, :mod:`.mdt`); whoever opens the store next collects what a process that is
gone left behind. The start time (field 22 of ``/proc/PID/stat``) tells a reused pid apart.
"""

from __future__ import annotations

import os


def process_owner() -> str:
    """``pid:<pid>:<start time>``: names this process even after its pid is reused."""
    return f"pid:{os.getpid()}:{_start_time(os.getpid())}"


def process_alive(owner: str) -> bool:
    """Whether the process ``owner`` (a :func:`process_owner` name) still runs."""
    _, pid, started = owner.split(":", 2)
    return _start_time(int(pid)) == started and started != "?"


def dead_owner_of(staging_name: str) -> str | None:
    """The process a staging entry is named after (``pid:PID:START.…``), when it is gone."""
    owner = staging_name.rsplit(".", 1)[0]
    fields = owner.split(":")
    if len(fields) != 3 or fields[0] != "pid" or not fields[1].isdigit() or \
            process_alive(owner):
        return None
    return owner


def _start_time(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            # the command name may contain spaces; fields after ')' are fixed
            fields = handle.read().rsplit(")", 1)[1].split()
        return fields[19]
    except (OSError, IndexError):
        return "?"
