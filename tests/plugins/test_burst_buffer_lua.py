"""slurm-plugins/burst_buffer.lua, its directive check (burst_buffer_check.lua) and
job_submit.lua's burst-buffer mode, in lupa's Lua, as each Slurm release runs them: 22.05 (Lua
5.1, the 22.05 arguments) and 24.11 (Lua 5.3, uid, gid and job_info appended, the caller before
get_status's words, test_data_in/_out required): tests/plugins/slurm_lua.py.

The cluster tests prove slurmctld runs them; these cover what the cluster cannot switch or show
exactly: the command lines burst_buffer.lua builds (every argument one shell word, whatever it
holds: run through a real sh here), how it reads their exit status and last line, the pool's
JSON, the env file it copies, the rule that no job is taken by two paths, and that
slurm_bb_job_process starts no process and refuses only what the planner refuses, in its words.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
from pathlib import Path

import pytest

from scratchkeeper.errors import DirectiveError
from scratchkeeper.planner.directives import parse_script

from .slurm_lua import GID, RELEASE_IDS, RELEASES, SLURM_22_05, SLURM_24_11, UID, SlurmRelease
from .test_job_submit_lua import Slurmctld

SCRIPT = Path(__file__).resolve().parents[2] / "slurm-plugins" / "burst_buffer.lua"
CHECK = SCRIPT.with_name("burst_buffer_check.lua")
SUCCESS, ERROR = 0, -1


class BurstBufferLua:
    """burst_buffer.lua with its paths pointed at ``tmp_path``; ``io.popen`` runs the command
    line in a real sh (lupa's Lua has no popen) and records it."""

    def __init__(self, tmp_path: Path, release: SlurmRelease, staging: str = "burst-buffer", *,
                 check: Path = CHECK):
        self.release = release
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
                            ("JOB_SUBMIT_CONF", self.conf), ("CHECK_SCRIPT", check)):
            start = text.index(f"local {name} = ")
            end = text.index("\n", start)
            text = text[:start] + f'local {name} = "{value}"' + text[end:]
        self.lua = release.runtime()
        g = self.lua.globals()
        fmt = self.lua.eval("function(...) return string.format(...) end")
        g.slurm = self.lua.table(SUCCESS=SUCCESS, ERROR=ERROR,
                                 log_info=lambda *a: self.logs.append("info: " + fmt(*a)),
                                 log_error=lambda *a: self.logs.append("error: " + fmt(*a)),
                                 **release.slurm_table)
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
        """Slurm's call of ``name``, given its 22.05 arguments, as this release makes it."""
        return getattr(self.lua.globals(), name)(*self.release.bb_arguments(self.lua, name, *args))


@pytest.fixture(params=RELEASES, ids=RELEASE_IDS)
def release(request):
    return request.param


@pytest.fixture
def bb(tmp_path, release):
    return BurstBufferLua(tmp_path, release)


# The hooks burst_buffer/lua looks up when it loads the script (24.11's req_fxns; 22.05's list
# is the same without the two test_data ones): slurmctld 24.11 exits if one is missing.
REQUIRED_24_11 = ["slurm_bb_job_process", "slurm_bb_pools", "slurm_bb_job_teardown",
                  "slurm_bb_setup", "slurm_bb_data_in", "slurm_bb_test_data_in",
                  "slurm_bb_real_size", "slurm_bb_paths", "slurm_bb_pre_run",
                  "slurm_bb_post_run", "slurm_bb_data_out", "slurm_bb_test_data_out",
                  "slurm_bb_get_status"]


def test_the_script_defines_every_function_slurm_requires(bb):
    g = bb.lua.globals()
    lua_type = bb.lua.eval("type")
    assert [name for name in REQUIRED_24_11 if lua_type(g[name]) != "function"] == []


def test_every_call_takes_each_releases_arguments(bb, tmp_path):
    """Every hook, called with the release's whole argument list, answers as with 22.05's."""
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n#STAGEIN ftp://h/a {bb.scratch}/a\ntrue\n")
    path_file = tmp_path / "path"
    path_file.write_text("")
    (bb.state / "42.env").write_text("SCRATCHKEEPER_CHAIN=sk1\n")
    bb.answer("7", 0)
    assert bb.call("slurm_bb_job_process", str(script)) == SUCCESS
    assert bb.call("slurm_bb_setup", "42", UID, GID, "scratch", "1048576", str(script)) == \
        (SUCCESS, "7")
    assert bb.arguments()[3:] == ["setup", "42", UID, GID, "scratch", "1048576", str(script)]
    for hook, stage in (("slurm_bb_data_in", "data-in"), ("slurm_bb_pre_run", "pre-run"),
                        ("slurm_bb_data_out", "data-out")):
        assert bb.call(hook, "42", str(script)) == (SUCCESS, "7")
        assert bb.arguments()[3:] == [stage, "42", str(script)]  # the extras stay out
    assert bb.call("slurm_bb_real_size", "42") == (SUCCESS, "7")
    assert bb.call("slurm_bb_paths", "42", str(script), str(path_file)) == SUCCESS
    assert path_file.read_text() == "SCRATCHKEEPER_CHAIN=sk1\n"
    assert bb.call("slurm_bb_post_run", "42", str(script)) == SUCCESS
    assert bb.call("slurm_bb_job_teardown", "42", str(script), "true") == (SUCCESS, "7")
    assert bb.arguments()[3:] == ["teardown", "42", str(script), "true"]
    rc, pools = bb.call("slurm_bb_pools")
    assert rc == SUCCESS and json.loads(pools)["pools"][0]["id"] == "scratch"
    assert bb.logs and not any(line.startswith("error:") for line in bb.logs)


def test_test_data_in_and_out_answer_done_and_run_nothing(tmp_path):
    """24.11 polls them until an answer other than BUSY; data_in and data_out have waited for
    their data jobs already, so the job goes on at once, as on 22.05 (which has no such call)."""
    bb = BurstBufferLua(tmp_path, SLURM_24_11)
    for hook in ("slurm_bb_test_data_in", "slurm_bb_test_data_out"):
        assert bb.call(hook, "42", "/s/script") == SUCCESS
    assert bb.commands == []


def test_a_refusal_names_the_submitter_where_slurm_passes_it(tmp_path, release):
    bb = BurstBufferLua(tmp_path, release)
    bad = tmp_path / "bad.sh"
    bad.write_text(f"#!/bin/bash\n#STAGEIN gopher://h/a {bb.scratch}/a\ntrue\n")
    rc, message = bb.call("slurm_bb_job_process", str(bad))
    assert rc == ERROR
    who = f"uid {UID} gid {GID}: " if release.passes_owner else ""
    assert bb.logs == [f"info: scratchkeeper: bb job-process: {who}{message}"]


def test_each_argument_reaches_scratchkeeper_as_one_word_whatever_it_holds(bb):
    hostile = "/tmp/job'; touch /tmp/owned; echo '$(id)`id`\"x y"
    rc, message = bb.call("slurm_bb_data_in", "42", hostile)
    assert rc == SUCCESS and message == "ok"
    assert bb.arguments() == ["-c", str(bb.fake.parent / "site.toml"), "bb", "data-in", "42",
                              hostile]
    assert not Path("/tmp/owned").exists()


def test_the_command_runs_below_slurmctlds_priority(bb):
    """nice 10 over the caller's (slurmscriptd's): slurmctld and munged answer sbatch first."""
    bb.fake.write_text('#!/bin/sh\nprintf "%s\\n" "$(cut -d" " -f19 /proc/$$/stat)"\n')
    os.chmod(bb.fake, 0o755)
    rc, message = bb.call("slurm_bb_data_in", "42", "/s/script")
    assert rc == SUCCESS and int(message) == min(os.nice(0) + 10, 19)


def test_a_failing_stage_returns_an_error_with_its_last_line_and_logs_it(bb):
    bb.answer("first line\nscratchkeeper: stage-in failed: script:3: no such file", 1)
    rc, message = bb.call("slurm_bb_data_in", "42", "/s/script")
    assert rc == ERROR
    assert message == "scratchkeeper: stage-in failed: script:3: no such file"
    assert any(line.startswith("error: scratchkeeper: bb data-in: exit 1:") for line in bb.logs)


def test_job_process_runs_no_command_for_a_good_script_nor_a_bad_one(bb, tmp_path):
    """It runs inside slurmctld under its locks: no interpreter is started per sbatch."""
    good = tmp_path / "good.sh"
    good.write_bytes(f"#!/bin/bash\n#STAGEIN ftp://h/a {bb.scratch}/a\ntrue\n".encode() + b"\0")
    assert bb.call("slurm_bb_job_process", str(good)) == SUCCESS
    bad = tmp_path / "bad.sh"
    bad.write_bytes(f"#!/bin/bash\n#SBATCH -N1\n#STAGEIN gopher://h/a {bb.scratch}/a\ntrue\n"
                    .encode() + b"\0")
    rc, message = bb.call("slurm_bb_job_process", str(bad))
    assert rc == ERROR
    assert message == ("scratchkeeper: script:3: #STAGEIN: unknown URI scheme 'gopher://' "
                       "(supported: gsiftp://, ftp://, http://, https://, file://, scp://, "
                       "host:path, or a path)")
    assert bb.commands == []
    who = f"uid {UID} gid {GID}: " if bb.release.passes_owner else ""
    assert bb.logs == [f"info: scratchkeeper: bb job-process: {who}{message}"]


def test_a_script_the_check_cannot_judge_passes_to_data_in(bb, tmp_path):
    """A relative path: the job's directory (which Slurm 22.05 does not hand job_process)
    decides whether it lies in scratch; data_in's planner judges it."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#STAGEIN ftp://h/a ../../elsewhere/a\ntrue\n")
    assert bb.call("slurm_bb_job_process", str(script)) == SUCCESS
    assert bb.commands == []


@pytest.mark.parametrize("check_text,logged", [
    (None, "cannot load"),
    ('error("a bug")', "cannot load"),
    ("return 42", "cannot load"),
    ("return function(text, root) return nil + 1 end", "the directive check failed"),
])
def test_a_check_that_cannot_load_or_fails_refuses_nothing_and_is_logged(tmp_path, check_text,
                                                                         logged):
    check = tmp_path / "check.lua"
    if check_text is not None:
        check.write_text(check_text)
    bb = BurstBufferLua(tmp_path, SLURM_22_05, check=check)
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n#STAGEIN gopher://h/a {bb.scratch}/a\ntrue\n")
    assert bb.call("slurm_bb_job_process", str(script)) == SUCCESS
    assert bb.commands == []
    assert any(line.startswith("error: scratchkeeper: bb job-process: ") and logged in line
               for line in bb.logs), bb.logs


def test_job_process_refuses_when_job_submit_lua_holds_the_same_jobs(tmp_path, release):
    bb = BurstBufferLua(tmp_path, release, staging="hold")
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


def test_get_status_hands_on_the_words_after_bbstat_after_the_caller_slurm_passes(bb):
    """``scontrol show bbstat 12 -x``: 22.05 calls get_status("12", "-x"), 24.11
    get_status(UID, GID, "12", "-x")."""
    caller = [f"--caller={UID}:{GID}"] if bb.release.passes_owner else []
    bb.call("slurm_bb_get_status", "12", "-x")
    assert bb.arguments()[3:] == ["status", *caller, "--", "12", "-x"]
    bb.call("slurm_bb_get_status")
    assert bb.arguments()[3:] == ["status", *caller, "--"]


def test_words_that_look_like_a_caller_stay_words_on_22_05(tmp_path):
    """``scontrol show bbstat 1000 100 12`` on 22.05: three job ids, no caller."""
    bb = BurstBufferLua(tmp_path, SLURM_22_05)
    bb.call("slurm_bb_get_status", "1000", "100", "12")
    assert bb.arguments()[3:] == ["status", "--", "1000", "100", "12"]


def test_a_slurm_table_with_every_error_code_means_the_caller_comes_first(tmp_path):
    """23.02 and 23.11 (every error code in the table, no SLURM_BB_BUSY yet) pass the caller."""
    release = SlurmRelease("23.02", "lua53", slurm_table={"ESLURM_INVALID_JOB_ID": 2017},
                           float_numbers=True, passes_owner=True)
    bb = BurstBufferLua(tmp_path, release)
    bb.call("slurm_bb_get_status", "12")
    assert bb.arguments()[3:] == ["status", f"--caller={UID}:{GID}", "--", "12"]


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
def test_a_capacity_the_pool_can_give_passes_with_no_planner_run(bb, tmp_path, line):
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n{line}\n#STAGEIN ftp://h/a {bb.scratch}/a\ntrue\n")
    assert bb.call("slurm_bb_job_process", str(script)) == SUCCESS
    assert not any("bb" in command.split() for command in bb.commands)


def test_a_capacity_line_after_the_first_command_is_not_slurms_and_not_checked(bb, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n#STAGEIN ftp://h/a {bb.scratch}/a\ntrue\n"
                      "#STAGE pool=scratch capacity=900P\n")
    assert bb.call("slurm_bb_job_process", str(script)) == SUCCESS
    assert bb.commands == []


def test_job_process_sizes_the_pool_from_what_pools_read_of_df(bb, tmp_path):
    """slurm_bb_pools runs df every 30 s and keeps what it read: job_process reads that (and
    the held bytes), no df of its own, while it is at most FREE_SECONDS old."""
    (bb.state / "held-bytes").write_text(f"{1 << 30}\n")
    rc, _ = bb.call("slurm_bb_pools")
    assert rc == SUCCESS and len(bb.commands) == 1  # its df
    free, at = (bb.state / "scratch-free").read_text().split()
    (bb.state / "scratch-free").write_text(f"{2 << 30} {at}\n")  # 2 GiB free, as df said then
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n#STAGE pool=scratch capacity=4G\n"
                      f"#STAGEIN ftp://h/a {bb.scratch}/a\ntrue\n")
    rc, message = bb.call("slurm_bb_job_process", str(script))
    assert rc == ERROR and "asks 4.0 GiB of the pool scratch, which holds 3.0 GiB" in message
    script.write_text(f"#!/bin/bash\n#STAGE pool=scratch capacity=3G\n"
                      f"#STAGEIN ftp://h/a {bb.scratch}/a\ntrue\n")
    assert bb.call("slurm_bb_job_process", str(script)) == SUCCESS
    assert len(bb.commands) == 1  # no df, nothing else
    # too old: df again
    (bb.state / "scratch-free").write_text(f"{2 << 30} {int(at) - 301}\n")
    bb.call("slurm_bb_job_process", str(script))
    assert len(bb.commands) == 2 and bb.commands[-1].startswith("timeout -s KILL 2 df")


# -- the directive check against the planner -----------------------------------------------------
# burst_buffer_check.lua refuses a script only where data_in's planner (parse_script) refuses it,
# whatever directory the job runs from, with the planner's words. Names only: the scratch root
# need not exist (the planner resolves symbolic links, and there are none here).
ROOT = "/nonexistent-sk/scratch"
INSIDE, OUTSIDE = f"{ROOT}/me/run", "/home/me"
HEADER = "#!/bin/bash\n#SBATCH -N1\n"


@pytest.fixture(scope="module", params=RELEASES, ids=RELEASE_IDS)
def check(request):
    return request.param.runtime().execute(CHECK.read_text())


def planner_words(text: str, cwd: str) -> str | None:
    """What data_in's planner says of the script, as burst_buffer.lua would show it."""
    try:
        parse_script(text, "script", cwd=cwd, scratch_root=ROOT)
    except DirectiveError as err:
        return f"scratchkeeper: {err}"
    return None


@pytest.mark.parametrize("body", [
    "#STAGEIN gopher://h/a {root}/a\ntrue\n",
    "#STAGEIN ftp://h:2811/a /tmp/a\ntrue\n",
    "#STAGEIN ftp://h:99999/a {root}/a\ntrue\n",
    "#STAGEIN http:///x {root}/a\ntrue\n",
    "#STAGEIN http://h {root}/a\ntrue\n",
    "#STAGEIN http://bad_host-/x {root}/a\ntrue\n",
    "#STAGEIN file://other/x {root}/a\ntrue\n",
    "#STAGEIN ~/x {root}/a\ntrue\n",
    "#STAGEIN h-:x {root}/a\ntrue\n",
    "#STAGEIN @h:x {root}/a\ntrue\n",
    "#STAGEIN ftp://h/a {root}\n#STAGEIN ftp://h/b {root}/../etc/b\ntrue\n",
    "#STAGEIN ftp://h/ {root}/d/\ntrue\n",
    "#STAGEIN {root}/a {root}/a/\ntrue\n",
    "#STAGEIN {root}/a ftp://h/a\ntrue\n",
    "#STAGEOUT ftp://h/a ftp://h/b\ntrue\n",
    "#STAGEOUT {root} ftp://h/b\ntrue\n",
    "#STAGEIN\ntrue\n",
    "  #STAGEIN   # nothing but a comment\ntrue\n",
    "#STAGEIN ftp://h/a {root}/a extra\ntrue\n",
    "#STAGEIN (bad)\ntrue\n",
    "#STAGEIN -bogus\ntrue\n",
    "#STAGEIN -retry 3 -retry 4\ntrue\n",
    "#STAGEIN -retry 3\n#STAGEIN -retries=4\ntrue\n",
    "#STAGEIN -retry 101\ntrue\n",
    "#STAGEIN -retry-delay 5.\ntrue\n",
    "#STAGEIN -walltime 2:60:00\ntrue\n",
    "#STAGEIN -t 1-24\ntrue\n",
    "#STAGEIN -priority -1025\ntrue\n",
    "#STAGEIN -qos -x\ntrue\n",
    "#STAGEIN -dependency afterok\ntrue\n",
    "#STAGEOUT -start now\ntrue\n",
    "#STAGEIN -when close\ntrue\n",
    "#STAGEIN -wait-for-source 8d\ntrue\n",
    "#STAGEIN -input /tmp/in\ntrue\n",
    "#STAGEIN -input http://h/x\ntrue\n",
    "#STAGEIN -retry\ntrue\n",
    "#STAGEIN -retry 3 hsi get x\ntrue\n",
    "#STAGEIN ftp://h/a {root}/a \\\n  extra\ntrue\n",
    "#STAGEIN ftp://h/a \\\n#STAGEIN   {root}/a\n#STAGEIN ftp://h/b {root}/a\ntrue\n",
    "#STAGEIN ftp://h/a {root}/a \\\n",
    "#STAGEIN ftp://h/a {root}/d\n#STAGEIN ftp://h/b {root}/d/e\ntrue\n",
    "#STAGEIN ftp://h/a {root}/d/e\n#DW stage_in source=ftp://h/b/ destination={root}/d "
    "type=directory\ntrue\n",
    "#STAGEOUT {root}/r http://h/out/\n#STAGEOUT {root}/s http://H/out/r\ntrue\n",
    "#DW stage_in source=ftp://h/a destination=/tmp/x type=file\ntrue\n",
    "#DW stage_in source=ftp://h/a type=file\ntrue\n",
    "#DW stage_out source={root}/a destination=ftp://h/a type=folder\ntrue\n",
    "#DW stage_in source=ftp://h/a destination={root}/a type=file bogus=1\ntrue\n",
    "#STAGEIN ftp://h/a {root}/a\n",
    "#STAGEIN -parallel\n" + "".join(f"#STAGEIN ftp://h/{n} {{root}}/{n}\n" for n in range(257))
    + "true\n",
    "#STAGEIN ftp://h/a {root}/a\r\ntrue\n",
])
def test_the_check_refuses_what_the_planner_refuses_in_its_words(check, body):
    text = HEADER + body.format(root=ROOT)
    said = check(text, ROOT)
    assert said is not None
    assert said == planner_words(text, INSIDE) == planner_words(text, OUTSIDE)


@pytest.mark.parametrize("body", [
    "#STAGEIN ftp://h/a ../../elsewhere/a\n#STAGEIN gopher://h/b {root}/b\ntrue\n",  # relative
    "#STAGEIN 'ftp://h/a' {root}/a\n#STAGEIN gopher://h/b {root}/b\ntrue\n",  # shell quoting
    "#STAGEIN -layout auto\n#STAGEIN gopher://h/b {root}/b\ntrue\n",
    "#STAGEIN -l walltime=1:00\n#STAGEIN gopher://h/b {root}/b\ntrue\n",
    "#PBS -W stagein=a@h:/b\n#STAGEIN gopher://h/b {root}/b\ntrue\n",
    "#STAGEIN ftp://h/a%0A {root}/a\ntrue\n",
    "#STAGEIN ftp://[::1]/a {root}/a\ntrue\n",
    "#STAGEIN http://h:x/a {root}/a\ntrue\n",
    "# r\u00e9sum\u00e9\n#STAGEIN gopher://h/b {root}/b\ntrue\n",  # not plain ASCII
    "#STAGEIN gopher://h/b {root}/b\x0b\ntrue\n",  # a blank to Python, not to Lua
    # bounds on the time slurmctld holds its locks: 1000 directive lines, 256 KiB
    "".join(f"#STAGEIN ftp://h/{n} {{root}}/{n}\n" for n in range(1000))
    + "#STAGEIN gopher://h/b {root}/b\ntrue\n",
    "# " + "x" * (256 << 10) + "\n#STAGEIN gopher://h/b {root}/b\ntrue\n",
])
def test_what_the_check_cannot_judge_it_leaves_to_data_in(check, body):
    assert check(HEADER + body.format(root=ROOT), ROOT) is None


LOCAL = [f"{ROOT}/a", f"{ROOT}/a/b", f"{ROOT}/d/", ROOT, f"{ROOT}/", f"{ROOT}/../x", "/tmp/f",
         f"/{ROOT}/c", f"{ROOT}/./e/.", f"{ROOT}/e/..", "rel/x", "./y", "~/z", f"file://{ROOT}/f",
         f"file://localhost{ROOT}/g", "file://h/x", "file:rel"]
REMOTE = ["ftp://h/a", "ftp://h:2811/a", "gsiftp://data.example.org/run/in.dat", "http://h/",
          "http://h", "https://u@h/x", "http://h:99999/x", "http://h:x/y", "gopher://h/a",
          "http://-h/x", "h:path", "u@h:path", "@h:p", "h:", "[::1]:p", "[zz]:p", "http://H/Out/",
          "scp://h/x", "http://h/a%20b", "http://h/a?q", "ftp://h/dir/", "http://h/.", "http:///x",
          "h_:x", "a.b.:x", "x@y@z:p"]
OPTIONS = ["-retry 3", "-retry 101", "-retry x", "-retry-delay 5", "-retry-delay 5.",
           "-retry-delay 86401", "-walltime 10", "-walltime 0", "-walltime 1-24",
           "-walltime 2:60:00", "-walltime 99:99", "-t 1:00:00", "-qos normal", "-qos -x",
           "-A acct", "-priority 5", "-priority -2000", "-p 4294967295", "-name a.b", "-parallel",
           "-parallel=yes", f"-input {ROOT}/in", "-input /tmp/out", "-input rel",
           "-input gopher://x/y", "-input http://h/x", "-dependency afterok", "-dependency x",
           "-start jit", "-start later", "-when close", "-when x", "-wait-for-source 10m",
           "-wait-for-source 8d", "-wait-for-source 700000", "-layout auto", "-stripe-count 2",
           "-l walltime=1:00", "-bogus", "--retry=2", "-retry", "-", "--", "retry", "-retry=",
           "-retries 2", "-J name", "-time 5", "# comment only"]
COMMANDS = ["hsi get x", "(bad)", "globus-url-copy a b", "a=b", "x;y", "'quoted' thing",
            "cp a b # c"]


def random_line(rng: random.Random) -> str:
    directive = rng.choice(["#STAGEIN", "#STAGEOUT", "  #STAGEIN", "#STAGEIN\t"])
    kind = rng.random()
    if kind < 0.35:
        if directive.strip() == "#STAGEIN":
            return f"{directive} {rng.choice(REMOTE + LOCAL)} {rng.choice(LOCAL + REMOTE[:3])}"
        return f"{directive} {rng.choice(LOCAL + REMOTE[:2])} {rng.choice(REMOTE + LOCAL)}"
    if kind < 0.6:
        return f"{directive} " + " ".join(rng.choice(OPTIONS) for _ in range(rng.randint(1, 2)))
    if kind < 0.7:
        return f"{directive} {rng.choice(COMMANDS)}"
    if kind < 0.8:
        fields = [f"source={rng.choice(REMOTE + LOCAL)}", f"destination={rng.choice(LOCAL + REMOTE)}",
                  f"type={rng.choice(['file', 'directory', 'x'])}"]
        rng.shuffle(fields)
        fields = fields[:rng.randint(1, 3)]
        if rng.random() < 0.2:
            fields.append(rng.choice(["bogus=1", "source=x", "novalue", "type="]))
        return f"#DW {rng.choice(['stage_in', 'stage_out'])} " + " ".join(fields)
    if kind < 0.85:
        return f"{directive} {rng.choice(LOCAL)} \\"
    if kind < 0.9:
        return rng.choice(["#PBS -W stagein=a@h:b", "#STAGE pool=scratch capacity=1G", "", "  ",
                           "#STAGEINX a b", directive])
    return rng.choice(["echo hi", "true", "  # comment"])


def test_on_many_scripts_the_check_refuses_only_what_the_planner_refuses_in_its_words(check):
    rng = random.Random(46)
    refused = 0
    for _ in range(1500):
        lines = ["#!/bin/bash"] + [random_line(rng) for _ in range(rng.randint(1, 6))]
        if rng.random() < 0.8:
            lines.append("true")
        text = "\n".join(lines) + ("\n" if rng.random() < 0.9 else "")
        said = check(text, ROOT)
        if said is not None:
            refused += 1
            assert said == planner_words(text, INSIDE) == planner_words(text, OUTSIDE), text
    assert refused > 750  # the check judged most of them itself


# job_submit.lua in burst-buffer mode: the scripts Slurm hands to burst_buffer.lua pass, the
# others are still held for the chain service, and a job never goes to both.
@pytest.fixture
def bb_mode(tmp_path, release):
    return Slurmctld(tmp_path, release, 'return { staging = "burst-buffer" }')


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
