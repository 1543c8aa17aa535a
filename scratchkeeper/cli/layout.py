"""``scratchkeeper layout``: the layout paper's advice (``advise``) and the measurement of the
model's constants (``calibrate``)."""

from __future__ import annotations

import json
import os

from ..errors import InputError
from . import site_config


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "layout", help="layout advice: which stripe layout a job's reads or writes need",
        description="The layout paper's cost model of the 1-DV, 1-DH and 2-D layouts (docs/layout.rst).")
    commands = parser.add_subparsers(dest="layout_command", metavar="ACTION")
    commands.required = True

    advise = commands.add_parser(
        "advise", help="the modelled cost of each layout for a workload, the choice, and its "
                       "lfs setstripe command",
        description="Describe the workload by numbers (--procs, --per-node, --request-size, "
                    "--pattern, --shared/--per-process) or by a Darshan log of an earlier run "
                    "(--darshan LOG).")
    advise.add_argument("--darshan", metavar="LOG", help="a Darshan log of an earlier run "
                        "(needs PyDarshan: pip install 'scratchkeeper[darshan]')")
    advise.add_argument("--procs", metavar="P", help="I/O processes")
    advise.add_argument("--per-node", metavar="M", help="processes per client node (with "
                        "--darshan: needed unless the log has DXT traces naming hosts)")
    advise.add_argument("--request-size", metavar="S", help="bytes per request, e.g. 256K, 4M")
    advise.add_argument("--pattern", choices=("seq", "random"),
                        help="sequential (default) or random requests")
    sharing = advise.add_mutually_exclusive_group()
    sharing.add_argument("--shared", dest="shared", action="store_const", const=True,
                         help="all processes access one shared file")
    sharing.add_argument("--per-process", dest="shared", action="store_const", const=False,
                         help="each process accesses a file of its own")
    direction = advise.add_mutually_exclusive_group()
    direction.add_argument("--read", dest="operation", action="store_const", const="read",
                           help="reads (the default with numbers; with --darshan: its reads "
                                "only)")
    direction.add_argument("--write", dest="operation", action="store_const", const="write",
                           help="writes (with --darshan: its writes only)")
    advise.add_argument("--osts", metavar="N", help="OSTs (default: storage.ost_count of the "
                        "local store; needed with storage.backend = lustre)")
    advise.add_argument("--groups", metavar="G", help="storage groups g of the 2-D layout "
                        "(config: layout.groups; default: every g dividing N)")
    advise.add_argument("--target", metavar="PATH", help="the file (shared) or directory (file "
                        "per process) the lfs setstripe command names (default FILE or DIR)")
    advise.add_argument("--json", action="store_true", help="print JSON")
    advise.set_defaults(func=_advise)

    calibrate = commands.add_parser(
        "calibrate", help="measure the model's storage constants (alpha, beta) with fio in a "
                          "directory and print the [layout] keys",
        description="Runs fio (O_DIRECT, one request at a time) in DIR: 4 KiB sequential and "
                    "random reads give alpha, 1 MiB and 4 MiB reads and writes give beta. The "
                    "network constants e and v are not measured (kept from the site config). "
                    "In the scratch root the store's cache of the test file is dropped before "
                    "each read job (the local store's objects; Lustre: lfs ladvise -a "
                    "dontneed).")
    calibrate.add_argument("directory", metavar="DIR", help="a directory on the store to "
                           "measure (a Lustre test directory, the scratch mount)")
    calibrate.add_argument("--size", default="64M", help="test file size (default 64M; at "
                           "least 4M)")
    calibrate.add_argument("--buffered", action="store_true", help="through the page cache "
                           "(for a file system that refuses O_DIRECT; measures the cache too)")
    calibrate.add_argument("--fio", default="fio", help="the fio command (default: fio on PATH)")
    calibrate.add_argument("--output", metavar="FILE", help="also write the [layout] section "
                           "to FILE (a new file; copy it into the site configuration)")
    calibrate.add_argument("--json", action="store_true", help="print JSON")
    calibrate.set_defaults(func=_calibrate)


def _count(text: str | None, option: str, *, minimum: int = 1) -> int | None:
    """An option's whole number, or an InputError naming the option (one line, exit 2)."""
    if text is None:
        return None
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise InputError(f"{option} {text!r}: expected a whole number") from None
    if value < minimum:
        raise InputError(f"{option} {value}: expected at least {minimum}")
    return value


def _size(text: str | None, option: str) -> int | None:
    if text is None:
        return None
    from ..storage import parse_size

    try:
        value = parse_size(text)
    except InputError as err:
        raise InputError(f"{option}: {err}") from None
    if value < 1:
        raise InputError(f"{option} {text!r}: expected at least 1 byte")
    return value


def _workload(args):
    """The workload the options describe, and the Darshan facts beside it (or None)."""
    from ..advisor import RANDOM, READ, SEQUENTIAL, WRITE, Workload

    per_node = _count(args.per_node, "--per-node")
    if args.darshan is not None:
        given = [option for option, value in (("--procs", args.procs),
                                              ("--request-size", args.request_size),
                                              ("--pattern", args.pattern),
                                              ("--shared/--per-process", args.shared))
                 if value is not None]
        if given:
            raise InputError(f"{given[0]}: not with --darshan (the log says)")
        from ..advisor.darshan import read_workload

        operations = (args.operation,) if args.operation else (READ, WRITE)
        log = read_workload(args.darshan, per_node=per_node, operations=operations)
        if log.workload is None:
            raise InputError("the log records no hosts (no DXT traces): give --per-node M, "
                             "the processes per client node", path=args.darshan)
        return log.workload, log
    missing = [option for option, value in (("--procs", args.procs),
                                            ("--per-node", args.per_node),
                                            ("--request-size", args.request_size),
                                            ("--shared or --per-process", args.shared))
               if value is None]
    if missing:
        raise InputError(f"{missing[0]} is needed (or --darshan LOG)")
    processes = _count(args.procs, "--procs")
    if per_node > processes:
        raise InputError(f"--per-node {per_node}: more than the {processes} processes")
    return Workload.uniform(processes, per_node, _size(args.request_size, "--request-size"),
                            shared_file=args.shared,
                            operation=WRITE if args.operation == "write" else READ,
                            pattern=RANDOM if args.pattern == "random" else SEQUENTIAL), None


def _osts(args, config) -> tuple[int, str]:
    osts = _count(args.osts, "--osts")
    if osts is not None:
        return osts, "--osts"
    if config.storage.backend == "local":
        return config.storage.ost_count, "storage.ost_count"
    raise InputError("--osts N is needed: with storage.backend = lustre the OST count is not "
                     "in the site configuration (lfs df lists the OSTs)")


def _advise(args) -> int:
    from ..advisor import advise, params_from_config

    config = site_config(args)
    workload, log = _workload(args)
    osts, osts_from = _osts(args, config)
    groups = _count(args.groups, "--groups")
    if groups is None and config.layout.groups:
        groups = config.layout.groups
    if groups is not None and groups > osts:
        raise InputError(f"{'--groups' if args.groups else 'layout.groups'} {groups}: more "
                         f"than the {osts} OSTs")
    advice = advise(workload, params_from_config(config.layout), osts, groups=groups,
                    target=args.target)
    if args.json:
        print(json.dumps(_as_json(advice, workload, log, osts_from), indent=2))
    else:
        print(_as_text(advice, workload, log, osts_from))
    return 0


def _as_json(advice, workload, log, osts_from) -> dict:
    import dataclasses

    out = {
        "workload": {"processes": workload.processes,
                     "processes_per_node": workload.processes_per_node,
                     "shared_file": workload.shared_file, "requests": workload.requests,
                     "common_request_size": workload.common_request_size,
                     "accesses": [dataclasses.asdict(a) for a in workload.accesses]},
        "osts": advice.osts, "osts_from": osts_from,
        "params": dataclasses.asdict(advice.params),
        "estimates": [{"layout": e.layout, "groups": e.groups, "group_osts": e.group_osts,
                       "seconds": e.cost.total, **dataclasses.asdict(e.cost)}
                      for e in advice.estimates],
        "layout": advice.layout, "groups": advice.groups,
        "stripe_count": advice.stripe_count, "stripe_size": advice.stripe_size,
        "reason": advice.reason, "notes": list(advice.notes), "command": advice.command,
    }
    if log is not None:
        out["darshan"] = {"path": log.path, "nprocs": log.nprocs,
                          "io_processes": log.io_processes,
                          "processes_per_node_from_hosts": log.processes_per_node,
                          "files": log.files, "shared_files": log.shared_files,
                          "bytes_read": log.bytes_read, "bytes_written": log.bytes_written,
                          "recorded_stripe": (None if log.recorded_stripe is None else
                                              {"stripe_count": log.recorded_stripe[0],
                                               "stripe_size": log.recorded_stripe[1]})}
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.3f}"


def _as_text(advice, workload, log, osts_from) -> str:
    from ..advisor import format_size

    reads = sum(a.count for a in workload.accesses if a.operation == "read")
    writes = sum(a.count for a in workload.accesses if a.operation == "write")
    random = sum(a.count for a in workload.accesses if a.pattern == "random")
    lines = [f"workload: {workload.processes} processes, {workload.processes_per_node} per "
             f"node, {'one shared file' if workload.shared_file else 'a file per process'}; "
             f"{reads:,.0f} reads, {writes:,.0f} writes "
             f"({100 * random / workload.requests:.0f}% random), most requests "
             f"{format_size(workload.common_request_size)}"]
    if log is not None:
        recorded = (f"; the run had -c {log.recorded_stripe[0]} -S "
                    f"{format_size(log.recorded_stripe[1])}" if log.recorded_stripe else "")
        lines.append(f"log: {log.path}: nprocs {log.nprocs}, {log.files} data files "
                     f"({log.shared_files} shared), {log.bytes_read:,} bytes read, "
                     f"{log.bytes_written:,} written{recorded}")
    p = advice.params
    lines.append(f"model: e {p.e * 1e3:g} ms, network {1 / p.v / 1e6:g} MB/s, alpha "
                 f"{p.alpha_sequential * 1e3:g} ms sequential / {p.alpha_random * 1e3:g} ms "
                 f"random, OST {1 / p.beta_read / 1e6:g} MB/s read / {1 / p.beta_write / 1e6:g} "
                 f"MB/s write ({p.source})")
    lines.append(f"OSTs: {advice.osts} ({osts_from})")
    lines.append("")
    width = max(len(e.label) for e in advice.estimates)
    lines.append(f"{'layout':<{width}}  {'total ms':>12}  {'establish':>10}  {'transmit':>10}  "
                 f"{'start-up':>10}  {'disk I/O':>10}")
    for e in advice.estimates:
        mark = "  <- chosen" if e.layout == advice.layout else ""
        lines.append(f"{e.label:<{width}}  {_ms(e.cost.total):>12}  {_ms(e.cost.establish):>10}"
                     f"  {_ms(e.cost.transmission):>10}  {_ms(e.cost.startup):>10}  "
                     f"{_ms(e.cost.transfer):>10}{mark}")
    lines.append("")
    lines.append(f"choice: {advice.reason}")
    lines.append(f"stripe count {advice.stripe_count}, stripe size "
                 f"{format_size(advice.stripe_size)} (the layout paper's §4, "
                 f"{'one shared file' if advice.shared_file else 'a file per process'})")
    lines.extend(f"note: {note}" for note in advice.notes)
    lines.append(advice.command)
    return "\n".join(lines)


def _store_drop(config, directory: str):
    """The store's ``drop_cache`` when ``directory`` is inside the scratch root (the scratch
    mount, a Lustre directory): the calibration then reads from the disks, not the servers'
    cache. None for a directory elsewhere."""
    root = os.path.realpath(config.storage.scratch_root)
    real = os.path.realpath(directory)
    if real != root and not real.startswith(root.rstrip("/") + "/"):
        return None
    from ..storage import open_backend

    return open_backend(config).drop_cache


def _calibrate(args) -> int:
    import shlex

    from ..advisor.calibrate import calibrate

    config = site_config(args)
    size = _size(args.size, "--size")
    # the command that measured, as the site config records it (its options as parsed)
    command = shlex.join(["scratchkeeper", "layout", "calibrate", args.directory, "--size",
                          args.size, *(["--buffered"] if args.buffered else []),
                          *(["--fio", args.fio] if args.fio != "fio" else [])])
    if args.output is not None and os.path.lexists(args.output):
        raise InputError("exists already: the calibration is written to a new file",
                         path=args.output)
    result = calibrate(args.directory, fio=args.fio, size=size, direct=not args.buffered,
                       command=command, drop=_store_drop(config, args.directory))
    section = result.toml(connect_seconds=config.layout.connect_seconds,
                          network_bandwidth=config.layout.network_bandwidth)
    if args.output is not None:
        try:
            with open(args.output, "x") as stream:
                stream.write(section)
        except OSError as err:
            raise InputError(f"cannot write: {err.strerror}", path=args.output) from err
    if args.json:
        print(json.dumps({"startup_sequential_seconds": result.alpha_sequential,
                          "startup_random_seconds": result.alpha_random,
                          "read_bandwidth": result.read_bandwidth,
                          "write_bandwidth": result.write_bandwidth,
                          "latencies": result.latencies, "calibrated": result.calibrated},
                         indent=2))
    else:
        print("# mean seconds per request: " + ", ".join(
            f"{name} {seconds * 1e3:.3f} ms" for name, seconds in result.latencies.items()))
        print(section, end="")
    return 0
