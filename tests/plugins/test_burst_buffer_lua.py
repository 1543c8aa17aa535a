"""slurm-plugins/burst_buffer.lua and job_submit.lua's burst-buffer mode, in Lua 5.1 (lupa).

The cluster tests prove slurmctld runs them; these cover what the cluster cannot switch or show
exactly: the command lines burst_buffer.lua builds (every argument one shell word, whatever it
holds: run through a real sh here), how it reads their exit status and last line, the pool's
JSON, the env file it copies, and the rule that no job is taken by two paths.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

lua51 = pytest.importorskip("lupa.lua51")

from .test_job_submit_lua import Slurmctld  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "slurm-plugins" / "burst_buffer.lua"
SUCCESS, ERROR = 0, -1


class BurstBufferLua:
    """burst_buffer.lua with its paths pointed at ``tmp_path``; ``io.popen`` runs the command
    line in a real sh (lupa's Lua has no popen) and records it."""

    def __init__(self, tmp_path: Path, staging: str = "burst-buffer", *,
                 status_caller: bool = False):
        self.commands: list[str] = []
        self.logs: list[str] = []
        self.state = tmp_path / "state"
        self.state.mkdir()
        self.scratch = tmp_path / "scratch"
        self.scratch.mkdir()
        self.fake = tmp_path / "scratchkeeper"
        self.conf = tmp_path / "job_submit_scratchkeeper.conf"
        self.conf.write_text(f'return {{ staging = "{staging}" }}\n')
        self.answer("ok", 0)
        text = SCRIPT.read_text()
        for name, value in (("SCRATCHKEEPER", self.fake), ("SITE_CONFIG", tmp_path / "site.toml"),
                            ("SCRATCH", self.scratch), ("STATE_DIR", self.state),
                            ("JOB_SUBMIT_CONF", self.conf)):
            start = text.index(f"local {name} = ")
            end = text.index("\n", start)
            text = text[:start] + f'local {name} = "{value}"' + text[end:]
        text = text.replace("local STATUS_CALLER = false",
                            f"local STATUS_CALLER = {str(status_caller).lower()}")
        self.lua = lua51.LuaRuntime(unpack_returned_tuples=True)
        g = self.lua.globals()
        fmt = self.lua.eval("function(...) return string.format(...) end")
        g.slurm = self.lua.table(SUCCESS=SUCCESS, ERROR=ERROR,
                                 log_info=lambda *a: self.logs.append("info: " + fmt(*a)),
                                 log_error=lambda *a: self.logs.append("error: " + fmt(*a)))
        g.run_shell = self._run_shell
        self.lua.execute("""
            io.popen = function(command)
              local output = run_shell(command)
              return { read = function() return output end, close = function() return true end }
            end""")
        self.lua.execute(text)

    def _run_shell(self, command: str) -> str:
        self.commands.append(command)
        return subprocess.run(["sh", "-c", command], capture_output=True, text=True,
                              timeout=30).stdout

    def answer(self, text: str, code: int) -> None:
        """The fake scratchkeeper: records its arguments (one per line), prints ``text``."""
        self.fake.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done '
                             f'> "{self.fake}.args"\nprintf "%s\\n" "{text}"\nexit {code}\n')
        os.chmod(self.fake, 0o755)

    def arguments(self) -> list[str]:
        return Path(f"{self.fake}.args").read_text().splitlines()

    def call(self, name: str, *args):
        return getattr(self.lua.globals(), name)(*args)


@pytest.fixture
def bb(tmp_path):
    return BurstBufferLua(tmp_path)


def test_each_argument_reaches_scratchkeeper_as_one_word_whatever_it_holds(bb):
    hostile = "/tmp/job'; touch /tmp/owned; echo '$(id)`id`\"x y"
    rc, message = bb.call("slurm_bb_data_in", "42", hostile)
    assert rc == SUCCESS and message == "ok"
    assert bb.arguments() == ["-c", str(bb.fake.parent / "site.toml"), "bb", "data-in", "42",
                              hostile]
    assert not Path("/tmp/owned").exists()


def test_a_failing_stage_returns_an_error_with_its_last_line_and_logs_it(bb):
    bb.answer("first line\nscratchkeeper: stage-in failed: script:3: no such file", 1)
    rc, message = bb.call("slurm_bb_data_in", "42", "/s/script")
    assert rc == ERROR
    assert message == "scratchkeeper: stage-in failed: script:3: no such file"
    assert any(line.startswith("error: scratchkeeper: bb data-in: exit 1:") for line in bb.logs)


def test_job_process_is_bounded_and_names_the_bound_when_killed(bb):
    bb.call("slurm_bb_job_process", "/s/script")
    assert bb.commands[-1].startswith("timeout -s KILL 10 ")
    bb.fake.write_text("#!/bin/sh\nkill -KILL $$\n")
    rc, message = bb.call("slurm_bb_job_process", "/s/script")
    assert rc == ERROR and message == "scratchkeeper: job-process took longer than 10 s"


def test_job_process_refuses_when_job_submit_lua_holds_the_same_jobs(tmp_path):
    bb = BurstBufferLua(tmp_path, staging="hold")
    rc, message = bb.call("slurm_bb_job_process", "/s/script")
    assert rc == ERROR and "staging = \"burst-buffer\"" in message
    assert bb.commands == []  # nothing was run


def test_the_pool_is_free_space_plus_the_bytes_staged_jobs_hold_in_mib(bb):
    (bb.state / "held-bytes").write_text(f"{3 << 20}\n")
    rc, pools = bb.call("slurm_bb_pools")
    assert rc == SUCCESS
    (pool,) = json.loads(pools)["pools"]
    free = int(subprocess.run(["df", "-P", "-B1", str(bb.scratch)], capture_output=True,
                              text=True).stdout.splitlines()[1].split()[3])
    assert pool["id"] == "scratch" and pool["granularity"] == 1 << 20
    # df moves between the two looks by at most a few MiB on a busy disk
    assert abs(pool["quantity"] - (free + (3 << 20)) // (1 << 20)) <= 64


def test_paths_copies_the_env_file_data_in_wrote_and_nothing_for_a_strange_job_id(bb, tmp_path):
    (bb.state / "42.env").write_text("SCRATCHKEEPER_CHAIN=sk1\nSCRATCHKEEPER_STAGED_1=/s/a\n")
    target = tmp_path / "path"
    target.write_text("")
    assert bb.call("slurm_bb_paths", "42", "/s/script", str(target)) == SUCCESS
    assert target.read_text() == "SCRATCHKEEPER_CHAIN=sk1\nSCRATCHKEEPER_STAGED_1=/s/a\n"
    other = tmp_path / "other"
    other.write_text("")
    assert bb.call("slurm_bb_paths", "../42", "/s/script", str(other)) == SUCCESS
    assert other.read_text() == ""


def test_real_size_passes_a_number_only(bb):
    bb.answer("1234", 0)
    assert bb.call("slurm_bb_real_size", "42") == (SUCCESS, "1234")
    bb.answer("not a number", 0)
    assert bb.call("slurm_bb_real_size", "42") == SUCCESS


def test_get_status_returns_the_whole_text(bb):
    bb.fake.write_text("#!/bin/sh\nprintf 'line one\\nline two\\n'\n")
    rc, text = bb.call("slurm_bb_get_status")
    assert rc == SUCCESS and text == "line one\nline two\n"


def test_get_status_hands_on_the_words_after_bbstat(bb):
    """Slurm 22.05: ``scontrol show bbstat 12 -x`` calls get_status("12", "-x")."""
    bb.call("slurm_bb_get_status", "12", "-x")
    assert bb.arguments()[3:] == ["status", "--", "12", "-x"]
    bb.call("slurm_bb_get_status")
    assert bb.arguments()[3:] == ["status", "--"]


def test_get_status_hands_on_the_caller_slurm_23_passes_before_the_words(tmp_path):
    bb = BurstBufferLua(tmp_path, status_caller=True)
    bb.call("slurm_bb_get_status", "1000", "100", "12")
    assert bb.arguments()[3:] == ["status", "--caller=1000:100", "--", "12"]


def test_post_run_runs_nothing(bb):
    assert bb.call("slurm_bb_post_run", "42", "/s/script") == SUCCESS
    assert bb.commands == []


def test_a_failed_data_out_is_logged_and_the_job_goes_on(bb):
    """Slurm 22.05 keeps a job whose data_out failed in STAGE_OUT until scancel --hurry."""
    bb.answer("Traceback: sqlite3.OperationalError: database is locked", 1)
    rc, message = bb.call("slurm_bb_data_out", "42", "/s/script")
    assert rc == SUCCESS
    assert message == ("stage-out FAILED, results left on scratch: Traceback: "
                       "sqlite3.OperationalError: database is locked")
    assert any(line.startswith("error: scratchkeeper: bb data-out: exit 1:") for line in bb.logs)


def test_pools_fails_when_df_fails_so_slurm_keeps_the_pool(bb):
    bb.scratch.rmdir()  # df of a missing path fails
    rc, message = bb.call("slurm_bb_pools")
    assert rc == ERROR and message == f"scratchkeeper: df {bb.scratch} failed"
    assert any("df" in line and "failed" in line for line in bb.logs)


def pool_mib(bb) -> int:
    free = int(subprocess.run(["df", "-P", "-B1", str(bb.scratch)], capture_output=True,
                              text=True).stdout.splitlines()[1].split()[3])
    return free // (1 << 20)


def test_a_capacity_larger_than_the_pool_is_refused_at_sbatch_with_the_pools_size(bb, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N1\n\n#STAGE pool=scratch capacity=900PiB\n"
                      "#STAGEIN ftp://h/a /s/a\ntrue\n")
    rc, message = bb.call("slurm_bb_job_process", str(script))
    assert rc == ERROR
    found = re.fullmatch(r"scratchkeeper: #STAGE capacity=900PiB asks (\S+) GiB of the pool "
                         r"scratch, which holds (\S+) GiB \(free space on (\S+) and what staged "
                         r"jobs hold\): ask for less", message)
    assert found, message
    assert float(found.group(1)) == 900 * 1024 ** 2 and found.group(3) == str(bb.scratch)
    # df moves between the two looks by at most a few MiB on a busy disk
    assert abs(float(found.group(2)) * 1024 - pool_mib(bb)) <= 64
    assert not any("bb" in command.split() for command in bb.commands)  # no planner run


@pytest.mark.parametrize("line", [
    "#STAGE pool=scratch capacity=1M",     # fits
    "#STAGE pool=other capacity=900P",     # another pool: Slurm's to judge
    "#STAGE pool=scratch capacity=9000N",  # nodes, not bytes
])
def test_a_capacity_the_pool_can_give_goes_on_to_the_planners_check(bb, tmp_path, line):
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n{line}\n#STAGEIN ftp://h/a /s/a\ntrue\n")
    assert bb.call("slurm_bb_job_process", str(script)) == (SUCCESS, "ok")
    assert bb.arguments()[3:] == ["job-process", str(script)]


def test_a_capacity_line_after_the_first_command_is_not_slurms_and_not_checked(bb, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#STAGEIN ftp://h/a /s/a\ntrue\n"
                      "#STAGE pool=scratch capacity=900P\n")
    assert bb.call("slurm_bb_job_process", str(script)) == (SUCCESS, "ok")
    assert not any(command.startswith("timeout -s KILL 2 df") for command in bb.commands)


# job_submit.lua in burst-buffer mode: the scripts Slurm hands to burst_buffer.lua pass, the
# others are still held for the chain service, and a job never goes to both.
@pytest.fixture
def bb_mode(tmp_path):
    return Slurmctld(tmp_path, 'return { staging = "burst-buffer" }')


def test_a_script_burst_buffer_takes_passes_job_submit_untouched(bb_mode):
    rc, job = bb_mode.submit(script="#!/bin/sh\n#SBATCH -N1\n\n#STAGEIN ftp://h/a /s/a\ntrue\n")
    assert rc == SUCCESS and job.priority is None and job.admin_comment is None


@pytest.mark.parametrize("script", [
    "#!/bin/sh\ntrue\n#STAGEIN ftp://h/a /s/a\n",        # after the first command: Slurm stops
    "#!/bin/sh\n  #STAGEIN ftp://h/a /s/a\ntrue\n",      # indented: not "#STAGE" at column 0
    "#!/bin/sh\n#DW stage_in source=ftp://h/a destination=/s/a type=file\ntrue\n",
])
def test_scripts_burst_buffer_does_not_take_are_still_held_for_the_chain_service(bb_mode, script):
    rc, job = bb_mode.submit(script=script)
    assert rc == SUCCESS and job.priority == 0
    assert job.admin_comment.startswith("scratchkeeper:chain-pending")


def test_directives_and_spank_options_together_are_refused_in_burst_buffer_mode(bb_mode):
    rc, job = bb_mode.submit(script="#!/bin/sh\n#STAGEIN ftp://h/a /s/a\ntrue\n",
                             spank_job_env=["SCRATCHKEEPER_STAGE_IN=ftp://h/b:/s/b"])
    assert rc == ERROR and job.priority is None
    assert "both #STAGEIN/#STAGEOUT lines and --stage-in/--stage-out" in \
        bb_mode.user_messages[-1]
