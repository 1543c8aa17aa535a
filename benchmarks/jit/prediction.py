"""How well the JIT stage-in's transfer model predicts real transfers (issue 34): a history of
mixed sizes, 1 MiB to 1 GiB, read from the local cluster's GridFTP server and nginx with the
project's own clients (``globus-url-copy``, ``curl``: :func:`scratchkeeper.transfer.clients.
client_command`, run through the command runner with the site's transfer options), each
transfer timed as the data job times it and recorded as ``stage commit`` records it; then every
held-out transfer is predicted by :func:`scratchkeeper.planner.predict.predict` (its size asked
of the server, GridFTP ``SIZE`` / HTTP ``HEAD``) *before* it runs, from the history up to it.

    .venv/bin/python -m benchmarks.jit.prediction [--quick] [--seed N]

The peer, measured on the same timings in the same run: the model it replaced (one log-normal
rate per source host, its bound two standard deviations of the log rate). Reports the median
|prediction error| (``actual / predicted - 1``, as ``status`` gives it), the fraction of
transfers whose bound lies in [actual, 2 x actual], and what JIT does with the bound for the
issue's two waits. Needs the local cluster up (it is not started here); its sources go in a
folder of the cluster's source directory, its copies in a work folder, both removed (at most
about 3 GiB on disk at once). Writes docs/benchmarks/jit/prediction.{md,json}
(``--quick``: benchmarks/results/jit/).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import statistics
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

from benchmarks import harness
from scratchkeeper import runner
from scratchkeeper.config import load_config
from scratchkeeper.planner import records
from scratchkeeper.planner.jit import decide
from scratchkeeper.planner.predict import Prediction, predict, source_client, source_host
from scratchkeeper.planner.transfer_fit import quantile
from scratchkeeper.state import StateStore
from scratchkeeper.transfer.clients import client_command
from scratchkeeper.transfer.uri import parse_location

MIB = 1 << 20
SIZES_MIB = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
#: the issue's waits: 3 and 22 minutes between submission and the compute job's start
WAITS = (180.0, 1320.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.jit.prediction",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 + 40 transfers, up to 256 MiB")
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--warm-up", type=int, default=0, help="history before predicting "
                        "(default 40, quick 20)")
    parser.add_argument("--held-out", type=int, default=0, help="transfers predicted "
                        "(default 160, quick 40)")
    args = parser.parse_args(argv)
    cluster = harness.local_cluster("jit.prediction")
    sizes = [s for s in SIZES_MIB if not args.quick or s <= 256]
    warm = args.warm_up or (20 if args.quick else 40)
    held = args.held_out or (40 if args.quick else 160)
    site = load_config(cluster["site_config"])
    source_dir = Path(cluster["source_dir"]) / f"jit-bench-{uuid.uuid4().hex[:10]}"
    with harness.work_folder("jit.prediction", "sk-jit-prediction-") as work:
        try:
            source_dir.mkdir()
            os.chmod(source_dir, 0o755)
            files = _make_sources(source_dir, sizes)
            store = records.open_staging(StateStore(str(work / "state.db")))
            config = replace(site, staging=replace(site.staging, min_samples=5, history=50))
            result = _run(cluster, config, store, files, work, warm, held, args.seed)
        finally:
            shutil.rmtree(source_dir, ignore_errors=True)
    result.update(date=harness.utc_now(), machine=harness.machine(),
                  load=harness.load_average(), seed=args.seed, quick=args.quick)
    out = harness.results_dir("jit") if args.quick else harness.report_dir("jit")
    name = f"prediction{harness.suffix(args.quick)}"
    harness.write_json(out / f"{name}.json", result, indent=1)
    (out / f"{name}.md").write_text(_report(result, args.quick))
    print((out / f"{name}.md").read_text())
    return 0


def _make_sources(folder: Path, sizes: list[int]) -> dict[int, Path]:
    files = {}
    block = os.urandom(MIB)
    for size in sizes:
        path = folder / f"in-{size:04d}MiB.dat"
        with open(path, "wb") as out:
            for number in range(size):
                out.write(block[number % 7:] + block[:number % 7])   # not one repeated block
        os.chmod(path, 0o644)
        files[size * MIB] = path
    return files


def _uri(cluster: dict, client: str, path: Path) -> str:
    if client == "gridftp":
        return f"{cluster['gridftp_url']}{path}"
    return cluster["http_source_url"] + str(path.relative_to(cluster["source_dir"]))


def _transfer(uri: str, destination: Path, config) -> float:
    """One real transfer with the project's client for ``uri``, timed (monotonic)."""
    command = client_command(parse_location(uri), parse_location(str(destination)),
                             recursive=False, config=config.transfer)
    started = time.monotonic()
    runner.run(command.argv, timeout=config.transfer.timeout)
    seconds = time.monotonic() - started
    destination.unlink()
    return seconds


def _old_model(history: list[tuple[int, float]], size: int) -> tuple[float, float] | None:
    """The replaced model on the same history: bytes over the geometric mean rate; bound at
    two standard deviations of the log rate."""
    if len(history) < 2:
        return None
    logs = [math.log(b / s) for b, s in history]
    mean = statistics.fmean(logs)
    sd = statistics.stdev(logs)
    return size / math.exp(mean), size / math.exp(mean - 2 * sd)


def _run(cluster, config, store, files, work: Path, warm: int, held: int, seed: int) -> dict:
    rng = random.Random(seed)
    sizes = sorted(files)
    rows, history = [], {}
    for number in range(warm + held):
        client = rng.choice(("gridftp", "http"))
        size = rng.choice(sizes)
        uri = _uri(cluster, client, files[size])
        host = source_host(uri)
        prediction = predict([(uri, False)], store, config) if number >= warm else None
        seconds = _transfer(uri, work / f"copy-{number}.dat", config)
        records.record_timings(store, [{
            "chain_id": f"bench{number}", "job_key": "stage-in", "line": 1, "host": host,
            "client": source_client(uri), "bytes": size, "files": 1, "seconds": seconds,
            "finished": time.time(), "owner_uid": os.getuid()}])
        past = history.setdefault(host, [])
        if prediction is not None:
            old = _old_model(past, size)
            rows.append({"client": client, "bytes": size, "actual": seconds,
                         "predicted": prediction.seconds, "bound": prediction.pessimistic,
                         "basis": prediction.hosts[0].fit.basis if prediction.hosts[0].fit
                         else prediction.reason,
                         "old_predicted": old[0] if old else None,
                         "old_bound": old[1] if old else None})
        past.insert(0, (size, seconds))
        del past[config.staging.history:]
        print(f"  {number + 1}/{warm + held}: {client} {size // MIB} MiB in {seconds:.3f}s"
              + (f", predicted {prediction.seconds:.3f}s, bound {prediction.pessimistic:.3f}s"
                 if prediction is not None and prediction.seconds is not None else ""),
              file=sys.stderr, flush=True)
    return {"warm_up": warm, "held_out": held, "sizes_mib": [s // MIB for s in sizes],
            "staging": {k: getattr(config.staging, k) for k in (
                "jit_quantile", "jit_min_spread", "min_samples", "history", "change_window",
                "jit_margin")},
            "summary": _summary(rows, config), "transfers": rows}


def _figures(rows: list[dict], predicted: str, bound: str) -> dict:
    usable = [r for r in rows if r[predicted] is not None]
    if not usable:
        return {"predicted": 0}
    errors = [r["actual"] / r[predicted] - 1 for r in usable]
    within = [r["actual"] <= r[bound] <= 2 * r["actual"] for r in usable]
    return {"predicted": len(usable), "median_abs_error": statistics.median(map(abs, errors)),
            "p90_abs_error": quantile([abs(e) for e in errors], 0.9),
            "bound_within_2x": sum(within) / len(usable),
            "bound_below_actual": sum(r[bound] < r["actual"] for r in usable) / len(usable),
            "bound_over_2x": sum(r[bound] > 2 * r["actual"] for r in usable) / len(usable),
            "errors": errors}


def _jit(rows: list[dict], config, bound: str) -> dict:
    """For each wait: how many are held back (decide()), and of those how long before the
    compute start the input lands (negative: late)."""
    out = {}
    for wait in WAITS:
        held, early = 0, []
        for r in rows:
            if r[bound] is None:
                continue
            decision = decide(0.0, wait, "benchmark", Prediction(
                (), (), r["bytes"], r["predicted"], r[bound], ""), config)
            if decision.release_at is not None:
                held += 1
                early.append(wait - (decision.release_at + r["actual"]))
        out[str(int(wait))] = {"held_back": held, "of": len(rows),
                               "lands_before_start": sum(e >= 0 for e in early),
                               "median_seconds_before_start": statistics.median(early)
                               if early else None}
    return out


def _summary(rows: list[dict], config) -> dict:
    summary = {"new": _figures(rows, "predicted", "bound"),
               "old": _figures(rows, "old_predicted", "old_bound")}
    for client in ("gridftp", "http"):
        summary[f"new_{client}"] = _figures([r for r in rows if r["client"] == client],
                                            "predicted", "bound")
    for label, keep in (("small (<= 16 MiB)", lambda b: b <= 16 * MIB),
                        ("large (>= 128 MiB)", lambda b: b >= 128 * MIB)):
        summary[f"new {label}"] = _figures([r for r in rows if keep(r["bytes"])],
                                           "predicted", "bound")
    summary["jit_new"] = _jit(rows, config, "bound")
    summary["jit_old"] = _jit([dict(r, predicted=r["old_predicted"]) for r in rows], config,
                              "old_bound")
    return summary


def _report(result: dict, quick: bool) -> str:
    s = result["summary"]
    staging = result["staging"]
    lines = [
        "# JIT stage-in: the transfer model against real transfers",
        "",
        f"{result['date']}, {result['machine']}, load {result['load']}. Command: "
        f"`.venv/bin/python -m benchmarks.jit.prediction{' --quick' if quick else ''}` "
        f"(seed {result['seed']}; needs the local cluster up).",
        "",
        f"{result['warm_up']} transfers of history, then {result['held_out']} held-out ones, "
        f"each predicted before it ran from the history up to it; sizes drawn uniformly from "
        f"{', '.join(map(str, result['sizes_mib']))} MiB, client drawn uniformly from GridFTP "
        "(globus-url-copy from the cluster's server) and HTTP (curl from its nginx), to a local "
        f"disk. Model keys: jit_quantile {staging['jit_quantile']}, jit_min_spread "
        f"{staging['jit_min_spread']}, min_samples {staging['min_samples']}, history "
        f"{staging['history']}, change_window {staging['change_window']}. The old model is the "
        "one replaced (one log-normal rate per host, bound at 2 sd), on the same timings.",
        "",
        "| model | predicted | median abs(error) | p90 abs(error) | bound in [actual, 2x] | "
        "bound < actual | bound > 2x |",
        "|---|---|---|---|---|---|---|",
    ]
    for key in ("new", "new_gridftp", "new_http", "new small (<= 16 MiB)",
                "new large (>= 128 MiB)", "old"):
        f = s[key]
        if not f.get("predicted"):
            continue
        lines.append(f"| {key.replace('_', ' ')} | {f['predicted']} | "
                     f"{f['median_abs_error']:.1%} | {f['p90_abs_error']:.1%} | "
                     f"{f['bound_within_2x']:.1%} | {f['bound_below_actual']:.1%} | "
                     f"{f['bound_over_2x']:.1%} |")
    new, old = s["new"], s["old"]
    if new.get("predicted") and old.get("predicted"):
        lines += ["", f"Median abs(error): old / new = "
                  f"{old['median_abs_error'] / new['median_abs_error']:.1f}x; bound within 2x: "
                  f"{new['bound_within_2x']:.0%} against {old['bound_within_2x']:.0%}."]
    lines += ["", f"JIT with margin {staging['jit_margin']:g} s (the cluster's), held back "
              "whenever the wait exceeds bound + margin:", "",
              "| wait | model | held back | lands before the compute start | median s before |",
              "|---|---|---|---|---|"]
    for wait in map(str, map(int, WAITS)):
        for model in ("new", "old"):
            j = s[f"jit_{model}"][wait]
            median = j["median_seconds_before_start"]
            lines.append(f"| {wait} s | {model} | {j['held_back']} of {j['of']} | "
                         f"{j['lands_before_start']} | "
                         f"{'-' if median is None else f'{median:.1f}'} |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
