"""``scratchkeeper staging predict``: what a just-in-time stage-in would plan with."""

from __future__ import annotations

import json
import os

from ..errors import ScratchkeeperError
from . import site_config


def register(subparsers) -> None:
    staging = subparsers.add_parser("staging", help="just-in-time stage-in: predictions")
    actions = staging.add_subparsers(dest="staging_command", metavar="ACTION")
    actions.required = True
    predict = actions.add_parser(
        "predict", help="predict the transfer time of a script's stage-in jobs",
        description="Asks each #STAGEIN source for its size (GridFTP SIZE, HTTP HEAD, stat) and "
                    "predicts each file's time as a fixed cost plus its bytes over the "
                    "bandwidth fitted per source host and client to the transfers data jobs "
                    "timed; prints the prediction, its pessimistic bound (what -start jit "
                    "plans with: the staging.jit_quantile quantile of the fit's relative "
                    "residuals added) and why there is none when there is none.")
    predict.add_argument("script", help="batch script with #STAGEIN directives")
    predict.add_argument("--json", action="store_true", help="machine-readable output")
    predict.set_defaults(func=_predict)


def _predict(args) -> int:
    from ..planner.predict import predict
    from ..planner.submit import prepare
    from ..state import StateStore

    config = site_config(args)
    _, plan = prepare(args.script, config)
    store = None
    if os.path.exists(config.state.database):
        try:
            store = StateStore(config.state.database, read_only=True)
        except ScratchkeeperError:
            store = None  # unreadable for this user: no history to learn from
    results = []
    for job in plan.jobs:
        if job.role != "stage-in":
            continue
        sources = [(f.source, f.recursive) for f in plan.staged_files if f.job_key == job.key]
        prediction = predict(sources, store, config) if store is not None else None
        results.append((job, sources, prediction))
    if args.json:
        print(json.dumps([{"job": job.key, "start": job.start,
                           "prediction": p.to_dict() if p else None} for job, _, p in results],
                         indent=2))
        return 0
    if not results:
        print(f"{args.script}: no #STAGEIN transfer to predict")
    for job, _sources, prediction in results:
        print(f"{job.key} (-start {job.start}):")
        if prediction is None:
            print(f"  no prediction: no state database at {config.state.database}")
            continue
        for source in prediction.sources:
            size = f"{source.bytes} bytes" if source.bytes is not None else f"size unknown ({source.reason})"
            print(f"  {source.source}: {size}")
        for host in prediction.hosts:
            fit = host.fit
            if fit is None:
                print(f"  {host.client} from {host.host}: no model: {host.reason}")
                continue
            bandwidth = f"{fit.bandwidth / 1e6:.1f} MB/s" if fit.bandwidth else "no per-byte cost"
            print(f"  {host.client} from {host.host}: {fit.fixed:.3f}s per file + bytes at "
                  f"{bandwidth}, bound +{fit.spread:.0%} ({fit.basis})")
        if prediction.seconds is None:
            print(f"  no prediction: {prediction.reason}")
        else:
            print(f"  predicted {prediction.seconds:.1f}s, at worst {prediction.pessimistic:.1f}s "
                  f"(the JIT lead adds staging.jit_margin = {config.staging.jit_margin:g}s)")
    return 0
