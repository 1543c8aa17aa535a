"""Every line number a message gives names a line the user's script has (issue 32: "error
messages cite line 4 of a 3-line script"): parse errors of ``plan`` and ``submit``, with and
without a final newline, with CRLF endings, on the first and the last line; and bash's own
messages about the compute job, whose script keeps each command on the script's line (the data
directives are comment lines there, the header comment is its last line)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from scratchkeeper.config import SiteConfig
from scratchkeeper.planner.submit import prepare


def run_cli(tmp_path, command, text: str | bytes):
    root = tmp_path / "scratch"
    root.mkdir(exist_ok=True)
    script = root / "job.sh"
    if isinstance(text, str):
        text = text.encode()
    script.write_bytes(text)
    site = tmp_path / "site.toml"
    site.write_text(f'[state]\ndatabase = "{tmp_path / "state.db"}"\n'
                    f'[storage]\nscratch_root = "{root}"\n')
    done = subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(site), command,
                           "job.sh"], capture_output=True, text=True, cwd=root, timeout=60)
    return done, script


def lines_of(text: str | bytes) -> int:
    """How many lines an editor shows: a last line without a newline counts."""
    data = text.encode() if isinstance(text, str) else text
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


BAD = "#STAGEIN http://h/a /etc/x"          # a destination outside the scratch root
CASES = [
    # (script, the line the error names)
    (f"{BAD}\nrun\n", 1),                                   # first line, no shebang
    (f"{BAD}\nrun", 1),
    (f"#!/bin/bash\nrun\n{BAD}\n", 3),                      # last line
    (f"#!/bin/bash\nrun\n{BAD}", 3),                        # last line, no final newline
    ("#!/bin/bash\nrun\n#STAGEIN http://h/a \\\n#STAGEIN /etc/x", 3),  # continued to the end
    ("#!/bin/bash\nrun\n#STAGEIN http://h/a a \\\n", 3),    # continued past the end
    ("#!/bin/bash\nrun\n#STAGEIN http://h/a a \\", 3),
    ("#!/bin/bash\n#SBATCH -J x\n#STAGEIN", 3),             # nothing after it, last line
    ("#!/bin/bash\n#STAGEIN -retry 2\n", 2),               # no commands: the last line
    ("#!/bin/bash\n#STAGEIN -retry 2", 2),
    ("#!/bin/bash\r\nrun\r\n", 1),                          # CRLF: the first line with a CR
    ("#!/bin/bash\nrun\r\n", 2),
    ("#!/bin/bash\nrun\nmore\r", 3),                        # a lone CR on the last line
]


@pytest.mark.parametrize("command", ["plan", "submit"])
@pytest.mark.parametrize("text, line", CASES)
def test_every_error_names_a_line_the_script_has(tmp_path, command, text, line):
    done, _ = run_cli(tmp_path, command, text)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    found = re.match(r"job\.sh:([0-9]+): ", done.stderr)  # the script as the user named it
    assert found, done.stderr
    assert int(found.group(1)) == line, done.stderr
    assert 1 <= line <= lines_of(text)


@pytest.mark.parametrize("command", ["plan", "submit"])
def test_an_empty_script_names_no_line(tmp_path, command):
    done, _ = run_cli(tmp_path, command, "")
    assert done.returncode == 2
    assert done.stderr == "job.sh: the script has no commands for the compute job\n"


COMPUTE_CASES = [
    # (script, the line of `sk_missing_command`)
    ("#!/bin/bash\n#SBATCH -J x\nsk_missing_command\n", 3),
    ("#!/bin/bash\n#SBATCH -J x\nsk_missing_command", 3),           # no final newline
    ("#!/bin/bash\n\n\n#STAGEIN http://h/a in.dat\nsk_missing_command\n", 5),  # blank lines
    ("#!/bin/bash\n#STAGEIN globus-url-copy \\\n#STAGEIN   ftp://h/a \\\n"
     "#STAGEIN file:///s/a\ntrue\nsk_missing_command\n", 6),         # a directive continued
    ("#!/bin/bash\n#DW stage_in source=http://h/a destination={root}/b type=file\n"
     "sk_missing_command\n", 3),
    ("#!/bin/bash\n#PBS -W stagein=in.dat@h:/a\n#PBS -l walltime=1:00\nsk_missing_command\n", 4),
    ("#!/bin/bash\ntrue\n#STAGEOUT out.dat http://h/out\nsk_missing_command\n"
     "#STAGEOUT -retry 2\n", 4),
    ("#!/bin/bash\nsk_missing_command\n#STAGEIN http://h/a in.dat", 2),  # first command line
]


@pytest.mark.parametrize("scheduler", ["slurm", "pbs"])
@pytest.mark.parametrize("text, line", COMPUTE_CASES)
def test_bash_names_the_users_line_in_the_compute_job(tmp_path, scheduler, text, line):
    root = tmp_path / "scratch"
    root.mkdir()
    script = root / "job.sh"
    script.write_text(text.format(root=root))
    config = SiteConfig()
    config = type(config)(**{**config.__dict__, "storage": type(config.storage)(
        **{**config.storage.__dict__, "scratch_root": str(root)})})
    _, plan = prepare(str(script), config, scheduler=scheduler, workdir=str(root),
                      chain_id="sk0123456789")
    compute = root / "compute.sh"
    compute.write_text(plan.job("compute").script)
    done = subprocess.run(["bash", str(compute)], capture_output=True, text=True, timeout=30,
                          cwd=root)
    assert f"{compute}: line {line}: sk_missing_command: command not found" in done.stderr, \
        done.stderr
    assert line <= lines_of(text)
