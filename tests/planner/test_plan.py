"""The plan's shape: jobs, queues, dependencies, retries, inheritance; `plan --dry-run --json`."""

import json
import subprocess
import sys

from scratchkeeper.config import SiteConfig
from scratchkeeper.planner.directives import parse_script
from scratchkeeper.planner.plan import build_plan


def plan_of(text, config=None):
    parsed = parse_script(text, "job.sh", cwd="/w")
    return build_plan(parsed, config or SiteConfig(), chain_id="skt", workdir="/w")


def deps(job):
    return [(d.key, d.type) for d in job.depends_on]


def test_parallel_stage_in_jobs_all_gate_the_compute_and_stage_out():
    plan = plan_of("#!/bin/bash\n#STAGEIN -parallel -retry 1\n#STAGEIN http://h/a /s/a\n"
                   "#STAGEIN http://h/b /s/b\nrun\n#STAGEOUT /s/out ftp://h/out\n")
    assert [j.key for j in plan.jobs] == ["stage-in-1", "stage-in-2", "compute", "stage-out"]
    assert deps(plan.job("compute")) == [("stage-in-1", "afterok"), ("stage-in-2", "afterok")]
    assert deps(plan.job("stage-out")) == [("compute", "afterany"), ("stage-in-1", "afterok"),
                                           ("stage-in-2", "afterok")]
    assert plan.job("stage-in-2").retries == 1
    assert [f.job_key for f in plan.staged_files] == ["stage-in-1", "stage-in-2"]


def test_no_directives_means_one_compute_job():
    plan = plan_of("#!/bin/bash\n#SBATCH -N 2\nsrun app\n")
    assert [(j.key, j.queue, deps(j)) for j in plan.jobs] == [("compute", "batch", [])]


def test_stage_out_only_and_config_defaults():
    plan = plan_of("#!/bin/bash\nrun\n#STAGEOUT /s/out http://h/out\n")
    assert [j.key for j in plan.jobs] == ["compute", "stage-out"]
    out = plan.job("stage-out")
    assert out.queue == "dataxfer" and deps(out) == [("compute", "afterany")]
    assert out.retries == SiteConfig().retry.attempts - 1 and out.walltime == "01:00:00"


def test_data_jobs_inherit_qos_account_priority_unless_told():
    plan = plan_of("#!/bin/bash\n#SBATCH --qos=high --account=proj1 --priority=50\n"
                   "#STAGEIN -qos data\n#STAGEIN http://h/a /s/a\nrun\n#STAGEOUT /s/o ftp://h/o\n")
    stage_in, stage_out = plan.job("stage-in"), plan.job("stage-out")
    assert (stage_in.qos, stage_in.account, stage_in.priority) == ("data", "proj1", 50)
    assert (stage_out.qos, stage_out.account, stage_out.priority) == ("high", "proj1", 50)


def test_explicit_inputs_join_the_staged_files():
    plan = plan_of("#!/bin/bash\n#STAGEIN -input /s/extra.dat -input rel.dat\n"
                   "#STAGEIN http://h/a /s/a\nrun\n")
    assert plan.inputs == ["/s/a", "/s/extra.dat", "/w/rel.dat"]


def test_plan_dry_run_json_contract(tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=demo\n#STAGEIN -retry 2\n"
                      "#STAGEIN ftp://127.0.0.1:2811/src/in.dat /scratch/u/in.dat\n"
                      "cat /scratch/u/in.dat\n#STAGEOUT /scratch/u/out.dat ftp://127.0.0.1:2811/sink/out.dat\n")
    state = tmp_path / "state.db"
    site = tmp_path / "site.toml"
    site.write_text(f'[state]\ndatabase = "{state}"\n')
    result = subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(site), "plan",
                             "--dry-run", "--json", str(script)], capture_output=True, text=True,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert [(j["role"], j["queue"], j["retries"]) for j in plan["jobs"]] == [
        ("stage-in", "dataxfer", 2), ("compute", "batch", 0), ("stage-out", "dataxfer", 2)]
    assert plan["jobs"][1]["depends_on"] == [{"role": "stage-in", "key": "stage-in", "type": "afterok"}]
    assert {d["type"] for d in plan["jobs"][2]["depends_on"]} == {"afterany", "afterok"}
    assert all(isinstance(j["script"], str) and j["script"].startswith("#!") for j in plan["jobs"])
    assert plan["staged_files"] == [{"path": "/scratch/u/in.dat",
                                     "source": "ftp://127.0.0.1:2811/src/in.dat", "line": 4}]
    assert plan["commands"][0][:2] == ["sbatch", "--parsable"] and "--hold" in plan["commands"][0]
    assert plan["commands"][-1][:2] == ["scontrol", "release"]
    # nothing was written: no state database, no spool
    assert not state.exists() and not (tmp_path / "spool").exists()
