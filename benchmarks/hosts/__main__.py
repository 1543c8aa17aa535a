"""The cross-host request path (issue 42, docs/topology.rst): what a request to the head costs
from another host (TCP + a MUNGE credential each way) against the same request on the head
(recoveryd's Unix socket), in one run on the local cluster's hosts.

    .venv/bin/python -m benchmarks.hosts [--repeats N]

Three requests, each as the plain user ``skplain`` with the runtime every user runs:
``chains`` (what ``status`` asks) from the login host, a recovery ``status`` of the user's file
from a compute host, and a data job's ``stage commit`` from the data-transfer host. Each is timed
in the client process (the round trip, no interpreter start) and as the whole command
(``scratchkeeper status``, what a user waits for). Head and other host take turns (ROUNDS
rounds each way), so that the machine's load falls on both alike. Writes docs/benchmarks/hosts/report.md and
results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import harness

USER = "skplain"
#: the head and the other host take turns this many times per request kind
ROUNDS = 4
#: times one kind of request in the client, as the user: argv: VIA OP ARG N
DRIVER = r'''
import json, sys, time
from scratchkeeper.config import load_config
from scratchkeeper.recovery.client import RecoveryClient
config_path, via, op, arg, repeats = sys.argv[1:6]
config = load_config(config_path)
client = (RecoveryClient.for_site(config) if via == "head"
          else RecoveryClient(config.recovery.socket))
args = arg.split(",")
seconds = []
for i in range(int(repeats)):
    started = time.perf_counter()
    if op == "chains":
        client.chains()
    elif op == "status":
        client.status(arg)
    else:
        client.stage_commit(args[i], "stage-in")
    seconds.append(time.perf_counter() - started)
print(json.dumps(seconds))
'''


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hosts", description=__doc__)
    parser.add_argument("--repeats", type=int, default=40, help="requests per kind and place")
    args = parser.parse_args()
    harness.require_root("hosts", "it runs commands on the cluster's hosts as a plain user")
    status = harness.local_cluster("hosts")
    if not status.get("hosts"):
        sys.exit("benchmarks.hosts: the local cluster has no hosts")
    roles = status["roles"]
    places = {"chains": roles["login"][0], "status": roles["compute"][0],
              "commit": roles["dtn"][0]}
    python = str(Path(status["runtime"]["release"]) / "bin" / "python")
    account = pwd.getpwnam(USER)
    with harness.work_folder("hosts", "sk-bench-hosts-", parent="/var/tmp") as work:
        work.chmod(0o755)
        os.chown(work, account.pw_uid, account.pw_gid)
        driver = work / "driver.py"
        driver.write_text(DRIVER)
        driver.chmod(0o644)
        config = status["users_site_config"]
        scratch = Path(status["scratch_root"]) / f"bench-hosts-{os.getpid()}"
        _on("head", ["mkdir", "-p", str(scratch)])
        files = [scratch / f"f{i:04d}" for i in range(2 * args.repeats + 1)]
        _on("head", ["sh", "-c", "for f in " + " ".join(map(str, files)) +
                     "; do head -c 65536 /dev/urandom > $f; done"])
        try:
            chains = _planned_chains(status, account.pw_uid, files[1:], work)
            results = {}
            for op, host in places.items():
                local, remote = [], []
                per_round = max(1, args.repeats // ROUNDS)
                for number in range(ROUNDS):  # the head and the host in turn
                    for place, via, times in (("head", "unix", local), (host, "head", remote)):
                        if op == "commit":  # a chain each, never one twice
                            start = (2 * number + (place != "head")) * per_round
                            arg = ",".join(chains[start:start + per_round])
                        else:
                            arg = str(files[0]) if op == "status" else "-"
                        times += _timed(python, driver, config, place, via, op, arg, per_round)
                results[op] = {"host": host, "head_unix": _summary(local),
                               "remote_tcp": _summary(remote)}
                print(f"  {op:8} {host:6} median {results[op]['remote_tcp']['median_ms']:.1f} ms"
                      f" against {results[op]['head_unix']['median_ms']:.1f} ms on the head",
                      flush=True)
            results["command"] = _commands(status, places["chains"], config, args.repeats // 4)
        finally:
            _on("head", ["rm", "-rf", str(scratch)])
            _forget_chains(status, f"sk-bench-hosts-{os.getpid()}-")
    _write(results, args.repeats)
    return 0


def _on(host: str, argv: list[str], user: str = USER, **options) -> subprocess.CompletedProcess:
    return subprocess.run([str(harness.REPO / "scripts" / "local-cluster"), "exec", host,
                           "--user", user, "--", *argv], capture_output=True, text=True,
                          timeout=600, check=True, **options)


def _timed(python: str, driver: Path, config: str, host: str, via: str, op: str, arg: str,
           repeats: int) -> list[float]:
    out = _on(host, [python, str(driver), config, via, op, arg, str(repeats)]).stdout
    return json.loads(out.strip().splitlines()[-1])


def _planned_chains(status: dict, uid: int, files: list[Path], work: Path) -> list[str]:
    """One chain per file, as the chain service records it before its stage-in runs."""
    from scratchkeeper.planner import records
    from scratchkeeper.state import StateStore

    store = records.open_records(StateStore(status["state_database"]))
    now, ids = time.time(), []
    with store.transaction() as conn:
        for number, path in enumerate(files):
            chain_id = f"sk-bench-hosts-{os.getpid()}-{number}"
            conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                         (chain_id, f"{work}/job.sh", str(work), "slurm", uid, "submitted", "",
                          now, now, "{}"))
            conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, "
                         "state, updated) VALUES (?,?,?,?,?,?,?)",
                         (chain_id, "stage-in", "stage-in", "dataxfer", 0, "submitted", now))
            conn.execute("INSERT INTO staged_files(chain_id, path, job_key, source, line, state)"
                         " VALUES (?,?,?,?,?,?)", (chain_id, str(path), "stage-in",
                                                   f"{status['gridftp_url']}/bench/{number}", 3,
                                                   "planned"))
            ids.append(chain_id)
    return ids


def _forget_chains(status: dict, prefix: str) -> None:
    """The benchmark's chains out of the state database again (every table that names them)."""
    from scratchkeeper.state import StateStore

    store = StateStore(status["state_database"])
    with store.transaction() as conn:
        tables = [row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
            if "chain_id" in columns:
                conn.execute(f"DELETE FROM {table} WHERE chain_id LIKE ?", (prefix + "%",))


def _commands(status: dict, login: str, config: str, repeats: int) -> dict:
    """``scratchkeeper status`` as a whole command on the login host and on the head."""
    command = status["runtime"]["command"]
    out: dict = {"head": [], login: []}
    for _ in range(max(repeats, 3)):
        for host in ("head", login):
            started = time.perf_counter()
            _on(host, [command, "-c", config, "status"])
            out[host].append(time.perf_counter() - started)
    return {host: _summary(seconds) for host, seconds in out.items()}


def _summary(seconds: list[float]) -> dict:
    ordered = sorted(seconds)
    return {"n": len(ordered), "median_ms": statistics.median(ordered) * 1000,
            "p95_ms": ordered[max(0, int(len(ordered) * 0.95) - 1)] * 1000,
            "min_ms": ordered[0] * 1000}


def _write(results: dict, repeats: int) -> None:
    out = harness.report_dir("hosts")
    harness.write_json(out / "results.json", {"taken_at": harness.utc_now(),
                                              "machine": harness.machine(),
                                              "load": harness.load_average(),
                                              "repeats": repeats, **results})
    names = {"chains": "`status`'s chains (login)", "status": "recovery `status` (compute)",
             "commit": "`stage commit` (data-transfer)"}
    lines = ["# The cross-host request path", "",
             f"Taken {harness.utc_now()} on {harness.machine()}, load {harness.load_average()}; "
             f"`.venv/bin/python -m benchmarks.hosts --repeats {repeats}`.", "",
             "Round trip in the client process (no interpreter start), the same user and request"
             " on the head's Unix socket and from another host over TCP with a MUNGE credential"
             " each way (head and host take turns, 4 rounds, one run):", "",
             "| request (host) | head, Unix socket: median / p95 | other host, TCP + MUNGE: "
             "median / p95 | ratio of medians |", "|---|---|---|---|"]
    for op in ("chains", "status", "commit"):
        local, remote = results[op]["head_unix"], results[op]["remote_tcp"]
        lines.append(f"| {names[op]} | {local['median_ms']:.1f} / {local['p95_ms']:.1f} ms | "
                     f"{remote['median_ms']:.1f} / {remote['p95_ms']:.1f} ms | "
                     f"{remote['median_ms'] / local['median_ms']:.2f}x |")
    command = results["command"]
    (login,) = [h for h in command if h != "head"]
    lines += ["", "The whole `scratchkeeper status` command as the user (interpreter start "
              "included, through `local-cluster exec`):", "",
              f"* on the head (the command opens the state database): median "
              f"{command['head']['median_ms']:.0f} ms, p95 {command['head']['p95_ms']:.0f} ms;",
              f"* on {login} (asks the head): median {command[login]['median_ms']:.0f} ms, p95 "
              f"{command[login]['p95_ms']:.0f} ms "
              f"({command[login]['median_ms'] / command['head']['median_ms']:.2f}x).", ""]
    (out / "report.md").write_text("\n".join(lines))
    print(f"benchmarks.hosts: {out / 'report.md'}")


if __name__ == "__main__":
    sys.exit(main())
