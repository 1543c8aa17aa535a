"""Fixtures of the replication tests: a private store and state per test, and (cluster tests)
real Slurm jobs of the test's own, cleaned up after.

Cluster tests share the local Slurm with other developers: they never touch the shared store
or state, submit jobs under the name ``skreptest`` and cancel exactly the ids they submitted.
"""

from __future__ import annotations

import subprocess

import pytest

from .helpers import Replicad, SlurmJobs, write_site


@pytest.fixture
def slurm_jobs(local_cluster):
    # the window is the whole queue's: a job of someone else's would change every decision
    others = subprocess.run(["squeue", "-h", "-a", "-t", "PD,R,S,CF", "-o", "%A %u %j %T"],
                            capture_output=True, text=True, timeout=60).stdout.strip()
    if others:
        pytest.fail("the replication cluster tests need the local cluster's queue to "
                    f"themselves; it holds:\n{others}", pytrace=False)
    jobs = SlurmJobs()
    yield jobs
    jobs.cleanup()


@pytest.fixture
def site(tmp_path):
    """A private site (scratch, store, state) reusing the local cluster's Slurm."""
    return write_site(tmp_path / "site.toml", tmp_path)


@pytest.fixture
def replicad(tmp_path, site):
    daemon = Replicad(site, tmp_path / "replicad.log")
    yield daemon
    daemon.stop()
