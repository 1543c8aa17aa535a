"""slurm-plugins/job_submit.lua run in lupa against a stand-in of Slurm's `slurm` table, as each
Slurm release runs it: 22.05 in Lua 5.1, 24.11 in Lua 5.3, where the numbers Slurm pushes
(submit_uid, modify_uid, priority, slurm.NO_VAL) are floats (tests/plugins/slurm_lua.py).

The cluster tests prove slurmctld loads it and applies the default settings; these cover the
settings the shared cluster cannot switch during a test run (reject mode, host ACL, a broken
settings file) and the exact return codes and messages.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .slurm_lua import RELEASE_IDS, RELEASES, SlurmRelease

SCRIPT = Path(__file__).resolve().parents[2] / "slurm-plugins" / "job_submit.lua"
SUCCESS, ERROR = 0, -1


class Slurmctld:
    """job_submit.lua loaded in a fresh Lua state, with what it told the log and the user."""

    def __init__(self, tmp_path: Path, release: SlurmRelease, settings: str | None):
        self.release = release
        self.logs: list[str] = []
        self.user_messages: list[str] = []
        self.lua = release.runtime()
        conf = tmp_path / "job_submit_scratchkeeper.conf"
        if settings is not None:
            conf.write_text(settings)
        g = self.lua.globals()
        g.SCRATCHKEEPER_JOB_SUBMIT_CONF = str(conf)
        fmt = self.lua.eval("function(...) return string.format(...) end")
        slurm = self.lua.table(SUCCESS=SUCCESS, ERROR=ERROR, NO_VAL=release.number(NO_VAL))
        slurm.log_info = lambda *a: self.logs.append("info: " + fmt(*a))
        slurm.log_error = lambda *a: self.logs.append("error: " + fmt(*a))
        slurm.log_user = lambda *a: self.user_messages.append(fmt(*a))
        g.slurm = slurm
        assert self.lua.execute(SCRIPT.read_text()) == SUCCESS

    def submit(self, uid: int = 1000, **fields):
        env = fields.pop("spank_job_env", None)
        job = self.lua.table(**fields)
        if env is not None:
            job.spank_job_env = self.lua.table_from(dict(enumerate(env)))
        rc = self.lua.globals().slurm_job_submit(job, self.lua.table(), self.release.number(uid))
        return rc, job

    def modify(self, uid: int, job_rec: dict | None = None, **fields):
        if "priority" in fields:
            fields["priority"] = self.release.number(fields["priority"])
        return self.lua.globals().slurm_job_modify(self.lua.table(**fields),
                                                   self.lua.table(**(job_rec or {})),
                                                   self.lua.table(), self.release.number(uid))

    def slurm_environment(self, variables: dict[str, str]):
        """job_desc.environment as Slurm pushes it (_push_job_env, 22.05 and 24.11 alike): an
        empty table whose __index looks a name up, so pairs() sees nothing."""
        return self.lua.eval("function(variables) return setmetatable({}, { __index = "
                             "function(_, name) return variables[name] end }) end")(
            self.lua.table_from(variables))


NO_VAL = 4294967294


@pytest.fixture(params=RELEASES, ids=RELEASE_IDS)
def release(request):
    return request.param


@pytest.fixture
def defaults(tmp_path, release):
    return Slurmctld(tmp_path, release, None)


def test_plain_job_passes_untouched(defaults):
    rc, job = defaults.submit(partition="batch", script="#!/bin/bash\necho '#STAGEIN in text'\n")
    assert rc == SUCCESS and job.priority is None and job.admin_comment is None


@pytest.mark.parametrize("partition", ["dataxfer", "replica", "batch,dataxfer"])
def test_data_queues_refuse_a_plain_user_and_take_root(defaults, partition):
    rc, _ = defaults.submit(uid=1000, partition=partition, script="#!/bin/sh\ntrue\n")
    assert rc == ERROR
    queue = [p for p in partition.split(",") if p != "batch"][0]
    assert defaults.user_messages[-1].startswith(
        f"scratchkeeper: partition {queue} is reserved for scratchkeeper's data jobs")
    rc, job = defaults.submit(uid=0, partition=partition, script="#!/bin/sh\n#STAGEIN x y\n")
    assert rc == SUCCESS and job.priority is None  # the planner's own jobs are never held


def test_moving_a_job_into_a_data_queue_is_refused_too(defaults):
    assert defaults.modify(1000, partition="dataxfer") == ERROR
    assert defaults.modify(0, partition="dataxfer") == SUCCESS
    assert defaults.modify(1000, partition="batch") == SUCCESS


def test_spank_requests_hold_the_job_with_the_requests_in_the_admin_comment(defaults):
    rc, job = defaults.submit(partition="batch", script="#!/bin/sh\ntrue\n", spank_job_env=[
        "OTHER=1", "SCRATCHKEEPER_STAGE_IN=ftp://h:2811/a:/s/a\nhttp://h/b:/s/b",
        "SCRATCHKEEPER_STAGE_OUT=/s/c:ftp://h/c"])
    assert rc == SUCCESS and job.priority == 0
    assert job.admin_comment == ("scratchkeeper:chain-pending\nstage-in ftp://h:2811/a:/s/a\n"
                                 "stage-in http://h/b:/s/b\nstage-out /s/c:ftp://h/c")


def test_directive_script_is_held_by_default(defaults):
    rc, job = defaults.submit(script="#!/bin/sh\n  #STAGEIN ftp://h/a /s/a\ntrue\n")
    assert rc == SUCCESS and job.priority == 0
    assert job.admin_comment == "scratchkeeper:chain-pending\ndirectives"


# Every family the planner reads holds the job: plain sbatch (or Torque's qsub wrapper, which
# hands the script to sbatch as it is) must never run a job without its data.
HELD_LINES = [
    "#STAGEOUT /s/a ftp://h/a",
    "#STAGEIN",
    "#DW stage_in source=gsiftp://h/a destination=/s/a type=file",
    "  #DW stage_out source=/s/r destination=gsiftp://h/r type=directory",
    "#DW stage_in",
    "#PBS -W stagein=/s/a@h:/data/a",
    "#PBS -N run -W depend=afterok:1,stageout=/s/r@h:/res/r",
    "#PBS -W stageout = /s/r@h:/res/r",
]
PASSED_LINES = [
    "#STAGEINX a b",
    "# STAGEIN a b",
    "#DW jobdw capacity=1GB access_mode=striped type=scratch",
    "#DW stage_inx source=a destination=b",
    "#PBS -W depend=afterok:1",
    "#PBS -N stagein=x",
    "echo '#PBS -W stagein=a@h:b'",
]


@pytest.mark.parametrize("line", HELD_LINES)
def test_every_directive_family_holds_the_job(defaults, line):
    rc, job = defaults.submit(script=f"#!/bin/sh\n{line}\ntrue\n")
    assert rc == SUCCESS and job.priority == 0, line
    assert job.admin_comment == "scratchkeeper:chain-pending\ndirectives"


@pytest.mark.parametrize("line", PASSED_LINES)
def test_lines_that_are_not_data_directives_pass(defaults, line):
    rc, job = defaults.submit(script=f"#!/bin/sh\n{line}\ntrue\n")
    assert rc == SUCCESS and job.priority is None and job.admin_comment is None, line


@pytest.mark.parametrize("line", HELD_LINES + PASSED_LINES)
def test_the_plugin_and_the_planner_agree_on_what_is_a_directive(tmp_path, defaults, line):
    """Held exactly when the planner finds a data step (or refuses the line as a broken one)."""
    from scratchkeeper.errors import DirectiveError
    from scratchkeeper.planner.directives import parse_script

    text = f"#!/bin/sh\n{line}\ntrue\n"
    try:
        planner_sees = bool(parse_script(text, str(tmp_path / "job.sh"), cwd=str(tmp_path),
                                         scratch_root="/s").steps)
    except DirectiveError:
        planner_sees = True  # a broken directive: the chain service refuses it, with its line
    _, job = defaults.submit(script=text)
    assert (job.priority == 0) == planner_sees, line


def test_reject_mode_refuses_directive_scripts_with_what_to_run(tmp_path, release):
    ctld = Slurmctld(tmp_path, release, 'return { staging = "reject" }')
    rc, job = ctld.submit(script="#!/bin/sh\n#STAGEOUT /s/a ftp://h/a\ntrue\n")
    assert rc == ERROR and job.priority is None
    assert "submit it with `scratchkeeper submit SCRIPT`" in ctld.user_messages[-1]
    # the plugin's options are the supported native syntax: still held and chained
    rc, job = ctld.submit(script="#!/bin/sh\ntrue\n",
                          spank_job_env=["SCRATCHKEEPER_STAGE_IN=ftp://h/a:/s/a"])
    assert rc == SUCCESS and job.priority == 0


@pytest.mark.parametrize("environment", [
    "slurm",                                                       # _push_job_env: __index only
    {"SCRATCHKEEPER_SUBMIT": "chain-service", "HOME": "/home/u"},  # name -> value
    ["HOME=/home/u", "SCRATCHKEEPER_SUBMIT=chain-service"],        # NAME=VALUE strings
])
def test_reject_mode_holds_a_script_scratchkeeper_submit_handed_over(tmp_path, release, environment):
    ctld = Slurmctld(tmp_path, release, 'return { staging = "reject" }')
    if environment == "slurm":
        env = ctld.slurm_environment({"SCRATCHKEEPER_SUBMIT": "chain-service", "HOME": "/home/u"})
    else:
        env = ctld.lua.table_from(environment if isinstance(environment, dict)
                                  else {i + 1: v for i, v in enumerate(environment)})
    rc, job = ctld.submit(script="#!/bin/sh\n#STAGEIN ftp://h/a /s/a\ntrue\n", environment=env)
    assert rc == SUCCESS and job.priority == 0
    assert job.admin_comment == "scratchkeeper:chain-pending\ndirectives"
    # another variable of that kind of name is no hand-over
    other = ctld.lua.table_from({"SCRATCHKEEPER_SUBMITTED": "1"})
    rc, _ = ctld.submit(script="#!/bin/sh\n#STAGEIN ftp://h/a /s/a\ntrue\n", environment=other)
    assert rc == ERROR


def test_host_allow_list_is_an_additional_condition(tmp_path, release):
    ctld = Slurmctld(tmp_path, release, 'return { data_queue_uids = { 0, 990 }, '
                               'data_queue_hosts = { "xfer1" } }')
    assert ctld.submit(uid=990, partition="dataxfer", alloc_node="xfer1")[0] == SUCCESS
    assert ctld.submit(uid=990, partition="dataxfer", alloc_node="login1")[0] == ERROR
    assert ctld.submit(uid=1000, partition="dataxfer", alloc_node="xfer1")[0] == ERROR


@pytest.mark.parametrize("settings,logged", [
    ("return {", "using the defaults"),
    ("return 42", "does not return a table"),
    ('return { staging = "maybe" }', 'expected "hold", "reject" or "burst-buffer"'),
    ("return { colour = 1 }", "unknown setting colour"),
])
def test_broken_settings_keep_the_defaults_and_say_so(tmp_path, release, settings, logged):
    ctld = Slurmctld(tmp_path, release, settings)
    assert any(logged in line for line in ctld.logs if line.startswith("error:")), ctld.logs
    assert ctld.submit(uid=1000, partition="dataxfer")[0] == ERROR
    rc, job = ctld.submit(script="#!/bin/sh\n#STAGEIN a b\ntrue\n")
    assert rc == SUCCESS and job.priority == 0


INFINITE = 4294967295


def test_a_job_waiting_for_its_chain_cannot_be_released_by_its_owner(defaults):
    waiting = {"admin_comment": "scratchkeeper:chain-pending\nstage-in ftp://h/a:/s/a"}
    assert defaults.modify(1000, waiting, priority=INFINITE) == ERROR   # scontrol release
    assert "waits until its data jobs are chained" in defaults.user_messages[-1]
    assert defaults.modify(0, waiting, priority=INFINITE) == SUCCESS    # the chain service
    assert defaults.modify(1000, waiting, priority=NO_VAL, time_limit=10) == SUCCESS
    chained = {"admin_comment": "scratchkeeper:chained sk0123456789"}
    assert defaults.modify(1000, chained, priority=INFINITE) == SUCCESS


def test_the_logs_name_uids_as_integers(defaults):
    """24.11's Lua 5.3 gets submit_uid as a float: the log still says "uid 1000"."""
    defaults.submit(uid=1000, partition="dataxfer")
    assert "info: scratchkeeper: uid 1000 refused on data queue dataxfer" in defaults.logs
    defaults.submit(uid=1000, script="#!/bin/sh\n#STAGEIN ftp://h/a /s/a\ntrue\n")
    assert defaults.logs[-1].startswith("info: scratchkeeper: job from uid 1000 held")
