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


# ---------------------------------------------------------------------------------------------
# Issue 41: the machine's size, nodes=N:ppn=M, heterogeneous jobs, the sacct command

def _history(tmp_path, name="history.txt") -> Path:
    trace = tmp_path / name
    shutil.copy(SACCT, trace)
    return trace


def test_a_site_history_without_the_machines_size_asks_for_it(tmp_path, capsys):
    from scratchkeeper.cli import main
    for trace, hint in ((_history(tmp_path), "`sinfo -N -h -o '%N %c'` beside it as "
                                             "history.txt.sinfo"),
                        (tmp_path / "acct.log", "`pbsnodes -a` beside it as acct.log.pbsnodes")):
        if not trace.exists():
            shutil.copy(TORQUE, trace)
        assert main(["replay", str(trace), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"{trace}: a ") and hint in err
        assert "give --system-nodes N" in err


def test_the_machine_is_read_from_sinfo_saved_beside_the_history(tmp_path, capsys):
    from scratchkeeper.cli import main
    trace = _history(tmp_path)
    # sinfo -N lists a node once per partition: each node counts once
    (tmp_path / "history.txt.sinfo").write_text(
        "".join(f"c{n} 8\n" for n in range(1, 9)) + "c1 8\nbig1 64\n")
    assert main(["replay", str(trace), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "jobs 27  system nodes 128" in captured.out
    assert (f"{trace}: a machine of 9 node(s), 128 processor(s), as {trace}.sinfo says"
            in captured.err)
    assert main(["replay", str(trace), "--procs-per-node", "8", "--no-progress"]) == 0
    assert "system nodes 16" in capsys.readouterr().out        # 128 processors / 8
    assert main(["replay", str(trace), "--system-nodes", "40", "--no-progress"]) == 0
    assert "system nodes 40" in capsys.readouterr().out        # the option wins


def test_a_machine_file_that_is_not_one_is_named_with_its_line(tmp_path, capsys):
    from scratchkeeper.cli import main
    trace = _history(tmp_path)
    (tmp_path / "history.txt.sinfo").write_text("c1 8\nPARTITION AVAIL TIMELIMIT\n")
    assert main(["replay", str(trace), "--no-progress"]) == 2
    assert capsys.readouterr().err == (f"{trace}.sinfo:2: not a line of sinfo -N -h -o '%N %c' "
                                       "(a node name and its CPUs)\n")


def test_pbsnodes_gives_a_torque_or_pbs_pro_machine(tmp_path):
    from scratchkeeper.sim.accounting import read_machine_size
    trace = tmp_path / "acct.log"
    shutil.copy(TORQUE, trace)
    (tmp_path / "acct.log.pbsnodes").write_text(
        "node01\n     state = free\n     np = 16\n     ntype = cluster\n\n"
        "node02\n     state = job-exclusive\n     np = 16\n\n"
        "pbspro1\n     Mom = pbspro1\n     resources_available.ncpus = 32\n")
    machine = read_machine_size(str(trace), "pbs")
    assert machine is not None and (machine.nodes, machine.processors) == (3, 64)
    (tmp_path / "acct.log.pbsnodes").write_text("node01\n     state = free\n")
    with pytest.raises(TraceError, match="node node01 has no np"):
        read_machine_size(str(trace), "pbs")


def test_utilisation_past_100_percent_is_warned(tmp_path, capsys):
    from scratchkeeper.cli import main
    trace = tmp_path / "busy.txt"
    trace.write_text("JobID|Submit|Start|End|NCPUS\n" + "".join(
        f"{n}|2024-01-01T00:00:00|2024-01-01T00:00:00|2024-01-01T01:00:00|4\n"
        for n in range(1, 5)))
    assert main(["replay", str(trace), "--schedule", "recorded", "--system-nodes", "8",
                 "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert f"{trace}: warning: utilisation 200.00 % passes 100 %" in captured.err
    assert main(["replay", str(trace), "--schedule", "recorded", "--system-nodes", "16",
                 "--no-progress"]) == 0
    assert "passes 100 %" not in capsys.readouterr().err


def test_torque_nodes_with_ppn_are_nodes_times_ppn(tmp_path):
    from scratchkeeper.sim.accounting import nodes_spec_processors
    assert nodes_spec_processors("2:ppn=8") == 16
    assert nodes_spec_processors("n7:ppn=4+2:ppn=2") == 8
    assert nodes_spec_processors("3") == 3 and nodes_spec_processors("2:gpus=1") == 2
    for bad in ("2:ppn=0", ":ppn=4", "2:ppn=x"):
        with pytest.raises(ValueError, match="Resource_List.nodes"):
            nodes_spec_processors(bad)
    # an exit record with a request and no exec_host (as when the MOM did not report it)
    record = TORQUE.read_text().splitlines()[5]
    no_host = (record.replace(" exec_host=lcg1277.gridpp.rl.ac.uk/5", "")
               .replace("Resource_List.opsys", "Resource_List.nodes=2:ppn=8 Resource_List.opsys"))
    ncpus = record.replace(" exec_host=lcg1277.gridpp.rl.ac.uk/5", " Resource_List.ncpus=6")
    path = tmp_path / "acct.log"
    path.write_text(no_host + "\n" + ncpus + "\n")
    jobs, _ = read_pbs_accounting(path)
    assert sorted(j.procs for j in jobs) == [6, 16]


def test_heterogeneous_components_are_one_job(tmp_path):
    path = tmp_path / "het.txt"
    path.write_text(
        "JobID|Submit|Start|End|Elapsed|Timelimit|NCPUS|State\n"
        "70+0|2024-01-01T00:00:00|2024-01-01T00:10:00|2024-01-01T01:00:00|00:50:00|02:00:00|8|"
        "COMPLETED\n"
        "70+1|2024-01-01T00:00:00|2024-01-01T00:10:00|2024-01-01T01:10:00|01:00:00|03:00:00|4|"
        "COMPLETED\n"
        "71|2024-01-01T00:05:00|2024-01-01T00:06:00|2024-01-01T00:07:00|00:01:00|01:00:00|1|"
        "COMPLETED\n"
        "72+0|2024-01-01T00:20:00|2024-01-01T00:30:00|2024-01-01T00:40:00|00:10:00|UNLIMITED|2|"
        "COMPLETED\n"
        "72+1|2024-01-01T00:20:00|2024-01-01T00:30:00|2024-01-01T00:40:00|00:10:00|01:00:00|2|"
        "COMPLETED\n")
    jobs, report = read_sacct(path)
    assert [(j.job_id, j.procs, j.run_time, j.requested_time, j.wait_time) for j in jobs] == [
        ("70", 12, 3600.0, 3 * HOUR, 600.0), ("71", 1, 60.0, HOUR, 60.0),
        ("72", 4, 600.0, -1.0, 600.0)]
    assert report.records == 3
    assert list(iter_records(report)) == [
        f"{path}: 4 heterogeneous job component(s) (JOBID+N) read as 2 job(s)"]


def test_the_suggested_sacct_command_is_complete(tmp_path):
    from scratchkeeper.sim.accounting import SACCT_COMMAND
    assert SACCT_COMMAND.startswith("TZ=UTC sacct -a -X -P ")
    path = tmp_path / "short.txt"
    path.write_text("JobID|Start|End\n1|2024-01-01T00:00:00|2024-01-01T00:01:00\n")
    with pytest.raises(TraceError) as caught:
        read_sacct(path)
    assert f"(run {SACCT_COMMAND})" in str(caught.value)
    docs = (Path(__file__).parents[2] / "docs" / "replay.rst").read_text()
    assert "TZ=UTC sacct -a -X -P -S 2024-01-01" in docs
