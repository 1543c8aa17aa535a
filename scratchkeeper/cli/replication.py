"""``scratchkeeper replicad`` (the replication daemon) and ``scratchkeeper replicas`` (its view).

``replicas job-ended JOBID`` and ``replicas closed PATH`` are how scheduler hooks (a Slurm
epilog, a PBS end hook) and other readers tell the daemon; they only record an event in the
state database, so they are fast and work while the daemon is down (it reads them when it
starts). The daemon confirms a job end with the scheduler before acting on it.
"""

from __future__ import annotations

import json
import logging

from ..errors import InputError
from . import add_loop_arguments, head_elsewhere, loop_config, site_config, state_here

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    daemon = subparsers.add_parser(
        "replicad", help="run the replication daemon (temporal replicas of jobs near dispatch)",
        description="Replicate the inputs of jobs near dispatch and drop the replicas when the "
                    "jobs have read them or ended (the thesis, §4.5).")
    add_loop_arguments(daemon, "replication", "reconcile, run one cycle, exit")
    daemon.set_defaults(func=_replicad)

    replicas = subparsers.add_parser(
        "replicas", help="what is replicated and why, space used, jobs at risk",
        description="Show the replication daemon's replicas (window position, shortcut), space "
                    "used against the scratch size and jobs dispatched without a ready replica.")
    replicas.add_argument("--json", action="store_true", help="print JSON")
    actions = replicas.add_subparsers(dest="replicas_command", metavar="ACTION")
    ended = actions.add_parser("job-ended", help="tell the daemon a job ended (scheduler hook)")
    ended.add_argument("job_ids", metavar="JOBID", nargs="+")
    ended.set_defaults(func=_job_ended)
    closed = actions.add_parser("closed", help="tell the daemon a job closed a replicated input")
    closed.add_argument("path", metavar="PATH")
    closed.add_argument("--job", metavar="JOBID", default="",
                        help="the job that closed it (default: any running job reading it)")
    closed.set_defaults(func=_closed)
    replicas.set_defaults(func=_show)


def _state(args, what: str):
    from ..replication.state import ReplicationState
    from ..state import StateStore

    config = site_config(args)
    state_here(config, what)
    return config, ReplicationState(StateStore(config.state.database))


def _head(config):
    """The head's service, for a hook on a host that is not the head (None: this is the head)."""
    if not head_elsewhere(config):
        return None
    from ..recovery.client import RecoveryClient

    return RecoveryClient.for_site(config)


def _replicad(args) -> int:
    from ..replication.daemon import ReplicationDaemon

    config = loop_config(args, "replication")
    daemon = ReplicationDaemon(config)
    daemon.install_signal_handlers()
    log.info("replicad: starting (pid state %s, interval %gs, %s)", config.state.database,
             config.replication.interval,
             f"replica queue {config.scheduler.replica_queue}" if config.scheduler.replica_queue
             else f"{config.replication.workers} workers")
    return daemon.run(max_cycles=1 if args.once else None)


def _show(args) -> int:
    from ..replication.daemon import scratch_bytes
    from ..replication.report import build_report, format_report
    from ..storage import open_backend

    config, state = _state(args, "replicas")
    try:
        total = scratch_bytes(open_backend(config))
    except Exception as err:  # the report still helps when the store cannot be asked
        log.warning("scratch size unknown: %s", err)
        total = None
    report = build_report(state, scratch_bytes=total,
                          max_space_fraction=config.replication.max_space_fraction)
    print(json.dumps(report, indent=2, sort_keys=True) if args.json else format_report(report))
    return 0


def _job_ended(args) -> int:
    from ..replication.state import JOB_ENDED

    for job_id in args.job_ids:
        if not job_id.replace(".", "").replace("[", "").replace("]", "").replace("_", "").isalnum():
            raise InputError(f"job id {job_id!r}: expected a scheduler job id")
    head = _head(site_config(args))
    if head is not None:
        head.job_ended(list(args.job_ids))
        return 0
    _, state = _state(args, "replicas job-ended")
    for job_id in args.job_ids:
        state.add_event(JOB_ENDED, job_id=job_id, source="cli")
    return 0


def _closed(args) -> int:
    from ..replication.state import FILE_CLOSED
    from ..storage.base import ScratchPaths

    config = site_config(args)
    path = ScratchPaths(config.storage.scratch_root).resolve(args.path)
    head = _head(config)
    if head is not None:
        head.file_closed(path, args.job)
        return 0
    _, state = _state(args, "replicas closed")
    state.add_event(FILE_CLOSED, job_id=args.job, path=path, source="cli")
    return 0
