"""One decision cycle of the replication daemon, as a pure function (the thesis, §4.5.2-4.5.3).

``decide(CycleInput) -> Decisions``: a queue snapshot, the known inputs of the jobs, the claims
(which job wants which file replicated) and the replicas that exist go in; the claims to add and
release, the replicas to create and remove, the jobs at risk and the window of each partition
group come out. Nothing here runs a command or touches the state database, so a cycle can be
replayed on a captured ``squeue --json`` and timed on its own (``benchmarks/replication``).

A file has at most one replica whatever the number of jobs reading it; it is kept while at least
one claim on it is active. A claim is released when its job has closed the file (while running)
or has ended (a confirmed end: in the snapshot with a final state, or through accounting); a
claim of a job that vanished from the queue without a confirmed end is kept (``unconfirmed``).
A job once targeted keeps its claim while it waits, even if the window moves past it: the
thesis's replicas are made once, not re-made as the queue reorders.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..schedulers.base import JobRecord, JobState, QueueSnapshot
from .window import SHORTCUT, WINDOW, WindowParams, is_shortcut, nodes_required, window_length

__all__ = ["SHORTCUT", "WINDOW", "AtRisk", "Claim", "ClaimChange", "CreateReplica",
           "CycleInput", "Decisions", "InputFile", "JobInputs", "RemoveReplica", "ReplicaStatus",
           "Target", "WindowGroup", "decide", "DEFAULT_GROUP"]

DEFAULT_GROUP = "*"

# replica states (the daemon's table)
CREATING, READY, REMOVING, FAILED = "creating", "ready", "removing", "failed"

# why a claim is released
CLOSED = "closed"
ENDED = "ended"


@dataclass(frozen=True)
class InputFile:
    """One input of a job: its scratch path and size in bytes (None when not known yet)."""

    path: str
    size: int | None = None


@dataclass(frozen=True)
class JobInputs:
    """What the planner (staged files, ``-input`` declarations) knows a compute job reads."""

    job_id: str
    owner_uid: int
    files: tuple[InputFile, ...]


@dataclass(frozen=True)
class Claim:
    """A job's want of a replica of one file; ``active`` False once released (closed, requeue)."""

    job_id: str
    path: str
    active: bool = True
    reason: str = WINDOW
    released_why: str = ""


@dataclass(frozen=True)
class ReplicaStatus:
    """A replica the daemon made or is making: ``state`` creating, ready, removing or failed."""

    path: str
    state: str
    size: int = 0


@dataclass(frozen=True)
class CycleInput:
    """Everything one cycle decides on.

    ``ended`` maps jobs gone from the queue to the final state accounting confirmed;
    ``closed`` holds ``(job_id, path)`` pairs whose file the running job has closed;
    ``space_budget`` is how many bytes replicas may use in all (None: no limit).
    """

    snapshot: QueueSnapshot
    system_nodes: int
    inputs: Mapping[str, JobInputs]
    claims: Sequence[Claim] = ()
    replicas: Mapping[str, ReplicaStatus] = field(default_factory=dict)
    ended: Mapping[str, JobState] = field(default_factory=dict)
    closed: frozenset[tuple[str, str]] = frozenset()
    params: WindowParams = WindowParams()
    partition_params: Mapping[str, WindowParams] = field(default_factory=dict)
    ignored_queues: frozenset[str] = frozenset()
    space_budget: int | None = None


@dataclass(frozen=True)
class Target:
    """A queued job that should have its inputs replicated now, and why."""

    job_id: str
    reason: str          # window | shortcut
    position: int        # 1-based place in its group's queue (priority order)
    group: str
    nodes: int


@dataclass(frozen=True)
class WindowGroup:
    """The window of one partition group: queue length, nodes required, window length."""

    group: str
    queued: int
    required: float
    length: int
    params: WindowParams


@dataclass(frozen=True)
class ClaimChange:
    """A claim to add (with reason and position) or to release/forget (with why)."""

    job_id: str
    path: str
    reason: str = ""     # new claims: window | shortcut
    position: int = 0
    why: str = ""        # releases: closed | ended:<state>


@dataclass(frozen=True)
class CreateReplica:
    """A file to replicate, for the job closest to dispatch that wants it."""

    path: str
    job_id: str
    reason: str
    position: int
    size: int | None


@dataclass(frozen=True)
class RemoveReplica:
    """A replica no active claim wants any more."""

    path: str
    why: str


@dataclass(frozen=True)
class AtRisk:
    """A dispatched job with an input that has no ready replica."""

    job_id: str
    paths: tuple[str, ...]


@dataclass
class Decisions:
    """What one cycle decided.

    ``claim``: new claims and released ones renewed (a requeue); ``release``: claims whose
    running job closed the file (kept, inactive, so a requeue renews them); ``forget``: claims
    of jobs that ended; ``unconfirmed``: jobs gone from the queue whose end accounting has not
    confirmed (their replicas stay).
    """

    targets: dict[str, Target] = field(default_factory=dict)
    windows: list[WindowGroup] = field(default_factory=list)
    claim: list[ClaimChange] = field(default_factory=list)
    release: list[ClaimChange] = field(default_factory=list)
    forget: list[ClaimChange] = field(default_factory=list)
    create: list[CreateReplica] = field(default_factory=list)
    remove: list[RemoveReplica] = field(default_factory=list)
    deferred_for_space: list[str] = field(default_factory=list)
    unconfirmed: list[str] = field(default_factory=list)
    at_risk: list[AtRisk] = field(default_factory=list)
    queued_without_inputs: int = 0
    targets_without_inputs: int = 0
    space_used: int = 0


_RUNNING = (JobState.RUNNING, JobState.COMPLETING, JobState.SUSPENDED)


def decide(cycle: CycleInput) -> Decisions:
    """Claims, replica creations and removals for one snapshot of the queue."""
    out = Decisions()
    snapshot = cycle.snapshot
    present: dict[str, JobRecord] = {job.job_id: job for job in snapshot.jobs}
    _window_targets(cycle, out)

    active_claims = {(c.job_id, c.path) for c in cycle.claims if c.active}
    inputs = cycle.inputs

    # 1. new or renewed claims of the targeted jobs
    for job_id, target in out.targets.items():
        job_inputs = inputs.get(job_id)
        if job_inputs is None or not job_inputs.files:
            out.targets_without_inputs += 1
            continue
        for item in job_inputs.files:
            if (job_id, item.path) in active_claims:
                continue
            # released while the job ran and the job is queued again: a requeue gets it back
            out.claim.append(ClaimChange(job_id, item.path, target.reason, target.position))
    for job in snapshot.jobs:
        if job.state.is_queued and job.job_id not in inputs:
            out.queued_without_inputs += 1

    # 2. releases: closed by the running job, or the job ended (confirmed)
    unconfirmed: set[str] = set()
    closed = cycle.closed
    ended = cycle.ended
    leaving: set[tuple[str, str]] = set()
    for claim in cycle.claims:
        job = present.get(claim.job_id)
        if job is None:
            final = ended.get(claim.job_id)
            if final is not None:
                out.forget.append(ClaimChange(claim.job_id, claim.path,
                                              why=f"{ENDED}:{final.value}"))
                leaving.add((claim.job_id, claim.path))
            elif claim.active and claim.job_id not in unconfirmed:
                unconfirmed.add(claim.job_id)
                out.unconfirmed.append(claim.job_id)
        elif job.state.is_final:
            out.forget.append(ClaimChange(claim.job_id, claim.path,
                                          why=f"{ENDED}:{job.state.value}"))
            leaving.add((claim.job_id, claim.path))
        elif claim.active and closed and job.state in _RUNNING \
                and (claim.job_id, claim.path) in closed:
            out.release.append(ClaimChange(claim.job_id, claim.path, why=CLOSED))
            leaving.add((claim.job_id, claim.path))

    # 3. which files keep (or get) a replica: path -> (position, job, reason); 0 = no position
    wanted: dict[str, tuple[int, str, str]] = {}
    for claim in cycle.claims:
        if claim.active and claim.path not in wanted \
                and (not leaving or (claim.job_id, claim.path) not in leaving):
            wanted[claim.path] = (0, claim.job_id, claim.reason)
    for change in out.claim:
        current = wanted.get(change.path)
        if current is None or (current[0] == 0 and change.position) \
                or 0 < change.position < current[0]:
            wanted[change.path] = (change.position, change.job_id, change.reason)

    # 4. creations in window order, within the space budget
    replicas = cycle.replicas
    used = sum(r.size for r in replicas.values())
    candidates = sorted(((w[0] == 0, w[0], path, w[1], w[2]) for path, w in wanted.items()
                         if path not in replicas))
    sizes: dict[str, int | None] = {}
    if candidates:
        sizes = {item.path: item.size for job_inputs in inputs.values()
                 for item in job_inputs.files}
    budget = cycle.space_budget
    for _, position, path, job_id, reason in candidates:
        size = sizes.get(path) or 0
        if budget is not None and used + size > budget:
            out.deferred_for_space.append(path)
            continue
        used += size
        out.create.append(CreateReplica(path, job_id, reason, position, size))
    out.space_used = used

    # 5. removals: a replica nobody wants any more (one being made waits until it is ready)
    why_by_path = {c.path: f"job {c.job_id} {c.why}" for c in out.forget + out.release}
    for path, replica in cycle.replicas.items():
        if path in wanted or replica.state in (CREATING, REMOVING):
            continue
        out.remove.append(RemoveReplica(path, why_by_path.get(path, "no job wants it")))

    # 6. dispatched jobs with an input (not yet closed) that has no ready replica
    done_with = {(c.job_id, c.path) for c in cycle.claims if not c.active} | \
        {(c.job_id, c.path) for c in out.release}
    for job in snapshot.jobs:
        if job.state is not JobState.RUNNING:
            continue
        job_inputs = inputs.get(job.job_id)
        if job_inputs is None:
            continue
        bare = tuple(f.path for f in job_inputs.files
                     if (job.job_id, f.path) not in done_with
                     and getattr(cycle.replicas.get(f.path), "state", None) != READY)
        if bare:
            out.at_risk.append(AtRisk(job.job_id, bare))
    return out


def _window_targets(cycle: CycleInput, out: Decisions) -> None:
    """The window (and shortcut) of each partition group, in the scheduler's priority order."""
    running = [job for job in cycle.snapshot.jobs if job.state in _RUNNING]
    largest_running = max((job.nodes for job in running), default=0)
    queues: dict[str, list[JobRecord]] = {}
    for job in cycle.snapshot.jobs:
        # a held job cannot be dispatched; data and replica jobs read nothing from scratch
        if job.state not in (JobState.PENDING, JobState.REQUEUED) \
                or job.queue in cycle.ignored_queues:
            continue
        group = job.queue if job.queue in cycle.partition_params else DEFAULT_GROUP
        queues.setdefault(group, []).append(job)
    system_nodes = cycle.system_nodes
    for group in sorted(queues):
        queue = queues[group]
        params = cycle.partition_params.get(group, cycle.params)
        required = nodes_required(largest_running, system_nodes, params.alpha)
        length = window_length((job.nodes for job in queue), required)
        out.windows.append(WindowGroup(group, len(queue), required, length, params))
        targets = out.targets
        for position, job in enumerate(queue[:length], 1):
            targets[job.job_id] = Target(job.job_id, WINDOW, position, group, job.nodes)
        if params.threshold > 0:
            for position, job in enumerate(queue[length:], length + 1):
                if is_shortcut(job.nodes, system_nodes, params.threshold):
                    targets[job.job_id] = Target(job.job_id, SHORTCUT, position, group, job.nodes)
