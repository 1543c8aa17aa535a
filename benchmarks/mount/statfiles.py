"""The metadata workload: lstat of every file of a tree, the same program on every target.

    python -m benchmarks.mount.statfiles create DIR COUNT   # DIR/dNNN/fNNN, 100 files a folder
    python -m benchmarks.mount.statfiles stat DIR COUNT     # prints {"files": N, "seconds": S}

``stat`` looks every path up from the top, in the order ``create`` made them (one folder after
the other), as ``find -exec stat`` or ``ls -l`` of a job's outputs would; with cold caches each
file costs its file system a lookup (a FUSE LOOKUP, which answers with the attributes). Run in
its own process under ``timeout`` by the benchmark: a hung FUSE request must not hang it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

PER_FOLDER = 100


def paths(directory: Path, count: int) -> list[str]:
    return [os.path.join(directory, f"d{i // PER_FOLDER:03d}", f"f{i % PER_FOLDER:03d}")
            for i in range(count)]


def create(directory: Path, count: int) -> None:
    for i in range(0, count, PER_FOLDER):
        os.makedirs(os.path.join(directory, f"d{i // PER_FOLDER:03d}"), exist_ok=True)
    for path in paths(directory, count):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))


def stat_all(directory: Path, count: int) -> dict:
    names = paths(directory, count)
    lstat = os.lstat
    started = time.perf_counter()
    for name in names:
        lstat(name)
    seconds = time.perf_counter() - started
    return {"files": len(names), "seconds": seconds}


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("create", "stat"):
        print(__doc__, file=sys.stderr)
        return 2
    directory, count = Path(argv[1]), int(argv[2])
    if argv[0] == "create":
        create(directory, count)
    else:
        print(json.dumps(stat_all(directory, count)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
