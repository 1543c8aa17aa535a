"""The decision cycle on queue snapshots captured from the real Slurm 22.05 (``capture.py``)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from scratchkeeper.replication.decisions import (
    CLOSED,
    Claim,
    CycleInput,
    InputFile,
    JobInputs,
    ReplicaStatus,
    decide,
)
from scratchkeeper.replication.window import SHORTCUT, WINDOW, WindowParams
from scratchkeeper.schedulers import slurm
from scratchkeeper.schedulers.base import JobState, QueueSnapshot

DATA = Path(__file__).parent / "data"
IDS = json.loads((DATA / "squeue-window.ids.json").read_text())
RUNNING_3, RUNNING_2 = IDS["running"]
P = IDS["pending"]        # node counts 2, 1, 3, 4, 1, 2, 8, 1 in submission (= priority) order
HELD = IDS["held"][0]
S = 8


def captured() -> QueueSnapshot:
    records = slurm.parse_query((DATA / "squeue-window.json").read_text())
    return QueueSnapshot(tuple(slurm.order_by_priority(records)))


def inputs_for(job_ids, size=1000) -> dict[str, JobInputs]:
    return {j: JobInputs(j, 0, (InputFile(f"/scratch/{j}/in.dat", size),)) for j in job_ids}


def path(job_id: str) -> str:
    return f"/scratch/{job_id}/in.dat"


def cycle(**kwargs) -> CycleInput:
    base = dict(snapshot=captured(), system_nodes=S, inputs=inputs_for(P + [HELD]),
                params=WindowParams(alpha=0.5, threshold=0.1))
    base.update(kwargs)
    return CycleInput(**base)


def test_captured_snapshot_parses_in_priority_order():
    snapshot = captured()
    mine = [j for j in snapshot.jobs if j.job_id in P]
    assert [j.job_id for j in mine] == P
    assert [j.nodes for j in mine] == [2, 1, 3, 4, 1, 2, 8, 1]
    assert all(j.state is JobState.PENDING for j in mine)
    held = next(j for j in snapshot.jobs if j.job_id == HELD)
    assert held.state is JobState.HELD
    assert {j.job_id: j.nodes for j in snapshot.running()}[RUNNING_3] == 3


def test_window_is_smallest_prefix_reaching_max_of_largest_running_and_alpha_s():
    # R = 3 (largest running), alpha*S = 4: 2 + 1 + 3 >= 4 after three jobs
    out = decide(cycle())
    window = {j for j, t in out.targets.items() if t.reason == WINDOW}
    assert window == set(P[:3])
    assert [out.targets[j].position for j in P[:3]] == [1, 2, 3]
    assert out.windows[0].required == 4 and out.windows[0].length == 3
    assert {c.path for c in out.create} == {path(j) for j in P[:3]}
    assert HELD not in out.targets


def test_largest_running_job_widens_the_window_when_alpha_is_small():
    # alpha*S = 0.8 < R = 3: the window must still cover the largest running job
    out = decide(cycle(params=WindowParams(alpha=0.1, threshold=0.0)))
    assert out.windows[0].required == 3
    assert set(out.targets) == {P[0], P[1]}          # 2 + 1 >= 3


def test_shortcut_replicates_small_jobs_beyond_the_window():
    out = decide(cycle(params=WindowParams(alpha=0.5, threshold=0.125)))
    shortcut = {j for j, t in out.targets.items() if t.reason == SHORTCUT}
    assert shortcut == {P[4], P[7]}          # the two 1-node jobs after the window
    assert out.targets[P[4]].position == 5
    assert {c.path for c in out.create} == {path(j) for j in P[:3] + [P[4], P[7]]}


def test_infinite_alpha_puts_every_queued_job_in_the_window():
    out = decide(cycle(params=WindowParams(alpha=math.inf, threshold=0.1)))
    assert set(P) <= set(out.targets)


def test_per_partition_override_forms_its_own_group():
    out = decide(cycle(partition_params={"batch": WindowParams(alpha=1.0, threshold=0.0)}))
    group = next(w for w in out.windows if w.group == "batch")
    assert group.required == 8 and group.length == 4     # 2 + 1 + 3 + 4 >= 8
    assert {j for j in out.targets if j in P} == set(P[:4])


def test_jobs_without_known_inputs_are_skipped_and_counted():
    out = decide(cycle(inputs=inputs_for([P[0]])))
    assert [c.path for c in out.create] == [path(P[0])]
    assert out.targets_without_inputs == 2
    assert out.queued_without_inputs >= len(P) - 1


def test_existing_claims_and_replicas_are_not_made_twice():
    claims = [Claim(j, path(j)) for j in P[:3]]
    replicas = {path(j): ReplicaStatus(path(j), "ready", 1000) for j in P[:3]}
    out = decide(cycle(claims=claims, replicas=replicas))
    assert out.create == [] and out.claim == [] and out.remove == []


def test_two_jobs_reading_one_file_share_one_replica():
    shared = InputFile("/scratch/shared.dat", 5000)
    inputs = {P[0]: JobInputs(P[0], 0, (shared,)), P[1]: JobInputs(P[1], 0, (shared,))}
    out = decide(cycle(inputs=inputs))
    assert [c.path for c in out.create] == ["/scratch/shared.dat"]
    assert len(out.claim) == 2
    # one job ends: the other still holds it
    claims = [Claim(P[0], shared.path), Claim(P[1], shared.path)]
    replicas = {shared.path: ReplicaStatus(shared.path, "ready", 5000)}
    gone = replace(captured(), jobs=tuple(j for j in captured().jobs if j.job_id != P[0]))
    out = decide(cycle(snapshot=gone, inputs=inputs, claims=claims, replicas=replicas,
                       ended={P[0]: JobState.COMPLETED}))
    assert [(c.job_id, c.path) for c in out.forget] == [(P[0], shared.path)]
    assert out.remove == []


def test_vanished_job_keeps_its_replica_until_accounting_confirms_the_end():
    claims = [Claim(P[0], path(P[0]))]
    replicas = {path(P[0]): ReplicaStatus(path(P[0]), "ready", 1000)}
    gone = replace(captured(), jobs=tuple(j for j in captured().jobs if j.job_id != P[0]))
    out = decide(cycle(snapshot=gone, claims=claims, replicas=replicas))
    assert out.remove == [] and out.unconfirmed == [P[0]]
    out = decide(cycle(snapshot=gone, claims=claims, replicas=replicas,
                       ended={P[0]: JobState.CANCELLED}))
    assert [r.path for r in out.remove] == [path(P[0])]
    assert "ended:cancelled" in out.remove[0].why


def test_job_that_ends_in_the_snapshot_itself_releases_at_once():
    snapshot = captured()
    done = tuple(replace(j, state=JobState.FAILED) if j.job_id == RUNNING_3 else j
                 for j in snapshot.jobs)
    claims = [Claim(RUNNING_3, "/scratch/r3.dat")]
    replicas = {"/scratch/r3.dat": ReplicaStatus("/scratch/r3.dat", "ready", 10)}
    out = decide(cycle(snapshot=replace(snapshot, jobs=done), claims=claims, replicas=replicas))
    assert [r.path for r in out.remove] == ["/scratch/r3.dat"]


def test_close_by_the_running_job_removes_and_requeue_brings_the_replica_back():
    inputs = {RUNNING_3: JobInputs(RUNNING_3, 0, (InputFile("/scratch/r3.dat", 10),))}
    claims = [Claim(RUNNING_3, "/scratch/r3.dat")]
    replicas = {"/scratch/r3.dat": ReplicaStatus("/scratch/r3.dat", "ready", 10)}
    out = decide(cycle(inputs=inputs, claims=claims, replicas=replicas,
                       closed=frozenset({(RUNNING_3, "/scratch/r3.dat")})))
    assert [c.why for c in out.release] == [CLOSED]
    assert [r.path for r in out.remove] == ["/scratch/r3.dat"]
    assert out.at_risk == []
    # requeued: pending again at the head of the queue, the released claim comes back
    snapshot = captured()
    requeued = tuple(replace(j, state=JobState.PENDING) if j.job_id == RUNNING_3 else j
                     for j in snapshot.jobs)
    released = [Claim(RUNNING_3, "/scratch/r3.dat", active=False, released_why=CLOSED)]
    ordered = QueueSnapshot(tuple(slurm.order_by_priority(list(requeued))))
    out = decide(cycle(snapshot=ordered, inputs=inputs, claims=released, replicas={}))
    assert [c.path for c in out.create] == ["/scratch/r3.dat"]
    assert [(c.job_id, c.reason) for c in out.claim] == [(RUNNING_3, WINDOW)]


def test_running_job_without_a_ready_replica_is_at_risk():
    inputs = {RUNNING_2: JobInputs(RUNNING_2, 0, (InputFile("/scratch/r2.dat", 10),))}
    out = decide(cycle(inputs=inputs))
    assert [(a.job_id, a.paths) for a in out.at_risk] == [(RUNNING_2, ("/scratch/r2.dat",))]
    creating = {"/scratch/r2.dat": ReplicaStatus("/scratch/r2.dat", "creating", 10)}
    out = decide(cycle(inputs=inputs, claims=[Claim(RUNNING_2, "/scratch/r2.dat")],
                       replicas=creating))
    assert [a.job_id for a in out.at_risk] == [RUNNING_2]
    assert out.remove == []


def test_space_budget_defers_the_creations_furthest_from_dispatch():
    out = decide(cycle(inputs=inputs_for(P, size=1000), space_budget=2500))
    assert [c.path for c in out.create] == [path(P[0]), path(P[1])]
    assert out.deferred_for_space == [path(P[2])]


def test_replica_being_made_is_not_removed_until_ready():
    replicas = {"/scratch/old.dat": ReplicaStatus("/scratch/old.dat", "creating", 10),
                "/scratch/stale.dat": ReplicaStatus("/scratch/stale.dat", "ready", 10)}
    out = decide(cycle(replicas=replicas))
    assert [r.path for r in out.remove] == ["/scratch/stale.dat"]


@pytest.mark.parametrize("ignored", [frozenset({"batch"})])
def test_data_and_replica_queues_are_left_out_of_the_window(ignored):
    out = decide(cycle(ignored_queues=ignored))
    assert not set(out.targets) & set(P)
