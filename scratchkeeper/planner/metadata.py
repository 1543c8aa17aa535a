"""Recovery metadata from literal transfer commands (the thesis, §4.6.1).

Users already write ``globus-url-copy``, ``scp``, ``cp``, ``rsync``, ``hsi get``, ``curl`` and
``wget`` commands; :func:`extract_transfers` reads which remote source each staged file came
from (or, for stage-out, where a result goes) without running anything.
"""

from __future__ import annotations

import posixpath
import re
import shlex

from ..structs import record
from ..transfer.uri import UnknownScheme, parse_location


@record(frozen=True)
class ExtractedTransfer:
    """``source`` URI (or path) and ``destination`` path/URI of one file a command moves."""

    source: str
    destination: str
    tool: str


# options that take a value, per tool (from each tool's manual page)
_VALUED = {
    "globus-url-copy": {"-tcp-bs", "-tcp-buffer-size", "-bs", "-block-size", "-p", "-parallel",
                        "-cc", "-concurrency", "-sbs", "-sync-level", "-partial-offset", "-off",
                        "-partial-length", "-len", "-stripe-bs", "-stripe-block-size",
                        "-dcpriv", "-subject", "-ss", "-ds", "-s", "-d", "-af", "-alias-file",
                        "-f", "-df", "-dumpfile", "-checksum-alg", "-src-pipe", "-SP",
                        "-dst-pipe", "-DP", "-pipe", "-restart-interval", "-rst-interval",
                        "-restart-retries", "-rst-retries", "-restart-timeout", "-rst-timeout",
                        "-stall-timeout", "-st", "-sp", "-dp", "-fsstack", "-src-fsstack",
                        "-dst-fsstack", "-authz", "-udt", "-list", "-cd", "-perms", "-i"},
    "scp": {"-P", "-i", "-o", "-c", "-F", "-l", "-S", "-J", "-D", "-X"},
    "cp": {"-t", "--target-directory", "-S", "--suffix"},
    "rsync": {"-e", "--rsh", "-f", "--filter", "--exclude", "--include", "-T", "--temp-dir",
              "--rsync-path", "-B", "--block-size", "--port", "--bwlimit", "--files-from",
              "--exclude-from", "--include-from", "--timeout", "--contimeout"},
    "curl": {"-o", "--output", "-H", "--header", "-u", "--user", "-X", "--request", "-d",
             "--data", "-r", "--range", "-m", "--max-time", "--retry", "--retry-delay",
             "--retry-max-time", "-A", "--user-agent", "-e", "--referer", "-b", "--cookie",
             "-c", "--cookie-jar", "--cacert", "--cert", "--key", "-w", "--write-out",
             "--connect-timeout", "-x", "--proxy", "-T", "--upload-file", "-F", "--form",
             "--output-dir", "-K", "--config", "--limit-rate", "-C", "--continue-at"},
    "wget": {"-O", "--output-document", "-P", "--directory-prefix", "-o", "--output-file",
             "-a", "--append-output", "-t", "--tries", "-T", "--timeout", "-w", "--wait",
             "--user", "--password", "--header", "-U", "--user-agent", "-i", "--input-file",
             "-e", "--execute", "--limit-rate"},
    "hsi": {"-A", "-k", "-l", "-s", "-P", "-p", "-o", "-d", "-R", "-t", "-h", "-c"},
}


def extract_transfers(command: str, *, cwd: str, stage_in: bool) -> list[ExtractedTransfer]:
    """Transfers a literal command performs, for the tools this module knows; [] otherwise.

    Pipelines and ``&&`` chains are read part by part. Relative local paths are resolved against
    ``cwd`` (where the data job runs).
    """
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return []
    found: list[ExtractedTransfer] = []
    for part in _split_commands(tokens):
        if not part:
            continue
        if part[0] == "cd" and len(part) == 2:
            cwd = posixpath.normpath(posixpath.join(cwd, part[1]))
            continue
        tool = posixpath.basename(part[0])
        handler = _HANDLERS.get(tool)
        if handler:
            found.extend(handler(part[1:], cwd, stage_in))
    return found


def _split_commands(tokens: list[str]) -> list[list[str]]:
    parts, current = [], []
    for token in tokens:
        if token and set(token) <= set(";&|"):
            parts.append(current)
            current = []
        else:
            current.append(token)
    parts.append(current)
    # skip leading environment assignments and wrappers like `time`
    cleaned = []
    for part in parts:
        while part and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", part[0]) or part[0] in ("time", "nice", "env")):
            part = part[1:]
        cleaned.append(part)
    return cleaned


def _operands(args: list[str], tool: str) -> tuple[list[str], dict[str, str], set[str]]:
    """Split args into operands, valued options and flags."""
    valued = _VALUED.get(tool, set())
    operands, values, flags = [], {}, set()
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            operands.extend(args[index + 1:])
            break
        if arg.startswith("-") and len(arg) > 1:
            name, eq, value = arg.partition("=")
            if eq and name in valued:
                values[name] = value
            elif arg in valued:
                values[arg] = args[index + 1] if index + 1 < len(args) else ""
                index += 1
            elif tool in ("scp", "curl", "wget") and len(arg) > 2 and arg[1] != "-" and arg[:2] in valued:
                values[arg[:2]] = arg[2:]  # -P2222, -ofile
            else:
                flags.add(arg)
        else:
            operands.append(arg)
        index += 1
    return operands, values, flags


#: characters that ``bash -c`` (unquoted) or the tool itself (curl's URL globs, the wildcards of
#: globus-url-copy, scp and rsync's far side) may expand: a word holding one may name other files
#: than it spells, so what it moves is not recorded (in an HTTP URL a ``?`` starts the query)
_EXPANDED = re.compile(r"[*?\[\]{}]")
_EXPANDED_HTTP = re.compile(r"[*\[\]{}]")


def _uri(token: str, cwd: str) -> str | None:
    http = token[:8].lower().startswith(("http://", "https://"))
    if (_EXPANDED_HTTP if http else _EXPANDED).search(token):
        return None
    try:
        return parse_location(token, cwd=cwd).uri
    except (ValueError, UnknownScheme):
        return None


def _local(token: str, cwd: str) -> str | None:
    if _EXPANDED.search(token):
        return None
    try:
        location = parse_location(token, cwd=cwd)
    except (ValueError, UnknownScheme):
        return None
    return location.path if location.is_local else None


def _pairs(sources: list[str], destination: str, cwd: str, stage_in: bool, tool: str):
    results = []
    for source in sources:
        if stage_in:
            src, dst = _uri(source, cwd), _local(destination, cwd)
            if src and dst:
                contents_only = tool == "rsync" and source.endswith("/")
                if not contents_only and (destination.endswith("/") or len(sources) > 1):
                    dst = posixpath.join(dst, posixpath.basename(source.rstrip("/")))
                results.append(ExtractedTransfer(src, dst, tool))
        else:
            src, dst = _local(source, cwd), _uri(destination, cwd)
            if src and dst:
                results.append(ExtractedTransfer(src, dst, tool))
    return results


def _copy_like(tool: str):
    def handler(args: list[str], cwd: str, stage_in: bool):
        operands, values, _ = _operands(args, tool)
        target = values.get("-t") or values.get("--target-directory")
        if target:
            return _pairs(operands, target.rstrip("/") + "/", cwd, stage_in, tool)
        if len(operands) < 2:
            return []
        return _pairs(operands[:-1], operands[-1], cwd, stage_in, tool)
    return handler


def _curl(args: list[str], cwd: str, stage_in: bool):
    operands, values, flags = _operands(args, "curl")
    upload = values.get("-T") or values.get("--upload-file")
    if upload and operands:
        return _pairs([upload], operands[0], cwd, False, "curl") if not stage_in else []
    urls = [o for o in operands if "://" in o]
    if len(urls) != 1 or not stage_in:
        return []
    output = values.get("-o") or values.get("--output")
    if output is None and ("-O" in flags or "--remote-name" in flags):
        output = posixpath.basename(urls[0].split("?")[0])
        if values.get("--output-dir"):
            output = posixpath.join(values["--output-dir"], output)
    if not output or output == "-":
        return []
    return _pairs(urls, output, cwd, True, "curl")


def _wget(args: list[str], cwd: str, stage_in: bool):
    operands, values, _ = _operands(args, "wget")
    urls = [o for o in operands if "://" in o]
    if len(urls) != 1 or not stage_in:
        return []
    output = values.get("-O") or values.get("--output-document")
    if output is None:
        prefix = values.get("-P") or values.get("--directory-prefix") or "."
        output = posixpath.join(prefix, posixpath.basename(urls[0].split("?")[0]))
    if output == "-":
        return []
    return _pairs(urls, output, cwd, True, "wget")


_HSI_GET = re.compile(r"^\s*c?get\s+(?:-\S+\s+)*(.+?)\s*:\s*(\S+)\s*$")
_HSI_PUT = re.compile(r"^\s*c?put\s+(?:-\S+\s+)*(.+?)\s*:\s*(\S+)\s*$")


def _hsi(args: list[str], cwd: str, stage_in: bool):
    operands, _, _ = _operands(args, "hsi")
    results = []
    # hsi takes its commands as the remaining words or as one quoted string; ';' separates them
    for command in " ".join(operands).split(";"):
        match = (_HSI_GET if stage_in else _HSI_PUT).match(command)
        if not match:
            continue
        local, remote = match.group(1).strip(), match.group(2).strip()
        if stage_in:
            dst = _local(local, cwd)
            if dst:
                results.append(ExtractedTransfer("hpss://" + _abs_hpss(remote), dst, "hsi"))
        else:
            src = _local(local, cwd)
            if src:
                results.append(ExtractedTransfer(src, "hpss://" + _abs_hpss(remote), "hsi"))
    return results


def _abs_hpss(remote: str) -> str:
    # HPSS paths relative to the user's HPSS home stay relative, marked by a leading "~/"
    return remote if remote.startswith("/") else "~/" + remote


_HANDLERS = {
    "globus-url-copy": _copy_like("globus-url-copy"),
    "scp": _copy_like("scp"),
    "cp": _copy_like("cp"),
    "rsync": _copy_like("rsync"),
    "curl": _curl,
    "wget": _wget,
    "hsi": _hsi,
}
