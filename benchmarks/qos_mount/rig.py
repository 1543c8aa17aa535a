"""The rig of the qos_mount benchmark: 9 OSTs on throttled loop devices, the memory cgroup, the
store and its mount (:class:`Rig`), and the files every scheme reads, placed so that ``store
replicate`` gives them every bucket of the simulation's allocation (:func:`make_files`)."""

from __future__ import annotations

import json
import os
import sys
import time
import zlib
from collections import Counter
from itertools import permutations
from pathlib import Path

from benchmarks import harness
from benchmarks.mount_rig import MemoryCgroup, MountRig, loop_ost, sh, throttle_reads
from benchmarks.qos_mount.params import (
    BATCH,
    COPIES,
    IOPS,
    OSTS,
    PIECE,
    SCHEMES,
    MiB,
    summary,
)

# ---------------------------------------------------------------- allocations and files

def sim_allocations() -> dict:
    from scratchkeeper.qos.designs import NAMED
    from scratchkeeper.qos.placement import chained_allocation, design_allocation, mirrored_allocation
    return {"design": design_allocation(NAMED[9, 3]),
            "mirrored": mirrored_allocation(OSTS, COPIES, 36),
            "chained": chained_allocation(OSTS, COPIES, 36)}


def key_of(devices) -> tuple[int, frozenset]:
    return devices[0], frozenset(devices)


def choose_primaries(scheme: str, cover: int) -> list[tuple[int, int, int]]:
    """Primary OST triples whose `store replicate --scheme` copies (placement.file_copies, the
    function the command runs) give every bucket of the simulation's allocation, first copy
    first, `cover` times per bucket id."""
    from scratchkeeper.errors import QosError
    from scratchkeeper.qos.files import allocation_for
    from scratchkeeper.qos.placement import file_copies

    allocation = allocation_for(scheme, OSTS, COPIES)
    need = Counter(key_of(t) for t in sim_allocations()[scheme].replicas)
    need = Counter({k: v * cover for k, v in need.items()})
    candidates = []
    for primary in permutations(range(OSTS), COPIES):
        try:
            mirrors = file_copies(allocation, primary)
        except QosError:
            continue
        keys = [key_of((primary[k],) + tuple(m[k] for m in mirrors)) for k in range(COPIES)]
        candidates.append((primary, keys))
    chosen = []
    while +need:
        primary, keys = max(candidates, key=lambda c: sum(need[k] > 0 for k in c[1]))
        if not any(need[k] > 0 for k in keys):
            raise RuntimeError(f"{scheme}: buckets {list(+need)} cannot be placed")
        chosen.append(primary)
        for k in keys:
            need[k] -= 1
    return chosen


# ---------------------------------------------------------------- the rig

class Rig(MountRig):
    """9 OSTs on throttled loop devices, the memory cgroup, the store and its mount."""

    name = "qos_mount"

    def __init__(self, work: Path, p: dict):
        super().__init__(work)
        self.p = p
        self.rules: dict[str, int] = {}

    def build(self, data_bytes: int) -> None:
        os.chmod(self.work, 0o755)
        self.scratch.mkdir()
        per_ost = data_bytes // OSTS + 64 * MiB
        for index in range(OSTS):
            self.ost(index).mkdir(parents=True)
            rule = loop_ost(self.work / f"ost{index}.img", per_ost, self.ost(index),
                            self.devices, self.mounts)
            self.rules[rule] = index
        self.cgroup = MemoryCgroup.create("sk-qos-mount-bench", self.p["memory_limit"])

    def write_config(self, admission: str, accesses: int, interval: float,
                     retrieval: str = "online") -> None:
        self.config.write_text(f"""
[storage]
scratch_root = "{self.scratch}"
store_root = "{self.store}"
ost_count = {OSTS}
stripe_count = {COPIES}
stripe_size = {PIECE}
[state]
database = "{self.work / 'state.db'}"
[recovery]
socket = "{self.work / 'recovery.sock'}"
[mount]
threads = {self.p['threads']}
dispatch_min_bytes = 0
read_log_interval = 0
[qos]
admission = "{admission}"
copies = {COPIES}
accesses = {accesses}
interval = {interval:.6f}
batch = {BATCH}
retrieval = "{retrieval}"
samples = 10
[logging]
level = "WARNING"
""")

    def throttle(self, on: bool) -> None:
        throttle_reads(self.rules, iops=IOPS if on else 0)

    def throttled(self) -> bool:
        return bool(self.rules)

    def unthrottle(self) -> None:
        self.throttle(False)

    def reset_peak(self) -> None:
        self.cgroup.reset_peak()

    def memory(self) -> dict:
        return self.cgroup.peak()

    def start(self, admission: str, accesses: int, interval: float,  # type: ignore[override]
              retrieval: str = "online") -> None:
        self.write_config(admission, accesses, interval, retrieval)
        super().start()

    def worker(self, job: dict, label: str) -> dict:
        """Run the reads of `job` in a reader process inside the memory cgroup."""
        job = dict(job, mount=str(self.scratch), rules=self.rules, threads=self.p["threads"])
        plan_path, out_path = self.work / f"{label}.plan.json", self.work / f"{label}.out.json"
        plan_path.write_text(json.dumps(job))
        self.reset_peak()
        sh([sys.executable, "-m", "benchmarks.qos_mount", "--worker", str(plan_path),
            str(out_path)], timeout=1800, preexec_fn=self.join_cgroup, cwd=harness.REPO)
        out = json.loads(out_path.read_text())
        out["memory"] = self.memory()
        return out


def make_files(rig: Rig, p: dict) -> dict:
    """Files per scheme, given their copies by `store replicate`; the piece table."""
    from scratchkeeper.config import load_config
    from scratchkeeper.storage import open_backend
    from scratchkeeper.storage.layout import LayoutRequest

    rig.write_config("off", 1, 1.0)
    backend = open_backend(load_config(rig.config))
    pieces: list[dict] = []
    files: dict[str, str] = {}
    seconds = []
    stripe_bytes = p["pieces"] * PIECE
    for scheme in SCHEMES:
        for number, primary in enumerate(choose_primaries(scheme, p["cover"])):
            name = f"{scheme}-{number:03d}.dat"
            path = str(rig.scratch / name)
            data = os.urandom(COPIES * stripe_bytes)
            backend.create(path, LayoutRequest(ost_list=primary, stripe_size=PIECE))
            backend.write(path, 0, data)
            began = time.monotonic()
            done = rig.cli("store", "replicate", path, "--scheme", scheme)
            seconds.append(time.monotonic() - began)
            if done.returncode:
                raise RuntimeError(f"store replicate {name} --scheme {scheme}: {done.stderr}")
            layout = backend.layout(path)
            comps = [layout.mirror(m)[0] for m in layout.mirror_ids]
            if len(comps) != COPIES:
                raise RuntimeError(f"{name}: {len(comps)} copies after replicate")
            files[name] = path
            for k in range(COPIES):
                copies = [(c.objects[k].ost_index,
                           str(rig.ost(c.objects[k].ost_index) / c.objects[k].object_id))
                          for c in comps]
                for n in range(p["pieces"]):
                    offset = (n * COPIES + k) * PIECE
                    pieces.append({"id": len(pieces), "scheme": scheme, "file": name,
                                   "offset": offset, "objects": [c[1] for c in copies],
                                   "object_offset": n * PIECE, "osts": [c[0] for c in copies],
                                   "crc": zlib.crc32(data[offset:offset + PIECE])})
    # bucket id of the simulation's allocation -> pieces (a tuple several ids share is split
    # between them, so distinct buckets never read the same piece)
    buckets: dict[str, list[list[int]]] = {}
    for scheme, allocation in sim_allocations().items():
        by_key: dict = {}
        for piece in pieces:
            if piece["scheme"] == scheme:
                by_key.setdefault(key_of(piece["osts"]), []).append(piece["id"])
        ids: dict = {}
        for bucket, devices in enumerate(allocation.replicas):
            ids.setdefault(key_of(devices), []).append(bucket)
        table = [[] for _ in allocation.replicas]
        for key, bucket_ids in ids.items():
            have = by_key.get(key, [])
            if len(have) < len(bucket_ids):
                raise RuntimeError(f"{scheme}: bucket {sorted(key[1])} (first {key[0]}) has "
                                   f"{len(have)} pieces")
            for j, bucket in enumerate(bucket_ids):
                table[bucket] = have[j::len(bucket_ids)]
        buckets[scheme] = table
    os.sync()
    return {"pieces": pieces, "files": files, "buckets": buckets,
            "replicate_seconds": summary(seconds),
            "files_per_scheme": {s: sum(1 for f in files if f.startswith(s)) for s in SCHEMES}}
