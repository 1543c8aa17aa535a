"""What ``status`` says of chains (completed, re-chained) and what ``status --backlog`` shows,
on records built in a temporary state database and a scripted Slurm (no cluster)."""

from __future__ import annotations

import datetime
import json
import time

import pytest

from scratchkeeper.cli import main
from scratchkeeper.config import SiteConfig
from scratchkeeper.planner import records
from scratchkeeper.planner.status import backlog, chain_status, chain_summaries, resolve_chain
from scratchkeeper.state import StateStore
from scripted_runner import ScriptedRunner, result

NOW = time.time()


@pytest.fixture
def store(tmp_path):
    store = records.open_chain_ends(StateStore(tmp_path / "state.db"))
    records.open_staging(store)
    return store


def add_chain(store, chain_id, jobs, *, state=records.SUBMITTED, reason="", created=None,
              script="/home/a/job.sh", owner=1000):
    """A chain with ``jobs`` [(role, job id or None, recorded job state)]."""
    created = NOW - 600 if created is None else created
    with store.transaction() as conn:
        conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (chain_id, script, "/home/a", "slurm", owner, state, reason, created,
                      created + 1, "{}"))
        for position, (role, job_id, job_state) in enumerate(jobs):
            conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, "
                         "job_id, state, updated) VALUES (?,?,?,?,?,?,?,?)",
                         (chain_id, role, role, "dataxfer" if role != "compute" else "batch",
                          position, job_id, job_state, created))


def squeue(*jobs):
    """``squeue --json`` holding ``jobs`` [(id, native state, partition, name, submitted[,
    admin comment])]; a job with an admin comment is held (priority 0), as job_submit.lua
    leaves it."""
    return json.dumps({"jobs": [
        {"job_id": int(job[0]), "job_state": [job[1]], "partition": job[2], "name": job[3],
         "user_name": "alice", "user_id": 1000, "group_id": 1000,
         "submit_time": {"set": True, "number": int(job[4])},
         "state_reason": "JobHeldUser" if job[1] == "PENDING" else "None",
         "admin_comment": job[5] if len(job) > 5 else "",
         "priority": 0 if len(job) > 5 else 1}
        for job in jobs], "errors": []})


def sacct(*jobs):
    """``sacct --parsable2`` lines of ended ``jobs`` [(id, native state)]."""
    stamp = datetime.datetime.fromtimestamp(int(NOW - 500)).isoformat()
    return "".join(f"{job_id}|job|batch|alice|{state}|0:0|1|{stamp}|{stamp}|{stamp}|None\n"
                   for job_id, state in jobs)


def slurm(use_runner, queue: str, history: str = ""):
    def answer_squeue(argv):
        wanted = next((a[len("--jobs="):].split(",") for a in argv if a.startswith("--jobs=")),
                      None)
        if wanted is None:
            return result(argv, queue)
        jobs = [j for j in json.loads(queue)["jobs"] if str(j["job_id"]) in wanted]
        return result(argv, json.dumps({"jobs": jobs, "errors": []}))

    def answer_sacct(argv):
        wanted = argv[-1][len("--jobs="):].split(",")
        return result(argv, "".join(line + "\n" for line in history.splitlines()
                                    if line.split("|")[0] in wanted))

    return use_runner(ScriptedRunner([(("squeue",), answer_squeue),
                                      (("sacct",), answer_sacct)]))


def test_a_chain_whose_jobs_all_completed_is_listed_completed(store, use_runner):
    add_chain(store, "skdone", [("stage-in", "11", records.JOB_DONE),
                                ("compute", "12", records.JOB_SUBMITTED),
                                ("stage-out", "13", records.JOB_SUBMITTED)])
    add_chain(store, "skrun", [("stage-in", "21", records.JOB_DONE),
                               ("compute", "22", records.JOB_SUBMITTED)])
    slurm(use_runner, squeue(("22", "RUNNING", "batch", "job", NOW - 400)),
          sacct(("11", "COMPLETED"), ("12", "COMPLETED"), ("13", "COMPLETED")))
    config = SiteConfig()
    summaries = {c.chain_id: c for c in chain_summaries(
        store, config, records.recent_chains(store, None))}
    assert summaries["skdone"].state == "completed"
    assert summaries["skdone"].recorded_state == records.SUBMITTED  # what the record says
    assert summaries["skrun"].state == "running"
    assert chain_status(store, config, "skdone").state == "completed"


def test_the_list_keeps_the_recorded_states_when_the_scheduler_cannot_be_asked(store,
                                                                                 use_runner):
    from scratchkeeper.errors import CommandError

    add_chain(store, "sk1", [("stage-in", "11", records.JOB_SUBMITTED),
                             ("compute", "12", records.JOB_SUBMITTED)])
    down = CommandError("squeue: bad thing", argv=["squeue"], returncode=1, stderr="bad thing")
    use_runner(ScriptedRunner([(("squeue",), down)]))
    (summary,) = chain_summaries(store, SiteConfig(), records.recent_chains(store, None))
    assert summary.state == records.SUBMITTED and "scheduler unreachable" in summary.reason


def rechained(store):
    """The chain service killed mid-chain: its first chain of job 30 abandoned (its held
    stage-in 31 cancelled), the job chained again as skNEW, which completed."""
    add_chain(store, "skOLD", [("stage-in", "31", records.JOB_SUBMITTED),
                               ("compute", "30", records.JOB_SUBMITTED)],
              state=records.SUBMIT_FAILED, reason="chaining interrupted; planned again",
              created=NOW - 900)
    add_chain(store, "skNEW", [("stage-in", "32", records.JOB_DONE),
                               ("compute", "30", records.JOB_SUBMITTED)], created=NOW - 800)


def test_a_rechained_chain_shows_the_state_of_the_chain_that_replaced_it(store, use_runner,
                                                                          capsys, tmp_path,
                                                                          monkeypatch):
    rechained(store)
    slurm(use_runner, squeue(),
          sacct(("30", "COMPLETED"), ("31", "CANCELLED"), ("32", "COMPLETED")))
    config = SiteConfig()
    assert records.replacements(store, ["skOLD", "skNEW"]) == {"skOLD": "skNEW"}
    # the job id names the chain that ran it
    assert resolve_chain(store, "30") == "skNEW"
    old = chain_status(store, config, "skOLD")
    assert (old.state, old.replaced_by, old.recorded_state) == \
        ("completed", "skNEW", records.SUBMIT_FAILED)
    assert "replaced by chain skNEW" in old.reason
    summaries = {c.chain_id: c for c in chain_summaries(
        store, config, records.recent_chains(store, None))}
    assert (summaries["skOLD"].state, summaries["skOLD"].replaced_by) == ("completed", "skNEW")
    assert (summaries["skNEW"].state, summaries["skNEW"].replaced_by) == ("completed", None)
    # and so the command says, list and single
    config_path = tmp_path / "site.toml"
    config_path.write_text(f'[state]\ndatabase = "{store.path}"\n')
    monkeypatch.setattr("os.getuid", lambda: 0)
    assert main(["-c", str(config_path), "status"]) == 0
    listed = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert listed["skOLD"].split()[3] == "completed" and "(replaced by skNEW)" in listed["skOLD"]
    assert listed["skNEW"].split()[3] == "completed"
    assert main(["-c", str(config_path), "status", "skOLD"]) == 0
    assert capsys.readouterr().out.startswith("chain skOLD: completed (replaced by skNEW)")
    assert main(["-c", str(config_path), "status", "--json"]) == 0
    old_row = next(c for c in json.loads(capsys.readouterr().out) if c["chain_id"] == "skOLD")
    assert (old_row["state"], old_row["recorded_state"], old_row["replaced_by"]) == \
        ("completed", records.SUBMIT_FAILED, "skNEW")


def test_a_job_id_handed_out_again_is_no_replacement(store):
    # another user's (or another script's) chain that got job id 30 again after a reset
    add_chain(store, "skOLD", [("compute", "30", records.JOB_SUBMITTED)],
              state=records.SUBMIT_FAILED, created=NOW - 900)
    add_chain(store, "skOTHER", [("compute", "30", records.JOB_SUBMITTED)],
              created=NOW - 100, owner=1001)
    add_chain(store, "skSCRIPT", [("compute", "30", records.JOB_SUBMITTED)],
              created=NOW - 50, script="/home/a/other.sh")
    assert records.replacements(store, ["skOLD"]) == {}
    # a submitted chain is never replaced, whatever shares its job id
    add_chain(store, "skLIVE", [("compute", "40", records.JOB_SUBMITTED)], created=NOW - 900)
    add_chain(store, "skLATER", [("compute", "40", records.JOB_SUBMITTED)], created=NOW - 10)
    assert records.replacements(store, ["skLIVE"]) == {}


def test_backlog_counts_what_waits_and_finds_orphaned_data_jobs(store, use_runner):
    rechained(store)
    add_chain(store, "skFAILED", [("stage-in", "41", records.JOB_FAILED),
                                  ("compute", "42", records.JOB_CANCELLED),
                                  ("stage-out", "43", records.JOB_SUBMITTED)],
              state=records.STAGE_IN_FAILED, reason="stage-in failed")
    add_chain(store, "skSETTLED", [("stage-in", "51", records.JOB_SUBMITTED),
                                   ("compute", "52", records.JOB_SUBMITTED)])
    records.record_chain_end(store, "skSETTLED", "stage-in-failed")
    add_chain(store, "skLIVE", [("stage-in", "61", records.JOB_SUBMITTED),
                                ("compute", "62", records.JOB_SUBMITTED)])
    add_chain(store, "skHALF", [("stage-in", None, records.JOB_PLANNED)],
              state=records.SUBMITTING, created=NOW - 300)
    records.save_decision(store, {"chain_id": "skLIVE", "job_key": "stage-in", "job_id": "61",
                                  "compute_id": "62", "scheduler": "slurm", "state": "waiting",
                                  "release_at": NOW + 120, "decided": NOW - 5})
    slurm(use_runner, squeue(
        ("31", "PENDING", "dataxfer", "job.stage-in", NOW - 890),   # the abandoned chain's
        ("43", "PENDING", "dataxfer", "job.stage-out", NOW - 580),  # its chain ended
        ("51", "PENDING", "dataxfer", "job.stage-in", NOW - 580),   # its chain was settled
        ("61", "PENDING", "dataxfer", "job.stage-in", NOW - 580),   # a live chain's: fine
        ("62", "PENDING", "batch", "job", NOW - 580),
        ("70", "PENDING", "dataxfer", "stray", NOW - 60),           # no record knows it
        ("71", "PENDING", "batch", "held-for-chaining", NOW - 30),
        ("72", "PENDING", "batch", "held-chained", NOW - 20),
        ("80", "PENDING", "batch", "a user's own", NOW - 10)))
    report = backlog(store, SiteConfig(), held=[("71", None), ("72", "skX")])
    assert [j["job_id"] for j in report.to_chain] == ["71"]
    assert report.to_chain[0]["submitted"] == int(NOW - 30)
    assert [(j["job_id"], j["chain_id"]) for j in report.to_release] == [("72", "skX")]
    assert [(r["state"], r["count"]) for r in report.submitting] == [(records.SUBMITTING, 1)]
    assert report.submitting[0]["oldest"] == pytest.approx(NOW - 300)
    assert report.jit_waiting == {"count": 1, "next_release": pytest.approx(NOW + 120)}
    orphans = {j["job_id"]: j for j in report.orphans}
    assert sorted(orphans) == ["31", "43", "51"]
    assert orphans["31"]["why"] == "its chain was replaced by skNEW"
    assert orphans["43"]["why"] == "its chain ended (stage-in-failed)"
    assert "settled" in orphans["51"]["why"]
    assert [j["job_id"] for j in report.unrecorded] == ["70"]
    assert report.notes == []


def test_status_backlog_prints_the_report(store, use_runner, tmp_path, capsys, monkeypatch):
    config_path = tmp_path / "site.toml"
    config_path.write_text(f'[state]\ndatabase = "{store.path}"\n')
    rechained(store)
    slurm(use_runner, squeue(
        ("31", "PENDING", "dataxfer", "job.stage-in", NOW - 890),
        ("71", "PENDING", "batch", "wants-data", NOW - 30, "scratchkeeper:chain-pending\n"
         "stage-in http://h/a:/s/a"),
        ("72", "PENDING", "batch", "chained", NOW - 20, "scratchkeeper:chained skX")))
    monkeypatch.setattr("os.getuid", lambda: 0)
    assert main(["-c", str(config_path), "status", "--backlog"]) == 0
    out = capsys.readouterr().out
    assert "held for chaining:        1, oldest submitted" in out
    assert "chained, to be released:  1, oldest submitted" in out
    assert "orphaned data jobs (still queued, their chain has ended): 1" in out
    assert "31  stage-in" in out and "its chain was replaced by skNEW" in out
    assert main(["-c", str(config_path), "status", "--backlog", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [j["job_id"] for j in report["to_chain"]] == ["71"]
    assert [j["job_id"] for j in report["orphans"]] == ["31"]
    assert report["unrecorded"] == [] and report["notes"] == []


def test_status_backlog_is_for_root(store, tmp_path, capsys, monkeypatch):
    config_path = tmp_path / "site.toml"
    config_path.write_text(f'[state]\ndatabase = "{store.path}"\n')
    monkeypatch.setattr("os.getuid", lambda: 1000)
    assert main(["-c", str(config_path), "status", "--backlog"]) != 0
    assert "run it as root" in capsys.readouterr().err


def test_a_chain_whose_compute_job_is_completing_is_never_shown_as_just_submitted(store,
                                                                                  use_runner):
    """A job whose script ended is COMPLETING in squeue while its epilog runs: accounting's
    COMPLETED is taken where it has it; where it has not yet, the chain is still running."""
    add_chain(store, "skcg", [("stage-in", "31", records.JOB_DONE),
                              ("compute", "32", records.JOB_SUBMITTED)])
    add_chain(store, "sklag", [("stage-in", "41", records.JOB_DONE),
                               ("compute", "42", records.JOB_SUBMITTED)])
    slurm(use_runner, squeue(("32", "COMPLETING", "batch", "job", NOW - 500),
                             ("42", "COMPLETING", "batch", "job", NOW - 500)),
          sacct(("31", "COMPLETED"), ("32", "COMPLETED"), ("41", "COMPLETED")))
    config = SiteConfig()
    assert chain_status(store, config, "skcg").state == "completed"
    assert chain_status(store, config, "sklag").state == "running"
