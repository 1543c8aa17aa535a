"""``scratchkeeper reproduce``: every sweep behind the replay figures and ``reproduction.rst``."""

from __future__ import annotations

import os
import sys
import time


def register(subparsers) -> None:
    reproduce = subparsers.add_parser(
        "reproduce", help="run every replay sweep behind the committed figures and write "
                          "reproduction.rst (the thesis's §4.7, claim by claim)",
        description="Measure the load factors that give the thesis's conditions, run every "
                    "sweep, draw the figures and write OUTPUT/reproduction.rst: each "
                    "quantitative claim of the thesis's §4.7, the thesis's value, ours under "
                    "the closest conditions, and whether the shape matches.")
    reproduce.add_argument("--output", required=True,
                           help="folder of the figures, results-*.csv, sweeps/ and the report")
    reproduce.add_argument("--work", default="",
                           help="folder of the task results (default OUTPUT/work); finished "
                                "tasks of the same settings found there are reused")
    reproduce.add_argument("--traces", default=os.environ.get("SCRATCHKEEPER_TRACES",
                                                             "../shared/traces"),
                           help="folder with RICC-2010-2.swf.gz and the LANL failure data "
                                "(default $SCRATCHKEEPER_TRACES, else ../shared/traces)")
    reproduce.add_argument("--quick", action="store_true",
                           help="the shipped 5,000-job excerpt and smaller grids (a minute)")
    reproduce.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                           help="local processes (default: every core)")
    reproduce.set_defaults(func=_reproduce)


def _reproduce(args) -> int:
    from ..errors import InputError
    from ..sim.reproduce import Setup, find_traces, reproduce

    if args.workers < 1:
        raise InputError(f"--workers must be >= 1, got {args.workers}")
    setup = Setup.quick_setup() if args.quick else Setup.full(*find_traces(args.traces))
    started = time.monotonic()

    def report(line: str) -> None:
        # One line per step, flushed: readable in a log file or a Slurm output as on a terminal.
        minutes = (time.monotonic() - started) / 60
        print(f"reproduce [{minutes:5.1f} min] {line}", file=sys.stderr, flush=True)

    outcome = reproduce(setup, args.output, work=args.work, workers=args.workers, report=report)
    print(os.path.join(outcome.output, "reproduction.rst"))
    return 0
