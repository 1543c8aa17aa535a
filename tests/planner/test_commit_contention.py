"""A data job's commit while the state database and the store's namespace are locked by others:
delayed, never failed (issue 14: 6 of 60 stage-ins failed with "namespace.db: cannot open state
database: database is locked" after their transfers had succeeded)."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import stat
import subprocess
import sys
import time

import pytest

import scratchkeeper.state
from scratchkeeper.config import SiteConfig
from scratchkeeper.errors import InputError
from scratchkeeper.planner import commit, records
from scratchkeeper.state import DatabaseBusy, StateStore
from scratchkeeper.storage import open_backend


@pytest.fixture
def site(tmp_path):
    storage = dataclasses.replace(SiteConfig().storage, scratch_root=str(tmp_path / "scratch"),
                                  store_root=str(tmp_path / "store"), ost_count=4)
    state = dataclasses.replace(SiteConfig().state, database=str(tmp_path / "state.db"))
    config = dataclasses.replace(SiteConfig(), storage=storage, state=state)
    (tmp_path / "scratch").mkdir()
    open_backend(config).list_osts()  # the store and its namespace exist
    return config


def _planned_chain(store: StateStore, path: str, source: str) -> str:
    records.open_records(store)
    chain_id = f"sk-load-{time.monotonic_ns()}"
    now = time.time()
    with store.transaction() as conn:
        conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (chain_id, "/home/u/job.sh", "/tmp", "slurm", 0, "submitted", "", now, now,
                      "{}"))
        for position, key in enumerate(["stage-in", "compute"]):
            conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, job_id,"
                         " state, updated) VALUES (?,?,?,?,?,?,?,?)",
                         (chain_id, key, key, "batch", position, str(100 + position),
                          "submitted", now))
        conn.execute("INSERT INTO staged_files(chain_id, path, job_key, source, line, state) "
                     "VALUES (?,?,?,?,?,?)", (chain_id, path, "stage-in", source, 3, "planned"))
    return chain_id


def _hold(path: str, seconds: float) -> subprocess.Popen:
    """Another process takes an EXCLUSIVE lock on ``path`` for ``seconds`` (a busy writer)."""
    code = (f"import sqlite3, time\n"
            f"conn = sqlite3.connect({path!r}, isolation_level=None)\n"
            f"conn.execute('BEGIN EXCLUSIVE')\n"
            f"print('held', flush=True)\n"
            f"time.sleep({seconds})\n"
            f"conn.execute('COMMIT')\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.parametrize("locked", ["namespace", "state"])
def test_a_commit_outlasting_the_lock_wait_is_retried_not_failed(site, monkeypatch, caplog,
                                                                 locked):
    # every single wait gives up after 0.3 s: only the commit's own retry can outlast the lock
    monkeypatch.setattr(scratchkeeper.state, "LOCK_WAIT", 0.3)
    monkeypatch.setattr(scratchkeeper.state, "BUSY_TIMEOUT_MS", 50)
    store = StateStore(site.state.database)
    path = os.path.join(site.storage.scratch_root, "in.dat")
    data = os.urandom(300_001)
    chain_id = _planned_chain(store, path, "file:///src/in.dat")
    with open(path, "wb") as handle:
        handle.write(data)
    target = (os.path.join(site.storage.store_root, "namespace.db") if locked == "namespace"
              else site.state.database)
    holder = _hold(target, 2.0)
    caplog.set_level(logging.WARNING, logger="scratchkeeper.planner.commit")
    try:
        (committed,) = commit.commit_stage(store, site, chain_id, "stage-in")
    finally:
        holder.wait(timeout=30)
    assert committed.checksum == hashlib.sha256(data).hexdigest()
    assert "databases busy, retrying" in caplog.text  # it did meet the lock
    (row,) = records.staged_files(store, chain_id)
    assert row["state"] == "staged" and row["size"] == len(data)
    assert [r["state"] for r in records.chain_jobs(store, chain_id)][0] == records.JOB_DONE
    backend = open_backend(site)
    assert backend.read(path, 0, len(data)) == data
    assert backend.get_xattr(path, "user.scratchkeeper.sha256") == committed.checksum.encode()
    assert not os.path.exists(path)  # imported once, not twice


def test_the_commit_retry_is_bounded(site, monkeypatch):
    monkeypatch.setattr(scratchkeeper.state, "LOCK_WAIT", 0.2)
    monkeypatch.setattr(scratchkeeper.state, "BUSY_TIMEOUT_MS", 50)
    monkeypatch.setattr(commit, "COMMIT_LOCK_WAIT", 0.8)
    store = StateStore(site.state.database)
    path = os.path.join(site.storage.scratch_root, "in.dat")
    chain_id = _planned_chain(store, path, "file:///src/in.dat")
    with open(path, "wb") as handle:
        handle.write(b"x")
    holder = _hold(os.path.join(site.storage.store_root, "namespace.db"), 3.0)
    try:
        with pytest.raises(DatabaseBusy, match="commit of .*in.dat: still locked"):
            commit.commit_stage(store, site, chain_id, "stage-in")
    finally:
        holder.wait(timeout=30)
    assert os.path.exists(path)  # nothing imported: the stage can be committed again
    (row,) = records.staged_files(store, chain_id)
    assert row["state"] == "planned"


@pytest.mark.parametrize("kind,what", [("fifo", "a FIFO"), ("zero", "a character device")])
def test_a_commit_refuses_a_fifo_or_device_at_the_staged_path(site, alarm, kind, what):
    """A FIFO left at the destination blocked the commit's open forever (root's data job), a
    device like /dev/zero was read without end."""
    store = StateStore(site.state.database)
    path = os.path.join(site.storage.scratch_root, "in.dat")
    chain_id = _planned_chain(store, path, "file:///src/in.dat")
    if kind == "fifo":
        os.mkfifo(path)
    else:
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # what /dev/zero is
    started = time.monotonic()
    with pytest.raises(InputError, match=f"/home/u/job.sh:3: .*in.dat: is {what}, not a "
                                         "regular file"):
        commit.commit_stage(store, site, chain_id, "stage-in")
    assert time.monotonic() - started < 10
    (row,) = records.staged_files(store, chain_id)
    assert row["state"] == "planned"
