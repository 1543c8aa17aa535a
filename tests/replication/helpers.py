"""Helpers of the replication tests: private sites, staged-input records, Slurm jobs, replicad."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from scratchkeeper.config import load_config
from scratchkeeper.planner import records
from scratchkeeper.state import StateStore
from scratchkeeper.storage import open_backend

JOB_NAME = "skreptest"


def _pbs_system_nodes(scheduler_kind: str) -> str:
    """A PBS site states S (pbsnodes lists the data-transfer host too): the batch nodes."""
    if scheduler_kind != "pbs":
        return ""
    import subprocess

    nodes = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%N", "--partition=batch"],
                           capture_output=True, text=True, check=True, timeout=30).stdout.split()
    return f"system_nodes = {len(set(nodes))}"


def write_site(path: Path, root: Path, *, scheduler_kind: str = "slurm", replica_queue: str = "",
               alpha: float = 0.5, threshold: float = 0.1, interval: float = 0.5,
               extra: str = "") -> Path:
    """A site.toml with its own scratch, store and state under ``root``."""
    path.write_text(f"""
[scheduler]
kind = "{scheduler_kind}"
batch_queue = "batch"
data_queue = "dataxfer"
replica_queue = "{replica_queue}"
command_timeout = 20.0
submit_retries = 0

[storage]
backend = "local"
scratch_root = "{root / 'scratch'}"
store_root = "{root / 'store'}"
ost_count = 8
stripe_count = 2
stripe_size = 1048576

[state]
database = "{root / 'state' / 'state.db'}"

[replication]
alpha = {alpha}
threshold = {threshold}
{_pbs_system_nodes(scheduler_kind)}
interval = {interval}
workers = 2
retry_delay = 1.0
close_quiet = 1.0
backoff_max = 4.0
{extra}
""")
    return path


def stage_input(config, job_id: str, name: str, size: int, *, owner: tuple[int, int] = (0, 0),
                seed: int | None = None) -> tuple[str, str]:
    """A staged input of compute job ``job_id`` as the planner records it; returns (path, sha)."""
    backend = open_backend(config)
    path = f"{config.storage.scratch_root}/{name}"
    data = (os.urandom(size) if seed is None
            else (hashlib.sha256(str(seed).encode()).digest() * (size // 32 + 1))[:size])
    if not backend.exists(path):
        backend.create(path, owner=owner)
        backend.write(path, 0, data)
        checksum = hashlib.sha256(data).hexdigest()
        backend.set_xattr(path, "user.scratchkeeper.sha256", checksum.encode())
    else:
        checksum = backend.get_xattr(path, "user.scratchkeeper.sha256").decode()
    store = records.open_records(StateStore(config.state.database))
    chain_id = uuid.uuid4().hex
    now = time.time()
    with store.transaction() as conn:
        conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (chain_id, "/dev/null", "/tmp", config.scheduler.kind, owner[0], "submitted",
                      "", now, now, "{}"))
        conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, job_id, "
                     "state, updated) VALUES (?, 'compute', 'compute', 'batch', 1, ?, "
                     "'submitted', ?)", (chain_id, job_id, now))
        conn.execute("INSERT INTO staged_files(chain_id, path, job_key, source, line, state, size,"
                     " checksum, owner_uid, owner_gid, staged_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                     (chain_id, path, "stage-in", f"file:///src/{name}", 2, "staged", size,
                      f"sha256:{checksum}", owner[0], owner[1], now))
    return path, checksum


@dataclass
class SlurmJobs:
    """Jobs this test submitted to the real Slurm; every one is cancelled at the end."""

    submitted: list[str] = field(default_factory=list)

    def submit(self, nodes: int, *, hold: bool = True, begin: str | None = "now+3600",
               command: str = "sleep 600", extra: tuple[str, ...] = ()) -> str:
        argv = ["sbatch", "--parsable", f"--job-name={JOB_NAME}", "--output=/dev/null",
                f"--nodes={nodes}", "--partition=batch", *extra]
        if hold:
            argv.append("--hold")
        if begin:
            argv.append(f"--begin={begin}")
        argv += ["--wrap", command]
        out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30)
        job_id = out.stdout.strip().split(";")[0]
        self.submitted.append(job_id)
        return job_id

    def scontrol(self, *args: str) -> None:
        subprocess.run(["scontrol", *args], check=True, capture_output=True, text=True,
                       timeout=30)

    def state(self, job_id: str) -> str:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
        return out or "GONE"

    def cancel(self, *job_ids: str) -> None:
        if job_ids:
            subprocess.run(["scancel", *job_ids], capture_output=True, timeout=30)

    def cleanup(self) -> None:
        self.cancel(*self.submitted)


class Replicad:
    """``scratchkeeper replicad`` as a real process of its own (so kill -9 is real)."""

    def __init__(self, site: Path, log: Path, env: dict | None = None):
        self.site = site
        self.log = log
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = dict(os.environ)
        env.update(self.env or {})
        handle = open(self.log, "a")
        self.proc = subprocess.Popen([sys.executable, "-m", "scratchkeeper", "-c", str(self.site),
                                      "-v", "replicad"], stdout=handle, stderr=handle, env=env,
                                     start_new_session=True)
        handle.close()

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill9()
        return self.proc.returncode

    def once(self, timeout: float = 120) -> subprocess.CompletedProcess:
        env = dict(os.environ)
        env.update(self.env or {})
        return subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(self.site), "-v",
                               "replicad", "--once"], capture_output=True, text=True,
                              timeout=timeout, env=env)


def config_of(path: Path):
    return load_config(path)


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
