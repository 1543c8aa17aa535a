"""scratchkeeper/burst_buffer/lifecycle.py against a stand-in scheduler (the cluster tests run
the real slurmctld): what each stage records and submits, a stage run again after a restart,
and each failure's outcome."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from scratchkeeper.burst_buffer import lifecycle, records
from scratchkeeper.config import parse_config
from scratchkeeper.planner import records as chains
from scratchkeeper.schedulers import JobRecord, JobState
from scratchkeeper.state import StateStore


class Queue:
    """The scheduler calls lifecycle makes, answered in memory. ``outcome(spec)`` plays the
    data job: it returns ("done", None) or ("failed", reason), recorded as the data job's own
    ``stage commit``/``stage fail`` would be, shortly after the submission."""

    def __init__(self, store: StateStore, outcome):
        self.store, self.outcome = store, outcome
        self.submitted: list = []
        self.cancelled: list[tuple[list[str], str | None]] = []
        self.annotated: list[tuple[list[str], str]] = []
        self.ended: dict[str, JobState] = {}
        self.stray: list[str] = []
        self.delay = 0.2  # 0: the data job ends before submit returns its id

    def submit(self, spec) -> str:
        job_id = str(1000 + len(self.submitted))
        self.submitted.append(spec)
        chain_id = Path(spec.script_path).parent.name
        key = Path(spec.script_path).stem
        state, reason = self.outcome(spec)

        def finish():
            time.sleep(self.delay)
            if state == "done":
                for row in chains.staged_files(self.store, chain_id, key):
                    chains.record_staged(self.store, chain_id, row["path"], job_key=key,
                                         line=row["line"], source=row["source"], size=1000,
                                         checksum="sha256:x", owner_uid=1000, owner_gid=1000)
                chains.set_jobs_state(self.store, chain_id, [key], chains.JOB_DONE)
            elif state == "failed":
                chains.set_jobs_state(self.store, chain_id, [key], chains.JOB_FAILED, reason)
            self.ended[job_id] = JobState.COMPLETED if state == "done" else JobState.FAILED

        if self.delay:
            threading.Thread(target=finish, daemon=True).start()
        else:
            finish()
        return job_id

    def lookup(self, job_ids, *, missing_ok=False):
        return {j: JobRecord(job_id=j, state=self.ended.get(j, JobState.RUNNING),
                             native_state="X") for j in job_ids}

    def cancel(self, job_ids, reason=None):
        self.cancelled.append((list(job_ids), reason))

    def annotate(self, job_ids, reason):
        self.annotated.append((list(job_ids), reason))
        return True

    def queued_from(self, folder):
        return list(self.stray)


@pytest.fixture
def site(tmp_path, monkeypatch):
    (tmp_path / "scratch").mkdir()
    config = parse_config(f'[storage]\nbackend = "local"\nscratch_root = "{tmp_path}/scratch"\n'
                          f'store_root = "{tmp_path}/store"\n'
                          f'[state]\ndatabase = "{tmp_path}/state/state.db"\n'
                          '[burst_buffer]\nstage_in_timeout = 30\nstage_out_timeout = 30\n')
    store = records.open_records(chains.open_records(StateStore(config.state.database)))
    monkeypatch.setattr(lifecycle, "job_facts",
                        lambda job_id, config: lifecycle.JobFacts(job_id, "run", str(tmp_path)))
    monkeypatch.setattr(lifecycle, "RECORD_POLL", 0.05)
    monkeypatch.setattr(lifecycle, "SCHEDULER_POLL", 0.2)
    monkeypatch.setattr(os, "chown", lambda *a: None)  # the tests do not run as root
    return config, store, tmp_path


def slurm_script(path: Path, text: str) -> str:
    """A script as slurmctld saves it: with the C string's NUL at the end."""
    path.write_bytes(text.encode() + b"\0")
    return str(path)


def job_script(tmp_path: Path) -> str:
    return slurm_script(tmp_path / "script", f"""#!/bin/bash
#STAGEIN ftp://h/a {tmp_path}/scratch/a
#STAGEOUT {tmp_path}/scratch/b ftp://h/b
true
""")


def test_job_process_counts_the_steps_and_refuses_a_bad_line_with_its_number(site):
    config, _, tmp_path = site
    assert lifecycle.job_process(config, job_script(tmp_path)) == 2
    bad = slurm_script(tmp_path / "bad", "#!/bin/bash\n#SBATCH -N1\n#STAGEIN gopher://h/a "
                                         f"{tmp_path}/scratch/a\n")
    with pytest.raises(lifecycle.StageFailed, match=r"^script:3: .*gopher"):
        lifecycle.job_process(config, bad)


def test_a_fifo_is_refused_not_read(site):
    config, _, tmp_path = site
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(Exception, match="not a regular file"):
        lifecycle.job_process(config, str(tmp_path / "fifo"))


def test_data_in_submits_as_the_owner_waits_and_writes_the_env_and_the_pool_bytes(site):
    config, store, tmp_path = site
    queue = Queue(store, lambda spec: ("done", None))
    lifecycle.setup(config, store, "77", 1000, 1000, "scratch", 5 << 20)
    chain_id = lifecycle.data_in(config, store, "77", job_script(tmp_path), scheduler=queue)
    (spec,) = queue.submitted
    assert spec.queue == "dataxfer" and spec.extra_args == ("--uid=1000", "--gid=1000")
    assert spec.job_name == "run.stage-in"
    env = (lifecycle.state_dir(config) / "77.env").read_text().splitlines()
    assert env == [f"SCRATCHKEEPER_CHAIN={chain_id}", "SCRATCHKEEPER_STAGED_COUNT=1",
                   f"SCRATCHKEEPER_STAGED_1={tmp_path}/scratch/a"]
    row = records.job(store, "77")
    assert row["stage"] == records.STAGED_IN and row["staged_bytes"] == 1000
    assert row["data_in_started"] <= row["data_in_ended"]
    assert chains.chain_of_job(store, "77") == chain_id  # the job is its chain's compute job
    assert (lifecycle.state_dir(config) / "held-bytes").read_text() == "1000\n"
    assert lifecycle.real_size(store, "77") == 5 << 20  # never below what it reserved

    # run again (a restart): the same chain, nothing submitted twice
    assert lifecycle.data_in(config, store, "77", job_script(tmp_path),
                             scheduler=queue) == chain_id
    assert len(queue.submitted) == 1


def test_a_data_job_that_records_its_outcome_before_its_id_is_recorded_keeps_it(site):
    """Unheld, a stage-in data job can run and commit before data_in, niced on a busy head
    node, records its id (seen under 200 jobs a minute): the outcome must stay, or data_in
    waits for it until its timeout."""
    config, store, tmp_path = site
    queue = Queue(store, lambda spec: ("done", None))
    queue.delay = 0
    lifecycle.setup(config, store, "76", 1000, 1000, "", 0)
    chain_id = lifecycle.data_in(config, store, "76", job_script(tmp_path), scheduler=queue,
                                 timeout=10)
    (row,) = [r for r in chains.chain_jobs(store, chain_id) if r["role"] == "stage-in"]
    assert row["job_id"] == "1000" and row["state"] == chains.JOB_DONE
    assert records.job(store, "76")["stage"] == records.STAGED_IN


class RecordsWhileAsked(Queue):
    """The data job records its failure and exits while data_in asks the scheduler about it:
    data_in's look at the records came just before, the scheduler's answer is FAILED."""

    def __init__(self, store):
        super().__init__(store, lambda spec: ("running", None))
        self.delay = 0

    def lookup(self, job_ids, *, missing_ok=False):
        for spec in self.submitted:
            chains.set_jobs_state(self.store, Path(spec.script_path).parent.name,
                                  [Path(spec.script_path).stem], chains.JOB_FAILED,
                                  "stage-in failed: script:2: 550 no such file")
        return {j: JobRecord(job_id=j, state=JobState.FAILED, native_state="FAILED")
                for j in job_ids}


def test_a_failure_recorded_as_the_scheduler_says_the_job_ended_is_told_in_its_own_words(site):
    """Seen in a full run: the job's record of why it failed (the script's line, the server's
    550) came between data_in's look and the scheduler's answer, and data_in said only that the
    job had ended FAILED."""
    config, store, tmp_path = site
    lifecycle.setup(config, store, "75", 1000, 1000, "", 0)
    with pytest.raises(lifecycle.StageFailed) as failed:
        lifecycle.data_in(config, store, "75", job_script(tmp_path),
                          scheduler=RecordsWhileAsked(store), timeout=10)
    assert "script:2: 550 no such file" in str(failed.value)
    assert "ended" not in str(failed.value)


def test_a_data_job_submitted_but_not_recorded_is_cancelled_before_it_is_submitted_again(site):
    config, store, tmp_path = site
    queue = Queue(store, lambda spec: ("done", None))
    lifecycle.setup(config, store, "78", 1000, 1000, "", 0)
    queue.stray = ["555"]
    lifecycle.data_in(config, store, "78", job_script(tmp_path), scheduler=queue)
    assert queue.cancelled and queue.cancelled[0][0] == ["555"]
    assert len(queue.submitted) == 1


@pytest.mark.parametrize("policy", ["cancel", "hold"])
def test_a_failed_stage_in_fails_data_in_with_the_reason_and_ends_or_keeps_the_job(site,
                                                                                  policy):
    config, store, tmp_path = site
    import dataclasses

    config = dataclasses.replace(config, burst_buffer=dataclasses.replace(
        config.burst_buffer, stage_in_failure=policy))
    queue = Queue(store, lambda spec: ("failed", "script:2: 550 no such file"))
    lifecycle.setup(config, store, "79", 1000, 1000, "", 0)
    with pytest.raises(lifecycle.StageFailed, match="stage-in failed: .*550 no such file"):
        lifecycle.data_in(config, store, "79", job_script(tmp_path), scheduler=queue)
    row = records.job(store, "79")
    assert row["stage"] == records.STAGE_IN_FAILED
    # never cancelled from inside data_in (that races Slurm's teardown): the reason written,
    # and with "cancel" the job marked for the ender, which cancels it after the teardown
    assert queue.cancelled == [] and "550 no such file" in queue.annotated[0][1]
    assert (row["end_after_teardown"] is not None) == (policy == "cancel")


def test_a_data_job_that_ends_without_recording_is_a_failure_too(site):
    config, store, tmp_path = site
    queue = Queue(store, lambda spec: ("vanished", None))
    lifecycle.setup(config, store, "80", 1000, 1000, "", 0)
    with pytest.raises(lifecycle.StageFailed, match="stage-in job 1000 ended"):
        lifecycle.data_in(config, store, "80", job_script(tmp_path), scheduler=queue)


def test_data_out_runs_the_stage_out_and_a_failure_is_recorded_not_raised(site):
    config, store, tmp_path = site
    outcomes = iter([("done", None), ("failed", "script:3: 405")])
    queue = Queue(store, lambda spec: next(outcomes))
    lifecycle.setup(config, store, "81", 1000, 1000, "", 0)
    chain_id = lifecycle.data_in(config, store, "81", job_script(tmp_path), scheduler=queue)
    said = lifecycle.data_out(config, store, "81", scheduler=queue)
    assert said.startswith("stage-out FAILED, results left on scratch:") and "405" in said
    assert records.job(store, "81")["stage"] == records.STAGE_OUT_FAILED
    assert chains.chain(store, chain_id)["state"] == chains.STAGE_OUT_FAILED
    assert queue.submitted[-1].job_name == "run.stage-out"


def test_teardown_cancels_the_data_jobs_still_running_and_removes_the_env(site):
    config, store, tmp_path = site
    queue = Queue(store, lambda spec: ("done", None))
    lifecycle.setup(config, store, "82", 1000, 1000, "", 0)
    chain_id = lifecycle.data_in(config, store, "82", job_script(tmp_path), scheduler=queue)
    # a stage-out left running (the job was cancelled during data_out)
    chains.set_job_submitted(store, chain_id, "stage-out", "2000")
    cancelled = lifecycle.teardown(config, store, "82", True, scheduler=queue)
    assert cancelled == ["2000"]
    assert "cancelled" in queue.cancelled[-1][1]
    assert not (lifecycle.state_dir(config) / "82.env").exists()
    assert records.job(store, "82")["stage"] == records.TORN_DOWN
    assert (lifecycle.state_dir(config) / "held-bytes").read_text() == "0\n"


def test_stages_refuse_a_job_id_that_is_not_one(site):
    config, store, _ = site
    with pytest.raises(Exception, match="expected a Slurm job id"):
        lifecycle.setup(config, store, "1; rm -rf /", 1000, 1000, "", 0)
    with pytest.raises(lifecycle.StageFailed, match="not set up"):
        lifecycle.data_in(config, store, "999", "/nonexistent")
