"""Every benchmark, one after another, each in a fresh process (``make bench``).

    .venv/bin/python -m benchmarks.run [--quick] [--only NAME ...]

Each benchmark writes its own report under docs/benchmarks/NAME/ and measures its peers in the
same run; this only runs them in order, prints a line as each starts and ends, and exits 1 if
any failed. The ones that need the local cluster (``scripts/local-cluster up``) are run only
when it is up, and are named as not run otherwise, never counted as passed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from benchmarks.harness import REPO, cluster_up

#: name, whether it takes --quick, whether it needs the local cluster
BENCHMARKS = (
    ("solver", True, False),
    ("planner", True, False),
    ("replication", True, False),
    ("replay", True, False),
    ("replay_speed", True, False),
    ("jit", True, False),
    ("recovery", True, True),
    ("load", False, True),
    ("hosts", False, True),
    ("mount", True, False),
    ("mount.passthrough", True, False),
    ("dispatch", True, False),
    ("mount_recovery", True, True),
    ("qos", True, False),
    ("qos_mount", True, False),
    ("placement", True, False),
    ("tiering", True, False),
    ("layout", True, False),
    ("layout.hybrid", True, False),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="each benchmark's quick form")
    parser.add_argument("--only", nargs="+", choices=[b[0] for b in BENCHMARKS], metavar="NAME",
                        help="run only these (" + ", ".join(b[0] for b in BENCHMARKS) + ")")
    args = parser.parse_args(argv)
    chosen = [b for b in BENCHMARKS if not args.only or b[0] in args.only]
    failed, not_run = [], []
    for number, (name, takes_quick, needs_cluster) in enumerate(chosen, 1):
        if needs_cluster and not cluster_up():
            print(f"bench [{number}/{len(chosen)}] {name}: not run (needs the local cluster: "
                  "make cluster)", flush=True)
            not_run.append(name)
            continue
        argv_ = [sys.executable, "-m", f"benchmarks.{name}"]
        if args.quick and takes_quick:
            argv_.append("--quick")
        print(f"bench [{number}/{len(chosen)}] {name}: {' '.join(argv_[1:])}", flush=True)
        started = time.monotonic()
        code = subprocess.call(argv_, cwd=REPO)
        seconds = time.monotonic() - started
        print(f"bench [{number}/{len(chosen)}] {name}: {'ok' if code == 0 else f'exit {code}'} "
              f"in {seconds:.0f} s", flush=True)
        if code != 0:
            failed.append(name)
    print(f"bench: {len(chosen) - len(failed) - len(not_run)} ran, {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else "")
          + (f", {len(not_run)} not run ({', '.join(not_run)})" if not_run else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
