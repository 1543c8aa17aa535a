"""Source and destination locations of transfers: URIs, ``host:path`` and plain paths."""

from __future__ import annotations

import posixpath
import re
from urllib.parse import unquote, urlsplit

from ..structs import record

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
# [user@]host:path, the scp form: as for scp, a colon before any slash names a host
_HOSTPATH_RE = re.compile(r"^(?:(?P<user>[^@/]*)@)?(?P<host>\[[^\]/]*\]|[^@/:]+):(?P<path>.*)$")
# RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens (and the
# underscore that many sites' internal names carry)
_HOST_LABEL_RE = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")
_USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def is_host_name(host: str) -> bool:
    """True for a DNS host name, an IPv4 address or a bracketed IPv6 address.

    Nothing else may reach a client as a host: a leading ``-`` would be read as an option, an
    ``=`` or a space as something other than a name.
    """
    if host.startswith("[") and host.endswith("]"):
        return bool(re.fullmatch(r"[0-9A-Fa-f:.]+", host[1:-1])) and ":" in host
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    return 0 < len(host) <= 253 and all(_HOST_LABEL_RE.match(label) for label in labels)


@record(frozen=True)
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
    def is_folder(self) -> bool:
        """Written as a folder: a trailing ``/``, or a last component ``.`` or ``..``."""
        return self.path.endswith("/")

    @property
    def basename(self) -> str:
        return posixpath.basename(self.path.rstrip("/"))


class UnknownScheme(ValueError):
    """A ``scheme://`` that no transfer client handles."""


def names_data(token: str) -> bool:
    """True for a token that names data, never a command: a URI, a path, ``~...``, ``host:path``.

    A path is anything holding a ``/``; ``host:path`` is scp's rule (a colon before any slash).
    """
    return bool(_SCHEME_RE.match(token) or "/" in token or token.startswith("~")
                or _HOSTPATH_RE.match(token))


def parse_location(token: str, *, cwd: str | None = None) -> Location:
    """Classify ``token``; relative local paths are made absolute against ``cwd``.

    Local paths are normalised (``..`` resolved by name); a path written as a folder (trailing
    ``/``, or ending in ``/.`` or ``/..``) keeps one trailing ``/``. Raises
    :class:`UnknownScheme` for a ``scheme://`` no client handles and ``ValueError`` for an
    empty or malformed location, or a host that is not a host name.
    """
    if not token:
        raise ValueError("empty location")
    match = _SCHEME_RE.match(token)
    if match:
        scheme = match.group(1).lower()
        if scheme not in SCHEMES:
            raise UnknownScheme(scheme)
        try:
            parts = urlsplit(token)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError as err:
            raise ValueError(f"malformed URI ({err}): {token}") from err
        if scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise ValueError(f"file URI with a host: {token}")
            path = unquote(parts.path)
            if not path.startswith("/"):
                raise ValueError(f"file URI without an absolute path: {token}")
            return Location(token, "file", "", _normal_path(path))
        if not parts.hostname:
            raise ValueError(f"URI without a host: {token}")
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        if not is_host_name(host):
            raise ValueError(f"'{host}' is not a host name: {token}")
        if not parts.path or parts.path == "/":
            raise ValueError(f"URI without a path: {token}")
        path = unquote(parts.path)
        if _CONTROL_RE.search(path) or _CONTROL_RE.search(token):
            # a %0D%0A would end an FTP command and start another; no server takes one
            raise ValueError(f"URI with a control character (such as %0A): {token!r}")
        return Location(token, scheme, parts.netloc, path)
    hostpath = _HOSTPATH_RE.match(token)
    if hostpath and not token.startswith(("/", "./", "../", "~")):
        path = hostpath.group("path")
        user = hostpath.group("user")
        host = hostpath.group("host")
        if not is_host_name(host):
            raise ValueError(f"'{host}' is not a host name (host:path): {token}")
        if user is not None and not _USER_RE.match(user):
            raise ValueError(f"'{user}' is not a user name (user@host:path): {token}")
        if not path:
            raise ValueError(f"host:path without a path: {token}")
        return Location(token, "scp", f"{user}@{host}" if user else host, path)
    path = token
    if path.startswith("~"):
        raise ValueError(f"'~' is not expanded in a data directive; write the absolute path: {token}")
    if not path.startswith("/"):
        if cwd is None:
            raise ValueError(f"relative path with no working directory: {token}")
        path = posixpath.join(cwd, path)
    return Location(token, "path", "", _normal_path(path))


def _normal_path(path: str) -> str:
    """``path`` normalised by name, with one trailing ``/`` if it is written as a folder."""
    normal = posixpath.normpath(path)
    if normal.startswith("//"):
        normal = "/" + normal.lstrip("/")
    folder = path.endswith("/") or posixpath.basename(path) in (".", "..")
    return normal + "/" if folder and normal != "/" else normal


def inside(path: str, root: str) -> bool:
    """True if the normalised absolute ``path`` is ``root`` or below it (by name)."""
    path, root = posixpath.normpath(path), posixpath.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")
