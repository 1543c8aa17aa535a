"""Where a root service may reach on a user's behalf: ``recovery.allowed_sources``.

A source URI comes from a user's directive. recoveryd fetches lost stripes from it as root, and
the chain service asks its server for a file's size before a just-in-time stage-in; neither may
reach a host because a user named it. Both ask :class:`SourceAllowList`: the site's list of
``scheme://host[:port]`` patterns (``*`` wildcards, ``file://`` for local files), or, when the
list is empty, the endpoints root's ``stage commit`` recorded as used by the site's data jobs,
trusted only while the state database is root's alone (docs/security.rst). An HTTP redirect is
a new URL: both ask the list about each hop before it is followed
(:meth:`SourceAllowList.why_endpoint_refused`, :mod:`scratchkeeper.transfer.redirects`).
"""

from __future__ import annotations

import logging
import os
import re
import stat as statmod
import threading
import urllib.parse

from ..config import RecoveryConfig
from ..errors import ScratchkeeperError
from ..state import StateStore
from . import records
from .records import LOCAL, source_endpoint

log = logging.getLogger(__name__)


def root_only(path: str) -> bool:
    """Whether only root can change the SQLite database ``path`` (the file and its folder,
    where its journal is made): owned by root, not writable by group or others."""
    for target in (path, os.path.dirname(os.path.abspath(path))):
        try:
            info = os.stat(target)
        except OSError:
            return False
        if info.st_uid != 0 or statmod.S_IMODE(info.st_mode) & 0o022:
            return False
    return True


class SourceAllowList:
    """``recovery.allowed_sources``, or the endpoints the site's data jobs staged from."""

    def __init__(self, config: RecoveryConfig, store: StateStore | None):
        self.patterns = [parse_pattern(p) for p in config.allowed_sources]
        self.store = store
        self._lock = threading.Lock()
        self._known: dict[str, bool] = {}  # derived default: endpoint -> used by a data job

    def why_refused(self, uri: str) -> str | None:
        """None when recovery may fetch ``uri``, else why not (one line)."""
        why = self.why_endpoint_refused(uri)
        return None if why is None else f"{short(uri)}: {why}"

    def why_endpoint_refused(self, uri: str) -> str | None:
        """:meth:`why_refused` without the URI in front: the policy a root reader asks about
        each HTTP redirect target before it follows one (:mod:`scratchkeeper.transfer.redirects`),
        the same check the first URL passed."""
        endpoint = source_endpoint(uri)
        if endpoint is None:
            return "not a source recovery can fetch from"
        if self.patterns:
            if any(endpoint_matches(pattern, endpoint) for pattern in self.patterns):
                return None
            return f"{endpoint} is not in recovery.allowed_sources; refusing to fetch from it"
        if self.store is None or not root_only(self.store.path):
            return ("recovery.allowed_sources is empty and no state database only root can "
                    "write records where the site's data jobs staged from; refusing to fetch "
                    "from it (set recovery.allowed_sources)")
        if self._used(endpoint):
            return None
        return (f"no data job of the site staged from {endpoint} (recovery.allowed_sources is "
                "empty); refusing to fetch from it")

    def _used(self, endpoint: str) -> bool:
        with self._lock:
            known = self._known.get(endpoint)
        if known:
            return True  # once used, always used; a no is asked again (a commit may follow)
        try:
            used = records.endpoint_used(self.store, endpoint)
        except ScratchkeeperError as err:
            log.warning("reading the recorded source endpoints: %s", err)
            return False
        with self._lock:
            if len(self._known) < 65536:
                self._known[endpoint] = used
        return used


def parse_pattern(text: str) -> tuple[str, str, str]:
    """(scheme, host pattern, port or '*') of a checked ``allowed_sources`` entry."""
    if text.rstrip("/") == LOCAL.rstrip("/"):
        return ("file", "", "")
    parts = urllib.parse.urlsplit(text.rstrip("/"))
    netloc = parts.netloc
    host, _, port = netloc.rpartition(":") if not netloc.endswith("]") else (netloc, "", "")
    if not host:  # no port given
        host, port = netloc, ""
    scheme = parts.scheme.lower()
    return (scheme, host.lower(), port or str(records.DEFAULT_PORTS[scheme]))


def endpoint_matches(pattern: tuple[str, str, str], endpoint: str) -> bool:
    scheme, host, port = pattern
    if endpoint == LOCAL:
        return scheme == "file"
    parts = urllib.parse.urlsplit(endpoint)
    netloc = parts.netloc
    their_host, _, their_port = netloc.rpartition(":")
    return (parts.scheme == scheme and _host_matches(host, their_host)
            and (port == "*" or port == their_port))


def _host_matches(pattern: str, host: str) -> bool:
    """``*`` stands for any run of characters; nothing else is special (not even ``[``)."""
    if "*" not in pattern:
        return pattern == host
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), host) is not None


def short(uri: str) -> str:
    return uri if len(uri) <= 300 else uri[:300] + "..."
