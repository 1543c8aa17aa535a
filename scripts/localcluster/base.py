"""What every part of scripts/local-cluster uses: its error, commands with a timeout,
processes, the status file and one daemon started in the foreground.

Plain Python 3 standard library only, like the script.
"""

from __future__ import annotations

import datetime
import grp
import hashlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SUPERVISOR = Path(__file__).resolve().parent / "supervise.py"


class ClusterError(Exception):
    """Something the cluster cannot start or stop with; printed as one line, exit 1."""


# ---------------------------------------------------------------------------- small helpers

def say(message: str) -> None:
    print(f"local-cluster: {message}", flush=True)


def run(argv: list[str], *, timeout: float = 30, check: bool = True,
        input_text: str | None = None) -> subprocess.CompletedProcess:
    """Run a command with a timeout; a failure with ``check`` raises ClusterError with its stderr."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                input=input_text,
                                stdin=None if input_text is not None else subprocess.DEVNULL)
    except FileNotFoundError as err:
        raise ClusterError(f"command not found: {argv[0]}") from err
    except subprocess.TimeoutExpired as err:
        raise ClusterError(f"timed out after {timeout:g}s: {' '.join(argv)}") from err
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise ClusterError(f"{' '.join(argv)} exited {result.returncode}: "
                           f"{detail[-1] if detail else '(no output)'}")
    return result


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def port_is_free(port: int) -> bool:
    # Slurm daemons bind the wildcard address, so test that, not only loopback.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def any_free_port(taken: set[int]) -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in taken and port_is_free(port):
            return port


def port_answers(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def process_alive(pid: int | None, executable: str | None = None) -> bool:
    """True if ``pid`` runs (not a zombie) and, when given, its executable is named ``executable``."""
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        exe_path = os.readlink(f"/proc/{pid}/exe") if executable else None
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    if state in ("Z", "X"):
        return False
    # A binary replaced by an upgrade shows as "path (deleted)".
    return executable is None or exe_path.removesuffix(" (deleted)") == _binary(executable)


def _binary(executable: str) -> str:
    """The real file behind a command name (Debian installs slurmctld as slurmctld-wlm)."""
    found = shutil.which(executable, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    return os.path.realpath(found) if found else f"/nonexistent/{executable}"


def parent_pid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def processes_named(executable: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and process_alive(int(entry.name), executable):
            pids.append(int(entry.name))
    return pids


def write_if_changed(path: Path, text: str, mode: int = 0o644) -> bool:
    """Write ``text`` atomically unless the file already holds it; return whether it changed."""
    if path.exists() and path.read_text() == text:
        os.chmod(path, mode)
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return True


# ---------------------------------------------------------------------------- status file

@dataclass
class Layout:
    """Every path of the cluster under the local directory."""

    root: Path

    def __post_init__(self):
        if not self.root.is_absolute() or not re.fullmatch(r"[A-Za-z0-9_./+-]+", str(self.root)):
            raise ClusterError(f"SK_LOCAL_DIR={self.root}: need an absolute path of letters, "
                               f"digits and ._+-/ only (it is written into config files)")

    status = property(lambda self: self.root / "cluster.json")
    log = property(lambda self: self.root / "log")
    run = property(lambda self: self.root / "run")
    source = property(lambda self: self.root / "source")
    sink = property(lambda self: self.root / "sink")
    scratch = property(lambda self: self.root / "scratch")
    store = property(lambda self: self.root / "store")
    state_db = property(lambda self: self.root / "state" / "state.db")
    # the chains' and replica jobs' scripts and outputs (state.spool): shared with the hosts,
    # unlike the state database's folder, which is the head's own (hosts.HEAD_ONLY)
    spool = property(lambda self: self.root / "spool")
    site_config = property(lambda self: self.root / "site.toml")
    site_config_pbs = property(lambda self: self.root / "site-pbs.toml")
    mariadb_data = property(lambda self: self.root / "mariadb" / "data")
    mariadb_run = property(lambda self: self.root / "mariadb" / "run")
    mariadb_socket = property(lambda self: self.root / "mariadb" / "run" / "mysqld.sock")
    mariadb_password = property(lambda self: self.root / "mariadb" / "slurm.password")
    nginx = property(lambda self: self.root / "nginx")
    gridftp_conf = property(lambda self: self.root / "gridftp" / "gridftp.conf")
    recovery_socket = property(lambda self: self.root / "run" / "recoveryd.sock")


def read_status(layout: Layout) -> dict:
    if not layout.status.exists():
        return {}
    try:
        return json.loads(layout.status.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ClusterError(f"{layout.status}: unreadable status file ({err}); "
                           f"remove it after stopping the daemons by hand") from err


def write_status(layout: Layout, status: dict) -> None:
    write_if_changed(layout.status, json.dumps(status, indent=2, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------- daemons

@dataclass
class Daemon:
    """One long-running process of the cluster, started in the foreground in its own session."""

    name: str
    argv: list[str]
    executable: str                      # name of the binary, to recognise its pid later
    ready: Callable[[], bool]
    ready_timeout: float = 60.0
    user: str | None = None
    prepare: Callable[[], None] | None = None
    config_files: tuple[Path, ...] = ()  # a change restarts the daemon on the next `up`
    # seconds: run under supervise.py, which starts the command again this long after it died
    # (systemd's Restart=always, RestartSec=); 0: not supervised. The supervisor runs on
    # ``executable``, which must then be a Python 3 interpreter, so its pid is recognised as
    # the daemon's; the command's own pid is in run/NAME.pid.
    respawn: float = 0.0
    # makes the argv that runs the command as ``user`` on another host of the cluster
    # (hosts.enter: nsenter into its namespaces, setpriv to the user); None: on the head
    launcher: Callable[..., list[str]] | None = None

    def digest(self) -> str:
        content = hashlib.sha256("\0".join(self.argv).encode())
        if self.respawn:
            content.update(f"\0respawn={self.respawn:g}".encode())
        for path in self.config_files:
            # An optional file (the SPANK plugin's plugstack entry) counts by its absence too.
            content.update(path.read_bytes() if path.exists() else b"\0absent")
        return content.hexdigest()[:16]

    def start(self, layout: Layout, status: dict) -> None:
        pids = status.setdefault("pids", {})
        digests = status.setdefault("config_digests", {})
        pid = pids.get(self.name)
        if process_alive(pid, self.executable) and digests.get(self.name) not in (None, self.digest()):
            say(f"{self.name}: configuration changed, restarting")
            stop_pid(self.name, pid, self.executable)
        if process_alive(pid, self.executable):
            if not wait_until(self.ready, self.ready_timeout):
                raise ClusterError(f"{self.name} (pid {pid}) runs but does not answer; "
                                   f"see {layout.log}/; try `local-cluster down` then `up`")
            say(f"{self.name}: already running (pid {pid})")
            digests.setdefault(self.name, self.digest())
            return
        if self.prepare:
            self.prepare()
        log_path = layout.log / f"{self.name}.out"
        with open(log_path, "ab") as log_file:
            log_file.write(f"--- {datetime.datetime.now().isoformat()} "
                           f"{' '.join(self.argv)}\n".encode())
            log_file.flush()
            # on another host, the launcher's setpriv takes the user: nsenter needs root
            user = None if self.launcher else self.user
            process = subprocess.Popen(self.command(layout), stdin=subprocess.DEVNULL,
                                       stdout=log_file,
                                       stderr=subprocess.STDOUT, start_new_session=True,
                                       cwd=str(layout.root), user=user,
                                       group=self._group() if user else None,
                                       extra_groups=[] if user else None)
        pids[self.name] = process.pid
        digests[self.name] = self.digest()
        write_status(layout, status)

        def ready_or_dead() -> bool:
            return process.poll() is not None or self.ready()

        if not wait_until(ready_or_dead, self.ready_timeout) or process.poll() is not None:
            code = process.poll()
            tail = _tail(log_path, 5)
            why = f"exited with {code}" if code is not None else \
                f"not ready after {self.ready_timeout:g}s"
            raise ClusterError(f"{self.name} {why}; last lines of {log_path}: {tail} "
                               f"(`local-cluster down` stops what was started)")
        say(f"{self.name}: started (pid {process.pid})")

    def command(self, layout: Layout) -> list[str]:
        """What is started: the daemon's argv, or supervise.py running it; on its host."""
        argv = self.argv
        if self.respawn:
            argv = [self.executable, str(SUPERVISOR), "--name", self.name,
                    "--pid-file", str(self.pid_file(layout)), "--pause", f"{self.respawn:g}",
                    "--", *self.argv]
        if self.launcher:
            argv = self.launcher(argv, user=self.user, cwd=str(layout.root))
        return argv

    def pid_file(self, layout: Layout) -> Path:
        """Where a supervised daemon's command records its pid."""
        return layout.run / f"{self.name}.pid"

    def _group(self) -> str | None:
        if not self.user:
            return None
        return grp.getgrgid(pwd.getpwnam(self.user).pw_gid).gr_name


def _tail(path: Path, lines: int) -> str:
    try:
        content = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(content[-lines:]) or "(empty)"


def stop_pid(name: str, pid: int, executable: str, grace: float = 30.0) -> None:
    """Stop one recorded daemon: SIGTERM, wait, then SIGKILL."""
    if not process_alive(pid, executable):
        return
    os.kill(pid, signal.SIGTERM)
    if wait_until(lambda: not process_alive(pid, executable), grace):
        say(f"{name}: stopped (pid {pid})")
        return
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not process_alive(pid, executable), 5)
    say(f"{name}: killed after {grace:g}s (pid {pid})")
