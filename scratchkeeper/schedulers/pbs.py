"""PBS/Torque backend: build qsub/qstat/qdel/qhold/qrls argv and parse their output.

Works with Torque, PBS Pro/OpenPBS and Slurm's Torque wrappers (slurm-wlm-torque). Parsers are
tested on output captured from the wrappers on the local cluster (tests/data/pbs/) and on the
documented Torque ``qstat -f`` layout.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from ..errors import SchedulerError
from .base import JobRecord, JobState, SubmitSpec

NAME = "pbs"
#: Torque's wrappers over Slurm and PBS servers differ in when qstat shows an ended job (a
#: state ``E`` kept while the server's record lingers): the history is asked for live jobs
#: too, and its final record, of the same submission, wins
QUEUE_HOLDS_LIVE_JOBS = False

#: PBS job_state letters to scheduler-neutral states; ``C``/``F`` are refined by exit_status
STATES: dict[str, JobState] = {
    "Q": JobState.PENDING, "W": JobState.PENDING, "T": JobState.PENDING, "B": JobState.RUNNING,
    "H": JobState.HELD, "R": JobState.RUNNING, "E": JobState.COMPLETING,
    "S": JobState.SUSPENDED, "U": JobState.SUSPENDED, "M": JobState.PENDING,
    "C": JobState.ENDED, "F": JobState.ENDED, "X": JobState.ENDED,
}

# Slurm's qsub wrapper joins its arguments into a shell command line, so values that a shell
# would split or expand are refused instead of being passed on
_WRAPPER_SAFE = re.compile(r"^[A-Za-z0-9._:+@/=,%-]+$")


def _safe(value: str, what: str) -> str:
    if not _WRAPPER_SAFE.match(value):
        raise SchedulerError(f"qsub: {what} {value!r} has characters qsub cannot pass on safely")
    return value


def build_submit(spec: SubmitSpec) -> list[str]:
    argv = ["qsub", "-q", _safe(spec.queue, "queue"), "-N", _safe(spec.job_name, "job name"),
            "-wd", _safe(spec.workdir, "working directory")]
    if spec.output_path:
        argv += ["-j", "oe", "-o", _safe(spec.output_path, "output path")]
    if spec.dependencies:
        argv += ["-W", "depend=" + ",".join(f"{kind}:{':'.join(ids)}"
                                            for kind, ids in spec.dependencies)]
    if spec.hold:
        argv.append("-h")
    argv += list(spec.extra_args)
    argv.append(_safe(spec.script_path, "script path"))
    return argv


def parse_submit(stdout: str) -> str:
    """qsub prints the job id (``123`` or ``123.server``) as its last line."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines or not re.fullmatch(r"\d+(\.[A-Za-z0-9.-]+)?(\[\])?", lines[-1]):
        raise SchedulerError("qsub: " + (" / ".join(lines) or "printed no job id"))
    return lines[-1]


def build_query(job_ids: Sequence[str] | None) -> list[str]:
    return ["qstat", "-f", *(job_ids or [])]


def parse_query(stdout: str) -> list[JobRecord]:
    """Parse ``qstat -f``: ``Job Id: N`` blocks of ``key = value`` lines (tab-continued)."""
    return [_record(block) for block in _blocks(stdout)]


def build_snapshot() -> list[str]:
    return build_query(None)


def parse_snapshot(stdout: str, reuse: dict | None = None) -> list[JobRecord]:
    """The whole queue: ``qstat -f`` as :func:`parse_query` reads it (``reuse`` unused)."""
    return parse_query(stdout)


def _blocks(stdout: str) -> list[dict[str, str]]:
    blocks: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    last_key = None
    for line in stdout.splitlines():
        if line.startswith("Job Id:"):
            current = {"Job Id": line.split(":", 1)[1].strip()}
            blocks.append(current)
            last_key = None
        elif current is not None and "=" in line and re.match(r"^\s+[A-Za-z_][\w.]*\s*=", line):
            key, _, value = line.strip().partition("=")
            last_key = key.strip()
            current[last_key] = value.strip()
        elif current is not None and last_key and line.startswith("\t") and line.strip():
            current[last_key] += line.strip()  # Torque folds long values onto tab-indented lines
    return blocks


def _record(block: dict[str, str]) -> JobRecord:
    letter = block.get("job_state", "U")
    state = STATES.get(letter, JobState.UNKNOWN)
    exit_status = _int(block.get("exit_status", block.get("Exit_status")))
    if state is JobState.ENDED and exit_status is not None:
        if exit_status == 0:
            state = JobState.COMPLETED
        elif exit_status in (-11, 271):  # Torque: walltime exceeded / killed by signal 15
            state = JobState.TIMEOUT if exit_status == -11 else JobState.CANCELLED
        else:
            state = JobState.FAILED
    nodes = _int(block.get("Resource_List.nodect")) or _int(
        (block.get("Resource_List.nodes") or "").split(":")[0]) or 0
    return JobRecord(
        job_id=block["Job Id"], state=state, native_state=letter,
        reason=block.get("comment", ""), name=block.get("Job_Name", ""),
        queue=block.get("queue", ""), user=block.get("Job_Owner", "").split("@")[0],
        nodes=nodes, priority=_int(block.get("Priority")), exit_code=exit_status,
        dependency=block.get("depend", ""), submit_time=_pbs_time(block.get("qtime")),
        start_time=_pbs_time(block.get("start_time") or block.get("mtime")),
        end_time=_pbs_time(block.get("comp_time") or (block.get("ctime") if letter == "C" else None)))


def _int(value) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _pbs_time(value: str | None) -> float | None:
    if not value:
        return None
    for fmt in ("%a %b %d %H:%M:%S %Y", "%Y-%m-%dT%H:%M:%S"):
        try:
            return datetime.strptime(value.strip(), fmt).timestamp()
        except ValueError:
            continue
    return None


def build_history(job_ids: Sequence[str]) -> list[str]:
    # Torque keeps finished jobs in qstat for keep_completed seconds; PBS Pro needs -x
    return ["qstat", "-f", *job_ids]


def parse_history(stdout: str) -> list[JobRecord]:
    return [r for r in parse_query(stdout) if r.state.is_final]


def build_cancel(job_ids: Sequence[str]) -> list[str]:
    return ["qdel", *job_ids]


def build_scripts_query() -> list[str] | None:
    """None: qstat does not name a job's script file (qsub copies the script)."""
    return None


def parse_scripts_query(stdout: str) -> list[tuple[str, str]]:
    return []


def build_annotate(job_ids: Sequence[str], comment: str) -> list[str] | None:
    """None: Torque keeps no comment a job's owner sees that a client may set (its ``comment``
    attribute belongs to the scheduler), so the reason stays in ``scratchkeeper status``."""
    return None


def build_hold(job_ids: Sequence[str]) -> list[str]:
    return ["qhold", *job_ids]


def build_release(job_ids: Sequence[str]) -> list[str]:
    return ["qrls", *job_ids]


# -- start estimates (just-in-time stage-in) ---------------------------------------------------
def build_start_estimate(job_ids: Sequence[str]) -> list[str]:
    return build_query(job_ids)


def parse_start_estimate(stdout: str) -> dict[str, float | None]:
    """PBS Pro's ``estimated.start_time`` from ``qstat -f`` (Torque and Slurm's wrappers have
    none: every job's start is then unknown)."""
    return {block["Job Id"]: _pbs_time(block.get("estimated.start_time"))
            for block in _blocks(stdout)}


#: PBS has no will-run query of a resource request: a job's estimate is its own or unknown
build_request = parse_request = build_will_run = parse_will_run = None


def build_set_begin(job_id: str, when: float | None) -> list[str]:
    """``qalter -a [[[[CC]YY]MM]DD]hhmm[.SS]`` (PBS Pro, Torque); ``None``: now. Slurm's qalter
    wrapper has no ``-a``: on the wrappers a job's start is unknown, so this is never needed."""
    moment = datetime.fromtimestamp(round(when if when is not None else datetime.now().timestamp()))
    return ["qalter", "-a", moment.strftime("%Y%m%d%H%M.%S"), job_id]


def build_find_by_name(name: str) -> list[list[str]]:
    return [["qselect", "-N", _safe(name, "job name")]]


def parse_find_by_name(stdout: str) -> list[str]:
    return [line.strip() for line in stdout.splitlines() if line.strip()]


def build_nodes(queue: str | None = None) -> list[str]:
    """Every node: ``pbsnodes`` has no queue filter (a queue's nodes are a site's own node
    properties), so a PBS site's S counts its data-transfer nodes too."""
    return ["pbsnodes", "-a"]


def parse_nodes(stdout: str) -> int:
    """``pbsnodes -a`` prints one unindented node name line per node."""
    return sum(1 for line in stdout.splitlines() if line and not line[0].isspace())


def order_by_priority(records: list[JobRecord]) -> list[JobRecord]:
    def key(record: JobRecord):
        return (record.state.is_queued, -(record.priority or 0), record.submit_time or 0,
                _int(record.job_id.split(".")[0]) or 0)
    return sorted(records, key=key)


def is_unknown_job_error(message: str) -> bool:
    # qstat of only unknown ids prints nothing and exits 153 (PBSE_UNKJOBID 15001 & 0xff)
    return ("Unknown Job Id" in message or "Invalid job id" in message
            or message.startswith("qstat: qstat failed (exit 153)"))
