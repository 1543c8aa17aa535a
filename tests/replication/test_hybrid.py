"""Hybrid replicas in replicad (``replication.hybrid``, the layout paper's §5): the replica laid
out for the recorded workload's requests the primary serves worst, the primary's layout when
there is nothing to gain or no (well-formed) workload, and a replica a write made stale dropped
by the next cycle."""

from __future__ import annotations

import logging
import os

import pytest

from scratchkeeper.advisor import AccessClass, ModelParams, Workload
from scratchkeeper.advisor.hybrid import hybrid_replica, workload_text
from scratchkeeper.config import parse_config
from scratchkeeper.replication.daemon import ReplicationDaemon
from scratchkeeper.replication.replicas import LAYOUT_XATTR, ReplicaOperations
from scratchkeeper.replication.state import ReplicationState
from scratchkeeper.state import StateStore
from scratchkeeper.storage import open_backend

from .helpers import stage_input, write_site
from .test_daemon import QueueDouble, pending, replicas, run_cycle

K, M = 1 << 10, 1 << 20
MIXED = Workload(16, 16, True, (AccessClass(64 * K, 4000, "read", "random"),
                                AccessClass(4 * M, 40, "read", "sequential")))


def site(tmp_path, hybrid: bool):
    text = write_site(tmp_path / "site.toml", tmp_path,
                      extra=f"hybrid = {'true' if hybrid else 'false'}").read_text()
    return parse_config(text, str(tmp_path / "site.toml"))


@pytest.fixture
def ops(tmp_path):
    config = site(tmp_path, True)
    backend = open_backend(config)
    return config, backend, ReplicaOperations(backend, ReplicationState(
        StateStore(config.state.database)), config)


def record(backend, path, workload) -> None:
    backend.set_xattr(path, LAYOUT_XATTR,
                      f"1-DV count=2 size=1048576 {workload_text(workload)}: advised".encode())


def test_the_replica_takes_the_layout_the_workload_gains_most_from(ops):
    config, backend, operations = ops
    path, sha = stage_input(config, "1", "in.dat", 3 * M)
    record(backend, path, MIXED)
    primary = backend.layout(path)
    expected = hybrid_replica(MIXED, (primary.stripe_count, primary.stripe_size), 6, 8,
                              ModelParams())
    assert expected.differs
    assert operations.create(path, job_id="1", reason="window", owner_uid=0,
                             checksum=f"sha256:{sha}") == "ready"
    layout = backend.layout(path)
    replica = layout.mirror(2)[0]
    assert (replica.stripe_count, replica.stripe_size) == (expected.stripe_count,
                                                           expected.stripe_size)
    assert (replica.stripe_count, replica.stripe_size) != (primary.stripe_count,
                                                           primary.stripe_size)
    assert not layout.osts(2) & layout.osts(1)
    assert backend.read(path, 0, 3 * M) == backend.read(path, 0, 3 * M)


@pytest.mark.parametrize("value", [None, b"1-DV count=2 size=1048576: no workload",
                                   b"1-DV count=2 size=1048576 workload=procs:9,per_node:1,"
                                   b"shared,4096:1:read:$(id): hostile"])
def test_without_a_usable_workload_the_replica_keeps_the_primarys_layout(ops, value, caplog):
    config, backend, operations = ops
    path, sha = stage_input(config, "1", "in.dat", M)
    if value is not None:
        backend.set_xattr(path, LAYOUT_XATTR, value)
    caplog.set_level(logging.INFO, logger="scratchkeeper.replication.replicas")
    assert operations.create(path, job_id="1", reason="window", owner_uid=0,
                             checksum=f"sha256:{sha}") == "ready"
    layout = backend.layout(path)
    assert [(c.stripe_count, c.stripe_size) for c in layout.components] == [(2, M), (2, M)]
    assert "replica in the primary's layout" in caplog.text


def test_without_hybrid_the_recorded_workload_is_not_read(tmp_path):
    config = site(tmp_path, False)
    backend = open_backend(config)
    operations = ReplicaOperations(backend, ReplicationState(StateStore(config.state.database)),
                                   config)
    path, sha = stage_input(config, "1", "in.dat", M)
    record(backend, path, MIXED)
    operations.create(path, job_id="1", reason="window", owner_uid=0, checksum=f"sha256:{sha}")
    assert [(c.stripe_count, c.stripe_size) for c in backend.layout(path).components] == \
        [(2, M), (2, M)]


def mark_stale(backend, path: str, mirror_id: int) -> None:
    """What the mount does when a write goes to another mirror: the mirror's flags get stale."""
    mdt = os.path.join(backend.store_root, "mdt", os.path.relpath(path, backend.scratch_root))
    raw = os.getxattr(mdt, "security.scratchkeeper.lov").decode()
    lines = []
    for line in raw.splitlines():
        if line.startswith("lov "):
            gen = int(line.split("gen=")[1])
            line = f"lov 1 gen={gen + 1}"
        elif line.startswith("comp ") and f" mirror={mirror_id} " in line:
            line = line.replace(" flags=init ", " flags=init,stale ")
        lines.append(line)
    os.setxattr(mdt, "security.scratchkeeper.lov", ("\n".join(lines) + "\n").encode())


def test_a_replica_a_write_made_stale_is_dropped_by_the_next_cycle(tmp_path):
    config = site(tmp_path, True)
    queue = QueueDouble()
    backend = open_backend(config)
    daemon = ReplicationDaemon(config, scheduler=queue, backend=backend,
                               store=StateStore(config.state.database))
    try:
        queue.jobs = [pending("1")]
        path, _ = stage_input(config, "1", "a.dat", 100_000)
        record(backend, path, MIXED)
        run_cycle(daemon)
        assert replicas(daemon) == {path: "ready"}
        row = daemon.state.replica(path)
        assert not daemon.operations.invalidated(row)
        run_cycle(daemon)
        assert replicas(daemon) == {path: "ready"}  # wanted and valid: kept
        mark_stale(backend, path, row.mirror_id)
        assert daemon.operations.invalidated(row)
        run_cycle(daemon)
        assert row.mirror_id not in backend.layout(path).mirror_ids
        assert path not in replicas(daemon)
        # still wanted: the next cycle makes a fresh one (the data is unchanged here)
        run_cycle(daemon)
        assert replicas(daemon) == {path: "ready"}
        assert not daemon.operations.invalidated(daemon.state.replica(path))
    finally:
        daemon.shutdown()
