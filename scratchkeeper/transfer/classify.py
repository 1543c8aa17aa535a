"""Which transfer failures are permanent (not worth a retry) and which may pass.

One list of patterns serves both the data jobs' shell retry loop (rendered into the script, for
``grep -E``) and the Python transfers of the daemons, so both judge an error the same way.
"""

from __future__ import annotations

import re

#: messages of curl, globus-url-copy, scp, cp and friends that retrying cannot fix
#: (POSIX ERE and Python re alike: no \d, no lookarounds)
PERMANENT_PATTERNS: tuple[str, ...] = (
    r"No such file or directory",
    r"Permission denied",
    r"Operation not permitted",
    r"Is a directory",
    r"Not a directory",
    r"File not found",
    r"does not exist",
    # HTTP 4xx but 408 (timeout) and 429 (too many requests), as curl --fail reports them
    r"returned error: 4(0[0-79]|[13-9][0-9]|2[0-8])",
    # FTP: 550 file unavailable, 553 name not allowed, 530 not logged in
    r"(^|[^0-9])55[03]([^0-9]|$)",
    r"(^|[^0-9])530([^0-9]|$)",
    r"unknown URI scheme",
)

_COMPILED = re.compile("|".join(f"(?:{p})" for p in PERMANENT_PATTERNS), re.MULTILINE)


def is_permanent(message: str) -> bool:
    """True when ``message`` (a client's stderr) names an error a retry cannot fix."""
    return bool(_COMPILED.search(message or ""))


def grep_pattern() -> str:
    """The same patterns as one ``grep -E`` expression."""
    return "|".join(f"({p})" for p in PERMANENT_PATTERNS)
