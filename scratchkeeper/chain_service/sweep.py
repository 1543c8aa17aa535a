"""One sweep of the chain service, and the loop that repeats it until SIGTERM.

The four steps of a sweep run whatever the others did: a job that cannot be chained must not
keep the chains whose stage-in ended pending for ever, nor hold back the offloads. Each step
prints one line per action (the service's output, in its journal); the first error is raised
once all of them ran.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time

from .. import stopping
from ..config import SiteConfig
from ..errors import ScratchkeeperError
from ..planner import records
from ..planner.jit import reevaluate
from ..state import StateStore
from .attach import chain_pending
from .offload import offload_closed
from .settle import settle_chains

log = logging.getLogger(__name__)

#: the longest pause after failed sweeps (seconds), however many failed in a row
MAX_BACKOFF = 300.0


def sweep(config: SiteConfig, store: StateStore, only: set[str] | None,
          interval: float = 0.0) -> int:
    """Chain the held jobs (all, or those in ``only``), end the chains whose stage-in ended,
    start or move the just-in-time stage-ins, offload what was closed; the number of jobs
    that could not be chained."""
    failures = 0
    errors: list[Exception] = []
    outcomes = []
    try:
        outcomes = chain_pending(config, store, only=only)
    except ScratchkeeperError as err:
        errors.append(err)
    for outcome in outcomes:
        if outcome.error:
            failures += 1
            print(f"job {outcome.job_id}: {outcome.error}")
        else:
            jobs = ", ".join(f"{k} {v}" for k, v in outcome.data_jobs.items()) or "already chained"
            print(f"job {outcome.job_id}: chain {outcome.chain_id}: {jobs}; released", flush=True)
    try:
        for end in settle_chains(config, store, job_ids=only):
            if end.cancelled:
                print(f"chain {end.chain_id}: {end.reason}; cancelled {', '.join(end.cancelled)}",
                      flush=True)
    except ScratchkeeperError as err:
        errors.append(err)
    try:
        # just-in-time stage-ins held back: started now or moved as their compute jobs' starts move
        for move in reevaluate(config, store, sweep_interval=interval):
            when = "now" if move.release_at is None else time.strftime(
                "%Y-%m-%dT%H:%M:%S", time.localtime(move.release_at))
            print(f"chain {move.chain_id}: {move.job_key} {move.job_id} starts {when}: "
                  f"{move.reason}", flush=True)
    except ScratchkeeperError as err:
        errors.append(err)
    try:
        # offload at close (#STAGEOUT -when close): results closed since the last sweep
        for line in offload_closed(config, store):
            print(line, flush=True)
    except ScratchkeeperError as err:
        errors.append(err)
    if errors:
        raise errors[0]
    return failures


def watch(config: SiteConfig, store: StateStore, only: set[str] | None, interval: float,
          stop: threading.Event | None = None) -> None:
    """Sweep every ``interval`` seconds until ``stop`` is set (by default: until SIGTERM or
    SIGINT); after a failed sweep, back off exponentially with jitter."""
    if stop is None:
        stop = threading.Event()
        stopping.on_stop_signals(stop.set)
    # the Prometheus endpoint (metrics.chain_service); imported here: a single sweep (or a
    # user's command) does not serve it
    from ..metrics import serve
    from ..metrics.chains import ChainCollector

    endpoint = serve(config, "chain-service", [ChainCollector(
        chain_counts=functools.partial(records.chain_counts, store),
        job_counts=functools.partial(records.chain_job_counts, store),
        stage_in_delays=functools.partial(records.stage_in_delays, store),
        offload_counts=functools.partial(records.offload_counts, store))])
    try:
        _loop(config, store, only, interval, stop)
    finally:
        if endpoint is not None:
            endpoint.close()


def _loop(config: SiteConfig, store: StateStore, only: set[str] | None, interval: float,
          stop: threading.Event) -> None:
    consecutive_failures = 0
    while not stop.is_set():
        began = time.monotonic()
        try:
            sweep(config, store, only, interval)
            consecutive_failures = 0
            # a sweep every interval, not interval after the last one ended: a long sweep
            # (a burst of jobs to chain) does not stretch the wait of the jobs held meanwhile
            pause = max(0.0, interval - (time.monotonic() - began))
        except Exception as err:  # a service outlives a bug met in one sweep
            consecutive_failures += 1
            pause = min(MAX_BACKOFF, interval * 2 ** min(consecutive_failures, 6))
            pause *= random.uniform(0.8, 1.2)
            if not isinstance(err, ScratchkeeperError):
                log.exception("chain service: sweep failed")
            print(f"sweep failed ({consecutive_failures} in a row), retrying in {pause:.0f}s: "
                  f"{err}", flush=True)
        stopping.sleep(stop, pause)
