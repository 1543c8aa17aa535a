"""What other hosts once read or wrote in the state database, asked of the head instead
(recovery/headops.py): ``status`` from a login node, the epilog's ``replicas job-ended`` and a
job's ``replicas closed`` from a compute node. Each answers as the MUNGE credential's uid, with
the rules the head's own commands keep (a user sees and reports only their own)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import time
from pathlib import Path

import pytest

from scratchkeeper.cli import main
from scratchkeeper.config import load_config
from scratchkeeper.planner import records as planner_records
from scratchkeeper.recovery.client import RecoveryClient
from scratchkeeper.recovery.service import RecoveryService
from scratchkeeper.replication.state import ReplicationState
from scratchkeeper.storage.layout import LayoutRequest

from .conftest import NOBODY, NoQueue, run_as, write_site


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def head(site_dir, munge_site):
    """recoveryd with its TCP door, and a second site file as another host has it: the same
    scratch and head, a state database path that is not on that host."""
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as other users")
    port = _free_port()
    door = (f'[head]\nlisten = "127.0.0.1:{port}"\naddress = "127.0.0.1:{port}"\n'
            f'munge_socket = "{munge_site.socket}"\ntimeout = 5\n')
    site = write_site(site_dir, ost_count=8, extra=door)
    running = RecoveryService(site.config, scheduler=NoQueue())
    running.start()
    login = site_dir / "login"
    login.mkdir()
    os.chmod(login, 0o755)
    elsewhere = write_site(login, ost_count=8, extra=door + (
        f'[state]\ndatabase = "{login}/not-here/state.db"\n[storage]\n'
        f'scratch_root = "{site_dir}/scratch"\nstore_root = "{site_dir}/store"\n'))
    yield site, running, elsewhere
    running.shutdown()


def _chain(store, chain_id: str, owner: int) -> None:
    planner_records.open_records(store)
    now = time.time()
    with store.transaction() as conn:
        conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (chain_id, f"/home/u{owner}/job.sh", f"/home/u{owner}", "slurm", owner,
                      "submitted", "", now, now, "{}"))
        conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, state, "
                     "updated) VALUES (?,?,?,?,?,?,?)",
                     (chain_id, "compute", "compute", "batch", 0, "submitted", now))


def _cli(config_path: Path, *argv: str):
    """``scratchkeeper -c CONFIG ARGV`` in this process: exit status, standard output and
    error."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(["-c", str(config_path), *argv])
        except SystemExit as ended:
            status = ended.code
    return status, out.getvalue(), err.getvalue()


def test_status_from_another_host_shows_only_the_callers_chains(head):
    site, running, elsewhere = head
    _chain(running.store, "sk-mine", NOBODY)
    _chain(running.store, "sk-theirs", 1000)
    assert not Path(elsewhere.config.state.database).exists()

    listed = run_as(NOBODY, lambda: _cli(elsewhere.config_path, "status", "--json"))
    assert listed["ok"], listed
    code, out, _ = listed["value"]
    assert code == 0 and [c["chain_id"] for c in json.loads(out)] == ["sk-mine"]
    one = run_as(NOBODY, lambda: _cli(elsewhere.config_path, "status", "sk-mine", "--json"))
    assert one["ok"] and json.loads(one["value"][1])["jobs"][0]["key"] == "compute", one
    refused = run_as(NOBODY, lambda: RecoveryClient.for_site(
        load_config(elsewhere.config_path)).chain_status("sk-theirs"))
    assert refused == {"ok": False, "kind": "PermissionDenied",
                       "error": "chain sk-theirs belongs to another user"}
    # root's list is everyone's
    code, out, _ = _cli(elsewhere.config_path, "status", "--json")
    assert code == 0 and {c["chain_id"] for c in json.loads(out)} == {"sk-mine", "sk-theirs"}
    assert not Path(elsewhere.config.state.database).exists()  # never made on that host


def test_the_epilogs_job_ended_reaches_replicad_and_only_from_root(head):
    site, running, elsewhere = head
    assert _cli(elsewhere.config_path, "replicas", "job-ended", "4711", "4712_3") == (0, "", "")
    events = ReplicationState(running.store).pending_events()
    assert [(e["kind"], e["job_id"], e["source"]) for e in events] == [
        ("job-ended", "4711", "head"), ("job-ended", "4712_3", "head")]
    plain = run_as(NOBODY, lambda: RecoveryClient.for_site(
        load_config(elsewhere.config_path)).job_ended(["4713"]))
    assert plain["ok"] is False and plain["kind"] == "PermissionDenied", plain
    with pytest.raises(Exception, match="expected a scheduler job id"):
        RecoveryClient.for_site(elsewhere.config).job_ended(["1; rm -rf /"])
    assert len(ReplicationState(running.store).pending_events()) == 2


def test_a_closed_file_is_reported_for_the_owners_own_files_only(head):
    site, running, elsewhere = head
    backend = site.backend
    backend.create("nobody/in.dat", LayoutRequest(stripe_count=1), owner=(NOBODY, NOBODY))
    backend.create("root.dat", LayoutRequest(stripe_count=1))
    mine, roots = (backend.paths.resolve(name) for name in ("nobody/in.dat", "root.dat"))

    done = run_as(NOBODY, lambda: _cli(elsewhere.config_path, "replicas", "closed", mine,
                                       "--job", "99"))
    assert done == {"ok": True, "value": [0, "", ""]}, done
    refused = run_as(NOBODY, lambda: _cli(elsewhere.config_path, "replicas", "closed", roots))
    assert refused["ok"] and refused["value"][0] != 0, refused
    assert f"no file of uid {NOBODY} there" in refused["value"][2]
    events = ReplicationState(running.store).pending_events()
    assert [(e["kind"], e["job_id"], e["path"]) for e in events] == [("file-closed", "99", mine)]


def test_commands_that_need_the_database_say_it_is_the_heads(head):
    _, _, elsewhere = head
    code, _, err = _cli(elsewhere.config_path, "replicas")
    assert code != 0 and err.count("\n") == 1, err
    assert f"replicas opens the state database {elsewhere.config.state.database}, which is " \
           "the head's (127.0.0.1:" in err and err.endswith("run it on the head\n"), err
    code, _, err = _cli(elsewhere.config_path, "status", "--backlog")
    assert code != 0 and "status --backlog opens the state database" in err, err
    assert not Path(elsewhere.config.state.database).exists()
