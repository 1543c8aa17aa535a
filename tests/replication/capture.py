"""Capture ``squeue --json`` queue snapshots from the real local Slurm for the decision tests.

Run as root with the local cluster up: ``.venv/bin/python tests/replication/capture.py``.
It submits a few short jobs of its own (a running 3-node and 2-node job, pending jobs of several
sizes held back by ``--begin``, one held job), captures the queue, cancels exactly those jobs,
and writes ``data/squeue-window.json`` plus ``data/squeue-window.ids.json`` (the ids it used, by
role) next to this file. Other users' jobs in the snapshot are kept: the tests only look at
these ids.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).parent / "data"


def sbatch(*args: str) -> str:
    out = subprocess.run(["sbatch", "--parsable", "--job-name=skcapture", "--output=/dev/null",
                          *args, "--wrap", "sleep 120"], check=True, capture_output=True,
                         text=True, timeout=30).stdout
    return out.strip().split(";")[0]


def main() -> None:
    ids: dict[str, list[str]] = {"running": [], "pending": [], "held": []}
    try:
        ids["running"].append(sbatch("-N", "3"))
        ids["running"].append(sbatch("-N", "2"))
        for nodes in (2, 1, 3, 4, 1, 2, 8, 1):
            ids["pending"].append(sbatch("-N", str(nodes), "--begin=now+3600"))
        ids["held"].append(sbatch("-N", "1", "--hold"))
        deadline = time.time() + 30
        while time.time() < deadline:
            out = subprocess.run(["squeue", "-h", "-t", "R", "-j", ",".join(ids["running"]),
                                  "-o", "%i"], capture_output=True, text=True).stdout.split()
            if len(out) == len(ids["running"]):
                break
            time.sleep(0.5)
        snapshot = subprocess.run(["squeue", "--json"], check=True, capture_output=True,
                                  text=True, timeout=30).stdout
        (HERE / "squeue-window.json").write_text(snapshot)
        (HERE / "squeue-window.ids.json").write_text(json.dumps(ids, indent=2) + "\n")
    finally:
        every = [j for group in ids.values() for j in group]
        if every:
            subprocess.run(["scancel", *every], timeout=30)


if __name__ == "__main__":
    main()
