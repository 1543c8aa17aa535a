"""Capture real scheduler output for the backend parser tests (run on the local cluster).

    .venv/bin/python tests/schedulers/capture.py
    SLURM_CONF=... PATH=/opt/scratchkeeper/slurm-24.11.5/bin:$PATH \
        .venv/bin/python tests/schedulers/capture.py --out tests/schedulers/data/24.11 --no-pbs \
        --no-accounting

Submits a small set of jobs in known states (completed, failed with exit 3, cancelled, running,
held, pending on a dependency), then runs exactly the argv the backends build and saves what the
tools print under tests/schedulers/data/ (the local cluster's Slurm 22.05; --out another
release's folder), with a manifest of the job ids and their known states and, in slurm-version.txt,
what ``sinfo -V`` said. --no-pbs: no Torque wrappers there; --no-accounting: a cluster with
AccountingStorageType=accounting_storage/none, where sacct has nothing to show.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from scratchkeeper.schedulers import pbs, slurm
from scratchkeeper.schedulers.base import SubmitSpec

DATA = Path(__file__).parent / "data"


def run(argv, check=True):
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise SystemExit(f"{argv}: {result.stderr}")
    return result


def submit(body: str, name: str, **extra) -> str:
    script = Path(tempfile.mkdtemp()) / f"{name}.sh"
    script.write_text(f"#!/bin/bash\n{body}\n")
    spec = SubmitSpec(script_path=str(script), queue=extra.pop("queue", "batch"), job_name=name,
                      workdir="/tmp", output_path="/dev/null", **extra)
    out = run(slurm.build_submit(spec)).stdout
    (DATA / "sbatch-parsable.txt").write_text(out)
    return slurm.parse_submit(out)


def main() -> None:
    global DATA
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DATA)
    parser.add_argument("--no-pbs", action="store_true")
    parser.add_argument("--no-accounting", action="store_true")
    args = parser.parse_args()
    DATA = args.out
    DATA.mkdir(exist_ok=True)
    (DATA / "slurm-version.txt").write_text(run(["sinfo", "-V"]).stdout)
    ok = submit("true", "cap-completed")
    failed = submit("exit 3", "cap-failed")
    cancelled = submit("sleep 300", "cap-cancelled", hold=True)
    time.sleep(4)
    run(slurm.build_cancel([cancelled]))
    running = submit("sleep 60", "cap-running")
    held = submit("true", "cap-held", hold=True)
    waiting = submit("true", "cap-dependent", dependencies=(("afterok", (running,)),),
                     queue="dataxfer")
    time.sleep(3)
    known = {"completed": ok, "failed": failed, "cancelled": cancelled, "running": running,
             "held": held, "dependent": waiting}
    (DATA / "manifest.json").write_text(json.dumps(known, indent=2) + "\n")
    (DATA / "squeue.json").write_text(run(slurm.build_query(None)).stdout)
    (DATA / "squeue-some.json").write_text(run(slurm.build_query([running, held])).stdout)
    if not args.no_accounting:
        (DATA / "sacct.txt").write_text(run(slurm.build_history(list(known.values()))).stdout)
    (DATA / "sinfo-nodes.txt").write_text(run(slurm.build_nodes()).stdout)
    if not args.no_pbs:
        (DATA / "qstat-f.txt").write_text(run(pbs.build_query(list(known.values())),
                                              check=False).stdout)
        (DATA / "pbsnodes-a.txt").write_text(run(pbs.build_nodes()).stdout)
    bad = run(["sbatch", "--parsable", "--partition=nosuchqueue", "--wrap=true"], check=False)
    (DATA / "sbatch-bad-partition.stderr").write_text(bad.stderr)
    unknown = run(slurm.build_query(["999999"]), check=False)
    (DATA / "squeue-unknown.json").write_text(unknown.stdout)
    (DATA / "squeue-unknown.stderr").write_text(unknown.stderr)
    if not args.no_pbs:
        script = Path(tempfile.mkdtemp()) / "x.sh"
        script.write_text("#!/bin/bash\ntrue\n")
        qsub = run(["qsub", "-q", "nosuchqueue", "-N", "x", str(script)], check=False)
        (DATA / "qsub-bad-queue.txt").write_text(qsub.stdout)
        (DATA / "qsub-bad-queue.rc").write_text(f"{qsub.returncode}\n")
    run(slurm.build_cancel([running, held, waiting]))


if __name__ == "__main__":
    main()
