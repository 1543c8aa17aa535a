"""Parse the data directives of a batch script.

Grammar (docs/directives.rst has the full text and examples):

``#STAGEIN <command...>`` / ``#STAGEOUT <command...>``
    a literal transfer command the data job runs; a trailing backslash continues it on the next
    line, with or without the directive prefix.
``#STAGEIN <source-URI> <destination-path>`` / ``#STAGEOUT <path> <destination-URI>``
    a structured transfer; the planner renders the client for the scheme.
``#STAGEIN -option ...``
    options of that data stage: ``-retry N``, ``-retry-delay S``, ``-walltime T``, ``-qos Q``,
    ``-account A``, ``-priority N``, ``-name NAME``, ``-parallel``, ``-input PATH``,
    ``-dependency afterok|afterany`` (stage-out only).
``#DW stage_in source=... destination=... type=file|directory`` (and ``stage_out``)
    Cray DataWarp staging lines.
``#PBS -W stagein=local@host:remote[,...]`` (and ``stageout=``)
    PBS/Torque file staging.

Everything else stays in the compute script, in order.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from ..errors import DirectiveError
from ..transfer.uri import Location, UnknownScheme, SCHEMES, looks_like_location, parse_location

STAGE_IN = "stage-in"
STAGE_OUT = "stage-out"

_DIRECTIVE_RE = re.compile(r"^\s*#(STAGEIN|STAGEOUT)(?=\s|$)(.*)$")
_DW_RE = re.compile(r"^\s*#DW\s+(stage_in|stage_out)(?=\s|$)(.*)$")
_PBS_W_RE = re.compile(r"^\s*#PBS\s+-W\s*(.*)$")
_PBS_W_STAGE_RE = re.compile(r"(^|,)\s*(stagein|stageout)\s*=")
_SAFE_VALUE_RE = re.compile(r"^[A-Za-z0-9._:+@/=-]+$")
_WALLTIME_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?$")

_STAGE_OF = {"STAGEIN": STAGE_IN, "STAGEOUT": STAGE_OUT, "stage_in": STAGE_IN,
             "stage_out": STAGE_OUT}


@dataclass(frozen=True)
class Transfer:
    """A structured transfer: ``source`` to ``destination``; ``recursive`` for directories."""

    source: Location
    destination: Location
    recursive: bool = False


@dataclass(frozen=True)
class DataStep:
    """One thing a data job does: a literal ``command`` or a structured ``transfer``."""

    stage: str
    line: int
    command: str | None = None
    transfer: Transfer | None = None
    origin: str = "STAGE"  # STAGE, DW or PBS: which directive family wrote it


@dataclass
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
    inputs: list[str] = field(default_factory=list)


@dataclass
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


def parse_script(text: str, path: str, *, cwd: str) -> ParsedScript:
    """Split ``text`` (read from ``path``) into compute lines and data steps.

    ``cwd`` resolves relative paths (the submission directory). Every malformed directive raises
    :class:`DirectiveError` with ``path`` and the 1-based line number.
    """
    if "\x00" in text:
        raise DirectiveError("the script contains a NUL byte", path=path, line=_line_of_nul(text))
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
            _parse_stage_line(body, stage, number, path, cwd, steps, options[stage],
                              seen_option[stage])
            continue
        match = _DW_RE.match(raw)
        if match:
            body, index = _join_continuations(lines, index, None, path)
            steps.append(_parse_datawarp(_DW_RE.match(body).group(2), _STAGE_OF[match.group(1)],
                                         number, path, cwd))
            continue
        match = _PBS_W_RE.match(raw)
        if match and _PBS_W_STAGE_RE.search(match.group(1)):
            kept = _parse_pbs_w(match.group(1), number, path, cwd, steps)
            if kept:
                compute.append(re.sub(r"-W\s*.*$", "-W " + kept, raw))
            index += 1
            continue
        compute.append(raw)
        index += 1
    if not any(line.strip() and not line.lstrip().startswith("#") for line in compute):
        raise DirectiveError("the script has no commands for the compute job", path=path,
                             line=len(lines) or 1)
    for stage, opts in options.items():
        if opts.dependency and stage == STAGE_IN:
            raise DirectiveError("-dependency applies to #STAGEOUT only", path=path,
                                 line=_first_line(lines, "#STAGEIN") or 1)
    return ParsedScript(path=path, shebang=shebang, compute_lines=compute, steps=steps,
                        options=options, dialect=_dialect(compute), compute_job=_compute_job(compute))


def _join_continuations(lines: list[str], index: int, prefix: str | None, path: str):
    """Join a directive and its backslash continuations; return (joined text, next index)."""
    body = lines[index]
    index += 1
    while body.rstrip().endswith("\\") and not body.rstrip().endswith("\\\\"):
        if index >= len(lines):
            raise DirectiveError("a trailing backslash continues past the end of the script",
                                 path=path, line=index)
        body = body.rstrip()[:-1]
        nxt = lines[index]
        if prefix is not None:
            cont = re.match(rf"^\s*#{prefix}(?=\s|$)(.*)$", nxt)
            if cont:
                nxt = cont.group(1)
        body = body.rstrip() + " " + nxt.strip()
        index += 1
    return body, index


def _parse_stage_line(body: str, stage: str, number: int, path: str, cwd: str,
                      steps: list[DataStep], opts: StageOptions, seen: set[str]) -> None:
    text = _DIRECTIVE_RE.match(body).group(2).strip()
    directive = "#STAGEIN" if stage == STAGE_IN else "#STAGEOUT"
    if not text:
        raise DirectiveError(f"{directive} with nothing after it", path=path, line=number)
    try:
        tokens = shlex.split(text, comments=False)
    except ValueError as err:
        raise DirectiveError(f"{directive}: cannot split the command ({err})", path=path,
                             line=number) from err
    if tokens[0].startswith("-"):
        _parse_options(tokens, stage, number, path, cwd, opts, seen)
        return
    if len(tokens) == 2 and _is_structured(tokens, stage):
        steps.append(DataStep(stage, number,
                              transfer=_structured(tokens[0], tokens[1], stage, number, path, cwd)))
        return
    steps.append(DataStep(stage, number, command=text))


def _is_structured(tokens: list[str], stage: str) -> bool:
    """Two locations, or a URI on the remote side and anything on the local one."""
    source, destination = tokens
    remote = source if stage == STAGE_IN else destination
    if "://" in remote:
        return True
    return looks_like_location(source) and looks_like_location(destination)


def _structured(source: str, destination: str, stage: str, number: int, path: str, cwd: str,
                recursive: bool = False) -> Transfer:
    directive = "#STAGEIN" if stage == STAGE_IN else "#STAGEOUT"
    try:
        src = parse_location(source, cwd=cwd)
        dst = parse_location(destination, cwd=cwd)
    except UnknownScheme as err:
        raise DirectiveError(f"{directive}: unknown URI scheme '{err.args[0]}://' (supported: "
                             f"{', '.join(s + '://' for s in SCHEMES)}, host:path, or a path)",
                             path=path, line=number) from err
    except ValueError as err:
        raise DirectiveError(f"{directive}: {err}", path=path, line=number) from err
    local = dst if stage == STAGE_IN else src
    if not local.is_local:
        side = "destination" if stage == STAGE_IN else "source"
        raise DirectiveError(f"{directive}: the {side} must be a path on this cluster, "
                             f"got '{local.text}'", path=path, line=number)
    if src.is_local and dst.is_local and src.path.rstrip("/") == dst.path.rstrip("/"):
        raise DirectiveError(f"{directive}: source and destination are the same file",
                             path=path, line=number)
    return Transfer(src, dst, recursive)


_OPTION_ARITY = {
    "retry": 1, "retry-delay": 1, "walltime": 1, "qos": 1, "account": 1, "priority": 1,
    "name": 1, "parallel": 0, "input": 1, "dependency": 1,
}
_ALIASES = {"t": "walltime", "A": "account", "N": "name", "J": "name", "p": "priority",
            "q": "qos", "time": "walltime", "job-name": "name", "retries": "retry"}


def _parse_options(tokens: list[str], stage: str, number: int, path: str, cwd: str,
                   opts: StageOptions, seen: set[str]) -> None:
    directive = "#STAGEIN" if stage == STAGE_IN else "#STAGEOUT"
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
        _set_option(opts, name, value, directive, number, path, cwd)
        index += 1


def _set_option(opts: StageOptions, name: str, value: str | None, directive: str, number: int,
                path: str, cwd: str) -> None:
    def bad(expected: str):
        raise DirectiveError(f"{directive}: -{name} expects {expected}, got '{value}'",
                             path=path, line=number)

    if name == "retry":
        if not value.isdigit() or int(value) > 100:
            bad("a whole number of retries from 0 to 100")
        opts.retries = int(value)
    elif name == "retry-delay":
        try:
            delay = float(value)
        except ValueError:
            delay = -1.0
        if not (0 <= delay <= 86400):
            bad("seconds from 0 to 86400")
        opts.retry_delay = delay
    elif name == "walltime":
        if not _WALLTIME_RE.match(value):
            bad("a time like 30, 01:30:00 or 1-00:00:00")
        opts.walltime = value
    elif name == "priority":
        if not re.fullmatch(r"-?\d+", value):
            bad("an integer")
        opts.priority = int(value)
    elif name in ("qos", "account", "name"):
        if not _SAFE_VALUE_RE.match(value) or len(value) > 128:
            bad("letters, digits and . _ : + @ / = - only")
        setattr(opts, "job_name" if name == "name" else name, value)
    elif name == "parallel":
        opts.parallel = True
    elif name == "dependency":
        if value not in ("afterok", "afterany"):
            bad("afterok or afterany")
        opts.dependency = value
    elif name == "input":
        try:
            location = parse_location(value, cwd=cwd)
        except (ValueError, UnknownScheme):
            location = None
        if location is None or not location.is_local:
            bad("a path on this cluster")
        opts.inputs.append(location.path)


def _parse_datawarp(text: str, stage: str, number: int, path: str, cwd: str) -> DataStep:
    try:
        tokens = shlex.split(text)
    except ValueError as err:
        raise DirectiveError(f"#DW: cannot split the line ({err})", path=path, line=number) from err
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
    transfer = _structured(fields["source"], fields["destination"], stage, number, path, cwd,
                           recursive=fields["type"] == "directory")
    return DataStep(stage, number, transfer=transfer, origin="DW")


def _parse_pbs_w(attributes: str, number: int, path: str, cwd: str, steps: list[DataStep]) -> str:
    """Take stagein=/stageout= out of a ``#PBS -W`` line; return the attributes left."""
    kept: list[str] = []
    current: str | None = None
    for item in _split_pbs_attributes(attributes.strip(), number, path):
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
        steps.append(_pbs_file(value, current, number, path, cwd))
    return ",".join(kept)


def _split_pbs_attributes(attributes: str, number: int, path: str) -> list[str]:
    if not attributes or " " in attributes.strip():
        raise DirectiveError("#PBS -W: expected attr=value[,attr=value] with no spaces", path=path,
                             line=number)
    return attributes.split(",")


def _pbs_file(spec: str, kind: str, number: int, path: str, cwd: str) -> DataStep:
    # Torque: local_file@hostname:remote_file
    local, at, remote = spec.partition("@")
    host, colon, remote_path = remote.partition(":")
    if not at or not colon or not local or not host or not remote_path:
        raise DirectiveError(f"#PBS -W {kind}: expected local_file@host:remote_file, got '{spec}'",
                             path=path, line=number)
    remote_spec = f"{host}:{remote_path}"
    stage = STAGE_IN if kind == "stagein" else STAGE_OUT
    if stage == STAGE_IN:
        transfer = _structured(remote_spec, local, stage, number, path, cwd)
    else:
        transfer = _structured(local, remote_spec, stage, number, path, cwd)
    return DataStep(stage, number, transfer=transfer, origin="PBS")


def _dialect(lines: list[str]) -> str | None:
    has_slurm = any(line.startswith("#SBATCH") for line in lines)
    has_pbs = any(line.startswith("#PBS") for line in lines)
    if has_slurm:
        return "slurm"
    if has_pbs:
        return "pbs"
    return None


def _compute_job(lines: list[str]) -> dict[str, str]:
    """The compute job's name, QOS and priority from its header, which data jobs inherit."""
    found: dict[str, str] = {}
    for line in lines:
        if line.startswith("#SBATCH"):
            for key, pattern in (("name", r"(?:--job-name[= ]|-J\s*)(\S+)"),
                                 ("qos", r"--qos[= ](\S+)"), ("account", r"(?:--account[= ]|-A\s*)(\S+)"),
                                 ("priority", r"--priority[= ](\S+)"), ("nice", r"--nice[= ](\S+)")):
                match = re.search(pattern, line)
                if match and _SAFE_VALUE_RE.match(match.group(1)):
                    found.setdefault(key, match.group(1))
        elif line.startswith("#PBS"):
            for key, pattern in (("name", r"-N\s+(\S+)"), ("priority", r"-p\s+(-?\d+)"),
                                 ("account", r"-A\s+(\S+)"), ("qos", r"-l\s+\S*qos=([^,\s]+)")):
                match = re.search(pattern, line)
                if match and _SAFE_VALUE_RE.match(match.group(1)):
                    found.setdefault(key, match.group(1))
    return found


def _first_line(lines: list[str], prefix: str) -> int | None:
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith(prefix):
            return number
    return None


def _line_of_nul(text: str) -> int:
    return text[: text.index("\x00")].count("\n") + 1
