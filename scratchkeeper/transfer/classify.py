"""Which transfer failures are permanent (not worth a retry), which name a source that is not
there (yet), and which may pass.

One list of patterns serves both the data jobs' shell retry loop (rendered into the script, for
``grep -E``) and the Python transfers of the daemons, so both judge an error the same way.

Three kinds of error stop a transfer, checked in this order:

* **denied** (:data:`DENIED_PATTERNS`): permission refused (``Permission denied``, HTTP
  401/403, FTP 530). Never retried: waiting does not grant a permission, and retrying a
  refused login is what locks accounts.
* **missing** (:data:`MISSING_PATTERNS`): the file is not there (``No such file or
  directory``, HTTP 404/410, ``File not found``). Permanent unless the user asked for retries
  (``#STAGEIN -retry N``) or to wait for the source (``-wait-for-source``): a workflow's
  previous step may write it a few seconds late.
* **permanent** (:data:`OTHER_PERMANENT_PATTERNS`): anything else a retry cannot fix (other
  4xx, FTP 550/553 without a reason named above, an unknown scheme).
"""

from __future__ import annotations

import re

# (POSIX ERE and Python re alike: no \d, no lookarounds)

#: permission refused: permanent in every case, whatever the retry options
DENIED_PATTERNS: tuple[str, ...] = (
    r"Permission denied",
    r"Operation not permitted",
    # curl --fail: 401 Unauthorized, 403 Forbidden
    r"returned error: 40[13]",
    # FTP 530: not logged in
    r"(^|[^0-9])530([^0-9]|$)",
)

#: the file (or its folder) is not there: retried only when the user asked for it
MISSING_PATTERNS: tuple[str, ...] = (
    r"No such file or directory",
    r"File not found",
    r"does not exist",
    # curl --fail: 404 Not Found, 410 Gone
    r"returned error: 4(04|10)",
)

#: the rest that retrying cannot fix
OTHER_PERMANENT_PATTERNS: tuple[str, ...] = (
    r"Is a directory",
    r"Not a directory",
    # HTTP 4xx but 408 (timeout) and 429 (too many requests), as curl --fail reports them
    r"returned error: 4(0[0-79]|[13-9][0-9]|2[0-8])",
    # FTP: 550 file unavailable, 553 name not allowed
    r"(^|[^0-9])55[03]([^0-9]|$)",
    r"unknown URI scheme",
)

#: every error a retry cannot fix when the user asked for none (the daemons' judgement)
PERMANENT_PATTERNS: tuple[str, ...] = DENIED_PATTERNS + MISSING_PATTERNS + OTHER_PERMANENT_PATTERNS

DENIED = "denied"
MISSING = "missing"
PERMANENT = "permanent"
TRANSIENT = "transient"


def _compile(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.MULTILINE)


_COMPILED = _compile(PERMANENT_PATTERNS)
_KINDS = ((DENIED, _compile(DENIED_PATTERNS)), (MISSING, _compile(MISSING_PATTERNS)),
          (PERMANENT, _compile(OTHER_PERMANENT_PATTERNS)))


def is_permanent(message: str) -> bool:
    """True when ``message`` (a client's stderr) names an error a retry cannot fix."""
    return bool(_COMPILED.search(message or ""))


def classify(message: str) -> str:
    """:data:`DENIED`, :data:`MISSING`, :data:`PERMANENT` or :data:`TRANSIENT`: the first kind
    whose patterns ``message`` matches, in that order (a message naming both a missing file and
    a refused permission is denied)."""
    for kind, compiled in _KINDS:
        if compiled.search(message or ""):
            return kind
    return TRANSIENT


def grep_pattern(patterns: tuple[str, ...] = PERMANENT_PATTERNS) -> str:
    """``patterns`` (by default every permanent one) as one ``grep -E`` expression."""
    return "|".join(f"({p})" for p in patterns)
