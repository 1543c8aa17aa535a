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
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv("SCRATCHKEEPER_COMMAND_SERVER", raising=False)
    config = tmp_path / "site.toml"
    config.write_text(f'[storage]\nscratch_root = "{tmp_path}/scratch"\n'
                      f'[state]\ndatabase = "{tmp_path}/state.db"\n')
    monkeypatch.setenv("SCRATCHKEEPER_CONFIG", str(config))
    (tmp_path / "job.sh").write_text(SCRIPT)
    yield binary
    _server.stop_servers(str(runtime / "scratchkeeper"))


def _socket(tmp_path: Path) -> Path | None:
    found = sorted((tmp_path / "run" / "scratchkeeper").glob("cmd-*.sock"))
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


def test_a_server_whose_code_changed_leaves_and_the_command_still_runs(client, tmp_path):
    _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path)
    sock = _wait_for_server(tmp_path)
    (pid,) = _server.server_pids(str(sock))
    # the server's fingerprint of an imported module changes as an edit would change it
    module = Path(_server.__file__).with_name("planner.py")
    st = module.stat()
    os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    try:
        ran = _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path)
        assert ran.returncode == 0 and "served" in ran.stdout
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.05)
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z", "the stale server stayed"
    finally:
        os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_an_interrupt_reaches_the_served_command(client, tmp_path):
    _run(client, "plan", "--dry-run", "job.sh", cwd=tmp_path)
    _wait_for_server(tmp_path)
    fakes = tmp_path / "fakebin"
    fakes.mkdir()
    (fakes / "sbatch").write_text("#!/bin/sh\nexec sleep 60\n")  # a scheduler that hangs
    (fakes / "scancel").write_text("#!/bin/sh\nexit 0\n")
    for fake in fakes.iterdir():
        fake.chmod(0o755)
    path = f"{fakes}:{os.environ['PATH']}"
    outcomes = []
    for mode in ("on", "off"):
        # Ctrl-C during the submission ends the command as it ends the Python command
        proc = subprocess.Popen([str(client), "submit", "job.sh"], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PATH": path,
                                     "SCRATCHKEEPER_COMMAND_SERVER": mode})
        try:
            time.sleep(2.0)
            assert proc.poll() is None
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        outcomes.append((proc.returncode, err.strip().splitlines()[-1:]))
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
    time.sleep(0.5)
    assert _socket(tmp_path) is None  # no server was started there
