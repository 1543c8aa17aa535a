"""The package's build (setup.py, setup.cfg): it warns of nothing, the first thing a newcomer's
``pip install -e .`` would print otherwise, and it ships every file the package reads or builds
from beside its modules."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Folders of data, not modules: each ships every file it holds.
DATA_FOLDERS = ("cli/native", "mount/native", "placement/native", "sim/native", "solver/native",
                "sim/data")


def test_the_build_warns_of_nothing_and_ships_the_native_sources_and_data(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("setup.py", "setup.cfg", "pyproject.toml", "README.rst"):
        shutil.copy2(REPO / name, source / name)
    # a copy: the build writes its egg-info beside setup.py, and nothing built in the
    # checkout (__pycache__, the extensions) comes with it
    shutil.copytree(REPO / "scratchkeeper", source / "scratchkeeper",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copytree(REPO / "job-templates", source / "job-templates")
    built = tmp_path / "lib"
    # -W error: any warning setuptools gives (a folder it ships but is not told of) fails
    ran = subprocess.run([sys.executable, "-W", "error", "setup.py", "-q", "build_py",
                          "--build-lib", str(built)], cwd=source, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    for folder in DATA_FOLDERS:
        wanted = sorted(p.name for p in (source / "scratchkeeper" / folder).iterdir())
        shipped = sorted(p.name for p in (built / "scratchkeeper" / folder).iterdir())
        assert wanted and shipped == wanted, folder
    assert (built / "scratchkeeper" / "sim" / "_native.pyi").is_file()
    assert sorted(p.relative_to(built).as_posix() for p in
                  (built / "scratchkeeper" / "job_templates").rglob("*.j2")) == sorted(
        f"scratchkeeper/job_templates/{p.relative_to(REPO / 'job-templates').as_posix()}"
        for p in (REPO / "job-templates").rglob("*.j2"))
