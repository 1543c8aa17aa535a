"""``scratchkeeper plan``, ``submit`` and ``status``: the user-facing planner commands."""

from __future__ import annotations

import json
import os
import shlex
import time

from ..errors import InputError
from . import head_elsewhere, site_config, state_here


def register(subparsers) -> None:
    plan = subparsers.add_parser("plan", help="show the data and compute jobs a script becomes")
    _script_options(plan)
    plan.add_argument("--dry-run", action="store_true",
                      help="print the rendered scripts and the exact commands; run nothing "
                           "(plan never submits; the flag is accepted for clarity)")
    plan.add_argument("--explain", action="store_true",
                      help="print only each stage-in's layout decision (#STAGEIN -layout): the "
                           "modelled cost of each layout, the choice and its reason")
    plan.set_defaults(func=_plan)

    submit = subparsers.add_parser("submit", help="submit a script as chained data and compute jobs")
    _script_options(submit)
    submit.add_argument("--dry-run", action="store_true", help="same as 'plan --dry-run'")
    submit.set_defaults(func=_submit)

    status = subparsers.add_parser("status", help="a chain's jobs, their states and reasons")
    status.add_argument("ident", nargs="?", metavar="JOBID|CHAIN",
                        help="any job id of the chain, or its chain id (default: your recent chains)")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--wait", type=float, metavar="SECONDS",
                        help="poll until the chain has ended, at most SECONDS")
    status.add_argument("--backlog", action="store_true",
                        help="(root) the chain service's backlog: jobs waiting to be chained or "
                             "released, chains being submitted, JIT stage-ins held back, and "
                             "data jobs still queued whose chain has ended (orphans)")
    status.set_defaults(func=_status)


def _script_options(parser) -> None:
    parser.add_argument("script", help="batch script with #STAGEIN/#STAGEOUT directives")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--scheduler", choices=("slurm", "pbs"),
                        help="backend to plan for (config: scheduler.kind)")
    parser.add_argument("--input", action="append", default=[], metavar="PATH",
                        help="declare an input file of the job (for replication), repeatable")


def _plan_json(plan, commands) -> dict:
    roles = {job.key: job.role for job in plan.jobs}  # not plan.job(): once per dependency
    return {
        "chain_id": plan.chain_id,
        "scheduler": plan.scheduler,
        "jobs": [{"role": j.role, "key": j.key, "name": j.name, "queue": j.queue,
                  "script": j.script, "retries": j.retries, "retry_delay": j.retry_delay,
                  "walltime": j.walltime, "start": j.start,
                  "layout": j.layout.to_dict() if j.layout else None,
                  "layout_skipped": j.layout_skipped,
                  "depends_on": [{"role": roles[d.key], "key": d.key, "type": d.type}
                                 for d in j.depends_on]} for j in plan.jobs],
        "staged_files": [{"path": f.path, "source": f.source, "line": f.line} for f in plan.staged_files],
        "offloaded_files": [{"path": f.path, "destination": f.destination, "line": f.line}
                            for f in plan.offloaded_files],
        "inputs": plan.inputs,
        "commands": commands,
    }


def _plan(args) -> int:
    from ..planner.submit import dry_run_commands, prepare

    config = site_config(args)
    _, plan = prepare(args.script, config, scheduler=args.scheduler, extra_inputs=args.input)
    commands = dry_run_commands(plan, config)
    if args.json:
        print(json.dumps(_plan_json(plan, commands), indent=2))
        return 0
    if getattr(args, "explain", False):
        print(_explain(plan))
        return 0
    for job in plan.jobs:
        deps = ", ".join(f"{d.type}:{d.key}" for d in job.depends_on) or "none"
        print(f"=== {job.key} (queue {job.queue}, depends on {deps}, retries {job.retries})")
        print(job.script, end="" if job.script.endswith("\n") else "\n")
    if plan.staged_files:
        print("=== recovery metadata")
        for staged in plan.staged_files:
            print(f"{staged.path} <- {staged.source}  (line {staged.line})")
    print("=== commands")
    for argv in commands:
        print(shlex.join(argv))
    return 0


def _explain(plan) -> str:
    """Each stage-in's layout decision, as ``plan --explain`` prints it."""
    from ..advisor import format_size

    lines = []
    for job in plan.jobs:
        if job.role != "stage-in":
            continue
        if job.layout_skipped:
            lines.append(f"{job.key}: no layout applied: {job.layout_skipped}")
            continue
        decision = job.layout
        if decision is None:
            lines.append(f"{job.key}: no #STAGEIN -layout options: files take their "
                         "directory's layout")
            continue
        lines.append(f"{job.key}:")
        if decision.estimates:
            width = max(len(label) for label, _ in decision.estimates)
            for label, seconds in decision.estimates:
                chosen = "  <- chosen" if label.split(" ")[0] == decision.layout else ""
                lines.append(f"  {label:<{width}}  {seconds * 1e3:>12,.3f} ms{chosen}")
        lines.append(f"  choice: {decision.layout or 'the stripe settings given'}: "
                     f"{decision.reason}")
        lines.append(f"  stripe count {decision.stripe_count}, stripe size "
                     f"{format_size(decision.stripe_size)}")
        lines.extend(f"  note: {note}" for note in decision.notes)
    return "\n".join(lines) if lines else "the script has no stage-in"


def _submit(args) -> int:
    if args.dry_run:
        return _plan(args)
    config = site_config(args)
    if config.scheduler.submit_via == "chain-service":
        return _hand_over(args, config)
    from ..planner import records
    from ..planner.submit import prepare, submit_plan
    from ..state import StateStore

    state_here(config, "a direct submission (scheduler.submit_via = \"direct\"; "
                       "\"chain-service\" submits from any host)")
    _, plan = prepare(args.script, config, scheduler=args.scheduler, extra_inputs=args.input)
    store = records.open_records(StateStore(config.state.database))
    submission = submit_plan(plan, config, store)
    if args.json:
        print(json.dumps({"chain_id": plan.chain_id,
                          "jobs": [{"role": j.role, "key": j.key, "job_id": submission.job_ids[j.key]}
                                   for j in plan.jobs]}, indent=2))
    else:
        print(f"chain {plan.chain_id}")
        for job in plan.jobs:
            print(f"{job.key:12} {submission.job_ids[job.key]}")
    return 0


def _hand_over(args, config) -> int:
    """Checked here, chained by root's chain service (``scratchkeeper spank chain --watch``)."""
    from ..chain_service.attach import HELD_FOR_CHAINING, hand_over
    from ..planner.submit import prepare

    if (args.scheduler or config.scheduler.kind) != "slurm":
        raise InputError("scheduler.submit_via = \"chain-service\" works with Slurm only (its "
                         "job_submit.lua holds the job); submit PBS scripts directly")
    if args.input:
        raise InputError("--input cannot be handed to the chain service; declare inputs in the "
                         "script with `#STAGEIN -input PATH` lines")
    prepare(args.script, config, scheduler="slurm")  # the script's errors, before sbatch
    handed = hand_over(args.script, config)
    job_id, held = handed.job_id, handed.staged_by == HELD_FOR_CHAINING
    if args.json:
        print(json.dumps({"job_id": job_id, "state": "held for chaining" if held
                          else "staged by Slurm's burst buffer"}, indent=2))
    elif held:
        print(f"job {job_id}: held until the chain service has chained its data jobs "
              f"(`scratchkeeper status {job_id}` once it has)")
    else:
        print(f"job {job_id}: Slurm's burst buffer stages its data while it waits "
              f"(`scratchkeeper status {job_id}` once its stage-in began)")
    return 0


def _status_list(args, config, store, uid: int) -> int:
    """The caller's recent chains (root: everyone's), each in the state its jobs say."""
    from ..planner import records
    from ..planner.status import chain_summaries

    summaries = chain_summaries(store, config, records.recent_chains(store, None if uid == 0
                                                                     else uid))
    return _print_summaries(args, summaries)


def _print_summaries(args, summaries) -> int:
    if args.json:
        print(json.dumps([{"chain_id": c.chain_id, "script": c.script, "state": c.state,
                           "reason": c.reason, "recorded_state": c.recorded_state,
                           "replaced_by": c.replaced_by} for c in summaries], indent=2))
        return 0
    for chain in summaries:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(chain.created))
        note = f"  (replaced by {chain.replaced_by})" if chain.replaced_by else ""
        print(f"{chain.chain_id}  {created}  {chain.state:16} {chain.script}{note}")
    return 0


def _backlog(args, config, store) -> int:
    """``status --backlog``: what the chain service has still to do, and what it left behind."""
    from ..errors import PermissionDenied, ScratchkeeperError
    from ..planner import records
    from ..planner.status import backlog

    if os.getuid() != 0:
        raise PermissionDenied("status --backlog shows every user's jobs: run it as root")
    records.open_chain_ends(store)
    held = None
    notes = []
    if config.scheduler.kind == "slurm":
        from ..chain_service.attach import held_jobs

        try:
            held = [(job.job_id, job.chained) for job in
                    held_jobs(timeout=config.scheduler.command_timeout)]
        except ScratchkeeperError as err:
            notes.append(f"jobs held for chaining not read: {err}")
    report = backlog(store, config, held)
    report.notes[:0] = notes
    now = time.time()
    if args.json:
        print(json.dumps({"taken_at": now, **report.to_dict()}, indent=2))
        return 0
    print(f"chain service backlog at {_clock(now)}")
    print(f"  held for chaining:        {_waiting(report.to_chain, now)}")
    print(f"  chained, to be released:  {_waiting(report.to_release, now)}")
    for row in report.submitting:
        print(f"  chains {row['state']}:{' ' * max(1, 17 - len(row['state']))}{row['count']}, "
              f"oldest since {_clock(row['oldest'])} ({_ago(now - row['oldest'])})")
    if report.jit_waiting is not None:
        jit = report.jit_waiting
        nxt = jit["next_release"]
        print(f"  JIT stage-ins held back:  {jit['count']}"
              + (f", next release {_clock(nxt)}" if nxt is not None else ""))
    print(f"orphaned data jobs (still queued, their chain has ended): {len(report.orphans)}")
    for job in report.orphans:
        print(f"  {job['job_id']:>8}  {job['job_key']:12} {job['state']:9} chain "
              f"{job['chain_id']}: {job['why']}" + _since(job["submitted"], now))
    print(f"compute jobs waiting on a dead data job (never to start): {len(report.stranded)}")
    for job in report.stranded:
        print(f"  {job['job_id']:>8}  chain {job['chain_id']}: {job['why']}"
              + _since(job["submitted"], now) + f"\n            fix: {job['fix']}")
    print(f"data-queue jobs no chain or offload records: {len(report.unrecorded)}")
    for job in report.unrecorded:
        print(f"  {job['job_id']:>8}  {job['name'][:40]:40} {job['user']:10} {job['state']}"
              + _since(job["submitted"], now))
    for note in report.notes:
        print(f"note: {note}")
    return 0


def _waiting(jobs: list[dict], now: float) -> str:
    if not jobs:
        return "0"
    oldest = jobs[0]["submitted"]
    return f"{len(jobs)}" + (f", oldest submitted {_clock(oldest)} ({_ago(now - oldest)})"
                             if oldest is not None else "")


def _since(when: float | None, now: float) -> str:
    return "" if when is None else f"  (submitted {_clock(when)}, {_ago(now - when)})"


def _clock(when: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s ago"
    if seconds < 7200:
        return f"{seconds // 60}m ago"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m ago"


def _status(args) -> int:
    from ..planner import records
    from ..planner.status import chain_status, resolve_chain
    from ..state import StateStore

    config = site_config(args)
    if args.backlog:
        state_here(config, "status --backlog")
    elif head_elsewhere(config):
        return _status_from_head(args, config)
    store = records.open_records(StateStore(config.state.database))
    uid = os.getuid()
    if args.backlog:
        if args.ident is not None or args.wait:
            raise InputError("--backlog takes no JOBID|CHAIN and no --wait")
        return _backlog(args, config, store)
    if args.ident is None:
        return _status_list(args, config, store, uid)
    chain_id = resolve_chain(store, args.ident)
    return _show_status(args, lambda: chain_status(store, config, chain_id, caller_uid=uid))


def _status_from_head(args, config) -> int:
    """``status`` on a host that is not the head: the same answers, from the head's service."""
    from ..planner.status import ChainStatus, ChainSummary, JobStatus
    from ..recovery.client import RecoveryClient

    client = RecoveryClient.for_site(config)
    if args.ident is None:
        summaries = [ChainSummary(**c) for c in client.chains()["chains"]]
        return _print_summaries(args, summaries)

    def ask() -> ChainStatus:
        reply = dict(client.chain_status(args.ident)["status"])
        reply["jobs"] = [JobStatus(**job) for job in reply["jobs"]]
        return ChainStatus(**reply)

    return _show_status(args, ask)


def _show_status(args, ask) -> int:
    """One chain's status (``ask()``), waited for with ``--wait``, printed."""
    from ..planner import records

    deadline = time.monotonic() + (args.wait or 0)
    while True:
        status = ask()
        finished = status.state in ("completed", "failed", "ended", records.SUBMIT_FAILED,
                                    records.STAGE_IN_FAILED, records.STAGE_OUT_FAILED) and all(
            j.state not in ("pending", "held", "running", "completing") for j in status.jobs)
        if not args.wait or finished or time.monotonic() >= deadline:
            break
        time.sleep(2)
    if args.json:
        print(json.dumps(status.to_dict(), indent=2))
    else:
        replaced = f" (replaced by {status.replaced_by})" if status.replaced_by else ""
        print(f"chain {status.chain_id}: {status.state}{replaced}  ({status.script})")
        if status.reason:
            print(f"  reason: {status.reason}")
        for job in status.jobs:
            line = f"  {job.key:12} {job.job_id or '-':>8}  {job.queue:10} {job.state}"
            if job.exit_code not in (None, 0) or job.exit_signal:
                line += f" (exit {job.exit_code}:{job.exit_signal or 0})"
            if job.reason:
                line += f"  {job.reason}"
            print(line)
            jit = (job.timing or {}).get("jit")
            if jit:
                print(f"  {'':12} jit: {jit['reason']}")
        for staged in status.staged_files:
            print(f"  staged {staged['path']} <- {staged['source']}  [{staged['state']}]")
        for sent in status.offloads:
            print(f"  offloaded at close {sent['path']} -> {sent['destination']}  "
                  f"[{sent['state']}{', job ' + sent['job_id'] if sent['job_id'] else ''}]")
    return 0 if status.state not in ("failed", records.SUBMIT_FAILED, records.STAGE_IN_FAILED,
                                     records.STAGE_OUT_FAILED) else 1
