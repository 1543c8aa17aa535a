"""A private GridFTP server on loopback, for tests that need their own (to kill it mid-patch, or
to let it write a folder): never the local cluster's shared one."""

from __future__ import annotations

import ftplib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PrivateGridFtp:
    """``globus-gridftp-server`` on a free loopback port serving one folder, in its own session."""

    def __init__(self, folder: Path, workdir: Path, *, writable: bool = False):
        self.folder = folder
        self.workdir = workdir
        self.writable = writable
        self.port = _free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"ftp://127.0.0.1:{self.port}"

    def start(self) -> None:
        config = self.workdir / f"gridftp-{self.port}.conf"
        config.write_text(f"port {self.port}\ncontrol_interface 127.0.0.1\n"
                          "data_interface 127.0.0.1\nhostname 127.0.0.1\nallow_anonymous 1\n"
                          "anonymous_user nobody\nanonymous_group nogroup\n"
                          f"restrict_paths {'RW' if self.writable else 'R'}{self.folder}\nlog_level ERROR\n"
                          f"log_single {self.workdir}/gridftp-{self.port}.log\n")
        self.process = subprocess.Popen(["globus-gridftp-server", "-c", str(config)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with ftplib.FTP() as ftp:
                    ftp.connect("127.0.0.1", self.port, timeout=2)
                    return
            except OSError:
                time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"private GridFTP server on port {self.port} did not start")

    def kill(self) -> None:
        """SIGKILL the server and the per-connection processes it forked (its own session)."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=10)
        self.process = None

    stop = kill
