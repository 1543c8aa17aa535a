"""Hybrid replicas through the scratch mount (the layout paper's §5; docs/layout.rst, "Hybrid
replicas"): a file whose mirrors differ in layout has each request read from the mirror the
layout model finds cheapest, and a write written to one mirror, the others marked stale. The
counters are the mount root's ``user.scratchkeeper.hybrid``."""

from __future__ import annotations

import json
import mmap
import os
import threading

from scratchkeeper.advisor import ModelParams
from scratchkeeper.advisor.hybrid import mirror_request_cost
from scratchkeeper.config import load_config
from scratchkeeper.storage import LayoutRequest, open_backend

HYBRID = "user.scratchkeeper.hybrid"
DISPATCH = "user.scratchkeeper.dispatch"
KIB, MIB = 1 << 10, 1 << 20
REQUEST = 128 * KIB


def counters(mnt) -> dict:
    return json.loads(os.getxattr(mnt.root, HYBRID))


def ost_reads(mnt) -> dict[int, int]:
    return {o["ost"]: o["reads"] for o in json.loads(os.getxattr(mnt.root, DISPATCH))["osts"]}


def hybrid_file(mnt, name: str, size: int):
    """A file of 2 stripes of 64 KiB (a 128 KiB request spans both: 1-DH) with a second mirror
    of 2 stripes of 4 MiB on the other OSTs (the same request on one OST: 1-DV)."""
    data = os.urandom(size)
    (mnt.root / name).write_bytes(data)
    backend = open_backend(load_config(mnt.config))
    layout = backend.add_mirror(str(mnt.root / name), LayoutRequest(stripe_count=2,
                                                                     stripe_size=4 * MIB))
    first, second = (layout.mirror(m)[0] for m in layout.mirror_ids)
    assert (first.stripe_size, second.stripe_size) == (64 * KIB, 4 * MIB)
    return data, backend, first, second


def direct_reads(path, offsets, out: dict) -> None:
    """O_DIRECT reads of REQUEST bytes at each offset (one FUSE request each)."""
    buf = mmap.mmap(-1, REQUEST)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        for off in offsets:
            n = os.preadv(fd, [buf], off)
            out[off] = bytes(buf[:n])
    finally:
        os.close(fd)
        buf.close()


def test_the_model_prefers_the_wide_mirror_alone_and_the_narrow_one_under_load():
    """The case the mount test below relies on, by the Python model the C one follows."""
    params = ModelParams()
    alone = [mirror_request_cost(2, size, REQUEST, 1, 2, params).total
             for size in (64 * KIB, 4 * MIB)]
    loaded = [mirror_request_cost(2, size, REQUEST, 16, 2, params).total
              for size in (64 * KIB, 4 * MIB)]
    assert alone[0] < alone[1] and loaded[1] < loaded[0]


def test_reads_of_a_hybrid_file_go_to_the_mirror_the_model_chooses(make_mount):
    mnt = make_mount(ost_count=4, stripe_count=2, stripe_size=64 * KIB)
    size = 8 * MIB
    data, _, first, second = hybrid_file(mnt, "h", size)
    path = mnt.root / "h"
    before = ost_reads(mnt)
    got: dict[int, bytes] = {}
    direct_reads(path, range(0, size, REQUEST), got)
    assert b"".join(got[o] for o in sorted(got)) == data
    alone = counters(mnt)
    assert alone["on"] is True
    assert alone["reads"]["1-DH"] >= size // REQUEST and alone["reads"]["1-DV"] == 0, alone
    served = {ost for ost, n in ost_reads(mnt).items() if n > before.get(ost, 0)}
    assert served <= set(first.ost_list), (served, first.ost_list)

    # 16 readers at once: requests that meet enough others go to the 4 MiB-stripe mirror
    results = [dict() for _ in range(16)]
    offsets = list(range(0, size, REQUEST))
    threads = [threading.Thread(target=direct_reads, args=(path, offsets[i::16] * 8, results[i]))
               for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for part in results:
        for off, chunk in part.items():
            assert chunk == data[off:off + REQUEST]
    loaded = counters(mnt)
    assert loaded["reads"]["1-DV"] > 0, loaded
    assert any(n > 0 for ost, n in ost_reads(mnt).items() if ost in second.ost_list)
    assert "hybrid: MDT inode" in mnt.log.read_text()


def test_a_write_goes_to_one_mirror_and_makes_the_other_stale(make_mount):
    mnt = make_mount(ost_count=4, stripe_count=2, stripe_size=64 * KIB)
    data, backend, _, _ = hybrid_file(mnt, "w", 2 * MIB)
    patch = os.urandom(REQUEST)
    with open(mnt.root / "w", "r+b") as f:
        f.seek(MIB)
        f.write(patch)
    expected = data[:MIB] + patch + data[MIB + REQUEST:]
    layout = backend.layout(str(mnt.root / "w"))
    stale = [c.mirror_id for c in layout.components if "stale" in c.flags.split(",")]
    fresh = [c.mirror_id for c in layout.components if "stale" not in c.flags.split(",")]
    assert len(stale) == 1 and len(fresh) == 1, layout.components
    after = counters(mnt)
    assert after["invalidated"] >= 1 and sum(after["writes"].values()) >= 1, after
    got: dict[int, bytes] = {}
    direct_reads(mnt.root / "w", range(0, 2 * MIB, REQUEST), got)
    assert b"".join(got[o] for o in sorted(got)) == expected
    # the stale mirror is never read again: the file reads whole with its OSTs gone
    for ost in {o for c in layout.components if c.mirror_id in stale for o in c.ost_list}:
        os.rename(mnt.ost(ost), mnt.store / f"ost{ost:04d}.failed")
    got.clear()
    direct_reads(mnt.root / "w", range(0, 2 * MIB, REQUEST), got)
    assert b"".join(got[o] for o in sorted(got)) == expected
