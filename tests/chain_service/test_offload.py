"""Offload at close: CLOSE records, their offsets, which result they are, and the
changed-only check of the stage-out at the end."""

from __future__ import annotations

import hashlib
import os

import pytest

from scratchkeeper.chain_service import offload
from scratchkeeper.chain_service.offload import (
    CloseRecord,
    encode_path,
    match,
    mtime_text,
    parse_close,
    read_closes,
    unchanged,
)
from scratchkeeper.planner import records
from scratchkeeper.state import StateStore


def line(path: str, size: int = 10, uid: int = 1000, mtime: str = "1795540000.123456789") -> bytes:
    return f"CLOSE 1795540001.000000001 42 {uid} {size} {mtime} {encode_path(path)}\n".encode()


def test_a_record_and_its_encoded_path():
    record = parse_close(line("/scratch/a b/r\nx%.dat"))
    assert record == CloseRecord(1795540001.000000001, 42, 1000, 10, "1795540000.123456789",
                                 "/scratch/a b/r\nx%.dat")
    assert encode_path("/scratch/a b/é") == "/scratch/a%20b/%C3%A9"


@pytest.mark.parametrize("text", [
    b"OPEN 1 2 3 4 5.000000000 /x\n", b"CLOSE 1 2 3 4 5.000000000\n",
    b"CLOSE 1 2 3 4 5.1 /x\n", b"CLOSE 1 2 3 4 5.000000000 relative\n",
    b"CLOSE x 2 3 4 5.000000000 /x\n"])
def test_anything_else_is_refused(text):
    with pytest.raises(ValueError):
        parse_close(text)


@pytest.fixture
def store(tmp_path):
    return records.open_staging(StateStore(str(tmp_path / "state.db")))


def read(store, root) -> list[str]:
    """The paths of the records not read yet, marked read."""
    found, commit = read_closes(store, str(root))
    commit()
    return [r.path for r in found]


def test_records_are_read_once_and_a_half_written_one_waits(tmp_path, store):
    log, moved = tmp_path / "closes.log", tmp_path / "closes.log.old"
    log.write_bytes(line("/s/a") + b"CLOSE 17955")
    assert read(store, tmp_path) == ["/s/a"]
    # moved aside before it was read; kept while a record is being written into it
    assert not log.exists() and moved.exists()
    assert read(store, tmp_path) == []
    with open(moved, "ab") as stream:   # the rest of the record being written, then another
        stream.write(line("/s/b")[len(b"CLOSE 17955"):] + b"garbage line\n" + line("/s/c"))
    log.write_bytes(line("/s/d"))       # the mount's next records: a new log
    assert read(store, tmp_path) == ["/s/b", "/s/c"]
    assert not moved.exists()
    assert read(store, tmp_path) == ["/s/d"]
    assert read(store, tmp_path) == []
    assert not log.exists() and not moved.exists()


def test_records_not_marked_read_are_read_again(tmp_path, store):
    (tmp_path / "closes.log").write_bytes(line("/s/a"))
    found, _ = read_closes(store, str(tmp_path))       # killed before acting on them
    assert [r.path for r in found] == ["/s/a"]
    (tmp_path / "closes.log").write_bytes(line("/s/b"))  # written after the move
    assert read(store, tmp_path) == ["/s/a"]
    assert read(store, tmp_path) == ["/s/b"]


def test_the_close_log_is_moved_aside_before_it_is_read(tmp_path, store):
    """The mount writes one CLOSE record per file and log (docs/mount.rst "Bounded logs"):
    every read takes the log away first, so that the next close of a file already recorded
    goes to a new log rather than being left out of one already read."""
    log = tmp_path / "closes.log"
    log.write_bytes(line("/s/a"))
    found, commit = read_closes(store, str(tmp_path))
    assert [r.path for r in found] == ["/s/a"]
    assert not log.exists(), "the log was read where the mount still appends to it"
    commit()
    # a log of the older kind, read in place up to an offset: what was read is not read again
    log.write_bytes(line("/s/seen") + line("/s/unseen"))
    with store.transaction() as conn:
        conn.execute("UPDATE close_log SET offset=? WHERE name='closes.log'",
                     (len(line("/s/seen")),))
    assert read(store, tmp_path) == ["/s/unseen"]


def test_a_long_log_is_moved_aside_and_drained(tmp_path, store, monkeypatch):
    """The other logs (reads.log) are read in place and moved aside past ROTATE_AT."""
    from scratchkeeper.storage import mount_logs

    monkeypatch.setattr(mount_logs, "ROTATE_AT", 10)

    def read_other() -> list[str]:
        found, commit = mount_logs.MountLog(store, "close_log", str(tmp_path), "other.log",
                                            parse_close).read()
        commit()
        return [r.path for r in found]

    log = tmp_path / "other.log"
    log.write_bytes(line("/s/a"))
    assert read_other() == ["/s/a"]
    assert not log.exists() and (tmp_path / "other.log.old").exists()
    # a mount that opened the log before the move appends to the moved file
    with open(tmp_path / "other.log.old", "ab") as stream:
        stream.write(line("/s/late"))
    log.write_bytes(line("/s/new"))
    assert read_other() == ["/s/late", "/s/new"]
    # the new log was long enough to be moved aside in turn; the next read drains it
    assert read_other() == []
    assert not (tmp_path / "other.log.old").exists()


def test_which_listed_result_a_close_is():
    chains = [({"chain_id": "sk1", "owner_uid": 1000},
               [{"path": "/s/run/results", "destination": "gsiftp://h/sink/r", "line": 7,
                 "job_key": "stage-out"},
                {"path": "/s/run/summary.txt", "destination": "gsiftp://h/sink/", "line": 8,
                 "job_key": "stage-out"}])]
    inside = match(parse_close(line("/s/run/results/a/b.dat")), chains)
    assert (inside.destination, inside.line) == ("gsiftp://h/sink/r/a/b.dat", 7)
    assert match(parse_close(line("/s/run/summary.txt")), chains).destination == \
        "gsiftp://h/sink/summary.txt"
    assert match(parse_close(line("/s/run/results-other/x")), chains) is None


def _listed(tmp_path, *files):
    text = ""
    for path in files:
        info = os.lstat(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        text += f"{encode_path(str(path))}\t{info.st_size}\t{mtime_text(info)}\t{digest}\n"
    listing = tmp_path / "offloaded.list"
    listing.write_text(text)
    return listing


def test_unchanged_only_when_size_mtime_and_digest_match(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    first, second = results / "a.dat", results / "b.dat"
    first.write_bytes(b"one")
    second.write_bytes(b"two")
    listing = _listed(tmp_path, first, second)
    assert unchanged(str(listing), str(first))[0]
    assert unchanged(str(listing), str(results))[0]
    # same size, same mtime, other bytes: the digest tells
    info = os.stat(first)
    first.write_bytes(b"ONE")
    os.utime(first, ns=(info.st_atime_ns, info.st_mtime_ns))
    same, why = unchanged(str(listing), str(first))
    assert not same and "digest" in why
    assert not unchanged(str(listing), str(results))[0]
    (results / "c.dat").write_bytes(b"new")
    listing = _listed(tmp_path, first, second)
    same, why = unchanged(str(listing), str(results))
    assert not same and "c.dat was not offloaded" in why
    assert not unchanged(str(tmp_path / "none.list"), str(first))[0]


def test_a_close_is_acted_on_only_for_the_chain_owner(tmp_path):
    path = tmp_path / "r.dat"
    path.write_bytes(b"data")
    info = os.stat(path)
    record = CloseRecord(0.0, info.st_ino, info.st_uid, 4, mtime_text(info), str(path))
    assert offload._current(record, info.st_uid)[0] is not None
    assert "not the chain owner's" in offload._current(record, info.st_uid + 1)[1]
    # a record of an earlier close (a later one the mount left out): the file as it is now
    earlier = CloseRecord(0.0, info.st_ino, info.st_uid, 1, "1.000000000", str(path))
    current = offload._current(earlier, info.st_uid)[0]
    assert (current.size, current.mtime) == (4, mtime_text(info))


def test_the_stage_out_waits_for_an_offload_in_flight(tmp_path):
    import threading

    result = tmp_path / "r.dat"
    result.write_bytes(b"data")
    done = _listed(tmp_path, result).read_text()
    listing = tmp_path / "offloaded.list"
    fields = done.split("\t")
    listing.write_text("\t".join(fields[:3] + ["-\n"]))          # in flight
    same, why = unchanged(str(listing), str(result), wait=0.2)
    assert not same and "did not end within" in why
    timer = threading.Timer(0.3, listing.write_text, (done,))   # the chain service records it
    timer.start()
    try:
        assert unchanged(str(listing), str(result), wait=10)[0]
    finally:
        timer.cancel()


def test_lustre_changelog_closes_become_records_and_are_cleared(tmp_path):
    from scratchkeeper.config import parse_config
    from scratchkeeper.runner import CommandResult, CommandRunner, set_runner

    result = tmp_path / "r.dat"
    result.write_bytes(b"12345")
    info = os.stat(result)
    # `lfs changelog` as Lustre's manual documents its records: CLOSE of the result by its
    # owner, one by another user (not read), a CREAT
    changelog = (
        f"21 01CREAT 10:30:59.112000000 2026.11.22 0x0 t=[0x200000402:0x11:0x0] j=a.1 ef=0xf "
        f"u={info.st_uid}:0 nid=0@lo p=[0x200000007:0x1:0x0] r.dat\n"
        f"22 11CLOSE 10:31:01.240001234 2026.11.22 0x42 t=[0x200000402:0x11:0x0] j=a.1 ef=0x7 "
        f"u={info.st_uid}:0 nid=0@lo\n"
        f"23 11CLOSE 10:31:02.000000001 2026.11.22 0x42 t=[0x200000402:0x12:0x0] j=b.2 ef=0x7 "
        f"u={info.st_uid + 1}:0 nid=0@lo\n")
    calls = []

    class Lfs(CommandRunner):
        def run(self, argv, **kwargs):
            argv = tuple(argv)
            calls.append(argv)
            if argv[1] == "changelog":
                return CommandResult(argv, 0, changelog, "", 0.0)
            if argv[1] == "fid2path":
                assert argv[3] == "0x200000402:0x11:0x0"
                return CommandResult(argv, 0, f"{result}\n", "", 0.0)
            if argv[1] == "changelog_clear":
                return CommandResult(argv, 0, "", "", 0.0)
            raise AssertionError(argv)

    config = parse_config(f'[storage]\nbackend = "lustre"\nscratch_root = "{tmp_path}"\n'
                          '[staging]\nchangelog_mdt = "scratch-MDT0000"\n'
                          'changelog_user = "cl2"\n')
    chains = [({"chain_id": "sk1", "owner_uid": info.st_uid}, [])]
    previous = set_runner(Lfs())
    try:
        found = offload.lustre_closes(config, chains)
    finally:
        set_runner(previous)
    assert [(r.path, r.size, r.mtime) for r in found] == [(str(result), 5, mtime_text(info))]
    assert calls[-1] == ("lfs", "changelog_clear", "scratch-MDT0000", "cl2", "23")
    assert sum(1 for c in calls if c[1] == "fid2path") == 1


def test_a_directory_is_sent_again_only_for_its_changed_files(tmp_path):
    """The stage-out's `stage changed`: hard links to the files not offloaded unchanged."""
    from scratchkeeper.chain_service.offload import link_changed

    results = tmp_path / "results"
    (results / "sub").mkdir(parents=True)
    kept, changed, new = results / "a.dat", results / "sub" / "b.dat", results / "sub" / "c.dat"
    kept.write_bytes(b"a")
    changed.write_bytes(b"b")
    listing = _listed(tmp_path, kept, changed)
    changed.write_bytes(b"bb")
    new.write_bytes(b"c")
    into = tmp_path / ".results.sk-changed"
    into.mkdir()
    assert link_changed(str(listing), str(results), str(into)) == (2, 1)
    assert sorted(str(p.relative_to(into)) for p in into.rglob("*") if p.is_file()) == [
        "sub/b.dat", "sub/c.dat"]
    assert os.stat(into / "sub" / "c.dat").st_ino == os.stat(new).st_ino


def test_the_stage_out_of_a_close_directory_sends_through_the_changed_folder(tmp_path):
    from scratchkeeper.config import parse_config
    from scratchkeeper.planner.submit import prepare

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n#STAGEOUT -when close\n"
                      f"#STAGEOUT {scratch}/results/ ftp://127.0.0.1:2811/sink/run/\nhostname\n")
    config = parse_config(f'[storage]\nscratch_root = "{scratch}"\n[state]\n'
                          f'database = "{tmp_path}/state.db"\n')
    _, plan = prepare(str(script), config, workdir=str(tmp_path), chain_id="sk0123456789")
    text = plan.jobs[-1].script
    folder = f"{scratch}/.results.sk-changed-sk0123456789"
    assert f"SK_CHANGED={folder}\n" in text
    assert f"stage changed --list {tmp_path}/spool/sk0123456789/offloaded.list --link-into" in text
    assert f"file://{folder}/ ftp://127.0.0.1:2811/sink/run/" in text
    assert f"file://{scratch}/results/ ftp://127.0.0.1:2811/sink/run/" in text  # the fallback


@pytest.mark.parametrize("scheduler, header, expected", [
    ("slurm", "#SBATCH -J climate", "climate.offload-0123456789"),
    ("slurm", "#SBATCH --job-name=run_7", "run_7.offload-0123456789"),
    ("pbs", "#PBS -N wrf", "wrf.offload-0123456789"),
    ("slurm", "#SBATCH -t 5", "my_job.sh.offload-0123456789"),       # no name: the script's
    # a header name the planner does not take: the script's, as its siblings have
    ("slurm", "#SBATCH -J a;b(c)", "my_job.sh.offload-0123456789"),
])
def test_an_offload_job_is_named_after_the_users_job(tmp_path, scheduler, header, expected):
    """Named as the chain's stage-in and stage-out jobs are (issue 32: not
    ``job.sh.offload-<hash>`` when the script names its job)."""
    import dataclasses

    from scratchkeeper.config import SiteConfig
    from scratchkeeper.planner.submit import prepare

    root = tmp_path / "scratch"
    root.mkdir()
    script = root / "my job.sh"
    script.write_text(f"#!/bin/bash\n{header}\n#STAGEOUT -when close\n"
                      "#STAGEOUT out.dat http://h/out.dat\nrun\n")
    config = SiteConfig()
    config = dataclasses.replace(config, storage=dataclasses.replace(
        config.storage, scratch_root=str(root)))
    _, plan = prepare(str(script), config, scheduler=scheduler, workdir=str(root),
                      chain_id="sk0123456789")
    store = records.open_records(StateStore(str(tmp_path / "state.db")))
    records.record_plan(store, plan, os.getuid(), {})
    chain = records.chain(store, plan.chain_id)
    name = offload.job_name(chain, "offload-0123456789")
    assert name == expected
    base = expected.rsplit(".", 1)[0]
    assert plan.job("stage-out").name == f"{base}.stage-out"  # the same base as its siblings
    assert name.rsplit(".", 1)[-1] == "offload-0123456789"    # what _resume reads back
