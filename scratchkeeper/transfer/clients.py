"""The real client command for a structured transfer, chosen by scheme.

``gsiftp://`` and ``ftp://`` go through ``globus-url-copy`` (with ``-verify-checksum`` when the
site enables it), ``http(s)://`` through ``curl``, local paths and ``file://`` through ``cp``,
``host:path`` through ``scp``.

Every client touches exactly the path the planner confined under the scratch root, because no
client expands a name here (this module is the one place their argv is built; the ranged
reader of recovery builds on it):

* ``curl`` runs with ``--globoff`` (no ``{a,b}``/``[1-9]`` URL globbing, so no ``#1``
  substitution in ``--output`` and no globbing of ``--upload-file``) and ``--disable`` (no
  ``~/.curlrc``, whose ``output-dir`` or ``remote-name`` would move the file written);
* ``globus-url-copy`` gets local paths as percent-encoded ``file://`` URLs (it decodes ``%XX``
  and globs ``*``, ``?`` and ``[`` in a raw URL, so ``%2e%2e`` would climb out and ``x[1-2]``
  would read ``x1``), and a remote URL holding a raw wildcard, ``{``, ``}`` or ``#`` is refused
  (``%2A`` names a ``*`` literally); ``-r`` and a trailing ``/`` only for a folder transfer;
* ``scp`` is given only remote paths that neither the far side's shell (the legacy protocol,
  ``-O``) nor its glob (the SFTP protocol) changes; local paths are argv words, never expanded;
* ``cp`` expands nothing.

A refusal is an :class:`ExpandedName`, which the planner reports as ``script:LINE``.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from ..config import TransferConfig
from ..errors import TransferError
from ..transfer.uri import Location


@dataclass(frozen=True)
class ClientCommand:
    """argv of one transfer and the local path it creates (for stage-in) or reads."""

    argv: tuple[str, ...]
    local_path: str
    remote: str
    client: str


class UnsupportedTransfer(TransferError, ValueError):
    """No client can do this transfer (e.g. a directory over HTTP); never worth a retry."""

    def __init__(self, message: str):
        super().__init__(message, permanent=True)


class ExpandedName(UnsupportedTransfer):
    """A name the client would expand (a wildcard, a brace list, a shell word), so that it
    would touch another path than the one named."""


#: what globus-url-copy expands in a URL (``*``, ``?``, ``[``) or cannot parse (``{``, ``}``,
#: ``#``; ``]`` goes with ``[``), after the host: each must be percent-encoded to be a name
_GLOBUS_SPECIAL = "*?[]{}#"
#: the only characters of an scp remote path: neither the legacy protocol's remote shell nor
#: the SFTP protocol's remote glob gives any of them a meaning (``~`` only first: the home)
_SCP_PATH_RE = re.compile(r"[\w.+,=@%:/-]+")


def destination_path(source: Location, destination: Location) -> str:
    """A destination ending in ``/`` is a directory: the source's file name goes inside it."""
    if destination.is_folder:
        return posixpath.join(destination.path.rstrip("/"), source.basename)
    return destination.path.rstrip("/") or "/"


def file_url(path: str, *, folder: bool = False) -> str:
    """``path`` as a ``file://`` URL that globus-url-copy reads as exactly that path: every
    character but letters, digits, ``_.-~`` and ``/`` percent-encoded (``%`` too)."""
    url = "file://" + quote(path.rstrip("/") or "/", safe="/")
    return url + "/" if folder and not url.endswith("/") else url


def curl_argv(config: TransferConfig) -> list[str]:
    """curl and what comes before its first URL: ``--disable`` must be the first argument."""
    return [config.curl, "--disable"]


def curl_url_options(config: TransferConfig, *, follow: bool) -> list[str]:
    """The options of each URL of a curl command (repeated after every ``--next``, which
    resets them); ``--globoff`` after the site's options, so none of them turns it off.

    ``follow``: a data job, which runs as its user, follows redirects as curl does for that
    user (``--location``). A root path (recoveryd's ranged reads, the chain service's size
    query) passes False: ``--no-location`` comes after the site's options, so no ``-L`` there
    makes curl follow a Location its caller has not checked (:mod:`.redirects`)."""
    if follow:
        return ["--fail", "--silent", "--show-error", "--location", *config.curl_options,
                "--globoff"]
    return ["--fail", "--silent", "--show-error", *config.curl_options, "--no-location",
            "--globoff"]


def http_url(remote: Location) -> str:
    """The URL curl is given: as written, a space as ``%20`` (curl refuses a raw one)."""
    text = remote.text
    head = _netloc_end(text)
    return text[:head] + text[head:].replace(" ", "%20")


def globus_url(remote: Location, *, folder: bool = False) -> str:
    """A remote ``gsiftp://``/``ftp://`` URL for globus-url-copy; raises :class:`ExpandedName`
    when it holds a character globus-url-copy would expand or cannot parse."""
    text = remote.text
    tail = text[_netloc_end(text):]
    found = sorted({c for c in tail if c in _GLOBUS_SPECIAL})
    if found:
        shown = " ".join(f"'{c}' (write {quote(c, safe='')})" for c in found)
        raise ExpandedName(f"{text}: globus-url-copy would read {shown} as a wildcard or "
                           "cannot parse it; percent-encode a character that is part of a name")
    if folder:
        return text if text.endswith("/") else text + "/"
    if text.endswith("/"):
        raise ExpandedName(f"{text} names a folder (it ends in '/'), which globus-url-copy "
                           "copies file by file; a folder transfer is #DW ... type=directory")
    return text


def scp_remote(remote: Location) -> str:
    """``[user@]host:path`` for scp; raises :class:`ExpandedName` for a path the far side
    would expand or split."""
    path = remote.path
    body = path[1:] if path.startswith("~") else path
    if path.startswith("-") or (body and not _SCP_PATH_RE.fullmatch(body)):
        bad = sorted({c for c in body if not _SCP_PATH_RE.fullmatch(c)})
        what = " ".join(repr(c) for c in bad) if bad else "a leading '-'"
        raise ExpandedName(f"{remote.text}: scp's far side would expand or split {what} "
                           "(its shell with -O, its glob otherwise); an scp path holds only "
                           "letters, digits and ._+,=@%:/- (and a leading ~)")
    return f"{remote.host}:{path}"


def client_command(source: Location, destination: Location, *, recursive: bool,
                   config: TransferConfig) -> ClientCommand:
    """argv that moves ``source`` to ``destination``; one side is local, the other may not be.

    Raises :class:`UnsupportedTransfer` (:class:`ExpandedName` for a name the client would
    expand) when no client can move exactly these paths."""
    if source.is_local and destination.is_local:
        return _cp(source, destination, recursive, config)
    remote, local = (source, destination) if not source.is_local else (destination, source)
    pulling = remote is source
    local_path = destination_path(source, destination) if pulling else source.path
    if remote.scheme in ("gsiftp", "ftp"):
        return _globus_url_copy(remote, local_path, pulling, recursive, config)
    if remote.scheme in ("http", "https"):
        if recursive:
            raise UnsupportedTransfer(f"{remote.scheme}:// cannot move a directory; "
                                      "stage its files one by one or use gsiftp://")
        url = http_url(remote)
        # a data job runs as its user: it follows redirects as that user's curl would
        argv = [*curl_argv(config), *curl_url_options(config, follow=True)]
        if pulling:
            argv += ["--create-dirs", "--output", local_path, "--url", url]
        else:
            if remote.is_folder:  # named here, not by curl: the name is encoded as one name
                url = _in_folder(url, posixpath.basename(local_path))
            argv += ["--upload-file", local_path, "--url", url]
        return ClientCommand(tuple(argv), local_path, remote.text, "curl")
    if remote.scheme == "scp":
        argv = [config.scp, *config.scp_options]
        if recursive:
            argv.append("-r")
        remote_spec = scp_remote(remote)
        pair = [remote_spec, local_path] if pulling else [local_path, remote_spec]
        return ClientCommand(tuple(argv + ["--"] + pair), local_path, remote.text, "scp")
    raise UnsupportedTransfer(f"no client for {remote.scheme}://")


def _globus_url_copy(remote: Location, local_path: str, pulling: bool, recursive: bool,
                     config: TransferConfig) -> ClientCommand:
    argv = [config.globus_url_copy, *config.globus_url_copy_options]
    if config.verify_checksum:
        argv.append("-verify-checksum")
    if recursive:
        argv += ["-r", "-cd"]
    elif not pulling:
        argv.append("-cd")
    # a folder the planner confined (a folder transfer, or a stage-out source written as a
    # folder: its files) is the one URL that ends in '/'
    local_folder = recursive or local_path.endswith("/")
    remote_url = globus_url(remote, folder=recursive or (not pulling and remote.is_folder))
    if not pulling and remote.is_folder and not local_folder:
        # the file's name put in the folder URL here, encoded, not left to globus-url-copy
        remote_url = _in_folder(remote_url, posixpath.basename(local_path))
    local_url = file_url(local_path, folder=local_folder)
    pair = [remote_url, local_url] if pulling else [local_url, remote_url]
    return ClientCommand(tuple(argv + pair), local_path, remote.text, "globus-url-copy")


def _netloc_end(url: str) -> int:
    """Where the path of ``scheme://netloc/path`` starts (the end for a URL without a path)."""
    parts = urlsplit(url)
    start = len(parts.scheme) + 3 + len(parts.netloc)
    return start if url[:start].lower() == f"{parts.scheme}://{parts.netloc}".lower() else 0


def _in_folder(url: str, name: str) -> str:
    """The URL of the file ``name`` in the folder ``url`` (its path ends in ``/``), ``name``
    percent-encoded as one path segment, before any ``?query`` or ``#fragment``."""
    head = _netloc_end(url)
    found = re.search(r"[?#]", url[head:])
    end = head + found.start() if found else len(url)
    return url[:end] + quote(name, safe="") + url[end:]


def _cp(source: Location, destination: Location, recursive: bool,
        config: TransferConfig) -> ClientCommand:
    target = destination_path(source, destination)
    argv = [config.cp, "-p"]
    if recursive:
        argv.append("-r")
        target = destination.path.rstrip("/")
        source_arg = source.path.rstrip("/") + "/."
    else:
        source_arg = source.path
    return ClientCommand(tuple(argv + ["--", source_arg, target]), target, source.uri, "cp")
