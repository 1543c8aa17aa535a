"""A data job running as its user reports ``stage commit``/``stage fail`` through recoveryd.

The state database is root's; the service does the commit for the chain's owner only, and
only on files that owner owns (the thesis's data jobs run as the user, the queue ACL admits root).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import time

import pytest

from scratchkeeper import digests
from scratchkeeper.cli import build_parser, main as cli_main
from scratchkeeper.planner import records as planner_records
from scratchkeeper.recovery.client import RecoveryClient
from scratchkeeper.recovery.service import RecoveryService
from scratchkeeper.state import may_write

from .conftest import NOBODY, NoQueue, read_all, run_as


@pytest.fixture
def service(site):
    running = RecoveryService(site.config, scheduler=NoQueue())
    running.start()
    yield running
    running.shutdown()


def _planned_chain(store, owner: int, paths: list[str], source: str, *,
                   compute_job: str = "") -> str:
    """A chain as the chain service records it before its stage-in ran: files planned."""
    planner_records.open_records(store)
    chain_id = f"sk-test-{owner}-{time.monotonic_ns()}"
    now = time.time()
    with store.transaction() as conn:
        conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (chain_id, "/home/u/job.sh", "/tmp", "slurm", owner, "submitted", "", now,
                      now, "{}"))
        for position, (key, job_id) in enumerate([("stage-in", ""), ("compute", compute_job)]):
            conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, job_id,"
                         " state, updated) VALUES (?,?,?,?,?,?,?,?)",
                         (chain_id, key, key, "batch", position, job_id or None, "submitted", now))
        for line, path in enumerate(paths, 2):
            conn.execute("INSERT INTO staged_files(chain_id, path, job_key, source, line, state)"
                         " VALUES (?,?,?,?,?,?)", (chain_id, path, "stage-in", source, line,
                                                   "planned"))
    return chain_id


def _users_file(site, name: str, data: bytes, owner: int = NOBODY) -> str:
    folder = site.root / "scratch" / "u"
    folder.mkdir(exist_ok=True)
    os.chown(folder, NOBODY, NOBODY)
    path = folder / name
    path.write_bytes(data)
    os.chown(path, owner, owner)
    return str(path)


def _commit_as(uid: int, socket_path: str, chain_id: str) -> dict:
    return run_as(uid, lambda: RecoveryClient(socket_path).stage_commit(chain_id, "stage-in"))


def test_the_owners_data_job_commits_through_the_service(site, service):
    data = os.urandom(2_300_011)
    path = _users_file(site, "in.dat", data)
    chain_id = _planned_chain(service.store, NOBODY, [path], "ftp://127.0.0.1:2811/in.dat")
    answer = _commit_as(NOBODY, site.config.recovery.socket, chain_id)
    assert answer["ok"], answer
    (committed,) = answer["value"]["files"]
    assert committed["path"] == path and committed["size"] == len(data)
    assert committed["checksum"] == hashlib.sha256(data).hexdigest()
    backend = site.backend
    assert backend.stat(path).uid == NOBODY  # in the store, still the user's
    assert read_all(backend, path) == data
    assert not os.path.lexists(path) or backend.exists(path)
    (row,) = planner_records.staged_files(service.store, chain_id)
    assert (row["state"], row["owner_uid"], row["size"]) == ("staged", NOBODY, len(data))
    blocks = digests.lookup(service.store, path, hashlib.sha256(data).hexdigest(), len(data))
    assert blocks is not None and blocks == digests.digest_bytes(data, blocks.block_size)
    jobs = {r["job_key"]: r["state"] for r in planner_records.chain_jobs(service.store, chain_id)}
    assert jobs["stage-in"] == planner_records.JOB_DONE


def test_another_users_chain_is_refused(site, service):
    path = _users_file(site, "root.dat", b"x" * 1000, owner=0)
    chain_id = _planned_chain(service.store, 0, [path], "ftp://127.0.0.1:2811/root.dat")
    refused = _commit_as(NOBODY, site.config.recovery.socket, chain_id)
    assert refused["ok"] is False and refused["kind"] == "PermissionDenied"
    assert f"chain {chain_id} belongs to uid 0; uid {NOBODY} may report only" in refused["error"]
    failed = run_as(NOBODY, lambda: RecoveryClient(site.config.recovery.socket).stage_fail(
        chain_id, "stage-in", 2, "made up"))
    assert failed["kind"] == "PermissionDenied"
    assert planner_records.chain(service.store, chain_id)["state"] == "submitted"
    (row,) = planner_records.staged_files(service.store, chain_id)
    assert row["state"] == "planned" and not site.backend.exists(path)


@pytest.mark.parametrize("trap", ["root-owned", "symlink", "symlinked-folder"])
def test_a_file_the_owner_does_not_own_is_never_taken_in(site, service, trap):
    secret = site.root / "secret"
    secret.write_bytes(b"root only\n")
    os.chmod(secret, 0o600)
    folder = site.root / "scratch" / "u"
    folder.mkdir()
    os.chown(folder, NOBODY, NOBODY)
    if trap == "root-owned":
        path = _users_file(site, "planted.dat", b"root's bytes", owner=0)
    elif trap == "symlink":
        path = str(folder / "link.dat")
        os.symlink(secret, path)
    else:  # a directory on the way is a link out of the user's folder
        os.symlink(site.root, folder / "up")
        path = str(folder / "up" / "secret")
    chain_id = _planned_chain(service.store, NOBODY, [path], "ftp://127.0.0.1:2811/x")
    refused = _commit_as(NOBODY, site.config.recovery.socket, chain_id)
    assert refused["ok"] is False, refused
    assert refused["kind"] in ("PermissionDenied", "InputError")
    assert not site.backend.exists(path)
    assert secret.read_bytes() == b"root only\n"  # neither moved nor unlinked
    (row,) = planner_records.staged_files(service.store, chain_id)
    assert row["state"] == "planned" and row["checksum"] is None


def test_stage_fail_through_the_service_records_the_reason(site, service):
    chain_id = _planned_chain(service.store, NOBODY, [str(site.root / "scratch/u/x")],
                              "ftp://127.0.0.1:2811/x", compute_job="999999991")
    answer = run_as(NOBODY, lambda: RecoveryClient(site.config.recovery.socket).stage_fail(
        chain_id, "stage-in", 2, "550 No such file"))
    assert answer["ok"], answer
    assert answer["value"]["cancelled"] == ["999999991"]
    chain = planner_records.chain(service.store, chain_id)
    assert chain["state"] == planner_records.STAGE_IN_FAILED
    assert "/home/u/job.sh:2: 550 No such file" in chain["reason"]


def _cli_as(uid: int, argv: list[str]) -> dict:
    build_parser()  # imports every command's modules here: the child cannot read /root

    def call():
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            code = cli_main(argv)
        return {"code": code, "output": captured.getvalue()}

    answer = run_as(uid, call)
    assert answer["ok"], answer
    return answer["value"]


def test_stage_commit_command_uses_the_service_when_it_cannot_write_the_database(site, service):
    data = os.urandom(300_007)
    path = _users_file(site, "cli.dat", data)
    chain_id = _planned_chain(service.store, NOBODY, [path], "ftp://127.0.0.1:2811/cli.dat")
    db = site.config.state.database
    assert may_write(db)
    assert run_as(NOBODY, lambda: may_write(db)) == {"ok": True, "value": False}
    result = _cli_as(NOBODY, ["-c", str(site.config_path), "stage", "commit", "--chain",
                              chain_id, "--job", "stage-in"])
    assert result["code"] == 0, result
    assert f"staged {path} (300007 bytes, sha256 {hashlib.sha256(data).hexdigest()})" \
        in result["output"]
    (row,) = planner_records.staged_files(service.store, chain_id)
    assert row["state"] == "staged" and row["owner_uid"] == NOBODY
    assert read_all(site.backend, path) == data


def test_stage_commit_command_says_what_is_wrong_when_the_service_is_down(site):
    assert not os.path.exists(site.config.recovery.socket)
    result = _cli_as(NOBODY, ["-c", str(site.config_path), "stage", "commit", "--chain", "sk-x",
                              "--job", "stage-in"])
    assert result["code"] != 0
    assert f"uid {NOBODY} cannot write the state database {site.config.state.database}" \
        in result["output"]
    assert "does not answer after 3 tries" in result["output"]
    assert result["output"].count("retry") == 2
