"""Bad input to plan, submit and staging predict: one line naming the file (and line), exit 2,
never a hang, a traceback or a template's name for a problem of the script (issue 30)."""

import dataclasses
import os
import resource
import subprocess
import sys

import pytest

from scratchkeeper.config import SiteConfig
from scratchkeeper.errors import DirectiveError
from scratchkeeper.planner.directives import parse_script
from scratchkeeper.planner.plan import JOB_NAME_MAX, build_plan, job_name_of
from scratchkeeper.planner.render import render_plan
from scratchkeeper.planner.submit import MAX_SCRIPT_BYTES, prepare, read_script

COMMANDS = [["plan"], ["submit"], ["staging", "predict"]]


def _limits():
    # a reader that regressed to reading /dev/zero whole fails here, not on the machine
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def run_cli(tmp_path, *argv):
    root = tmp_path / "scratch"
    root.mkdir(exist_ok=True)
    site = tmp_path / "site.toml"
    site.write_text(f'[state]\ndatabase = "{tmp_path / "state.db"}"\n'
                    f'[storage]\nscratch_root = "{root}"\n')
    # a child with a deadline: reading a FIFO or a device would never end
    return subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(site), *argv],
                          capture_output=True, text=True, cwd=root, timeout=60,
                          preexec_fn=_limits)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("special", ["fifo", "/dev/zero", "folder"])
def test_a_fifo_a_device_or_a_folder_is_refused_not_read(tmp_path, command, special):
    if special == "fifo":
        special = str(tmp_path / "job.fifo")
        os.mkfifo(special)  # nobody writes: a blocking open would wait for ever
    elif special == "folder":
        special = str(tmp_path)
    done = run_cli(tmp_path, *command, special)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"{special}: cannot read: not a regular file\n"


def test_a_script_past_the_limit_names_the_line_the_limit_falls_on(tmp_path):
    script = tmp_path / "job.sh"
    line = "# " + "x" * 97 + "\n"  # 100 bytes a line
    script.write_text("#!/bin/bash\n" + line * (MAX_SCRIPT_BYTES // 100 + 10))
    with pytest.raises(DirectiveError) as caught:
        read_script(str(script))
    # 12 bytes of shebang, then 100 a line: byte MAX_SCRIPT_BYTES lies on this line
    assert caught.value.line == (MAX_SCRIPT_BYTES - 12) // 100 + 2
    assert str(caught.value) == (f"{script}:{caught.value.line}: larger than 4 MiB: not a "
                                 "batch script")


def test_a_script_of_exactly_the_limit_is_read(tmp_path):
    script = tmp_path / "job.sh"
    script.write_bytes(b"#" * (MAX_SCRIPT_BYTES - 1) + b"\n")
    assert len(read_script(str(script))) == MAX_SCRIPT_BYTES


def test_bytes_that_are_not_utf8_name_line_and_column(tmp_path):
    script = tmp_path / "job.sh"
    script.write_bytes(b"#!/bin/bash\n#SBATCH -J caf\xe9\nrun\n")
    done = run_cli(tmp_path, "plan", str(script))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr == f"{script}:2: not UTF-8 text: byte 0xe9 at column 15\n"


# --- a job name from any script name ---------------------------------------------------------

@pytest.mark.parametrize("name, expected", [
    ("my job.sh", "my_job.sh"), ("run(2).sh", "run_2.sh"), ("job.sbatch", "job.sbatch"),
    ("données.sh", "donn_es.sh"), (".hidden", "hidden"), ("-x.sh", "x.sh"), ("((", "job"),
    ("a;rm -rf ~.sh", "a_rm_-rf.sh"), ("x" * 300 + ".sh", "x" * JOB_NAME_MAX),
])
def test_a_job_name_is_derived_from_any_script_name(name, expected):
    assert job_name_of(f"/home/u/{name}") == expected


@pytest.mark.parametrize("scheduler", ["slurm", "pbs"])
@pytest.mark.parametrize("name", ["my job.sh", "run(2).sh", "été 2024 (v2).sh"])
def test_a_script_with_an_ordinary_name_is_planned(tmp_path, scheduler, name):
    root = tmp_path / "scratch"
    root.mkdir()
    script = root / name
    script.write_text("#!/bin/bash\n#STAGEIN http://h/a.dat in.dat\nrun\n"
                      "#STAGEOUT out.dat http://h/out.dat\n")
    config = SiteConfig()
    config = dataclasses.replace(config, storage=dataclasses.replace(
        config.storage, scratch_root=str(root)),
        state=dataclasses.replace(config.state, database=str(tmp_path / "state.db")))
    _, plan = prepare(str(script), config, scheduler=scheduler, workdir=str(root),
                      chain_id="sk0123456789")
    base = job_name_of(name)
    assert [job.name for job in plan.jobs] == [f"{base}.stage-in", base, f"{base}.stage-out"]
    directive = "#SBATCH --job-name=" if scheduler == "slurm" else "#PBS -N "
    assert f"{directive}{base}.stage-in\n" in plan.jobs[0].script


# --- a header count of 0 under -layout auto ---------------------------------------------------

@pytest.mark.parametrize("header, what", [
    ("#SBATCH --ntasks=4 --nodes=0", "0 nodes"),
    ("#SBATCH --ntasks=0", "0 tasks"),
    ("#SBATCH --ntasks=8 --ntasks-per-node=0", "0 tasks per node"),
    ("#PBS -l nodes=2:ppn=0", "0 tasks"),
])
def test_a_zero_count_in_the_header_is_one_line_at_the_layout_option(header, what):
    text = (f"#!/bin/bash\n{header}\n#STAGEIN -layout auto\n#STAGEIN http://h/a /scratch/a\n"
            "run\n")
    parsed = parse_script(text, "job.sh", cwd="/scratch", scratch_root="/scratch")
    with pytest.raises(DirectiveError) as caught:
        build_plan(parsed, SiteConfig(), chain_id="c1", workdir="/scratch")
    assert str(caught.value).startswith(f"job.sh:3: #STAGEIN: -layout auto: the job asks for "
                                        f"{what}")


def test_a_zero_node_count_without_a_layout_is_the_schedulers_business():
    """Slurm takes --nodes=0 for some jobs (a persistent burst buffer): without -layout auto
    nothing divides by it, and the plan passes it on."""
    text = "#!/bin/bash\n#SBATCH --nodes=0\n#STAGEIN http://h/a /scratch/a\nrun\n"
    parsed = parse_script(text, "job.sh", cwd="/scratch", scratch_root="/scratch")
    plan = build_plan(parsed, SiteConfig(), chain_id="c1", workdir="/scratch")
    render_plan(plan, parsed.shebang, parsed.compute_script, SiteConfig())
    assert "#SBATCH --nodes=0" in plan.job("compute").script


@pytest.mark.parametrize("name, expected", [
    ("climate", "climate"), ("a b", "a_b"), ("x" * 100, "x" * JOB_NAME_MAX), ("((", "job"),
])
def test_a_job_name_from_a_header_is_made_safe_by_the_same_rule(name, expected):
    from scratchkeeper.planner.plan import safe_job_name

    assert safe_job_name(name) == expected
