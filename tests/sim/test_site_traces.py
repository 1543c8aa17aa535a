"""A site's own history: sacct --parsable2 output and PBS/Torque accounting logs, and telling a
trace's format from its content.

``data/sacct-parsable2.txt`` is real output of ``sacct -a -X -P -o JobID,Submit,Start,End,
Elapsed,Timelimit,NNodes,NCPUS,State -S 2020-01-01`` on the project's local cluster (Slurm
22.05, slurmdbd; 30 of its 4,642 jobs), ``data/sacct-parsable2-steps.txt`` the same without
``-X`` for four jobs. ``data/torque-accounting.log``: the Q, S and D records are the sample of
the Torque administrator's guide (Adaptive Computing, "Accounting Records"); the E records of
jobs 21048463, 21010040, 24940336, 21414868, 21430205 and 37803854 are real log lines quoted
in APEL's parser tests (apel/apel, test/test_pbs.py: RAL and WestGrid sites, Torque 2.5 to
5.1), that of job 45 in hnormalise's (hpcugent/hnormalise, Ghent University, 2017); the last E
record (job 410, deleted while queued, so no ``start``) is written to the documented format.
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest

from scratchkeeper.errors import TraceError
from scratchkeeper.sim import DATA_DIR
from scratchkeeper.sim.accounting import exec_host_slots, read_pbs_accounting, read_sacct, sniff_format
from scratchkeeper.sim.run import detect_format
from scratchkeeper.sim.traces import iter_records

HERE = Path(__file__).parent / "data"
SACCT = HERE / "sacct-parsable2.txt"
SACCT_STEPS = HERE / "sacct-parsable2-steps.txt"
TORQUE = HERE / "torque-accounting.log"
RICC_EXCERPT = os.path.join(DATA_DIR, "RICC-2010-2-first5000.swf.gz")
LANL_EXCERPT = os.path.join(DATA_DIR, "LA-UR-05-7318-system20.csv.xz")
HOUR = 3600.0


def test_sacct_reads_the_local_clusters_history():
    jobs, report = read_sacct(SACCT)
    # 30 jobs: 3 were cancelled while pending (Start None) and never ran.
    assert report.records == 27 and dict(report.skipped) == {"never started": 3}
    by_id = {job.job_id: job for job in jobs}
    big = by_id["481"]          # 8 nodes, 8 CPUs, ran 1:50 of a 2-minute limit
    assert (big.procs, big.run_time, big.requested_time, big.wait_time) == (8, 110, 120, 1)
    assert by_id["483"].procs == 32                          # NCPUS, not NNodes
    assert by_id["476_0"].requested_time == 365 * 24 * HOUR  # an array task, 365-00:00:00
    assert by_id["2"].requested_time == -1                   # UNLIMITED
    assert by_id["377"].requested_time == -1                 # Partition_Limit
    timeout = by_id["370"]                                   # TIMEOUT: ran past its minute
    assert (timeout.run_time, timeout.requested_time) == (15, 60)
    assert by_id["1"].submit_time == 1795842447.0            # 2026-11-28T05:07:27 as UTC
    assert [j.submit_time for j in jobs] == sorted(j.submit_time for j in jobs)


def test_sacct_without_x_skips_steps_and_counts_them():
    jobs, report = read_sacct(SACCT_STEPS)
    assert [j.job_id for j in jobs] == ["370", "476_0", "476_1", "481"]
    assert dict(report.skipped) == {"job step": 4, "never started": 1}
    # Lines that are no job are counted, not quoted as errors.
    assert list(iter_records(report)) == [f"{SACCT_STEPS}: skipped 5 of 9 line(s) (4 job step, "
                                          "1 never started)"]


def test_sacct_nnodes_only_parsable_and_corrupt_lines(tmp_path):
    # --parsable (not 2) ends each line with '|'; NNodes alone gives node counts.
    path = tmp_path / "nodes.txt"
    path.write_text("JobID|Submit|Start|End|NNodes|\n"
                    "7|2024-01-01T00:00:00|2024-01-01T00:10:00|2024-01-01T01:10:00|4|\n"
                    "8|2024-01-01T00:00:00|Unknown|Unknown|2|\n"
                    "9|2024-01-01T00:05:00|2024-01-01T00:06:00|Unknown|2|\n"
                    "10|2024-13-01T00:00:00|2024-01-01T00:10:00|2024-01-01T01:10:00|4|\n"
                    "11|2024-01-01T02:00:00|2024-01-01T00:10:00|2024-01-01T01:10:00|4|\n"
                    "12|2024-01-01T00:00:00|2024-01-01T00:10:00\n")
    jobs, report = read_sacct(path, strict=False)
    assert [(j.job_id, j.procs, j.run_time, j.wait_time) for j in jobs] == [("7", 4, HOUR, 600)]
    assert dict(report.skipped) == {"never started": 1, "not ended": 1, "bad value": 1,
                                    "times out of order": 1, "field count": 1}
    assert report.first_errors[0] == (f"{path}:5: bad sacct line: Submit '2024-13-01T00:00:00' "
                                      "is not a date like 2024-01-31T23:59:00")
    with pytest.raises(TraceError, match=r"nodes.txt:5: bad sacct line"):
        read_sacct(path, strict=True)


def test_sacct_header_without_the_needed_fields_names_them(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("JobID|Start|End\n1|2024-01-01T00:00:00|2024-01-01T00:01:00\n")
    with pytest.raises(TraceError, match=r"short.txt:1: sacct header lacks field\(s\) Submit, "
                                         r"NCPUS or NNodes"):
        read_sacct(path)


def test_torque_exit_records_are_the_jobs():
    jobs, report = read_pbs_accounting(TORQUE)
    assert dict(report.skipped) == {"not an exit record": 5, "never started": 1}
    by_id = {job.job_id: job for job in jobs}
    assert len(by_id) == 7
    ral = by_id["21048463.lcgbatch01.gridpp.rl.ac.uk"]
    assert (ral.submit_time, ral.start_time, ral.end_time) == (1317509574, 1317509945,
                                                              1317534104)
    assert (ral.procs, ral.run_time, ral.requested_time) == (1, 24159, 96 * HOUR)
    # exec_host lists one slot per processor; total_execution_slots wins where Torque wrote it
    assert by_id["21010040.lcgbatch01.gridpp.rl.ac.uk"].procs == 8
    assert by_id["21414868.b0"].procs == 4                    # b372/4+b372/5+b372/6+b372/7
    assert by_id["21430205.b0"].procs == 4                    # grep's 20150327: prefix read
    assert by_id["45.master23.banette.gent.vsc"].procs == 4   # two nodes, /0-1 each
    assert by_id["24940336.b0"].requested_time == 48 * HOUR
    assert [j.submit_time for j in jobs] == sorted(j.submit_time for j in jobs)


def test_torque_corrupt_records_are_counted_or_fatal(tmp_path):
    good = TORQUE.read_text().splitlines()[5]
    lines = [good,
             good.replace("end=1317534104", "end=1317500000"),      # ends before it starts
             good.replace("qtime=1317509574", "qtime=soon"),
             "06/06/2005 14:04:25 E 408 no semicolons",
             good.replace("Resource_List.walltime=96:00:00", "Resource_List.walltime=4:xx:00")]
    path = tmp_path / "acct.log"
    path.write_text("\n".join(lines) + "\n")
    jobs, report = read_pbs_accounting(path, strict=False)
    assert len(jobs) == 1
    assert dict(report.skipped) == {"times out of order": 1, "bad value": 2, "not a record": 1}
    assert report.first_errors[1] == (f"{path}:3: bad exit record of "
                                      "21048463.lcgbatch01.gridpp.rl.ac.uk: qtime 'soon' is not "
                                      "Unix seconds")
    with pytest.raises(TraceError, match=r"acct.log:2: job 21048463\S+: times out of order"):
        read_pbs_accounting(path)


def test_exec_host_slots():
    assert exec_host_slots("n1/0+n1/1+n2/0") == 3
    assert exec_host_slots("b391/0-3") == 4
    assert exec_host_slots("b391/0-1,5,11") == 4
    assert exec_host_slots("host") == 1
    with pytest.raises(ValueError, match="exec_host"):
        exec_host_slots("b1/x-y")


def test_formats_are_told_by_content_not_by_name(tmp_path):
    # An SWF from the Parallel Workloads Archive without its extension, gzipped or not.
    plain = tmp_path / "RICC-2010-2"
    with gzip.open(RICC_EXCERPT, "rt") as stream:
        plain.write_text("".join(line for _, line in zip(range(200), stream)))
    packed = tmp_path / "RICC-2010-2-gz"
    shutil.copy(RICC_EXCERPT, packed)
    headless = tmp_path / "jobs.log"          # SWF records without the ';' header
    headless.write_text("".join(line for line in plain.read_text().splitlines(True)
                                if not line.startswith(";")))
    sacct = tmp_path / "history"
    shutil.copy(SACCT, sacct)
    torque = tmp_path / "20150327"
    shutil.copy(TORQUE, torque)
    cases = {plain: "swf", packed: "swf", headless: "swf", sacct: "sacct", torque: "pbs",
             HERE / "lanl-system20-jobs.txt": "lanl-jobs", HERE / "site-jobs.csv": "site-csv"}
    for path, expected in cases.items():
        assert sniff_format(path)[0] == expected, path
        assert detect_format(str(path))[0] == expected, path
    assert "detected from its content" in detect_format(str(plain))[1]


def test_unknown_content_falls_back_to_the_name_or_asks_for_format(tmp_path):
    named = tmp_path / "broken.swf"
    named.write_text("1 0 0 10\n")
    kind, how = detect_format(str(named))
    assert kind == "swf" and how.startswith("from its name (its first 64 lines match no format")
    unnamed = tmp_path / "broken"
    unnamed.write_text("1 0 0 10\n")
    with pytest.raises(TraceError, match=r"broken: cannot tell the trace's format: .*give "
                                         r"--format \(swf, sacct, pbs, lanl-jobs, site-csv\)"):
        detect_format(str(unnamed))
    with pytest.raises(TraceError, match=r"not a job trace: give it with --failures"):
        detect_format(LANL_EXCERPT)
