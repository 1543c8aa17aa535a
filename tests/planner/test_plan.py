"""The plan's shape: jobs, queues, dependencies, retries, inheritance; `plan --dry-run --json`."""

import json
import subprocess
import sys

import pytest

from scratchkeeper.config import SiteConfig, StorageConfig
from scratchkeeper.errors import DirectiveError
from scratchkeeper.planner.directives import parse_script
from scratchkeeper.planner.plan import build_plan


def plan_of(text, config=None):
    config = config or SiteConfig(storage=StorageConfig(scratch_root="/s"))
    parsed = parse_script(text, "job.sh", cwd="/s/w", scratch_root=config.storage.scratch_root)
    return build_plan(parsed, config, chain_id="skt", workdir="/s/w")


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
    assert plan.inputs == ["/s/a", "/s/extra.dat", "/s/w/rel.dat"]


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


def test_a_transfer_into_the_scratch_root_or_dir_dot_lands_inside_it():
    config = SiteConfig(storage=StorageConfig(scratch_root="/s"))
    plan = plan_of("#!/bin/bash\n#STAGEIN http://h/a.dat /s\n#STAGEIN /home/u/b.dat /s/u/.\n"
                   "run\n", config)
    assert [f.path for f in plan.staged_files] == ["/s/a.dat", "/s/u/b.dat"]
    argv = [a.argv for a in plan.job("stage-in").actions]
    assert argv[0][argv[0].index("--output") + 1] == "/s/a.dat"
    assert argv[1][-2:] == ("/home/u/b.dat", "/s/u/b.dat")


@pytest.mark.parametrize("scheduler, priority, ok", [
    ("slurm", "5000", True), ("slurm", "-5", False), ("pbs", "-1024", True), ("pbs", "1024", False),
    ("pbs", "5000", False),
])
def test_priority_is_bounded_by_the_scheduler(scheduler, priority, ok):
    config = SiteConfig(storage=StorageConfig(scratch_root="/s"))
    text = f"#!/bin/bash\n#STAGEIN http://h/a /s/a\n#STAGEIN -priority {priority}\nrun\n"
    parsed = parse_script(text, "job.sh", cwd="/s", scratch_root="/s")
    if ok:
        plan = build_plan(parsed, config, chain_id="skt", workdir="/s", scheduler=scheduler)
        assert plan.job("stage-in").priority == int(priority)
        return
    with pytest.raises(DirectiveError, match=rf"^job.sh:3: #STAGEIN: -priority {priority} is "
                                             rf"outside {scheduler}'s range"):
        build_plan(parsed, config, chain_id="skt", workdir="/s", scheduler=scheduler)


def test_a_negative_pbs_priority_is_inherited():
    config = SiteConfig(storage=StorageConfig(scratch_root="/s"))
    parsed = parse_script("#!/bin/bash\n#PBS -p -5\n#STAGEIN http://h/a /s/a\nrun\n", "job.sh",
                          cwd="/s", scratch_root="/s")
    assert build_plan(parsed, config, chain_id="skt", workdir="/s", scheduler="pbs").job(
        "stage-in").priority == -5


def test_an_inherited_priority_the_scheduler_cannot_take_is_not_inherited():
    text = "#!/bin/bash\n#PBS -p 5000\n#STAGEIN http://h/a /s/a\nrun\n"
    config = SiteConfig(storage=StorageConfig(scratch_root="/s"))
    parsed = parse_script(text, "job.sh", cwd="/s", scratch_root="/s")
    assert build_plan(parsed, config, chain_id="skt", workdir="/s", scheduler="slurm").job(
        "stage-in").priority == 5000
    assert build_plan(parsed, config, chain_id="skt", workdir="/s", scheduler="pbs").job(
        "stage-in").priority is None


@pytest.mark.parametrize("command", ["plan", "submit"])
@pytest.mark.parametrize("line, extra, message", [
    ("#STAGEIN gsiftp://host/$(touch PWNED) a", [], "job.sh:2: #STAGEIN: a transfer is "
     "exactly "
     "SOURCE DESTINATION"),
    ("#STAGEIN http://h/a /etc/cron.d/x", [], "job.sh:2: #STAGEIN: the destination "
     "/etc/cron.d/x is "
     "outside the scratch root {root}"),
    ("#STAGEIN http://h/a ../../x", [], "job.sh:2: #STAGEIN: the destination {tmp}/x is "
     "outside the scratch root {root}"),
    ("#PBS -W stagein=a@-oProxyCommand=sh:/r", [], "job.sh:2: #PBS -W stagein: "
     "'-oProxyCommand=sh' is not a host name"),
    ("#STAGEIN http://h/a a", ["--input", "../../passwd"],
     "--input ../../passwd: {tmp}/passwd is outside the scratch root {root}"),
])
def test_cli_refuses_with_exit_2_and_one_line(tmp_path, command, line, extra, message):
    root = tmp_path / "scratch"
    workdir = root / "u"
    workdir.mkdir(parents=True)
    script = workdir / "job.sh"
    script.write_text(f"#!/bin/bash\n{line}\nrun\n")
    state = tmp_path / "state.db"
    site = tmp_path / "site.toml"
    site.write_text(f'[state]\ndatabase = "{state}"\n[storage]\nscratch_root = "{root}"\n')
    result = subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(site), command,
                             *extra, "job.sh"], capture_output=True, text=True, cwd=workdir,
                            timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert message.format(root=root, tmp=tmp_path) in result.stderr
    assert result.stdout == ""
    assert not state.exists() and not list(tmp_path.rglob("PWNED"))
