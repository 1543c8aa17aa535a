"""POSIX conformance of the scratch mount: pjdfstest's fast subset against bindfs, same run.

Both file systems run the subset of ``scripts/pjdfstest`` (``scripts/pjdfstest list --subset``)
here: the mount may fail no more of it than bindfs over a plain directory does, and every
failure of the mount must be in the accepted list (docs/benchmarks/mount/pjdfstest-accepted.toml,
each with its reason). The whole suite is ``make conformance``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import types
from importlib.machinery import SourceFileLoader
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # testkit/ is not installed: the repository is its home
    sys.path.insert(0, str(REPO))

from testkit import mount_targets as targets  # noqa: E402
from testkit.pjdfstest import ACCEPTED, accepted_failures, known_bugs  # noqa: E402

PJDFSTEST = REPO / "scripts" / "pjdfstest"
SUBSET_TIMEOUT = 900  # seconds the subset may take on one target (about 1-3 minutes)

needs_fuse = [
    pytest.mark.skipif(os.geteuid() != 0, reason="pjdfstest changes owners: needs root"),
    pytest.mark.skipif(not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None,
                       reason="no FUSE here (/dev/fuse, fusermount3)"),
    pytest.mark.skipif(shutil.which("prove") is None or shutil.which("bindfs") is None,
                       reason="prove (perl) and bindfs are needed: make deps"),
]



def _fuse(test):
    for mark in needs_fuse:
        test = mark(test)
    return test


NO_MOUNT = ("scratchkeeper has no mount yet (no package scratchkeeper.mount): only bindfs's "
            "subset run is made")


@pytest.fixture(scope="module")
def subset_run():
    """Runs the subset once per target in this module; the results by target name."""
    results: dict[str, dict] = {}
    bases: list[Path] = []
    built = subprocess.run([str(PJDFSTEST), "build"], capture_output=True, text=True,
                           timeout=900)
    assert built.returncode == 0, built.stderr

    def run(name: str) -> dict:
        if name in results:
            return results[name]
        # a folder every user can reach (pytest's tmp_path is under a root-only one): pjdfstest
        # switches to other users, who then look paths up from the mount point
        base = Path(tempfile.mkdtemp(prefix=f"sk-conformance-{name}.", dir="/var/tmp"))
        os.chmod(base, 0o755)
        bases.append(base)
        mounter = {"bindfs": lambda: targets.bindfs(base, options=(), read_ahead=None),
                   "mount": lambda: targets.scratch_mount(base)}[name]
        out = base / "result.json"
        with mounter() as target:
            done = targets.run_group([str(PJDFSTEST), "run", str(target.path), "--subset",
                                      "--json", str(out), "--timeout", str(SUBSET_TIMEOUT)],
                                     SUBSET_TIMEOUT + 60)
        assert done.returncode == 0, f"pjdfstest on {name} did not complete:\n{done.stdout}\n" \
                                     f"{done.stderr}"
        result = json.loads(out.read_text())
        result["report"] = done.stdout
        results[name] = result
        return result

    try:
        with targets.exit_on_sigterm():  # a killed pytest still unmounts
            yield run
    finally:
        for base in bases:
            targets.clean_base(base)


def _show(title: str, ids) -> str:
    ids = sorted(ids)
    return f"{title} ({len(ids)}):\n" + ("".join(f"  {i}\n" for i in ids) or "  none\n")


@pytest.mark.parametrize("name", ["bindfs", "mount"])
@_fuse
def test_subset_completes_with_only_accepted_failures(subset_run, name):
    if name == "mount" and not targets.mount_available():
        pytest.skip(NO_MOUNT)
    result = subset_run(name)
    subset = subprocess.run([str(PJDFSTEST), "list", "--subset"], capture_output=True,
                            text=True, timeout=60, check=True).stdout.split()
    assert sorted(result["test_files"]) == sorted(subset)
    # every file of the subset ran and reported: a file that died or stopped early says so
    assert result["totals"].get("files") == len(subset), result["report"]
    assert result["totals"].get("tests", 0) > 0
    if name == "bindfs":
        return  # the peer: its failures are what the mount is compared with below
    accepted, bugs = accepted_failures(), known_bugs()
    unaccepted = [f for f in result["failures"] if f not in accepted]
    unexplained = [f for f in unaccepted if f not in bugs]
    details = "".join(f"  {f}: {_reason(result, f)}\n" for f in unexplained)
    assert not unexplained, (f"the mount failed pjdfstest tests not in {ACCEPTED.name}:\n"
                             f"{details}\n{result['report']}")
    # a known bug of a subset file that no longer fails is fixed: its entry must go
    ran = set(result["test_files"])
    fixed = [t for t in bugs if t.rpartition(":")[0] in ran and t not in result["failures"]]
    assert not fixed, (f"known bugs in {ACCEPTED.name} that pass now (remove them): "
                       + ", ".join(fixed))
    if unaccepted:
        by_bug: dict[str, list[str]] = {}
        for failure in unaccepted:
            by_bug.setdefault(bugs[failure], []).append(failure)
        pytest.xfail("known bugs of the mount, to be fixed (" + ACCEPTED.name + "): "
                     + "; ".join(f"{', '.join(ids)}: {bug}" for bug, ids in by_bug.items()))


def _reason(result: dict, failure: str) -> str:
    name, _, number = failure.rpartition(":")
    record = result["files"].get(name, {})
    if number == "plan":
        return "; ".join(record.get("errors", []))
    return record.get("not_ok", {}).get(number, "(no line)")


@_fuse
def test_mount_fails_no_more_than_bindfs(subset_run):
    if not targets.mount_available():
        pytest.skip(NO_MOUNT)
    peer, mount = subset_run("bindfs"), subset_run("mount")
    only_mount = set(mount["failures"]) - set(peer["failures"])
    only_peer = set(peer["failures"]) - set(mount["failures"])
    assert len(mount["failures"]) <= len(peer["failures"]), (
        f"the mount failed {len(mount['failures'])} tests of the subset, bindfs "
        f"{len(peer['failures'])}\n" + _show("failed by the mount only", only_mount)
        + "".join(f"    {f}: {_reason(mount, f)}\n" for f in sorted(only_mount))
        + _show("failed by bindfs only", only_peer))


def test_accepted_list_gives_a_reason_for_each_entry():
    subprocess.run([str(PJDFSTEST), "build"], capture_output=True, timeout=900, check=True)
    table = tomllib.loads(ACCEPTED.read_text())
    assert set(table) <= {"accepted", "known_bug"}, f"{ACCEPTED.name}: unknown tables"
    for kind, why in (("accepted", "reason"), ("known_bug", "bug")):
        for entry in table.get(kind, []):
            assert entry.get(why, "").strip(), f"{kind} without a {why}: {entry}"
            assert entry.get("tests"), entry
            for test in entry["tests"]:
                name, _, number = test.rpartition(":")
                assert (REPO / "build" / "pjdfstest" / "tests" / name).is_file(), \
                    f"{test}: no such pjdfstest file"
                assert number == "plan" or number.isdigit(), test


#: prove -r -v's output of bindfs's whole-suite run on this machine (2026-11-24), cut to one
#: verbose file and a few summary entries: a wrapped "Failed tests" list, "TODO passed" (not
#: failures), the totals.
PROVE_OUTPUT = """\
/work/main/build/pjdfstest/tests/utimensat/02.t ........ 
1..10
ok 1
ok 2
ok 3
not ok 4 - tried 'lstat pjdfstest_9dd61dec12a3fa2cc2b12beeb98fb8f8 atime', expected 1900000000, got 1795526445
ok 5
ok 6
not ok 7 - tried 'lstat pjdfstest_9dd61dec12a3fa2cc2b12beeb98fb8f8 atime', expected 1900000000, got 1795526445
not ok 8 - tried 'lstat pjdfstest_9dd61dec12a3fa2cc2b12beeb98fb8f8 mtime', expected 1950000000, got 1795526445
ok 9
ok 10
Failed 3/10 subtests 
/work/main/build/pjdfstest/tests/utimensat/03.t ........ 
Test Summary Report
-------------------
/work/main/build/pjdfstest/tests/chown/00.t          (Wstat: 0 Tests: 1280 Failed: 0)
  TODO passed:   1054, 1058, 1064, 1069, 1073, 1079, 1084
                1088, 1094, 1099, 1103, 1109, 1114, 1118
                1124, 1129, 1133, 1139, 1144
/work/main/build/pjdfstest/tests/link/00.t           (Wstat: 0 Tests: 202 Failed: 45)
  Failed tests:  5, 8-9, 13, 15, 18-19, 22, 31, 34-35, 39
                41, 44-45, 48, 57, 60-61, 65, 67, 70-71
                74, 83, 86-87, 91, 93, 96-97, 100, 109
                112-113, 117, 119, 122-123, 126, 134, 141
                148, 155, 162
/work/main/build/pjdfstest/tests/utimensat/02.t      (Wstat: 0 Tests: 10 Failed: 3)
  Failed tests:  4, 7-8
Files=238, Tests=8798, 177 wallclock secs ( 0.88 usr  0.26 sys + 34.51 cusr  9.44 csys = 45.09 CPU)
Result: FAIL
"""


def _pjdfstest_module():
    loader = SourceFileLoader("pjdfstest_script", str(PJDFSTEST))
    module = types.ModuleType(loader.name)
    module.__file__ = str(PJDFSTEST)
    loader.exec_module(module)
    return module


def test_prove_output_parsed_per_file():
    pjdfstest = _pjdfstest_module()
    result = pjdfstest.parse_prove(PROVE_OUTPUT)
    assert result["totals"] == {"files": 238, "tests": 8798, "result": "FAIL"}
    utimensat = result["files"]["utimensat/02.t"]
    assert utimensat["planned"] == 10 and utimensat["ran"] == 10
    assert utimensat["failed"] == [4, 7, 8]
    assert utimensat["not_ok"]["8"].endswith("expected 1950000000, got 1795526445")
    link = result["files"]["link/00.t"]
    assert len(link["failed"]) == 45 and link["failed"][:4] == [5, 8, 9, 13]
    assert link["failed"][-3:] == [148, 155, 162]  # the list's continuation lines
    assert result["files"]["chown/00.t"]["failed"] == []  # TODO passed is no failure
    failures = pjdfstest.failure_ids(result)
    assert len(failures) == 48 and "utimensat/02.t:7" in failures


def test_prove_output_of_a_run_without_failures_has_its_totals():
    """No failed file: prove prints no "Test Summary Report", only "All tests successful."."""
    output = ("/work/main/build/pjdfstest/tests/utimensat/08.t .. \n1..2\nok 1\nok 2\nok\n"
              "All tests successful.\n"
              "Files=30, Tests=1551, 66 wallclock secs ( 0.15 usr  0.04 sys +  4.30 cusr  "
              "1.16 csys =  5.65 CPU)\nResult: PASS\n")
    result = _pjdfstest_module().parse_prove(output)
    assert result["totals"] == {"files": 30, "tests": 1551, "result": "PASS"}
    assert result["files"]["utimensat/08.t"] == {"planned": 2, "ran": 2, "failed": [],
                                                  "not_ok": {}, "errors": []}
