"""``scratchkeeper bb STAGE ...``: the stages of Slurm's burst-buffer life cycle, as
``slurm-plugins/burst_buffer.lua`` calls them (root only: slurmctld's script daemon runs it).

Each prints one line, the message Slurm shows (the job's reason, ``sbatch``'s error,
``scontrol show bbstat``), and exits 0 on success, non-zero on failure. The arguments are
Slurm's own, in Slurm 22.05's order (docs/slurm-plugins.rst lists what each function gets).
"""

from __future__ import annotations

import os

from ..errors import PermissionDenied
from . import daemon_logging, site_config

# post_run has nothing to do (data_out follows it): burst_buffer.lua answers it without a call
STAGES = ("job-process", "setup", "data-in", "real-size", "pre-run", "data-out", "teardown",
          "status", "end")


def register(subparsers) -> None:
    group = subparsers.add_parser(
        "bb", help="Slurm burst_buffer.lua stages: stage-in, recovery check, stage-out, teardown",
        description="Called by slurm-plugins/burst_buffer.lua inside slurmctld's burst-buffer "
                    "states (BurstBufferType=burst_buffer/lua, Directive=STAGE). Root only.")
    stages = group.add_subparsers(dest="bb_stage", metavar="STAGE")
    stages.required = True
    job_process = stages.add_parser("job-process", help="the planner's whole check of a script "
                                    "(data_in runs it; at sbatch, burst_buffer.lua checks in Lua)")
    job_process.add_argument("script")
    setup = stages.add_parser("setup", help="record the job and its owner (pending)")
    for name in ("job_id", "uid", "gid", "pool", "size", "script"):
        setup.add_argument(name)
    for stage, text in (("data-in", "stage the job's input and wait (pending)"),
                        ("pre-run", "check and recover the job's input before it starts"),
                        ("data-out", "stage the job's results out and wait (a failure is "
                                     "recorded and logged, and the job goes on)")):
        parser = stages.add_parser(stage, help=text)
        parser.add_argument("job_id")
        parser.add_argument("script", nargs="?")
    real_size = stages.add_parser("real-size", help="the bytes the job staged (pool accounting)")
    real_size.add_argument("job_id")
    teardown = stages.add_parser("teardown", help="end the job's data jobs and close its chain")
    teardown.add_argument("job_id")
    teardown.add_argument("script", nargs="?")
    teardown.add_argument("hurry", nargs="?", default="false")
    status = stages.add_parser("status", help="what scontrol show bbstat [JOBID...] prints")
    status.add_argument("--caller", metavar="UID:GID",
                        help="who asked (Slurm 23.02 and later pass it; 22.05 does not)")
    status.add_argument("words", nargs="*", help="the words after bbstat: job ids")
    stages.add_parser("end", help="cancel the jobs whose stage-in failed once Slurm has torn "
                      "them down (a failed data-in starts it; burst_buffer/ending.py)")
    group.set_defaults(func=_bb)


def _bb(args) -> int:
    if os.geteuid() != 0:
        raise PermissionDenied("scratchkeeper bb: for slurmctld's burst_buffer.lua (root) only; "
                               "see your chains with `scratchkeeper status`")
    from ..burst_buffer import ending, guarded, lifecycle, records
    from ..burst_buffer.confirm import confirming_scheduler
    from ..burst_buffer.status import status_text
    from ..planner import records as chains
    from ..state import StateStore

    stage = args.bb_stage
    config = daemon_logging(args) if stage == "end" else site_config(args)
    if stage == "job-process":
        steps = lifecycle.job_process(config, args.script)
        print(f"scratchkeeper: {steps} data step(s)")
        return 0
    store = records.open_records(chains.open_records(StateStore(config.state.database)))
    if stage == "setup":
        lifecycle.setup(config, store, args.job_id, int(args.uid), int(args.gid), args.pool,
                        int(args.size) if args.size.isdigit() else 0, args.script)
        print(f"job {args.job_id}: set up")
    elif stage == "data-in":
        try:
            chain_id = guarded.data_in(config, store, args.job_id, args.script)
        finally:
            if ending.marked(store, args.job_id):  # failed: cancelled after Slurm's teardown
                ending.leave_ender(config)
        print(f"job {args.job_id}: staged in (chain {chain_id})")
    elif stage == "real-size":
        print(lifecycle.real_size(store, args.job_id))
    elif stage == "pre-run":
        print(f"job {args.job_id}: {lifecycle.pre_run(config, store, args.job_id)}")
    elif stage == "data-out":
        print(f"job {args.job_id}: {guarded.data_out(config, store, args.job_id)}")
    elif stage == "teardown":
        cancelled = lifecycle.teardown(config, store, args.job_id, args.hurry == "true",
                                       scheduler=confirming_scheduler(config))
        if records.to_end(store, 1):  # this job's, or an ender's left by one killed
            ending.leave_ender(config)
        print(f"job {args.job_id}: torn down"
              + (f" (cancelled {', '.join(cancelled)})" if cancelled else ""))
    elif stage == "end":
        cancelled = ending.run_ender(config, store, confirming_scheduler(config))
        print(f"cancelled after their teardown: {', '.join(cancelled) or 'none'}")
    else:
        print(status_text(config, store, words=args.words, caller_uid=_caller_uid(args.caller)),
              end="")
    return 0


def _caller_uid(text: str | None) -> int | None:
    """The uid of ``--caller UID:GID`` (Slurm's numbers); None when not given or not that."""
    uid, _, gid = (text or "").partition(":")
    return int(uid) if uid.isdigit() and gid.isdigit() else None
