"""tierd on a real local store, fed with read records as the mount writes them (the mount's own
records: tests/mount/test_mount_tiering.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from scratchkeeper.config import load_config
from scratchkeeper.errors import ConfigError
from scratchkeeper.storage import open_backend
from scratchkeeper.storage.layout import LayoutRequest
from scratchkeeper.tiering import records
from scratchkeeper.tiering.daemon import Tierd, report
from scratchkeeper.tiering.reads import parse_reads

SIZE = 256 * 1024


def site(tmp_path: Path, *, tiers: bool = True, extra: str = "") -> Path:
    path = tmp_path / "site.toml"
    tiering = """
tier_order = ["flash", "disk"]
[storage.pool_tiers]
disk = "disk"
flash = "flash"
""" if tiers else ""
    path.write_text(f"""
[storage]
scratch_root = "{tmp_path / 'scratch'}"
store_root = "{tmp_path / 'store'}"
ost_count = 4
stripe_count = 2
stripe_size = 65536
{tiering}
[storage.pools]
disk = "0-1"
flash = "2-3"
[state]
database = "{tmp_path / 'state.db'}"
[tiering]
hot_reads = 4
{extra or "budget = 8"}
""")
    return path


class Clock:
    def __init__(self):
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def make_file(backend, name: str, *, pool: str = "disk", size: int = SIZE) -> str:
    path = f"{backend.scratch_root}/{name}"
    backend.create(path, LayoutRequest(pool=pool))
    backend.write(path, 0, os.urandom(size))
    return path


def record(store_root: Path, path: str, reads: int, *, ino: int, at: float) -> None:
    encoded = urllib.parse.quote(path, safe="/._-+~")
    with open(store_root / "reads.log", "a") as log:
        log.write(f"READS {at:.9f} {ino} 0 {reads} {reads * 4096} {encoded}\n")


@pytest.fixture
def tiered(tmp_path):
    config = load_config(site(tmp_path))
    clock = Clock()
    daemon = Tierd(config, clock=clock)
    return config, daemon, clock


def tier_mirrors(backend, path):
    layout = backend.layout(path)
    return [(m, sorted(layout.osts(m))) for m in layout.mirror_ids
            if any("prefer" in c.flags.split(",") for c in layout.mirror(m))]


def test_parse_reads_takes_the_mounts_form_and_refuses_others():
    rec = parse_reads(b"READS 1795553872.061628000 42 1000 3 12288 /scratch/a%20b%0Ac\n")
    assert (rec.object_id, rec.uid, rec.reads, rec.bytes, rec.path) == \
        (42, 1000, 3, 12288, "/scratch/a b\nc")
    for bad in (b"CLOSE 1 2 3 4 5 /x", b"READS 1 2 3 0 0 /x", b"READS 1 2 3 -1 0 /x",
                b"READS 1 2 3 1 1 relative", b"READS 1 2 3 1 1 /x extra", b"READS x 2 3 1 1 /x"):
        with pytest.raises(ValueError):
            parse_reads(bad)


def test_a_hot_file_gets_a_preferred_replica_in_the_fast_class_and_loses_it_when_cold(tiered):
    config, daemon, clock = tiered
    backend = daemon.backend
    hot = make_file(backend, "hot.dat")
    cold = make_file(backend, "cold.dat")
    record(backend.store_root, hot, 10, ino=11, at=clock.now)
    record(backend.store_root, cold, 2, ino=12, at=clock.now)
    result = daemon.cycle()
    assert result.ok and result.records == 2
    assert [(m["path"], m["direction"], m["target"], m["state"]) for m in result.moves] == \
        [(hot, "up", "flash", records.DONE)]
    (mirror, osts), = tier_mirrors(backend, hot)
    assert mirror == 2 and set(osts) <= {2, 3}
    assert backend.read(hot, 0, SIZE) == backend.read(hot, 0, SIZE)   # readable, both mirrors
    assert tier_mirrors(backend, cold) == []
    # the same reads seen again (a crash before the offset was saved) move nothing twice
    again = daemon.cycle()
    assert again.ok and again.moves == [] and len(tier_mirrors(backend, hot)) == 1

    # a day later the counters have decayed to nothing: a flash filled past its watermark
    # sheds its coldest replica (here: the room is what tierd's replicas take plus the free
    # space, so the watermark is made tiny to see it)
    clock.now += 86400
    daemon.settings = config.tiering.__class__(hot_reads=4, budget=8, upper_watermark=1e-12,
                                               lower_watermark=1e-12)
    shed = daemon.cycle()
    assert [(m["path"], m["direction"], m["source"], m["target"], m["state"])
            for m in shed.moves] == [(hot, "down", "flash", "disk", records.DONE)]
    assert tier_mirrors(backend, hot) == [] and backend.layout(hot).mirror_ids == [1]
    view = report(config)
    assert view["classes"] == ["flash", "disk"] and view["thresholds"] == {"flash": 4}
    assert [m["direction"] for m in view["moves"]] == ["down", "up"]


def test_primaries_are_never_moved_and_files_outside_the_slowest_class_are_left(tiered):
    config, daemon, clock = tiered
    backend = daemon.backend
    fast = make_file(backend, "fast.dat", pool="flash")
    record(backend.store_root, fast, 50, ino=21, at=clock.now)
    record(backend.store_root, "/elsewhere/x", 50, ino=22, at=clock.now)
    result = daemon.cycle()
    assert result.ok and result.moves == [] and result.tracked == 0
    assert backend.layout(fast).mirror_ids == [0]


def test_a_budget_of_moves_per_cycle_hottest_first(tmp_path):
    config = load_config(site(tmp_path, extra="budget = 2"))
    clock = Clock()
    daemon = Tierd(config, clock=clock)
    paths = [make_file(daemon.backend, f"f{i}.dat") for i in range(4)]
    for i, path in enumerate(paths):
        record(daemon.backend.store_root, path, 10 + i, ino=100 + i, at=clock.now)
    first = daemon.cycle()
    assert [m["path"] for m in first.moves] == [paths[3], paths[2]]
    second = daemon.cycle()
    assert [m["path"] for m in second.moves] == [paths[1], paths[0]]


def test_a_move_interrupted_by_a_kill_is_not_made_twice(tiered, monkeypatch):
    """The layout is the record of a tier replica: a mirror added before the kill is found
    by the next run, which neither adds another nor loses it."""
    config, daemon, clock = tiered
    backend = daemon.backend
    hot = make_file(backend, "hot.dat")
    record(backend.store_root, hot, 10, ino=11, at=clock.now)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt   # as if killed between the mirror and the bookkeeping
    original = daemon._save
    monkeypatch.setattr(daemon, "_save", killed)
    with pytest.raises(KeyboardInterrupt):
        daemon.cycle()
    monkeypatch.setattr(daemon, "_save", original)
    assert len(tier_mirrors(backend, hot)) == 1
    restarted = Tierd(config, clock=clock)
    assert restarted.reconcile() == 0          # the move's row was closed as done
    result = restarted.cycle()                 # the records are read again: nothing twice
    assert result.ok and result.moves == []
    assert len(tier_mirrors(backend, hot)) == 1


def test_tierd_needs_two_classes_and_the_local_store(tmp_path):
    with pytest.raises(ConfigError, match="at least two"):
        Tierd(load_config(site(tmp_path, tiers=False)))
    bad = site(tmp_path, extra="budget = 8\nlower_watermark = 0.95")
    with pytest.raises(ConfigError, match="tiering.lower_watermark"):
        load_config(bad)


def test_tierd_command_once_and_tiers_json(tmp_path):
    path = site(tmp_path)
    config = load_config(path)
    backend = open_backend(config)
    hot = make_file(backend, "hot.dat")
    record(backend.store_root, hot, 10, ino=11, at=1_800_000_000.0)
    argv = [sys.executable, "-m", "scratchkeeper", "-c", str(path)]
    once = subprocess.run([*argv, "tierd", "--once"], capture_output=True, text=True,
                          timeout=120)
    assert once.returncode == 0, once.stderr
    assert "replica up disk -> flash" in once.stderr
    shown = subprocess.run([*argv, "tiers", "--json"], capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr
    import json

    view = json.loads(shown.stdout)
    assert view["files"][0]["path"] == hot and view["files"][0]["served_from"] == "flash"
    placement = subprocess.run([*argv, "store", "placement", "--json"], capture_output=True,
                               text=True, timeout=120)
    assert placement.returncode == 0, placement.stderr
    hot_osts = {row["ost_index"]: row["hot_objects"]
                for row in json.loads(placement.stdout)["osts"]}
    assert hot_osts == {o: int(o in backend.layout(hot).osts()) for o in range(4)}
    # a second tierd on the same state is refused while the first runs
    first = subprocess.Popen([*argv, "tierd", "--interval", "30"], stderr=subprocess.PIPE,
                             text=True)
    try:
        import time

        deadline = time.monotonic() + 30
        while not Path(str(config.state.database) + ".tierd.lock").exists():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(1.0)
        second = subprocess.run([*argv, "tierd", "--once"], capture_output=True, text=True,
                                timeout=120)
        assert second.returncode != 0 and "another tierd holds the lock" in second.stderr
    finally:
        first.terminate()
        first.wait(timeout=60)
    assert first.returncode == 0


def test_a_read_log_that_is_not_a_regular_file_is_refused_not_read(tiered):
    config, daemon, clock = tiered
    daemon.backend.db  # noqa: B018 (opening the store creates it)
    log = daemon.backend.store_root / "reads.log"
    os.mkfifo(log)                           # opening it for reading would wait for a writer
    result = daemon.cycle()
    assert not result.ok and "not a regular file" in result.error
    log.unlink()
    log.symlink_to("/dev/zero")
    result = daemon.cycle()
    assert not result.ok and str(log) in result.error
