"""``scratchkeeper stage commit|fail``: what a data job reports when its transfers end."""

from __future__ import annotations

from ..planner import records
from ..planner.commit import commit_stage, fail_stage
from ..state import StateStore
from . import site_config


def register(subparsers) -> None:
    stage = subparsers.add_parser("stage", help="(run by data jobs) record a data stage's outcome")
    actions = stage.add_subparsers(dest="stage_action", metavar="ACTION")
    actions.required = True
    commit = actions.add_parser("commit", help="record the staged files and their recovery metadata")
    commit.add_argument("--chain", required=True)
    commit.add_argument("--job", required=True, help="job key in the chain (stage-in, stage-out...)")
    commit.set_defaults(func=_commit)
    fail = actions.add_parser("fail", help="record a failed data stage and cancel its dependents")
    fail.add_argument("--chain", required=True)
    fail.add_argument("--job", required=True)
    fail.add_argument("--line", type=int, default=0, help="script line of the failed directive")
    fail.add_argument("--reason", default="", help="the transfer's last error")
    fail.set_defaults(func=_fail)


def _store(args):
    config = site_config(args)
    return config, records.open_records(StateStore(config.state.database))


def _commit(args) -> int:
    config, store = _store(args)
    for item in commit_stage(store, config, args.chain, args.job):
        print(f"staged {item.path} ({item.size} bytes, sha256 {item.checksum}) from {item.source}")
    return 0


def _fail(args) -> int:
    config, store = _store(args)
    cancelled = fail_stage(store, config, args.chain, args.job, args.reason, args.line or None)
    if cancelled:
        print(f"cancelled {', '.join(cancelled)}")
    return 0
