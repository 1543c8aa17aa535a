"""The --stage-in/--stage-out value rule and job_submit.lua's admin comment, without a cluster."""

from __future__ import annotations

import pytest

from scratchkeeper.chain_service.attach import (
    CHAINED,
    PENDING,
    StageRequest,
    parse_admin_comment,
    planned_text,
    split_request,
)
from scratchkeeper.errors import InputError
from scratchkeeper.planner.directives import DATA_LINE, parse_script


@pytest.mark.parametrize("stage,value,source,destination", [
    ("stage-in", "ftp://host:2811/data/x:/scratch/x", "ftp://host:2811/data/x", "/scratch/x"),
    # a ':/' inside the source does not split: the LAST one does
    ("stage-in", "http://h:8080/a:/b/c:/scratch/c", "http://h:8080/a:/b/c", "/scratch/c"),
    ("stage-in", "file:///src/x:/scratch/x", "file:///src/x", "/scratch/x"),
    ("stage-out", "/scratch/out:ftp://host:2811/sink/out", "/scratch/out", "ftp://host:2811/sink/out"),
    ("stage-out", "/scratch/a:b:http://h/put/a", "/scratch/a:b", "http://h/put/a"),
])
def test_split_at_the_last_colon_before_a_destination(stage, value, source, destination):
    assert split_request(stage, value) == StageRequest(stage, source, destination)


@pytest.mark.parametrize("stage,value,message", [
    ("stage-in", "nocolon", "no ':' found"),
    ("stage-in", "", "needs SRC:DST"),
    ("stage-in", ":/scratch/x", "empty SRC"),
    ("stage-in", "ftp://h/x:", "empty DST"),
    ("stage-in", "bogus://h/x:/scratch/x", "unknown scheme 'bogus'"),
    ("stage-in", "/local/x:/scratch/x", "SRC must be a URI"),
    ("stage-out", "/scratch/x:/elsewhere", "DST a URI"),
    ("stage-out", "relative:ftp://h/x", "SRC must be an absolute file path"),
    ("stage-out", "/scratch/x:nope://h/x", "unknown scheme 'nope'"),
])
def test_bad_values_name_the_problem(stage, value, message):
    with pytest.raises(InputError, match=message):
        split_request(stage, value)


def test_admin_comment_round_trip():
    marker, requests, chain_id = parse_admin_comment(
        f"{PENDING}\nstage-in ftp://h:2811/x:/s/x\nstage-out /s/y:http://h/y\ndirectives")
    assert marker == PENDING and chain_id is None
    assert requests == (StageRequest("stage-in", "ftp://h:2811/x", "/s/x"),
                        StageRequest("stage-out", "/s/y", "http://h/y"))
    assert parse_admin_comment(f"{CHAINED} sk0123456789")[2] == "sk0123456789"
    assert parse_admin_comment("a site's own comment") is None
    assert parse_admin_comment("") is None


def test_requests_become_the_planners_directives_after_the_script():
    script = "#!/bin/bash\n#SBATCH -N 1\n#STAGEIN -retry 1\nwork\n"
    text = planned_text(script, (StageRequest("stage-in", "ftp://h:2811/a b", "/s/a b"),))
    parsed = parse_script(text, "job.sh", cwd="/tmp", scratch_root="/s")
    (step,) = parsed.stage_steps("stage-in")
    assert step.line == 5  # after the script's own 4 lines, which keep their numbers
    assert step.transfer.source.uri == "ftp://h:2811/a%20b" or step.transfer.source.text == "ftp://h:2811/a b"
    assert step.transfer.destination.path == "/s/a b"
    assert parsed.options["stage-in"].retries == 1
    # each directive line a comment line there: `work` stays on line 4 (issue 32)
    assert parsed.compute_script == f"#!/bin/bash\n#SBATCH -N 1\n{DATA_LINE}\nwork\n{DATA_LINE}\n"
