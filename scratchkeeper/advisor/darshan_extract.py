"""Run in a child process by :func:`scratchkeeper.advisor.darshan.read_workload`: open a Darshan
log with PyDarshan and print, as JSON on standard output, the counters the layout model uses.

A child of its own because darshan-util's C library, given a truncated log, can return a
half-read report that crashes the interpreter when it is collected (seen with PyDarshan 3.5.0:
SIGSEGV in ``darshan_log_close``), and prints its complaints on standard error itself: in a
child, a bad log costs an error message, not the caller.

    python -m scratchkeeper.advisor.darshan_extract LOG
"""

from __future__ import annotations

import json
import sys

#: POSIX counters the reader uses (darshan-parser's names).
POSIX_COUNTERS = (
    ["POSIX_READS", "POSIX_WRITES", "POSIX_SEQ_READS", "POSIX_SEQ_WRITES", "POSIX_BYTES_READ",
     "POSIX_BYTES_WRITTEN"]
    + [f"POSIX_ACCESS{k}_{what}" for k in range(1, 5) for what in ("ACCESS", "COUNT")]
    + [f"POSIX_SIZE_{op}_{suffix}" for op in ("READ", "WRITE") for suffix in (
        "0_100", "100_1K", "1K_10K", "10K_100K", "100K_1M", "1M_4M", "4M_10M", "10M_100M",
        "100M_1G", "1G_PLUS")])


def extract(path: str) -> dict:
    """The log's ``nprocs``, its POSIX records (rank, file name, counters), the ranks of each
    host of its DXT traces and its LUSTRE stripe settings, as plain JSON values."""
    import darshan

    report = darshan.DarshanReport(path, read_all=True)
    out: dict = {"nprocs": int(report.metadata["job"]["nprocs"]), "posix": [], "hosts": {},
                 "lustre": []}
    names = report.name_records
    if "POSIX" in report.records and len(report.records["POSIX"]):
        frame = report.records["POSIX"].to_df()["counters"]
        missing = [c for c in POSIX_COUNTERS if c not in frame.columns]
        if missing:
            raise ValueError(f"POSIX records without {', '.join(missing[:3])}")
        for row in frame[["rank", "id", *POSIX_COUNTERS]].itertuples(index=False):
            rank, record_id, *values = row
            out["posix"].append({"rank": int(rank), "id": str(int(record_id)),
                                 "name": str(names.get(record_id, "")),
                                 **{c: int(v) for c, v in zip(POSIX_COUNTERS, values)}})
    for module in ("DXT_POSIX", "DXT_MPIIO"):
        if module in report.records and len(report.records[module]):
            hosts: dict[str, set[int]] = {}
            for record in report.records[module].to_df():
                hosts.setdefault(str(record.get("hostname", "")), set()).add(int(record["rank"]))
            out["hosts"] = {host: sorted(ranks) for host, ranks in hosts.items()}
            break
    if "LUSTRE" in report.records and len(report.records["LUSTRE"]):
        frame = report.records["LUSTRE"].to_df()
        components = frame["components"] if isinstance(frame, dict) else frame
        columns = ("id", "LUSTRE_COMP_STRIPE_COUNT", "LUSTRE_COMP_STRIPE_SIZE")
        if all(c in components.columns for c in columns):
            for record_id, count, size in components[list(columns)].itertuples(index=False):
                out["lustre"].append([str(int(record_id)), int(count), int(size)])
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(json.dumps({"error": "usage: python -m scratchkeeper.advisor.darshan_extract LOG"}))
        return 2
    try:
        result = extract(argv[0])
    except ImportError:
        print(json.dumps({"error": "pydarshan"}))
        return 2
    except Exception as err:  # the C parser raises plain RuntimeError/ValueError/KeyError
        print(json.dumps({"error": f"{type(err).__name__}: {str(err).strip() or 'no detail'}"}))
        return 2
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
