"""pjdfstest's whole suite on bindfs and on the scratch mount, same run (``make conformance``).

    .venv/bin/python -m benchmarks.mount.conformance [--subset] [--workdir DIR]

Builds pjdfstest (scripts/pjdfstest build), mounts each target in turn under a private folder
on the local disk, runs the suite from inside it and unmounts it; writes the per-file failure
counts of both, the totals and the failures accepted for the mount with their reasons
(docs/benchmarks/mount/pjdfstest-accepted.toml) to docs/benchmarks/mount/conformance.md, the
raw results to conformance.json. Without the mount (no package scratchkeeper.mount) bindfs's
results are still written and the report says the mount was not run. Exit 1 when a target
could not be run to the end, or when the mount failed a test that is neither accepted nor a
known bug.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from testkit import mount_targets as targets
from testkit.pjdfstest import ACCEPTED, PJDFSTEST, accepted_failures, known_bugs

REPO = Path(__file__).resolve().parents[2]
REPORT_DIR = REPO / "docs" / "benchmarks" / "mount"
FULL_TIMEOUT = 3600  # seconds for the whole suite on one target (about 3 minutes on bindfs)


def run_on(name: str, base: Path, subset: bool) -> dict:
    """Mount the target, run pjdfstest inside it, unmount; the parsed result."""
    base.mkdir(parents=True, exist_ok=True)
    mounter = (targets.bindfs(base, options=(), read_ahead=None) if name == "bindfs"
               else targets.scratch_mount(base))
    out = base / "result.json"
    log = REPO / "benchmarks" / "results" / "mount" / f"pjdfstest-{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    timeout = 900 if subset else FULL_TIMEOUT
    with mounter as target:
        print(f"conformance: {name}: pjdfstest in {target.path} ({target.description})",
              flush=True)
        argv = [str(PJDFSTEST), "run", str(target.path), "--json", str(out), "--log", str(log),
                "--timeout", str(timeout)] + (["--subset"] if subset else [])
        done = targets.run_group(argv, timeout + 120)
        print(done.stdout.splitlines()[-1] if done.stdout else done.stderr[-2000:], flush=True)
        description, options = target.description, target.mount_options
    if not out.exists():
        return {"error": f"pjdfstest did not finish: {(done.stdout + done.stderr)[-2000:]}",
                "description": description}
    result = json.loads(out.read_text())
    result.update(description=description, mount_options=options, log=str(log.relative_to(REPO)))
    return result


def _line(result: dict, failure: str) -> str:
    name, _, number = failure.rpartition(":")
    record = result["files"].get(name, {})
    if number == "plan":
        return "; ".join(record.get("errors", []))
    text = record.get("not_ok", {}).get(number, "")
    return text if len(text) <= 140 else text[:90] + " ... " + text[-45:]


def write_report(results: dict[str, dict], subset: bool, load: tuple[str, str]) -> Path:
    accepted = accepted_failures()
    names = [n for n in ("bindfs", "mount") if n in results]
    lines = ["# pjdfstest: the scratch mount against bindfs",
             "",
             f"`make conformance` (`.venv/bin/python -m benchmarks.mount.conformance"
             f"{' --subset' if subset else ''}`), {time.strftime('%Y-%m-%d')}: pjdfstest "
             f"(../shared/peers/{_tarball()}) {'fast subset' if subset else 'whole suite'}, run "
             f"as root with `prove -r` from inside each file system, one after the other; "
             f"Linux {platform.release()}, load average {load[0]} before, {load[1]} after.",
             ""]
    for name in ("bindfs", "mount"):
        result = results.get(name)
        if result is None:
            lines.append(f"* **{name}**: not run: {targets.NO_MOUNT}")
        elif "error" in result:
            lines.append(f"* **{name}**: {result['description']}: **did not complete**: "
                         f"{result['error'][:300]}")
        else:
            lines.append(f"* **{name}**: {result['description']}; mount options "
                         f"`{result.get('mount_options', '')}`; {result['seconds']:.0f} s")
    lines += ["", "## Totals", "", "| | " + " | ".join(names) + " |",
              "|---|" + "---|" * len(names)]
    complete = {n: r for n, r in results.items() if "error" not in r}
    rows = (("test files", lambda r: r["totals"].get("files", "?")),
            ("tests", lambda r: r["totals"].get("tests", "?")),
            ("failed", lambda r: len(r["failures"])),
            ("test files with a failure", lambda r: sum(
                1 for rec in r["files"].values() if rec["failed"] or rec["errors"])))
    for label, value in rows:
        lines.append(f"| {label} | " + " | ".join(
            str(value(complete[n])) if n in complete else "-" for n in names) + " |")
    if "mount" in complete:
        mount = complete["mount"]
        unaccepted = [f for f in mount["failures"] if f not in accepted]
        bugs = known_bugs()
        lines.append(f"| failed, not accepted | - | {len(unaccepted)} |")
        lines.append(f"| of which known bugs of the mount | - | "
                     f"{sum(1 for f in unaccepted if f in bugs)} |")
    files = sorted({f.rpartition(":")[0] for r in complete.values() for f in r["failures"]})
    lines += ["", "## Failures per test file", "",
              "| test file | " + " | ".join(names) + " | failed tests (" + ", ".join(names) + ") |",
              "|---|" + "---|" * len(names) + "---|"]
    for name in files:
        counts, which = [], []
        for n in names:
            if n not in complete:
                counts.append("-")
                continue
            failed = [f.rpartition(":")[2] for f in complete[n]["failures"]
                      if f.rpartition(":")[0] == name]
            counts.append(str(len(failed)))
            which.append(_ranges(failed) or "none")
        lines.append(f"| {name} | " + " | ".join(counts) + " | " + "; ".join(which) + " |")
    if not files:
        lines.append("| (none) |" + " |" * (len(names) + 1))
    lines += ["", "## What failed", "",
              "pjdfstest's line for the first failure of each file and target. Why bindfs fails "
              "what it fails (a path-based design, one node per name in the high-level libfuse "
              "API, UTIME_OMIT): README.rst, \"What pjdfstest shows of bindfs\".", ""]
    for name in files:
        for n in names:
            if n not in complete:
                continue
            failed = [f for f in complete[n]["failures"] if f.rpartition(":")[0] == name]
            if not failed:
                continue
            example = _line(complete[n], failed[0])
            lines.append(f"* `{name}` on {n}: {len(failed)} failed, e.g. #{failed[0].rpartition(':')[2]}"
                         f": `{example}`")
    lines += ["", "## Failures accepted for the mount", "",
              f"From `{ACCEPTED.relative_to(REPO)}` (the fast subset in `make test` fails on any "
              "failure of the mount not listed there, and on more failures than bindfs's):", ""]
    table = tomllib.loads(ACCEPTED.read_text())
    if not table.get("accepted"):
        lines.append("None: no failure of the mount is accepted.")
    for entry in table.get("accepted", []):
        seen = ""
        if "mount" in complete:
            hit = [t for t in entry["tests"] if t in complete["mount"]["failures"]]
            seen = f" (failed in this run: {len(hit)} of {len(entry['tests'])})"
        lines.append(f"* {', '.join(f'`{t}`' for t in entry['tests'])}{seen}: {entry['reason']}")
    lines += ["", "## Known bugs of the mount (to be fixed, not accepted)", ""]
    if not table.get("known_bug"):
        lines.append("None listed.")
    for entry in table.get("known_bug", []):
        seen = ""
        if "mount" in complete:
            hit = [t for t in entry["tests"] if t in complete["mount"]["failures"]]
            seen = f" (failed in this run: {len(hit)} of {len(entry['tests'])})"
        lines.append(f"* {', '.join(f'`{t}`' for t in entry['tests'])}{seen}: {entry['bug']}")
    lines.append("")
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    report = REPORT_DIR / ("conformance-subset.md" if subset else "conformance.md")
    report.write_text("\n".join(lines))
    return report


def _ranges(numbers: list[str]) -> str:
    """['1', '2', '3', '7', 'plan'] -> '1-3, 7, plan'."""
    ints = sorted(int(n) for n in numbers if n.isdigit())
    parts, start = [], None
    for i, n in enumerate(ints):
        if start is None:
            start = n
        if i + 1 == len(ints) or ints[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(parts + [n for n in numbers if not n.isdigit()])


def _tarball() -> str:
    found = sorted((REPO.parent / "shared" / "peers").glob("pjdfstest-*.tar.gz"))
    return found[-1].name if found else "pjdfstest"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mount.conformance",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--subset", action="store_true",
                        help="the fast subset only (report: conformance-subset.md)")
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp"),
                        help="where the targets are mounted (the local disk; default /var/tmp)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("conformance: pjdfstest changes owners and switches users: run as root")
    subprocess.run([str(PJDFSTEST), "build"], check=True, timeout=900, stdout=subprocess.DEVNULL)
    load_before = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    base = Path(tempfile.mkdtemp(prefix="sk-conformance.", dir=args.workdir))
    os.chmod(base, 0o755)  # pjdfstest switches to other users
    results: dict[str, dict] = {}
    with targets.exit_on_sigterm():
        try:
            for name in ("bindfs", "mount"):
                if name == "mount" and not targets.mount_available():
                    print(f"conformance: mount: not run: {targets.NO_MOUNT}", flush=True)
                    continue
                try:
                    results[name] = run_on(name, base / name, args.subset)
                except RuntimeError as err:  # it did not mount: said in the report
                    results[name] = {"error": str(err), "description": name}
        finally:
            targets.clean_base(base)
    load_after = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    raw = REPORT_DIR / ("conformance-subset.json" if args.subset else "conformance.json")
    raw.write_text(json.dumps({"subset": args.subset, "results": results}, indent=1) + "\n")
    report = write_report(results, args.subset, (load_before, load_after))
    print(f"conformance: wrote {report.relative_to(REPO)} and {raw.relative_to(REPO)}")
    accepted = accepted_failures()
    bad = [n for n, r in results.items() if "error" in r]
    unaccepted = [f for f in results.get("mount", {}).get("failures", []) if f not in accepted]
    if unaccepted:
        print(f"conformance: the mount failed {len(unaccepted)} tests not accepted "
              f"({sum(1 for f in unaccepted if f in known_bugs())} of them known bugs): "
              + ", ".join(unaccepted[:20]) + (" ..." if len(unaccepted) > 20 else ""),
              file=sys.stderr)
    unexplained = [f for f in unaccepted if f not in known_bugs()]
    return 1 if bad or unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
