"""Invariants of the decision cycle on random queues (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from scratchkeeper.replication.decisions import Claim, CycleInput, InputFile, JobInputs, ReplicaStatus, decide
from scratchkeeper.replication.window import WindowParams, replication_targets
from scratchkeeper.schedulers.base import JobRecord, JobState, QueueSnapshot

STATES = [JobState.PENDING, JobState.HELD, JobState.RUNNING, JobState.COMPLETED,
          JobState.REQUEUED]
FILES = [f"/scratch/f{i}" for i in range(8)]


@st.composite
def cycles(draw):
    count = draw(st.integers(0, 25))
    jobs = tuple(JobRecord(str(i), draw(st.sampled_from(STATES)), "x",
                           queue=draw(st.sampled_from(["batch", "dataxfer"])),
                           nodes=draw(st.integers(1, 8))) for i in range(count))
    inputs = {}
    for job in jobs:
        if draw(st.booleans()):
            paths = draw(st.lists(st.sampled_from(FILES), min_size=1, max_size=3, unique=True))
            inputs[job.job_id] = JobInputs(job.job_id, 0, tuple(InputFile(p, 10) for p in paths))
    claims = [Claim(str(draw(st.integers(0, 30))), draw(st.sampled_from(FILES)),
                    draw(st.booleans())) for _ in range(draw(st.integers(0, 10)))]
    claims = list({(c.job_id, c.path): c for c in claims}.values())
    replicas = {p: ReplicaStatus(p, draw(st.sampled_from(["creating", "ready", "removing",
                                                           "failed"])), 10)
                for p in draw(st.lists(st.sampled_from(FILES), unique=True, max_size=8))}
    ended = {c.job_id: JobState.COMPLETED for c in claims if draw(st.booleans())}
    params = WindowParams(draw(st.sampled_from([0.25, 0.5, 1.0, float("inf")])),
                          draw(st.sampled_from([0.0, 0.1, 0.125, 0.5])))
    return CycleInput(snapshot=QueueSnapshot(jobs), system_nodes=8, inputs=inputs, claims=claims,
                      replicas=replicas, ended=ended, params=params,
                      ignored_queues=frozenset({"dataxfer"}),
                      space_budget=draw(st.one_of(st.none(), st.integers(0, 200))))


@settings(deadline=None)
@given(cycles())
def test_decisions_are_consistent(cycle):
    out = decide(cycle)
    eligible = [(j.job_id, j.nodes) for j in cycle.snapshot.jobs
                if j.state in (JobState.PENDING, JobState.REQUEUED) and j.queue != "dataxfer"]
    # the targets are exactly what the window function says, held and data jobs never
    assert set(out.targets) == set(replication_targets(eligible, max(
        [j.nodes for j in cycle.snapshot.jobs if j.state is JobState.RUNNING], default=0),
        8, cycle.params))
    created = {c.path for c in out.create}
    removed = {r.path for r in out.remove}
    assert not created & removed
    assert not created & set(cycle.replicas)                     # never a double replica
    assert removed <= set(cycle.replicas)
    assert all(cycle.replicas[p].state not in ("creating", "removing") for p in removed)
    # every creation is wanted by a targeted job's input or by a still active claim
    wanted = {f.path for j in out.targets if j in cycle.inputs for f in cycle.inputs[j].files}
    leaving = {(c.job_id, c.path) for c in out.release + out.forget}
    wanted |= {c.path for c in cycle.claims if c.active and (c.job_id, c.path) not in leaving}
    assert created <= wanted
    assert not removed & wanted
    if cycle.space_budget is not None and created:
        assert out.space_used <= max(cycle.space_budget, sum(
            r.size for r in cycle.replicas.values()))
    # a claim is only forgotten for a job whose end is known
    present = {j.job_id: j for j in cycle.snapshot.jobs}
    for change in out.forget:
        job = present.get(change.job_id)
        assert (job is not None and job.state.is_final) or change.job_id in cycle.ended
