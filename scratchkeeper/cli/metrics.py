"""``scratchkeeper metrics``: serve the counters of this host's scratch mount to Prometheus.

recoveryd exports the counters of the mount on its own host; a compute node runs a mount and
no recoveryd, so this small exporter serves that node's mount (metrics.mount, loopback by
default) until SIGTERM. docs/operations.rst lists what it exports.
"""

from __future__ import annotations

import threading

from .. import stopping
from ..config import listen_address
from ..errors import ConfigError
from . import daemon_logging


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "metrics", help="serve this host's scratch mount counters to Prometheus (nodes "
                        "without recoveryd)",
        description="Serves GET /metrics at metrics.mount: the read, dispatch, QoS, hybrid and "
                    "log counters the scratch mount at storage.scratch_root answers, read at "
                    "each scrape (docs/operations.rst). Runs until SIGTERM.")
    parser.set_defaults(func=_metrics)


def _metrics(args) -> int:
    from ..metrics import serve
    from ..metrics.mount import MountCollector

    config = daemon_logging(args)
    if config.storage.backend != "local":
        raise ConfigError("scratchkeeper metrics: the scratch mount's counters exist with "
                          "storage.backend = \"local\" only", path=config.source)
    if listen_address(config.metrics.mount) is None:
        raise ConfigError(f"key 'metrics.mount': {config.metrics.mount!r} turns the endpoint "
                          "off: nothing to serve", path=config.source)
    stop = threading.Event()
    stopping.on_stop_signals(stop.set)
    endpoint = serve(config, "metrics", [MountCollector(config.storage.scratch_root,
                                                         ost_count=config.storage.ost_count)])
    if endpoint is None:
        raise ConfigError(f"key 'metrics.mount': cannot serve on {config.metrics.mount} (the "
                          "log says why)", path=config.source)
    try:
        stopping.sleep(stop, None)
    finally:
        endpoint.close()
    return 0
