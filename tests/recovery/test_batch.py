"""An OST failure's files recovered as one batch (issue 43): one claim, one probe of their OSTs,
their rebuilds begun in one call, every file patching at once within the patch budget, their
layouts switched in one namespace transaction and their requests closed in one.

No cluster: a private site and file:// sources.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from scratchkeeper.errors import TransferError
from scratchkeeper.recovery import gather, patching, records
from scratchkeeper.recovery.outcome import LOST, PATCHED
from scratchkeeper.recovery.reconstruct import Recoverer, process_batch
from scratchkeeper.recovery.service import RecoveryService
from scratchkeeper.state import StateStore
from scratchkeeper.storage.base import XATTR_PREFIX

from .conftest import NoQueue, read_all, stage, write_site

KiB = 1 << 10
MiB = 1 << 20


@pytest.fixture
def local_site(tmp_path):
    return write_site(tmp_path / "site", ost_count=12,
                      extra="[recovery]\nsync_bytes = 67108864")  # the default: batched syncs


def _files_on(backend, tmp_path, osts, count, size=700_001):
    files = []
    for number in range(count):
        data = os.urandom(size + number)
        source = tmp_path / f"batch-source-{number}.bin"
        source.write_bytes(data)
        files.append((stage(backend, f"batch-{number}.bin", data, f"file://{source}",
                            stripe_count=len(osts), stripe_size=64 * KiB, osts=osts), data))
    return files


def _calls(monkeypatch, owner, name: str) -> list:
    """The (args, kwargs) of every call of ``owner.name`` from now on (the call still made)."""
    made = []
    real = getattr(owner, name)

    def counted(*args, **kwargs):
        made.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return made


def _transactions(monkeypatch, store) -> list:
    """One entry per outermost transaction of ``store`` from now on (nested ones join it)."""
    made = []
    real = store.transaction

    def counted(*args, **kwargs):
        if not store.connection().in_transaction:
            made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "transaction", counted)
    return made


def _failure(site, tmp_path, count, *, osts=(0, 1, 2, 3), failed=1, size=700_001):
    backend = site.backend
    files = _files_on(backend, tmp_path, osts, count, size)
    backend.fail_ost(failed)
    service = RecoveryService(site.config, backend=backend, scheduler=NoQueue())
    records.open_records(service.store)
    return backend, files, service


def test_one_claim_takes_a_failures_files_and_a_users_batch_is_bounded(local_site,
                                                                       monkeypatch):
    store = records.open_records(StateStore(local_site.config.state.database))
    check = [request_id for request_id, _ in records.enqueue_many(
        store, [(f"/s/f{n}", [1]) for n in range(5)], requested_by=0, origin="check")]
    user = [records.enqueue(store, f"/s/u{n}", reported_osts=[1], requested_by=1000,
                            origin="report")[0] for n in range(4)]
    transactions = _transactions(monkeypatch, store)
    first = records.claim_batch(store, "w", running_per_uid=2)
    # root's five (they waited longest), in one transaction; none of the user's
    assert [row["request_id"] for row in first] == check and len(transactions) == 1
    assert {(row["state"], row["worker"]) for row in first} == {(records.RUNNING, "w")}
    # the user's: at most workers_per_uid running at once, whatever they have queued
    assert [row["request_id"] for row in records.claim_batch(store, "w", running_per_uid=2)] \
        == user[:2]
    assert records.claim_batch(store, "w", running_per_uid=2) == []
    records.finish(store, user[0], ok=True, path="/s/u0", file_state=records.WHOLE)
    assert [row["request_id"] for row in records.claim_batch(store, "w", running_per_uid=2)] \
        == [user[2]]
    assert [row["request_id"] for row in records.claim_batch(store, "w", limit=1)] == [user[3]]
    assert records.claim_batch(store, "w") == []


def test_a_failure_is_recovered_as_one_batch(local_site, tmp_path, monkeypatch):
    backend, files, service = _failure(local_site, tmp_path, 6)
    probes = _calls(monkeypatch, backend, "check_osts")
    begins = _calls(monkeypatch, backend, "begin_rebuilds")
    commits = _calls(monkeypatch, backend, "commit_rebuilds")
    closes = _calls(monkeypatch, records, "finish_many")
    queued = service.check_cycle()
    assert sorted(queued) == sorted(path for path, _ in files)
    rows = records.claim_batch(service.store, service.worker)
    assert sorted(row["path"] for row in rows) == sorted(queued)
    namespace = _transactions(monkeypatch, backend.db)
    results = process_batch(service.store, service.recoverer, rows)
    assert [result["state"] for result in results] == [PATCHED] * 6
    assert [result["verified"] for result in results] == ["file"] * 6
    # the check's probe of every OST, then the files' own OSTs once for all of them
    assert [kwargs.get("only") for _, kwargs in probes] == [None, {0, 1, 2, 3}]
    # their rebuilds begun in one call, their layouts switched in one: one namespace
    # transaction each, nothing else
    assert [len(args[0]) for args, _ in begins] == [6]
    assert [len(args[0]) for args, _ in commits] == [6]
    assert len(namespace) == 2
    # and the requests closed together
    assert [len(args[1]) for args, _ in closes] == [6]
    assert all(records.active_request(service.store, path) is None for path, _ in files)
    assert [read_all(backend, path) for path, _ in files] == [data for _, data in files]


def test_every_file_of_a_batch_patches_at_once(local_site, tmp_path, monkeypatch):
    """Each file's first bytes wait until every file of the batch has asked its source for
    some: files patched a few at a time would never all get there."""
    count = 5
    backend, files, service = _failure(local_site, tmp_path, count)
    together = threading.Barrier(count, timeout=20)
    started: set[str] = set()
    lock = threading.Lock()
    real_fetch = Recoverer._fetch

    def fetch(self, reader, rebuild, batch, **kwargs):
        with lock:
            first = rebuild.path not in started
            started.add(rebuild.path)
        if first:
            try:
                together.wait()
            except threading.BrokenBarrierError:
                raise TransferError(f"{rebuild.path}: patched before every file of its batch "
                                    "was in flight", permanent=True) from None
        yield from real_fetch(self, reader, rebuild, batch, **kwargs)

    monkeypatch.setattr(Recoverer, "_fetch", fetch)
    service.check_cycle()
    results = process_batch(service.store, service.recoverer,
                            records.claim_batch(service.store, service.worker))
    assert [result["state"] for result in results] == [PATCHED] * count, results
    assert [read_all(backend, path) for path, _ in files] == [data for _, data in files]


def test_the_bytes_in_flight_stay_within_the_patch_budget(tmp_path, monkeypatch):
    site = write_site(tmp_path / "site", ost_count=12,
                      extra=f"[recovery]\npatch_budget = {MiB}\nchunk_size = 65536")
    backend, files, service = _failure(site, tmp_path, 8)  # 8 x 175 KiB lost: 1.3 MiB
    budget = service.recoverer.budget
    seen: list[int] = []
    real_take = budget.take

    def take(wanted, least, give_up):
        granted = real_take(wanted, least, give_up)
        seen.append(budget.in_flight)
        return granted

    monkeypatch.setattr(budget, "take", take)
    service.check_cycle()
    results = process_batch(service.store, service.recoverer,
                            records.claim_batch(service.store, service.worker))
    assert [result["state"] for result in results] == [PATCHED] * 8
    lost = [result["patched_bytes"] for result in results]
    assert sum(lost) > MiB  # more than the budget: some files waited for others' bytes
    assert max(lost) < max(seen) <= MiB, seen  # several files in flight, never beyond it
    assert budget.in_flight == 0, "every byte taken was given back"
    assert [read_all(backend, path) for path, _ in files] == [data for _, data in files]


def test_a_budget_smaller_than_the_failure_patches_fewer_files_each_in_a_worthy_transfer(
        tmp_path, monkeypatch):
    """A transfer is worth its connection for LANE_BYTES at least: with room for two, two
    files patch at once, each asking for all its bytes, rather than every file in slivers."""
    monkeypatch.setattr(patching, "LANE_BYTES", 512 * KiB)
    site = write_site(tmp_path / "site", ost_count=12,
                      extra=f"[recovery]\npatch_budget = {MiB}\nchunk_size = 65536")
    backend, files, service = _failure(site, tmp_path, 5, size=2 * MiB)  # 512 KiB lost each
    budget = service.recoverer.budget
    grants: list[tuple[int, int, int]] = []  # (wanted, granted, in flight after)
    real_take = budget.take

    def take(wanted, least, give_up):
        granted = real_take(wanted, least, give_up)
        grants.append((wanted, granted, budget.in_flight))
        return granted

    monkeypatch.setattr(budget, "take", take)
    service.check_cycle()
    results = process_batch(service.store, service.recoverer,
                            records.claim_batch(service.store, service.worker))
    assert [result["state"] for result in results] == [PATCHED] * 5
    assert [(wanted, granted) for wanted, granted, _ in grants] == [(512 * KiB,) * 2] * 5
    assert max(in_flight for _, _, in_flight in grants) == MiB  # two files at once
    assert [read_all(backend, path) for path, _ in files] == [data for _, data in files]


def test_a_file_lost_in_a_batch_leaves_the_others_patched(local_site, tmp_path, monkeypatch):
    backend, files, service = _failure(local_site, tmp_path, 4)
    (tmp_path / "batch-source-2.bin").unlink()  # its source is gone
    closes = _calls(monkeypatch, records, "finish_many")
    service.check_cycle()
    rows = records.claim_batch(service.store, service.worker)
    results = {row["path"]: result for row, result in
               zip(rows, process_batch(service.store, service.recoverer, rows))}
    lost = files[2][0]
    assert results[lost]["state"] == LOST and "no such file" in results[lost]["reason"]
    assert backend.get_xattr(lost, XATTR_PREFIX + "lost")
    for path, data in files[:2] + files[3:]:
        assert results[path]["state"] == PATCHED and read_all(backend, path) == data
        assert backend.get_xattr(path, XATTR_PREFIX + "lost") is None
    assert [len(args[1]) for args, _ in closes] == [4]
    assert records.file_state(service.store, lost)["state"] == records.LOST
    assert backend.open_rebuilds() == []


def test_a_substitute_failing_mid_batch_is_replaced_for_the_files_it_served(
        local_site, tmp_path, monkeypatch):
    """A substitute OST fails under the first bytes written to it: the files it served try
    again together with another one (the others are patched in the first attempt)."""
    backend, files, service = _failure(local_site, tmp_path, 3)
    begins = _calls(monkeypatch, backend, "begin_rebuilds")
    real_write = backend.write_rebuild_batch
    failed: list[int] = []

    def write(rebuild, pieces, **kwargs):
        if not failed:
            failed.append(next(iter(rebuild.substitutes.values())))
            backend.fail_ost(failed[0])
        return real_write(rebuild, pieces, **kwargs)

    monkeypatch.setattr(backend, "write_rebuild_batch", write)
    service.check_cycle()
    rows = records.claim_batch(service.store, service.worker)
    results = {row["path"]: result for row, result in
               zip(rows, process_batch(service.store, service.recoverer, rows))}
    served = sorted(path for path, substitutes in begins[0][0][0]
                    if failed[0] in substitutes.values())
    assert served and [len(args[0]) for args, _ in begins] == [3, len(served)]
    assert sorted(path for path, result in results.items() if result["attempts"] == 2) == served
    for path, data in files:
        assert results[path]["state"] == PATCHED, results[path]
        assert failed[0] not in results[path]["substitutes"].values()
        assert read_all(backend, path) == data
    assert backend.open_rebuilds() == []


# -- the budget on its own --------------------------------------------------------------------
def test_a_lane_gets_its_share_and_a_chunk_larger_than_the_budget_goes_alone():
    budget = gather.PatchBudget(100)
    never = lambda: False  # noqa: E731
    with budget.lane(), budget.lane(), budget.lane(), budget.lane():
        assert budget.take(100, 10, never) == 25  # a quarter each
        budget.give(25)
    with budget.lane():
        assert budget.take(60, 10, never) == 60
        assert budget.take(60, 10, never) == 40  # what is left
        assert budget.take(10, 10, lambda: True) == 0  # full: it gives up when told
        budget.give(100)
        assert budget.take(500, 150, never) == 150  # larger than all: alone
        assert budget.in_flight == 150
        budget.give(150)
    assert budget.in_flight == 0


def test_a_lane_waiting_for_the_budget_goes_on_once_bytes_are_written():
    budget = gather.PatchBudget(100)
    granted: list[int] = []
    asked = [0]

    def give_up() -> bool:  # asked each time the waiting lane looks again
        asked[0] += 1
        return False

    with budget.lane():
        assert budget.take(100, 10, lambda: False) == 100
        waiter = threading.Thread(target=lambda: granted.append(budget.take(50, 50, give_up)))
        waiter.start()
        deadline = time.monotonic() + 10
        while asked[0] < 1 and time.monotonic() < deadline:
            waiter.join(0.01)
        before = asked[0]
        budget.give(30)  # not enough for its least: it looks again and waits on
        while asked[0] <= before and time.monotonic() < deadline:
            waiter.join(0.01)
        assert asked[0] > before and granted == []
        budget.give(30)
        waiter.join(10)
    assert granted == [50] and budget.in_flight == 90
