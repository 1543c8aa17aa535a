"""Data jobs that run until a test ends them: a source that never answers, and a wait for the
job to start (for the tests that end a stage-in by scancel, its walltime or a signal)."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.parse

import pytest


@pytest.fixture
def silent_source(local_cluster):
    """An http:// source that accepts connections and never answers, on the address of the
    cluster's own HTTP server (the head's, which every host reaches)."""
    host = urllib.parse.urlsplit(local_cluster.http_source_url).hostname
    listener = socket.socket()
    listener.bind((host, 0))
    listener.listen(64)
    yield f"http://{host}:{listener.getsockname()[1]}"
    listener.close()


def squeue_state(job_id: str) -> tuple[str, str]:
    """(state, reason) of a job slurmctld still holds; empty strings once it forgot it."""
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T %r"], capture_output=True,
                         text=True, timeout=30).stdout.split()
    return (out[0], out[1]) if len(out) == 2 else ("", "")


def wait_running(job_id: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if squeue_state(job_id)[0] == "RUNNING":
            return
        time.sleep(0.5)
    pytest.fail(f"job {job_id} did not start within {timeout:g}s")
