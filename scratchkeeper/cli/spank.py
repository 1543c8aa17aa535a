"""``scratchkeeper spank chain``: chain data jobs to the jobs job_submit.lua held (Slurm plugins).

Run by root (or the account listed in job_submit_scratchkeeper.conf's data_queue_uids) from a
systemd service with ``--watch``; docs/slurm-plugins.rst explains where it fits.
"""

from __future__ import annotations

from ..chain_service import sweep
from ..chain_service.attach import split_request
from ..errors import InputError
from ..planner import records
from ..state import StateStore
from . import daemon_logging, site_config


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


def _chain(args) -> int:
    config = daemon_logging(args) if args.watch else site_config(args)
    for job_id in args.job_ids:
        if not job_id.isdigit():
            raise InputError(f"job id {job_id!r}: expected a Slurm job id")
    store = records.open_records(StateStore(config.state.database))
    only = set(args.job_ids) or None
    if not args.watch:
        return 1 if sweep.sweep(config, store, only) else 0
    if args.watch <= 0:
        raise InputError(f"--watch {args.watch:g}: expected a positive number of seconds")
    sweep.watch(config, store, only, args.watch)
    return 0


def _check(args) -> int:
    request = split_request(args.stage, args.value)
    print(f"{request.stage}: {request.source} -> {request.destination}")
    return 0
