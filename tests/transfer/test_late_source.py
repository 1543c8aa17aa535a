"""A source that is not there yet: retried when the user asked for retries, waited for with a
bound, and a refused permission never retried.

Each test plans a script with the real planner, renders the real data job and runs it with bash
against a server on 127.0.0.1 (an HTTP server in a thread, ``globus-gridftp-server``) or a
local file (``cp``). The job's calls back into scratchkeeper (``stage commit``/``stage fail``)
go to a recorder named by ``templates.command``, which writes its arguments to a file: what the
job reported is checked from it. Where time is not what a test checks, ``sleep`` is a shim on
PATH that records each delay and returns at once (and, standing for time passing, may make the
source appear after a given number of waits).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from scratchkeeper.config import (
    RetryConfig,
    SchedulerConfig,
    SiteConfig,
    StagingConfig,
    StorageConfig,
    TemplatesConfig,
)
from scratchkeeper.errors import DirectiveError
from scratchkeeper.planner.directives import parse_script
from scratchkeeper.planner.plan import build_plan
from scratchkeeper.planner.render import render_plan
from scratchkeeper.transfer.classify import (
    DENIED,
    DENIED_PATTERNS,
    MISSING,
    MISSING_PATTERNS,
    PERMANENT,
    TRANSIENT,
    classify,
    grep_pattern,
    is_permanent,
)

from .loopback import GridFtpServer, HttpServer

DATA = bytes(range(256)) * 40 + b"the late source\n"


@dataclass
class Rig:
    base: Path
    root: Path      # the scratch root
    srv: Path       # the servers' folder
    calls: Path     # what the job reported back (stage commit / stage fail), one call a line
    shims: Path     # a folder put first on PATH by tests that fake sleep

    def config(self, **sections) -> SiteConfig:
        recorder = self.base / "sk-recorder"
        return SiteConfig(storage=StorageConfig(scratch_root=str(self.root)),
                          templates=TemplatesConfig(command=str(recorder)), **sections)

    def plan(self, lines: list[str], **sections):
        config = self.config(**sections)
        text = "#!/bin/bash\n" + "\n".join(lines) + "\nrun\n"
        parsed = parse_script(text, "job.sh", cwd=str(self.root), scratch_root=str(self.root))
        return build_plan(parsed, config, chain_id="sklate", workdir=str(self.root)), config

    def run(self, lines: list[str], *, fake_sleep: bool = False, **sections):
        """Plan, render and run the stage-in job; (exit code, its stderr, seconds it took)."""
        result, config = self.plan(lines, **sections)
        render_plan(result, "", "", config)
        script = self.base / "stage-in.sh"
        script.write_text(result.jobs_with_role("stage-in")[0].script)
        path = f"{self.shims}:{os.environ['PATH']}" if fake_sleep else os.environ["PATH"]
        started = time.monotonic()
        done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, env=dict(os.environ, PATH=path))
        return done.returncode, done.stderr, time.monotonic() - started

    def reported(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def sleeps(self) -> list[str]:
        record = self.shims / "slept"
        return record.read_text().split() if record.exists() else []


@pytest.fixture
def rig():
    base = Path(tempfile.mkdtemp(prefix="sk-late-"))
    os.chmod(base, 0o755)  # the GridFTP server's anonymous sessions run as nobody
    rig = Rig(base, base / "scratch", base / "srv", base / "calls", base / "shims")
    rig.root.mkdir()
    rig.srv.mkdir(mode=0o755)
    rig.shims.mkdir()
    recorder = base / "sk-recorder"
    recorder.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {rig.calls}\n')
    recorder.chmod(0o755)
    yield rig
    shutil.rmtree(base, ignore_errors=True)


def fake_sleep(rig: Rig, *, appear_after: int | None = None, source: Path | None = None) -> None:
    """``sleep`` records its delay and returns at once; after ``appear_after`` sleeps it puts
    DATA at ``source`` (time has passed: the previous step wrote it)."""
    appear = ""
    if appear_after is not None:
        staged = rig.base / "staged"
        staged.write_bytes(DATA)
        staged.chmod(0o644)
        appear = (f'[ "$(wc -w < {rig.shims}/slept)" -ge {appear_after} ] && '
                  f'mv -f {staged} {source} 2>/dev/null\n')
    shim = rig.shims / "sleep"
    shim.write_text(f'#!/bin/bash\necho "$1" >> {rig.shims}/slept\n{appear}exit 0\n')
    shim.chmod(0o755)


def appear_later(path: Path, seconds: float) -> threading.Timer:
    """Write DATA to ``path`` after ``seconds`` (atomically: the client never sees half)."""
    def write():
        partial = path.with_name(path.name + ".part")
        partial.write_bytes(DATA)
        partial.chmod(0o644)
        partial.rename(path)
    timer = threading.Timer(seconds, write)
    timer.start()
    return timer


@pytest.fixture
def http(rig):
    server = HttpServer(rig.srv)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def gridftp(rig):
    if shutil.which("globus-gridftp-server") is None or shutil.which("globus-url-copy") is None:
        pytest.skip("globus-gridftp-server and globus-url-copy are not installed")
    work = rig.base / "gridftp-work"
    work.mkdir()
    server = GridFtpServer(rig.srv, work)
    server.start()
    yield server
    server.stop()


def gets(server: HttpServer, path: str) -> int:
    return sum(1 for method, asked in server.requests if method == "GET" and asked == path)


# -- a source that appears about 2 s late ---------------------------------------------------
def test_http_source_appearing_late_is_fetched_with_retry(rig, http):
    timer = appear_later(rig.srv / "late.dat", 2.0)
    try:
        rc, log, took = rig.run(["#STAGEIN -retry 5 -retry-delay 0.4",
                                 f"#STAGEIN {http.url}/late.dat {rig.root}/in/late.dat"])
    finally:
        timer.cancel()
    assert rc == 0, log
    assert (rig.root / "in" / "late.dat").read_bytes() == DATA
    assert "line 3: not there yet, attempt 1 of 6, next in 0.4 s: exit 22" in log
    assert "returned error: 404" in log
    assert gets(http, "/late.dat") >= 2
    assert [c.split()[:2] for c in rig.reported()] == [["stage", "commit"]]
    assert took < 5


def test_http_source_missing_fails_at_once_without_retry(rig, http):
    timer = appear_later(rig.srv / "late.dat", 2.0)
    try:
        rc, log, took = rig.run([f"#STAGEIN {http.url}/late.dat {rig.root}/in/late.dat"])
    finally:
        timer.cancel()
    assert rc == 1
    assert took < 2.0  # it did not wait for the file
    assert gets(http, "/late.dat") == 1
    assert "line 2: not found, not retried (with -retry N or -wait-for-source" in log
    assert not (rig.root / "in" / "late.dat").exists()
    [call] = rig.reported()
    assert call.startswith("stage fail --chain sklate --job stage-in --line 2 --reason exit 22:")


def test_gridftp_source_appearing_late_is_fetched_with_retry(rig, gridftp):
    late = rig.srv / "late.dat"
    timer = appear_later(late, 2.0)
    try:
        rc, log, took = rig.run(["#STAGEIN -retry 5 -retry-delay 0.4",
                                 f"#STAGEIN {gridftp.url}{late} {rig.root}/in/"])
    finally:
        timer.cancel()
    assert rc == 0, log
    assert (rig.root / "in" / "late.dat").read_bytes() == DATA
    assert "line 3: not there yet, attempt 1 of 6, next in 0.4 s" in log
    assert "No such file or directory" in log
    assert took < 5


def test_gridftp_source_missing_fails_at_once_without_retry(rig, gridftp):
    late = rig.srv / "late.dat"
    timer = appear_later(late, 2.0)
    try:
        rc, log, took = rig.run([f"#STAGEIN {gridftp.url}{late} {rig.root}/in/"])
    finally:
        timer.cancel()
    assert rc == 1 and took < 2.0
    assert log.count("attempt 1 of") == 1 and "attempt 2 of" not in log
    assert "line 2: not found, not retried" in log
    assert rig.reported()[0].startswith("stage fail --chain sklate --job stage-in --line 2 ")


# -- a refused permission is never retried ----------------------------------------------------
def test_http_403_is_never_retried_whatever_the_options(rig, http):
    http.forbidden.add("/locked.dat")
    fake_sleep(rig)
    rc, log, _ = rig.run(["#STAGEIN -retry 5 -retry-delay 0.1 -wait-for-source 30s",
                          f"#STAGEIN {http.url}/locked.dat {rig.root}/in/"], fake_sleep=True)
    assert rc == 1
    assert gets(http, "/locked.dat") == 1
    assert "line 3: permission refused, not retried: exit 22" in log and "403" in log
    assert rig.sleeps() == []
    assert rig.reported()[0].startswith("stage fail --chain sklate --job stage-in --line 3 ")


def test_gridftp_permission_denied_is_never_retried(rig, gridftp):
    locked = rig.srv / "locked.dat"
    locked.write_bytes(DATA)
    locked.chmod(0o600)  # the server's anonymous session runs as nobody
    fake_sleep(rig)
    rc, log, _ = rig.run(["#STAGEIN -retry 5 -wait-for-source 30s",
                          f"#STAGEIN {gridftp.url}{locked} {rig.root}/in/"], fake_sleep=True)
    assert rc == 1
    assert "Permission denied" in log and "line 3: permission refused, not retried" in log
    assert log.count("attempt 1 of 6") == 1 and "attempt 2 of" not in log
    assert rig.sleeps() == []


# -- the bounded backoff, the wait and its bound -----------------------------------------------
def test_missing_local_source_is_retried_with_the_same_bounded_backoff(rig):
    source = rig.base / "prev-step" / "out.bin"
    source.parent.mkdir()
    fake_sleep(rig, appear_after=3, source=source)
    rc, log, _ = rig.run(["#STAGEIN -retry 5 -retry-delay 0.5",
                          f"#STAGEIN {source} {rig.root}/in/out.bin"], fake_sleep=True,
                         retry=RetryConfig(backoff=2.0, max_delay=1.5))
    assert rc == 0, log
    assert (rig.root / "in" / "out.bin").read_bytes() == DATA
    assert rig.sleeps() == ["0.5", "1", "1.5"]  # doubled, capped at retry.max_delay
    for attempt, delay in ((1, "0.5"), (2, "1"), (3, "1.5")):
        assert f"not there yet, attempt {attempt} of 6, next in {delay} s: exit 1: cp: " in log
    assert "attempt 4 of 6" in log and "attempt 5 of 6" not in log


def test_http_410_is_retried_only_as_often_as_asked(rig, http):
    http.gone.add("/gone.dat")
    fake_sleep(rig)
    rc, log, _ = rig.run(["#STAGEIN -retry 2 -retry-delay 3",
                          f"#STAGEIN {http.url}/gone.dat {rig.root}/in/"], fake_sleep=True)
    assert rc == 1
    assert gets(http, "/gone.dat") == 3
    assert rig.sleeps() == ["3", "6"]
    assert "line 3: not there yet, giving up after 3 attempts: exit 22" in log


def test_wait_for_source_fetches_a_late_source_without_retry(rig):
    source = rig.base / "prev-step" / "out.bin"
    source.parent.mkdir()
    fake_sleep(rig, appear_after=4, source=source)
    rc, log, _ = rig.run(["#STAGEIN -wait-for-source 10m -retry-delay 1",
                          f"#STAGEIN {source} {rig.root}/in/"], fake_sleep=True)
    assert rc == 0, log
    assert (rig.root / "in" / "out.bin").read_bytes() == DATA
    assert rig.sleeps() == ["1", "2", "4", "8"]
    assert re.search(r"line 3: not there yet, waiting for the source, [01] s of 600 s so far "
                     r"\(try 1\), next in 1 s: exit 1: cp: cannot stat", log)
    assert "attempt 1 of 3 (try 5, waiting for the source)" in log


def test_wait_for_source_bound_is_honoured(rig, http):
    rc, log, took = rig.run(["#STAGEIN -wait-for-source 2s -retry-delay 0.3",
                             f"#STAGEIN {http.url}/never.dat {rig.root}/in/"])
    assert rc == 1
    assert 2.0 <= took < 4.5, took  # its 2 s, and at most a second more (bash's clock)
    assert "line 3: not there after waiting 2 s (-wait-for-source), not retried" in log
    assert gets(http, "/never.dat") >= 3
    assert "attempt 2 of" not in log  # the waiting tries did not use up the retries
    assert rig.reported()[0].startswith("stage fail --chain sklate --job stage-in --line 3 ")


def test_retries_count_after_the_wait(rig):
    source = rig.base / "never.bin"
    fake_sleep(rig)
    rc, log, _ = rig.run(["#STAGEIN -wait-for-source 0 -retry 1 -retry-delay 2",
                          f"#STAGEIN {source} {rig.root}/in/"], fake_sleep=True)
    assert rc == 1
    assert rig.sleeps() == ["2"]
    assert "not there yet, attempt 1 of 2, next in 2 s" in log
    assert "not there yet, giving up after 2 attempts" in log


def test_a_stage_out_with_retry_retries_a_missing_result(rig, http):
    result_file = rig.root / "out" / "r.dat"
    plan_result, config = rig.plan(["#STAGEOUT -retry 1 -retry-delay 1",
                                    f"#STAGEOUT {result_file} {http.url}/put/r.dat"])
    render_plan(plan_result, "", "", config)
    script = plan_result.jobs_with_role("stage-out")[0].script
    assert "\nSK_RETRY_MISSING=1\nSK_SOURCE_WAIT=0\n" in script
    assert "or -wait-for-source" not in script  # a stage-in option only


# -- planning: the option's value and its bounds ----------------------------------------------
@pytest.mark.parametrize("value", ["10x", "-5", "1.5", "1e3", "٣", "10 m", "", "99999999"])
def test_a_bad_wait_is_an_error_at_its_line(rig, value):
    with pytest.raises(DirectiveError) as caught:
        rig.plan(["#SBATCH -N 1", f"#STAGEIN -wait-for-source '{value}'",
                  f"#STAGEIN /tmp/a {rig.root}/a"])
    assert str(caught.value).startswith("job.sh:3: #STAGEIN: -wait-for-source expects a "
                                        "duration from 0 to 7 days")


def test_a_wait_longer_than_the_site_allows_is_an_error_at_its_line(rig):
    lines = ["#STAGEIN -walltime 10:00:00", "#STAGEIN -wait-for-source 2h",
             f"#STAGEIN /tmp/a {rig.root}/a"]
    with pytest.raises(DirectiveError, match=r"^job.sh:3: #STAGEIN: -wait-for-source 7200 s "
                       r"is too long: this site allows at most 3600 s \(staging.max_source_wait\)"):
        rig.plan(lines)
    plan_result, _ = rig.plan(lines, staging=StagingConfig(max_source_wait=7200))
    assert plan_result.jobs_with_role("stage-in")[0].source_wait == 7200
    with pytest.raises(DirectiveError, match="this site does not allow waiting"):
        rig.plan(["#STAGEIN -wait-for-source 1", f"#STAGEIN /tmp/a {rig.root}/a"],
                 staging=StagingConfig(max_source_wait=0))


def test_a_wait_must_fit_in_the_data_jobs_time_limit(rig):
    with pytest.raises(DirectiveError, match=r"^job.sh:2: #STAGEIN: -wait-for-source 3600 s "
                       r"does not fit in the data job's time limit 01:00:00"):
        rig.plan(["#STAGEIN -wait-for-source 60m", f"#STAGEIN /tmp/a {rig.root}/a"])
    with pytest.raises(DirectiveError, match="^job.sh:2: .*time limit 30 "):
        rig.plan(["#STAGEIN -wait-for-source 45m", f"#STAGEIN /tmp/a {rig.root}/a"],
                 scheduler=SchedulerConfig(data_walltime="30"))


def test_wait_for_source_is_a_stage_in_option(rig):
    with pytest.raises(DirectiveError, match="^job.sh:2: -wait-for-source applies to #STAGEIN "
                       "only"):
        rig.plan(["#STAGEOUT -wait-for-source 10", f"#STAGEOUT {rig.root}/a /tmp/a"])


def test_only_an_explicit_retry_retries_a_missing_source(rig):
    plain, _ = rig.plan([f"#STAGEIN /tmp/a {rig.root}/a"])
    asked, _ = rig.plan(["#STAGEIN -retry 2", f"#STAGEIN /tmp/a {rig.root}/a"])
    assert not plain.jobs_with_role("stage-in")[0].retry_missing
    assert asked.jobs_with_role("stage-in")[0].retry_missing


# -- the classification, in Python and in grep alike --------------------------------------------
#: what the clients print (captured from curl 7.88, globus-url-copy against
#: globus-gridftp-server, cp and OpenSSH's scp; FTP replies as servers send them)
MESSAGES = [
    ("curl: (22) The requested URL returned error: 404", MISSING),
    ("curl: (22) The requested URL returned error: 410", MISSING),
    ("curl: (22) The requested URL returned error: 403", DENIED),
    ("curl: (22) The requested URL returned error: 401", DENIED),
    ("curl: (22) The requested URL returned error: 400", PERMANENT),
    ("curl: (22) The requested URL returned error: 429", TRANSIENT),
    ("curl: (22) The requested URL returned error: 503", TRANSIENT),
    ("curl: (7) Failed to connect to 127.0.0.1 port 9 after 0 ms: Connection refused", TRANSIENT),
    ("error: globus_ftp_client: the server responded with an error\n500 500-Command failed. : "
     "globus_l_gfs_file_open failed.\n500-globus_xio: System error in open: No such file or "
     "directory\n500 End.", MISSING),
    ("error: globus_ftp_client: the server responded with an error\n500 500-Command failed. : "
     "globus_l_gfs_file_open failed.\n500-globus_xio: System error in open: Permission denied"
     "\n500 End.", DENIED),
    ("550 /data/in.h5: No such file or directory", MISSING),
    ("550 Failed to open file.", PERMANENT),
    ("530 Login incorrect.", DENIED),
    ("553 Could not create file.", PERMANENT),
    ("cp: cannot stat '/home/a/mesh.bin': No such file or directory", MISSING),
    ("scp: /home/alice/params.nml: No such file or directory", MISSING),
    ("scp: /home/alice/params.nml: Permission denied", DENIED),
    ("globus_xio: Unable to connect to 127.0.0.1:2811", TRANSIENT),
]


@pytest.mark.parametrize("message, kind", MESSAGES)
def test_classify(message, kind):
    assert classify(message) == kind
    assert is_permanent(message) is (kind != TRANSIENT)


def test_the_shell_patterns_agree_with_python(tmp_path):
    err = tmp_path / "err"
    for message, kind in MESSAGES:
        err.write_text(message + "\n")
        found = {name: subprocess.run(["grep", "-Eq", "--", grep_pattern(patterns), str(err)]
                                      ).returncode == 0
                 for name, patterns in (("denied", DENIED_PATTERNS), ("missing", MISSING_PATTERNS))}
        assert found["denied"] is (kind == DENIED), message
        # the shell checks denied first, as classify does
        assert (found["missing"] and not found["denied"]) is (kind == MISSING), message
