"""Planning work grows with the script, not with its square (issue 30: 8,000 transfer lines
took 106 s, 20,000 over ten minutes, all of it comparing every destination with every other).

No timing for the transfers: the calls Python makes while planning are counted, for n transfer
lines and for 2n. Linear (or n log n) work about doubles; the old pairwise check quadrupled it.
Only the join of a continued directive, whose cost was copying and makes no calls, is compared
in CPU time.
"""

import sys
import time

import pytest

from scratchkeeper.config import SiteConfig, StorageConfig
from scratchkeeper.errors import DirectiveError
from scratchkeeper.planner import directives
from scratchkeeper.planner.directives import MAX_PARALLEL_JOBS, parse_script
from scratchkeeper.planner.plan import build_plan
from scratchkeeper.planner.render import render_plan


def script(transfers: int, parallel: bool = False) -> str:
    half = transfers // 2
    lines = ["#!/bin/bash", "#SBATCH --job-name=big"]
    if parallel:
        lines += ["#STAGEIN -parallel", "#STAGEOUT -parallel"]
    lines += [f"#STAGEIN gsiftp://dtn.example.org/archive/d{i % 50}/in{i}.h5 "
              f"/scratch/u/run/d{i % 50}/in{i}.h5" for i in range(half)]
    lines.append("srun ./simulate")
    lines += [f"#STAGEOUT /scratch/u/run/out/o{i}.h5 gsiftp://dtn.example.org/results/o{i}.h5"
              for i in range(transfers - half)]
    return "\n".join(lines) + "\n"


def calls_to_plan(transfers: int) -> int:
    """Python and C function calls made to parse, plan and render the script."""
    config = SiteConfig(storage=StorageConfig(scratch_root="/scratch"))
    text = script(transfers)
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        parsed = parse_script(text, "big.sh", cwd="/scratch/u", scratch_root="/scratch")
        plan = build_plan(parsed, config, chain_id="sk0000000000", workdir="/scratch/u")
        render_plan(plan, parsed.shebang, parsed.compute_script, config)
    finally:
        sys.setprofile(None)
    return count


def test_planning_work_grows_linearly_with_the_transfer_lines():
    small, large = calls_to_plan(1500), calls_to_plan(3000)
    # n log n doubles to ~2.2x; the old pairwise check made this ~3.9x
    assert large / small < 2.6, (small, large)


def test_the_destination_check_does_not_compare_every_pair(monkeypatch):
    """``inside`` (one comparison of two paths) is called a bounded number of times per line,
    not once per earlier line."""
    calls = 0
    real = directives.inside

    def counting(path, root):
        nonlocal calls
        calls += 1
        return real(path, root)

    monkeypatch.setattr(directives, "inside", counting)
    transfers = 2000
    parse_script(script(transfers), "big.sh", cwd="/scratch/u", scratch_root="/scratch")
    assert calls <= 4 * transfers, calls


@pytest.mark.parametrize("text, line, message", [
    ("#STAGEIN /s/a /scratch/x/a\n#STAGEIN /s/b /scratch/x/a\nrun\n", 2,
     "the destination /scratch/x/a is also the destination of line 1"),
    ("#STAGEIN /s/a /scratch/x\n#STAGEIN /s/b /scratch/x/b/c\nrun\n", 2,
     "the destination /scratch/x/b/c lies inside /scratch/x, the destination of line 1"),
    # the earliest of several earlier destinations it holds is named
    ("#STAGEIN /s/a /scratch/x/b/a\n#STAGEIN /s/b /scratch/x/c\n#STAGEIN /s/c /scratch/x/b/d\n"
     "#DW stage_in source=/s/d destination=/scratch/x type=directory\nrun\n", 4,
     "the destination /scratch/x holds /scratch/x/b/a, the destination of line 1"),
    # a remote host compares its own paths, case-insensitively by host
    ("run\n#STAGEOUT /scratch/a gsiftp://H.example.org/r/\n"
     "#STAGEOUT /scratch/b/a gsiftp://h.example.org/r/\n", 3,
     "the destination gsiftp://h.example.org/r/a is also the destination of line 2"),
])
def test_overlapping_destinations_are_refused_at_the_later_line(text, line, message):
    with pytest.raises(DirectiveError) as caught:
        parse_script(text, "job.sh", cwd="/scratch/w", scratch_root="/scratch")
    assert caught.value.line == line
    assert message in str(caught.value)


def test_destinations_that_only_share_a_folder_or_a_prefix_are_accepted():
    parsed = parse_script("#STAGEIN /s/a /scratch/x/ab\n#STAGEIN /s/b /scratch/x/a\n"
                          "#STAGEIN /s/c /scratch/x/a.b/c\nrun\n#STAGEOUT /scratch/x/ab "
                          "gsiftp://h/r/ab\n#STAGEOUT /scratch/x/a gsiftp://g/r/ab\n", "job.sh",
                          cwd="/scratch/w", scratch_root="/scratch")
    assert len(parsed.steps) == 5


def test_a_parallel_stage_is_bounded_in_jobs():
    """Each stage-out job waits on every stage-in job: the chain's dependencies are the product
    of the two counts, so a -parallel stage has at most MAX_PARALLEL_JOBS transfer lines."""
    text = script(2 * MAX_PARALLEL_JOBS, parallel=True)
    parse_script(text, "big.sh", cwd="/scratch/u", scratch_root="/scratch")
    text = script(2 * MAX_PARALLEL_JOBS + 2, parallel=True)
    with pytest.raises(DirectiveError) as caught:
        parse_script(text, "big.sh", cwd="/scratch/u", scratch_root="/scratch")
    # the first stage-in line beyond the limit (lines 1-4: header and options)
    assert caught.value.line == 5 + MAX_PARALLEL_JOBS
    assert f"at most {MAX_PARALLEL_JOBS} transfer lines" in str(caught.value)


def _parse_cpu_seconds(continued: int) -> float:
    lines = ["#!/bin/bash", "#STAGEIN hsi get x \\"]
    lines += [f"#STAGEIN a{i} \\" for i in range(continued)] + ["#STAGEIN end", "run"]
    text = "\n".join(lines) + "\n"
    started = time.process_time()
    parse_script(text, "big.sh", cwd="/scratch/u", scratch_root="/scratch")
    return time.process_time() - started


def test_a_long_continued_directive_is_joined_in_linear_time():
    """One directive continued over many lines was joined by adding each line to the text so
    far, copying it again each time (215,000 lines: 17 s). No call counts show a copy, so CPU
    times are compared: four times the lines take about four times as long (the quadratic
    join took 16 times as long); 8 leaves room for a busy machine."""
    small = min(_parse_cpu_seconds(50_000) for _ in range(2))
    large = _parse_cpu_seconds(200_000)
    assert large / small < 8, (small, large)
