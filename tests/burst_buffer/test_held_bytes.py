"""The pool's held bytes (burst_buffer/lifecycle.py write_held) written by many stages at once:
slurmctld runs each job's setup, data_in and teardown in a process of its own."""

from __future__ import annotations

import fcntl
import multiprocessing
import os

from scratchkeeper.burst_buffer import lifecycle, records
from scratchkeeper.planner import records as chains
from scratchkeeper.state import StateStore

WORKERS, JOBS_EACH = 6, 15


def test_the_held_bytes_are_read_and_written_under_one_lock(site, monkeypatch):
    """The sum is read while the writers' lock is held: a writer that read an older sum can
    never replace the file after one that read a newer sum."""
    config, store, _ = site
    lock = lifecycle.state_dir(config) / "held-bytes.lock"
    seen: list[str] = []
    real = records.held_bytes

    def probing(store):
        with open(lock, "a") as other:  # an open file of its own: flock sees another holder
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen.append("not held")
            except BlockingIOError:
                seen.append("held")
        return real(store)

    monkeypatch.setattr(records, "held_bytes", probing)
    lifecycle.write_held(config, store)
    assert seen == ["held"]
    assert (lifecycle.state_dir(config) / "held-bytes").read_text() == "0\n"


def _stage_jobs(config, worker: int) -> None:
    """One stage process after another: set up a job that reserved room, stage bytes, write."""
    store = records.open_records(chains.open_records(StateStore(config.state.database)))
    for n in range(JOBS_EACH):
        job_id = str(1000 * (worker + 1) + n)
        lifecycle.setup(config, store, job_id, 1000, 1000, "scratch", 1 << 20)
        records.set_stage(store, job_id, records.STAGED_IN, staged_bytes=worker * 100 + n + 1)
        lifecycle.write_held(config, store)


def test_setups_at_once_neither_fail_nor_lose_each_others_bytes(site):
    config, store, _ = site
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_stage_jobs, args=(config, w)) for w in range(WORKERS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [w.exitcode for w in workers] == [0] * WORKERS  # a failed write raises in its worker
    expected = sum(w * 100 + n + 1 for w in range(WORKERS) for n in range(JOBS_EACH))
    assert records.held_bytes(store) == expected
    folder = lifecycle.state_dir(config)
    assert (folder / "held-bytes").read_text() == f"{expected}\n"
    # nothing half-written is left behind: the file and its lock only
    assert sorted(os.listdir(folder)) == ["held-bytes", "held-bytes.lock"]
