"""``scratchkeeper stage commit|fail``: what a data job reports when its transfers end.

A data job runs as the job's user. Where that user cannot write the state database (a site
whose chains are made by root's chain service, ``scheduler.submit_via = "chain-service"``), the
report goes to the recovery service's socket, which does the same work for the chain's owner
only (:meth:`scratchkeeper.recovery.service.RecoveryService._stage_report`).
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

from ..errors import RecoveryError
from . import site_config

if TYPE_CHECKING:
    from ..state import StateStore


def register(subparsers) -> None:
    stage = subparsers.add_parser("stage", help="(run by data jobs) record a data stage's outcome")
    actions = stage.add_subparsers(dest="stage_action", metavar="ACTION")
    actions.required = True
    commit = actions.add_parser("commit", help="record the staged files and their recovery metadata")
    commit.add_argument("--chain", required=True)
    commit.add_argument("--job", required=True, help="job key in the chain (stage-in, stage-out...)")
    commit.add_argument("--layout", metavar="TEXT", help="the stage-in's layout decision "
                        "(#STAGEIN -layout), recorded on every staged file as the xattr "
                        "user.scratchkeeper.layout")
    commit.add_argument("--timing", action="append", default=[], metavar="LINE:SECONDS",
                        help="(a stage-in) how long the transfer of that script line took, as "
                             "the data job timed it; what the JIT prediction learns from")
    commit.set_defaults(func=_commit)
    fail = actions.add_parser("fail", help="record a failed data stage and cancel its dependents")
    fail.add_argument("--chain", required=True)
    fail.add_argument("--job", required=True)
    fail.add_argument("--line", type=int, default=0, help="script line of the failed directive")
    fail.add_argument("--reason", default="", help="the transfer's last error")
    fail.set_defaults(func=_fail)
    unchanged = actions.add_parser(
        "unchanged", help="(run by a -when close stage-out) whether a result was offloaded at "
                          "close and is unchanged since: exit 0 if so, 1 if it must be sent")
    unchanged.add_argument("--list", required=True, dest="list_path",
                           help="the chain's offloaded.list (written by the chain service)")
    unchanged.add_argument("path", help="a result file, or a directory of them")
    unchanged.set_defaults(func=_unchanged)
    changed = actions.add_parser(
        "changed", help="(run by a -when close stage-out) hard-link the files of a result "
                        "directory not offloaded at close, or changed since, into a folder: "
                        "exit 0 if some must be sent, 1 if none, 2 on error")
    changed.add_argument("--list", required=True, dest="list_path",
                         help="the chain's offloaded.list (written by the chain service)")
    changed.add_argument("--link-into", required=True, metavar="FOLDER",
                         help="a folder that does not exist yet, on the same file system")
    changed.add_argument("path", help="the result directory")
    changed.set_defaults(func=_changed)


def _through_service(config, call):
    """``call(client)`` on the recovery service, retried (retry.*) while it does not answer."""
    from ..recovery.client import RecoveryClient, ServiceUnavailable

    client = RecoveryClient.for_site(config)
    delay = config.retry.delay
    for attempt in range(1, config.retry.attempts + 1):
        try:
            return call(client)
        except ServiceUnavailable as err:
            if attempt == config.retry.attempts:
                raise RecoveryError(
                    f"uid {os.getuid()} cannot write the state database {config.state.database}, "
                    f"and the recovery service that records data jobs for their users does not "
                    f"answer after {attempt} tries: {err}") from None
            print(f"scratchkeeper: recovery service not answering ({err}); retry {attempt} of "
                  f"{config.retry.attempts - 1} in {delay:g}s", file=sys.stderr, flush=True)
            time.sleep(delay)
            delay = min(delay * config.retry.backoff, config.retry.max_delay)
    raise AssertionError("unreachable")


def _service_once(config, call):
    """``call(client)`` on the recovery service; None when it does not answer."""
    from ..recovery.client import RecoveryClient, ServiceUnavailable

    try:
        return call(RecoveryClient.for_site(config))
    except ServiceUnavailable:
        return None


def _open_records(config) -> StateStore:
    """The state database, opened as long as others' locks delay it (a data job's report is
    retried while the database is busy, never given up as a failed stage)."""
    from ..planner import records
    from ..planner.commit import recorded
    from ..state import StateStore

    return recorded(lambda: records.open_records(StateStore(config.state.database)),
                    f"opening {config.state.database}")


def _commit(args) -> int:
    from ..planner.commit import commit_stage
    from ..planner.transfer_timing import parse_timings
    from ..state import may_write

    config = site_config(args)
    started = time.monotonic()
    timings = parse_timings(args.timing)
    reply = None
    if config.head.address or (os.geteuid() != 0 and os.path.exists(config.recovery.socket)):
        # root's service commits for the chain's owner and writes the record recovery trusts
        # (trusted.* attributes, which this user cannot write); committed here instead, only
        # when the service does not answer, the files carry no such record
        reply = _service_once(config, lambda c: c.stage_commit(args.chain, args.job,
                                                               layout=args.layout,
                                                               timings=timings))
    if reply is None and not config.head.address and may_write(config.state.database):
        if os.geteuid() != 0:
            print(f"scratchkeeper: committing as uid {os.geteuid()}: the staged files get no "
                  "record recovery trusts (only root's recovery service writes it)",
                  file=sys.stderr, flush=True)
        store = _open_records(config)
        files = [(f.path, f.size, f.checksum, f.source)
                 for f in commit_stage(store, config, args.chain, args.job,
                                         layout=args.layout, timings=timings)]
    else:
        if reply is None:
            reply = _through_service(config, lambda c: c.stage_commit(args.chain, args.job,
                                                                        layout=args.layout,
                                                                        timings=timings))
        files = [(f["path"], f["size"], f["checksum"], f["source"]) for f in reply["files"]]
    for path, size, checksum, source in files:
        print(f"staged {path} ({size} bytes, sha256 {checksum}) from {source}")
    # in the data job's log: how long recording took, lock waits included (benchmarks/load)
    print(f"committed {len(files)} file(s) in {time.monotonic() - started:.3f}s")
    return 0


def _fail(args) -> int:
    from ..planner.commit import fail_stage
    from ..state import may_write

    config = site_config(args)
    if not config.head.address and may_write(config.state.database):
        store = _open_records(config)
        cancelled = fail_stage(store, config, args.chain, args.job, args.reason, args.line or None)
    else:
        cancelled = _through_service(config, lambda c: c.stage_fail(
            args.chain, args.job, args.line or None, args.reason))["cancelled"]
    if cancelled:
        print(f"cancelled {', '.join(cancelled)}")
    return 0


def _unchanged(args) -> int:
    from ..chain_service.offload import unchanged

    same, why = unchanged(args.list_path, args.path)
    print(f"{args.path}: {why}", file=sys.stderr)
    return 0 if same else 1


def _changed(args) -> int:
    from ..chain_service.offload import link_changed

    if not os.path.isdir(args.path) or os.path.islink(args.path):
        print(f"{args.path}: not a directory", file=sys.stderr)
        return 2
    try:
        os.mkdir(args.link_into, 0o700)
        linked, skipped = link_changed(args.list_path, args.path, args.link_into)
    except OSError as err:
        print(f"{args.link_into}: {err.strerror}", file=sys.stderr)
        return 2
    print(f"{args.path}: {linked} file(s) to send, {skipped} offloaded at close and unchanged",
          file=sys.stderr)
    return 0 if linked else 1
