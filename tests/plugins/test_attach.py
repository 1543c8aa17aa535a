"""`scratchkeeper spank chain` against a scripted Slurm: the commands, the records, the crashes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scratchkeeper.chain_service.attach import (
    CHAINED,
    FAILED,
    HELD_FOR_CHAINING,
    PENDING,
    SUBMIT_ENV,
    HandedOver,
    chain_pending,
    hand_over,
    held_jobs,
)
from scratchkeeper.config import load_config
from scratchkeeper.errors import CommandError, InputError, SchedulerError
from scratchkeeper.planner import records
from scratchkeeper.runner import CommandResult, CommandRunner
from scratchkeeper.schedulers import slurm as slurm_backend
from scratchkeeper.state import StateStore
from scripted_runner import ScriptedRunner

JOB = "500"
SCRIPT = "#!/bin/bash\n#SBATCH --job-name=sim\n./simulate\n"
COMMENT = (f"{PENDING}\nstage-in ftp://h:2811/src/in.dat:/scratch/u/in.dat\n"
           "stage-out /scratch/u/out.dat:ftp://h:2811/sink/out.dat")


class FakeSlurm(CommandRunner):
    """squeue/scontrol/sbatch/scancel answered from memory; every argv recorded.

    The job's dependency is kept as Slurm keeps it: ``scontrol update Dependency=`` replaces
    it, and squeue shows each entry with its state (``failed`` once the job it waits for with
    ``afterok`` was cancelled). ``kill_after(argv)`` true: the service dies (SIGKILL: no
    handler runs) right after that command took effect."""

    def __init__(self, comment: str = COMMENT, script: str = SCRIPT, priority: int = 0,
                 fail_sbatch_at: int | None = None, name: str = "sim", dependency: str = "",
                 kill_after=None, cancelled: set[str] | None = None):
        super().__init__()
        self.name = name
        self.comment, self.script, self.priority = comment, script, priority
        self.fail_sbatch_at = fail_sbatch_at
        self.dependency, self.kill_after = dependency, kill_after
        self.cancelled: set[str] = set() if cancelled is None else cancelled
        self.recorded: list[tuple[str, ...]] = []
        self.next_id = 600
        self.queued: dict[str, str] = {JOB: "/scratch/u/job.sh"}  # job id -> batch script
        self.submit_time: int | None = None  # squeue --json's, when set

    def shown_dependency(self) -> str:
        entries, separator = slurm_backend.parse_dependency(self.dependency)
        return separator.join(
            f"{e.text}({'failed' if e.kind == 'afterok' and e.job_id in self.cancelled else 'unfulfilled'})"
            for e in entries)

    def run(self, argv, **kwargs):
        argv = tuple(str(a) for a in argv)
        self.recorded.append(argv)
        out = self._answer(argv)
        if self.kill_after is not None and self.kill_after(argv):
            raise KeyboardInterrupt  # killed: the command took effect, nothing after it ran
        return self._keep(CommandResult(argv, 0, out, "", 0.0))

    def _answer(self, argv) -> str:
        out = ""
        if argv[:2] == ("squeue", "--noheader"):  # the queue's jobs with their scripts
            out = "".join(f"{job_id}|{script}\n" for job_id, script in self.queued.items())
        elif argv[0] == "squeue":
            out = json.dumps({"jobs": [{
                "job_id": int(JOB), "job_state": "PENDING", "priority": self.priority,
                "user_id": 0, "group_id": 0, "current_working_directory": "/scratch/u",
                "command": "/scratch/u/job.sh", "dependency": self.shown_dependency(),
                "admin_comment": self.comment, "name": self.name,
                **({"submit_time": self.submit_time} if self.submit_time else {}),
            }, {"job_id": 501, "job_state": "PENDING", "priority": 0, "admin_comment": "",
                "user_id": 0}]})
        elif argv[:3] == ("scontrol", "write", "batch_script"):
            out = self.script
        elif argv[0] == "sbatch":
            count = sum(1 for a in self.recorded if a[0] == "sbatch")
            if count == self.fail_sbatch_at:
                raise CommandError("sbatch failed (exit 1): sbatch: error: Batch job submission "
                                   "failed: Invalid qos specification", argv=list(argv),
                                   returncode=1, stderr="Invalid qos specification")
            self.next_id += 1
            out = f"{self.next_id}\n"
            self.queued[str(self.next_id)] = argv[-1]
        elif argv[:3] == ("scontrol", "update", f"JobId={JOB}") and argv[3].startswith("AdminComment="):
            self.comment = argv[3][len("AdminComment="):]
        elif argv[:3] == ("scontrol", "update", f"JobId={JOB}") and argv[3].startswith("Dependency="):
            self.dependency = argv[3][len("Dependency="):]
        elif argv == ("scontrol", "release", JOB):
            self.priority = 1
        elif argv[0] == "scancel":
            self.cancelled.update(argv[1:])
            for job_id in argv[1:]:
                self.queued.pop(job_id, None)
        return out

    def commands(self, *prefix):
        return [a for a in self.recorded if a[:len(prefix)] == prefix]


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text(f'[scheduler]\nkind = "slurm"\n[state]\ndatabase = "{tmp_path}/state.db"\n'
                    f'[storage]\nbackend = "local"\nscratch_root = "/scratch"\n'
                    f'store_root = "{tmp_path}/store"\n')
    return load_config(path)


@pytest.fixture
def store(config):
    return records.open_records(StateStore(config.state.database))


@pytest.fixture
def slurm(use_runner):
    return lambda **kwargs: use_runner(FakeSlurm(**kwargs))


def test_held_job_gets_the_planners_data_jobs_then_is_released(config, store, slurm):
    fake = slurm()
    (outcome,) = chain_pending(config, store)
    assert outcome.error is None and outcome.data_jobs == {"stage-in": "601", "stage-out": "602"}
    stage_in, stage_out = fake.commands("sbatch")
    assert "--partition=dataxfer" in stage_in and "--hold" in stage_in
    assert "--job-name=sim.stage-in" in stage_in
    assert "--dependency=afterany:500,afterok:601" in stage_out
    assert fake.commands("scontrol", "update", f"JobId={JOB}", "Dependency=afterok:601")
    releases = fake.commands("scontrol", "release") + fake.commands("scontrol", "release", "601")
    assert ("scontrol", "release", JOB) in releases
    # the order that makes a crash recoverable: data jobs, dependency, mark, release
    order = [fake.recorded.index(a) for a in (
        stage_in, stage_out,
        fake.commands("scontrol", "update", f"JobId={JOB}", "Dependency=afterok:601")[0],
        ("scontrol", "release", JOB))]
    assert order == sorted(order)
    assert fake.comment.startswith(f"{CHAINED} {outcome.chain_id}")
    rows = {r["role"]: r for r in records.chain_jobs(store, outcome.chain_id)}
    assert rows["compute"]["job_id"] == JOB and rows["stage-in"]["job_id"] == "601"
    (staged,) = records.staged_files(store, outcome.chain_id)
    assert staged["path"] == "/scratch/u/in.dat"
    assert staged["source"] == "ftp://h:2811/src/in.dat" and staged["line"] == 4
    assert records.chain(store, outcome.chain_id)["state"] == records.SUBMITTED
    assert Path(config.state.database).parent.joinpath(
        "spool", outcome.chain_id, "stage-in.sh").exists()


def test_a_failed_submission_cancels_the_data_jobs_and_leaves_the_job_held(config, store, slurm):
    fake = slurm(fail_sbatch_at=2)
    (outcome,) = chain_pending(config, store)
    assert "Invalid qos" in outcome.error
    assert fake.commands("scancel", "601")
    assert not fake.commands("scontrol", "release", JOB)
    assert fake.comment == COMMENT  # still pending: the next sweep tries again
    chain_id = records.chain_of_job(store, JOB)
    assert records.chain(store, chain_id)["state"] == records.SUBMIT_FAILED


def test_a_chain_left_half_submitted_is_undone_and_planned_again(config, store, slurm):
    slurm(fail_sbatch_at=2)
    chain_pending(config, store)
    first = records.chain_of_job(store, JOB)
    fake = slurm()
    (outcome,) = chain_pending(config, store)
    assert outcome.error is None and outcome.chain_id != first
    assert fake.commands("scancel", "601")  # what the first attempt had submitted
    assert ("scontrol", "release", JOB) in fake.recorded


def _other_jobs_chain(store, role: str, created: float) -> str:
    """A chain of another job that had JOB's id (Slurm's state reset since), with JOB as its
    ``role`` job and 601 (now another job) as its stage-in, left half-submitted."""
    with store.transaction() as conn:
        conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                     ("sk-old", "/home/u/old.sh", "/home/u", "slurm", 0, records.SUBMITTING,
                      "", created, created, "{}"))
        for position, (key, key_role, job_id) in enumerate(
                [("stage-in", "stage-in", "601"), (role, role, JOB)]):
            conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, "
                         "job_id, state, updated) VALUES (?,?,?,?,?,?,?,?)",
                         ("sk-old", key, key_role, "batch", position, job_id, "submitted",
                          created))
    return "sk-old"


@pytest.mark.parametrize("role", ["stage-out", "compute"])
def test_a_chain_of_an_earlier_job_with_the_same_id_is_left_alone(config, store, slurm, role):
    """Slurm handed JOB's id out again (its state reset): the old chain, half-submitted, holds
    the id as a data job's, or as its compute job made before JOB was submitted. Undoing it
    cancelled the jobs that now have its ids, the user's own among them (seen in a
    fresh-clone run after the local cluster ran 24.11 and then 22.05 on one state database)."""
    fake = slurm()
    fake.submit_time = 1_800_000_000
    old = _other_jobs_chain(store, role, fake.submit_time - 3600)
    (outcome,) = chain_pending(config, store)
    assert outcome.error is None and outcome.chain_id != old
    assert not fake.commands("scancel")  # neither 601 nor the user's job
    assert records.chain(store, old)["state"] == records.SUBMITTING
    assert ("scontrol", "release", JOB) in fake.recorded


def test_a_data_job_submitted_but_not_recorded_before_a_kill_is_cancelled(config, store,
                                                                          slurm, monkeypatch):
    """Killed between the held stage-in's sbatch and its record: the next attempt finds it by
    its script in the chain's spool folder and cancels it (else it stays held for ever)."""
    fake = slurm()
    recorded = records.set_job_submitted

    def killed(store_, chain_id, key, job_id):
        if key != "compute":
            raise KeyboardInterrupt  # the service dies right after the sbatch
        return recorded(store_, chain_id, key, job_id)

    monkeypatch.setattr(records, "set_job_submitted", killed)
    with pytest.raises(KeyboardInterrupt):
        chain_pending(config, store)
    monkeypatch.setattr(records, "set_job_submitted", recorded)
    first = records.chain_of_job(store, JOB)
    assert fake.commands("sbatch") and "601" in fake.queued
    fake.queued["777"] = "/elsewhere/spool/stage-in.sh"  # another chain's job: left alone
    (outcome,) = chain_pending(config, store)
    assert outcome.error is None and outcome.chain_id != first
    (cancel,) = fake.commands("scancel")
    assert cancel == ("scancel", "601")
    assert ("scontrol", "release", JOB) in fake.recorded


def test_a_submitted_chain_is_only_marked_and_released(config, store, slurm):
    slurm()
    (first,) = chain_pending(config, store)
    fake = slurm(comment=f"{CHAINED} {first.chain_id}", priority=0)
    (again,) = chain_pending(config, store)
    assert again.chain_id == first.chain_id and not fake.commands("sbatch")
    assert ("scontrol", "release", JOB) in fake.recorded


def test_a_released_chained_job_is_left_alone(config, store, slurm):
    fake = slurm(comment=f"{CHAINED} sk0000000000", priority=4294)
    assert chain_pending(config, store) == []
    assert [a[0] for a in fake.recorded] == ["squeue"]


def test_an_unplannable_request_cancels_the_job_with_the_reason(config, store, slurm):
    fake = slurm(script="#!/bin/bash\n#STAGEIN -retry lots\n./simulate\n")
    (outcome,) = chain_pending(config, store)
    assert "retry" in outcome.error
    assert ("scancel", JOB) in fake.recorded
    assert fake.comment.startswith(FAILED) and "retry" in fake.comment
    assert not fake.commands("sbatch")


def test_data_jobs_take_slurms_job_name_made_safe(config, store, slurm):
    """A --wrap job has no script path and any name: the data jobs still get a safe name."""
    fake = slurm(script="#!/bin/sh\n# This script was created by sbatch --wrap.\n\ntrue\n",
                 name="my run (v2)")
    (outcome,) = chain_pending(config, store)
    assert outcome.error is None
    assert "--job-name=my_run__v2_.stage-in" in fake.commands("sbatch")[0]


class HandOverSlurm(CommandRunner):
    """sbatch gives job 700; squeue shows it with ``comment``; argv and environment recorded."""

    def __init__(self, comment: str):
        super().__init__()
        self.comment = comment
        self.recorded: list[tuple[tuple[str, ...], dict]] = []

    def run(self, argv, **kwargs):
        argv = tuple(str(a) for a in argv)
        self.recorded.append((argv, dict(kwargs.get("env") or {})))
        out = ""
        if argv[0] == "sbatch":
            out = "700\n"
        elif argv[0] == "squeue":
            out = json.dumps({"jobs": [{"job_id": 699, "admin_comment": PENDING},
                                       {"job_id": 700, "admin_comment": self.comment}]})
        return self._keep(CommandResult(argv, 0, out, "", 0.0))


@pytest.fixture
def handing_over(use_runner):
    return lambda comment: use_runner(HandOverSlurm(comment))


@pytest.mark.parametrize("comment", [f"{PENDING}\ndirectives", f"{CHAINED} sk123\n"])
def test_hand_over_submits_with_plain_sbatch_and_checks_the_hold(handing_over, comment):
    fake = handing_over(comment)
    handed = hand_over("job.sh", load_config(None))
    assert handed == HandedOver("700", HELD_FOR_CHAINING)
    (sbatch, env), (squeue, _) = fake.recorded
    assert sbatch == ("sbatch", "--parsable", str(Path("job.sh").resolve()))
    assert env == {SUBMIT_ENV: "chain-service"}
    assert squeue == ("squeue", "--json", "-j", "700")


def test_hand_over_cancels_a_job_the_plugin_did_not_hold(handing_over):
    fake = handing_over("")
    with pytest.raises(SchedulerError, match="job 700 was neither held for chaining nor taken "
                                             "by Slurm's burst buffer, so it was cancelled"
                                             ".*job_submit.lua"):
        hand_over("job.sh", load_config(None))
    assert fake.recorded[-1][0] == ("scancel", "700")


def test_hand_over_reports_a_refusal_by_a_faster_chain_service(handing_over):
    fake = handing_over(f"{FAILED} line 3: unknown scheme 'gopher'")
    with pytest.raises(InputError, match="job 700: the chain service refused it: line 3: "
                                         "unknown scheme 'gopher'"):
        hand_over("job.sh", load_config(None))
    assert all(argv[0] != "scancel" for argv, _ in fake.recorded)


@pytest.mark.parametrize("extra,message", [
    (["--scheduler", "pbs"], 'submit_via = "chain-service" works with Slurm only'),
    (["--input", "data.bin"], "--input cannot be handed to the chain service"),
])
def test_submit_via_the_chain_service_refuses_what_it_cannot_hand_over(tmp_path, handing_over,
                                                                      capsys, extra, message):
    from scratchkeeper.cli import main
    fake = handing_over(PENDING)
    config = tmp_path / "site.toml"
    config.write_text('[scheduler]\nsubmit_via = "chain-service"\n')
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#STAGEIN ftp://h:2811/a /scratch/a\ntrue\n")
    assert main(["-c", str(config), "submit", str(script), *extra]) == 2
    assert message in capsys.readouterr().err
    assert fake.recorded == []  # nothing submitted


def test_submit_via_the_chain_service_checks_the_script_before_sbatch(tmp_path, handing_over,
                                                                     capsys):
    from scratchkeeper.cli import main
    fake = handing_over(PENDING)
    config = tmp_path / "site.toml"
    config.write_text('[scheduler]\nsubmit_via = "chain-service"\n')
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#STAGEIN gopher://h/a /scratch/a\ntrue\n")
    assert main(["-c", str(config), "submit", str(script)]) == 2
    assert f"{script}:2:" in capsys.readouterr().err
    assert fake.recorded == []
    script.write_text("#!/bin/bash\n#STAGEIN ftp://h:2811/a /scratch/a\ntrue\n")
    assert main(["-c", str(config), "submit", str(script)]) == 0
    assert "job 700: held until the chain service has chained its data jobs" in \
        capsys.readouterr().out
    assert [argv[0] for argv, _ in fake.recorded] == ["sbatch", "squeue"]


def test_a_job_whose_chain_already_ended_is_not_planned_again(config, store, slurm):
    """The sweep ended the chain (its stage-in was cancelled) while the job was still held,
    and cancelling the job failed: the next sweep ends the job, it does not stage again."""
    slurm()
    (first,) = chain_pending(config, store)
    records.set_chain_state(store, first.chain_id, records.STAGE_IN_FAILED,
                            "stage-in job 601 ended CANCELLED, exit code 0:15 (cancelled)")
    fake = slurm(comment=f"{CHAINED} {first.chain_id}", priority=0)
    (again,) = chain_pending(config, store)
    assert again.chain_id == first.chain_id and "ended CANCELLED" in again.error
    assert not fake.commands("sbatch") and ("scancel", JOB) in fake.recorded
    assert fake.comment.startswith(FAILED)


def test_one_jobs_unexpected_failure_leaves_it_held_and_the_sweep_goes_on(config, store, slurm,
                                                                         monkeypatch):
    from scratchkeeper.chain_service import attach

    real = attach.chain_job
    calls = []

    def flaky(job, *args, **kwargs):
        calls.append(job.job_id)
        if len(calls) == 1:
            raise ModuleNotFoundError("No module named 'scratchkeeper.job_templates'")
        return real(job, *args, **kwargs)
    monkeypatch.setattr(attach, "chain_job", flaky)
    fake = slurm()
    (outcome,) = chain_pending(config, store)
    assert "internal error" in outcome.error and not fake.commands("scancel")
    (outcome,) = chain_pending(config, store)  # the next sweep
    assert outcome.error is None and ("scontrol", "release", JOB) in fake.recorded


def test_chains_are_ended_even_when_chaining_held_jobs_fails(config, store, monkeypatch, capsys):
    """One sweep of the service: a failure to chain held jobs must not keep the chains whose
    stage-in ended from being ended (their jobs would wait for ever), and is still reported."""
    from scratchkeeper.chain_service import sweep
    from scratchkeeper.chain_service.settle import ChainEnd

    def no_queue(*args, **kwargs):
        raise SchedulerError("squeue: Socket timed out on send/recv operation")
    ended = []

    def settle(config, store, job_ids=None):
        ended.append(job_ids)
        return [ChainEnd("sk1", "stage-in job 7 ended TIMEOUT, exit code 0:15", ["8"])]
    monkeypatch.setattr(sweep, "chain_pending", no_queue)
    monkeypatch.setattr(sweep, "settle_chains", settle)
    with pytest.raises(SchedulerError, match="Socket timed out"):
        sweep.sweep(config, store, None)
    assert ended == [None]
    assert "chain sk1: stage-in job 7 ended TIMEOUT, exit code 0:15; cancelled 8" in \
        capsys.readouterr().out


# -- the chain service killed at each step of chaining (issue 46, item 6) -------------------------
def _is_update(field: str):
    return lambda argv: argv[:3] == ("scontrol", "update", f"JobId={JOB}") and \
        argv[3].startswith(field + "=")


#: each step of a chaining, in order: the service dies right after it took effect
KILLED_AFTER = {
    "stage-in submitted": lambda argv: argv[0] == "sbatch" and "--hold" in argv,
    "stage-out submitted": lambda argv: argv[0] == "sbatch" and "--hold" not in argv,
    "dependency set": _is_update("Dependency"),
    "stage-in released": lambda argv: argv[:2] == ("scontrol", "release") and argv[2] != JOB,
    "marked chained": _is_update("AdminComment"),
    "job released": lambda argv: argv == ("scontrol", "release", JOB),
}


def live_stage_ins(store, fake) -> set[str]:
    chain_id = records.chain_of_job(store, JOB)
    return {r["job_id"] for r in records.chain_jobs(store, chain_id)
            if r["role"] == "stage-in" and r["job_id"] not in fake.cancelled}


@pytest.mark.parametrize("step", list(KILLED_AFTER))
def test_a_service_killed_at_any_step_leaves_the_job_depending_on_live_data_jobs_only(
        config, store, slurm, step):
    """Killed after it set the dependency, the next sweep cancels that chaining's data jobs
    and chains the job again: the new dependency must replace the old one, not be appended to
    it (``afterok:601(failed),afterok:603`` is never met: the job pends for ever)."""
    fake = slurm(kill_after=KILLED_AFTER[step])
    with pytest.raises(KeyboardInterrupt):
        chain_pending(config, store)
    fake.kill_after = None
    chain_pending(config, store)  # the restarted service's first sweep
    assert fake.priority != 0  # released
    entries, _ = slurm_backend.parse_dependency(fake.dependency)
    assert {e.job_id for e in entries} == live_stage_ins(store, fake), fake.dependency
    assert "failed" not in fake.shown_dependency()


def test_the_owners_own_dependency_is_kept_through_a_killed_chaining(config, store, slurm):
    """What the owner asked (sbatch -d) stays, with squeue's state words dropped; only the
    data jobs of the abandoned chaining go."""
    fake = slurm(dependency="afterany:77,singleton", kill_after=KILLED_AFTER["dependency set"])
    with pytest.raises(KeyboardInterrupt):
        chain_pending(config, store)
    assert fake.dependency == "afterany:77,singleton,afterok:601"
    fake.kill_after = None
    chain_pending(config, store)
    assert fake.dependency == "afterany:77,singleton,afterok:603"


def test_a_dependency_on_another_chains_data_job_is_the_owners(config, store, slurm):
    """A job may wait for another chain's stage-out: that data job is not this job's."""
    with store.transaction() as conn:
        conn.execute("INSERT INTO chains VALUES ('skOTHER', '/s/o.sh', '/s', 'slurm', 0, "
                     "'submitted', '', 1, 1, '{}')")
        for position, (role, job_id) in enumerate([("compute", "400"), ("stage-out", "77")]):
            conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, job_id,"
                         " state, updated) VALUES ('skOTHER', ?, ?, 'q', ?, ?, 'submitted', 1)",
                         (role, role, position, job_id))
    fake = slurm(dependency="afterok:77")
    (outcome,) = chain_pending(config, store)
    assert outcome.error is None and fake.dependency == "afterok:77,afterok:601"


def test_an_any_of_dependency_cannot_take_the_stage_in_and_the_job_is_refused(config, store,
                                                                            slurm):
    fake = slurm(dependency="afterany:77?afterany:78")
    (outcome,) = chain_pending(config, store)
    assert "met by any one of its jobs ('?')" in outcome.error
    assert ("scancel", JOB) in fake.recorded and not fake.commands("sbatch")
    assert fake.comment.startswith(FAILED)


def stranded_by_the_old_append(config, store, slurm):
    """The state the chain service left before the fix: killed after it set the dependency,
    then chained again with the new afterok appended to the old one."""
    fake = slurm(kill_after=KILLED_AFTER["dependency set"])
    with pytest.raises(KeyboardInterrupt):
        chain_pending(config, store)
    fake.kill_after = None
    chain_pending(config, store)
    fake.dependency = "afterok:601,afterok:603"
    return fake


def test_backlog_shows_a_job_whose_dependency_names_an_abandoned_chainings_data_job(
        config, store, slurm):
    from scratchkeeper.planner.status import backlog

    fake = stranded_by_the_old_append(config, store, slurm)
    first, second = [row["chain_id"] for row in store.query(
        "SELECT chain_id FROM chains ORDER BY created, rowid")]
    report = backlog(store, config, held=[])
    (stranded,) = report.stranded
    assert (stranded["job_id"], stranded["chain_id"], stranded["dead"]) == (JOB, second, ["601"])
    assert f"stage-in job 601 of chain {first}, an abandoned chaining" in stranded["why"]
    assert "Slurm says failed" in stranded["why"]
    assert stranded["fix"] == f"scontrol update JobId={JOB} Dependency=afterok:603"
    fake.dependency = "afterok:603"
    assert backlog(store, config, held=[]).stranded == []


def test_status_backlog_prints_the_stranded_job_and_its_fix(config, store, slurm, capsys,
                                                           monkeypatch):
    from scratchkeeper.cli import main

    stranded_by_the_old_append(config, store, slurm)
    capsys.readouterr()
    monkeypatch.setattr("os.getuid", lambda: 0)
    assert main(["-c", str(config.source), "status", "--backlog"]) == 0
    out = capsys.readouterr().out
    assert "compute jobs waiting on a dead data job (never to start): 1" in out
    assert f"fix: scontrol update JobId={JOB} Dependency=afterok:603" in out


def test_slurms_dependency_text_is_read_as_it_prints_it():
    entries, separator = slurm_backend.parse_dependency(
        "afterok:979(failed),after:12+5(unfulfilled),afterany:123_*(unfulfilled),singleton")
    assert separator == ","
    assert [(e.kind, e.job_id, e.text, e.state) for e in entries] == [
        ("afterok", "979", "afterok:979", "failed"), ("after", "12", "after:12+5", "unfulfilled"),
        ("afterany", "123", "afterany:123_*", "unfulfilled"), ("singleton", "", "singleton", "")]
    assert slurm_backend.parse_dependency("(null)") == ([], ",")
    assert slurm_backend.format_dependency(
        slurm_backend.parse_dependency("afterok:1:2?afterany:3")[0], "?") == \
        "afterok:1?afterok:2?afterany:3"


# squeue --json as Slurm 24.11.5 printed it (tests/schedulers/data/24.11: job 4 was held by
# job_submit.lua there): 23.02 and later wrap the priority as {"set", "infinite", "number"}
SQUEUE_24_11 = Path(__file__).resolve().parents[1] / "schedulers" / "data" / "24.11" / "squeue.json"


@pytest.mark.parametrize("priority,listed", [
    ({"set": True, "infinite": False, "number": 0}, True),      # 24.11: marked, still held
    ({"set": True, "infinite": False, "number": 4294901759}, False),  # 24.11: released
    (0, True), (4294901759, False),                               # 22.05: a plain number
])
def test_a_chained_job_is_listed_until_it_is_released_in_each_releases_json(priority, listed):
    document = json.loads(SQUEUE_24_11.read_text())
    (job,) = [job for job in document["jobs"] if job["job_id"] == 4]
    assert job["admin_comment"].startswith("scratchkeeper:chain-pending")  # as captured
    assert job["priority"] == {"set": True, "infinite": False, "number": 0}
    job["admin_comment"] = "scratchkeeper:chained sk0123456789\ndirectives"
    job["priority"] = priority
    runner = ScriptedRunner([(("squeue",), CommandResult(("squeue",), 0, json.dumps(document),
                                                         "", 0.1))])
    found = [held.job_id for held in held_jobs(runner)]
    assert ("4" in found) is listed


def test_the_held_job_24_11_printed_is_found_with_its_owner_and_script():
    runner = ScriptedRunner([(("squeue",), CommandResult(("squeue",), 0, SQUEUE_24_11.read_text(),
                                                         "", 0.1))])
    (held,) = held_jobs(runner)
    assert (held.job_id, held.user_id, held.script_path) == ("4", 0, "/tmp/slurm2411/work/held.sh")
    assert held.chained is None and held.requests == ()
