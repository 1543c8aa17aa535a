"""recoveryd's ``reads`` op: a reader's reads (scratchkeeper read) written to the store's read
records for tiering, only for the caller's own files, bounded (a private site, no cluster)."""

from __future__ import annotations

import os

import pytest

from scratchkeeper.recovery.client import RecoveryClient
from scratchkeeper.recovery.reader import RecoveringReader
from scratchkeeper.recovery.service import RecoveryService
from scratchkeeper.tiering.reads import parse_reads
from user_runtime import plain_user

from .conftest import NOBODY, NoQueue, run_as, stage, write_site


@pytest.fixture
def service(site_dir):
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as other users")
    site = write_site(site_dir, ost_count=4)
    running = RecoveryService(site.config, scheduler=NoQueue())
    running.start()
    yield site, running
    running.shutdown()


def records(site):
    log = site.root / "store" / "reads.log"
    return [parse_reads(line) for line in log.read_bytes().splitlines()] if log.exists() else []


def test_a_readers_reads_are_recorded_for_its_own_files_only(service):
    site, running = service
    backend = site.backend
    mine = stage(backend, "nobody.dat", b"n" * 300_000, "file:///dev/null", stripe_count=2,
                 owner=(NOBODY, NOBODY))
    roots = stage(backend, "root.dat", b"r" * 1000, "file:///dev/null", stripe_count=1)
    socket_path = site.config.recovery.socket

    def claim(path, reads, nbytes):
        return lambda: RecoveryClient(socket_path).reads(path, reads, nbytes)

    # A user's process reads a store file through the scratch mount (it cannot reach the
    # objects: docs/security.rst) and reports its reads as the RecoveringReader does.
    assert run_as(NOBODY, claim(mine, 2, 300_000))["ok"] is True
    (record,) = records(site)
    assert (record.path, record.uid, record.bytes) == (mine, NOBODY, 300_000)
    assert record.reads == 2 and record.object_id == backend.file_id(mine)
    refused = run_as(NOBODY, claim(roots, 5, 1000))       # not its file: no record
    assert not refused["ok"] and refused["kind"] == "PermissionDenied"
    for bad in ((mine, 0, 10), (mine, -1, 10), (mine, 1 << 21, 10), (mine, 1, -5)):
        answer = run_as(NOBODY, claim(*bad))
        assert not answer["ok"] and answer["kind"] == "InputError", (bad, answer)
    assert run_as(NOBODY, claim("/etc/passwd", 1, 1))["ok"] is False
    assert len(records(site)) == 1


def test_a_reader_without_recoveryd_still_reads(site_dir):
    site = write_site(site_dir, ost_count=4)
    path = stage(site.backend, "f.dat", b"x" * 5000, "file:///dev/null", stripe_count=1)
    reader = RecoveringReader(site.backend, RecoveryClient(str(site_dir / "nowhere.sock"),
                                                           connect_timeout=0.2), path,
                              count_reads=True)
    assert reader.read() == b"x" * 5000


def test_a_users_reads_take_at_most_their_share_of_the_log_and_others_still_count(site_dir):
    """The 'reads' path goes through the bounded writer the mount uses (issue 39: 24,000
    requests of one user grew reads.log by 73.6 MB): here a 16 KiB cap, 1 KiB per user."""
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as other users")
    # the requests' own bound out of the way: this is the log's
    site = write_site(site_dir, ost_count=4, extra="[mount]\nlog_max_bytes = 16384\n"
                      "[recovery]\nrequest_burst = 1000")
    running = RecoveryService(site.config, scheduler=NoQueue())
    running.start()
    try:
        backend = site.backend
        socket_path = site.config.recovery.socket
        mine = stage(backend, "nobody.dat", b"n" * 1000, "file:///dev/null", stripe_count=1,
                     owner=(NOBODY, NOBODY))
        plain_uid, plain_gid = plain_user()
        theirs = stage(backend, "plain.dat", b"p" * 1000, "file:///dev/null", stripe_count=1,
                       owner=(plain_uid, plain_gid))

        def flood():
            client = RecoveryClient(socket_path)
            replies = [client.reads(mine, 1, 1000) for _ in range(200)]
            return {"recorded": sum(r["recorded"] for r in replies),
                    "dropped": sorted({r.get("dropped") for r in replies} - {None}),
                    "logs": client.logs()}

        answer = run_as(NOBODY, flood)
        assert answer["ok"], answer
        flooded = answer["value"]
        log = site.root / "store" / "reads.log"
        assert log.stat().st_size <= 1024
        assert 0 < flooded["recorded"] < 200 and flooded["dropped"] == ["share"]
        counters = flooded["logs"]["reads.log"]
        assert counters["share"] == 1024 and counters["dropped"]["share"] == \
            200 - flooded["recorded"]
        assert list(counters["users"]) == [str(NOBODY)]  # a user sees their own line
        assert counters["users"][str(NOBODY)]["dropped"] == 200 - flooded["recorded"]
        other = run_as(plain_uid, lambda: RecoveryClient(socket_path).reads(theirs, 3, 1000))
        assert other == {"ok": True, "value": {"recorded": True, "ok": True}}, other
        assert records(site)[-1].uid == plain_uid
        assert set(RecoveryClient(socket_path).logs()["reads.log"]["users"]) == \
            {str(NOBODY), str(plain_uid)}
    finally:
        running.shutdown()
