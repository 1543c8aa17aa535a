"""``sweep --slurm`` on the real local cluster: the array runs the tasks, the collect job merges."""

from __future__ import annotations

import csv
import os
import re

from scratchkeeper.cli import main
from scratchkeeper.sim import DATA_DIR


def test_sweep_as_a_slurm_job_array(local_cluster, tmp_path, capsys):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f"""
[replay]
trace = "{os.path.join(DATA_DIR, 'RICC-2010-2-first5000.swf.gz')}"
failures = "{os.path.join(DATA_DIR, 'LA-UR-05-7318-system20.csv.xz')}"
limit = 300
ost_count = 16

[grid]
policy = ["none", "on-the-fly"]
strategy = ["shortcut"]
alpha = [0.5, inf]
""")
    output = tmp_path / "out"
    partition = "batch" if "batch" in local_cluster.partitions else local_cluster.partitions[0]
    assert main(["sweep", str(sweep), "--output", str(output), "--slurm",
                 "--partition", partition]) == 0
    found = re.search(r"job array (\d+) .* collect job (\d+)", capsys.readouterr().out)
    assert found, "sweep --slurm did not print the job ids"
    array_id, collect_id = found.groups()
    assert local_cluster.wait_for_job(collect_id, timeout=180) == "COMPLETED"
    rows = list(csv.DictReader((output / "results.csv").open()))
    assert sorted((r["policy"], r["alpha"]) for r in rows) == [
        ("none", "0.5"), ("none", "inf"), ("on-the-fly", "0.5"), ("on-the-fly", "inf")]
    assert len(list((output / "tasks").glob("task-*.json"))) == 2
