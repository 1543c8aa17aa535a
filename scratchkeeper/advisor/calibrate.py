"""Measure the storage constants of the layout model (alpha, beta) with fio in a directory.

The layout paper (§6.2) measured alpha and beta on one storage node with requests of several
sizes, random and sequential. Here one fio run (``O_DIRECT``, ``psync``, one job at a time, so
each request waits for the storage) in the directory gives the mean latency of:

* 4 KiB sequential and random reads: ``alpha = latency - 4 KiB * beta_read`` (start-up of one
  operation, sequential and random);
* 1 MiB and 4 MiB sequential reads and writes: ``beta = (latency(4M) - latency(1M)) / 3 MiB``
  (the time of the bytes alone; the start-up cancels out).

In the scratch root (``drop``: the store's ``drop_cache``) fio runs one job at a time and the
store's cache of the test file is dropped before each read job: fio's ``--invalidate`` reaches
only the client's cache, and on the scratch mount the OSTs' objects would stay in the page cache
after the write jobs (the reads would then measure memory).

e and v are network constants: a directory on this machine has no network between the client
and the store, so they are not measured and keep the values they had.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import CommandError, InputError, ScratchkeeperError

K, M = 1 << 10, 1 << 20

#: (job name, fio rw, block size, bytes moved at most); run in this order, one at a time.
JOBS = (
    ("write-1m", "write", 1 * M, None),
    ("write-4m", "write", 4 * M, None),
    ("read-1m", "read", 1 * M, None),
    ("read-4m", "read", 4 * M, None),
    ("read-4k", "read", 4 * K, 8 * M),
    ("randread-4k", "randread", 4 * K, 8 * M),
)


class CalibrationError(ScratchkeeperError):
    """fio could not measure the directory (or measured nothing usable)."""


@dataclass(frozen=True)
class Calibration:
    """What one fio run measured; seconds and bytes per second."""

    alpha_sequential: float
    alpha_random: float
    read_bandwidth: float
    write_bandwidth: float
    latencies: dict            # job name -> mean seconds per request
    calibrated: str            # the date, the tool and the command, for [layout] calibrated

    def toml(self, *, connect_seconds: float, network_bandwidth: float) -> str:
        """The ``[layout]`` section, e and v kept as given (not measured here)."""
        return "\n".join([
            "[layout]",
            f"connect_seconds = {connect_seconds!r}          # e: not measured (no network "
            "here), kept",
            f"network_bandwidth = {network_bandwidth!r}      # 1/v: not measured, kept",
            f"startup_sequential_seconds = {self.alpha_sequential:.3g}",
            f"startup_random_seconds = {self.alpha_random:.3g}",
            f"read_bandwidth = {self.read_bandwidth:.4g}",
            f"write_bandwidth = {self.write_bandwidth:.4g}",
            f"calibrated = {json.dumps(self.calibrated)}",
            ""])


def fio_argv(fio: str, path: str, size: int, *, direct: bool = True) -> list[str]:
    """One fio run of :data:`JOBS` on ``path`` (``size`` bytes), JSON on standard output."""
    argv = [fio, "--output-format=json", f"--filename={path}", f"--size={size}",
            "--ioengine=psync", f"--direct={int(direct)}", "--numjobs=1", "--thread",
            "--randrepeat=0", "--invalidate=1"]
    for name, rw, block, limit in JOBS:
        argv += [f"--name={name}", f"--rw={rw}", f"--bs={block}", "--stonewall"]
        if limit is not None:
            argv.append(f"--io_size={min(limit, size)}")
    return argv


def latencies_of(report: dict) -> dict[str, float]:
    """Mean seconds per request of each job of a fio JSON report."""
    out = {}
    for job in report.get("jobs", []):
        side = job["write"] if job["jobname"].startswith("write") else job["read"]
        if side.get("total_ios", 0) <= 0:
            raise CalibrationError(f"fio job {job['jobname']} did no I/O")
        out[job["jobname"]] = side["lat_ns"]["mean"] / 1e9
    missing = [name for name, *_ in JOBS if name not in out]
    if missing:
        raise CalibrationError(f"fio reported no job {missing[0]}")
    return out


def constants(latency: dict[str, float]) -> tuple[float, float, float, float]:
    """``(alpha_sequential, alpha_random, beta_read, beta_write)`` from mean latencies."""
    def beta(small: str, large: str) -> float:
        slope = (latency[large] - latency[small]) / (3 * M)
        if slope <= 0:  # noise larger than the difference: the large request's rate instead
            return latency[large] / (4 * M)
        return slope

    beta_read, beta_write = beta("read-1m", "read-4m"), beta("write-1m", "write-4m")
    alpha_sequential = max(0.0, latency["read-4k"] - 4 * K * beta_read)
    alpha_random = max(0.0, latency["randread-4k"] - 4 * K * beta_read)
    return alpha_sequential, alpha_random, beta_read, beta_write


def job_argvs(fio: str, path: str, size: int, *, direct: bool = True) -> list[list[str]]:
    """:func:`fio_argv` as one fio run per job of :data:`JOBS` (the same options and jobs)."""
    argv = fio_argv(fio, path, size, direct=direct)
    starts = [i for i, word in enumerate(argv) if word.startswith("--name=")]
    prefix = argv[:starts[0]]
    return [prefix + argv[a:b] for a, b in zip(starts, starts[1:] + [len(argv)])]


def _run_fio(argv: list[str], timeout: float, direct: bool) -> dict:
    """One fio run's JSON report, or a CalibrationError saying why there is none."""
    from ..runner import run

    try:
        done = run(argv, timeout=timeout, check=False)
    except CommandError as err:
        raise CalibrationError(str(err)) from err
    if done.returncode != 0:
        detail = " ".join((done.stderr or done.stdout).split())[:300]
        hint = (" (the directory may not take O_DIRECT: --buffered measures through the page "
                "cache)" if direct and "Invalid argument" in detail else "")
        raise CalibrationError(f"fio failed (exit {done.returncode}): {detail}{hint}")
    try:
        return json.loads(done.stdout[done.stdout.index("{"):])
    except ValueError as err:
        raise CalibrationError(f"fio printed no JSON report: {err}") from err


def calibrate(directory: str, *, fio: str = "fio", size: int = 64 * M, direct: bool = True,
              command: str = "", timeout: float = 600.0,
              drop: Callable[[str], None] | None = None) -> Calibration:
    """Run fio in ``directory`` and derive alpha and beta; the test file is removed after.

    ``drop(path)``, when given, empties the store's cache of the test file: fio then runs one
    job at a time and ``drop`` is called before each read job. Without it fio's own
    ``--invalidate`` is all, which reaches the client's cache only (on the scratch mount the
    OSTs' objects stay cached and the reads measure memory)."""
    if not os.path.isdir(directory):
        raise InputError("not a directory" if os.path.exists(directory) else "no such directory",
                         path=directory)
    if size < 4 * M:
        raise InputError(f"size {size}: at least 4 MiB (one 4 MiB request)")
    path = os.path.join(directory, f".scratchkeeper-calibrate.{os.getpid()}")
    argv = fio_argv(fio, path, size, direct=direct)
    try:
        if drop is None:
            report = _run_fio(argv, timeout, direct)
        else:
            report = {"jobs": []}
            for job in job_argvs(fio, path, size, direct=direct):
                if not any(word.startswith("--rw=write") for word in job):
                    try:
                        drop(path)
                    except ScratchkeeperError as err:
                        raise CalibrationError(f"cannot drop the test file's cached pages: "
                                               f"{err}") from err
                one = _run_fio(job, timeout, direct)
                report["fio version"] = one.get("fio version", "fio")
                report["jobs"] += one.get("jobs", [])
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    latency = latencies_of(report)
    alpha_sequential, alpha_random, beta_read, beta_write = constants(latency)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    version = report.get("fio version", "fio")
    how = "O_DIRECT" if direct else "buffered"
    dropped = ", store cache dropped before each read job" if drop is not None else ""
    calibrated = (f"{stamp}: {version}, {how}, psync, {size >> 20} MiB in {directory}{dropped}"
                  + (f": {command}" if command else f": {shlex.join(argv)}"))
    return Calibration(alpha_sequential, alpha_random, 1 / beta_read, 1 / beta_write, latency,
                       calibrated)
