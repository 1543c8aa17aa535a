"""Replica operations on a private local store (and Lustre through the storage tests' fake lfs):
create and verify, refusals, never the primary, and the reconcile of every interrupted step."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from scratchkeeper.config import parse_config
from scratchkeeper.errors import ReplicationError
from scratchkeeper.replication.replicas import ReplicaOperations, expected_mirror_id
from scratchkeeper.replication.state import ReplicationState
from scratchkeeper.runner import set_runner
from scratchkeeper.state import StateStore
from scratchkeeper.storage import LayoutRequest, open_backend

from .helpers import stage_input, write_site


@pytest.fixture
def setup(tmp_path):
    config = parse_config(write_site(tmp_path / "site.toml", tmp_path).read_text(),
                          str(tmp_path / "site.toml"))
    backend = open_backend(config)
    state = ReplicationState(StateStore(config.state.database))
    return config, backend, state, ReplicaOperations(backend, state, config)


def staged(config, job="100", name="in.dat", size=3 << 20, owner=(0, 0)):
    path, sha = stage_input(config, job, name, size, owner=owner)
    return path, f"sha256:{sha}"


def test_create_makes_a_verified_mirror_on_other_osts(setup):
    config, backend, state, ops = setup
    path, checksum = staged(config)
    before = backend.layout(path)
    assert ops.create(path, job_id="100", reason="window", owner_uid=0,
                      checksum=checksum) == "ready"
    layout = backend.layout(path)
    row = state.replica(path)
    assert row.state == "ready" and row.mirror_id == 2 and layout.mirror_ids == [1, 2]
    assert not layout.osts(2) & layout.osts(1)
    assert layout.osts(1) == before.osts()
    assert row.size == 3 << 20 and set(row.osts) == layout.osts(2)
    assert backend.read(path, 0, 10) == backend.read(path, 0, 10)
    # asked again: no double replica
    assert ops.create(path, job_id="101", reason="window", owner_uid=0,
                      checksum=checksum) == "exists"
    assert backend.layout(path).mirror_ids == [1, 2]


def test_a_file_the_job_owner_does_not_own_is_not_replicated(setup):
    config, backend, state, ops = setup
    path, checksum = staged(config, owner=(4242, 4242))
    with pytest.raises(ReplicationError, match="owned by uid 4242"):
        ops.create(path, job_id="100", reason="window", owner_uid=0, checksum=checksum)
    assert backend.layout(path).mirror_ids == [0]
    row = state.replica(path)
    assert row.state == "failed" and row.attempts >= config.replication.create_attempts


def test_a_replaced_file_fails_verification_and_leaves_no_mirror(setup):
    config, backend, state, ops = setup
    path, _ = staged(config)
    with pytest.raises(ReplicationError, match="was replaced"):
        ops.create(path, job_id="100", reason="window", owner_uid=0, checksum="sha256:" + "0" * 64)
    assert backend.layout(path).mirror_ids == [1]      # the failed mirror was dropped again
    assert state.replica(path).state == "failed"


def test_no_osts_outside_the_primary_is_a_clear_failure(tmp_path):
    site = write_site(tmp_path / "site.toml", tmp_path,
                      extra="").read_text().replace("stripe_count = 2", "stripe_count = -1")
    config = parse_config(site, "site.toml")
    backend = open_backend(config)
    state = ReplicationState(StateStore(config.state.database))
    path, checksum = staged(config)
    with pytest.raises(ReplicationError, match="no healthy OST outside"):
        ReplicaOperations(backend, state, config).create(path, job_id="1", reason="window",
                                                         owner_uid=0, checksum=checksum)
    assert backend.layout(path).mirror_ids == [0]


def test_remove_drops_the_replica_and_never_the_primary(setup):
    config, backend, state, ops = setup
    path, checksum = staged(config)
    data = backend.read(path, 0, 3 << 20)
    ops.create(path, job_id="100", reason="window", owner_uid=0, checksum=checksum)
    row = state.replica(path)
    ops.remove(row, "test")
    assert backend.layout(path).mirror_ids == [1] and state.replica(path) is None
    assert backend.read(path, 0, 3 << 20) == data
    # a row that (wrongly) names the primary's mirror id removes nothing
    ops.create(path, job_id="100", reason="window", owner_uid=0, checksum=checksum)
    bad = state.replica(path)
    object.__setattr__(bad, "mirror_id", 1)
    ops.remove(bad, "test")
    assert backend.layout(path).mirror_ids == [1, 2]


def test_replica_is_kept_while_the_primary_has_a_failed_ost(setup):
    config, backend, state, ops = setup
    path, checksum = staged(config)
    data = backend.read(path, 0, 3 << 20)
    ops.create(path, job_id="100", reason="window", owner_uid=0, checksum=checksum)
    failed = min(backend.layout(path).osts(1))
    backend.fail_ost(failed)
    try:
        with pytest.raises(ReplicationError, match=f"unavailable OST {failed}"):
            ops.remove(state.replica(path), "job ended")
        assert state.replica(path).state == "ready"
        assert backend.layout(path).mirror_ids == [1, 2]
        assert backend.read(path, 0, 3 << 20) == data        # served by the replica
        # a removal a kill interrupted is put back, not finished, while the primary is down
        state.begin_remove(path, state.replica(path).token)
        assert ops.reconcile(state.replica(path), {}) == "kept"
        assert state.replica(path).state == "ready"
    finally:
        backend.restore_ost(failed)
    ops.remove(state.replica(path), "job ended")
    assert backend.layout(path).mirror_ids == [1]


def _interrupted_create(backend, state, path, checksum, *, commit: bool):
    """What a daemon killed after recording the intent (and maybe after add_mirror) leaves."""
    layout = backend.layout(path)
    state.begin_create(path, job_id="100", reason="window",
                       expected_mirror_id=expected_mirror_id(layout),
                       primary_mirrors=layout.mirror_ids, primary_osts=layout.osts(),
                       size=backend.stat(path).size, checksum=checksum, token="t" * 32)
    if commit:
        free = sorted(set(range(8)) - layout.osts())[:2]
        backend.add_mirror(path, LayoutRequest(ost_list=tuple(free)))
    return state.replica(path)


def test_reconcile_adopts_a_committed_mirror(setup):
    config, backend, state, ops = setup
    path, checksum = staged(config)
    row = _interrupted_create(backend, state, path, checksum, commit=True)
    assert ops.reconcile(row, {}) == "adopted"
    assert state.replica(path).state == "ready" and state.replica(path).mirror_id == 2


def test_reconcile_forgets_a_creation_that_never_committed(setup):
    config, backend, state, ops = setup
    path, checksum = staged(config)
    row = _interrupted_create(backend, state, path, checksum, commit=False)
    assert ops.reconcile(row, {}) == "undone"
    assert state.replica(path) is None and backend.layout(path).mirror_ids == [0]


def test_reconcile_finishes_an_interrupted_removal(setup):
    config, backend, state, ops = setup
    path, checksum = staged(config)
    ops.create(path, job_id="100", reason="window", owner_uid=0, checksum=checksum)
    row = state.replica(path)
    state.begin_remove(path, row.token)
    assert ops.reconcile(state.replica(path), {}) == "removed"
    assert backend.layout(path).mirror_ids == [1] and state.replica(path) is None


def test_reconcile_forgets_a_ready_replica_whose_file_was_restaged(setup):
    config, backend, state, ops = setup
    path, checksum = staged(config)
    ops.create(path, job_id="100", reason="window", owner_uid=0, checksum=checksum)
    backend.remove(path)
    assert ops.reconcile(state.replica(path), {}) == "file gone"
    assert state.replica(path) is None


def _fake_lustre_module():
    spec = importlib.util.spec_from_file_location(
        "storage_fixtures", Path(__file__).resolve().parents[1] / "storage" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lustre_backend_uses_mirror_extend_with_distinct_osts_and_split(tmp_path):
    fake = _fake_lustre_module().FakeLustre(tmp_path / "lustre")
    (tmp_path / "lustre").mkdir()
    previous = set_runner(fake)
    try:
        site = write_site(tmp_path / "site.toml", tmp_path).read_text()
        site = site.replace('backend = "local"', 'backend = "lustre"').replace(
            f'scratch_root = "{tmp_path / "scratch"}"', f'scratch_root = "{tmp_path / "lustre"}"')
        config = parse_config(site, "site.toml")
        backend = open_backend(config)
        state = ReplicationState(StateStore(config.state.database))
        path = str(tmp_path / "lustre" / "in.dat")
        backend.create(path, LayoutRequest(stripe_count=2))
        backend.write(path, 0, os.urandom(1 << 20))
        ops = ReplicaOperations(backend, state, config)
        assert ops.create(path, job_id="7", reason="shortcut", owner_uid=None,
                          checksum=None) == "ready"
        extend = [c for c in fake.calls if c[1:3] == ("mirror", "extend")]
        assert len(extend) == 1 and "-o" in extend[0]
        chosen = {int(i) for i in extend[0][extend[0].index("-o") + 1].split(",")}
        layout = backend.layout(path)
        assert layout.osts(2) == chosen and not chosen & layout.osts(1)
        ops.remove(state.replica(path), "test")
        split = [c for c in fake.calls if c[1:3] == ("mirror", "split")]
        assert split and split[-1][split[-1].index("--mirror-id") + 1] == "2"
        assert backend.layout(path).mirror_ids == [1]
    finally:
        set_runner(previous)
