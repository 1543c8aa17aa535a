"""``layout calibrate``: alpha and beta from fio latencies, fio's JSON report, a real run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from scratchkeeper.advisor.calibrate import CalibrationError, calibrate, constants, latencies_of
from scratchkeeper.cli import main
from scratchkeeper.config import parse_config
from scratchkeeper.errors import InputError

K, M = 1 << 10, 1 << 20
REPORT = Path(__file__).parent.parent / "data" / "fio" / "calibrate-16m.json"


def test_constants_by_hand():
    # beta 10 ns per byte (100 MB/s) read, 5 ns written; start-up 0.1 ms sequential, 5 ms
    # random; 1 MiB requests start 1 ms, 4 MiB ones too
    latency = {"read-1m": 0.001 + 1 * M * 1e-8, "read-4m": 0.001 + 4 * M * 1e-8,
               "write-1m": 0.001 + 1 * M * 5e-9, "write-4m": 0.001 + 4 * M * 5e-9,
               "read-4k": 0.0001 + 4 * K * 1e-8, "randread-4k": 0.005 + 4 * K * 1e-8}
    alpha_sequential, alpha_random, beta_read, beta_write = constants(latency)
    assert beta_read == pytest.approx(1e-8) and beta_write == pytest.approx(5e-9)
    assert alpha_sequential == pytest.approx(0.0001) and alpha_random == pytest.approx(0.005)


def test_a_noisy_slope_falls_back_to_the_large_requests_rate():
    latency = {"read-1m": 0.010, "read-4m": 0.009, "write-1m": 0.002, "write-4m": 0.008,
               "read-4k": 0.0, "randread-4k": 0.0}
    _, _, beta_read, _ = constants(latency)
    assert beta_read == pytest.approx(0.009 / (4 * M))


def test_latencies_of_a_real_fio_report():
    # fio 3.33 on this VM's ext4 (O_DIRECT, psync, 16 MiB): the jobs' lat_ns means
    latency = latencies_of(json.loads(REPORT.read_text()))
    assert latency == pytest.approx({"write-1m": 562284.375e-9, "write-4m": 1223973.25e-9,
                                     "read-1m": 831562.375e-9, "read-4m": 3476599.0e-9,
                                     "read-4k": 40679.841797e-9,
                                     "randread-4k": 43708.861328e-9})


def test_a_report_missing_a_job_is_refused():
    report = json.loads(REPORT.read_text())
    report["jobs"] = report["jobs"][:-1]
    with pytest.raises(CalibrationError, match="no job randread-4k"):
        latencies_of(report)


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_a_real_run_in_a_directory_prints_keys_the_site_config_takes(tmp_path, capsys):
    site = tmp_path / "site.toml"
    site.write_text("[layout]\nconnect_seconds = 0.0005\n")
    measured = tmp_path / "store"
    measured.mkdir()
    output = tmp_path / "layout.toml"
    code = main(["-c", str(site), "layout", "calibrate", str(measured), "--size", "8M",
                 "--output", str(output)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert list(measured.iterdir()) == []  # the test file is removed
    section = out.split("\n", 1)[1]  # after the latencies comment
    assert output.read_text() == section
    layout = parse_config(section, "calibration").layout
    assert layout.connect_seconds == 0.0005  # not measured: kept from the site config
    assert layout.read_bandwidth > 1e6 and layout.write_bandwidth > 1e6
    assert layout.startup_random_seconds >= 0 and layout.startup_sequential_seconds >= 0
    assert layout.calibrated.endswith(f", O_DIRECT, psync, 8 MiB in {measured}: "
                                      f"scratchkeeper layout calibrate {measured} --size 8M")
    assert layout.calibrated[:4].isdigit() and "fio-" in layout.calibrated


def test_bad_input(tmp_path, capsys):
    with pytest.raises(InputError, match="no such directory"):
        calibrate(str(tmp_path / "absent"))
    with pytest.raises(InputError, match="at least 4 MiB"):
        calibrate(str(tmp_path), size=1 * M)
    with pytest.raises(CalibrationError, match="command not found"):
        calibrate(str(tmp_path), fio=str(tmp_path / "no-fio"))
    (tmp_path / "exists.toml").write_text("")
    site = tmp_path / "site.toml"
    site.write_text("")
    code = main(["-c", str(site), "layout", "calibrate", str(tmp_path), "--output",
                 str(tmp_path / "exists.toml")])
    err = capsys.readouterr().err
    assert code == 2 and err == (f"{tmp_path / 'exists.toml'}: exists already: the "
                                 "calibration is written to a new file\n")


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_with_drop_fio_runs_a_job_at_a_time_and_the_cache_is_dropped_before_each_read(tmp_path):
    import os

    seen = []

    def drop(path):
        seen.append((path, os.path.getsize(path)))

    result = calibrate(str(tmp_path), size=8 * M, drop=drop)
    path = str(tmp_path / f".scratchkeeper-calibrate.{os.getpid()}")
    # four read jobs (read-1m, read-4m, read-4k, randread-4k), each after the writes
    assert seen == [(path, 8 * M)] * 4
    assert set(result.latencies) == {"write-1m", "write-4m", "read-1m", "read-4m", "read-4k",
                                     "randread-4k"}
    assert "store cache dropped before each read job" in result.calibrated
    assert not os.path.exists(path)


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_a_failing_drop_stops_the_calibration_and_removes_the_test_file(tmp_path):
    from scratchkeeper.errors import StorageError

    def drop(path):
        raise StorageError("lfs ladvise failed: Operation not supported")

    with pytest.raises(CalibrationError, match="cannot drop the test file's cached pages: "
                                               "lfs ladvise failed"):
        calibrate(str(tmp_path), size=4 * M, drop=drop)
    assert list(tmp_path.iterdir()) == []


def test_job_argvs_are_fio_argv_one_job_each():
    from scratchkeeper.advisor.calibrate import JOBS, fio_argv, job_argvs

    whole = fio_argv("fio", "/x", 8 * M)
    runs = job_argvs("fio", "/x", 8 * M)
    assert len(runs) == len(JOBS)
    prefix = whole[:whole.index("--name=write-1m")]
    assert all(run[:len(prefix)] == prefix for run in runs)
    assert sum((run[len(prefix):] for run in runs), []) == whole[len(prefix):]
