"""recoveryd under one user's flood (issue 39): another user's ``recover`` stays within twice its
idle time, a user's requests are bounded (a minute, pending), served in turn with other users',
their log lines bounded, and finished requests pruned after the retention (a private site, no
cluster; the clients run as other users)."""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import threading
import time

import pytest

from scratchkeeper.recovery import records
from scratchkeeper.recovery.client import RecoveryClient, ServiceBusy
from scratchkeeper.recovery.service import (
    REFUSALS_PER_MINUTE,
    REQUEST_LINES_PER_MINUTE,
    RecoveryService,
)
from scratchkeeper.state import StateStore
from user_runtime import plain_user, user_runtime

from .conftest import NOBODY, NoQueue, Site, run_as, stage, write_site

FLOOD_REPORTS = 1500
FLOOD_PROCESSES, FLOOD_THREADS = 3, 4
#: the site's bounds of a user's requests (the defaults): a burst, then 10 a second
BURST, PER_MINUTE = 30, 600


def _service(site_dir, extra: str = "") -> tuple[Site, RecoveryService]:
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as other users")
    site = write_site(site_dir, ost_count=8, extra=extra)
    running = RecoveryService(site.config, scheduler=NoQueue())
    running.start()
    return site, running


@pytest.fixture
def flood_service(site_dir):
    site, running = _service(site_dir)
    assert (site.config.recovery.request_burst,
            site.config.recovery.requests_per_minute) == (BURST, PER_MINUTE)
    yield site, running
    running.shutdown()


def _flood(uid: int, socket_path: str, paths: list[str]):
    """FLOOD_PROCESSES children running as ``uid``, FLOOD_THREADS threads each, ready to send
    a report for each path (the client backs off when told the service is busy, and gives up
    after a second) until every path is sent or they are stopped.

    Returns ``(go, stop)``: ``go()`` starts the reports (the children are forked and waiting
    before, so that their start costs nothing to what is measured); ``stop()`` stops them and
    returns their counts: ``ok``, ``busy`` and anything else by error class.
    """
    children: list[tuple[int, int, int]] = []
    for number in range(FLOOD_PROCESSES):
        mine = paths[number::FLOOD_PROCESSES]
        report_r, report_w = os.pipe()
        stop_r, stop_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: drop to uid, flood, report its counts, exit at once
            try:
                os.close(report_r)
                os.close(stop_w)
                for _, other_report, other_stop in children:  # the EOF of each is its own
                    os.close(other_report)
                    os.close(other_stop)
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                os.write(report_w, json.dumps(_flood_child(socket_path, mine, stop_r)).encode())
            finally:
                os._exit(0)
        os.close(report_w)
        os.close(stop_r)
        children.append((pid, report_r, stop_w))

    def go() -> None:
        for _, _, control in children:
            os.write(control, b"g")

    def stop() -> dict[str, int]:
        counts: dict[str, int] = {}
        for pid, report_r, stop_w in children:
            os.close(stop_w)  # EOF: the child's threads stop after their current request
            chunks = []
            while chunk := os.read(report_r, 65536):
                chunks.append(chunk)
            os.close(report_r)
            os.waitpid(pid, 0)
            for key, value in json.loads(b"".join(chunks) or b"{}").items():
                counts[key] = counts.get(key, 0) + value
        return counts
    return go, stop


def _flood_child(socket_path: str, paths: list[str], control: int) -> dict[str, int]:
    started, stopped = threading.Event(), threading.Event()

    def listen() -> None:
        if os.read(control, 1) == b"g":  # a byte: go; the end of the pipe: stop
            started.set()
            os.read(control, 1)
        started.set()
        stopped.set()

    threading.Thread(target=listen, daemon=True).start()
    counts: dict[str, int] = {}
    lock = threading.Lock()

    def send(share: list[str]) -> None:
        client = RecoveryClient(socket_path, connect_timeout=1.0)
        started.wait()
        for path in share:
            if stopped.is_set():
                return
            try:
                client.report(path)
                outcome = "ok"
            except ServiceBusy:
                outcome = "busy"
            except Exception as err:  # counted, so the test shows what else went wrong
                outcome = type(err).__name__
            with lock:
                counts[outcome] = counts.get(outcome, 0) + 1

    threads = [threading.Thread(target=send, args=(paths[n::FLOOD_THREADS],))
               for n in range(FLOOD_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return counts


def _recover_times(argv: list[str], uid: int, path: str, runs: int) -> list[float]:
    """Seconds each of ``runs`` ``scratchkeeper recover PATH`` as ``uid`` took, as the
    user sees them."""
    times = []
    for _ in range(runs):
        started = time.monotonic()
        done = subprocess.run([*argv, "recover", path], user=uid, group=uid,
                              extra_groups=[], capture_output=True, text=True, timeout=120,
                              env={"PATH": "/usr/bin:/bin"}, cwd="/")
        times.append(time.monotonic() - started)
        assert done.returncode == 0 and f"{path}: whole" in done.stdout, (done.stdout,
                                                                          done.stderr)
    return times


def _requests_of(service: RecoveryService, uid: int) -> int:
    return service.store.query("SELECT COUNT(*) FROM recovery_requests WHERE requested_by = ?",
                               (uid,))[0][0]


def test_one_users_flood_leaves_another_users_recover_within_twice_its_idle_time(
        flood_service, caplog):
    """Up to 1,500 reports of one user on their own files, from 3 processes of 4 threads:
    another user's ``scratchkeeper recover`` (idle, then under the flood from its start:
    median of 5 and of 7) takes at most twice as long (or one second more, on a busy
    machine); the flooder's accepted requests stay within the burst and the rate, its
    lines in root's log within theirs."""
    caplog.set_level(logging.INFO, logger="scratchkeeper.recovery")
    site, service = flood_service
    socket_path = service.config.recovery.socket
    backend = service.backend
    plain_uid, plain_gid = plain_user()
    victim = stage(backend, "victim.bin", b"v" * 70_000, "file:///nonexistent",
                   owner=(plain_uid, plain_gid), stripe_count=1)
    files = [stage(backend, f"flood-{n}.bin", b"f" * 1000, "file:///nonexistent",
                   owner=(NOBODY, NOBODY), stripe_count=1) for n in range(150)]
    reports = [files[n % len(files)] for n in range(FLOOD_REPORTS)]

    argv = [*user_runtime(site.root / "runtime"), "-c", str(site.config_path)]
    go, stop = _flood(NOBODY, socket_path, reports)
    try:
        idle = _recover_times(argv, plain_uid, victim, 5)
        started = time.monotonic()
        go()
        deadline = time.monotonic() + 60
        while _requests_of(service, NOBODY) < BURST // 2:  # the flood in full swing
            assert time.monotonic() < deadline, "the flood's reports do not arrive"
            time.sleep(0.02)
        flooded = _recover_times(argv, plain_uid, victim, 7)
        while _requests_of(service, NOBODY) < BURST + 10:  # past the burst, paced
            assert time.monotonic() < deadline, "the flood's reports stopped"
            time.sleep(0.05)
    finally:
        counts = stop()
    elapsed = time.monotonic() - started

    figures = (f"recover idle {[round(t, 3) for t in idle]}, under the flood "
               f"{[round(t, 3) for t in flooded]}; the flood: {counts} in {elapsed:.1f}s")
    print(figures)
    # twice the idle time, or the idle time and one second more where that is more: on a
    # machine whose 2 cores the tests share, the 12 flooding threads take CPU from the recover
    # processes too (measured: 1.5-2.4x of a 0.2 s idle time), which is not the flood's
    # requests served before the victim's. Served after the flood's queued reports instead
    # (no per-user turn), a recover waits for their work as well, which the bound still
    # catches: the flooder's requests are no faster than the victim's own.
    idle_median = statistics.median(idle)
    assert statistics.median(flooded) <= max(2 * idle_median, idle_median + 1.0), figures
    # the flood met the bound: what was accepted is at most the burst plus what the rate let
    # through since; the rest was refused as busy
    accepted = _requests_of(service, NOBODY)
    assert counts.get("busy", 0) > 0, figures
    assert accepted <= BURST + PER_MINUTE / 60 * elapsed + 1, (accepted, figures)
    assert set(counts) <= {"ok", "busy"}, figures
    # root's log: a minute's lines of the flooder's accepted requests and of its refusals;
    # the rest counted, said in one line per minute at most
    minutes = int(elapsed // 60) + 1
    lines = [r.getMessage() for r in caplog.records if f"uid {NOBODY}" in r.getMessage()]
    requests = [line for line in lines if "(report, uid" in line]
    assert accepted > REQUEST_LINES_PER_MINUTE * minutes
    assert len(requests) <= REQUEST_LINES_PER_MINUTE * minutes, requests[-3:]
    assert len(lines) <= (REQUEST_LINES_PER_MINUTE + REFUSALS_PER_MINUTE + 2) * minutes, \
        lines[-3:]


def test_a_users_pending_requests_are_bounded_and_roots_are_not(site_dir, monkeypatch):
    _, service = _service(site_dir, "[recovery]\npending_per_uid = 5")
    try:
        # the workers take nothing: every request stays queued
        monkeypatch.setattr(records, "claim_next", lambda *args, **kwargs: None)
        socket_path = service.config.recovery.socket
        files = [stage(service.backend, f"p{n}.bin", b"p" * 100, "file:///nonexistent",
                       owner=(NOBODY, NOBODY), stripe_count=1) for n in range(8)]

        def report_all():
            client = RecoveryClient(socket_path, connect_timeout=0.3)
            outcomes = []
            for path in files:
                try:
                    client.report(path)
                    outcomes.append("ok")
                except ServiceBusy as err:
                    outcomes.append(str(err))
            # a report of a file already queued joins its request: no new one, not refused
            outcomes.append("ok" if client.report(files[0])["request_id"] else "?")
            return outcomes

        answer = run_as(NOBODY, report_all)
        assert answer["ok"], answer
        outcomes = answer["value"]
        assert outcomes[:5] == ["ok"] * 5 and outcomes[-1] == "ok"
        assert all("uid 65534 has 5 recovery requests queued or running (at most 5)" in o
                   for o in outcomes[5:8]), outcomes
        assert _requests_of(service, NOBODY) == 5
        for path in files[5:]:  # root's are not bounded
            RecoveryClient(socket_path).report(path)
        assert _requests_of(service, 0) == 3
    finally:
        service.shutdown()


def test_a_users_requests_a_minute_are_bounded_and_another_user_is_still_served(site_dir):
    _, service = _service(site_dir, "[recovery]\nrequests_per_minute = 20\nrequest_burst = 20")
    try:
        socket_path = service.config.recovery.socket
        mine = stage(service.backend, "m.bin", b"m" * 100, "file:///nonexistent",
                     owner=(NOBODY, NOBODY), stripe_count=1)
        plain_uid, plain_gid = plain_user()
        theirs = stage(service.backend, "t.bin", b"t" * 100, "file:///nonexistent",
                       owner=(plain_uid, plain_gid), stripe_count=1)

        def statuses():
            client = RecoveryClient(socket_path, connect_timeout=0.05)
            outcomes = []
            for _ in range(30):
                try:
                    client.status(mine)
                    outcomes.append("ok")
                except ServiceBusy as err:
                    outcomes.append(f"busy {err.retry_after:.1f}: {err}")
            return outcomes

        answer = run_as(NOBODY, statuses)
        assert answer["ok"], answer
        outcomes = answer["value"]
        assert outcomes.count("ok") in (20, 21), outcomes  # 1 more may come in 3 s
        refused = [o for o in outcomes if o != "ok"]
        assert all("uid 65534 sent more than 20 requests at once or 20 a minute; try again in" in o
                   for o in refused), refused
        # told when: one request every 3 s comes back
        assert all(0 < float(o.split()[1].rstrip(":")) <= 3.0 for o in refused), refused
        other = run_as(plain_uid, lambda: RecoveryClient(socket_path).status(theirs)["whole"])
        assert other == {"ok": True, "value": True}
    finally:
        service.shutdown()


def test_finished_requests_are_pruned_after_the_retention(site_dir):
    _, service = _service(site_dir, "[recovery]\nrequest_retention = 1.0\ncheck_interval = 3600")
    try:
        files = [stage(service.backend, f"r{n}.bin", b"r" * 100, "file:///nonexistent",
                       owner=(NOBODY, NOBODY), stripe_count=1) for n in range(20)]
        for path in files:
            service.enqueue(path, [], NOBODY, "report")
        deadline = time.monotonic() + 30
        while records.request_counts(service.store) != [(records.DONE, 20)]:
            assert time.monotonic() < deadline, records.request_counts(service.store)
            time.sleep(0.05)
        assert service.prune() == 0  # finished less than the retention ago: kept
        while _requests_of(service, NOBODY):  # the check cycle removes them once it is past
            assert time.monotonic() < deadline, records.request_counts(service.store)
            service.check_cycle()
            time.sleep(0.1)
        assert service.store.query("SELECT COUNT(*) FROM recovery_files")[0][0] == 0
    finally:
        service.shutdown()


# -- the records alone (no daemon) -----------------------------------------------------------
@pytest.fixture
def store(tmp_path):
    return records.open_records(StateStore(str(tmp_path / "state.db")))


def test_workers_take_users_in_turn_not_first_come_first_served(store):
    flood = records.enqueue_many(store, [(f"/s/flood{n}", []) for n in range(100)],
                                 requested_by=1000, origin="report")
    (late, _), = records.enqueue_many(store, [("/s/late", [])], requested_by=2000,
                                      origin="recover")
    first = records.claim_next(store, "w")
    assert first["request_id"] == flood[0][0]  # the oldest, while nobody runs anything
    # uid 1000 now has one running, uid 2000 none: 2000's request comes next, not 99 others
    assert records.claim_next(store, "w")["request_id"] == late
    assert records.claim_next(store, "w")["requested_by"] == 1000


def test_a_user_holds_at_most_workers_per_uid_and_root_is_not_bounded(store):
    records.enqueue_many(store, [(f"/s/u{n}", []) for n in range(5)], requested_by=1000,
                         origin="report")
    records.enqueue_many(store, [(f"/s/c{n}", []) for n in range(5)], requested_by=0,
                         origin="check")
    taken = []
    while (row := records.claim_next(store, "w", running_per_uid=2)) is not None:
        taken.append(row["requested_by"])
    assert taken.count(1000) == 2 and taken.count(0) == 5
    records.finish(store, 1, ok=True, path="/s/u0", file_state=records.WHOLE)
    assert records.claim_next(store, "w", running_per_uid=2)["requested_by"] == 1000


def test_prune_removes_finished_requests_only_and_each_users_oldest_beyond_the_kept(store):
    ids = [i for i, _ in records.enqueue_many(store, [(f"/s/f{n}", []) for n in range(30)],
                                              requested_by=1000, origin="report")]
    other = [i for i, _ in records.enqueue_many(store, [(f"/s/o{n}", []) for n in range(3)],
                                                requested_by=2000, origin="report")]
    for request_id in ids[:25] + other:
        assert records.claim(store, request_id, "w")
        records.finish(store, request_id, ok=True, path=records.request(store, request_id)["path"],
                       file_state=records.WHOLE)
    # 25 + 3 finished, 5 of 1000's still queued
    finished_1000 = [r["request_id"] for r in store.query(
        "SELECT request_id FROM recovery_requests WHERE requested_by = 1000 AND state = ? "
        "ORDER BY request_id", (records.DONE,))]
    assert len(finished_1000) == 25
    # nothing is old enough; 1000 keeps its newest 10 finished, 2000 all of its 3
    assert records.prune(store, before=0.0, kept_per_uid=10, limit=100) == 15
    left = {r["request_id"]: (r["requested_by"], r["state"]) for r in store.query(
        "SELECT request_id, requested_by, state FROM recovery_requests")}
    assert [i for i in finished_1000 if i in left] == finished_1000[-10:]
    assert all(i in left for i in other)
    assert sum(1 for uid, state in left.values() if state == records.QUEUED) == 5
    # past the retention every finished one goes, at most `limit` a call; queued ones stay
    assert records.prune(store, before=time.time() + 1, kept_per_uid=10, limit=8) == 8
    assert records.prune(store, before=time.time() + 1, kept_per_uid=10, limit=8) == 5
    assert records.request_counts(store) == [(records.QUEUED, 5)]
    # the file states of the removed requests' files went with them (queued files stay)
    assert store.query("SELECT COUNT(*) FROM recovery_files WHERE state = ?",
                       (records.WHOLE,))[0][0] == 0
    assert store.query("SELECT COUNT(*) FROM recovery_files")[0][0] == 5


def test_a_pending_limit_refuses_new_requests_but_not_joins(store):
    records.enqueue_many(store, [("/s/a", []), ("/s/b", [])], requested_by=1000,
                         origin="report", pending_limit=2)
    with pytest.raises(ServiceBusy, match="at most 2"):
        records.enqueue_many(store, [("/s/c", [])], requested_by=1000, origin="report",
                             pending_limit=2)
    (joined, created), = records.enqueue_many(store, [("/s/a", [3])], requested_by=1000,
                                              origin="report", pending_limit=2)
    assert not created and records.request(store, joined)["reported_osts"] == "[3]"
    records.enqueue_many(store, [("/s/c", [])], requested_by=2000, origin="report",
                         pending_limit=2)  # another user's count
    assert store.query("SELECT COUNT(*) FROM recovery_requests")[0][0] == 3
