"""The command server and its C client (scratchkeeper/cli/_server.py, cli/native/client.c): a
served command prints, reads and exits as the Python command does; anything the server must
not take runs as the Python command."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from scratchkeeper.cli import _client, _server

SCRIPT = """#!/bin/bash
#SBATCH --job-name=served
#SBATCH --time=00:05:00
srun hostname
"""


@pytest.fixture
def client(tmp_path, monkeypatch):
    """The client built against this interpreter's console script, its server's sockets in a
    private runtime directory; the server stopped afterwards."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    fallback = Path(sys.executable).with_name("scratchkeeper")
    if not fallback.exists():
        pytest.skip(f"{fallback}: no console script beside the interpreter")
    binary = tmp_path / "bin" / "scratchkeeper"
    binary.parent.mkdir()
    _client.build(binary, fallback, Path(sys.executable))
    # the runtime directory is a short one of its own (tmp_path/run links to it): a socket's
    # path has at most 107 bytes, which tmp_path under pytest-xdist (popen-gwN/) and a long
    # test name exceed
    runtime = Path(tempfile.mkdtemp(prefix="skrun-", dir="/tmp"))
    (tmp_path / "run").symlink_to(runtime)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv("SCRATCHKEEPER_COMMAND_SERVER", raising=False)
    config = tmp_path / "site.toml"
    config.write_text(f'[storage]\nscratch_root = "{tmp_path}/scratch"\n'
                      f'[state]\ndatabase = "{tmp_path}/state.db"\n')
    monkeypatch.setenv("SCRATCHKEEPER_CONFIG", str(config))
    (tmp_path / "job.sh").write_text(SCRIPT)
    yield binary
    _server.stop_servers(str(runtime / "scratchkeeper"))
    shutil.rmtree(runtime, ignore_errors=True)


def _socket(tmp_path: Path) -> Path | None:
    found = sorted((tmp_path / "run").resolve().joinpath("scratchkeeper").glob("cmd-*.sock"))
    return found[0] if found else None


def _wait_for_server(tmp_path: Path) -> Path:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        sock = _socket(tmp_path)
        if sock is not None:
            probe = socket.socket(socket.AF_UNIX)
            try:
                probe.connect(str(sock))
                return sock
            except OSError:
                pass
            finally:
                probe.close()
        time.sleep(0.05)
    raise AssertionError("the command server did not start")


def _run(binary, *args, cwd, env=None, stdin=None):
    """The command's result, its chain ids (new every run) replaced by one placeholder."""
    result = subprocess.run([str(binary), *args], cwd=cwd, capture_output=True, text=True,
                            timeout=60, env=env, input=stdin)
    result.stdout = re.sub(r"\bsk[0-9a-f]{8,16}\b", "sk<chain>", result.stdout)
    result.stderr = re.sub(r"\bsk[0-9a-f]{8,16}\b", "sk<chain>", result.stderr)
    return result


def test_a_served_command_prints_and_exits_as_the_python_command(client, tmp_path):
    first = _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path)  # starts the server
    _wait_for_server(tmp_path)
    served = _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path)
    direct = _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path,
                  env={**os.environ, "SCRATCHKEEPER_COMMAND_SERVER": "off"})
    assert first.returncode == served.returncode == direct.returncode == 0, served.stderr
    assert served.stdout == direct.stdout == first.stdout and "served" in served.stdout
    assert served.stderr == direct.stderr
    # a bad input: the same message naming the file and line, the same exit code
    (tmp_path / "bad.sh").write_text("#!/bin/bash\n#STAGEIN nosuch://x/y $SCRATCH/y\n")
    served_bad = _run(client, "plan", "--dry-run", "bad.sh", cwd=tmp_path)
    direct_bad = _run(client, "plan", "--dry-run", "bad.sh", cwd=tmp_path,
                      env={**os.environ, "SCRATCHKEEPER_COMMAND_SERVER": "off"})
    assert served_bad.returncode == direct_bad.returncode != 0
    assert served_bad.stderr == direct_bad.stderr and "bad.sh:2" in served_bad.stderr
    # usage errors (argparse exits) and --help
    assert _run(client, "plan", "--no-such-option", cwd=tmp_path).returncode == 2
    helped = _run(client, "plan", "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "--dry-run" in helped.stdout


def test_the_child_runs_in_the_clients_directory_environment_and_umask(client, tmp_path):
    _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path)
    _wait_for_server(tmp_path)
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "job.sh").write_text(SCRIPT.replace("served", "from-elsewhere"))
    moved = _run(client, "plan", "--dry-run", "job.sh", cwd=other)
    assert moved.returncode == 0 and "from-elsewhere" in moved.stdout
    # the configuration named by the client's environment, not the server's
    (tmp_path / "broken.toml").write_text("[storage\n")
    broken = _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path,
                  env={**os.environ, "SCRATCHKEEPER_CONFIG": str(tmp_path / "broken.toml")})
    assert broken.returncode != 0 and "broken.toml" in broken.stderr
    # the client's umask: what the commands the served one runs inherit
    fakes = tmp_path / "umaskbin"
    fakes.mkdir()
    (fakes / "sbatch").write_text('#!/bin/sh\numask > "$UMASK_SEEN"\necho 4242\n')
    (fakes / "sbatch").chmod(0o755)
    seen = {}
    for mode in ("on", "off"):
        record = tmp_path / f"umask-{mode}"
        subprocess.run(["sh", "-c", f"umask 027; exec {client} submit job.sh"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}",
                            "UMASK_SEEN": str(record), "SCRATCHKEEPER_COMMAND_SERVER": mode})
        seen[mode] = record.read_text().strip()
    assert seen == {"on": "0027", "off": "0027"}


def test_the_server_holds_no_directory_of_the_command_that_started_it(client, tmp_path):
    started_in = tmp_path / "started-here"
    started_in.mkdir()
    (started_in / "job.sh").write_text(SCRIPT)
    _run(client, "plan", "--dry-run", "job.sh", cwd=started_in)
    (pid,) = _server.server_pids(str(_wait_for_server(tmp_path)))
    assert os.readlink(f"/proc/{pid}/cwd") == "/"


def test_other_subcommands_and_other_python_settings_run_as_the_python_command(client, tmp_path):
    _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path)
    sock = _wait_for_server(tmp_path)
    version = _run(client, "--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("scratchkeeper ")
    # a hook on PYTHONPATH must be loaded: only a process of its own does
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import sys\nsys.stderr.write('hook loaded\\n')\n")
    hooked = _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path,
                  env={**os.environ, "PYTHONPATH": str(hooks)})
    assert hooked.returncode == 0 and "hook loaded" in hooked.stderr
    assert _socket(tmp_path) == sock  # the server is still there for the next command


def _private_package(into: Path, copied: str) -> Path:
    """The package as a tree of links to the checkout's files, ``copied`` (a path inside the
    package) a file of its own: what a test changes there changes no other test's server."""
    package = Path(_server.__file__).parents[1]
    for source in package.rglob("*"):
        if "__pycache__" in source.parts or source.is_dir():
            continue
        target = into / "scratchkeeper" / source.relative_to(package)
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.relative_to(package) == Path(copied):
            shutil.copy2(source, target)
        else:
            target.symlink_to(source)
    return into / "scratchkeeper" / copied


def test_a_server_whose_code_changed_leaves_and_the_command_still_runs(client, tmp_path,
                                                                       monkeypatch):
    # The edit is made in a package of this test's own (on PYTHONPATH, so its server and its
    # commands import it): a change in the checkout would make every command server of the
    # checkout stale, those of the tests running beside this one included.
    module = _private_package(tmp_path / "pkg", "cli/planner.py")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "pkg"))
    _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path)
    sock = _wait_for_server(tmp_path)
    (pid,) = _server.server_pids(str(sock))
    # the server's fingerprint of an imported module changes as an edit would change it (had
    # the server imported the checkout's, it would stay: the test fails)
    st = module.stat()
    os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    ran = _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path)
    assert ran.returncode == 0 and "served" in ran.stdout
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists() or \
        Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z", "the stale server stayed"


def _as_from_a_terminal() -> None:
    """In the child before its exec: SIGINT as an interactive shell leaves it to a foreground
    job. A suite started in the background by a non-interactive shell (a batch job, a CI
    wrapper) inherits SIGINT ignored, and an ignored signal stays ignored across exec."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_an_interrupt_reaches_the_served_command(client, tmp_path):
    _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path)
    (server,) = _server.server_pids(str(_wait_for_server(tmp_path)))
    outcomes = []
    for mode in ("on", "off"):
        # Ctrl-C during the submission (a scheduler that hangs) ends the command as it ends the
        # Python command
        record = f"int-{mode}"
        proc = subprocess.Popen([str(client), "submit", "job.sh"], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=_scheduler_env(tmp_path, record, mode,
                                                   HOLD=str(tmp_path / "never")),
                                preexec_fn=_as_from_a_terminal)
        try:
            _wait_for_file(tmp_path / f"{record}.sbatch")  # the submission is under way
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            _kill_quietly(tmp_path / f"{record}.sbatch")
        outcomes.append((proc.returncode, err.strip().splitlines()[-1:]))
    assert (tmp_path / "int-on.parent").read_text().strip() == str(server)  # it was served
    assert outcomes[0] == outcomes[1] and outcomes[0][0] == 130, outcomes


def test_the_server_refuses_a_socket_directory_others_can_enter(tmp_path):
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    with pytest.raises(SystemExit, match="closed to others"):
        _server.serve(str(loose / "cmd.sock"))


def test_the_client_runs_the_command_itself_when_the_socket_directory_is_not_private(
        client, tmp_path):
    runtime = tmp_path / "run"
    (runtime / "scratchkeeper").mkdir(mode=0o755)
    os.chmod(runtime / "scratchkeeper", 0o755)
    ran = _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path)
    assert ran.returncode == 0 and "served" in ran.stdout
    # what must not happen cannot be waited for: a server started would have bound its socket
    # well within this
    time.sleep(0.5)
    assert _socket(tmp_path) is None  # no server was started there


# --- the command server behaves exactly like the command (issue 30) ---------------------------

FAKE_SBATCH = """#!/bin/sh
# who ran me: the command (my parent) and its parent (the server, when served)
echo $PPID > "$RECORD.command"
sed -n 's/^PPid:[[:space:]]*//p' /proc/$PPID/status > "$RECORD.parent"
echo $$ > "$RECORD.sbatch"
if [ -n "$HOLD" ]; then
    # bounded: a test that failed before creating HOLD must not leave this loop running
    n=0
    while [ ! -e "$HOLD" ] && [ $n -lt 3000 ]; do sleep 0.02; n=$((n + 1)); done
fi
echo 4242
"""


def _scheduler_env(tmp_path: Path, record: str, mode: str = "on", **extra) -> dict:
    """An environment whose ``sbatch`` records which process ran it (``RECORD.command``, its
    parent ``RECORD.parent``) and, with ``HOLD=PATH``, waits until PATH exists."""
    fakes = tmp_path / "recording-bin"
    if not fakes.exists():
        fakes.mkdir()
        (fakes / "sbatch").write_text(FAKE_SBATCH)
        (fakes / "sbatch").chmod(0o755)
    return {**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}",
            "RECORD": str(tmp_path / record), "SCRATCHKEEPER_COMMAND_SERVER": mode, **extra}


def _wait_for_file(path: Path, timeout: float = 30.0) -> str:
    """``path``'s text once written (the fake ``sbatch`` writes ``RECORD.sbatch`` last)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.02)
    raise AssertionError(f"{path} was not written")


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.02)
    return False


def _kill_quietly(pid_file: Path) -> None:
    try:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        pass


def test_output_that_cannot_be_written_fails_the_same_way_served_or_not(client, tmp_path):
    _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path)
    (server,) = _server.server_pids(str(_wait_for_server(tmp_path)))
    outcomes = {}
    for mode in ("on", "off"):
        env = _scheduler_env(tmp_path, f"full-{mode}", mode)
        with open("/dev/full", "w") as full:
            ran = subprocess.run([str(client), "submit", "job.sh"], cwd=tmp_path, stdout=full,
                                 stderr=subprocess.PIPE, text=True, timeout=60, env=env)
        read, write = os.pipe()
        os.close(read)  # a reader that has gone: `| head -0`
        try:
            piped = subprocess.run([str(client), "plan", "--dry-run", "--json", "job.sh"],
                                   cwd=tmp_path, stdout=write, stderr=subprocess.PIPE,
                                   text=True, timeout=60, env=env)
        finally:
            os.close(write)
        outcomes[mode] = (ran.returncode, ran.stderr, piped.returncode, piped.stderr)
    assert (tmp_path / "full-on.parent").read_text().strip() == str(server)  # it was served
    assert outcomes["on"] == outcomes["off"] == (
        1, "scratchkeeper: writing the output: No space left on device\n", 1, ""), outcomes


def test_a_signal_ends_a_served_command_as_it_ends_the_python_command(client, tmp_path):
    _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path)
    (server,) = _server.server_pids(str(_wait_for_server(tmp_path)))
    hold = tmp_path / "never"
    for signum in (signal.SIGTERM, signal.SIGHUP):
        outcomes = {}
        for mode in ("on", "off"):
            record = f"sig{signum}-{mode}"
            proc = subprocess.Popen([str(client), "submit", "job.sh"], cwd=tmp_path,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=_scheduler_env(tmp_path, record, mode, HOLD=str(hold)))
            try:
                _wait_for_file(tmp_path / f"{record}.sbatch")
                command = int((tmp_path / f"{record}.command").read_text())
                proc.send_signal(signum)
                proc.communicate(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                _kill_quietly(tmp_path / f"{record}.sbatch")
            outcomes[mode] = proc.returncode
            assert _gone(command), "the command's process outlived its signal"
        served_by = (tmp_path / f"sig{signum}-on.parent").read_text().strip()
        assert served_by == str(server)
        # killed by the signal both ways: a shell reports 128+signal (143 for SIGTERM)
        assert outcomes == {"on": -signum, "off": -signum}, outcomes


def test_a_client_killed_outright_takes_its_served_command_with_it(client, tmp_path):
    _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path)
    (server,) = _server.server_pids(str(_wait_for_server(tmp_path)))
    proc = subprocess.Popen([str(client), "submit", "job.sh"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=_scheduler_env(tmp_path, "killed",
                                               HOLD=str(tmp_path / "never")))
    try:
        _wait_for_file(tmp_path / "killed.sbatch")
        command = int((tmp_path / "killed.command").read_text())
        assert (tmp_path / "killed.parent").read_text().strip() == str(server)
        proc.kill()  # SIGKILL: nothing the client can forward
        proc.wait(timeout=30)
        assert _gone(command), "the served command ran on without its client"
    finally:
        _kill_quietly(tmp_path / "killed.sbatch")


def test_a_silent_client_delays_no_other_command(client, tmp_path):
    _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path)
    sock = _wait_for_server(tmp_path)
    (server,) = _server.server_pids(str(sock))
    silent, half = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
    try:
        silent.connect(str(sock))  # connects and sends nothing
        half.connect(str(sock))
        half.sendall(_server.MAGIC + (100).to_bytes(4, "big"))  # a header, then nothing
        started = time.monotonic()
        ran = _run(client, "submit", "job.sh", cwd=tmp_path,
                   env=_scheduler_env(tmp_path, "beside"))
        took = time.monotonic() - started
    finally:
        silent.close()
        half.close()
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "beside.parent").read_text().strip() == str(server)  # served
    assert took < _server.REQUEST_SECONDS, f"waited {took:.1f} s behind a silent client"


@pytest.fixture
def bounded_server(client, tmp_path):
    """The user's server replaced by one with small bounds (the client's socket name)."""
    _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path)
    sock = _wait_for_server(tmp_path)
    (first,) = _server.server_pids(str(sock))
    os.kill(first, signal.SIGTERM)
    assert _gone(first)
    code = ("import sys; from scratchkeeper.cli import _server; _server.REQUEST_SECONDS = 2.0; "
            "_server.MAX_PENDING = 2; _server.MAX_RUNNING = 1; "
            "sys.exit(_server.main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-P", "-c", code, "--socket", str(sock)], cwd="/",
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not _listening(sock):  # not probed by connecting: a probe would hold a place
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        yield sock, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _listening(sock: Path) -> bool:
    """Whether a socket listens on ``sock`` (/proc/net/unix: flag __SO_ACCEPTCON)."""
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7] == str(sock) and int(fields[3], 16) & 0x10000:
            return True
    return False


def _closed_within(conn: socket.socket, seconds: float) -> bool:
    conn.settimeout(seconds)
    try:
        return conn.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_what_one_user_holds_on_the_server_is_bounded(client, tmp_path, bounded_server):
    sock, server = bounded_server
    waiting = [socket.socket(socket.AF_UNIX) for _ in range(3)]
    try:
        for conn in waiting:
            conn.connect(str(sock))
        # two connections may wait for their request; the third is closed at once
        assert _closed_within(waiting[2], 0.4)
        # a command meanwhile runs as the Python command
        crowded = _run(client, "submit", "job.sh", cwd=tmp_path,
                       env=_scheduler_env(tmp_path, "crowded"))
        assert crowded.returncode == 0 and "4242" in crowded.stdout, crowded.stderr
        assert (tmp_path / "crowded.parent").read_text().strip() != str(server)
        # and the silent ones are dropped after REQUEST_SECONDS
        assert _closed_within(waiting[0], 10.0) and _closed_within(waiting[1], 10.0)
    finally:
        for conn in waiting:
            conn.close()
    # one command running at once: the next runs as the Python command, as fast as it can
    hold = tmp_path / "release"
    first = subprocess.Popen([str(client), "submit", "job.sh"], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=_scheduler_env(tmp_path, "held", HOLD=str(hold)))
    try:
        _wait_for_file(tmp_path / "held.sbatch")  # written last
        assert (tmp_path / "held.parent").read_text().strip() == str(server)
        second = _run(client, "submit", "job.sh", cwd=tmp_path,
                      env=_scheduler_env(tmp_path, "second"))
        assert second.returncode == 0, second.stderr
        assert (tmp_path / "second.parent").read_text().strip() != str(server)
        hold.touch()
        out, err = first.communicate(timeout=30)
        assert first.returncode == 0 and "4242" in out, err
    finally:
        if first.poll() is None:
            first.kill()
