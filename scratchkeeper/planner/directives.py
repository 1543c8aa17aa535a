"""Parse the data directives of a batch script.

Grammar (docs/directives.rst has the full text and examples):

``#STAGEIN <source> <destination>`` / ``#STAGEOUT <source> <destination>``
    a structured transfer, told by its first word: a URI (``scheme://``), a path (holds a
    ``/``), ``~...`` or ``host:path``. After shell-style quoting, with a trailing ``# comment``
    removed, it is exactly two words; anything else is an error. The planner renders the client.
``#STAGEIN <command...>`` / ``#STAGEOUT <command...>``
    a literal command the data job runs, starting with a command name (``hsi``...); a trailing
    backslash continues it on the next line, with or without the directive prefix.
``#STAGEIN -option ...``
    options of that data stage: ``-retry N``, ``-retry-delay S``, ``-walltime T``, ``-qos Q``,
    ``-account A``, ``-priority N``, ``-name NAME``, ``-parallel``, ``-input PATH``,
    ``-dependency afterok|afterany`` (stage-out only), ``-start jit|now`` (stage-in only: held
    back until just before the compute job's expected start, or started at once),
    ``-when close|end`` (stage-out only: each result offloaded once it is closed after writing,
    or all of them after the job), ``-wait-for-source DURATION`` (stage-in only: a source not
    there yet is tried again until then); stage-in only, the layout of the files it creates:
    ``-layout auto|1dv|1dh|2d``, ``-stripe-count N``, ``-stripe-size SIZE`` and, for ``auto``,
    ``-procs P``, ``-per-node M``, ``-request-size S``, ``-pattern seq|random``,
    ``-shared``/``-per-process``, ``-darshan LOG`` (:mod:`.layout_directive`).
``#DW stage_in source=... destination=... type=file|directory`` (and ``stage_out``)
    Cray DataWarp staging lines.
``#PBS -W stagein=local@host:remote[,...]`` (and ``stageout=``)
    PBS/Torque file staging.

Everything else stays in the compute script, in order. The local side of every transfer on
scratch (a stage-in destination, a stage-out source) and every ``-input`` lies inside the scratch
root, and no two transfers of a stage write one destination.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
from dataclasses import field, replace

from ..config import slurm_time_seconds
from ..errors import ConfigError, DirectiveError
from ..structs import record
from ..transfer.uri import SCHEMES, Location, UnknownScheme, inside, is_host_name, names_data, parse_location
from .layout_directive import (
    OPTION_ARITY as _LAYOUT_ARITY,
    LayoutOptions,
    check_layout_options,
    set_layout_option,
)

STAGE_IN = "stage-in"
STAGE_OUT = "stage-out"

_DIRECTIVE_RE = re.compile(r"^\s*#(STAGEIN|STAGEOUT)(?=\s|$)(.*)$")
_DW_RE = re.compile(r"^\s*#DW\s+(stage_in|stage_out)(?=\s|$)(.*)$")
# -W anywhere on a #PBS line (``#PBS -N run -W stagein=...``); what comes before it stays
_PBS_W_RE = re.compile(r"^(?P<before>\s*#PBS(?:\s+\S.*?)?)\s+-W\s*(?P<attributes>.*)$")
_PBS_W_STAGE_RE = re.compile(r"(^|,)\s*(stagein|stageout)\s*=")
_SAFE_VALUE_RE = re.compile(r"^[A-Za-z0-9._:+@/=][A-Za-z0-9._:+@/=-]*$")
_SIGNED_RE = re.compile(r"^-?[0-9]{1,10}$")
# a literal command starts with the name of a command, then a blank or the end (or ; & |)
_COMMAND_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+-]*(?=[\s;&|]|$)")

#: bounds of the numeric stage options (the scheduler's own bounds of -priority: plan.py)
MAX_RETRIES = 100
#: what the compute job's script has in place of each line of a data directive (continuations
#: included): its line N is the script's line N, so that bash's and the scheduler's messages
#: about the compute job name the line the user wrote
DATA_LINE = "# scratchkeeper: a data directive, run by a data job of the chain"
MAX_RETRY_DELAY = 86400.0
#: the longest -wait-for-source anyone may write (a site bounds it lower: staging.max_source_wait)
MAX_SOURCE_WAIT_SECONDS = 7 * 86400
_DURATION_RE = re.compile(r"([0-9]{1,7})([smh]?)")
_DURATION_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600}
MAX_WALLTIME_SECONDS = 365 * 86400
PRIORITY_BOUNDS = (-1024, 4294967294)  # PBS -p goes down to -1024, Slurm --priority up to 2^32-2
#: data jobs a ``-parallel`` stage may become: each stage-out job waits on every stage-in job,
#: so the chain's dependencies grow with the product of the two counts
MAX_PARALLEL_JOBS = 256

_DIRECTIVE = {STAGE_IN: "#STAGEIN", STAGE_OUT: "#STAGEOUT"}
_STAGE_OF = {"STAGEIN": STAGE_IN, "STAGEOUT": STAGE_OUT, "stage_in": STAGE_IN,
             "stage_out": STAGE_OUT}


@record(frozen=True)
class Transfer:
    """A structured transfer: ``source`` to ``destination``; ``recursive`` for directories."""

    source: Location
    destination: Location
    recursive: bool = False


@record(frozen=True)
class DataStep:
    """One thing a data job does: a literal ``command`` or a structured ``transfer``."""

    stage: str
    line: int
    command: str | None = None
    transfer: Transfer | None = None
    origin: str = "STAGE"  # STAGE, DW or PBS: which directive family wrote it


@record
class StageOptions:
    """Options of one data stage, from its option lines."""

    retries: int | None = None
    retry_delay: float | None = None
    walltime: str | None = None
    qos: str | None = None
    account: str | None = None
    priority: int | None = None
    job_name: str | None = None
    parallel: bool = False
    dependency: str | None = None
    start: str | None = None  # stage-in: "jit" or "now" (None: the site's staging.start)
    when: str | None = None   # stage-out: "close" or "end" (None: end)
    wait_for_source: int | None = None  # stage-in: seconds a missing source is waited for
    inputs: list[str] = field(default_factory=list)
    layout: LayoutOptions = field(default_factory=LayoutOptions)  # stage-in only
    lines: dict[str, int] = field(default_factory=dict)  # option name -> line it was set on


@record
class ParsedScript:
    """A batch script split into its compute part and its data stages."""

    path: str
    shebang: str
    compute_lines: list[str]
    steps: list[DataStep]
    options: dict[str, StageOptions]
    dialect: str | None  # "slurm", "pbs" or None: which header lines the script carries
    compute_job: dict[str, str]

    def stage_steps(self, stage: str) -> list[DataStep]:
        return [s for s in self.steps if s.stage == stage]

    @property
    def compute_script(self) -> str:
        return "\n".join(self.compute_lines) + "\n"


@record(frozen=True)
class _Context:
    """Where the script came from: its ``path`` (for errors), the submission directory ``cwd``
    (relative paths) and the ``scratch_root`` its staged data must stay in."""

    path: str
    cwd: str
    scratch_root: str

    def error(self, message: str, line: int) -> DirectiveError:
        return DirectiveError(message, path=self.path, line=line)


def parse_script(text: str, path: str, *, cwd: str, scratch_root: str) -> ParsedScript:
    """Split ``text`` (read from ``path``) into compute lines and data steps.

    ``cwd`` resolves relative paths (the submission directory); ``scratch_root``
    (``storage.scratch_root``) is where every stage-in destination, stage-out source and
    ``-input`` must lie. Every malformed directive raises :class:`DirectiveError` with ``path``
    and the 1-based line number.
    """
    for char, what in (("\x00", "a NUL byte"),
                       ("\r", "a carriage return (DOS line breaks? convert with dos2unix)")):
        if char in text:
            raise DirectiveError(f"the script contains {what}", path=path,
                                 line=text[: text.index(char)].count("\n") + 1)
    root = posixpath.normpath(scratch_root or "")
    if not posixpath.isabs(root):
        raise ConfigError(f"storage.scratch_root must be an absolute path, got {scratch_root!r}")
    ctx = _Context(path, cwd, "/" + root.lstrip("/"))
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    shebang = lines[0] if lines and lines[0].startswith("#!") else ""
    compute: list[str] = []
    steps: list[DataStep] = []
    options = {STAGE_IN: StageOptions(), STAGE_OUT: StageOptions()}
    seen_option = {STAGE_IN: set(), STAGE_OUT: set()}
    index = 0
    while index < len(lines):
        raw = lines[index]
        number = index + 1
        match = _DIRECTIVE_RE.match(raw)
        if match:
            stage = _STAGE_OF[match.group(1)]
            body, index = _join_continuations(lines, index, match.group(1), path)
            _parse_stage_line(body, stage, number, ctx, steps, options[stage], seen_option[stage])
            compute.extend([DATA_LINE] * (index - number + 1))
            continue
        match = _DW_RE.match(raw)
        if match:
            body, index = _join_continuations(lines, index, None, path)
            steps.append(_parse_datawarp(_DW_RE.match(body).group(2), _STAGE_OF[match.group(1)],
                                         number, ctx))
            compute.extend([DATA_LINE] * (index - number + 1))
            continue
        match = _PBS_W_RE.match(raw)
        if match and _PBS_W_STAGE_RE.search(match.group("attributes")):
            kept = _parse_pbs_w(match.group("attributes"), number, ctx, steps)
            before = match.group("before")
            if kept:
                compute.append(f"{before} -W {kept}")
            elif before.strip() != "#PBS":
                compute.append(before)
            else:
                compute.append(DATA_LINE)
            index += 1
            continue
        compute.append(raw)
        index += 1
    if not any(line.strip() and not line.lstrip().startswith("#") for line in compute):
        # an empty script has no line to name
        raise DirectiveError("the script has no commands for the compute job", path=path,
                             line=len(lines) or None)
    for stage, opts in options.items():
        for name, only in (("dependency", STAGE_OUT), ("when", STAGE_OUT), ("start", STAGE_IN),
                           ("wait-for-source", STAGE_IN)):
            if name in opts.lines and stage != only:
                raise DirectiveError(f"-{name} applies to {_DIRECTIVE[only]} only", path=path,
                                     line=opts.lines[name])
        for name in _LAYOUT_ARITY:
            if name in opts.lines and stage != STAGE_IN:
                raise DirectiveError(f"-{name} applies to #STAGEIN only (the layout of the "
                                     "files a stage-in creates)", path=path,
                                     line=opts.lines[name])
        parallel = [step for step in steps if step.stage == stage] if opts.parallel else []
        if len(parallel) > MAX_PARALLEL_JOBS:
            raise DirectiveError(f"{_DIRECTIVE[stage]} -parallel: at most {MAX_PARALLEL_JOBS} "
                                 "transfer lines, one data job each (join the rest into a "
                                 "folder transfer, or drop -parallel)", path=path,
                                 line=parallel[MAX_PARALLEL_JOBS].line)
    check_layout_options(options[STAGE_IN].layout, options[STAGE_IN].lines,
                         lambda message, line: DirectiveError(message, path=path, line=line))
    _check_destinations(steps, ctx)
    return ParsedScript(path=path, shebang=shebang, compute_lines=compute, steps=steps,
                        options=options, dialect=_dialect(compute), compute_job=_compute_job(compute))


def _join_continuations(lines: list[str], index: int, prefix: str | None, path: str):
    """Join a directive and its backslash continuations; return (joined text, next index).
    The pieces are joined once at the end: adding each to the text so far copied it again
    per line (a 4 MiB script of one directive continued over 215,000 lines took 17 s)."""
    parts = [lines[index]]
    index += 1
    while parts[-1].rstrip().endswith("\\") and not parts[-1].rstrip().endswith("\\\\"):
        if index >= len(lines):
            raise DirectiveError("a trailing backslash continues past the end of the script",
                                 path=path, line=index)
        parts[-1] = parts[-1].rstrip()[:-1].rstrip()
        nxt = lines[index]
        if prefix is not None:
            cont = re.match(rf"^\s*#{prefix}(?=\s|$)(.*)$", nxt)
            if cont:
                nxt = cont.group(1)
        parts.append(nxt.strip())
        index += 1
    return " ".join(parts), index


def _parse_stage_line(body: str, stage: str, number: int, ctx: _Context,
                      steps: list[DataStep], opts: StageOptions, seen: set[str]) -> None:
    text = _DIRECTIVE_RE.match(body).group(2).strip()
    directive = _DIRECTIVE[stage]
    words = _words(text, directive, number, ctx)
    if not words:
        raise ctx.error(f"{directive} with nothing after it", number)
    if words[0].startswith("-"):
        _parse_options(words, stage, number, ctx, opts, seen)
        return
    if _is_transfer(words, stage):
        if len(words) != 2:
            raise ctx.error(
                f"{directive}: a transfer is exactly SOURCE DESTINATION, got {len(words)} "
                f"word{'s' if len(words) != 1 else ''} after quoting (quote a name holding a "
                "space; a literal command starts with its command name)", number)
        steps.append(DataStep(stage, number,
                              transfer=_structured(words[0], words[1], stage, number, ctx)))
        return
    if not _COMMAND_NAME_RE.match(text):
        raise ctx.error(f"{directive}: expected SOURCE DESTINATION or a command starting with "
                        f"its name (hsi, globus-url-copy...), got '{words[0]}'", number)
    steps.append(DataStep(stage, number, command=text))


def _words(text: str, directive: str, number: int, ctx: _Context) -> list[str]:
    """``text`` split as a shell splits words, a trailing ``# comment`` removed."""
    try:
        return shlex.split(text[:_comment_start(text)], comments=False)
    except ValueError as err:
        raise ctx.error(f"{directive}: cannot split the line ({err})", number) from err


def _comment_start(text: str) -> int:
    """Where a shell comment begins in ``text`` (its length if none): an unquoted ``#`` that
    starts a word. A ``#`` inside a word (``http://h/a#b``, ``a\\ #b``) or in quotes is not one."""
    quote = None
    word_start = True
    index = 0
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\" and quote == '"':
                index += 1
            elif char == quote:
                quote = None
        elif char in " \t":
            word_start = True
        elif char == "#" and word_start:
            return index
        else:
            word_start = False
            if char == "\\":
                index += 1
            elif char in "'\"":
                quote = char
        index += 1
    return len(text)


def _is_transfer(words: list[str], stage: str) -> bool:
    """A first word that names data, or ``#STAGEOUT name URI`` (a result in the submission
    directory sent to a URI). Never a command: a name is data."""
    if names_data(words[0]):
        return True
    return stage == STAGE_OUT and len(words) == 2 and "://" in words[1]


def _structured(source: str, destination: str, stage: str, number: int, ctx: _Context,
                recursive: bool = False, directive: str | None = None) -> Transfer:
    directive = directive or _DIRECTIVE[stage]
    try:
        src = parse_location(source, cwd=ctx.cwd)
        dst = parse_location(destination, cwd=ctx.cwd)
    except UnknownScheme as err:
        raise ctx.error(f"{directive}: unknown URI scheme '{err.args[0]}://' (supported: "
                        f"{', '.join(s + '://' for s in SCHEMES)}, host:path, or a path)",
                        number) from err
    except ValueError as err:
        raise ctx.error(f"{directive}: {err}", number) from err
    local = dst if stage == STAGE_IN else src
    if not local.is_local:
        side = "destination" if stage == STAGE_IN else "source"
        raise ctx.error(f"{directive}: the {side} must be a path on this cluster, "
                        f"got '{local.text}'", number)
    if src.is_local and dst.is_local and src.path.rstrip("/") == dst.path.rstrip("/"):
        raise ctx.error(f"{directive}: source and destination are the same file", number)
    if stage == STAGE_IN:
        if not recursive and dst.path.rstrip("/") == ctx.scratch_root.rstrip("/"):
            dst = replace(dst, path=ctx.scratch_root.rstrip("/") + "/")  # the root is a folder
        transfer = Transfer(src, dst, recursive)
        if dst.is_folder and not recursive and src.basename in ("", ".", ".."):
            raise ctx.error(f"{directive}: '{src.text}' names no file to put in the folder "
                            f"'{dst.text}'; name the destination file", number)
        _confine(landing(transfer), "destination", directive, number, ctx)
        return transfer
    _confine(src.path, "source", directive, number, ctx)
    return Transfer(src, dst, recursive)


def landing(transfer: Transfer) -> str:
    """Where a transfer to a local path puts its data: the file, or the folder a recursive
    transfer fills (normalised)."""
    destination = transfer.destination
    if transfer.recursive:
        return posixpath.normpath(destination.path)
    if destination.is_folder:
        return posixpath.normpath(posixpath.join(destination.path, transfer.source.basename))
    return posixpath.normpath(destination.path)


def confine(path: str, scratch_root: str) -> str | None:
    """Why ``path`` (absolute, normalised) may not be staged data: it is outside
    ``scratch_root``, the root itself, or leads out of it through a symbolic link; None if it
    may. Symbolic links are resolved as far as the path exists when the script is planned."""
    path = posixpath.normpath(path)
    root = posixpath.normpath(scratch_root)
    if not inside(path, root):
        return f"is outside the scratch root {root}"
    if path == root:
        return f"is the scratch root {root} itself; name a file or folder inside it"
    if not inside(os.path.realpath(path), os.path.realpath(root)):
        return f"leads outside the scratch root {root} through a symbolic link"
    return None


def _confine(path: str, side: str, directive: str, number: int, ctx: _Context) -> None:
    reason = confine(path, ctx.scratch_root)
    if reason:
        raise ctx.error(f"{directive}: the {side} {path} {reason}", number)


_OPTION_ARITY = {
    "retry": 1, "retry-delay": 1, "walltime": 1, "qos": 1, "account": 1, "priority": 1,
    "name": 1, "parallel": 0, "input": 1, "dependency": 1, "start": 1, "when": 1,
    "wait-for-source": 1,
    **_LAYOUT_ARITY,
}
_ALIASES = {"t": "walltime", "A": "account", "N": "name", "J": "name", "p": "priority",
            "q": "qos", "time": "walltime", "job-name": "name", "retries": "retry"}


def _parse_options(tokens: list[str], stage: str, number: int, ctx: _Context,
                   opts: StageOptions, seen: set[str]) -> None:
    directive = _DIRECTIVE[stage]
    path = ctx.path
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if not token.startswith("-") or token in ("-", "--"):
            raise DirectiveError(f"{directive}: expected an option, got '{token}' (an option "
                                 "line holds only options; put the command on its own line)",
                                 path=path, line=number)
        name, _, inline = token.lstrip("-").partition("=")
        if name == "l":  # PBS style: -l walltime=HH:MM:SS
            if index + 1 >= len(tokens):
                raise DirectiveError(f"{directive}: -l needs a value", path=path, line=number)
            resource, _, value = tokens[index + 1].partition("=")
            if resource != "walltime" or not value:
                raise DirectiveError(f"{directive}: -l supports walltime=HH:MM:SS only, got "
                                     f"'{tokens[index + 1]}'", path=path, line=number)
            name, inline, index = "walltime", value, index + 1
        name = _ALIASES.get(name, name)
        if name not in _OPTION_ARITY:
            raise DirectiveError(f"{directive}: unknown option '{token}' (known: "
                                 + ", ".join("-" + o for o in _OPTION_ARITY) + ")",
                                 path=path, line=number)
        if name in seen and name != "input":
            raise DirectiveError(f"{directive}: option -{name} given twice", path=path, line=number)
        seen.add(name)
        value = None
        if _OPTION_ARITY[name]:
            if inline:
                value = inline
            elif index + 1 < len(tokens):
                index += 1
                value = tokens[index]
            else:
                raise DirectiveError(f"{directive}: option -{name} needs a value", path=path,
                                     line=number)
        _set_option(opts, name, value, directive, number, ctx)
        opts.lines[name] = number
        index += 1


def _set_option(opts: StageOptions, name: str, value: str | None, directive: str, number: int,
                ctx: _Context) -> None:
    def bad(expected: str):
        raise ctx.error(f"{directive}: -{name} expects {expected}, got '{value}'", number)

    if name == "retry":
        if not re.fullmatch(r"[0-9]{1,3}", value) or int(value) > MAX_RETRIES:
            bad(f"a whole number of retries from 0 to {MAX_RETRIES}")
        opts.retries = int(value)
    elif name == "retry-delay":
        if (not re.fullmatch(r"[0-9]{1,5}(?:\.[0-9]{1,6})?", value)
                or float(value) > MAX_RETRY_DELAY):
            bad(f"seconds from 0 to {MAX_RETRY_DELAY:.0f}")
        opts.retry_delay = float(value)
    elif name == "walltime":
        seconds = slurm_time_seconds(value)
        if seconds is None or not 0 < seconds <= MAX_WALLTIME_SECONDS:
            bad(f"a time above zero and at most {MAX_WALLTIME_SECONDS // 86400} days, like 30, "
                "01:30:00 or 1-00:00:00")
        opts.walltime = value
    elif name == "priority":
        low, high = PRIORITY_BOUNDS
        if not re.fullmatch(r"-?[0-9]{1,10}", value) or not low <= int(value) <= high:
            bad(f"an integer from {low} to {high}")
        opts.priority = int(value)
    elif name in ("qos", "account", "name"):
        if not _SAFE_VALUE_RE.match(value) or len(value) > 128:
            bad("letters, digits and . _ : + @ / = - only, not starting with -")
        setattr(opts, "job_name" if name == "name" else name, value)
    elif name == "parallel":
        opts.parallel = True
    elif name == "dependency":
        if value not in ("afterok", "afterany"):
            bad("afterok or afterany")
        opts.dependency = value
    elif name == "start":
        if value not in ("jit", "now"):
            bad("jit or now")
        opts.start = value
    elif name == "when":
        if value not in ("close", "end"):
            bad("close or end")
        opts.when = value
    elif name == "wait-for-source":
        seconds = duration_seconds(value)
        if seconds is None or seconds > MAX_SOURCE_WAIT_SECONDS:
            bad(f"a duration from 0 to {MAX_SOURCE_WAIT_SECONDS // 86400} days: seconds, or "
                "digits and s, m or h (600, 90s, 10m, 2h)")
        opts.wait_for_source = seconds
    elif name in _LAYOUT_ARITY:
        set_layout_option(opts.layout, name, value, ctx.cwd, bad)
    elif name == "input":
        try:
            location = parse_location(value, cwd=ctx.cwd)
        except (ValueError, UnknownScheme):
            location = None
        if location is None or not location.is_local:
            bad("a path on this cluster")
        _confine(location.path, "input", directive, number, ctx)
        opts.inputs.append(location.path.rstrip("/"))


def duration_seconds(text: str) -> int | None:
    """``600``, ``90s``, ``10m`` or ``2h`` in seconds; None for anything else."""
    found = _DURATION_RE.fullmatch(text)
    return int(found.group(1)) * _DURATION_UNIT[found.group(2)] if found else None


def _parse_datawarp(text: str, stage: str, number: int, ctx: _Context) -> DataStep:
    path = ctx.path
    tokens = _words(text, "#DW", number, ctx)
    fields: dict[str, str] = {}
    for token in tokens:
        key, sep, value = token.partition("=")
        if not sep or not value:
            raise DirectiveError(f"#DW: expected key=value, got '{token}'", path=path, line=number)
        if key not in ("source", "destination", "type"):
            raise DirectiveError(f"#DW: unknown key '{key}' (known: source, destination, type)",
                                 path=path, line=number)
        if key in fields:
            raise DirectiveError(f"#DW: '{key}' given twice", path=path, line=number)
        fields[key] = value
    for key in ("source", "destination", "type"):
        if key not in fields:
            raise DirectiveError(f"#DW {stage.replace('-', '_')}: missing {key}=", path=path,
                                 line=number)
    if fields["type"] not in ("file", "directory"):
        raise DirectiveError(f"#DW: type must be file or directory, got '{fields['type']}'",
                             path=path, line=number)
    transfer = _structured(fields["source"], fields["destination"], stage, number, ctx,
                           recursive=fields["type"] == "directory",
                           directive=f"#DW {stage.replace('-', '_')}")
    return DataStep(stage, number, transfer=transfer, origin="DW")


def _parse_pbs_w(attributes: str, number: int, ctx: _Context, steps: list[DataStep]) -> str:
    """Take stagein=/stageout= out of a ``#PBS -W`` line; return the attributes left."""
    kept: list[str] = []
    current: str | None = None
    for item in _split_pbs_attributes(attributes.strip(), number, ctx.path):
        key, sep, value = item.partition("=")
        key = key.strip()
        if sep and key in ("stagein", "stageout"):
            current = key
            value = value.strip()
        elif current and "@" in item and not sep:
            value = item.strip()
        else:
            current = None
            kept.append(item.strip())
            continue
        steps.append(_pbs_file(value, current, number, ctx))
    return ",".join(kept)


def _split_pbs_attributes(attributes: str, number: int, path: str) -> list[str]:
    if not attributes or " " in attributes.strip():
        raise DirectiveError("#PBS -W: expected attr=value[,attr=value] with no spaces", path=path,
                             line=number)
    return attributes.split(",")


def _pbs_file(spec: str, kind: str, number: int, ctx: _Context) -> DataStep:
    # Torque: local_file@hostname:remote_file
    local, at, remote = spec.partition("@")
    host, colon, remote_path = remote.partition(":")
    directive = f"#PBS -W {kind}"
    if not at or not colon or not local or not host or not remote_path:
        raise ctx.error(f"{directive}: expected local_file@host:remote_file, got '{spec}'", number)
    if not is_host_name(host.rpartition("@")[2]):
        raise ctx.error(f"{directive}: '{host}' is not a host name (letters, digits, inner - "
                        "and dots)", number)
    remote_spec = f"{host}:{remote_path}"
    stage = STAGE_IN if kind == "stagein" else STAGE_OUT
    if stage == STAGE_IN:
        transfer = _structured(remote_spec, local, stage, number, ctx, directive=directive)
    else:
        transfer = _structured(local, remote_spec, stage, number, ctx, directive=directive)
    return DataStep(stage, number, transfer=transfer, origin="PBS")


def _check_destinations(steps: list[DataStep], ctx: _Context) -> None:
    """No two transfers of a stage write one destination, nor one inside the other's folder.

    Each destination is put in a tree of path components (one per stage and remote host), so a
    script of n transfers is checked in time linear in its size, not by comparing every pair
    (20,000 transfer lines took 110 s). The first transfer, in script order, that
    meets an earlier one is refused, naming the earliest earlier one it meets."""
    trees: dict[tuple[str, str, bool], _Node] = {}
    for step in steps:
        if step.transfer is None:
            continue
        place, where = _written_place(step.transfer)
        normal = posixpath.normpath(place[1])
        # "//x" is "/x" here: a remote host may read them as one file, so they must not overlap
        node = trees.setdefault((step.stage, place[0], normal.startswith("/")), _Node())
        clash = _insert(node, [part for part in normal.split("/") if part not in ("", ".")],
                        (where, step))
        if clash is not None:
            how, (other_where, other) = clash
            how = how.format(where=other_where, line=other.line)
            raise ctx.error(f"{_directive_of(step)}: the destination {where} {how} (one transfer "
                            "would overwrite the other)", step.line)


class _Node:
    """A folder in :func:`_check_destinations`' tree: the first transfer that writes exactly
    here (``own``), the first that writes below (``below``), the sub-folders (``children``)."""

    __slots__ = ("own", "below", "children")

    def __init__(self) -> None:
        self.own = None
        self.below = None
        self.children: dict[str, _Node] = {}


def _insert(node: _Node, parts: list[str], entry) -> tuple[str, object] | None:
    """Record ``entry`` at ``parts`` below ``node``, unless it meets an earlier entry: then
    (how, that entry), nothing recorded. Earlier entries never meet each other, so at most
    one of them lies on the way down or at the place itself; several may lie below it."""
    path = [node]
    for part in parts:
        if node.own is not None:
            return "lies inside {where}, the destination of line {line}", node.own
        child = node.children.get(part)
        if child is None:
            child = node.children[part] = _Node()
        node = child
        path.append(node)
    if node.own is not None:
        return "is also the destination of line {line}", node.own
    if node.below is not None:
        return "holds {where}, the destination of line {line}", node.below
    node.own = entry
    for above in path[:-1]:
        if above.below is None:
            above.below = entry
    return None


def _written_place(transfer: Transfer) -> tuple[tuple[str, str], str]:
    """((where, normalised path), text) of what ``transfer`` writes; ``where`` is "" for this
    cluster, else the remote scheme and host."""
    dst = transfer.destination
    if dst.is_local:
        path = landing(transfer)
        return ("", path), path
    path = posixpath.normpath(dst.path.rstrip("/") or "/")
    if dst.is_folder and not transfer.recursive:
        path = posixpath.join(path, transfer.source.basename)
    return (f"{dst.scheme}://{dst.host.lower()}", path), f"{dst.scheme}://{dst.host}{path}"


def _directive_of(step: DataStep) -> str:
    if step.origin == "DW":
        return f"#DW {step.stage.replace('-', '_')}"
    if step.origin == "PBS":
        return "#PBS -W " + ("stagein" if step.stage == STAGE_IN else "stageout")
    return _DIRECTIVE[step.stage]


def _dialect(lines: list[str]) -> str | None:
    has_slurm = any(line.startswith("#SBATCH") for line in lines)
    has_pbs = any(line.startswith("#PBS") for line in lines)
    if has_slurm:
        return "slurm"
    if has_pbs:
        return "pbs"
    return None


_COUNT_RE = re.compile(r"^[0-9]{1,8}$")


def _compute_job(lines: list[str]) -> dict[str, str]:
    """The compute job's name, QOS and priority from its header, which data jobs inherit, and
    its task counts (``ntasks``, ``ntasks_per_node``, ``nodes``), which ``-layout auto`` uses."""
    found: dict[str, str] = {}
    for line in lines:
        if line.startswith("#SBATCH"):
            patterns = (("name", r"(?:--job-name[= ]|-J\s*)(\S+)"), ("qos", r"--qos[= ](\S+)"),
                        ("account", r"(?:--account[= ]|-A\s*)(\S+)"),
                        ("priority", r"--priority[= ](\S+)"), ("nice", r"--nice[= ](\S+)"),
                        # a whole option word: -n must not match inside --nice
                        ("ntasks", r"(?:\s--ntasks[= ]|\s-n\s*)([0-9]+)(?=\s|$)"),
                        ("ntasks_per_node", r"\s--ntasks-per-node[= ]([0-9]+)(?=\s|$)"),
                        ("nodes", r"(?:\s--nodes[= ]|\s-N\s*)([0-9]+)(?=\s|$)"))
        elif line.startswith("#PBS"):
            patterns = (("name", r"-N\s+(\S+)"), ("priority", r"-p\s+(-?[0-9]+)"),
                        ("account", r"-A\s+(\S+)"), ("qos", r"-l\s+\S*qos=([^,\s]+)"))
            # -l nodes=N:ppn=M: N*M tasks, M per node (nodes=N alone: N nodes, unknown tasks)
            match = re.search(r"-l\s+(?:\S*,)?nodes=([0-9]{1,6})(?::ppn=([0-9]{1,6}))?(?=[,:\s]|$)",
                              line)
            if match:
                found.setdefault("nodes", match.group(1))
                if match.group(2):
                    found.setdefault("ntasks", str(int(match.group(1)) * int(match.group(2))))
                    found.setdefault("ntasks_per_node", match.group(2))
        else:
            continue
        for key, pattern in patterns:
            match = re.search(pattern, line)
            # numbers may be negative (PBS -p, --nice); names never start with '-'
            valid = (_SIGNED_RE if key in ("priority", "nice") else
                     _COUNT_RE if key in ("ntasks", "ntasks_per_node", "nodes") else
                     _SAFE_VALUE_RE)
            if match and valid.match(match.group(1)):
                found.setdefault(key, match.group(1))
    return found
