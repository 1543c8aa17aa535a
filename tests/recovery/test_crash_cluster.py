"""kill -9 of recoveryd at random points: afterwards the store is consistent and the file whole.

Each trial stages a file, fails one of its OSTs, starts the real daemon (a separate process),
asks it to recover the file and SIGKILLs it after a random delay, before, during or after the
patch. Right after the kill the file must read either as before (lost stripes unreadable) or
entirely correct, never wrong bytes. A second daemon then finishes or undoes the work: the file
must be whole, no rebuild open, no request left active, and no object on disk that no layout
owns.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from scratchkeeper.errors import TargetUnavailable
from scratchkeeper.recovery import records
from scratchkeeper.recovery.client import RecoveryClient
from scratchkeeper.state import StateStore

from .conftest import read_all, stage, start_recoveryd, stop_recoveryd, write_site

KiB = 1 << 10


def _objects_on_disk(store_root) -> set[tuple[int, str]]:
    found = set()
    for folder in store_root.iterdir():
        if folder.is_dir() and folder.name.startswith("ost") and "." not in folder.name:
            index = int(folder.name[3:])
            found |= {(index, entry.name) for entry in folder.iterdir()
                      if not entry.name.startswith(".probe")}
    return found


def _objects_owned(backend) -> set[tuple[int, str]]:
    owned = set()
    for name in backend.list_dir(""):
        layout = backend.layout(name)
        owned |= {(o.ost_index, o.object_id) for c in layout.components for o in c.objects}
    return owned


def _bytes_never_wrong(backend, path, data):
    """Right after a kill: every readable byte is right; unreadable ones name their OST."""
    layout = backend.layout(path)
    for offset in range(0, len(data), layout.stripe_size):
        length = min(layout.stripe_size, len(data) - offset)
        try:
            assert backend.read(path, offset, length) == data[offset:offset + length]
        except TargetUnavailable:
            pass


def _trials(site_dir, local_cluster, sources, count: int, seed: int):
    site = write_site(site_dir, ost_count=12, extra="[recovery]\nchunk_size = 65536\n"
                      "check_interval = 3600.0\nscope = \"queued-inputs\"")
    backend = site.backend
    rng = random.Random(seed)
    outcomes = {"before": 0, "after": 0}
    source, data = sources.make("crash.bin", 4_000_037)
    for trial in range(count):
        path = stage(backend, f"crash-{trial}.bin", data, sources.ftp(source), stripe_count=4,
                     stripe_size=64 * KiB)
        failed = backend.layout(path).ost_list[rng.randrange(4)]
        backend.fail_ost(failed)
        daemon = start_recoveryd(site)
        try:
            RecoveryClient(site.config.recovery.socket).recover(path, wait=False)
            time.sleep(rng.uniform(0.0, 0.6))
        finally:
            os.kill(daemon.pid, signal.SIGKILL)
            daemon.wait(timeout=10)
        _bytes_never_wrong(backend, path, data)
        outcomes["after" if failed not in backend.layout(path).osts() else "before"] += 1
        daemon = start_recoveryd(site)
        try:
            status = RecoveryClient(site.config.recovery.socket).wait(path, 60)
            assert status["whole"], status
        finally:
            code = stop_recoveryd(site, daemon)
        assert code == 0, "recoveryd must stop at once on SIGTERM"
        assert read_all(backend, path) == data
        assert backend.open_rebuilds() == []
        store = StateStore(site.config.state.database)
        assert store.query("SELECT COUNT(*) AS n FROM recovery_requests WHERE state IN (?, ?)",
                           records.ACTIVE)[0]["n"] == 0
        requests = store.query("SELECT COUNT(*) AS n FROM recovery_requests WHERE path = ?",
                               (path,))[0]["n"]
        assert requests == 1, "one request per report, never duplicated"
        store.close()
        backend.restore_ost(failed)  # the dead OST's old objects are collected now
        assert _objects_on_disk(site.root / "store") == _objects_owned(backend)
    return outcomes


def test_kill_minus_nine_a_few_times(site_dir, local_cluster, sources):
    _trials(site_dir, local_cluster, sources, 4, seed=4)


@pytest.mark.slow
def test_kill_minus_nine_stress_fifty_trials(site_dir, local_cluster, sources):
    outcomes = _trials(site_dir, local_cluster, sources, 50, seed=2026)
    # the random delays must have hit both sides of the commit
    assert outcomes["before"] > 0 and outcomes["after"] > 0, outcomes
