"""Fixtures of the replication tests: a private store and state per test, and (cluster tests)
real Slurm jobs of the test's own, cleaned up after.

Cluster tests share the local Slurm with other developers: they never touch the shared store
or state, submit jobs under the name ``skreptest`` and cancel exactly the ids they submitted.
"""

from __future__ import annotations

import pytest

from .helpers import Replicad, SlurmJobs, write_site


@pytest.fixture
def slurm_jobs(local_cluster):
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
