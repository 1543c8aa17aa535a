"""The placements SUORA is measured against: consistent hashing with virtual nodes, round-robin,
and CRUSH straw2 through Ceph's own ``crushtool --test`` (Debian ``ceph-base``).

Consistent hashing and round-robin place a whole array of object ids at once with numpy (as
fast as Python lets them be); CRUSH is Ceph's C, run through :mod:`scratchkeeper.runner` on a
map compiled from text with the same targets and weights (one straw2 root bucket holding every
target as an ``osd`` device, rule ``choose firstn 0 type osd``).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np

from scratchkeeper import runner

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def fmix64(values: np.ndarray) -> np.ndarray:
    """MurmurHash3's finalizer over a uint64 array (numpy's uint64 arithmetic wraps mod 2^64)."""
    k = values.astype(np.uint64, copy=True)
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xFF51AFD7ED558CCD)
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xC4CEB9FE1A85EC53)
    k ^= k >> np.uint64(33)
    return k


class ConsistentHashing:
    """A hash ring with ``virtual_nodes`` points per ``unit`` of weight (a target of weight 1 TB
    has 100 points with the defaults, one of 4 TB 400).

    An object goes to the owner of the first point clockwise of its hash (Karger et al.; the
    weighting by point count is Sheepdog's, the SUORA paper §2). Points per fixed unit, not per
    mean weight, so adding a target does not change the others' points.
    """

    name = "consistent hashing"

    def __init__(self, targets: list[tuple[int, float]], virtual_nodes: int = 100, seed: int = 0,
                 unit: float = 1.0):
        points, owners = [], []
        for index, weight in targets:
            count = max(1, round(virtual_nodes * weight / unit))
            base = fmix64(np.array([index * 0x100000001B3 + seed], dtype=np.uint64))[0]
            points.append(fmix64(base + np.arange(count, dtype=np.uint64) * _GOLDEN))
            owners.append(np.full(count, index, dtype=np.int32))
        ring = np.concatenate(points)
        order = np.argsort(ring, kind="stable")
        self.ring = ring[order]
        self.owners = np.concatenate(owners)[order]
        self.virtual_nodes = virtual_nodes

    @property
    def memory_bytes(self) -> int:
        return self.ring.nbytes + self.owners.nbytes

    def place(self, object_ids: np.ndarray) -> np.ndarray:
        positions = np.searchsorted(self.ring, fmix64(object_ids), side="right")
        return self.owners[positions % len(self.ring)]


class RoundRobin:
    """Object i on the (i mod period)-th entry of a smooth weighted round-robin period."""

    name = "round-robin"

    def __init__(self, targets: list[tuple[int, float]]):
        lightest = min(weight for _, weight in targets)
        shares = [max(1, round(weight / lightest)) for _, weight in targets]
        if all(share == 1 for share in shares):
            self.sequence = np.array([index for index, _ in targets], dtype=np.int32)
        else:
            self.sequence = self._smooth(targets, shares)

    @staticmethod
    def _smooth(targets: list[tuple[int, float]], shares: list[int]) -> np.ndarray:
        """nginx's smooth weighted round-robin, one period (every target its share of turns)."""
        indices = np.array([index for index, _ in targets], dtype=np.int32)
        weights = np.array(shares, dtype=np.int64)
        total = int(weights.sum())
        current = np.zeros(len(weights), dtype=np.int64)
        sequence = np.empty(total, dtype=np.int32)
        for turn in range(total):
            current += weights
            chosen = int(np.argmax(current))
            current[chosen] -= total
            sequence[turn] = indices[chosen]
        return sequence

    @property
    def memory_bytes(self) -> int:
        return self.sequence.nbytes

    def place(self, object_ids: np.ndarray) -> np.ndarray:
        return self.sequence[object_ids % np.uint64(len(self.sequence))]


_MAPPING = re.compile(r"^CRUSH rule \d+ x (\d+) \[([\d,]*)\]$", re.MULTILINE)


class CrushStraw2:
    """A CRUSH map with one straw2 root over the targets, placed by ``crushtool --test``."""

    name = "CRUSH straw2 (crushtool)"

    def __init__(self, targets: list[tuple[int, float]], workdir: Path, label: str,
                 timeout: float = 600.0):
        self.targets = targets
        self.timeout = timeout
        workdir.mkdir(parents=True, exist_ok=True)
        self.text_path = workdir / f"{label}.txt"
        self.map_path = workdir / f"{label}.map"
        self.text_path.write_text(self.map_text(targets))
        runner.run(["crushtool", "-c", str(self.text_path), "-o", str(self.map_path)],
                   timeout=timeout)

    @staticmethod
    def map_text(targets: list[tuple[int, float]]) -> str:
        """The text map crushtool -c compiles: Ceph's current tunables, straw2, rjenkins1.

        CRUSH weights are 16.16 fixed point and a bucket's weight must stay below 65536, so
        weights are scaled down together when they add up past 60,000 (100,000 targets of 1):
        only their ratios matter to straw2.
        """
        scale = min(1.0, 60_000 / sum(weight for _, weight in targets))
        lines = ["tunable choose_local_tries 0", "tunable choose_local_fallback_tries 0",
                 "tunable choose_total_tries 50", "tunable chooseleaf_descend_once 1",
                 "tunable chooseleaf_vary_r 1", "tunable chooseleaf_stable 1",
                 "tunable straw_calc_version 1", "tunable allowed_bucket_algs 54", ""]
        lines += [f"device {index} osd.{index}" for index, _ in targets]
        lines += ["", "type 0 osd", "type 1 root", "", "root default {", "\tid -1",
                  "\talg straw2", "\thash 0"]
        lines += [f"\titem osd.{index} weight {weight * scale:.5f}" for index, weight in targets]
        lines += ["}", "", "rule data {", "\tid 0", "\ttype replicated", "\tmin_size 1",
                  "\tmax_size 10", "\tstep take default", "\tstep choose firstn 0 type osd",
                  "\tstep emit", "}", ""]
        return "\n".join(lines)

    @property
    def memory_bytes(self) -> int:
        """The compiled map's size (what a client holds; crushtool's own buffers not counted)."""
        return self.map_path.stat().st_size

    def _test(self, objects: int, replicas: int, show: str) -> runner.CommandResult:
        return runner.run(["crushtool", "-i", str(self.map_path), "--test", show,
                           "--rule", "0", "--num-rep", str(replicas), "--min-x", "0",
                           "--max-x", str(objects - 1)], timeout=self.timeout, mutating=False)

    def place(self, objects: int, replicas: int = 1) -> np.ndarray:
        """Targets of objects 0 .. objects-1 (``--show-mappings``), one row per object."""
        result = self._test(objects, replicas, "--show-mappings")
        placed = np.full((objects, replicas), -1, dtype=np.int32)
        for match in _MAPPING.finditer(result.stdout):
            row = [int(t) for t in match.group(2).split(",") if t]
            placed[int(match.group(1)), :len(row)] = row
        if (placed < 0).any():
            raise RuntimeError(f"crushtool left {(placed < 0).any(axis=1).sum()} objects unmapped")
        return placed

    def seconds(self, objects: int, replicas: int = 1) -> float:
        """Wall time of one whole ``crushtool --test --show-statistics`` run over ``objects``."""
        started = time.perf_counter()
        self._test(objects, replicas, "--show-statistics")
        return time.perf_counter() - started
