"""tierd's metrics: tier replica moves by direction and state, the files it tracks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from prometheus_client.core import Metric

from .endpoint import gauge, state_label


class TieringCollector:
    """Reads tierd's tables (``tier_moves``, ``tier_files``) at scrape time, through the
    functions of ``tiering/records.py`` tierd gives it: ``move_counts()`` (direction, target,
    state, moves, bytes), ``file_count()`` the files tierd counts reads of."""

    name = "tiering"

    def __init__(self, move_counts: Callable[[], Sequence[tuple[str, str, str, int, float]]],
                 file_count: Callable[[], int]):
        self.move_counts = move_counts
        self.file_count = file_count

    def collect(self) -> Iterable[Metric]:
        rows = self.move_counts()
        seen: tuple[set[str], set[str], set[str]] = (set(), set(), set())
        moves: dict[tuple[str, str, str], list[float]] = {}
        for direction, target, state, count, size in rows:
            # target: a performance class of storage.tier_order (the site's, a handful)
            key = (state_label(direction, seen[0]), state_label(target, seen[1]),
                   state_label(state, seen[2]))
            sums = moves.setdefault(key, [0.0, 0.0])
            sums[0] += float(count)
            sums[1] += float(size or 0)
        labels = ["direction", "target", "state"]
        yield gauge("scratchkeeper_tier_moves", "tier replica moves tierd recorded, by "
                    "direction (up, down), target class and state (started, done, failed)",
                    labels, [(k, v[0]) for k, v in sorted(moves.items())])
        yield gauge("scratchkeeper_tier_move_bytes", "bytes of the files of those moves",
                    labels, [(k, v[1]) for k, v in sorted(moves.items())])
        yield gauge("scratchkeeper_tier_files", "files tierd counts reads of", [],
                    [((), float(self.file_count()))])
