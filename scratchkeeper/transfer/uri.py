"""Source and destination locations of transfers: URIs, ``host:path`` and plain paths."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

#: schemes a structured directive may name, and the client that moves them
SCHEMES = {
    "gsiftp": "globus-url-copy",
    "ftp": "globus-url-copy",
    "http": "curl",
    "https": "curl",
    "file": "cp",
    "scp": "scp",
}

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# [user@]host:path, the scp form; a drive-letter-free Unix world, so one colon before the path
_HOSTPATH_RE = re.compile(r"^(?:(?P<user>[A-Za-z0-9._-]+)@)?(?P<host>[A-Za-z0-9._-]+|\[[0-9A-Fa-f:]+\]):(?P<path>.*)$")


@dataclass(frozen=True)
class Location:
    """Where data is: a remote URI (``scheme`` set) or a local path (``scheme == "path"``)."""

    text: str          # as the user wrote it
    scheme: str        # gsiftp, ftp, http, https, file, scp, or "path"
    host: str = ""
    path: str = ""     # remote path, or the local path for "path"/"file"

    @property
    def is_local(self) -> bool:
        return self.scheme in ("path", "file")

    @property
    def uri(self) -> str:
        """A canonical URI for metadata (``file:///abs`` for local paths, ``scp://host/path``)."""
        if self.scheme == "path":
            return "file://" + self.path
        if self.scheme == "scp":
            user_host = self.host
            path = self.path if self.path.startswith("/") else "/~/" + self.path
            return f"scp://{user_host}{path}"
        return self.text

    @property
    def basename(self) -> str:
        return posixpath.basename(self.path.rstrip("/"))


class UnknownScheme(ValueError):
    """A ``scheme://`` that no transfer client handles."""


def looks_like_location(token: str) -> bool:
    """True for tokens that name data rather than a command: URIs, paths, ``host:path``."""
    return bool(_SCHEME_RE.match(token) or token.startswith(("/", "./", "../", "~/"))
                or _HOSTPATH_RE.match(token))


def parse_location(token: str, *, cwd: str | None = None) -> Location:
    """Classify ``token``; relative local paths are made absolute against ``cwd``.

    Raises :class:`UnknownScheme` for a ``scheme://`` no client handles and ``ValueError`` for
    an empty or malformed location.
    """
    if not token:
        raise ValueError("empty location")
    match = _SCHEME_RE.match(token)
    if match:
        scheme = match.group(1).lower()
        if scheme not in SCHEMES:
            raise UnknownScheme(scheme)
        parts = urlsplit(token)
        if scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise ValueError(f"file URI with a host: {token}")
            path = unquote(parts.path)
            if not path.startswith("/"):
                raise ValueError(f"file URI without an absolute path: {token}")
            return Location(token, "file", "", posixpath.normpath(path))
        if not parts.hostname:
            raise ValueError(f"URI without a host: {token}")
        if not parts.path or parts.path == "/":
            raise ValueError(f"URI without a path: {token}")
        return Location(token, scheme, parts.netloc, unquote(parts.path))
    hostpath = _HOSTPATH_RE.match(token)
    if hostpath and not token.startswith(("/", "./", "../", "~")):
        path = hostpath.group("path")
        if not path:
            raise ValueError(f"host:path without a path: {token}")
        user = hostpath.group("user")
        host = hostpath.group("host")
        return Location(token, "scp", f"{user}@{host}" if user else host, path)
    path = token
    if path.startswith("~"):
        raise ValueError(f"'~' is not expanded in a data directive; write the absolute path: {token}")
    if not path.startswith("/"):
        if cwd is None:
            raise ValueError(f"relative path with no working directory: {token}")
        path = posixpath.join(cwd, path)
    trailing = "/" if token.endswith("/") else ""
    return Location(token, "path", "", posixpath.normpath(path) + trailing)
