"""Fixtures of the Slurm-plugin tests: the installed plugins, a private site, job helpers.

The plugins are installed by `make test` (target `plugins`: `make -C slurm-plugins install
LOCAL=1`, before `scripts/local-cluster up`). Each test gets its own scratch, store and state
under a world-traversable temporary folder; the shared store is never touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from scratchkeeper.config import SiteConfig, load_config

PLUGSTACK_ENTRY = Path("/etc/slurm/plugstack.conf.d/scratchkeeper.conf")
JOB_SUBMIT_LUA = Path("/etc/slurm/job_submit.lua")
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Site:
    root: Path
    config: SiteConfig
    config_path: Path


def plugstack_arguments() -> dict[str, str]:
    """The key=value arguments of the installed plugstack line."""
    for line in PLUGSTACK_ENTRY.read_text().splitlines():
        words = line.split()
        if words and words[0] in ("optional", "required"):
            return dict(w.split("=", 1) for w in words[2:] if "=" in w)
    return {}


@pytest.fixture(scope="session")
def plugins(local_cluster):
    """The installed plugins; a missing install is a failure when the cluster is required."""
    missing = [str(p) for p in (PLUGSTACK_ENTRY, JOB_SUBMIT_LUA) if not p.exists()]
    slurm_conf = Path("/etc/slurm/slurm.conf").read_text()
    if "\nJobSubmitPlugins=lua" not in slurm_conf:
        missing.append("JobSubmitPlugins=lua in slurm.conf")
    if missing:
        message = ("Slurm plugins not installed (" + ", ".join(missing) + "): run "
                   "`make -C slurm-plugins install LOCAL=1 && scripts/local-cluster up`")
        if os.environ.get("SCRATCHKEEPER_REQUIRE_CLUSTER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return plugstack_arguments()


@pytest.fixture
def site(local_cluster):
    """A private scratch/store/state with the cluster's [scheduler] section."""
    root = Path(tempfile.mkdtemp(prefix="sk-plugins-"))
    os.chmod(root, 0o755)
    (root / "scratch").mkdir()
    text = local_cluster.site_config.read_text()
    start = text.find("[scheduler]")
    end = text.find("\n[", start + 1)
    scheduler = text[start:end if end != -1 else None]
    (root / "site.toml").write_text(
        scheduler + "\n"
        f'[storage]\nbackend = "local"\nscratch_root = "{root}/scratch"\n'
        f'store_root = "{root}/store"\nost_count = 16\n\n'
        f'[state]\ndatabase = "{root}/state.db"\n\n'
        f'[recovery]\nsocket = "{root}/recoveryd.sock"\nprobe_timeout = 2.0\n'
        f'check_interval = 0.5\n\n[retry]\nattempts = 2\ndelay = 1.0\n')
    yield Site(root, load_config(root / "site.toml"), root / "site.toml")
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def source(local_cluster):
    """Write a file in a private folder of the served source directory; removed afterwards."""
    folder = local_cluster.source_dir / ("plugins-" + uuid.uuid4().hex[:8])
    folder.mkdir()

    def make(name: str, size: int) -> tuple[Path, bytes]:
        data = os.urandom(size)
        (folder / name).write_bytes(data)
        return folder / name, data

    yield make
    shutil.rmtree(folder, ignore_errors=True)


class Jobs:
    """sbatch through the real CLI; cancels at teardown whatever this test submitted."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.submitted: list[str] = []

    def sbatch(self, *args: str, cwd: Path, user: str | None = None,
               check: bool = True) -> subprocess.CompletedProcess:
        argv = ["sbatch", "--parsable", *args]
        if user:
            argv = ["runuser", "-u", user, "--", *argv]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd)
        if result.returncode == 0:
            self.submitted.append(result.stdout.strip().split(";")[0])
        elif check:
            raise AssertionError(f"{argv}: exit {result.returncode}: {result.stderr}")
        return result

    def track(self, job_ids):
        self.submitted.extend(job_ids)

    def cancel_all(self):
        if self.submitted:
            subprocess.run(["scancel", *self.submitted], capture_output=True, timeout=30)


@pytest.fixture
def jobs(local_cluster):
    tracker = Jobs(local_cluster)
    yield tracker
    tracker.cancel_all()


def sk(site: Site | Path, *args: str, check: bool = True,
       timeout: float = 120) -> subprocess.CompletedProcess:
    """The real CLI on the test's private site (or on the site configuration at that path)."""
    config_path = site.config_path if isinstance(site, Site) else site
    argv = [sys.executable, "-m", "scratchkeeper", "-c", str(config_path), *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{argv}: exit {result.returncode}: {result.stderr}")
    return result


def sacct(job_id: str, fields: str) -> list[str]:
    """The job's accounting fields (``sacct -o FIELDS``, allocation only); [] before its record."""
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", fields],
                         capture_output=True, text=True, timeout=30).stdout.strip()
    return out.split("|") if out else []


def slurmd_log_lines(cluster, needle: str) -> list[str]:
    lines = []
    for path in cluster.log_dir.glob("slurmd-*.log"):
        lines += [line for line in path.read_text(errors="replace").splitlines() if needle in line]
    return lines


def wait_for_log(cluster, needle: str, timeout: float = 20.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = slurmd_log_lines(cluster, needle)
        if found:
            return found
        time.sleep(0.25)
    return []
