"""What ``scratchkeeper replicas`` shows: replicas and why, space, jobs at risk, daemon health."""

from __future__ import annotations

import time

from .state import ReplicationState


def build_report(state: ReplicationState, *, scratch_bytes: int | None,
                 max_space_fraction: float) -> dict:
    """One dict (printed as text or JSON) from the daemon's tables and its last cycle."""
    status = state.status()
    targets = status.get("targets", {})
    claims_by_path: dict[str, list[dict]] = {}
    for row in state.claim_rows():
        target = targets.get(row["job_id"], {})
        claims_by_path.setdefault(row["path"], []).append({
            "job_id": row["job_id"], "active": bool(row["active"]), "reason": row["reason"],
            "position": target.get("position", row["position"]),
            "group": target.get("group"), "released_why": row["released_why"]})
    replicas = []
    used = 0
    for path, row in state.replicas().items():
        entry = row.to_dict()
        entry["jobs"] = claims_by_path.get(path, [])
        replicas.append(entry)
        if row.state in ("creating", "ready", "removing"):
            used += row.size
    waiting = [{"path": path, "jobs": jobs} for path, jobs in sorted(claims_by_path.items())
               if path not in {r["path"] for r in replicas} and any(j["active"] for j in jobs)]
    last = status.get("last_cycle")
    return {
        "replicas": replicas,
        "waiting": waiting,
        "space": {"used_bytes": used, "scratch_bytes": scratch_bytes,
                  "fraction": (used / scratch_bytes) if scratch_bytes else None,
                  "limit_fraction": max_space_fraction},
        "at_risk": status.get("at_risk", []),
        "windows": status.get("windows", []),
        "unconfirmed": status.get("unconfirmed", []),
        "deferred_for_space": status.get("deferred_for_space", []),
        "queued_without_inputs": status.get("queued_without_inputs", 0),
        "daemon": {"last_cycle": last, "seconds_since": (time.time() - last) if last else None,
                   "last_cycle_seconds": status.get("last_cycle_seconds"),
                   "consecutive_failures": status.get("consecutive_failures", 0),
                   "last_error": status.get("last_error", ""), "pid": status.get("pid"),
                   "queued": status.get("queued"), "running": status.get("running"),
                   "system_nodes": status.get("system_nodes")},
    }


def format_report(report: dict) -> str:
    """The text form of :func:`build_report`."""
    lines = []
    daemon = report["daemon"]
    if daemon["last_cycle"] is None:
        lines.append("replicad: no cycle recorded yet")
    else:
        lines.append(f"replicad: last cycle {daemon['seconds_since']:.0f}s ago "
                     f"({daemon['queued']} queued, {daemon['running']} running, S = "
                     f"{daemon['system_nodes']} nodes)"
                     + (f"; scheduler failing ({daemon['consecutive_failures']} in a row: "
                        f"{daemon['last_error']})" if daemon["consecutive_failures"] else ""))
    for window in report["windows"]:
        lines.append(f"window {window['group']}: {window['length']} of {window['queued']} queued "
                     f"jobs cover {window['required_nodes']:g} nodes (alpha {window['alpha']:g}, "
                     f"T {window['threshold']:g})")
    space = report["space"]
    total = space["scratch_bytes"]
    lines.append(f"space: {_size(space['used_bytes'])} in replicas"
                 + (f" of {_size(total)} scratch ({100 * space['fraction']:.2f} %, limit "
                    f"{100 * space['limit_fraction']:.0f} %)" if total else ""))
    if report["replicas"]:
        lines.append(f"{'STATE':9} {'JOB':>8} {'WHY':9} {'POS':>4} {'MIRROR':>6} {'OSTS':12} "
                     f"{'SIZE':>9}  PATH")
    for entry in report["replicas"]:
        active = [j for j in entry["jobs"] if j["active"]] or entry["jobs"]
        first = active[0] if active else {"job_id": entry["job_id"], "reason": entry["reason"],
                                          "position": None}
        more = f" (+{len(active) - 1} jobs)" if len(active) > 1 else ""
        lines.append(f"{entry['state']:9} {first['job_id']:>8} {first['reason']:9} "
                     f"{first['position'] or '-':>4} {entry['mirror_id'] or '-':>6} "
                     f"{','.join(map(str, entry['osts'])) or '-':12} {_size(entry['bytes']):>9}  "
                     f"{entry['path']}{more}"
                     + (f"  [{entry['error']}]" if entry["error"] else ""))
    for waiting in report["waiting"]:
        jobs = ",".join(j["job_id"] for j in waiting["jobs"] if j["active"])
        lines.append(f"{'waiting':9} {jobs:>8} {'':9} {'':>4} {'-':>6} {'-':12} {'':>9}  "
                     f"{waiting['path']}")
    if report["at_risk"]:
        lines.append("jobs at risk (dispatched with no ready replica):")
        for risk in report["at_risk"]:
            lines.append(f"  {risk['job_id']}: {', '.join(risk['paths'])}")
    else:
        lines.append("jobs at risk: none")
    if report["unconfirmed"]:
        lines.append("left the queue, end not confirmed yet: " + ", ".join(report["unconfirmed"]))
    if report["deferred_for_space"]:
        lines.append(f"waiting for space: {len(report['deferred_for_space'])} files")
    return "\n".join(lines)


def _size(value: int | None) -> str:
    if value is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value}"
