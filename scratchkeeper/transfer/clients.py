"""The real client command for a structured transfer, chosen by scheme.

``gsiftp://`` and ``ftp://`` go through ``globus-url-copy`` (with ``-verify-checksum`` when the
site enables it), ``http(s)://`` through ``curl``, local paths and ``file://`` through ``cp``,
``host:path`` through ``scp``.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from ..config import TransferConfig
from ..transfer.uri import Location


@dataclass(frozen=True)
class ClientCommand:
    """argv of one transfer and the local path it creates (for stage-in) or reads."""

    argv: tuple[str, ...]
    local_path: str
    remote: str
    client: str


class UnsupportedTransfer(ValueError):
    """No client can do this transfer (e.g. a directory over HTTP)."""


def destination_path(source: Location, destination: Location) -> str:
    """A destination ending in ``/`` is a directory: the source's file name goes inside it."""
    if destination.is_folder:
        return posixpath.join(destination.path.rstrip("/"), source.basename)
    return destination.path.rstrip("/") or "/"


def client_command(source: Location, destination: Location, *, recursive: bool,
                   config: TransferConfig) -> ClientCommand:
    """argv that moves ``source`` to ``destination``; one side is local, the other may not be."""
    if source.is_local and destination.is_local:
        return _cp(source, destination, recursive, config)
    remote, local = (source, destination) if not source.is_local else (destination, source)
    pulling = remote is source
    local_path = destination_path(source, destination) if pulling else source.path
    if remote.scheme in ("gsiftp", "ftp"):
        argv = [config.globus_url_copy, *config.globus_url_copy_options]
        if config.verify_checksum:
            argv.append("-verify-checksum")
        if recursive:
            argv += ["-r", "-cd"]
        elif not pulling:
            argv.append("-cd")
        local_uri = "file://" + local_path + ("/" if recursive else "")
        remote_uri = remote.text + ("/" if recursive and not remote.text.endswith("/") else "")
        pair = [remote_uri, local_uri] if pulling else [local_uri, remote_uri]
        return ClientCommand(tuple(argv + pair), local_path, remote.text, "globus-url-copy")
    if remote.scheme in ("http", "https"):
        if recursive:
            raise UnsupportedTransfer(f"{remote.scheme}:// cannot move a directory; "
                                      "stage its files one by one or use gsiftp://")
        base = [config.curl, "--fail", "--silent", "--show-error", "--location",
                *config.curl_options]
        if pulling:
            argv = base + ["--create-dirs", "--output", local_path, "--", remote.text]
        else:
            argv = base + ["--upload-file", local_path, "--", remote.text]
        return ClientCommand(tuple(argv), local_path, remote.text, "curl")
    if remote.scheme == "scp":
        argv = [config.scp, *config.scp_options]
        if recursive:
            argv.append("-r")
        remote_spec = f"{remote.host}:{remote.path}"
        pair = [remote_spec, local_path] if pulling else [local_path, remote_spec]
        return ClientCommand(tuple(argv + ["--"] + pair), local_path, remote.text, "scp")
    raise UnsupportedTransfer(f"no client for {remote.scheme}://")


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
