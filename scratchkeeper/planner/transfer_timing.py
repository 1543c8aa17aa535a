"""The transfer timings a stage-in job measured itself: read from its ``stage commit`` and kept
(table ``transfer_timings``, :mod:`.records`) when they can be believed; what
:mod:`.predict` fits.

The data job reads the kernel's monotonic clock (``/proc/uptime``, CLOCK_BOOTTIME, 10 ms ticks)
just before and after each client run (the attempt that succeeded) and hands ``stage commit``
one ``--timing LINE:SECONDS`` per structured transfer. The commit knows the bytes and files of
each line (it measured them), their source host and client; the seconds are the job's word.
They are checked against what the scheduler says of the job, since the job is its user's: the
seconds of all lines together must fit in the job's start-to-commit time (the scheduler's start
time, whole seconds) and leave at most ``staging.timing_slack`` seconds of it unaccounted for.
A job that leaves more (a retried transfer, its waits, or timings made up to teach the
prediction that a host is fast and make other users' stage-ins late) is not learned from: a
job's own word can shorten its record by at most the slack, well inside ``staging.jit_margin``,
and the robust fit over many jobs does not follow one job's outliers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

from ..errors import InputError

#: at most this many timings in one commit (a stage-in's directives are bounded by the script)
MAX_TIMINGS = 100_000
#: the data job's clock ticks at 10 ms: a faster transfer is recorded as half a tick
CLOCK_TICK = 0.01
_TIMING = re.compile(r"^([1-9][0-9]{0,8}):([0-9]{1,9}(?:\.[0-9]{1,9})?)$")


def parse_timings(values: Iterable[str]) -> dict[int, float]:
    """``LINE:SECONDS`` words (``--timing``) as {line: seconds}; InputError naming the bad one."""
    found: dict[int, float] = {}
    for number, value in enumerate(values, 1):
        if number > MAX_TIMINGS:
            raise InputError(f"--timing: more than {MAX_TIMINGS} timings")
        match = _TIMING.match(value)
        if match is None:
            raise InputError(f"--timing {value!r}: expected LINE:SECONDS (a script line and "
                             "the seconds its transfer took, e.g. 12:3.41)")
        found[int(match[1])] = float(match[2])
    return found


def check_timings(message: object) -> dict[int, float]:
    """The ``timings`` of a recovery-service request ([[line, seconds], ...]) as {line: seconds};
    InputError for anything else."""
    if message is None:
        return {}
    if not isinstance(message, list) or len(message) > MAX_TIMINGS:
        raise InputError(f"stage-commit: 'timings' must be a list of at most {MAX_TIMINGS} "
                         "[line, seconds] pairs")
    found: dict[int, float] = {}
    for pair in message:
        ok = isinstance(pair, list) and len(pair) == 2
        line, seconds = (pair if ok else (None, None))
        if not (ok and isinstance(line, int) and not isinstance(line, bool) and line > 0
                and isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
                and math.isfinite(seconds) and 0 <= seconds <= 1e9):
            raise InputError("stage-commit: each of 'timings' must be [line, seconds] with a "
                             "positive line and finite seconds >= 0")
        found[line] = float(seconds)
    return found


def timing_rows(lines: Mapping[int, tuple[str, str, int, int]], timings: Mapping[int, float], *,
                chain_id: str, job_key: str, owner_uid: int | None, job_seconds: float | None,
                slack: float, finished: float) -> tuple[list[dict], str]:
    """The rows to record for the timed lines of one commit, and why none when none.

    ``lines``: per script line the (host, client, bytes, files) the commit staged;
    ``job_seconds``: the job's start-to-commit time as its scheduler says (None: unknown)."""
    timed = {line: seconds for line, seconds in timings.items() if line in lines}
    if not timed:
        return [], "no timing of a line this commit staged"
    if job_seconds is None:
        return [], "the scheduler gives no start time to check the timings against"
    total = sum(timed.values())
    # the scheduler's start is whole seconds: the job may have started up to 1 s later
    if total > job_seconds + 1.0:
        return [], (f"its transfers' {total:.2f}s exceed the job's {job_seconds:.0f}s from "
                    "start to commit")
    if job_seconds - total > slack + 1.0:
        return [], (f"its transfers' {total:.2f}s leave {job_seconds - total:.0f}s of the "
                    f"job's {job_seconds:.0f}s unaccounted for, more than staging.timing_slack "
                    f"= {slack:g}s (a retry or a wait)")
    rows = []
    for line, seconds in sorted(timed.items()):
        host, client, size, files = lines[line]
        if not host or not client or size <= 0:
            continue
        rows.append({"chain_id": chain_id, "job_key": job_key, "line": line, "host": host,
                     "client": client, "bytes": size, "files": files,
                     "seconds": max(seconds, CLOCK_TICK / 2), "finished": finished,
                     "owner_uid": owner_uid})
    return rows, "" if rows else "no timed line with a known host, client and bytes"
