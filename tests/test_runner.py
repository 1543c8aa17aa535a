"""The one command runner: timeouts that kill the whole process group, dry-run, capture."""

import os
import time

import pytest

from scratchkeeper.errors import CommandError, CommandTimeout
from scratchkeeper.runner import CommandRunner


def test_runs_and_captures_output():
    result = CommandRunner().run(["sh", "-c", "echo out; echo err >&2"])
    assert (result.returncode, result.stdout, result.stderr) == (0, "out\n", "err\n")


def test_failure_carries_stderr():
    with pytest.raises(CommandError) as info:
        CommandRunner().run(["sh", "-c", "echo nope >&2; exit 3"])
    assert info.value.returncode == 3 and "nope" in str(info.value)
    assert CommandRunner().run(["false"], check=False).returncode == 1


def test_missing_command():
    with pytest.raises(CommandError, match="command not found"):
        CommandRunner().run(["no-such-command-here"])


def test_timeout_kills_the_process_group(tmp_path):
    marker = tmp_path / "child.pid"
    started = time.monotonic()
    with pytest.raises(CommandTimeout, match="timed out after 0.5s"):
        CommandRunner().run(["sh", "-c", f"sleep 30 & echo $! > {marker}; wait"], timeout=0.5)
    assert time.monotonic() - started < 5
    child = int(marker.read_text())
    time.sleep(0.2)
    state = None
    try:
        state = open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        pass
    assert state in (None, "Z"), "the background child of a timed-out command must be killed"


def test_dry_run_skips_mutating_commands_only(tmp_path):
    runner = CommandRunner(dry_run=True)
    target = tmp_path / "made"
    with runner.capture() as commands:
        assert runner.run(["touch", str(target)]).dry_run
        assert runner.run(["echo", "query"], mutating=False).stdout == "query\n"
    assert not target.exists()
    assert [c.argv for c in commands] == [("touch", str(target)), ("echo", "query")]


def test_capture_keeps_nothing_outside_a_block():
    runner = CommandRunner()
    runner.run(["true"])
    with runner.capture() as commands:
        runner.run(["true"])
    runner.run(["true"])
    assert len(commands) == 1 and commands[0].seconds >= 0


def test_environment_is_added_to_the_parent_one():
    result = CommandRunner().run(["sh", "-c", "echo $SK_TEST_VALUE:$HOME"], env={"SK_TEST_VALUE": "x"})
    assert result.stdout.strip() == f"x:{os.environ['HOME']}"
