"""The values of the site configuration: the parsers other modules use too and each key's check.

:func:`slurm_time_seconds`, :func:`parse_ost_ranges`, :func:`listen_address` and
:func:`normal_path` read or normalise a value; the ``_name(value)`` checks are the ``expected``
of a key in :mod:`.sections` and return what was expected when ``value`` is not acceptable,
else None. The limits below (stripe sizes and counts, socket paths) are the file system's and
the kernel's.
"""

from __future__ import annotations

import os
import re
import shlex

DAY = 86400.0
#: Stripe sizes are multiples of 64 KiB below 4 GiB (``lfs setstripe -S``).
STRIPE_UNIT = 65536
STRIPE_SIZE_MAX = (1 << 32) - STRIPE_UNIT
#: Lustre's largest stripe count (LOV_MAX_STRIPE_COUNT).
STRIPE_COUNT_MAX = 2000
#: Longest socket path ``bind`` accepts (``sun_path`` holds 108 bytes with the final NUL).
SOCKET_PATH_MAX = 107
# ASCII digits only (\d also takes other scripts' digits), and leading fields of at most nine
# digits, so that no digit string is too long to convert.
_SLURM_TIME = re.compile(r"(?:(?P<days>\d{1,9})-(?P<dhours>\d{1,2})(?::(?P<dminutes>\d{1,2})"
                         r"(?::(?P<dseconds>\d{1,2}))?)?"
                         r"|(?P<hours>\d{1,9}):(?P<hminutes>\d{1,2}):(?P<hseconds>\d{1,2})"
                         r"|(?P<minutes>\d{1,9})(?::(?P<mseconds>\d{1,2}))?)", re.ASCII)
_SLURM_TIME_MAX = 365 * 86400


def _command(value: str) -> str | None:
    """A program: a name looked up on PATH or an absolute path, never one relative to the
    working folder (which differs between a daemon, a data job and the user's shell)."""
    if not value or value.startswith("-") or ("/" in value and not os.path.isabs(value)) \
            or any(c.isspace() for c in value):
        return "a command name (found on PATH) or an absolute path"
    return None


def _command_line(value: str) -> str | None:
    try:
        words = shlex.split(value)
    except ValueError as err:
        return f"a shell-quoted command line ({err})"
    if words and _command(words[0]):
        return "a command line starting with a command name or an absolute path"
    return None


def slurm_time_seconds(text: str) -> int | None:
    """Seconds of a Slurm time limit (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
    ``D-HH:MM:SS``), or None when ``text`` is not one (or a sub-field is out of range)."""
    match = _SLURM_TIME.fullmatch(text)
    if match is None:
        return None
    part = {k: int(v) for k, v in match.groupdict().items() if v is not None}
    days = part.get("days", 0)
    hours = part.get("dhours", part.get("hours", 0))
    minutes = part.get("dminutes", part.get("hminutes", part.get("minutes", 0)))
    seconds = part.get("dseconds", part.get("hseconds", part.get("mseconds", 0)))
    if seconds > 59 or ("days" in part and hours > 23) or \
            (("days" in part or "hours" in part) and minutes > 59):
        return None
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def _walltime(value: str) -> str | None:
    seconds = slurm_time_seconds(value)
    if seconds is None or not 0 < seconds <= _SLURM_TIME_MAX:
        return ("a Slurm time limit of at most 365 days: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM "
                "or D-HH:MM:SS (e.g. 01:00:00)")
    return None


def _stripe_size(value: int) -> str | None:
    return None if value % STRIPE_UNIT == 0 else f"a multiple of {STRIPE_UNIT} (64 KiB)"


def _stripe_count(value: int) -> str | None:
    return None if value != 0 else f"-1 (all OSTs) or 1..{STRIPE_COUNT_MAX}"


def _socket_path(value: str) -> str | None:
    if len(os.fsencode(value)) > SOCKET_PATH_MAX:
        return f"a socket path of at most {SOCKET_PATH_MAX} bytes"
    return None


def normal_path(path: str) -> str:
    """An absolute path as every key holds it, so that each check below sees one spelling:
    ``//``, ``/.`` and ``///`` are ``/``, ``/scratch/./x//`` is ``/scratch/x`` (``..`` is
    refused before, not resolved: through a symbolic link it goes elsewhere)."""
    normal = os.path.normpath(path)
    return "/" + normal.lstrip("/") if normal.startswith("/") else normal


def _not_the_root(value: str) -> str | None:
    return "a folder other than /" if value == "/" else None


def parse_ost_ranges(text: str) -> tuple[int, ...]:
    """``"0-3,8"`` -> (0, 1, 2, 3, 8); ValueError saying what is wrong (a part that is not
    ``N`` or ``N-M`` in decimal, a range running backwards, an empty list, an OST twice)."""
    indices: list[int] = []
    for part in text.split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d{1,6})(?:\s*-\s*(\d{1,6}))?", part)
        if match is None:
            raise ValueError(f"OST indices like \"0-3,8\" (part {part!r} is not N or N-M)")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise ValueError(f"OST indices like \"0-3,8\" (range {part!r} runs backwards)")
        indices.extend(range(first, last + 1))
    repeated = sorted({i for i in indices if indices.count(i) > 1}) if len(indices) < 5000 else []
    if repeated:
        raise ValueError(f"each OST once (OST {repeated[0]} is listed twice)")
    return tuple(indices)


def _ost_ranges(value: str) -> str | None:
    try:
        parse_ost_ranges(value)
    except ValueError as err:
        return str(err)
    return None


def _class_name(value: str) -> str | None:
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", value):
        return "a performance class of 1 to 64 letters, digits, '_', '-' or '.'"
    return None


#: schemes recovery fetches from (scratchkeeper.transfer.ranged), and what a pattern looks like
SOURCE_SCHEMES = ("ftp", "gsiftp", "http", "https")
_SOURCE_PATTERN = re.compile(r"(?:file://|(?P<scheme>[a-z]+)://(?P<host>[A-Za-z0-9*.-]{1,253}|"
                             r"\[[0-9A-Fa-f:.*]{1,64}\])(?::(?P<port>\*|\d{1,5}))?)/?", re.ASCII)


def _source_patterns(values: list[str]) -> str | None:
    """``recovery.allowed_sources``: each ``scheme://host[:port]`` or ``file://``."""
    for value in values:
        match = _SOURCE_PATTERN.fullmatch(value)
        if match is None or (match["scheme"] is not None and (
                match["scheme"] not in SOURCE_SCHEMES
                or (match["port"] not in (None, "*") and not 0 < int(match["port"]) < 65536))):
            return (f"entries \"scheme://host[:port]\" ({', '.join(SOURCE_SCHEMES)}; '*' "
                    f"wildcards in the host, port '*' for any) or \"file://\" ({value!r} is not)")
    return None


#: What a ``[metrics]`` address looks like: ``HOST:PORT`` (an IPv4 address or a name, or an IPv6
#: address in brackets), port 1-65535; ``""`` or ``"0"`` turns the endpoint off.
_LISTEN_ADDRESS = re.compile(r"(?P<host>[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,64}\]):"
                             r"(?P<port>\d{1,5})", re.ASCII)


def listen_address(value: str) -> tuple[str, int] | None:
    """``"127.0.0.1:9671"`` -> ("127.0.0.1", 9671); ``""``/``"0"`` -> None (off); ValueError
    saying what was expected otherwise."""
    if value in ("", "0"):
        return None
    match = _LISTEN_ADDRESS.fullmatch(value)
    if match is None or not 0 < int(match["port"]) < 65536:
        raise ValueError("HOST:PORT (e.g. 127.0.0.1:9671, [::1]:9671, port 1-65535), or \"\" "
                         "or \"0\" for no endpoint")
    return match["host"].strip("[]"), int(match["port"])


def _listen_address(value: str) -> str | None:
    try:
        listen_address(value)
    except ValueError as err:
        return str(err)
    return None
