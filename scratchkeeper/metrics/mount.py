"""The scratch mount's counters, read at scrape time from the virtual attributes its root
answers (``user.scratchkeeper.dispatch``, ``.qos``, ``.hybrid``, ``.logs``: the same text
``scratchkeeper store stats`` prints, from ``scratchkeeper/mount/native/``).

recoveryd exports them for the mount of its host: it runs as root on the host whose scratch
root it patches, and root's read of ``.logs`` covers every user (summed here: the per-uid
counts are never a label). A node with a mount and no recoveryd runs ``scratchkeeper metrics``
(``scratchkeeper/cli/metrics.py``, at metrics.mount).

A mount whose process hangs leaves ``getxattr`` blocked in the kernel: the read runs in a
thread of its own, waited for at most ``timeout`` seconds, and while one is stuck no other is
started (the mount is reported down), so a hung mount costs one thread, not one per scrape.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .endpoint import gauge

#: the attributes read, by the name used below
ATTRIBUTES = {"dispatch": "user.scratchkeeper.dispatch", "qos": "user.scratchkeeper.qos",
              "hybrid": "user.scratchkeeper.hybrid", "logs": "user.scratchkeeper.logs"}
#: read QoS's modes (qos.admission), each a series of scratchkeeper_mount_qos_mode
QOS_MODES = ("off", "deterministic", "statistical")
#: the hybrid replica layouts (the layout paper's three)
HYBRID_LAYOUTS = ("1-DV", "2-D", "1-DH")
#: the mount's logs (docs/mount.rst)
LOG_NAMES = ("closes.log", "reads.log")


def read_counters(root: str) -> dict[str, Any]:
    """The four attributes of the mount's root, parsed; OSError when one cannot be read (no
    mount there, or a dead one: ENOTCONN), ValueError when one is not JSON."""
    return {key: json.loads(os.getxattr(root, name)) for key, name in ATTRIBUTES.items()}


class MountCollector:
    name = "mount"

    def __init__(self, scratch_root: str, timeout: float = 5.0, ost_count: int = 0):
        self.root = scratch_root
        self.timeout = timeout
        #: the store's OSTs: each gets its counters from the first scrape on (0 until the
        #: mount has read from it), so a series does not appear only at its first read
        self.ost_count = ost_count
        self._lock = threading.Lock()
        self._pending: threading.Thread | None = None

    def _read(self) -> tuple[dict[str, Any] | None, str]:
        """(counters, "") or (None, why not)."""
        with self._lock:
            if self._pending is not None and self._pending.is_alive():
                return None, "an earlier read of the mount's counters has not returned"
            result: dict[str, Any] = {}

            def read() -> None:
                try:
                    result["counters"] = read_counters(self.root)
                except (OSError, ValueError) as err:
                    result["error"] = str(err)

            thread = threading.Thread(target=read, name="metrics-mount", daemon=True)
            thread.start()
            self._pending = thread
        thread.join(self.timeout)
        if thread.is_alive():
            return None, f"no answer from the mount within {self.timeout:g}s"
        return result.get("counters"), result.get("error", "")

    def collect(self) -> Iterable[Metric]:
        counters, _why = self._read()
        yield gauge("scratchkeeper_mount_up", "1 when the scratch mount on this host answered "
                    "its counters (0: no mount, a dead one or a hung one)", [],
                    [((), 1.0 if counters else 0.0)])
        if counters:
            yield from dispatch_families(counters["dispatch"], self.ost_count)
            yield from qos_families(counters["qos"])
            yield from hybrid_families(counters["hybrid"])
            yield from log_families(counters["logs"])


def _counter(name: str, doc: str, labels: list[str] | None = None,
             samples: Iterable[tuple[list[str], float]] = ()) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labels or [])
    for values, value in samples:
        family.add_metric(values, value)
    return family


_IDLE_OST = {"reads": 0, "read_bytes": 0, "pieces": 0, "bytes": 0, "inflight": 0}


def dispatch_families(d: dict[str, Any], ost_count: int = 0) -> Iterable[Metric]:
    yield _counter("scratchkeeper_mount_dispatch_requests", "reads of mirrored files the "
                   "dispatcher split over their mirrors", samples=[([], d["requests"])])
    yield _counter("scratchkeeper_mount_dispatch_fallbacks", "dispatched reads that fell back "
                   "to the primary (a mirror failed or the solver had no answer)",
                   samples=[([], d["fallbacks"])])
    yield _counter("scratchkeeper_mount_dispatch_solver_errors", "reads whose max-flow "
                   "solution failed", samples=[([], d["solver_errors"])])
    yield _counter("scratchkeeper_mount_dispatch_in_order", "reads served in order from one "
                   "copy (below dispatch's minimum size)", samples=[([], d["in_order"])])
    yield _counter("scratchkeeper_mount_striped_reads", "reads of unmirrored files read over "
                   "their objects in parallel", samples=[([], d.get("striped", 0))])
    yield _counter("scratchkeeper_mount_striped_fallbacks", "parallel striped reads that fell "
                   "back to a sequential read", samples=[([], d.get("striped_fallbacks", 0))])
    measured = d.get("osts", [])
    # the mount lists the OSTs it has read from; the others count 0 (no latency estimate yet)
    seen = {o["ost"] for o in measured}
    osts = sorted(measured + [{"ost": i, **_IDLE_OST} for i in range(ost_count) if i not in seen],
                  key=lambda o: o["ost"])
    yield _counter("scratchkeeper_mount_ost_reads", "reads the mount made from each OST",
                   ["ost"], [([str(o["ost"])], o["reads"]) for o in osts])
    yield _counter("scratchkeeper_mount_ost_read_bytes", "bytes the mount read from each OST",
                   ["ost"], [([str(o["ost"])], o["read_bytes"]) for o in osts])
    yield _counter("scratchkeeper_mount_dispatch_pieces", "pieces of dispatched reads sent to "
                   "each OST", ["ost"], [([str(o["ost"])], o["pieces"]) for o in osts])
    yield _counter("scratchkeeper_mount_dispatch_bytes", "bytes of dispatched reads sent to "
                   "each OST", ["ost"], [([str(o["ost"])], o["bytes"]) for o in osts])
    yield gauge("scratchkeeper_mount_ost_inflight", "reads in flight on each OST now", ["ost"],
                [((str(o["ost"]),), o["inflight"]) for o in osts])
    yield gauge("scratchkeeper_mount_ost_latency_seconds", "the dispatcher's estimate of each "
                "OST's per-read latency", ["ost"],
                [((str(o["ost"]),), o["latency"]) for o in measured])
    yield gauge("scratchkeeper_mount_ost_seconds_per_byte", "the dispatcher's estimate of each "
                "OST's transfer time per byte (1 / bandwidth)", ["ost"],
                [((str(o["ost"]),), o["seconds_per_byte"]) for o in measured])


def qos_families(q: dict[str, Any]) -> Iterable[Metric]:
    mode = GaugeMetricFamily("scratchkeeper_mount_qos_mode", "read QoS admission in force "
                             "(qos.admission): 1 for the mode on", labels=["mode"])
    for name in QOS_MODES:
        mode.add_metric([name], 1.0 if q["mode"] == name else 0.0)
    yield mode
    for key, doc in (("admitted", "read requests admitted under QoS"),
                     ("admitted_buckets", "pieces of admitted requests"),
                     ("delayed", "read requests delayed to a later interval"),
                     ("violations", "intervals that broke the QoS bound"),
                     ("busy_intervals", "intervals with QoS reads"),
                     ("bypassed", "reads not under QoS (users not listed, small reads)")):
        yield _counter(f"scratchkeeper_mount_qos_{key}", doc, samples=[([], q[key])])
    yield gauge("scratchkeeper_mount_qos_risk", "statistical admission's estimated risk of a "
                "violation", [], [((), q["risk"])])


def hybrid_families(h: dict[str, Any]) -> Iterable[Metric]:
    for key, doc in (("reads", "requests read from the hybrid replica of each layout"),
                     ("writes", "requests written to files with a hybrid replica of each layout")):
        yield _counter(f"scratchkeeper_mount_hybrid_{key}", doc, ["layout"],
                       [([name], h[key].get(name, 0)) for name in HYBRID_LAYOUTS])
    yield _counter("scratchkeeper_mount_hybrid_invalidated", "hybrid replicas dropped because "
                   "their file was written", samples=[([], h["invalidated"])])


def log_families(logs: dict[str, Any]) -> Iterable[Metric]:
    names = [n for n in LOG_NAMES if n in logs]
    yield _counter("scratchkeeper_mount_log_records", "records the mount wrote to each of its "
                   "logs (reads.log: the mount's reads of staged files, closes.log: closes)",
                   ["log"], [([n], logs[n]["written"]) for n in names])
    yield _counter("scratchkeeper_mount_log_coalesced", "records folded into an earlier one "
                   "(repeated reads of one file)", ["log"],
                   [([n], logs[n]["coalesced"]) for n in names])
    yield _counter("scratchkeeper_mount_log_dropped", "records not written: the log at its cap, "
                   "a user past their share, or no space", ["log", "why"],
                   [([n, why], logs[n]["dropped"][why]) for n in names
                    for why in ("cap", "share", "space")])
    yield gauge("scratchkeeper_mount_log_bytes", "size of each log now (it rotates at its cap)",
                ["log"], [((n,), logs[n]["size"]) for n in names])
