"""What every benchmark's main shares: where its outputs go, the header of its report (date,
machine, load), the checks before a run (root, cgroup v1, tools, the local cluster), its work
folder and its cleanup, and its plots.

The rigs that run ``scratchkeeper mount`` on devices of their own are in
:mod:`benchmarks.mount_rig`; what tests share with benchmarks (the FUSE targets, pjdfstest) in
``testkit/``. A benchmark's report keeps its own words: these helpers give figures and paths,
not sentences.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from benchmarks.mount_rig import mounted
from testkit.mount_targets import exit_on_sigterm

REPO = Path(__file__).resolve().parents[1]
#: the traces and failure logs of the replays, beside the checkout (not in git)
TRACES = REPO.parent / "shared" / "traces"
#: the state file ``scripts/local-cluster up`` writes
CLUSTER = Path(os.environ.get("SK_LOCAL_DIR", "/var/lib/scratchkeeper-local")) / "cluster.json"


# ---------------------------------------------------------------- outputs

def report_dir(name: str) -> Path:
    """docs/benchmarks/NAME: the committed report, its JSON and plots."""
    return REPO / "docs" / "benchmarks" / name


def results_dir(name: str) -> Path:
    """benchmarks/results/NAME: raw figures (git-ignored)."""
    return REPO / "benchmarks" / "results" / name


def suffix(quick: bool) -> str:
    """What a quick run's file names end in, so that it never overwrites the full run's."""
    return "-quick" if quick else ""


def write_json(path: Path, data, indent: int = 1, newline: bool = False, **options) -> Path:
    """``data`` as JSON at ``path`` (its folder made first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent, **options) + ("\n" if newline else ""))
    return path


def pyplot():
    """matplotlib's pyplot, drawing to files only (no display on the machines that run this)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 110) -> None:
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)


# ---------------------------------------------------------------- the report's header

def utc_now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def load_average() -> str:
    """The 1, 5 and 15 minute load averages: the machine is shared, the report says how."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_model() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return model


def machine() -> str:
    """``CPU model, N CPUs, Python X.Y.Z``."""
    return f"{cpu_model()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


# ---------------------------------------------------------------- checks before a run

def require_root(name: str, why: str) -> None:
    if os.geteuid() != 0:
        sys.exit(f"benchmarks.{name}: run as root ({why})")


def require_paths(name: str, paths: Iterable[Path], what: str = "(cgroup v1) here") -> None:
    """Exit unless every path exists (the cgroup-v1 controllers' files a rig writes)."""
    for need in paths:
        if not Path(need).exists():
            sys.exit(f"benchmarks.{name}: no {need} {what}")


def require_tools(name: str, tools: Iterable[str], hint: str = "make deps") -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            sys.exit(f"benchmarks.{name}: {tool} not found: {hint}")


def cluster_up() -> bool:
    try:
        return json.loads(CLUSTER.read_text()).get("state") == "up"
    except (OSError, ValueError):
        return False


def local_cluster(name: str) -> dict:
    """The local cluster's state (``scripts/local-cluster up``); exit if it is not up."""
    try:
        status = json.loads(CLUSTER.read_text())
    except (OSError, json.JSONDecodeError) as err:
        sys.exit(f"benchmarks.{name}: local cluster not available ({err}); "
                 "run scripts/local-cluster up")
    if status.get("state") != "up":
        sys.exit(f"benchmarks.{name}: local cluster not up; run scripts/local-cluster up")
    return status


# ---------------------------------------------------------------- the run

@contextlib.contextmanager
def work_folder(name: str, prefix: str, parent: str | None = None,
                mounts: Callable[[Path], Iterable[Path]] = lambda work: ()) -> Iterator[Path]:
    """A private folder for the run, removed at the end, on errors and SIGTERM too (SIGTERM
    raises KeyboardInterrupt, so that the rig's ``finally`` undoes its mounts first); left in
    place, and said so, if one of ``mounts(work)`` is still mounted (removing it would reach
    through the mount)."""
    with exit_on_sigterm():
        work = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        try:
            yield work
        finally:
            if any(mounted(path) for path in mounts(work)):
                print(f"benchmarks.{name}: {work} still has a mount; left in place",
                      file=sys.stderr)
            else:
                shutil.rmtree(work, ignore_errors=True)


def fsync_file(path: Path) -> None:
    """What makes a copy durable: its bytes on disk (the peers of the recovery benchmarks)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
