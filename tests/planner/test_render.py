"""Rendered job scripts against golden files, and hostile values that must not execute.

Regenerate the golden files after an intended template change with
``SK_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/planner/test_render.py``.
"""

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from scratchkeeper.config import SiteConfig, StateConfig, StorageConfig, TemplatesConfig
from scratchkeeper.errors import ConfigError, TemplateError
from scratchkeeper.planner.directives import parse_script
from scratchkeeper.planner.plan import build_plan
from scratchkeeper.planner.render import render_plan
from scratchkeeper.storage import open_backend

HERE = Path(__file__).parent
GOLDEN = HERE / "golden"
CASES = [(script, scheduler) for script in ("seed004.pbs", "structured.sbatch", "datawarp.sbatch",
                                            "pbs-w.pbs") for scheduler in ("slurm", "pbs")]


def rendered(script_name, scheduler, config):
    path = HERE / "scripts" / script_name
    parsed = parse_script(path.read_text(), f"scripts/{script_name}", cwd="/home/alice/work",
                          scratch_root=config.storage.scratch_root)
    plan = build_plan(parsed, config, chain_id="skgolden0001", workdir="/home/alice/work",
                      scheduler=scheduler)
    render_plan(plan, parsed.shebang, parsed.compute_script, config)
    return plan


@pytest.mark.parametrize("script_name, scheduler", CASES)
def test_golden(script_name, scheduler, fixed_callback, config):
    plan = rendered(script_name, scheduler, config)
    for job in plan.jobs:
        golden = GOLDEN / f"{script_name}.{scheduler}.{job.key}.sh"
        if os.environ.get("SK_REGEN_GOLDEN"):
            golden.write_text(job.script)
        assert golden.exists(), f"missing golden file {golden.name}: regenerate with SK_REGEN_GOLDEN=1"
        assert job.script == golden.read_text(), f"{golden.name} differs"


@pytest.mark.parametrize("script_name, scheduler", CASES)
def test_rendered_scripts_are_valid_bash(script_name, scheduler, config):
    for job in rendered(script_name, scheduler, config).jobs:
        check = subprocess.run(["bash", "-n"], input=job.script, text=True, capture_output=True)
        assert check.returncode == 0, f"{job.key}: {check.stderr}"


def test_site_template_override(tmp_path, fixed_callback):
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "compute.sh.j2").write_text(
        "{{ shebang | verbatim }}\n# site header\n{{ body | verbatim }}")
    config = SiteConfig(templates=TemplatesConfig(directory=str(tmp_path)))
    plan = rendered("structured.sbatch", "slurm", config)
    assert "# site header" in plan.job("compute").script
    assert plan.job("stage-in").script.startswith("#!/bin/bash\n#SBATCH --job-name=")


def test_missing_override_folder_is_a_config_error(tmp_path):
    config = SiteConfig(templates=TemplatesConfig(directory=str(tmp_path / "nope")))
    with pytest.raises(ConfigError, match="templates.directory"):
        rendered("structured.sbatch", "slurm", config)


def test_template_with_an_undefined_value_fails(tmp_path):
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "compute.sh.j2").write_text("{{ shebang | verbatim }}\n{{ not_defined }}\n")
    config = SiteConfig(templates=TemplatesConfig(directory=str(tmp_path)))
    with pytest.raises(TemplateError, match=r"/slurm/compute\.sh\.j2:2: 'not_defined' is undefined"):
        rendered("structured.sbatch", "slurm", config)


HOSTILE = [
    "it's",
    'a"b',
    "$(touch PWNED-subst)",
    "`touch PWNED-tick`",
    "x;touch PWNED-semi",
    "x|touch PWNED-pipe",
    "$HOME",
    "a&&touch PWNED-and",
]


def test_hostile_names_are_copied_not_executed(tmp_path, monkeypatch):
    """Run the rendered stage-in for real: files with hostile names are copied, nothing runs.

    The names come as #STAGEIN words (with a trailing comment holding a command too) and as
    #DW values: a name is data in every directive family."""
    source = tmp_path / "src"
    source.mkdir()
    scratch = tmp_path / "scratch"
    lines = ["#!/bin/bash"]
    for index, name in enumerate(HOSTILE):
        (source / name).write_text(f"payload {index}\n")
        lines.append(f"#STAGEIN {shlex.quote(f'{source}/{name}')} {shlex.quote(f'{scratch}/{name}')}"
                     "  # $(touch PWNED-comment)")
        lines.append("#DW stage_in " + shlex.join([f"source={source}/{name}",
                                                   f"destination={scratch}/dw/{name}", "type=file"]))
    lines.append("echo compute")
    script = tmp_path / "hostile.sh"
    script.write_text("\n".join(lines) + "\n")
    workdir = tmp_path / "work"
    workdir.mkdir()
    config = SiteConfig(state=StateConfig(database=str(tmp_path / "state.db")),
                        storage=StorageConfig(scratch_root=str(scratch),
                                              store_root=str(tmp_path / "store")))
    parsed = parse_script(script.read_text(), str(script), cwd=str(workdir),
                          scratch_root=str(scratch))
    plan = build_plan(parsed, config, chain_id="skhostile001", workdir=str(workdir))
    render_plan(plan, parsed.shebang, parsed.compute_script, config)
    from scratchkeeper.planner import records
    from scratchkeeper.state import StateStore
    store = records.open_records(StateStore(config.state.database))
    records.record_plan(store, plan, os.getuid(), {})
    # the data job calls back into scratchkeeper with this config
    stage_in = plan.job("stage-in").script
    env = dict(os.environ, SCRATCHKEEPER_CONFIG=str(tmp_path / "site.toml"))
    (tmp_path / "site.toml").write_text(
        f'[state]\ndatabase = "{config.state.database}"\n'
        f'[storage]\nscratch_root = "{scratch}"\nstore_root = "{tmp_path / "store"}"\n')
    result = subprocess.run(["bash", "-s"], input=stage_in, text=True, capture_output=True,
                            cwd=workdir, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    # the commit moved the files into the embedded striped store; read them back from it
    backend = open_backend(config)
    for index, name in enumerate(HOSTILE):
        payload = f"payload {index}\n".encode()
        assert backend.read(str(scratch / name), 0, 64) == payload
        assert backend.read(str(scratch / "dw" / name), 0, 64) == payload
    leftovers = list(tmp_path.rglob("PWNED*"))
    assert leftovers == [] and not list(Path(workdir).glob("PWNED*"))
    rows = records.staged_files(store, "skhostile001")
    assert sorted(r["path"] for r in rows) == sorted(
        [str(scratch / n) for n in HOSTILE] + [str(scratch / "dw" / n) for n in HOSTILE])
    assert all(r["state"] == "staged" and r["checksum"].startswith("sha256:") for r in rows)


def test_header_values_with_shell_characters_are_refused(config):
    text = "#!/bin/bash\n#STAGEIN http://h/a /scratch/a\nrun\n"
    parsed = parse_script(text, "weird name;$(x).sh", cwd="/w",
                          scratch_root=config.storage.scratch_root)
    plan = build_plan(parsed, config, chain_id="skx", workdir="/w")
    # the script's name becomes a job name a header takes (planner.plan.job_name_of) ...
    assert plan.jobs[0].name == "weird_name_x.sh.stage-in"
    # ... and a value that did not would be refused by the header filter, named by the
    # built-in template's file and line (the compiled templates keep them)
    plan.jobs[0].name = "weird name;$(x).stage-in"
    with pytest.raises(TemplateError, match=r"/slurm/stage\.sh\.j2:2: unsafe value for a "
                                            r"scheduler directive: 'weird name;\$\(x\)"):
        render_plan(plan, parsed.shebang, parsed.compute_script, config)


def test_a_refused_value_is_named_by_the_script_when_planning(tmp_path, config):
    """What `plan` and `submit` print: the user's script, and where the template refused it
    (here a site template that puts the script's path in a header)."""
    import dataclasses

    from scratchkeeper.errors import DirectiveError
    from scratchkeeper.planner.submit import prepare

    site = tmp_path / "templates"
    (site / "slurm").mkdir(parents=True)
    (site / "slurm" / "stage.sh.j2").write_text("#!/bin/bash\n#SBATCH --comment="
                                                "{{ script_path | header }}\n")
    config = dataclasses.replace(config, templates=dataclasses.replace(
        config.templates, directory=str(site)))
    script = tmp_path / "weird name;$(x).sh"
    script.write_text(f"#!/bin/bash\n#STAGEIN http://h/a {config.storage.scratch_root}/a\nrun\n")
    with pytest.raises(DirectiveError, match=r"weird name;\$\(x\)\.sh: unsafe value for a scheduler "
                                             r"directive: .* \(rendering .*/slurm/stage\.sh\.j2:2\)"):
        prepare(str(script), config, workdir=str(tmp_path))
