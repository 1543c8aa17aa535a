"""replicad on the real local Slurm: window and shortcut, close and job-end removal, requeue,
scheduler down, replica-queue data jobs.

Jobs are held back with ``--hold`` and ``--begin=now+3600`` so that they wait in the real queue
without taking nodes from other developers; ``scontrol update StartTime=now`` dispatches one.
The site is 8 nodes: alpha = 0.5 means the window covers 4 requested nodes, T = 0.125 makes
1-node jobs shortcut jobs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from scratchkeeper.storage import open_backend

from .helpers import Replicad, config_of, stage_input, wait_until, write_site


def replicas_report(site: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(site), "replicas",
                          "--json"], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def replica_states(site: Path) -> dict[str, str]:
    return {r["path"]: r["state"] for r in replicas_report(site)["replicas"]}


def cycles_after(site: Path, moment: float, count: int = 2, timeout: float = 30.0) -> dict:
    """Wait until the daemon has finished ``count`` cycles begun after ``moment``."""
    seen = []

    def done():
        report = replicas_report(site)
        last = report["daemon"]["last_cycle"]
        if last and last > moment and (not seen or seen[-1] != last):
            seen.append(last)
        return report if len(seen) >= count else None
    return wait_until(done, timeout, 0.2, f"{count} replicad cycles")


def mirrors(config, path: str) -> list[int]:
    return open_backend(config).layout(path).mirror_ids


def test_window_shortcut_close_requeue_and_job_end(tmp_path, local_cluster, slurm_jobs):
    site = write_site(tmp_path / "site.toml", tmp_path, threshold=0.125)
    config = config_of(site)
    reader = f"{sys.executable} -m scratchkeeper -c {site}"
    big_a = slurm_jobs.submit(4)
    big_b = slurm_jobs.submit(4)
    # C reads its input through the store the moment it starts, then computes for a while
    big_c = slurm_jobs.submit(4, command=f"{reader} store cat {config.storage.scratch_root}/c.dat"
                                         " > /dev/null; sleep 600")
    small = slurm_jobs.submit(1)
    paths = {}
    for job_id, name in ((big_a, "a"), (big_b, "b"), (big_c, "c"), (small, "d")):
        paths[job_id], _ = stage_input(config, job_id, f"{name}.dat", 3_000_000)
    daemon = Replicad(site, tmp_path / "replicad.log")
    daemon.start()
    try:
        # all held: nothing is eligible, nothing replicated (a held shortcut job neither)
        cycles_after(site, time.time())
        assert replica_states(site) == {}

        # C released: alone in the queue it fills the window (4 >= max(R, 0.5 * 8))
        slurm_jobs.scontrol("release", big_c)
        wait_until(lambda: replica_states(site).get(paths[big_c]) == "ready", 30,
                   what="replica of the window job")
        # D released (Slurm's priority/basic ranks a released job last): outside the window,
        # but a 1-node job is a shortcut job
        slurm_jobs.scontrol("release", small)
        wait_until(lambda: replica_states(site).get(paths[small]) == "ready", 30,
                   what="replica of the shortcut job")
        # B, then A released behind them: outside the window, no replica
        slurm_jobs.scontrol("release", big_b)
        slurm_jobs.scontrol("release", big_a)
        report = cycles_after(site, time.time())
        window = report["windows"][0]
        assert (window["length"], window["required_nodes"]) == (1, 4)
        why = {r["path"]: r["jobs"][0]["reason"] for r in report["replicas"]}
        assert why == {paths[big_c]: "window", paths[small]: "shortcut"}
        assert mirrors(config, paths[big_a]) == mirrors(config, paths[big_b]) == [0]
        primary = open_backend(config).layout(paths[big_c]).osts(1)
        replica = open_backend(config).layout(paths[big_c]).osts(2)
        assert primary and replica and not primary & replica    # distinct OSTs

        # C dispatched: R = 4 and the queue is D, B, A: 1 + 4 >= 4 moves B into the window
        slurm_jobs.scontrol("update", f"jobid={big_c}", "StartTime=now")
        wait_until(lambda: replica_states(site).get(paths[big_b]) == "ready", 60,
                   what="replica of the job that moved into the window")
        assert slurm_jobs.state(big_c) == "RUNNING"
        assert mirrors(config, paths[big_a]) == [0]
        # C read its input and closed it: its replica goes while C keeps running
        wait_until(lambda: paths[big_c] not in replica_states(site), 30,
                   what="replica removed after the running job closed its input")
        assert slurm_jobs.state(big_c) == "RUNNING"
        assert mirrors(config, paths[big_c]) == [1]             # the primary stays
        assert open_backend(config).layout(paths[big_c]).osts(1) == primary
        assert replicas_report(site)["at_risk"] == []

        # B ends (cancelled): accounting confirms it and its replica goes; A never had one
        slurm_jobs.cancel(big_b, big_a)
        wait_until(lambda: paths[big_b] not in replica_states(site), 60,
                   what="replica removed at job end")
        assert mirrors(config, paths[big_b]) == [1]

        # C requeued: pending again (queue D, C), it gets its replica back
        slurm_jobs.scontrol("requeue", big_c)
        wait_until(lambda: replica_states(site).get(paths[big_c]) == "ready", 60,
                   what="replica of the requeued job")
        assert set(replica_states(site)) == {paths[big_c], paths[small]}
        report = replicas_report(site)
        assert report["space"]["used_bytes"] == 2 * 3_000_000
        assert report["daemon"]["consecutive_failures"] == 0
    finally:
        daemon.stop()
    log = (tmp_path / "replicad.log").read_text()
    assert "Traceback" not in log, log[-3000:]


def test_job_end_hook_wakes_the_daemon(tmp_path, local_cluster, slurm_jobs):
    site = write_site(tmp_path / "site.toml", tmp_path, interval=30.0)
    config = config_of(site)
    job = slurm_jobs.submit(4, hold=False)
    path, _ = stage_input(config, job, "hook.dat", 500_000)
    daemon = Replicad(site, tmp_path / "replicad.log")
    daemon.start()
    try:
        wait_until(lambda: replica_states(site).get(path) == "ready", 30, what="replica")
        slurm_jobs.cancel(job)
        wait_until(lambda: slurm_jobs.state(job) in ("GONE", "CANCELLED"), 30, what="cancel")
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(site), "replicas",
                        "job-ended", job], check=True, timeout=30)
        wait_until(lambda: path not in replica_states(site), 20, what="removal after the hook")
        # far sooner than the 30 s interval: the event woke the loop
        assert time.monotonic() - started < 15
    finally:
        daemon.stop()


def broken_slurm_conf(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A copy of the Slurm configuration (good) and one whose controller and dbd are unreachable."""
    good = tmp_path / "slurm-good"
    bad = tmp_path / "slurm-bad"
    shutil.copytree("/etc/slurm", good, symlinks=True)
    shutil.copytree("/etc/slurm", bad, symlinks=True)
    text = (bad / "slurm.conf").read_text()
    text = re.sub(r"(?im)^SlurmctldPort=.*$", "SlurmctldPort=1", text)
    if not re.search(r"(?im)^SlurmctldPort=", text):
        text += "\nSlurmctldPort=1\n"
    text = re.sub(r"(?im)^AccountingStoragePort=.*$", "AccountingStoragePort=1", text)
    if not re.search(r"(?im)^AccountingStoragePort=", text):
        text += "AccountingStoragePort=1\n"
    (bad / "slurm.conf").write_text(text)
    live = tmp_path / "slurm-live"
    live.symlink_to(good)
    return live, good, bad


def point(link: Path, target: Path) -> None:
    temporary = link.with_name(link.name + ".new")
    if temporary.is_symlink():
        temporary.unlink()
    temporary.symlink_to(target)
    os.replace(temporary, link)


def test_scheduler_down_no_removal_storm_backoff_and_recovery(tmp_path, local_cluster,
                                                              slurm_jobs):
    site = write_site(tmp_path / "site.toml", tmp_path, alpha=8.0)
    config = config_of(site)
    jobs = [slurm_jobs.submit(1, hold=False) for _ in range(4)]
    paths = [stage_input(config, job, f"down{i}.dat", 400_000)[0] for i, job in enumerate(jobs)]
    live, good, bad = broken_slurm_conf(tmp_path)
    daemon = Replicad(site, tmp_path / "replicad.log",
                      env={"SLURM_CONF": str(live / "slurm.conf")})
    daemon.start()
    try:
        wait_until(lambda: all(replica_states(site).get(p) == "ready" for p in paths), 40,
                   what="replicas of the 4 queued jobs")
        point(live, bad)
        went_down = time.time()
        # the job of the first replica ends while the daemon cannot see the scheduler
        slurm_jobs.cancel(jobs[0])
        report = wait_until(lambda: (lambda r: r if r["daemon"]["consecutive_failures"] >= 3
                                     else None)(replicas_report(site)), 60,
                            what="3 consecutive scheduler failures")
        assert report["daemon"]["last_error"]
        # no action on stale data: every replica is still there, none removed
        assert all(replica_states(site).get(p) == "ready" for p in paths)
        assert all(mirrors(config, p) == [1, 2] for p in paths)
        down_for = time.time() - went_down
        log = (tmp_path / "replicad.log").read_text()
        failures = re.findall(r"^(\S+ \S+) .*scheduler unavailable \((\d+) consecutive", log, re.M)
        assert len(failures) >= 3
        # backoff: the gaps between tries grow (interval 0.5 s doubling, jitter +-50 %)
        stamps = [time.mktime(time.strptime(s.split(",")[0], "%Y-%m-%d %H:%M:%S"))
                  + int(s.split(",")[1]) / 1000 for s, _ in failures]
        gaps = [b - a for a, b in zip(stamps, stamps[1:])]
        assert max(gaps) > 1.0, gaps
        assert len(failures) < down_for / 0.25 + 2      # not a tight loop
        point(live, good)
        # back: the vanished job is confirmed through sacct and only its replica goes
        wait_until(lambda: paths[0] not in replica_states(site), 60,
                   what="removal of the ended job's replica after recovery")
        assert all(replica_states(site).get(p) == "ready" for p in paths[1:])
        assert replicas_report(site)["daemon"]["consecutive_failures"] == 0
    finally:
        point(live, good)
        daemon.stop()


def test_replica_queue_data_jobs(tmp_path, local_cluster, slurm_jobs):
    site = write_site(tmp_path / "site.toml", tmp_path, replica_queue="replica")
    config = config_of(site)
    job = slurm_jobs.submit(4, hold=False)
    path, _ = stage_input(config, job, "viaqueue.dat", 2_000_000)
    daemon = Replicad(site, tmp_path / "replicad.log")
    daemon.start()
    try:
        report = wait_until(lambda: (lambda r: r if r["replicas"] and r["replicas"][0]["state"]
                                     == "ready" else None)(replicas_report(site)), 90,
                            what="replica made by a data job in the replica partition")
        entry = report["replicas"][0]
        assert entry["data_job_id"]
        assert local_cluster.wait_for_job(entry["data_job_id"]) == "COMPLETED"
        out = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "Partition", "-j",
                              entry["data_job_id"]], capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "replica", out.stdout
        assert mirrors(config, path) == [1, 2]
        slurm_jobs.cancel(job)
        wait_until(lambda: path not in replica_states(site), 60, what="removal at job end")
        assert mirrors(config, path) == [1]
    finally:
        daemon.stop()


def test_pbs_path_through_the_torque_wrappers(tmp_path, local_cluster, slurm_jobs):
    # (Slurm's qstat wrapper shows a held job as Q, so held jobs are not tried here)
    site = write_site(tmp_path / "site.toml", tmp_path, scheduler_kind="pbs")
    config = config_of(site)
    first = slurm_jobs.submit(4, hold=False)
    second = slurm_jobs.submit(4, hold=False)
    path, _ = stage_input(config, first, "pbs.dat", 300_000)
    other, _ = stage_input(config, second, "pbs-second.dat", 300_000)
    daemon = Replicad(site, tmp_path / "replicad.log")
    result = daemon.once()
    assert result.returncode == 0, result.stderr[-2000:]
    # qstat -f order and sizes: the first 4-node job fills the window, the second waits
    assert replica_states(site) == {path: "ready"}
    report = replicas_report(site)
    assert report["daemon"]["system_nodes"] == 8
    slurm_jobs.cancel(first)
    wait_until(lambda: daemon.once().returncode == 0 and path not in replica_states(site), 60,
               what="removal once the PBS side confirms the end")
    assert mirrors(config, path) == [1]
    assert replica_states(site) == {other: "ready"}       # now the head of the queue
