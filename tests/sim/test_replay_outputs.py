"""Issue 41: where the replay writes (a device or a link is never replaced by a regular file),
which core it runs, and what it says of an empty or mislabelled trace."""

from __future__ import annotations

import gzip
import os
import stat

import pytest

from scratchkeeper.cli import main
from scratchkeeper.sim import DATA_DIR
from scratchkeeper.sim.run import ReplayConfig, run_replay

RICC_EXCERPT = os.path.join(DATA_DIR, "RICC-2010-2-first5000.swf.gz")
LANL_EXCERPT = os.path.join(DATA_DIR, "LA-UR-05-7318-system20.csv.xz")
SMALL = ["--limit", "200", "--no-progress"]


def test_jobs_csv_to_dev_stdout_goes_to_stdout_in_order_and_stdout_stays(capfd):
    before = os.lstat("/dev/stdout")
    assert main(["replay", RICC_EXCERPT, *SMALL, "--jobs-csv", "/dev/stdout"]) == 0
    out = capfd.readouterr().out
    assert out.startswith("policy,strategy,alpha,threshold,job_id,nodes,")
    assert out.count("\nideal,,,,") == 200
    assert out.index("jobs 200  system nodes") > out.rindex("\nideal,,,,")  # table after rows
    after = os.lstat("/dev/stdout")
    assert stat.S_ISLNK(after.st_mode) and after.st_ino == before.st_ino


def test_a_link_to_a_device_is_written_through_and_stays_a_link(tmp_path):
    link = tmp_path / "jobs.csv"
    link.symlink_to("/dev/null")
    assert main(["replay", RICC_EXCERPT, *SMALL, "--jobs-csv", str(link),
                 "--csv", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert os.listdir(tmp_path) == ["jobs.csv"]


def test_a_fifo_is_written_in_place(tmp_path):
    fifo = tmp_path / "rows"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so the open does not block
    try:
        assert main(["replay", RICC_EXCERPT, *SMALL, "--csv", str(fifo)]) == 0
        received = os.read(reader, 1 << 16)
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    head = received.split(b"\n")[0].decode().split(",")
    assert head[0] == "trace" and "utilisation_pct" in head and received.count(b"\n") == 2


def test_a_regular_file_is_replaced_whole_keeping_its_mode_and_a_link_to_it(tmp_path):
    target = tmp_path / "old-results.csv"
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "jobs.csv"
    link.symlink_to(target.name)
    assert main(["replay", RICC_EXCERPT, *SMALL, "--jobs-csv", str(link)]) == 0
    assert link.is_symlink() and target.read_text().startswith("policy,")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["jobs.csv", "old-results.csv"]


def test_a_failed_replay_leaves_the_old_file_and_no_temporary_one(tmp_path, capsys):
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("old\n")
    broken = tmp_path / "failures.csv"
    broken.write_text("not,a,failure,csv\n")
    assert main(["replay", RICC_EXCERPT, *SMALL, "--failures", str(broken), "--policy",
                 "ideal", "none", "--jobs-csv", str(jobs)]) == 2
    assert "missing column" in capsys.readouterr().err
    assert jobs.read_text() == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["failures.csv", "jobs.csv"]


def test_both_cores_write_the_same_jobs_csv(tmp_path):
    outputs = {}
    for core in ("c", "python"):
        path = tmp_path / f"{core}.csv"
        assert main(["replay", RICC_EXCERPT, "--limit", "1500", "--failures", LANL_EXCERPT,
                     "--failure-mode", "replayed", "--policy", "none", "on-the-fly",
                     "--strategy", "fcfs", "shortcut", "--no-progress", "--core", core,
                     "--jobs-csv", str(path)]) == 0
        outputs[core] = path.read_bytes()
    assert outputs["c"] == outputs["python"] and outputs["c"].count(b"\n") == 1 + 1500 * 2 * 3


def test_core_option_refuses_another_name(capsys):
    with pytest.raises(SystemExit):
        main(["replay", RICC_EXCERPT, "--core", "native"])
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("name, content, message", [
    ("empty.swf", b"", "empty trace: the file has no line to read"),
    ("blank.swf", b"\n  \n\n", "empty trace: the file has no line to read"),
    ("empty.swf.gz", gzip.compress(b"", mtime=0), "empty trace: the file has no line to read once "
                                         "uncompressed"),
    ("noise.swf.gz", bytes(range(256)) * 4, "named .gz but not gzip-compressed (its first bytes "
                                            "are 00 01 02 03 04 05) nor plain text"),
], ids=["empty", "blank", "empty-gz", "noise-gz"])
@pytest.mark.parametrize("trace_format", ["auto", "swf"])
def test_an_empty_or_mislabelled_trace_is_one_clear_line(tmp_path, capsys, name, content,
                                                         message, trace_format):
    trace = tmp_path / name
    trace.write_bytes(content)
    assert main(["replay", str(trace), "--format", trace_format, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{trace}: {message}") and err.count("\n") == 1


def test_a_plain_file_named_gz_is_read_as_the_text_it_is(tmp_path, capsys):
    plain = tmp_path / "ricc.swf.gz"
    with gzip.open(RICC_EXCERPT, "rb") as stream:
        plain.write_bytes(stream.read())
    assert main(["replay", str(plain), *SMALL]) == 0
    assert "jobs 200  system nodes 8,192" in capsys.readouterr().out


@pytest.fixture
def nothing_kept(monkeypatch):
    """No trace or workload kept from an earlier test: each phase reports on the way."""
    from scratchkeeper.sim import run
    monkeypatch.setattr(run, "_last_read", {})
    monkeypatch.setattr(run, "_last_columns", {})


@pytest.mark.parametrize("core", ["native", "python"])
def test_progress_goes_on_while_the_workload_is_built(nothing_kept, core):
    from scratchkeeper.sim.scheduler import using_core
    phases: dict[str, list] = {}
    with using_core(core):
        run_replay(ReplayConfig(trace=RICC_EXCERPT),
                   progress=lambda phase, done, total: phases.setdefault(phase, []).append(
                       (done, total)))
    assert list(phases)[:3] == ["reading trace", "building workload", "scheduling"]
    built = phases["building workload"]
    assert built[0] == (0, 5000) and built[-1] == (5000, 5000) and len(built) >= 2


@pytest.mark.parametrize("core", ["native", "python"])
def test_building_progress_is_reported_more_than_once_on_a_long_trace(monkeypatch, nothing_kept,
                                                                      core):
    from scratchkeeper.sim import workload
    from scratchkeeper.sim.scheduler import using_core
    monkeypatch.setattr(workload, "PROGRESS_JOBS", 1000)
    calls: list = []
    with using_core(core):
        run_replay(ReplayConfig(trace=RICC_EXCERPT),
                   progress=lambda phase, done, total: calls.append(done)
                   if phase == "building workload" else None)
    assert calls == [0, 1000, 2000, 3000, 4000, 5000]



def test_a_device_is_checked_for_itself_not_for_its_folder(monkeypatch, tmp_path):
    from scratchkeeper.cli import replay
    from scratchkeeper.errors import InputError
    real_access = os.access
    # as a user who cannot write /dev (the tests run as root, who can)
    monkeypatch.setattr(replay.os, "access", lambda path, mode: path != "/dev"
                        and real_access(path, mode))
    replay.check_output_file("/dev/null")
    replay.check_output_file("/dev/stdout")
    with pytest.raises(InputError, match="permission denied"):
        replay.check_output_file("/dev/new-results.csv")
    link = tmp_path / "rows.csv"
    link.symlink_to("/dev/rows.csv")      # a link to a regular file's name in /dev
    with pytest.raises(InputError, match="permission denied"):
        replay.check_output_file(str(link))
