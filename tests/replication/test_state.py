"""The replication tables read between cycles from memory: always what a fresh read gives."""

from __future__ import annotations

import random

from scratchkeeper.replication.decisions import ClaimChange
from scratchkeeper.replication.state import ReplicationState
from scratchkeeper.state import StateStore


def fresh(database: str) -> ReplicationState:
    return ReplicationState(StateStore(database))


def test_claims_kept_in_memory_equal_a_fresh_read_in_order_through_any_change(tmp_path):
    database = str(tmp_path / "state.db")
    daemon = fresh(database)
    rng = random.Random(3)
    pairs = [(str(job), f"/scratch/f{rng.randrange(40)}") for job in range(60)]
    assert daemon.claims() == []
    for step in range(200):
        current = daemon.claims()
        claim = [ClaimChange(j, p, rng.choice(("window", "shortcut")), rng.randrange(50))
                 for j, p in rng.sample(pairs, rng.randrange(0, 6))]
        release = [ClaimChange(c.job_id, c.path, why="closed")
                   for c in rng.sample(current, min(len(current), rng.randrange(0, 3)))]
        forget = [ClaimChange(c.job_id, c.path, why="ended:completed")
                  for c in rng.sample(current, min(len(current), rng.randrange(0, 3)))]
        daemon.apply_claims(claim, release, forget)
        assert daemon.claims() == fresh(database).claims(), step
    assert daemon.claims()


def test_a_change_by_another_writer_is_read_again(tmp_path):
    database = str(tmp_path / "state.db")
    daemon, other = fresh(database), fresh(database)
    daemon.apply_claims([ClaimChange("1", "/scratch/a", "window", 1)], [], [])
    assert [c.active for c in daemon.claims()] == [True]
    other.apply_claims([], [ClaimChange("1", "/scratch/a", why="closed")], [])
    assert [(c.active, c.released_why) for c in daemon.claims()] == [(False, "closed")]
    other.apply_claims([ClaimChange("2", "/scratch/b", "shortcut", 0)], [],
                       [ClaimChange("1", "/scratch/a")])
    assert [(c.job_id, c.reason) for c in daemon.claims()] == [("2", "shortcut")]

    assert daemon.statuses() == {}
    attempt = other.begin_create("/scratch/b", job_id="2", reason="shortcut",
                                 expected_mirror_id=2, primary_mirrors=[1], primary_osts=[0],
                                 size=10, checksum=None, token="t")
    assert attempt == 1 and daemon.statuses()["/scratch/b"].state == "creating"
    other.mark_ready("/scratch/b", "t", 2, [1])
    assert daemon.statuses()["/scratch/b"].state == "ready"
    other.forget_replica("/scratch/b", "t")
    assert daemon.statuses() == fresh(database).statuses() == {}


def test_status_writes_only_what_changed_and_a_new_daemon_writes_all(tmp_path):
    database = str(tmp_path / "state.db")
    daemon = fresh(database)
    daemon.set_status({"targets": {"1": {"position": 1}}, "pid": 5})
    store = daemon.store
    store.connection().execute("UPDATE daemon_status SET value = '0' WHERE key = 'pid'")
    daemon.set_status({"targets": {"1": {"position": 2}}, "pid": 5})
    assert fresh(database).status() == {"targets": {"1": {"position": 2}}, "pid": 0}
    fresh(database).set_status({"targets": {"1": {"position": 2}}, "pid": 5})
    assert fresh(database).status()["pid"] == 5
