"""A plain user submitting with a site configuration only its owner can submit with (root's:
its state database and spool are root's, its data queue admits root): one line, exit 2, never a
traceback (issue 32: a ``PermissionError`` traceback from ``-c site-pbs.toml submit``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from scratchkeeper.planner import records
from scratchkeeper.state import StateStore
from user_runtime import user_runtime


@pytest.mark.parametrize("kind", ["pbs", "slurm"])
def test_a_spool_the_user_may_not_write_is_one_line_and_exit_2(kind, skplain):
    uid, gid = skplain
    # pytest's tmp_path lies under root's 0700 folder: the user needs a way in
    tmp_path = Path(tempfile.mkdtemp(prefix="sk-plain-submit-"))
    try:
        _submit_as_plain_user(tmp_path, kind, uid, gid)
    finally:
        shutil.rmtree(tmp_path)


def _submit_as_plain_user(tmp_path: Path, kind: str, uid: int, gid: int) -> None:
    command = user_runtime(tmp_path)
    state = tmp_path / "state"                  # root's, 0755, as on a site
    (state / "spool").mkdir(parents=True)
    records.open_records(StateStore(str(state / "state.db")))  # made by root's services
    scratch = tmp_path / "scratch"
    work = scratch / "u"
    work.mkdir(parents=True)
    os.chown(work, uid, gid)
    for folder in (tmp_path, scratch):
        os.chmod(folder, 0o755)
    site = tmp_path / "site.toml"
    site.write_text(f'[scheduler]\nkind = "{kind}"\n[state]\ndatabase = "{state / "state.db"}"\n'
                    f'[storage]\nscratch_root = "{scratch}"\n')
    script = work / "job.sh"
    # the script's last line has no newline: the line this error is not about stays unnamed
    script.write_text("#!/bin/bash\n#PBS -N myjob\n#STAGEIN http://h/a in.dat\nrun")
    os.chmod(script, 0o644)

    def as_plain():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)

    done = subprocess.run([*command, "-c", str(site), "submit", "job.sh"], cwd=work,
                          capture_output=True, text=True, timeout=120, preexec_fn=as_plain)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"scratchkeeper: {state / 'spool'}/sk"), done.stderr
    assert f"permission denied for uid {uid}" in done.stderr
    assert f"with the site configuration {site}" in done.stderr
    assert done.stdout == ""
    assert os.listdir(state / "spool") == []    # nothing half-done
