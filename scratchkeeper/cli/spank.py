"""``scratchkeeper spank chain``: chain data jobs to the jobs job_submit.lua held (Slurm plugins).

Run by root (or the account listed in job_submit_scratchkeeper.conf's data_queue_uids) from a
systemd service with ``--watch``; docs/slurm-plugins.rst explains where it fits.
"""

from __future__ import annotations

import logging
import random
import signal
import threading
import time

from ..errors import InputError, ScratchkeeperError
from ..planner import records
from ..planner.attach import chain_pending, split_request
from ..planner.settle import settle_chains
from ..state import StateStore
from . import daemon_logging, site_config

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    group = subparsers.add_parser("spank", help="Slurm plugin helpers: chain held jobs, check options")
    actions = group.add_subparsers(dest="spank_command", metavar="ACTION")
    actions.required = True
    chain = actions.add_parser(
        "chain", help="chain data jobs to the jobs job_submit.lua held, then release them; "
                      "end chains whose stage-in ended without staging",
        description="Finds held jobs marked by job_submit.lua (one squeue call), submits their "
                    "data jobs exactly as `scratchkeeper submit` would, makes each job depend "
                    "on its stage-in and releases it. Then cancels the compute and stage-out "
                    "jobs of every chain in the state database (chained here or made by "
                    "`scratchkeeper submit`) whose stage-in ended any way but success "
                    "(cancelled, walltime, node failure, killed before it could report), "
                    "with the reason recorded for `scratchkeeper status`. Last, starts or "
                    "moves every just-in-time stage-in held back (#STAGEIN -start jit) as its "
                    "compute job's expected start moves, and offloads the results closed "
                    "since the last sweep of chains whose #STAGEOUT says -when close.")
    chain.add_argument("job_ids", nargs="*", metavar="JOBID",
                       help="only these jobs (and only the chains holding them)")
    chain.add_argument("--watch", type=float, metavar="SECONDS",
                       help="keep sweeping every SECONDS until SIGTERM (a service)")
    chain.set_defaults(func=_chain)
    check = actions.add_parser("check", help="split and check a --stage-in/--stage-out value")
    check.add_argument("stage", choices=("stage-in", "stage-out"))
    check.add_argument("value", metavar="SRC:DST")
    check.set_defaults(func=_check)


def _sweep(config, store, only, interval: float = 0.0) -> int:
    """Chain the held jobs, then end the chains whose stage-in ended: neither step waits on the
    other's failure (a job that cannot be chained must not keep chains pending for ever)."""
    failures = 0
    errors: list[Exception] = []
    outcomes = []
    try:
        outcomes = chain_pending(config, store, only=only)
    except ScratchkeeperError as err:
        errors.append(err)
    for outcome in outcomes:
        if outcome.error:
            failures += 1
            print(f"job {outcome.job_id}: {outcome.error}")
        else:
            jobs = ", ".join(f"{k} {v}" for k, v in outcome.data_jobs.items()) or "already chained"
            print(f"job {outcome.job_id}: chain {outcome.chain_id}: {jobs}; released", flush=True)
    try:
        for end in settle_chains(config, store, job_ids=only):
            if end.cancelled:
                print(f"chain {end.chain_id}: {end.reason}; cancelled {', '.join(end.cancelled)}",
                      flush=True)
    except ScratchkeeperError as err:
        errors.append(err)
    try:
        # just-in-time stage-ins held back: started now or moved as their compute jobs' starts move
        from ..staging.jit import reevaluate

        for move in reevaluate(config, store, sweep_interval=interval):
            when = "now" if move.release_at is None else time.strftime(
                "%Y-%m-%dT%H:%M:%S", time.localtime(move.release_at))
            print(f"chain {move.chain_id}: {move.job_key} {move.job_id} starts {when}: "
                  f"{move.reason}", flush=True)
    except ScratchkeeperError as err:
        errors.append(err)
    try:
        # offload at close (#STAGEOUT -when close): results closed since the last sweep
        from ..staging.offload import offload_closed

        for line in offload_closed(config, store):
            print(line, flush=True)
    except ScratchkeeperError as err:
        errors.append(err)
    if errors:
        raise errors[0]
    return failures


def _chain(args) -> int:
    config = daemon_logging(args) if args.watch else site_config(args)
    for job_id in args.job_ids:
        if not job_id.isdigit():
            raise InputError(f"job id {job_id!r}: expected a Slurm job id")
    store = records.open_records(StateStore(config.state.database))
    only = set(args.job_ids) or None
    if not args.watch:
        return 1 if _sweep(config, store, only) else 0
    if args.watch <= 0:
        raise InputError(f"--watch {args.watch:g}: expected a positive number of seconds")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    consecutive_failures = 0
    while not stop.is_set():
        try:
            _sweep(config, store, only, args.watch)
            consecutive_failures = 0
            pause = args.watch
        except Exception as err:  # noqa: BLE001 - a service outlives a bug met in one sweep
            consecutive_failures += 1
            pause = min(300.0, args.watch * 2 ** min(consecutive_failures, 6))
            pause *= random.uniform(0.8, 1.2)
            if not isinstance(err, ScratchkeeperError):
                log.exception("chain service: sweep failed")
            print(f"sweep failed ({consecutive_failures} in a row), retrying in {pause:.0f}s: "
                  f"{err}", flush=True)
        stop.wait(pause)
    return 0


def _check(args) -> int:
    request = split_request(args.stage, args.value)
    print(f"{request.stage}: {request.source} -> {request.destination}")
    return 0
