"""``scratchkeeper store``: use the storage backend by hand (put, get, layout, df, fail an OST...)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from ..errors import InputError
from . import site_config

if TYPE_CHECKING:
    from ..storage import LayoutRequest

COPY_CHUNK = 4 << 20


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "store", help="use the storage backend: put, get, cat, layout, df, ls, rm, fail-ost...",
        description="Work with files of the storage backend named by storage.backend.")
    commands = parser.add_subparsers(dest="store_command", metavar="ACTION")
    commands.required = True
    # in this order, the order `scratchkeeper store --help` lists them in
    _add_copy_actions(commands)
    _add_file_actions(commands)
    _add_store_actions(commands)


def _add_copy_actions(commands) -> None:
    """Bytes in and out of the store: put, import, get, cat."""
    put = commands.add_parser("put", help="copy a local file into the store with a layout")
    put.add_argument("local", metavar="LOCAL")
    put.add_argument("path", metavar="PATH", help="scratch path (relative: below storage.scratch_root)")
    _layout_options(put)
    put.set_defaults(func=_put)

    imp = commands.add_parser("import", help="make the POSIX file a data job wrote at PATH a "
                                             "managed file")
    imp.add_argument("path", metavar="PATH")
    imp.add_argument("--stripe-count", type=int, help="stripe count (config: storage.stripe_count)")
    imp.add_argument("--stripe-size", type=_argument("parse_size"), help="stripe size, e.g. 1M "
                                                            "(config: storage.stripe_size)")
    imp.set_defaults(func=_import)

    get = commands.add_parser("get", help="copy a stored file to a local file")
    get.add_argument("path", metavar="PATH")
    get.add_argument("local", metavar="LOCAL")
    get.set_defaults(func=_get)

    cat = commands.add_parser("cat", help="write a stored file to standard output")
    cat.add_argument("path", metavar="PATH")
    cat.set_defaults(func=_cat)


def _add_file_actions(commands) -> None:
    """Looking at and changing files: layout, df (the OSTs they are on), ls, rm, mirrors,
    extended attributes, default layouts."""
    layout = commands.add_parser("layout", help="show a file's layout, or a directory's default "
                                                "(like lfs getstripe)")
    layout.add_argument("path", metavar="PATH")
    layout.add_argument("--json", action="store_true")
    layout.set_defaults(func=_layout)

    # -h is lfs df's (and df's) human-readable switch, so help is --help alone here
    df = commands.add_parser("df", help="list OSTs with state and space (like lfs df)",
                             add_help=False)
    df.add_argument("--help", action="help", help="show this help message and exit")
    df.add_argument("--json", action="store_true")
    df.add_argument("-h", "--human-readable", action="store_true",
                    help="sizes in powers of 1024 (44.6M, 1.1T), in lfs df -h's columns, with "
                         "the filesystem_summary line")
    df.add_argument("--check", type=float, metavar="TIMEOUT",
                    help="probe every OST at once first, waiting at most TIMEOUT seconds "
                         "(config: recovery.probe_timeout)")
    df.set_defaults(func=_df)

    ls = commands.add_parser("ls", help="list a scratch directory of the store")
    ls.add_argument("path", metavar="PATH", nargs="?", default="")
    ls.set_defaults(func=_ls)

    rm = commands.add_parser("rm", help="remove a stored file")
    rm.add_argument("path", metavar="PATH")
    rm.set_defaults(func=_rm)

    mirror = commands.add_parser("mirror", help="add a verified mirror on distinct OSTs")
    mirror.add_argument("path", metavar="PATH")
    _layout_options(mirror)
    mirror.set_defaults(func=_mirror)

    unmirror = commands.add_parser("unmirror", help="remove one mirror of a file")
    unmirror.add_argument("path", metavar="PATH")
    unmirror.add_argument("mirror_id", metavar="MIRROR_ID", type=int)
    unmirror.set_defaults(func=_unmirror)

    xattr = commands.add_parser("xattr", help="show, set or remove extended attributes")
    xattr.add_argument("path", metavar="PATH")
    xattr.add_argument("--set", nargs=2, metavar=("NAME", "VALUE"))
    xattr.add_argument("--remove", metavar="NAME")
    xattr.set_defaults(func=_xattr)

    setstripe = commands.add_parser("setstripe", help="local store only: set a directory's "
                                                      "default layout (like lfs setstripe DIR); "
                                                      "a user on their own files only")
    setstripe.add_argument("path", metavar="DIR")
    setstripe.add_argument("--stripe-count", "-c", type=int,
                           help="number of OSTs, -1 for all (config: storage.stripe_count)")
    setstripe.add_argument("--stripe-size", "-S", type=_argument("parse_size"),
                           help="bytes per stripe, e.g. 1M (config: storage.stripe_size)")
    setstripe.add_argument("--pool", "-p", help="OST pool (config: storage.pools)")
    setstripe.add_argument("--file", action="store_true",
                           help="make PATH an empty file with this layout instead (as lfs "
                                "setstripe does on a path that does not exist), replacing a "
                                "store file there; a transfer writing PATH keeps the layout")
    setstripe.set_defaults(func=_setstripe)


def _add_store_actions(commands) -> None:
    """The store as a whole: garbage, replication by a QoS scheme, counters, placement, and
    failing an OST by hand."""
    gc = commands.add_parser("gc", help="local store only: collect garbage (objects of dead "
                                        "processes, doomed objects, staging inodes)")
    gc.set_defaults(func=_gc)

    replicate = commands.add_parser(
        "replicate", help="give a plain file its copies by a read-QoS scheme (the flash QoS paper): "
                          "design-theoretic, RAID-1 mirrored or chained",
        description="Add the c - 1 mirrors of a plain striped file so that stripe k's copies "
                    "are the devices of one bucket of the scheme (docs/qos.rst).")
    replicate.add_argument("path", metavar="PATH")
    replicate.add_argument("--scheme", choices=("design", "mirrored", "chained"),
                           default="design")
    replicate.add_argument("--copies", type=int, help="c (config: qos.copies)")
    replicate.add_argument("--pool", help="the devices are this pool's OSTs (default: every OST)")
    replicate.set_defaults(func=_replicate)

    stats = commands.add_parser("stats", help="the scratch mount's counters: read QoS "
                                              "(admitted, delayed, violations) and read "
                                              "dispatch")
    stats.add_argument("--json", action="store_true")
    stats.set_defaults(func=_stats)

    placement = commands.add_parser("placement", help="local store only: objects and bytes "
                                                      "per performance class, pool and OST")
    placement.add_argument("--json", action="store_true")
    placement.set_defaults(func=_placement)

    rebalance = commands.add_parser("rebalance", help="local store only: move the objects "
                                                      "SUORA now places on other OSTs (OSTs "
                                                      "added or failed)")
    rebalance.add_argument("--dry-run", action="store_true",
                           help="only show what would move")
    rebalance.add_argument("--quiet", type=float, default=60.0, metavar="SECONDS",
                           help="leave files written less than this long ago (in use; 60)")
    rebalance.add_argument("--json", action="store_true")
    rebalance.set_defaults(func=_rebalance)

    for action, helptext in (("fail-ost", "take an OST down: its objects become unreadable"),
                             ("restore-ost", "bring a failed OST back")):
        sub = commands.add_parser(action, help=f"local store only: {helptext}")
        sub.add_argument("ost_index", metavar="N", type=int)
        sub.set_defaults(func=_fail_ost if action == "fail-ost" else _restore_ost)


def _argument(name: str):
    """Turn ``storage``'s parser ``name`` (raising InputError) into an argparse type (exit 2
    with argparse's message); the storage package is imported when an option uses it."""
    def convert(text: str):
        from .. import storage

        try:
            return getattr(storage, name)(text)
        except InputError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    convert.__name__ = name
    return convert


def _layout_options(parser) -> None:
    parser.add_argument("--stripe-count", "-c", type=int,
                        help="number of OSTs, -1 for all (config: storage.stripe_count)")
    parser.add_argument("--stripe-size", "-S", type=_argument("parse_size"),
                        help="bytes per stripe, e.g. 1M (config: storage.stripe_size)")
    parser.add_argument("--ost-list", "-o", type=_argument("parse_ost_list"),
                        help="explicit OSTs, e.g. 1,3,5-7")
    parser.add_argument("--pool", "-p", help="OST pool (config: storage.pools)")


def _request(args) -> LayoutRequest:
    from ..storage import LayoutRequest

    request = LayoutRequest(stripe_count=args.stripe_count, stripe_size=args.stripe_size,
                            ost_list=args.ost_list, pool=args.pool)
    request.check()
    return request


def _backend(args):
    from ..storage import open_backend

    return open_backend(site_config(args))


def _put(args) -> int:
    backend = _backend(args)
    request = _request(args)
    # a regular file only, checked on the opened descriptor; read as the size it had then
    from ..storage.sources import open_regular

    fd, info = open_regular(args.local)
    try:
        layout = backend.put_file(args.path, fd, info.st_size, request, label=args.local)
    finally:
        os.close(fd)
    print(f"{layout.path}: {info.st_size} bytes on OSTs {','.join(map(str, layout.ost_list))}")
    return 0


def _import(args) -> int:
    layout = _backend(args).import_file(args.path, stripe_count=args.stripe_count,
                                        stripe_size=args.stripe_size)
    print(f"{layout.path}: imported on OSTs {','.join(map(str, layout.ost_list))}")
    return 0


def _get(args) -> int:
    backend = _backend(args)
    chunks = backend.open_reader(args.path, chunk_size=COPY_CHUNK)
    # the first chunk before any local file: a file the caller may not read is refused as
    # such, and leaves nothing behind
    first = next(chunks, b"")
    temp = f"{args.local}.part-{os.getpid()}"
    try:
        with open(temp, "wb") as target:
            target.write(first)
            for chunk in chunks:
                target.write(chunk)
    except OSError as err:
        _unlink_quietly(temp)
        raise InputError(f"cannot write: {err.strerror}", path=args.local) from None
    except BaseException:
        _unlink_quietly(temp)
        raise
    os.replace(temp, args.local)
    return 0


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _cat(args) -> int:
    backend = _backend(args)
    out = sys.stdout.buffer
    for chunk in backend.open_reader(args.path, chunk_size=COPY_CHUNK):
        out.write(chunk)
    out.flush()
    return 0


def _layout(args) -> int:
    backend = _backend(args)
    if hasattr(backend, "default_layout") and backend.is_dir(args.path):
        return _dir_layout(args, backend)
    layout = backend.layout(args.path)
    info = backend.stat(layout.path)
    if args.json:
        print(json.dumps(dict(layout.to_dict(), size=info.size), indent=2))
        return 0
    print(layout.path)
    print(f"  size:          {info.size}")
    print(f"  layout_gen:    {layout.layout_gen}")
    print(f"  mirror_count:  {len(layout.mirror_ids)}")
    for comp in layout.components:
        end = "EOF" if comp.extent_end is None else comp.extent_end
        print(f"  component {comp.comp_id} (mirror {comp.mirror_id}) [{comp.extent_start}, {end})")
        print(f"    stripe_count: {comp.stripe_count}  stripe_size: {comp.stripe_size}  "
              f"pool: {comp.pool or '-'}  flags: {comp.flags}")
        print("    obdidx  object")
        for obj in comp.objects:
            print(f"    {obj.ost_index:6d}  {obj.object_id}")
    return 0


def _dir_layout(args, backend) -> int:
    """A directory's default layout, as ``lfs getstripe DIR`` shows it."""
    full = backend.paths.resolve(args.path)
    default = backend.default_layout(full)
    if args.json:
        print(json.dumps({"path": full, "directory": True, "default": None if default is None
                          else {"stripe_count": default.stripe_count,
                                "stripe_size": default.stripe_size, "pool": default.pool}},
                         indent=2))
        return 0
    print(full)
    if default is None:
        print(f"  no default layout (new files take the site's: stripe_count: "
              f"{backend.default_stripe_count}  stripe_size: {backend.default_stripe_size})")
    else:
        print(f"  stripe_count: {default.stripe_count}  stripe_size: {default.stripe_size}  "
              f"pool: {default.pool or '-'}")
    return 0


def _setstripe(args) -> int:
    from ..storage.layout import DirDefault

    backend = _local_store(args)
    request = _request(argparse.Namespace(stripe_count=args.stripe_count,
                                          stripe_size=args.stripe_size, ost_list=None,
                                          pool=args.pool))
    default = DirDefault(
        backend.default_stripe_count if request.stripe_count is None else request.stripe_count,
        backend.default_stripe_size if request.stripe_size is None else request.stripe_size,
        request.pool)
    if backend.through_mount:
        # a plain user (a stage-in's data job): on their own file or directory, through the
        # scratch mount, which checks owner, emptiness and the store's limits (docs/storage.rst)
        full = backend.paths.resolve(args.path)
        backend.lay_out_through_mount(full, default, file=args.file)
        if args.file:
            return _print_layout(backend, args.path)
        print(f"{full}: {default.to_xattr().decode()}")
        return 0
    if args.file:
        return _setstripe_file(backend, args.path, request)
    backend.set_default_layout(args.path, default)
    print(f"{backend.paths.resolve(args.path)}: {default.to_xattr().decode()}")
    return 0


def _print_layout(backend, path: str) -> int:
    layout = backend.layout(path)
    print(f"{backend.paths.resolve(path)}: stripe count {layout.stripe_count}, stripe size "
          f"{layout.stripe_size}, OSTs {','.join(map(str, layout.ost_list))}")
    return 0


def _setstripe_file(backend, path: str, request) -> int:
    """An empty store file with ``request``'s layout at ``path`` (a stage-in's, before its
    transfer writes the data: the import takes the empty file's layout)."""
    full = backend.paths.resolve(path)
    if os.path.lexists(full) and not os.path.isfile(full):
        raise InputError(f"{full}: exists and is not a regular file")
    if backend.exists(path):
        if backend.is_dir(path):
            raise InputError(f"{full}: is a directory")
        backend.remove(path)  # a re-staged input: the transfer overwrites it whole anyway
    backend.create(path, request)
    return _print_layout(backend, path)


def _gc(args) -> int:
    backend = _local_store(args)
    # opening the store collects first: that counts too
    report = backend.garbage_collected_at_open().merged(backend.collect_garbage())
    for obj in report.deleted:
        print(f"deleted object {obj.object_id} on OST {obj.ost_index}")
    for obj in report.released:
        print(f"released the intent of object {obj.object_id} on OST {obj.ost_index} "
              "(committed)")
    for name in report.staging:
        print(f"removed staging entry {name}")
    print(report.summary())
    return 0


def _df(args) -> int:
    backend = _backend(args)
    osts = backend.check_osts(args.check) if args.check is not None else backend.list_osts()
    if args.json:
        print(json.dumps([o.to_dict() for o in osts], indent=2))
        return 0
    if args.human_readable:
        from ..storage.df import human_lines
        from ..storage.local import LocalStripedStore

        # the local store's OSTs are directories of one file system: its size counts once
        print("\n".join(human_lines(osts, backend.scratch_root,
                                     shared_space=isinstance(backend, LocalStripedStore))))
        return 0 if all(o.healthy for o in osts) or args.check is None else 1
    print(f"{'OST':>5} {'name':24} {'state':12} {'used':>14} {'available':>16}  detail")
    for ost in osts:
        used = "-" if ost.used_bytes is None else str(ost.used_bytes)
        avail = "-" if ost.available_bytes is None else str(ost.available_bytes)
        print(f"{ost.ost_index:5d} {ost.name:24} {ost.state:12} {used:>14} {avail:>16}  "
              f"{ost.detail}")
    return 0 if all(o.healthy for o in osts) or args.check is None else 1


def _ls(args) -> int:
    for name in _backend(args).list_dir(args.path):
        print(name)
    return 0


def _rm(args) -> int:
    _backend(args).remove(args.path)
    return 0


def _mirror(args) -> int:
    layout = _backend(args).add_mirror(args.path, _request(args))
    newest = max(layout.mirror_ids)
    print(f"{layout.path}: mirror {newest} on OSTs "
          f"{','.join(str(i) for i in sorted(layout.osts(newest)))}")
    return 0


def _unmirror(args) -> int:
    layout = _backend(args).remove_mirror(args.path, args.mirror_id)
    print(f"{layout.path}: mirrors {','.join(map(str, layout.mirror_ids))} left")
    return 0


def _xattr(args) -> int:
    backend = _backend(args)
    if args.set:
        backend.set_xattr(args.path, args.set[0], os.fsencode(args.set[1]))
    if args.remove:
        backend.remove_xattr(args.path, args.remove)
    for name, value in backend.list_xattrs(args.path).items():
        print(f"{name}={value.decode('utf-8', 'backslashreplace')}")
    return 0


def _local_store(args):
    backend = _backend(args)
    if not hasattr(backend, "fail_ost"):
        what = ("can fail or restore an OST" if args.store_command in ("fail-ost", "restore-ost")
                else "has this command")
        raise InputError(f"{args.store_command}: only the local store {what} "
                         f"(storage.backend is {backend.name!r})")
    return backend


def _count_hot(args, rows: list[dict]) -> str:
    """Fill each row's hot objects from tierd's counters; what was counted, or why not (then
    they stay null: unknown, not zero)."""
    from ..errors import ScratchkeeperError

    config = site_config(args)
    if len(config.storage.tier_order) < 2:
        return "hot objects: not counted (no two performance classes: tierd does not run)"
    try:
        from ..tiering.daemon import hot_objects_by_ost

        hot = hot_objects_by_ost(config)
    except ScratchkeeperError as err:
        return f"hot objects: not counted ({err})"
    for row in rows:
        row["hot_objects"] = hot.get(row["ost_index"], 0)
    return (f"hot objects: files tierd counts at least {config.tiering.hot_reads} reads "
            f"(half-life {config.tiering.half_life:g} s) with a stripe on the OST")


def _replicate(args) -> int:
    from ..qos.files import replicate

    config = site_config(args)
    backend = _backend(args)
    copies = config.qos.copies if args.copies is None else args.copies
    if copies < 2:
        raise InputError(f"--copies: expected 2 or more, got {copies}")
    if args.pool is not None:
        if args.pool not in getattr(backend, "pools", {}):
            raise InputError(f"--pool {args.pool!r}: no such pool of the store")
        osts = list(backend.pools[args.pool])
    else:
        osts = [o.ost_index for o in backend.list_osts()]
    layout = replicate(backend, args.path, osts, scheme=args.scheme, copies=copies)
    for mirror_id in layout.mirror_ids:
        print(f"mirror {mirror_id}: OSTs {','.join(map(str, layout.mirror(mirror_id)[0].ost_list))}")
    return 0


def _stats(args) -> int:
    """The counters the mount serving the scratch root answers as attributes of its root."""
    config = site_config(args)
    root = config.storage.scratch_root
    found = {}
    for key, name in (("qos", "user.scratchkeeper.qos"),
                      ("dispatch", "user.scratchkeeper.dispatch")):
        try:
            found[key] = json.loads(os.getxattr(root, name))
        except OSError as err:
            raise InputError(f"store stats: {root} answers no {name} ({err.strerror}): is the "
                             "scratch mount serving it? (scratchkeeper mount)") from None
    if args.json:
        print(json.dumps(found, indent=2, sort_keys=True))
        return 0
    qos = found["qos"]
    if qos["mode"] == "off":
        print("read QoS: off (qos.admission)")
    else:
        print(f"read QoS: {qos['mode']}, c = {qos['copies']}, M = {qos['accesses']}, "
              f"T = {qos['interval']:g} s, S = {qos['limit']} pieces per interval"
              + (f", epsilon {qos['epsilon']:g}" if qos["mode"] == "statistical" else "")
              + f", {qos.get('retrieval', 'online')} retrieval")
        print(f"  admitted {qos['admitted']} request(s) ({qos['admitted_buckets']} pieces), "
              f"delayed {qos['delayed']}, violations {qos['violations']} of "
              f"{qos['busy_intervals']} busy interval(s), risk {qos['risk']:.4f}; "
              f"{qos['bypassed']} read(s) not under QoS")
    dispatch = found["dispatch"]
    print(f"read dispatch: {dispatch['policy']}, {dispatch['requests']} request(s), "
          f"{dispatch['fallbacks']} fallback(s); {dispatch.get('striped', 0)} striped "
          "request(s) of unmirrored files read over their objects in parallel")
    return 0


def _placement(args) -> int:
    backend = _local_store(args)
    rows = backend.placement_report()
    note = _count_hot(args, rows)
    if args.json:
        print(json.dumps({"placement": backend.placement, "hot_objects": note, "osts": rows},
                         indent=2))
        return 0
    print(f"placement: {backend.placement}; {note}")
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        for pool in row["pools"] or ["-"]:
            groups.setdefault((row["tier"] or "-", pool), []).append(row)
    print(f"{'class':10} {'pool':12} {'OST':>5} {'state':8} {'objects':>9} {'bytes':>14} "
          f"{'hot':>6}")
    for (tier, pool), members in sorted(groups.items()):
        for row in members:
            hot = "-" if row["hot_objects"] is None else str(row["hot_objects"])
            print(f"{tier:10} {pool:12} {row['ost_index']:5d} {row['state']:8} "
                  f"{row['objects']:9d} {row['bytes']:14d} {hot:>6}")
        print(f"{tier:10} {pool:12} {'all':>5} {'':8} "
              f"{sum(r['objects'] for r in members):9d} {sum(r['bytes'] for r in members):14d}")
    return 0


def _rebalance(args) -> int:
    backend = _local_store(args)
    if args.quiet < 0:
        raise InputError(f"--quiet: expected seconds >= 0, got {args.quiet:g}")
    found = backend.rebalance_plan()
    if not args.dry_run:
        return _move(args, backend, found)
    plan = found.to_dict()
    if args.json:
        print(json.dumps(plan, indent=2))
        return 0
    for move in plan["moves"]:
        print(f"{move['path']}: OSTs {','.join(map(str, move['current_osts']))} -> "
              f"{','.join(map(str, move['placed_osts']))} ({move['objects']} object(s), "
              f"{move['bytes']} bytes)")
    print(f"{plan['files_to_move']} of {plan['files_checked']} file(s) placed by SUORA would "
          f"move: {plan['objects_to_move']} object(s), {plan['bytes_to_move']} bytes "
          f"({plan['files_not_suora']} file(s) not placed by SUORA left where they are)")
    return 0


def _move(args, backend, plan) -> int:
    """Carry the plan out, a line per file as it goes; exit 1 if a move failed."""
    total = len(plan.moves)

    def progress(move, state):
        if not args.json:
            done = progress.count = getattr(progress, "count", 0) + 1
            print(f"[{done}/{total}] {move.path}: {state}", flush=True)
    results = backend.rebalance(plan, quiet=args.quiet, progress=progress)
    counts = {state: sum(r["state"] == state for r in results)
              for state in ("moved", "skipped", "failed")}
    if args.json:
        print(json.dumps({**counts, "files_checked": plan.files_checked, "moves": results},
                         indent=2))
    else:
        for result in results:
            if result["state"] != "moved":
                print(f"{result['path']}: {result['state']}: {result['detail']}")
        print(f"{counts['moved']} file(s) moved "
              f"({sum(r['bytes'] for r in results if r['state'] == 'moved')} bytes), "
              f"{counts['skipped']} skipped, {counts['failed']} failed, of "
              f"{plan.files_checked} placed by SUORA")
    return 1 if counts["failed"] else 0


def _fail_ost(args) -> int:
    _local_store(args).fail_ost(args.ost_index)
    return 0


def _restore_ost(args) -> int:
    _local_store(args).restore_ost(args.ost_index)
    return 0

