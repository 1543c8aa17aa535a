"""The stripe layout a stage-in gives the files it creates (``#STAGEIN -layout ...``).

Directives (docs/directives.rst): ``-layout auto|1dv|1dh|2d``, ``-stripe-count N``,
``-stripe-size SIZE`` and, for ``auto``, the workload: ``-procs P``, ``-per-node M``,
``-request-size S``, ``-pattern seq|random``, ``-shared``/``-per-process`` or ``-darshan LOG``.
:func:`set_layout_option` checks one option as it is parsed; :func:`decide_layout` turns them,
once per plan, into a :class:`LayoutDecision`: the choice of the layout paper's model for ``auto``
(``scratchkeeper.advisor.advise``), the layout paper's §4 stripe settings of a named layout, with an
explicit ``-stripe-count``/``-stripe-size`` winning over both.
"""

from __future__ import annotations

import os
import re
from dataclasses import field

from ..config import STRIPE_COUNT_MAX, STRIPE_SIZE_MAX, STRIPE_UNIT, SiteConfig
from ..errors import DirectiveError, InputError
from ..structs import record

#: the directive's names of the layouts, and the model's
LAYOUT_NAMES = {"1dv": "1-DV", "1dh": "1-DH", "2d": "2-D"}
AUTO = "auto"
#: the options that describe the workload for ``-layout auto``
WORKLOAD_OPTIONS = ("procs", "per-node", "request-size", "pattern", "shared", "per-process",
                    "darshan")
OPTION_ARITY = {"layout": 1, "stripe-count": 1, "stripe-size": 1, "procs": 1, "per-node": 1,
                "request-size": 1, "pattern": 1, "shared": 0, "per-process": 0, "darshan": 1}
#: the request size a named layout's stripe settings assume when -request-size is not given
#: (Lustre's default stripe size: what most tools read at)
DEFAULT_REQUEST_SIZE = 1 << 20
#: bounds of -procs / -per-node (a plan-time sanity bound, far above any job's task count)
MAX_PROCS = 10_000_000
#: what the xattr ``user.scratchkeeper.layout`` holds at most of the reason
XATTR_REASON_MAX = 3000


@record
class LayoutOptions:
    """The layout options of the ``#STAGEIN`` option lines, as written (checked)."""

    layout: str | None = None        # "auto", "1dv", "1dh", "2d"
    stripe_count: int | None = None
    stripe_size: int | None = None
    procs: int | None = None
    per_node: int | None = None
    request_size: int | None = None
    pattern: str | None = None       # "sequential" or "random"
    shared: bool | None = None
    darshan: str | None = None       # absolute path

    @property
    def given(self) -> bool:
        return any(value is not None for value in vars(self).values())


@record(frozen=True)
class LayoutDecision:
    """The layout of the files a stage-in creates, and why.

    ``layout``: the model's name (``1-DV``, ``2-D``, ``1-DH``) or None where only
    ``-stripe-count``/``-stripe-size`` were given; ``estimates``: (label, modelled seconds) of
    each layout for ``auto``; ``notes``: what the stripe settings could not follow."""

    layout: str | None
    stripe_count: int
    stripe_size: int
    reason: str
    how: str  # "auto", "named" or "explicit"
    estimates: tuple[tuple[str, float], ...] = ()
    notes: tuple[str, ...] = field(default=())
    #: the workload ``auto`` was advised for (a ``scratchkeeper.advisor.Workload``): recorded so
    #: that a hybrid replica (``replication.hybrid``) can be laid out for it
    workload: object | None = None

    def xattr(self) -> str:
        """The value of ``user.scratchkeeper.layout``: ``1-DV count=8 size=1048576: reason``,
        with the workload (``workload=...``, ``scratchkeeper.advisor.hybrid``) before the colon
        where ``auto`` chose the layout."""
        head = f"{self.layout or 'explicit'} count={self.stripe_count} size={self.stripe_size}"
        if self.workload is not None:
            from ..advisor.hybrid import workload_text

            head += " " + workload_text(self.workload)
        return f"{head}: {self.reason}"[:XATTR_REASON_MAX]

    def to_dict(self) -> dict:
        return {"layout": self.layout, "stripe_count": self.stripe_count,
                "stripe_size": self.stripe_size, "reason": self.reason, "how": self.how,
                "estimates": [{"layout": label, "seconds": seconds}
                              for label, seconds in self.estimates],
                "notes": list(self.notes)}


def set_layout_option(options: LayoutOptions, name: str, value: str | None, cwd: str,
                      bad) -> None:
    """Check and keep one layout option; ``bad(expected)`` raises the directive's error."""
    if name == "layout":
        if value not in (AUTO, *LAYOUT_NAMES):
            bad("auto, 1dv, 1dh or 2d")
        options.layout = value
    elif name == "stripe-count":
        if not re.fullmatch(r"[0-9]{1,5}", value) or not 1 <= int(value) <= STRIPE_COUNT_MAX:
            bad(f"a stripe count from 1 to {STRIPE_COUNT_MAX}")
        options.stripe_count = int(value)
    elif name == "stripe-size":
        size = _size(value)
        if size is None or size % STRIPE_UNIT or not STRIPE_UNIT <= size <= STRIPE_SIZE_MAX:
            bad("a multiple of 64 KiB up to 4 GiB - 64 KiB, like 1M or 192K")
        options.stripe_size = size
    elif name in ("procs", "per-node"):
        if not re.fullmatch(r"[0-9]{1,8}", value) or not 1 <= int(value) <= MAX_PROCS:
            bad(f"a whole number of processes from 1 to {MAX_PROCS}")
        setattr(options, name.replace("-", "_"), int(value))
    elif name == "request-size":
        size = _size(value)
        if size is None or size < 1:
            bad("bytes with an optional K, M or G, like 4K or 1M")
        options.request_size = size
    elif name == "pattern":
        if value not in ("seq", "random"):
            bad("seq or random")
        options.pattern = "sequential" if value == "seq" else "random"
    elif name in ("shared", "per-process"):
        if options.shared is not None:
            bad("one of -shared and -per-process, not both")
        options.shared = name == "shared"
    elif name == "darshan":
        if not value or "\x00" in value:
            bad("the path of a Darshan log")
        options.darshan = os.path.normpath(os.path.join(cwd, os.path.expanduser(value)))


def _size(text: str) -> int | None:
    from ..storage.layout import parse_size

    try:
        return parse_size(text)
    except InputError:
        return None


def check_layout_options(options: LayoutOptions, lines: dict[str, int], error) -> None:
    """What the options mean together; ``error(message, line)`` makes the directive's error."""
    for name in sorted((n for n in WORKLOAD_OPTIONS if n in lines), key=lines.get):
        named = name in ("request-size", "shared", "per-process")
        if options.layout == AUTO or (named and options.layout is not None):
            continue
        raise error(f"#STAGEIN: -{name} describes the workload for -layout auto"
                    + (" or a named layout" if named else "") + "; give -layout with it",
                    lines[name])
    if options.darshan is not None:
        for name in ("procs", "request-size", "pattern", "shared", "per-process"):
            if name in lines:
                raise error(f"#STAGEIN: -{name}: not with -darshan (the log says)", lines[name])


def decide_layout(options: LayoutOptions, lines: dict[str, int], compute_job: dict[str, str],
                  config: SiteConfig, script: str) -> tuple[LayoutDecision | None, str | None]:
    """The stage-in's layout, or (None, why none) where the options ask for one the plan
    cannot give (Lustre without an OST count); (None, None) where no layout option is given.

    Every error is a :class:`DirectiveError` naming ``script`` and the option's line.
    """
    if not options.given:
        return None, None
    line = lines.get("layout") or min(lines[name] for name in lines if name in OPTION_ARITY)

    def error(message: str, at: int | None = None) -> DirectiveError:
        return DirectiveError(message, path=script, line=at or line)

    osts = _ost_count(options, config)
    if options.layout is None:
        # only -stripe-count / -stripe-size: the user's layout, no model
        count = options.stripe_count or (osts if osts is not None else 1)
        size = options.stripe_size or DEFAULT_REQUEST_SIZE
        return LayoutDecision(None, count, size, "given by -stripe-count/-stripe-size",
                              "explicit"), None
    if osts is None:
        return None, ("storage.backend = lustre: the OST count is not known at plan time, so "
                      f"-layout {options.layout} is not applied; give -stripe-count N (the OSTs "
                      "to stripe over, lfs df lists them) to apply it")
    from ..advisor import advise, params_from_config, stripe_settings

    if options.layout == AUTO:
        workload = _workload(options, lines, compute_job, error)
        groups = config.layout.groups or None
        if groups is not None and groups > osts:
            groups = None  # a site's g for more OSTs than this stripe count: every g is tried
        try:
            advice = advise(workload, params_from_config(config.layout), osts, groups=groups)
        except InputError as err:
            raise error(f"#STAGEIN: -layout auto: {err}") from err
        decision = LayoutDecision(advice.layout, advice.stripe_count, advice.stripe_size,
                                  advice.reason, AUTO,
                                  tuple((e.label, e.cost.total) for e in advice.estimates),
                                  advice.notes, workload)
    else:
        layout = LAYOUT_NAMES[options.layout]
        request_size = options.request_size or DEFAULT_REQUEST_SIZE
        shared = options.shared if options.shared is not None else True
        groups = None
        if layout == "2-D":
            from ..advisor.model import group_choices

            choices = group_choices(osts)
            groups = config.layout.groups or (choices[0] if choices else None)
            if groups is None or groups > osts:
                raise error(f"#STAGEIN: -layout 2d: {osts} OSTs cannot be split into groups "
                            "evenly (set layout.groups, or choose 1dv or 1dh)")
        count, size, notes = stripe_settings(layout, request_size, osts, shared, groups)
        from ..advisor import format_size

        reason = (f"{layout} as the script asks (-layout {options.layout}), the layout paper's §4 "
                  f"for {'one shared file' if shared else 'a file per process'} read in "
                  f"{format_size(request_size)} requests on {osts} OSTs"
                  + (f" in {groups} groups" if groups else ""))
        decision = LayoutDecision(layout, count, size, reason, "named", notes=notes)
    overrides = []
    # on Lustre -stripe-count is the model's OST count, already in the decision
    if options.stripe_count is not None and options.stripe_count != decision.stripe_count \
            and config.storage.backend == "local":
        overrides.append(f"-stripe-count {options.stripe_count}")
    if options.stripe_size is not None and options.stripe_size != decision.stripe_size:
        overrides.append(f"-stripe-size {options.stripe_size}")
    if overrides:
        count = options.stripe_count if options.stripe_count is not None else \
            decision.stripe_count
        size = options.stripe_size if options.stripe_size is not None else decision.stripe_size
        decision = LayoutDecision(decision.layout, count, size,
                                  decision.reason + "; overridden by " + ", ".join(overrides),
                                  decision.how, decision.estimates, decision.notes,
                                  decision.workload)
    return decision, None


def _ost_count(options: LayoutOptions, config: SiteConfig) -> int | None:
    """The OSTs the model spreads over: the local store's; on Lustre the -stripe-count given
    (the plan cannot ask the file system), else None."""
    if config.storage.backend == "local":
        return config.storage.ost_count
    return options.stripe_count


def _workload(options: LayoutOptions, lines: dict[str, int], compute_job: dict[str, str],
              error):
    """The workload ``-layout auto`` is advised for: from -darshan, else from -procs etc.
    and the compute job's task counts. A stage-in stages what the job reads: reads."""
    from ..advisor import READ, SEQUENTIAL, Workload

    def header_count(key: str, what: str) -> int | None:
        # a count of 0 in the job's header (--nodes=0, ppn=0) is no count to divide by
        text = compute_job.get(key)
        if text is None:
            return None
        if int(text) < 1:
            raise error(f"#STAGEIN: -layout auto: the job asks for {text} {what} in its "
                        f"#SBATCH/#PBS header; the model needs at least 1 (give -procs and "
                        "-per-node to describe the workload)")
        return int(text)

    per_node = options.per_node
    if per_node is None:
        per_node = header_count("ntasks_per_node", "tasks per node")
    if options.darshan is not None:
        from ..advisor.darshan import read_workload

        try:
            log = read_workload(options.darshan, per_node=per_node, operations=(READ,))
        except InputError as err:
            raise error(f"#STAGEIN: -darshan {options.darshan}: {err}",
                        lines["darshan"]) from err
        if log.workload is None:
            raise error(f"#STAGEIN: -darshan {options.darshan}: the log records no hosts (no "
                        "DXT traces): give -per-node M or the job's --ntasks-per-node",
                        lines["darshan"])
        return log.workload
    procs = options.procs
    if procs is None:
        procs = header_count("ntasks", "tasks")
        if procs is None:
            raise error("#STAGEIN: -layout auto needs the job's task count: give --ntasks "
                        "(or -n, PBS -l nodes=N:ppn=M) or -procs")
    if per_node is None:
        # no per-node count anywhere: the tasks over the job's nodes, else all on one node
        nodes = header_count("nodes", "nodes") or 1
        per_node = -(-procs // nodes)
    if per_node > procs:
        raise error(f"#STAGEIN: -layout auto: {per_node} processes per node is more than the "
                    f"{procs} processes", lines.get("per-node"))
    shared = options.shared if options.shared is not None else True
    try:
        return Workload.uniform(procs, per_node, options.request_size or DEFAULT_REQUEST_SIZE,
                                shared_file=shared, operation=READ,
                                pattern=options.pattern or SEQUENTIAL)
    except InputError as err:
        raise error(f"#STAGEIN: -layout auto: {err}") from err
