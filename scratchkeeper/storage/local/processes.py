"""Names of the local store's processes that outlive pid reuse and say their host
(``pid:PID:START@HOST``), and whether the process a name gives is still running.

A store process claims object intents and names its staging entries after itself
(:mod:`.namespace`, :mod:`.mdt`); whoever opens the store next collects what a process that is
gone left behind. The start time (field 22 of ``/proc/PID/stat``) tells a reused pid apart. The
store's backing is shared by every host of a site (as Lustre's servers are), and a pid means
something only on its own host: a process of another host is never judged gone from here, so
one host's collection never removes a live writer's objects on another; that host's own next
open of the store collects them. A name without a host (``pid:PID:START``, written before
hosts were named) is this host's, as it always was.
"""

from __future__ import annotations

import functools
import os
import socket


@functools.cache
def host_name() -> str:
    """This host's name as the site knows it (the UTS node name), without ``@``, ``:`` or ``.``
    characters that would make an owner name ambiguous."""
    name = socket.gethostname() or "localhost"
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def process_owner() -> str:
    """``pid:<pid>:<start time>@<host>``: names this process even after its pid is reused, and
    says which host's pid it is."""
    return f"pid:{os.getpid()}:{_start_time(os.getpid())}@{host_name()}"


def _fields(owner: str) -> tuple[int, str, str] | None:
    """(pid, start time, host) of an owner name; None when it is not one."""
    name, _, host = owner.partition("@")
    fields = name.split(":")
    if len(fields) != 3 or fields[0] != "pid" or not fields[1].isdigit():
        return None
    return int(fields[1]), fields[2], host or host_name()


def process_alive(owner: str) -> bool:
    """Whether the process ``owner`` (a :func:`process_owner` name) still runs; a process of
    another host counts as running (only its host can tell)."""
    fields = _fields(owner)
    if fields is None:
        return False
    pid, started, host = fields
    if host != host_name():
        return True
    return _start_time(pid) == started and started != "?"


def dead_owner_of(staging_name: str) -> str | None:
    """The process a staging entry is named after (``pid:PID:START@HOST.…``), when it is gone."""
    owner = staging_name.rsplit(".", 1)[0]
    if _fields(owner) is None or process_alive(owner):
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
