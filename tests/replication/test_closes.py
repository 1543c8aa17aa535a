"""Close events: the tracker's rule, real inotify on a store's OST directories, changelogs."""

from __future__ import annotations

import time

import pytest

from scratchkeeper.errors import CommandError
from scratchkeeper.replication.closes import ChangelogReader, CloseTracker, InotifyWatcher, parse_changelog
from scratchkeeper.runner import CommandResult, CommandRunner, set_runner
from scratchkeeper.storage.local import LocalStripedStore


def test_tracker_needs_a_close_after_the_start_no_open_left_and_quiet():
    tracker = CloseTracker(quiet=1.0)
    tracker.watch("/s/a", ["o1", "o2"])
    tracker.event("o1", True, 10.0)
    tracker.event("o1", False, 10.1)
    assert not tracker.closed_since("/s/a", 9.0, 10.5)       # not quiet yet
    assert tracker.closed_since("/s/a", 9.0, 11.2)
    assert not tracker.closed_since("/s/a", 10.5, 11.2)      # that close was before the job
    tracker.event("o2", True, 12.0)                          # a read in progress
    assert not tracker.closed_since("/s/a", 9.0, 20.0)
    tracker.event("o2", False, 12.5)
    assert tracker.closed_since("/s/a", 12.0, 14.0)
    tracker.event("other", False, 15.0)                      # objects of other files: ignored
    tracker.unwatch("/s/a")
    assert not tracker.closed_since("/s/a", 0, 100) and tracker.watched() == set()


def test_close_before_the_watch_began_does_not_go_negative():
    tracker = CloseTracker(quiet=0.0)
    tracker.watch("/s/a", ["o1"])
    tracker.event("o1", False, 1.0)      # its open happened before the watch
    tracker.event("o1", True, 2.0)
    assert not tracker.closed_since("/s/a", 0.0, 3.0)
    tracker.event("o1", False, 2.5)
    assert tracker.closed_since("/s/a", 0.0, 3.0)


def test_inotify_sees_the_store_reader_close_its_objects(tmp_path):
    (tmp_path / "scratch").mkdir()
    store = LocalStripedStore(str(tmp_path / "scratch"), str(tmp_path / "store"), ost_count=4,
                              default_stripe_count=2, default_stripe_size=65536)
    path = str(tmp_path / "scratch" / "in.dat")
    store.create(path)
    store.write(path, 0, b"x" * 300_000)
    tracker = CloseTracker(quiet=0.2)
    watcher = InotifyWatcher([str(tmp_path / "store" / f"ost{i:04d}") for i in range(4)], tracker)
    watcher.start()
    try:
        tracker.watch(path, [o.object_id for c in store.layout(path).components for o in c.objects])
        started = time.time()
        assert b"".join(store.open_reader(path, chunk_size=65536)) == b"x" * 300_000
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not tracker.closed_since(path, started - 0.01,
                                                                       time.time()):
            time.sleep(0.05)
        assert tracker.closed_since(path, started - 0.01, time.time())
    finally:
        watcher.stop()


CHANGELOG = """\
14 01CREAT 10:30:59.112000000 2026.11.22 0x0 t=[0x200000402:0x11:0x0] j=bash.0 ef=0xf u=0:0 nid=0@lo p=[0x200000007:0x1:0x0] in.dat
15 10OPEN  10:31:01.229213148 2026.11.22 0x4a t=[0x200000402:0x11:0x0] j=cat.1000 ef=0x7 u=1000:1000 nid=0@lo m=r-- p=[0x200000007:0x1:0x0]
16 11CLOSE 10:31:01.240001234 2026.11.22 0x42 t=[0x200000402:0x11:0x0] j=cat.1000 ef=0x7 u=1000:1000 nid=0@lo
17 11CLOSE 10:31:02.000000001 2026.11.22 0x42 t=[0x200000402:0x12:0x0] j=cat.1000 ef=0x7 u=1000:1000 nid=0@lo
"""


def test_changelog_records_are_parsed():
    records = parse_changelog(CHANGELOG + "garbage line\n")
    assert [(r.recno, r.type_name) for r in records] == [(14, "CREAT"), (15, "OPEN"),
                                                         (16, "CLOSE"), (17, "CLOSE")]
    assert records[2].fid == "0x200000402:0x11:0x0"


class ChangelogLfs(CommandRunner):
    def __init__(self):
        super().__init__()
        self.cleared = []

    def run(self, argv, **kwargs):
        argv = tuple(argv)
        if argv[1] == "changelog":
            return CommandResult(argv, 0, CHANGELOG, "", 0.0)
        if argv[1] == "path2fid":
            if argv[2] == "/lustre/scratch/gone.dat":
                raise CommandError("lfs path2fid: No such file", argv=list(argv), returncode=2)
            fid = {"/lustre/scratch/in.dat": "0x200000402:0x11:0x0",
                   "/lustre/scratch/other.dat": "0x200000402:0x99:0x0"}[argv[2]]
            return CommandResult(argv, 0, f"[{fid}]\n", "", 0.0)
        if argv[1] == "changelog_clear":
            self.cleared.append(argv)
            return CommandResult(argv, 0, "", "", 0.0)
        raise AssertionError(argv)


def test_changelog_reader_maps_closes_to_paths_and_clears():
    fake = ChangelogLfs()
    previous = set_runner(fake)
    try:
        reader = ChangelogReader("lfs", "scratch-MDT0000", "cl1")
        paths, last = reader.closes({"/lustre/scratch/in.dat", "/lustre/scratch/other.dat",
                                     "/lustre/scratch/gone.dat"})
        # in.dat was opened and closed; other.dat has no record; records of other files ignored
        assert set(paths) == {"/lustre/scratch/in.dat"} and last == 17
        expected = time.mktime(time.strptime("2026.11.22 10:31:01", "%Y.%m.%d %H:%M:%S"))
        assert paths["/lustre/scratch/in.dat"] == pytest.approx(expected + 0.240001234)
        reader.clear(last)
        assert fake.cleared == [("lfs", "changelog_clear", "scratch-MDT0000", "cl1", "17")]
    finally:
        set_runner(previous)


def test_changelog_reader_needs_mdt_and_user():
    with pytest.raises(Exception, match="changelog_mdt and replication.changelog_user"):
        ChangelogReader("lfs", "", "cl1")
