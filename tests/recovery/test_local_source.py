"""Recovery with a file:// source and the rebuild calls it relies on (no cluster needed)."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import threading
import time
from dataclasses import replace

import pytest

from scratchkeeper.errors import StorageError
from scratchkeeper.recovery import gather, rebuilding
from scratchkeeper.recovery.outcome import LOST, PATCHED
from scratchkeeper.recovery.reconstruct import Recoverer
from scratchkeeper.storage import OST_ACTIVE, Extent, LayoutRequest, OstStatus

from .conftest import read_all, stage, write_site

KiB = 1 << 10


@pytest.fixture
def local_site(tmp_path):
    return write_site(tmp_path / "site", ost_count=12,
                      extra="[recovery]\nsync_bytes = 67108864")  # the default: batched syncs


def test_batched_patch_from_a_file_source(local_site, tmp_path):
    data = os.urandom(5_000_011)
    source = tmp_path / "source.bin"
    source.write_bytes(data)
    backend = local_site.backend
    path = stage(backend, "f.bin", data, f"file://{source}", stripe_count=4,
                 stripe_size=64 * KiB)
    layout = backend.layout(path)
    backend.fail_ost(layout.ost_list[2])
    backend.fail_ost(layout.ost_list[3])
    outcome = Recoverer(backend, local_site.config).recover(path)
    assert outcome.state == PATCHED and outcome.verified == "file"
    assert outcome.patched_bytes == sum(
        e.length for ost in layout.ost_list[2:] for e in layout.extents_on_ost(ost, len(data)))
    assert read_all(backend, path) == data


def test_changed_file_source_is_caught_by_the_file_checksum(local_site, tmp_path):
    data = os.urandom(1_000_003)
    source = tmp_path / "source.bin"
    source.write_bytes(data)
    backend = local_site.backend
    path = stage(backend, "g.bin", data, f"file://{source}", stripe_count=2,
                 stripe_size=64 * KiB)
    source.write_bytes(bytes(len(data)))  # same size, other bytes: only a checksum can tell
    failed = backend.layout(path).ost_list[0]
    backend.fail_ost(failed)
    outcome = Recoverer(backend, local_site.config).recover(path)
    assert outcome.state == LOST and "SHA-256" in outcome.reason
    assert failed in backend.layout(path).ost_list and backend.open_rebuilds() == []


def test_read_rebuild_and_batched_writes(local_site):
    backend = local_site.backend
    data = bytes(range(256)) * 4096  # 1 MiB
    backend.create("r.bin", LayoutRequest(stripe_count=4, stripe_size=64 * KiB))
    backend.write("r.bin", 0, data)
    layout = backend.layout("r.bin")
    failed = layout.ost_list[0]
    backend.fail_ost(failed)
    rebuild = backend.begin_rebuild("r.bin", {failed: backend.pick_substitute(layout)})
    pieces = [(e.offset, data[e.offset:e.end]) for e in rebuild.lost]
    backend.write_rebuild_batch(rebuild, pieces[::2])
    backend.write_rebuild_batch(rebuild, pieces[1::2])
    assert rebuild.missing == []
    assert backend.read_rebuild(rebuild, 0, len(data)) == data
    assert backend.read_rebuild(rebuild, 1000, 70_000) == data[1000:71_000]
    with pytest.raises(StorageError, match="not in a lost range"):
        survivor = next(e for e in layout.extents_on_ost(layout.ost_list[1], len(data)))
        backend.write_rebuild_batch(rebuild, [(survivor.offset, b"x")])
    backend.commit_rebuild(rebuild)
    assert backend.read("r.bin", 0, len(data)) == data
    assert hashlib.sha256(read_all(backend, "r.bin")).digest() == hashlib.sha256(data).digest()


def _damaged(tmp_path, name: str, size: int, extra: str, failed_position: int):
    """A site whose file ``name``, staged from a file:// source, lost one OST's stripes."""
    site = write_site(tmp_path / "site", ost_count=8, extra=extra)
    data = os.urandom(size)
    source = tmp_path / "source.bin"
    source.write_bytes(data)
    path = stage(site.backend, name, data, f"file://{source}", stripe_count=2,
                 stripe_size=64 * KiB)
    site.backend.fail_ost(site.backend.layout(path).ost_list[failed_position])
    return site, site.backend, path, data


def test_stopping_leaves_the_rebuild_and_a_restart_resumes_it(tmp_path):
    from scratchkeeper.recovery.gather import RecoveryInterrupted
    site, backend, path, data = _damaged(tmp_path, "s.bin", 3_000_017,
                                         "[recovery]\nsync_bytes = 1", 1)
    first = Recoverer(backend, site.config)
    recorded = []

    def stop_after_some(done, total):
        if done >= total // 3:
            first.stop.set()  # SIGTERM in the daemon

    with pytest.raises(RecoveryInterrupted):
        first.recover(path, on_rebuild=recorded.append, progress=stop_after_some)
    (rebuild,) = backend.open_rebuilds()
    assert recorded == [rebuild.rebuild_id]
    already = sum(e.length for e in rebuild.patched)
    assert 0 < already < sum(e.length for e in rebuild.lost)
    outcome = Recoverer(backend, site.config).recover(path, resume_rebuild_id=rebuild.rebuild_id)
    assert outcome.state == PATCHED and outcome.verified == "file"
    assert outcome.patched_bytes == sum(e.length for e in rebuild.lost) - already
    assert read_all(backend, path) == data and backend.open_rebuilds() == []


@pytest.mark.parametrize("interval,recorded_before_commit", [(3600.0, False), (0.0, True)])
def test_journal_updates_wait_for_the_interval_and_the_commit_records_the_rest(
        tmp_path, monkeypatch, interval, recorded_before_commit):
    """A journal update costs fsyncs: a patch quicker than the interval has none but its commit."""
    site, backend, path, data = _damaged(
        tmp_path, "j.bin", 2_000_003,
        f"[recovery]\nsync_bytes = 1\njournal_interval = {interval}", 0)
    records, commits = [], []
    real_record, real_commit = backend.record_patched, backend.commit_rebuilds
    monkeypatch.setattr(backend, "record_patched",
                        lambda rebuild, extents: (records.append(list(extents)),
                                                  real_record(rebuild, extents)))
    monkeypatch.setattr(backend, "commit_rebuilds",
                        lambda items: (commits.extend(list(patched) for _, patched in items),
                                       real_commit(items))[1])
    outcome = Recoverer(backend, site.config).recover(path)
    assert outcome.state == PATCHED and read_all(backend, path) == data
    lost = sum(e.length for e in backend.layout(path).extents_on_ost(
        backend.layout(path).ost_list[0], len(data)))
    recorded = sum(e.length for batch in records for e in batch)
    (at_commit,) = commits
    assert recorded + sum(e.length for e in at_commit) == lost == outcome.patched_bytes
    assert bool(records) is recorded_before_commit


@pytest.mark.parametrize("uri,method,chunks,size,lanes", [
    ("ftp://127.0.0.1:1/f", "eret", 64, 1 << 20, 1),      # one MODE E transfer carries them all
    ("ftp://127.0.0.1:1/f", "eret", 300, 1 << 20, 2),     # more ranges than one transfer takes
    ("ftp://127.0.0.1:1/f", "eret-per-range", 64, 1 << 20, 4),
    ("http://127.0.0.1:1/f", "eret", 64, 1 << 20, 4),     # curl: 16 ranges a process
    ("http://127.0.0.1:1/f", "eret", 64, 64 * KiB, 1),    # 4 MiB: not worth a second connection
    ("store", "eret", 64, 1 << 20, 4),
])
def test_lanes_open_a_connection_only_where_one_request_cannot_carry_the_ranges(
        tmp_path, uri, method, chunks, size, lanes):
    from scratchkeeper.recovery import plan as planning
    site = write_site(tmp_path / "site", ost_count=4,
                      extra=f'[recovery]\nftp_method = "{method}"')
    recoverer = Recoverer(site.backend, site.config)
    source = planning.PatchSource(uri, planning.STORE if uri == "store" else "uri")
    assert recoverer._lanes(source, [Extent(i * size, size) for i in range(chunks)]) == lanes
    recoverer.readers.close_all()  # nothing was connected: the readers only told their limits


# -- one probe for the many files an OST failure hits ---------------------------------------------
def _counting_probes(backend, monkeypatch):
    """The OST probes made: None for one of every OST, else the set of OSTs probed."""
    probes = []
    real = backend.check_osts

    def counted(timeout, only=None):
        probes.append(None if only is None else set(only))
        return real(timeout, only=only)

    monkeypatch.setattr(backend, "check_osts", counted)
    return probes


def _files_on(backend, tmp_path, osts, count, prefix="many"):
    files = []
    for number in range(count):
        data = os.urandom(700_001 + number)
        source = tmp_path / f"{prefix}-source-{number}.bin"
        source.write_bytes(data)
        files.append((stage(backend, f"{prefix}-{number}.bin", data, f"file://{source}",
                            stripe_count=len(osts), stripe_size=64 * KiB, osts=osts), data))
    return files


def test_one_probe_serves_the_files_an_ost_failure_hits(local_site, tmp_path, monkeypatch):
    backend = local_site.backend
    files = _files_on(backend, tmp_path, (0, 1, 2, 3), 5)
    backend.fail_ost(2)
    probes = _counting_probes(backend, monkeypatch)
    recoverer = Recoverer(backend, local_site.config)
    for path, data in files:
        outcome = recoverer.recover(path, reported_osts=(2,))
        assert outcome.state == PATCHED and read_all(backend, path) == data
    # one probe of every OST; the files after it probe only their own four
    assert probes == [None] + [{0, 1, 2, 3}] * 4


def test_a_report_naming_a_failed_ost_of_the_file_connects_before_the_probe(
        local_site, tmp_path, monkeypatch):
    """recoveryd's check (or a reader) names the failed OST: the source's connection opens
    while the OSTs are probed; without a report it opens once the probe found bytes lost,
    and a report naming an OST outside the file opens nothing ahead."""
    backend = local_site.backend
    files = _files_on(backend, tmp_path, (0, 1, 2, 3), 3)
    backend.fail_ost(2)
    steps = []
    real_warm, real_probe = Recoverer._warm, Recoverer._probe

    def warm(self, uri, owner=None):
        steps.append("connect")
        return real_warm(self, uri, owner)

    def probe(self, file_osts, fresh, since):
        steps.append("probe")
        return real_probe(self, file_osts, fresh, since)
    monkeypatch.setattr(Recoverer, "_warm", warm)
    monkeypatch.setattr(Recoverer, "_probe", probe)
    for (path, data), reported, expected in (
            (files[0], (2,), ["connect", "probe", "connect"]),
            (files[1], (), ["probe", "connect"]),
            (files[2], (9,), ["probe", "connect"])):
        steps.clear()
        outcome = Recoverer(backend, local_site.config).recover(path, reported_osts=reported)
        assert outcome.state == PATCHED and read_all(backend, path) == data
        assert steps == expected, (reported, steps)


def test_a_probe_is_not_reused_past_its_window_or_with_reuse_off(local_site, tmp_path,
                                                                  monkeypatch):
    backend = local_site.backend
    files = _files_on(backend, tmp_path, (4, 5, 6, 7), 4)
    backend.fail_ost(5)
    probes = _counting_probes(backend, monkeypatch)
    off = replace(local_site.config,
                  recovery=replace(local_site.config.recovery, probe_reuse=0.0))
    recoverer = Recoverer(backend, off)
    for path, _ in files[:2]:
        assert recoverer.recover(path).state == PATCHED
    assert len(probes) == 2
    recoverer = Recoverer(backend, local_site.config)
    assert recoverer.recover(files[2][0]).state == PATCHED
    later = time.monotonic() + local_site.config.recovery.probe_reuse + 1
    monkeypatch.setattr(rebuilding.time, "monotonic", lambda: later)
    assert recoverer.recover(files[3][0]).state == PATCHED
    assert probes == [None] * 4
    assert [read_all(backend, path) for path, _ in files] == [data for _, data in files]


def test_a_reused_probe_never_hides_a_newer_failure(local_site, tmp_path, monkeypatch):
    backend = local_site.backend
    first = _files_on(backend, tmp_path, (0, 1, 2, 3), 1, prefix="first")
    second = _files_on(backend, tmp_path, (8, 9, 10, 11), 2, prefix="second")
    probes = _counting_probes(backend, monkeypatch)
    recoverer = Recoverer(backend, local_site.config)
    backend.fail_ost(1)
    assert recoverer.recover(first[0][0]).state == PATCHED
    # OST 9 fails after that probe: the probe it would reuse saw it healthy
    backend.fail_ost(9)
    outcome = recoverer.recover(second[0][0])
    assert outcome.state == PATCHED and 9 in outcome.failed_osts
    assert read_all(backend, second[0][0]) == second[0][1]
    backend.fail_ost(10)
    outcome = recoverer.recover(second[1][0], reported_osts=(10,))
    assert outcome.state == PATCHED and set(outcome.failed_osts) == {9, 10}
    assert read_all(backend, second[1][0]) == second[1][1]
    assert probes == [None, {8, 9, 10, 11}, {8, 9, 10, 11}]  # each file's own OSTs, probed now


def _request(site, recoverer, path):
    """Recover ``path`` as recoveryd does (request, outcome, file state); the result and store."""
    from scratchkeeper.recovery import records
    from scratchkeeper.recovery.service import process_request
    from scratchkeeper.state import StateStore
    store = records.open_records(StateStore(site.config.state.database))
    request_id, _ = records.enqueue(store, path, reported_osts=[], requested_by=0,
                                    origin="recover")
    assert records.claim(store, request_id, "test")
    return process_request(store, recoverer, records.request(store, request_id)), store


def test_a_reused_probe_never_decides_what_a_rebuild_replaces(local_site, tmp_path):
    """Within probe_reuse, OST 1 came back and OST 9 failed since the last probe: the rebuild
    replaces OST 9 only, and the file is whole afterwards (not "patched" and still damaged:
    with block digests only the patched blocks are read back)."""
    from scratchkeeper.recovery import records
    from scratchkeeper.recovery.service import file_status
    from scratchkeeper.state import StateStore
    backend = local_site.backend
    store = records.open_records(StateStore(local_site.config.state.database))
    first = _files_on(backend, tmp_path, (0, 1, 2, 3), 1, prefix="first")
    data = os.urandom(900_007)
    (tmp_path / "second.bin").write_bytes(data)
    path = stage(backend, "second.bin", data, f"file://{tmp_path / 'second.bin'}",
                 stripe_count=4, stripe_size=64 * KiB, osts=(1, 9, 10, 11), digest_store=store,
                 digest_block=64 * KiB)
    recoverer = Recoverer(backend, local_site.config, store=store)
    backend.fail_ost(1)
    assert recoverer.recover(first[0][0]).state == PATCHED  # the probe: OST 1 failed
    backend.restore_ost(1)
    backend.fail_ost(9)
    result, store = _request(local_site, recoverer, path)
    assert result["state"] == PATCHED and result["failed_osts"] == [9]
    assert list(result["substitutes"]) == ["9"] and result["verified"] == "blocks"
    assert result["patched_bytes"] == sum(
        e.length for e in backend.layout(path).extents_on_ost(result["substitutes"]["9"],
                                                               len(data)))
    assert read_all(backend, path) == data
    assert file_status(store, backend, path)["state"] == "whole"


def test_a_reused_probe_never_marks_a_whole_file_lost(local_site, tmp_path):
    """OST 1 came back since the probe that saw it failed: a file on it is whole, not lost
    (its source is gone, so a needless rebuild would fail and mark it lost)."""
    from scratchkeeper.recovery.service import file_status
    backend = local_site.backend
    first = _files_on(backend, tmp_path, (0, 1, 2, 3), 1, prefix="first")
    (path, data), = _files_on(backend, tmp_path, (1, 4, 5, 6), 1, prefix="gone")
    (tmp_path / "gone-source-0.bin").unlink()
    recoverer = Recoverer(backend, local_site.config)
    backend.fail_ost(1)
    assert recoverer.recover(first[0][0]).state == PATCHED
    backend.restore_ost(1)
    result, store = _request(local_site, recoverer, path)
    assert result["state"] == "whole", result
    status = file_status(store, backend, path)
    assert status["state"] == "whole" and status["whole"]
    assert backend.get_xattr(path, "user.scratchkeeper.lost") is None
    assert read_all(backend, path) == data


# -- probes asked for together, made as one ---------------------------------------------------------
def test_probes_asked_for_while_one_runs_are_made_as_one_after_it():
    """Callers that ask while a probe runs never get its answer (it began before they asked):
    they gather, and one probe of the union of their OSTs, begun after they asked, serves all."""
    made, running, release = [], threading.Event(), threading.Event()

    def run(osts):
        made.append(None if osts is None else set(osts))
        if len(made) == 1:
            running.set()
            assert release.wait(10)
        return [OstStatus(i, "ost", OST_ACTIVE) for i in sorted(osts or {0, 1, 2, 3, 4, 5})]

    group = gather.ProbeGroup(run)
    answers = {}

    def ask(name, osts):
        answers[name] = {o.ost_index for o in group.probe(osts)}

    first = threading.Thread(target=ask, args=("first", {0, 1}))
    first.start()
    assert running.wait(10)
    later = [threading.Thread(target=ask, args=(name, osts))
             for name, osts in (("b", {2, 3}), ("c", {3, 4}))]
    for thread in later:
        thread.start()
    deadline = time.monotonic() + 10
    while group._next.osts != {2, 3, 4} and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    for thread in [first, *later]:
        thread.join(10)
    assert made == [{0, 1}, {2, 3, 4}]
    assert answers == {"first": {0, 1}, "b": {2, 3, 4}, "c": {2, 3, 4}}


def test_a_probe_of_every_ost_asked_for_with_others_covers_them():
    made = []
    group = gather.ProbeGroup(lambda osts: made.append(osts) or [])
    group._next.ask({1})  # a caller waits for a probe of OST 1
    group.probe(None)
    assert made == [None]
    group.probe({5})
    assert made == [None, {5}]


def test_a_probe_begun_after_a_recovery_began_answers_it_and_no_older_one():
    made = []
    group = gather.ProbeGroup(lambda osts: made.append(osts) or [])
    began = time.monotonic()
    group.probe({1, 2})
    group.probe({2}, since=began)  # begun after: it answers
    group.probe({2, 3}, since=began)  # does not cover OST 3
    group.probe({2}, since=time.monotonic())  # begun before: probed anew
    group.probe({2})  # no start given: probed anew
    assert made == [{1, 2}, {2, 3}, {2}, {2}]


def test_a_failed_probe_fails_every_caller_of_its_round():
    group = gather.ProbeGroup(lambda osts: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        group.probe({1})
    with pytest.raises(ZeroDivisionError):  # the next round probes again, and fails again
        group.probe({1})


def test_recoveries_started_together_share_the_probe_of_their_own_osts(local_site, tmp_path,
                                                                       monkeypatch):
    """Two file workers start two files of one failure at once: their own OSTs are probed once
    for both, after both began (and the probe of every OST before serves the substitutes)."""
    backend = local_site.backend
    files = _files_on(backend, tmp_path, (0, 1, 2, 3), 3)
    backend.fail_ost(2)
    recoverer = Recoverer(backend, local_site.config)
    assert recoverer.recover(files[0][0]).state == PATCHED
    probes = _counting_probes(backend, monkeypatch)
    both = threading.Barrier(2)
    real = recoverer._probe

    def together(file_osts, fresh, since):
        both.wait(10)  # both recoveries began before either probes
        return real(file_osts, fresh, since)

    monkeypatch.setattr(recoverer, "_probe", together)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(recoverer.recover, [path for path, _ in files[1:]]))
    assert [o.state for o in outcomes] == [PATCHED, PATCHED]
    assert probes == [{0, 1, 2, 3}]
    assert [read_all(backend, path) for path, _ in files] == [data for _, data in files]


def test_the_periodic_check_probe_serves_the_recoveries_it_queues(local_site, tmp_path,
                                                                  monkeypatch):
    from scratchkeeper.recovery import records
    from scratchkeeper.recovery.service import RecoveryService, process_request

    from .conftest import NoQueue
    backend = local_site.backend
    files = _files_on(backend, tmp_path, (0, 1, 2, 3), 2)
    backend.fail_ost(1)
    service = RecoveryService(local_site.config, backend=backend, scheduler=NoQueue())
    records.open_records(service.store)
    probes = _counting_probes(backend, monkeypatch)
    assert sorted(service.check_cycle()) == sorted(path for path, _ in files)
    while (row := records.claim_next(service.store, "test")) is not None:
        assert process_request(service.store, service.recoverer, row)["state"] == PATCHED
    # the check's probe of every OST, then each file's own OSTs: no second probe of all
    assert probes == [None, {0, 1, 2, 3}, {0, 1, 2, 3}]
    assert [read_all(backend, path) for path, _ in files] == [data for _, data in files]


def test_the_check_queues_the_files_of_a_failure_together(local_site, tmp_path, monkeypatch):
    """The workers are woken once, with every file of the failure queued: one woken by the
    first file alone would recover it alone, outside the probes and rebuilds the others share
    (benchmarks/recovery: 0.63 s against 0.49 s for 8 files)."""
    from scratchkeeper.recovery import records
    from scratchkeeper.recovery.service import RecoveryService

    from .conftest import NoQueue
    backend = local_site.backend
    files = _files_on(backend, tmp_path, (0, 1, 2, 3), 3)
    backend.fail_ost(1)
    service = RecoveryService(local_site.config, backend=backend, scheduler=NoQueue())
    records.open_records(service.store)

    def queued() -> int:
        with service.store.transaction() as conn:
            return conn.execute("SELECT COUNT(*) FROM recovery_requests WHERE state = ?",
                                (records.QUEUED,)).fetchone()[0]

    woken = []
    monkeypatch.setattr(service, "_notify", lambda: woken.append(queued()))
    assert sorted(service.check_cycle()) == sorted(path for path, _ in files)
    assert woken == [3]
    # a second report of a queued file joins its request, with the OSTs merged
    path = files[0][0]
    first = records.active_request(service.store, path)["request_id"]
    assert records.enqueue_many(service.store, [(path, [2])], requested_by=0,
                                origin="test") == [(first, False)]
    assert json.loads(records.active_request(service.store, path)["reported_osts"]) == [1, 2]


def test_calls_made_while_one_runs_are_made_together_after_it():
    made, running, release = [], threading.Event(), threading.Event()

    def run(items):
        made.append(list(items))
        if len(made) == 1:
            running.set()
            assert release.wait(10)
        return [ValueError(item) if item == "bad" else item.upper() for item in items]

    gathered = gather.Gathered(run)
    answers = {}

    def call(item):
        try:
            answers[item] = gathered(item)
        except ValueError as err:
            answers[item] = err

    first = threading.Thread(target=call, args=("a",))
    first.start()
    assert running.wait(10)
    later = [threading.Thread(target=call, args=(item,)) for item in ("b", "bad")]
    for thread in later:
        thread.start()
    deadline = time.monotonic() + 10
    while len(gathered._next) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    for thread in [first, *later]:
        thread.join(10)
    assert made == [["a"], ["b", "bad"]]
    assert answers["a"] == "A" and answers["b"] == "B" and isinstance(answers["bad"], ValueError)
