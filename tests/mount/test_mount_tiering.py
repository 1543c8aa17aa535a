"""Read records and preferred mirrors on the real mount: reads through the mount feed tierd,
whose replica in the fast class is then what the mount reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from scratchkeeper.config import load_config
from scratchkeeper.storage import open_backend
from scratchkeeper.storage.layout import LayoutRequest
from scratchkeeper.tiering.reads import parse_reads
from waiting import wait_for

TIERS = {"pools": {"disk": "0-1", "flash": "2-3"},
         "storage_extra": 'tier_order = ["flash", "disk"]',
         "extra": '[storage.pool_tiers]\ndisk = "disk"\nflash = "flash"\n'
                  '[tiering]\nhot_reads = 4\n'}


def ost_reads(mnt) -> dict[int, int]:
    stats = json.loads(os.getxattr(mnt.root, "user.scratchkeeper.dispatch"))
    return {int(o["ost"]): int(o["reads"]) for o in stats["osts"]}


def read_whole(path, times: int) -> None:
    for _ in range(times):
        with open(path, "rb") as stream:   # each open drops the kernel's cache of the file
            while stream.read(1 << 16):
                pass


def records(mnt) -> list:
    log = mnt.store / "reads.log"
    return [parse_reads(line) for line in log.read_bytes().splitlines()] if log.exists() else []


def wait_records(mnt, path: str, reads: int, timeout: float = 20.0) -> list:
    deadline = time.monotonic() + timeout
    while True:
        found = [r for r in records(mnt) if r.path == path]
        if sum(r.reads for r in found) >= reads or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_reads_are_recorded_and_a_tier_replica_is_read_first(make_mount):
    mnt = make_mount(**TIERS, mount_extra="read_log_interval = 0.2")
    config = load_config(mnt.config)
    backend = open_backend(config)
    name = "hot file\nwith odd name.dat"
    path = str(mnt.root / name)
    data = os.urandom(512 * 1024)
    backend.create(path, LayoutRequest(pool="disk"))
    backend.write(path, 0, data)

    read_whole(path, 6)
    found = wait_records(mnt, path, 6)
    assert sum(r.reads for r in found) >= 6, records(mnt)
    assert found[0].object_id == os.stat(mnt.mdt / name).st_ino and found[0].uid == 0
    assert sum(r.bytes for r in found) >= 6 * len(data)

    argv = [sys.executable, "-m", "scratchkeeper", "-c", str(mnt.config)]
    once = subprocess.run([*argv, "tierd", "--once"], capture_output=True, text=True,
                          timeout=120)
    assert once.returncode == 0, once.stderr
    layout = backend.layout(path)
    assert layout.mirror_ids == [1, 2]
    assert "prefer" in layout.mirror(2)[0].flags.split(",") and layout.osts(2) <= {2, 3}

    before = ost_reads(mnt)
    time.sleep(1.2)                        # the mount reads the new layout (attr_timeout)
    read_whole(path, 3)
    after = ost_reads(mnt)
    grown = {ost for ost in after if after[ost] > before.get(ost, 0)}
    assert grown and grown <= {2, 3}, (before, after)
    with open(path, "rb") as stream:
        assert stream.read() == data


def test_files_created_through_the_mount_are_placed_by_suora(make_mount):
    """storage.placement = "suora": the mount asks the store's placement for a new file's OSTs
    (a pool of the directory's default included) and marks the file as the store does, so
    store rebalance sees it; a failed OST is never chosen."""
    from scratchkeeper.storage.local.placement import PLACEMENT_XATTR, placement_key

    mnt = make_mount(ost_count=6, stripe_count=2, pools={"disk": "0-3", "flash": "4-5"},
                     storage_extra='placement = "suora"')
    backend = open_backend(load_config(mnt.config))
    placement = backend._placement_map(None)
    for n in range(12):
        (mnt.root / f"f{n}").write_bytes(os.urandom(100_000))
        layout = backend.layout(str(mnt.root / f"f{n}"))
        first = layout.components[0].objects[0].object_id
        assert os.getxattr(mnt.mdt / f"f{n}", PLACEMENT_XATTR) == f"suora {first}".encode()
        assert layout.ost_list == placement.place_distinct(placement_key(first), 0, 2)
    assert backend.rebalance_plan().files_checked == 12
    # a directory's pool: SUORA within the pool
    (mnt.root / "fast").mkdir()
    os.setxattr(mnt.mdt / "fast", "security.scratchkeeper.dirlov",
                b"stripe_count=1 stripe_size=65536 pool=flash")
    pooled = backend._placement_map("flash")
    for n in range(6):
        (mnt.root / "fast" / f"g{n}").write_bytes(b"g" * 1000)
        layout = backend.layout(str(mnt.root / "fast" / f"g{n}"))
        first = layout.components[0].objects[0].object_id
        assert layout.ost_list == pooled.place_distinct(placement_key(first), 0, 1)
        assert set(layout.ost_list) <= {4, 5}
    # a failed OST: skipped (the mount's own check and SUORA's map agree)
    seen = mnt.log.read_text().count("OST 1 is failed")
    backend.fail_ost(1)
    wait_for(lambda: mnt.log.read_text().count("OST 1 is failed") > seen,
             "the mount to see OST 1 fail (its OST watcher logs it)", timeout=10)
    for n in range(12):
        (mnt.root / f"h{n}").write_bytes(b"h" * 1000)
        assert 1 not in backend.layout(str(mnt.root / f"h{n}")).ost_list
