"""Recovery commands: ``recoveryd``, ``read``, ``recover`` and ``recovery status|list|hook``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import TYPE_CHECKING

from ..errors import InputError, PermissionDenied, RecoveryError
from . import daemon_logging, head_elsewhere, site_config, state_here

if TYPE_CHECKING:
    from ..recovery.client import RecoveryClient
    from ..state import StateStore


def register(subparsers) -> None:
    daemon = subparsers.add_parser(
        "recoveryd", help="run the recovery service (head node, as root)",
        description="Detect failed OSTs (periodic parallel probe, requests on a Unix socket) and "
                    "patch lost stripes of staged files from their sources.")
    daemon.add_argument("--once", action="store_true",
                        help="one check cycle, recover what it finds, then exit (no socket)")
    daemon.set_defaults(func=_recoveryd)

    read = subparsers.add_parser(
        "read", help="read a scratch file, waiting for recovery on a failed OST",
        description="Write a file of the store to standard output (or -o FILE); on an I/O "
                    "error the failed OST is reported to recoveryd and the read resumes once "
                    "the file is patched.")
    read.add_argument("path", metavar="PATH")
    read.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    read.add_argument("--offset", type=int, default=0)
    read.add_argument("--length", type=int)
    read.add_argument("--wait-timeout", type=float, metavar="SECONDS",
                      help="longest wait for a patch (config: recovery.wait_timeout)")
    read.set_defaults(func=_read)

    recover = subparsers.add_parser(
        "recover", help="recover a file's lost stripes now",
        description="Ask recoveryd to patch PATH (or do it in this process with --inline).")
    recover.add_argument("path", metavar="PATH")
    recover.add_argument("--ost", type=int, action="append", default=[], metavar="INDEX",
                         help="an OST the caller saw fail (repeatable)")
    recover.add_argument("--explain", action="store_true",
                         help="print the patch plan: which source serves which chunks and why")
    recover.add_argument("--inline", action="store_true",
                         help="recover in this process instead of asking recoveryd")
    recover.add_argument("--no-wait", action="store_true", help="queue the request and return")
    recover.add_argument("--json", action="store_true")
    recover.add_argument("--timeout", type=float, metavar="SECONDS",
                         help="longest wait (config: recovery.wait_timeout)")
    recover.set_defaults(func=_recover)

    group = subparsers.add_parser("recovery", help="state of recovery: status, list, hook")
    actions = group.add_subparsers(dest="recovery_command", metavar="ACTION")
    actions.required = True
    status = actions.add_parser("status", help="is a file whole? (asks recoveryd, else the state)")
    status.add_argument("path", metavar="PATH")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_status)
    listing = actions.add_parser(
        "list", help="recent recovery requests: times and progress",
        description="Recent requests, newest first: when each was queued, how long it waited "
                    "and ran (so far, for an unfinished one) and, once its rebuild is planned, "
                    "the bytes patched of the bytes to patch. Root reads the state database "
                    "(every request, all fields); others ask recoveryd for their own.")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_list)
    hook = actions.add_parser(
        "hook", help="pre-execution hook: verify and recover a job's staged inputs",
        description="Run by Slurm (PrologSlurmctld) or PBS (prologue) before a job starts; "
                    "exits 0 when every staged input is whole, 1 with the reason otherwise.")
    hook.add_argument("job_id", nargs="?", metavar="JOB_ID",
                      help="default: $SLURM_JOB_ID, then $PBS_JOBID")
    hook.add_argument("--timeout", type=float, metavar="SECONDS",
                      help="longest wait for patches (config: recovery.wait_timeout)")
    hook.set_defaults(func=_hook)


def _client(config) -> RecoveryClient:
    from ..recovery.client import RecoveryClient

    return RecoveryClient.for_site(config)


def _open_store(config, what: str = "this command") -> StateStore:
    from ..recovery import records
    from ..state import StateStore

    state_here(config, what)
    return records.open_records(StateStore(config.state.database))


def _recoveryd(args: argparse.Namespace) -> int:
    from ..recovery import records
    from ..recovery.service import RecoveryService, process_request, resume

    config = daemon_logging(args)
    service = RecoveryService(config)
    if args.once:
        records.open_records(service.store)
        from ..planner import records as planner_records
        planner_records.open_records(service.store)
        resume(service.store, service.backend)
        service.check_cycle()
        while (row := records.claim_next(service.store, service.worker)) is not None:
            result = process_request(service.store, service.recoverer, row)
            print(f"{result['path']}: {result['state']}"
                  + (f": {result['reason']}" if result.get("reason") else ""))
        return 0
    service.install_signal_handlers()
    # `kill -USR1` writes every thread's stack to the log (standard error): what a daemon
    # that does not stop, or stalls, is doing (docs/operations.rst)
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)
    service.start()
    try:
        service.run()
    finally:
        service.shutdown()
    return 0


def _read(args: argparse.Namespace) -> int:
    from ..recovery.reader import RecoveringReader
    from ..storage import open_backend

    config = site_config(args)
    backend = open_backend(config)
    reader = RecoveringReader(backend, _client(config), args.path,
                              wait_timeout=args.wait_timeout or config.recovery.wait_timeout,
                              count_reads=config.mount.read_log_interval > 0)
    if args.offset < 0 or (args.length is not None and args.length < 0):
        raise InputError("--offset and --length must be >= 0")
    out = open(args.output, "wb") if args.output else sys.stdout.buffer
    try:
        for chunk in reader.chunks(args.offset, args.length):
            out.write(chunk)
    finally:
        if args.output:
            out.close()
        else:
            out.flush()
    return 0


def inline_recover(config, path: str, osts: list[int]) -> dict:
    """Recover in this process, through the same request records the daemon uses."""
    from ..recovery import records
    from ..recovery.reconstruct import Recoverer
    from ..recovery.safety import check_inside_scratch
    from ..recovery.service import check_ost_indices, process_request
    from ..storage import open_backend

    backend = open_backend(config)
    full = backend.paths.resolve(path)
    check_inside_scratch(full, backend)
    owner = backend.stat(full).uid
    if os.getuid() not in (0, owner):
        raise PermissionDenied(f"{full}: owned by uid {owner}; you may recover only your files")
    check_ost_indices(backend, osts)
    store = _open_store(config, "recovering in this process (--inline)")
    request_id, created = records.enqueue(store, full, reported_osts=osts,
                                          requested_by=os.getuid(), origin="inline")
    worker = records.worker_id()
    if not records.claim(store, request_id, worker):
        row = records.request(store, request_id)
        raise RecoveryError(f"{full}: request {request_id} is already being worked on by "
                            f"{row['worker']}; try 'scratchkeeper recovery status'")
    row = records.request(store, request_id)
    return process_request(store, Recoverer(backend, config, store=store), row)


def _recover(args: argparse.Namespace) -> int:
    config = site_config(args)
    timeout = args.timeout or config.recovery.wait_timeout
    if args.inline:
        outcome = inline_recover(config, args.path, args.ost)
        state = outcome.get("state")
    else:
        reply = _client(config).recover(args.path, wait=not args.no_wait, timeout=timeout,
                                        osts=args.ost)
        if args.no_wait:
            print(f"request {reply['request_id']} queued")
            return 0
        if reply.get("timed_out"):
            raise RecoveryError(f"{args.path}: request {reply['request_id']} not finished "
                                f"within {timeout:g}s (still {reply['state']})")
        outcome = reply.get("outcome") or {"path": args.path, "state": "lost",
                                           "reason": reply.get("reason", "")}
        state = outcome.get("state")
    if args.json:
        print(json.dumps(outcome, indent=2))
    else:
        line = f"{outcome['path']}: {state}"
        if state == "patched":
            line += (f": {outcome['patched_bytes']} bytes in {outcome['seconds']:.2f}s, OST "
                     + ", ".join(f"{k} -> {v}" for k, v in outcome["substitutes"].items())
                     + f", verified by {outcome['verified']}")
        elif outcome.get("reason"):
            line += f": {outcome['reason']}"
        print(line)
        if args.explain and outcome.get("explain"):
            print(outcome["explain"])
    if state == "lost":
        raise RecoveryError(f"{outcome['path']}: lost: {outcome.get('reason', '')}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from ..recovery.client import ServiceUnavailable
    from ..recovery.service import file_status
    from ..storage import open_backend

    config = site_config(args)
    try:
        status = _client(config).status(args.path)
    except ServiceUnavailable:
        if head_elsewhere(config):
            raise
        status = file_status(_open_store(config), open_backend(config), args.path)
        status["service"] = "not running"
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        line = f"{status['path']}: {status['state']}"
        if status["failed_osts"]:
            line += f" (failed OST {', '.join(map(str, status['failed_osts']))}, " \
                    f"{status['lost_bytes']} bytes unreadable)"
        if status.get("reason"):
            line += f": {status['reason']}"
        print(line)
    return 0 if status["whole"] else 1


def _list(args: argparse.Namespace) -> int:
    from ..recovery import records
    from ..recovery.client import ServiceUnavailable

    config = site_config(args)
    uid = os.getuid()
    rows: list
    if uid == 0 and not head_elsewhere(config):
        # the admin's view: the records themselves, with the times and progress recoveryd's
        # answer leaves out (and whether recoveryd runs or not)
        rows = records.recent_requests(_open_store(config), None)
    else:
        try:
            rows = _client(config).list()["requests"]
        except ServiceUnavailable:
            if head_elsewhere(config):
                raise
            rows = records.recent_requests(_open_store(config), uid)
    now = time.time()
    views = [records.request_view(row, now) for row in rows]
    if args.json:
        print(json.dumps(views, indent=2, default=str))
        return 0
    print(f"{'ID':>6} {'STATE':<8} {'ORIGIN':<8} {'QUEUED':<19} {'WAITED':>7} {'RAN':>7} "
          f"{'PATCHED':<24} PATH")
    for view in views:
        queued = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(view["created"]))
        print(f"{view['request_id']:>6} {view['state']:<8} {view['origin']:<8} {queued:<19} "
              f"{_duration(view['wait_seconds']):>7} {_duration(view['run_seconds']):>7} "
              f"{_progress(view):<24} {view['path']}"
              + (f"  ({view['reason']})" if view.get("reason") else ""))
    return 0


def _duration(seconds: float | None) -> str:
    """``4.2s``, ``12m05s``, ``3h20m``: how long, to the precision a glance needs."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def _progress(view: dict) -> str:
    """``48.0M/128.0M 37%`` (sizes as ``lfs df -h`` prints them); ``-`` before the rebuild is
    planned (or where recoveryd's answer does not say)."""
    from ..storage.df import human_size

    total = view.get("bytes_total")
    if total is None:
        return "-"
    done = view.get("bytes_done") or 0
    return f"{human_size(done)}/{human_size(total)} {view['progress'] * 100:.0f}%"


def _hook(args: argparse.Namespace) -> int:
    from ..recovery.client import ServiceUnavailable

    config = site_config(args)
    job_id = args.job_id or os.environ.get("SLURM_JOB_ID") or os.environ.get("PBS_JOBID")
    if not job_id:
        raise InputError("no job id: give JOB_ID or run from the scheduler ($SLURM_JOB_ID, "
                         "$PBS_JOBID)")
    timeout = args.timeout or config.recovery.wait_timeout
    try:
        result = _client(config).check_job(job_id, timeout)
    except ServiceUnavailable:
        if head_elsewhere(config):
            raise
        result = _hook_inline(config, job_id)
    if not result["whole"]:
        raise RecoveryError(f"job {job_id}: staged input not recoverable: {result['reason']}")
    print(f"job {job_id}: {result['checked']} staged input(s) whole")
    return 0


def _hook_inline(config, job_id: str) -> dict:
    """The hook without recoveryd: check and recover each input in this process."""
    from ..planner import records as planner_records
    from ..recovery.hook import job_inputs
    from ..recovery.service import file_status
    from ..storage import open_backend

    store = _open_store(config)
    planner_records.open_records(store)
    backend = open_backend(config)
    broken = []
    paths = [p for p in job_inputs(store, job_id) if backend.exists(p)]
    for path in paths:
        if file_status(store, backend, path)["whole"]:
            continue
        outcome = inline_recover(config, path, [])
        if outcome.get("state") == "lost":
            broken.append(f"{path}: {outcome.get('reason', '')}")
    return {"whole": not broken, "reason": "; ".join(broken), "checked": len(paths)}
