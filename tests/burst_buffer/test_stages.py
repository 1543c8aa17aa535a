"""The burst-buffer stages' outcomes issue 46 (item 7) found wrong, against the stand-in
scheduler: a data_out that raises, the owner's umask on the data jobs, the spool's modes, the
chain's state after teardown, what the pool and bbstat count, the words bbstat honours."""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

import pytest

from scratchkeeper.burst_buffer import files, lifecycle, records
from scratchkeeper.burst_buffer.status import status_text
from scratchkeeper.errors import SchedulerError
from scratchkeeper.planner import records as chains
from scratchkeeper.planner.spool import spool_dir
from scratchkeeper.state import StateStore

from .conftest import Queue, job_script


class UmaskQueue(Queue):
    """The stand-in scheduler, noting the umask each sbatch would give its job (sbatch keeps a
    SLURM_UMASK it finds, else records its own umask) and writing each data job's log into the
    spool as the job would (created with that umask)."""

    def __init__(self, store, outcome):
        super().__init__(store, outcome)
        self.umasks: list[str] = []

    def submit(self, spec) -> str:
        mask = os.umask(0)
        os.umask(mask)
        self.umasks.append(os.environ.get("SLURM_UMASK") or f"{mask:04o}")
        job_id = super().submit(spec)
        log = Path(spec.output_path.replace("%j", job_id))
        log.write_text("transfer log\n")
        os.chmod(log, 0o666 & ~int(self.umasks[-1], 8))
        return job_id


def slurm_job_folder(tmp_path: Path, job_id: str, environment: list[str] | None) -> str:
    """Slurm's saved job as burst_buffer.lua hands it over: ``hash.N/job.ID/script`` (with the
    C string's NUL) and, beside it, the environment (a 4-byte count, then NUL-ended entries)."""
    folder = tmp_path / "ctld" / f"hash.{int(job_id) % 10}" / f"job.{job_id}"
    folder.mkdir(parents=True)
    text = Path(job_script(tmp_path)).read_bytes()
    (folder / "script").write_bytes(text)
    if environment is not None:
        (folder / "environment").write_bytes(
            struct.pack("<I", len(environment))
            + b"".join(entry.encode() + b"\0" for entry in environment))
    return str(folder / "script")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# -- data_out ------------------------------------------------------------------------------------
@pytest.mark.parametrize("error,said", [
    (SchedulerError("sbatch: error: Socket timed out on send/recv operation"),
     "Socket timed out"),
    (RuntimeError("a bug"), "internal error: RuntimeError('a bug')"),
])
def test_a_data_out_that_raises_answers_a_failure_slurm_ends_the_stage_out_with(site, error,
                                                                               said):
    """Slurm 22.05 keeps a job whose data_out failed in STAGE_OUT for ever: whatever fails,
    data_out answers (the failure recorded), so burst_buffer.lua returns and the job ends."""
    config, store, tmp_path = site
    queue = Queue(store, lambda spec: ("done", None))
    lifecycle.setup(config, store, "90", 1000, 1000, "", 0)
    chain_id = lifecycle.data_in(config, store, "90", job_script(tmp_path), scheduler=queue)

    def failing(spec):
        raise error
    queue.submit = failing
    answer = lifecycle.data_out(config, store, "90", scheduler=queue)
    assert answer.startswith("stage-out FAILED, results left on scratch: ") and said in answer
    row = records.job(store, "90")
    assert row["stage"] == records.STAGE_OUT_FAILED and said in row["reason"]
    assert chains.chain(store, chain_id)["state"] == chains.STAGE_OUT_FAILED


def test_a_data_out_for_a_job_never_set_up_answers_too(site):
    config, store, _ = site
    answer = lifecycle.data_out(config, store, "91", scheduler=Queue(store, None))
    assert answer.startswith("stage-out FAILED") and "not set up" in answer


# -- the owner's umask and the spool -----------------------------------------------------------
def test_the_data_jobs_take_the_umask_the_owner_had_at_sbatch(site):
    config, store, tmp_path = site
    script = slurm_job_folder(tmp_path, "92", [
        "HOME=/home/u", "FOO=SLURM_UMASK=0000",  # a value, not the entry: never taken
        "SLURM_UMASK=0027", "PATH=/usr/bin"])
    queue = UmaskQueue(store, lambda spec: ("done", None))
    lifecycle.setup(config, store, "92", os.getuid(), os.getgid(), "", 0)
    lifecycle.data_in(config, store, "92", script, scheduler=queue)
    lifecycle.data_out(config, store, "92", scheduler=queue)
    assert queue.umasks == ["0027", "0027"]  # stage-in and stage-out
    assert "SLURM_UMASK" not in os.environ or os.environ["SLURM_UMASK"] != "0027"
    assert records.job(store, "92")["umask"] == 0o027


def test_a_job_whose_environment_is_not_where_slurm_keeps_it_gets_owner_only_files(site):
    config, store, tmp_path = site
    queue = UmaskQueue(store, lambda spec: ("done", None))
    lifecycle.setup(config, store, "93", os.getuid(), os.getgid(), "", 0)
    lifecycle.data_in(config, store, "93", slurm_job_folder(tmp_path, "93", None),
                      scheduler=queue)
    assert queue.umasks == [f"{files.FALLBACK_UMASK:04o}"] == ["0077"]


def test_the_spool_is_readable_by_its_owner_alone(site):
    """0700 folder, 0700 scripts, 0600 logs, though the owner's umask is 0022."""
    config, store, tmp_path = site
    script = slurm_job_folder(tmp_path, "94", ["SLURM_UMASK=0022"])
    queue = UmaskQueue(store, lambda spec: ("done", None))
    lifecycle.setup(config, store, "94", os.getuid(), os.getgid(), "", 0)
    chain_id = lifecycle.data_in(config, store, "94", script, scheduler=queue)
    spool = spool_dir(config, chain_id)
    assert mode(spool) == 0o700
    logs = sorted(spool.glob("*.out"))
    assert [p.name.split(".")[0] for p in logs] == ["stage-in"]
    assert {p.name: mode(p) for p in spool.glob("*.sh")} == {"stage-in.sh": 0o700,
                                                              "stage-out.sh": 0o700}
    assert [mode(p) for p in logs] == [0o600]
    lifecycle.data_out(config, store, "94", scheduler=queue)
    assert [mode(p) for p in sorted(spool.glob("*.out"))] == [0o600, 0o600]


def test_root_never_changes_a_file_the_owner_linked_into_the_spool(site):
    config, store, tmp_path = site
    outside = tmp_path / "outside"
    outside.write_text("not the spool's\n")
    outside.chmod(0o644)
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "a.out").symlink_to(outside)
    os.link(outside, spool / "b.out")
    files.restrict_spool(spool, os.getuid())
    assert mode(outside) == 0o644 and mode(spool) == 0o700


# -- the chain's state, the pool, bbstat ----------------------------------------------------------
def test_teardown_ends_the_chain_so_the_burst_buffer_state_counts_live_jobs_only(site):
    config, store, tmp_path = site
    queue = Queue(store, lambda spec: ("done", None))
    lifecycle.setup(config, store, "95", 1000, 1000, "", 0)
    chain_id = lifecycle.data_in(config, store, "95", job_script(tmp_path), scheduler=queue)
    # what scratchkeeper_chains{state=...} is made of
    assert dict(chains.chain_counts(store)) == {"burst-buffer": 1}
    lifecycle.teardown(config, store, "95", False, scheduler=queue)
    assert chains.chain(store, chain_id)["state"] == records.CHAIN_ENDED
    assert dict(chains.chain_counts(store)) == {records.CHAIN_ENDED: 1}


def test_teardown_keeps_a_failed_chains_failure(site):
    config, store, tmp_path = site
    outcomes = iter([("done", None), ("failed", "script:3: 405")])
    queue = Queue(store, lambda spec: next(outcomes))
    lifecycle.setup(config, store, "96", 1000, 1000, "", 0)
    chain_id = lifecycle.data_in(config, store, "96", job_script(tmp_path), scheduler=queue)
    lifecycle.data_out(config, store, "96", scheduler=queue)
    lifecycle.teardown(config, store, "96", False, scheduler=queue)
    assert chains.chain(store, chain_id)["state"] == chains.STAGE_OUT_FAILED


def test_chains_of_jobs_torn_down_before_this_version_are_ended_when_the_table_opens(tmp_path):
    store = chains.open_records(StateStore(str(tmp_path / "state.db")))
    store.ensure_schema(records.COMPONENT, records.MIGRATIONS[:1])  # the table of before
    with store.transaction() as conn:
        for job_id, stage in (("1", records.TORN_DOWN), ("2", records.STAGED_IN)):
            conn.execute("INSERT INTO chains (chain_id, state, created, updated, owner_uid, "
                         "script_path, workdir, scheduler, plan_json) VALUES (?, ?, 0, 0, 1000, "
                         "'s', '/', 'slurm', '{}')", (f"sk{job_id}", records.CHAIN_STATE))
            conn.execute("INSERT INTO bb_jobs (job_id, uid, gid, chain_id, stage, setup_at, "
                         "updated) VALUES (?, 1000, 1000, ?, ?, 0, 0)",
                         (job_id, f"sk{job_id}", stage))
    records.open_records(store)
    assert dict(chains.chain_counts(store)) == {records.CHAIN_STATE: 1, records.CHAIN_ENDED: 1}


def test_the_pool_counts_the_jobs_slurm_accounts_and_bbstat_every_jobs_bytes(site):
    """Slurm accounts a job in the pool only when it named the pool and asked a size (it calls
    slurm_bb_real_size for no other): the pool's held bytes count those; bbstat counts all."""
    config, store, _ = site
    for job_id, pool, asked, staged in (("1", "scratch", 1 << 20, 3000),  # accounted
                                        ("2", "scratch", 0, 5000),        # pool=, no capacity=
                                        ("3", "", 0, 7000)):              # no #STAGE line
        lifecycle.setup(config, store, job_id, 1000, 1000, pool, asked)
        records.set_stage(store, job_id, records.STAGED_IN, staged_bytes=staged)
    lifecycle.write_held(config, store)
    assert (lifecycle.state_dir(config) / "held-bytes").read_text() == "3000\n"
    assert lifecycle.real_size(store, "2") == 5000  # what it holds, would Slurm ask
    text = status_text(config, store, now=0.0)
    assert ", 14.6K staged by jobs, 2.9K of it held in the pool" in text, text


def test_bbstat_lists_the_jobs_its_words_name_whatever_their_stage(site):
    config, store, _ = site
    for job_id in ("11", "12", "13"):
        lifecycle.setup(config, store, job_id, 1000 + int(job_id), 1000, "", 0)
    records.set_stage(store, "12", records.TORN_DOWN)
    text = status_text(config, store, now=0.0, words=["12", "99"])
    listed = [line.split()[0] for line in text.splitlines() if line.split()[0].isdigit()]
    assert listed == ["12"] and "not in the burst-buffer path: 99" in text
    # no word: the live jobs; a caller (Slurm 23.02 on): the caller's own
    assert "      11 set-up" in status_text(config, store, now=0.0)
    own = status_text(config, store, now=0.0, caller_uid=1013)
    assert "      13 set-up" in own and "      11 " not in own


def test_bbstat_answers_a_word_that_is_not_a_job_id_with_its_usage(site):
    config, store, _ = site
    assert status_text(config, store, words=["12", "--all"]) == \
        "scratchkeeper: scontrol show bbstat [JOBID ...]: '--all' is not a job id\n"
