"""``scratchkeeper submit`` (scheduler.submit_via = "chain-service") where the site runs #STAGE
scripts through Slurm's burst buffer (job_submit.lua's staging = "burst-buffer"): job_submit.lua
leaves the job to burst_buffer.lua, so it is not held, and that is what the site asked for."""

from __future__ import annotations

import json

import pytest

from scratchkeeper.chain_service.attach import BURST_BUFFER, HandedOver, hand_over
from scratchkeeper.config import load_config
from scratchkeeper.errors import SchedulerError
from scratchkeeper.runner import CommandResult, CommandRunner

STAGE_LINES = "#STAGEIN ftp://h:2811/a /scratch/a\n"


class BurstBufferSlurm(CommandRunner):
    """sbatch gives job 700; squeue shows it with Slurm's burst-buffer request (``taken``:
    its #STAGE lines) and no admin comment: job_submit.lua did not hold it."""

    def __init__(self, taken: str):
        super().__init__()
        self.taken = taken
        self.recorded: list[tuple[str, ...]] = []

    def run(self, argv, **kwargs):
        argv = tuple(str(a) for a in argv)
        self.recorded.append(argv)
        out = ""
        if argv[0] == "sbatch":
            out = "700\n"
        elif argv[0] == "squeue":
            out = json.dumps({"jobs": [{"job_id": 700, "admin_comment": "",
                                        "burst_buffer": self.taken,
                                        "burst_buffer_state": ""}]})
        return self._keep(CommandResult(argv, 0, out, "", 0.0))


def test_a_job_slurms_burst_buffer_took_is_handed_over_not_cancelled(use_runner):
    fake = use_runner(BurstBufferSlurm(STAGE_LINES))
    assert hand_over("job.sh", load_config(None)) == HandedOver("700", BURST_BUFFER)
    assert [argv[0] for argv in fake.recorded] == ["sbatch", "squeue"]  # no scancel


def test_a_job_neither_path_took_is_still_cancelled(use_runner):
    fake = use_runner(BurstBufferSlurm(""))
    with pytest.raises(SchedulerError, match="neither held for chaining nor taken by Slurm's "
                                             "burst buffer, so it was cancelled"):
        hand_over("job.sh", load_config(None))
    assert fake.recorded[-1] == ("scancel", "700")


def test_submit_says_slurms_burst_buffer_stages_the_job(tmp_path, use_runner, capsys):
    from scratchkeeper.cli import main

    use_runner(BurstBufferSlurm(STAGE_LINES))
    config = tmp_path / "site.toml"
    config.write_text('[scheduler]\nsubmit_via = "chain-service"\n')
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n{STAGE_LINES}true\n")
    assert main(["-c", str(config), "submit", str(script)]) == 0
    assert capsys.readouterr().out == ("job 700: Slurm's burst buffer stages its data while it "
                                       "waits (`scratchkeeper status 700` once its stage-in "
                                       "began)\n")
