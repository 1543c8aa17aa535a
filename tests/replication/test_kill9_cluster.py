"""kill -9 trials of replicad on the real local Slurm, with a consistency check after each.

Every trial changes the queue (a job of ours ends, a new one with a staged input arrives, some
sharing a file with another job), starts the daemon, kills it with SIGKILL at a random moment
(mid-creation, mid-removal, mid-transaction, or idle) and runs ``replicad --once``: reconcile,
one cycle, wait for its workers. Then the store and the state must agree:

* no file has more than one replica (primary + 1 mirror), and no replica lacks a ``ready`` row
  (no orphan, no double replica); no row is left ``creating``/``removing``;
* every primary is intact: same objects as when staged, same bytes;
* no object on any OST belongs to no file (nothing leaked by an interrupted copy);
* a file has a replica exactly when a queued job of ours wants it.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import time
from pathlib import Path

import pytest

from scratchkeeper.replication.state import ReplicationState
from scratchkeeper.state import StateStore
from scratchkeeper.storage import open_backend

from .helpers import Replicad, config_of, stage_input, write_site

pytestmark = pytest.mark.slow

TRIALS = 32
FILES = 8


def file_digest(backend, path: str) -> str:
    size = backend.stat(path).size
    digest = hashlib.sha256()
    for chunk in backend.open_reader(path):
        digest.update(chunk)
    assert backend.stat(path).size == size
    return digest.hexdigest()


def primary_objects(layout, primary_ids) -> set:
    return {(o.ost_index, o.object_id) for c in layout.components if c.mirror_id in primary_ids
            for o in c.objects}


def read_from(log: Path, offset: int) -> str:
    try:
        with open(log) as handle:
            handle.seek(offset)
            return handle.read()
    except FileNotFoundError:
        return ""


def check_consistency(config, originals: dict, trial: int, queued_wants: dict[str, set]) -> None:
    backend = open_backend(config)          # opening the store collects orphaned objects
    state = ReplicationState(StateStore(config.state.database))
    rows = state.replicas()
    stuck = {p: r.state for p, r in rows.items() if r.state in ("creating", "removing")}
    assert not stuck, f"trial {trial}: rows left half-done: {stuck}"
    referenced = set()
    for path, (objects, sha) in originals.items():
        layout = backend.layout(path)
        for comp in layout.components:
            referenced |= {(o.ost_index, o.object_id) for o in comp.objects}
        row = rows.get(path)
        assert len(layout.mirror_ids) <= 2, f"trial {trial}: {path} has {layout.mirror_ids}"
        if len(layout.mirror_ids) == 2:
            assert row is not None and row.state == "ready" \
                and row.mirror_id in layout.mirror_ids, \
                f"trial {trial}: orphan replica of {path} (row {row})"
            primary = [m for m in layout.mirror_ids if m != row.mirror_id]
            assert not layout.osts(row.mirror_id) & layout.osts(primary[0]), \
                f"trial {trial}: {path}: replica shares an OST with the primary"
        else:
            assert row is None or row.state == "failed", f"trial {trial}: {path}: row {row} " \
                                                         f"but mirrors {layout.mirror_ids}"
            primary = layout.mirror_ids
        assert primary_objects(layout, set(primary)) == objects, \
            f"trial {trial}: {path}: the primary's objects changed"
        assert file_digest(backend, path) == sha, f"trial {trial}: {path}: content changed"
        wanted = bool(queued_wants.get(path))
        has_replica = len(layout.mirror_ids) == 2
        assert wanted == has_replica or (row is not None and row.state == "failed"), \
            f"trial {trial}: {path}: wanted by {queued_wants.get(path)} but replica={has_replica}"
    on_disk = set()
    for directory in Path(config.storage.store_root).glob("ost[0-9][0-9][0-9][0-9]"):
        on_disk |= {(int(directory.name[3:]), entry.name) for entry in directory.iterdir()
                    if not entry.name.startswith(".")}
    leaked = on_disk - referenced
    assert not leaked, \
        f"trial {trial}: {len(leaked)} objects belong to no file: {sorted(leaked)[:3]}"


def test_kill9_trials_leave_a_consistent_state(tmp_path, local_cluster, slurm_jobs):
    rng = random.Random(int(os.environ.get("SK_KILL9_SEED", "2026")))
    site = write_site(tmp_path / "site.toml", tmp_path, alpha=8.0, interval=0.3)
    config = config_of(site)
    names = [f"k{i}.dat" for i in range(FILES)]
    sizes = [rng.choice((16, 32, 48, 64)) << 20 for _ in names]   # copies take 0.1-1 s
    active: dict[str, str] = {}            # job id -> path, jobs of ours still queued
    originals: dict[str, tuple[set, str]] = {}

    def new_job() -> None:
        index = rng.randrange(FILES)
        job = slurm_jobs.submit(1, hold=False)
        path, sha = stage_input(config, job, names[index], sizes[index], seed=index)
        active[job] = path
        if path not in originals:
            layout = open_backend(config).layout(path)
            originals[path] = (primary_objects(layout, set(layout.mirror_ids)), sha)

    for _ in range(5):
        new_job()
    daemon = Replicad(site, tmp_path / "replicad.log")
    outcomes: dict[str, int] = {}
    for trial in range(TRIALS):
        # the queue moves: one or two of our jobs end, one or two arrive
        for job in rng.sample(sorted(active), k=min(len(active), rng.choice((1, 1, 2)))):
            slurm_jobs.cancel(job)
            del active[job]
        for _ in range(rng.choice((1, 2, 3))):
            new_job()
        offset = daemon.log.stat().st_size if daemon.log.exists() else 0
        daemon.start()
        if trial % 2:
            time.sleep(rng.uniform(0.4, 2.2))      # anywhere: idle, mid-cycle, mid-copy
        else:
            # aimed: just after the cycle that decided creations or removals, mid-operation
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline and not re.search(
                    r"cycle: .* [1-9]\d* to create|removed \(", read_from(daemon.log, offset)):
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.3))
        daemon.kill9()
        result = daemon.once()
        assert result.returncode == 0, f"trial {trial}: replicad --once: {result.stderr[-2000:]}"
        assert "Traceback" not in result.stderr, result.stderr[-3000:]
        for line in result.stderr.splitlines():
            if "reconciled" in line:
                for part in line.split("reconciled", 1)[1].split(","):
                    count, _, what = part.strip().partition(" ")
                    outcomes[what] = outcomes.get(what, 0) + int(count)
        wants: dict[str, set] = {}
        for job, path in active.items():
            wants.setdefault(path, set()).add(job)
        check_consistency(config, originals, trial, wants)
    print(f"\nkill -9 trials: {TRIALS}; reconcile outcomes after the kills: {outcomes}")
    # the trials did hit work in progress, not only idle daemons
    assert sum(n for what, n in outcomes.items() if what != "ready") > 0, outcomes
