"""A private ``munged`` for tests: its own key, socket and state in a temporary folder, run as
the ``munge`` user as Debian runs it, so tests never depend on (or disturb) the machine's."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class MungeDaemon:
    root: Path
    socket: str
    key: Path
    process: subprocess.Popen

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_munged(root: Path, key: bytes | None = None) -> MungeDaemon:
    """A munged serving ``root/run/munge.socket``; ``key`` (128 random bytes by default)."""
    munge = pwd.getpwnam("munge")
    for sub in ("run", "lib", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    key_file = root / "munge.key"
    key_file.write_bytes(key if key is not None else os.urandom(128))
    for path in (root, *(root / sub for sub in ("run", "lib", "log")), key_file):
        os.chown(path, munge.pw_uid, munge.pw_gid)
    os.chmod(root, 0o755)
    os.chmod(root / "run", 0o755)
    os.chmod(key_file, 0o600)
    socket_path = root / "run" / "munge.socket"
    process = subprocess.Popen(
        [shutil.which("setpriv") or "setpriv", f"--reuid={munge.pw_uid}", f"--regid={munge.pw_gid}",
         "--clear-groups", shutil.which("munged") or "/usr/sbin/munged", "--foreground",
         f"--socket={socket_path}", f"--key-file={key_file}", f"--log-file={root}/log/munged.log",
         f"--pid-file={root}/run/munged.pid", f"--seed-file={root}/lib/munged.seed"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while not socket_path.exists():
        if process.poll() is not None:
            raise RuntimeError(f"munged did not start: {process.stderr.read().decode()[-500:]}")
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("munged did not create its socket within 10 s")
        time.sleep(0.02)
    return MungeDaemon(root, str(socket_path), key_file, process)
