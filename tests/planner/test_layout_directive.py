"""#STAGEIN -layout directives: parsing, the decision the plan carries, the rendered data job."""

import dataclasses
import shlex
import subprocess
from pathlib import Path

import pytest

from scratchkeeper.advisor import ModelParams, Workload, advise
from scratchkeeper.config import SiteConfig
from scratchkeeper.errors import DirectiveError
from scratchkeeper.planner.directives import STAGE_IN, parse_script
from scratchkeeper.planner.plan import build_plan
from scratchkeeper.planner.render import render_plan

REPO = Path(__file__).resolve().parents[2]


def script(*stagein, header=("#SBATCH --ntasks=64 --ntasks-per-node=16",)):
    return "\n".join(["#!/bin/bash", *header, *stagein,
                      "#STAGEIN /home/alice/in.dat /scratch/w/in.dat", "srun ./app", ""])


def parse(text):
    return parse_script(text, "job.sh", cwd="/scratch/w", scratch_root="/scratch")


def site(**storage):
    config = SiteConfig()
    # the worktree's templates, whichever checkout the installed package points at
    return dataclasses.replace(
        config, storage=dataclasses.replace(config.storage, scratch_root="/scratch", **storage),
        templates=dataclasses.replace(config.templates, directory=str(REPO / "job-templates")))


def plan(text, config=None):
    parsed = parse(text)
    return parsed, build_plan(parsed, config or site(), chain_id="c1", workdir="/scratch/w")


def test_options_are_parsed_and_checked():
    opts = parse(script("#STAGEIN -layout auto -procs 32 -per-node 8 -request-size 256K "
                        "-pattern random -per-process")).options[STAGE_IN].layout
    assert (opts.layout, opts.procs, opts.per_node, opts.request_size, opts.pattern,
            opts.shared) == ("auto", 32, 8, 256 << 10, "random", False)
    opts = parse(script("#STAGEIN -stripe-count 4 -stripe-size 2M")).options[STAGE_IN].layout
    assert (opts.layout, opts.stripe_count, opts.stripe_size) == (None, 4, 2 << 20)


@pytest.mark.parametrize("line, message", [
    ("#STAGEIN -layout 3d", "-layout expects auto, 1dv, 1dh or 2d, got '3d'"),
    ("#STAGEIN -stripe-size 100K", "-stripe-size expects a multiple of 64 KiB"),
    ("#STAGEIN -stripe-size 4G", "-stripe-size expects a multiple of 64 KiB"),
    ("#STAGEIN -stripe-count 0", "-stripe-count expects a stripe count from 1 to 2000"),
    ("#STAGEIN -stripe-count 2001", "-stripe-count expects a stripe count from 1 to 2000"),
    ("#STAGEIN -layout auto -pattern sideways", "-pattern expects seq or random"),
    ("#STAGEIN -layout auto -shared -per-process", "one of -shared and -per-process"),
    ("#STAGEIN -procs 4", "-procs describes the workload for -layout auto; give -layout"),
    ("#STAGEIN -layout 1dv -pattern random", "-pattern describes the workload for -layout auto"),
    ("#STAGEIN -stripe-count 2 -shared", "-shared describes the workload for -layout auto or a "
                                         "named layout"),
    ("#STAGEIN -layout auto -darshan x.log -procs 4", "-procs: not with -darshan"),
])
def test_bad_options_name_the_line(line, message):
    with pytest.raises(DirectiveError) as err:
        parse(script(line))
    assert err.value.line == 3
    assert message in str(err.value)
    assert "job.sh" in str(err.value)


def test_layout_options_are_stage_in_only():
    text = script().replace("srun ./app", "srun ./app\n#STAGEOUT -layout 1dv\n"
                            "#STAGEOUT /scratch/w/o /home/alice/o")
    with pytest.raises(DirectiveError, match="-layout applies to #STAGEIN only") as err:
        parse(text)
    assert err.value.line == 5


@pytest.mark.parametrize("header, expected", [
    ("#SBATCH --ntasks=64 --ntasks-per-node=16", {"ntasks": "64", "ntasks_per_node": "16"}),
    ("#SBATCH -n 12 -N 3", {"ntasks": "12", "nodes": "3"}),
    ("#SBATCH --nice=5 --ntasks 7", {"nice": "5", "ntasks": "7"}),
    ("#PBS -l nodes=4:ppn=8,walltime=1:00:00", {"nodes": "4", "ntasks": "32",
                                                "ntasks_per_node": "8"}),
])
def test_task_counts_come_from_the_header(header, expected):
    assert parse(script(header=(header,))).compute_job == expected


def test_auto_uses_the_jobs_task_counts_and_the_model():
    _, planned = plan(script("#STAGEIN -layout auto -request-size 4M"))
    decision = planned.job(STAGE_IN).layout
    expected = advise(Workload.uniform(64, 16, 4 << 20, shared_file=True), ModelParams(), 8)
    assert (decision.layout, decision.stripe_count, decision.stripe_size, decision.reason) == \
        (expected.layout, expected.stripe_count, expected.stripe_size, expected.reason)
    assert [label for label, _ in decision.estimates] == [e.label for e in expected.estimates]
    assert planned.job("compute").layout is None


def test_auto_per_node_from_the_nodes_when_not_given():
    _, planned = plan(script("#STAGEIN -layout auto -per-process -request-size 64K",
                             header=("#SBATCH -n 12 -N 3",)))
    expected = advise(Workload.uniform(12, 4, 64 << 10, shared_file=False), ModelParams(), 8)
    assert planned.job(STAGE_IN).layout.reason == expected.reason


def test_auto_without_a_task_count_is_one_line_naming_the_option_line():
    with pytest.raises(DirectiveError, match="-layout auto needs the job's task count: give "
                                             "--ntasks") as err:
        plan(script("#STAGEIN -layout auto", header=()))
    assert (err.value.path, err.value.line) == ("job.sh", 2)


def test_a_named_layout_follows_section_4_without_the_model():
    _, planned = plan(script("#STAGEIN -layout 1dh -request-size 4M"))
    decision = planned.job(STAGE_IN).layout
    assert (decision.layout, decision.stripe_count, decision.stripe_size, decision.estimates) \
        == ("1-DH", 8, 512 << 10, ())
    _, planned = plan(script("#STAGEIN -layout 2d -request-size 4M"))
    decision = planned.job(STAGE_IN).layout
    # 8 OSTs, the smallest even split g=2: a request over the 4 OSTs of a group
    assert (decision.layout, decision.stripe_count, decision.stripe_size) == ("2-D", 8, 1 << 20)
    _, planned = plan(script("#STAGEIN -layout 1dv -per-process"))
    assert (planned.job(STAGE_IN).layout.stripe_count,
            planned.job(STAGE_IN).layout.stripe_size) == (1, 1 << 20)


def test_explicit_stripe_settings_override():
    _, planned = plan(script("#STAGEIN -layout 1dh -request-size 4M -stripe-size 1M"))
    decision = planned.job(STAGE_IN).layout
    assert (decision.stripe_count, decision.stripe_size) == (8, 1 << 20)
    assert "overridden by -stripe-size" in decision.reason
    _, planned = plan(script("#STAGEIN -layout 1dv -request-size 4M -stripe-count 5"))
    decision = planned.job(STAGE_IN).layout
    assert (decision.stripe_count, decision.stripe_size) == (5, 4 << 20)
    assert "overridden by -stripe-count 5" in decision.reason
    _, planned = plan(script("#STAGEIN -stripe-count 3 -stripe-size 128K"))
    decision = planned.job(STAGE_IN).layout
    assert (decision.layout, decision.stripe_count, decision.stripe_size) == (None, 3, 128 << 10)


def test_lustre_without_a_stripe_count_is_skipped_and_says_so():
    _, planned = plan(script("#STAGEIN -layout auto"), site(backend="lustre"))
    job = planned.job(STAGE_IN)
    assert job.layout is None
    assert "give -stripe-count N" in job.layout_skipped
    _, planned = plan(script("#STAGEIN -layout auto -stripe-count 16 -request-size 4M"),
                      site(backend="lustre"))
    expected = advise(Workload.uniform(64, 16, 4 << 20, shared_file=True), ModelParams(), 16)
    assert planned.job(STAGE_IN).layout.stripe_count == expected.stripe_count


def test_no_layout_options_no_decision():
    _, planned = plan(script())
    assert planned.job(STAGE_IN).layout is None
    assert planned.job(STAGE_IN).layout_skipped is None


def test_the_darshan_log_is_read_at_plan_time_and_a_bad_one_names_the_line(tmp_path):
    missing = tmp_path / "none.darshan"
    with pytest.raises(DirectiveError) as err:
        plan(script(f"#STAGEIN -layout auto -darshan {shlex.quote(str(missing))}"))
    assert err.value.line == 3
    assert str(missing) in str(err.value)


def rendered(text, config, fixed_callback=None):
    parsed, planned = plan(text, config)
    render_plan(planned, parsed.shebang, parsed.compute_script, config)
    return planned.job(STAGE_IN).script


def test_the_stage_in_lays_out_each_file_before_its_transfer(fixed_callback):
    text = script("#STAGEIN -layout 1dh -request-size 4M").replace(
        "#STAGEIN /home/alice/in.dat", "#STAGEIN /home/alice/b.dat '/scratch/w/a dir/'\n"
        "#STAGEIN /home/alice/in.dat")
    body = rendered(text, site())
    lines = body.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(
        "SK_LAYOUT_ERROR=$(scratchkeeper store setstripe --file -c 8 -S 524288 "
        "'/scratch/w/a dir/b.dat' 2>&1 >/dev/null) || "))
    transfer = next(i for i, line in enumerate(lines) if line.startswith("sk_retry")
                    and "b.dat" in line)
    assert lines[first - 1].startswith("#") and lines[first - 2].startswith("#")
    assert lines[first - 3] == "mkdir -p -- '/scratch/w/a dir'"
    # a refusal's reason reaches `status` (sk_fail's --reason), not only "failed" (issue 32)
    fake = ("scratchkeeper() { echo progress; echo 'warning: first' >&2; "
            "echo 'scratchkeeper: /scratch/w/a dir/b.dat: holds data' >&2; return 2; }\n"
            "sk_fail() { echo \"line $1: $SK_LAST_ERROR\"; exit 1; }\n")
    done = subprocess.run(["bash", "-c", fake + lines[first]], capture_output=True, text=True,
                          timeout=30)
    assert done.stdout == ("line 4: setting the layout of /scratch/w/a dir/b.dat failed: "
                           "scratchkeeper: /scratch/w/a dir/b.dat: holds data\n"), done
    silent = subprocess.run(["bash", "-c", fake.replace("echo 'warning: first' >&2; ", "")
                             .replace("echo 'scratchkeeper: /scratch/w/a dir/b.dat: holds "
                                      "data' >&2; ", "") + lines[first]],
                            capture_output=True, text=True, timeout=30)
    assert silent.stdout.endswith("failed: exit status 2\n"), silent
    assert first < transfer
    assert "setstripe --file -c 8 -S 524288 /scratch/w/in.dat" in body
    assert "rm -f --" not in body
    commit = next(line for line in lines if " stage commit " in line)
    # the reason is data: one shell word, whatever it holds
    words = shlex.split(commit.split(" || ")[0])
    assert words[words.index("--layout") + 1].startswith("1-DH count=8 size=524288: 1-DH as "
                                                         "the script asks")


def test_auto_records_its_workload_for_a_hybrid_replica(fixed_callback):
    from scratchkeeper.advisor.hybrid import parse_workload

    body = rendered(script("#STAGEIN -layout auto -request-size 4M -pattern random"), site())
    commit = next(line for line in body.splitlines() if " stage commit " in line)
    words = shlex.split(commit.split(" || ")[0])
    recorded = words[words.index("--layout") + 1]
    assert parse_workload(recorded) == Workload.uniform(64, 16, 4 << 20, shared_file=True,
                                                        pattern="random")
    # a named layout has no workload of the model's: none recorded
    body = rendered(script("#STAGEIN -layout 1dh -request-size 4M"), site())
    commit = next(line for line in body.splitlines() if " stage commit " in line)
    words = shlex.split(commit.split(" || ")[0])
    assert parse_workload(words[words.index("--layout") + 1]) is None


def test_lustre_lays_out_with_lfs_after_removing_an_old_file(fixed_callback):
    config = site(backend="lustre")
    body = rendered(script("#STAGEIN -layout 1dv -stripe-count 4 -request-size 1M"), config)
    assert ("rm -f -- /scratch/w/in.dat\nSK_LAYOUT_ERROR=$(lfs setstripe -c 4 -S 1048576 "
            "/scratch/w/in.dat 2>&1 >/dev/null) || ") in body


def test_without_layout_options_the_data_job_is_unchanged(fixed_callback):
    body = rendered(script(), site())
    assert "setstripe" not in body and "--layout" not in body
    body = rendered(script("#STAGEIN -layout auto"), site(backend="lustre"))
    assert "setstripe" not in body and "--layout" not in body


def test_plan_explain_prints_each_cost_the_choice_and_the_reason():
    from scratchkeeper.cli.planner import _explain

    _, planned = plan(script("#STAGEIN -layout auto -request-size 4M"))
    text = _explain(planned)
    decision = planned.job(STAGE_IN).layout
    assert f"choice: {decision.layout}: {decision.reason}" in text
    assert sum("<- chosen" in line for line in text.splitlines()) == 1
    assert len([line for line in text.splitlines() if line.startswith(("  1-D", "  2-D"))]) == 3
    _, planned = plan(script("#STAGEIN -layout auto"), site(backend="lustre"))
    assert "no layout applied: storage.backend = lustre" in _explain(planned)
