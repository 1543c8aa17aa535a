"""What one user may make recoveryd spend, whatever the transport that brought the request.

recoveryd runs as root for every user of a site, so each resource a request costs has a bound
per user (issue 39): a request is admitted by its :class:`~scratchkeeper.ownership.Owner` (the
peer's credentials, never the request's words) before a byte of it is read, under

* **threads**: at most ``recovery.connections_per_uid`` of one uid's requests answered at once,
  ``recovery.request_threads`` in all, and the last quarter of those only for a uid holding
  none, so users already served cannot take every thread from one who is not;
* **rate**: at most ``recovery.request_burst`` requests of one uid at once, then
  ``recovery.requests_per_minute`` a minute (a token bucket, as slurmctld's per-user RPC rate
  limit: one every 60/N seconds), so one user's flood costs the daemon a bounded share of its
  time whatever the number of requests;
* **turns**: one request of a uid worked on at a time (:meth:`Admission.working`; a request
  that waits for a patch gives its turn up meanwhile), so the users with requests at the same
  moment share the daemon's time equally, however many one of them sends;

and what is refused gets :class:`~.client.ServiceBusy` (the client backs off, told when to try
again). Root, and the scheduler hook's user (``recovery.hook_user``), are bounded by the
threads alone: theirs are the mount's and the hook's requests, made for every user and job.
Rows (``recovery.pending_per_uid``, the pruning of finished requests) are bounded where they
are written (:mod:`.records`), lines of root's log here (:class:`UserLines`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator

from ..ownership import Owner
from .client import ServiceBusy

#: uids whose counts are kept; past it the idle ones are forgotten (a uid is a real peer, but
#: a bound all the same)
MAX_UIDS = 4096


@dataclasses.dataclass(frozen=True)
class Limits:
    """The bounds of :class:`Admission` (``recovery.*`` keys of the same names)."""

    threads: int = 32
    connections_per_uid: int = 8
    requests_per_minute: int = 600
    burst: int = 30
    #: requests of one uid worked on at once (the others of its connections wait their turn)
    working_per_uid: int = 1

    @classmethod
    def of(cls, recovery) -> Limits:
        """From the site's ``[recovery]`` section."""
        return cls(threads=recovery.request_threads,
                   connections_per_uid=recovery.connections_per_uid,
                   requests_per_minute=recovery.requests_per_minute,
                   burst=recovery.request_burst)

    @property
    def reserve(self) -> int:
        """Threads only a uid holding none may take."""
        return self.threads // 4


class Admission:
    """Admits a request of an :class:`Owner` or refuses it with :class:`ServiceBusy`; every
    admitted request is released once answered. Safe to share across threads."""

    def __init__(self, limits: Limits, *, trusted: frozenset[int] = frozenset({0}),
                 clock: Callable[[], float] = time.monotonic):
        self.limits = limits
        self.trusted = trusted  # uids bounded by the threads alone
        self._clock = clock
        self._lock = threading.Lock()
        self._in_flight: dict[int, int] = {}                 # admitted, not released, by uid
        self._buckets: dict[int, tuple[float, float]] = {}   # uid -> (tokens, when)
        self._turns = threading.Condition()
        self._working: dict[int, int] = {}                   # requests worked on, by uid
        self._local = threading.local()                      # the turn this thread holds

    def admit(self, owner: Owner) -> None:
        """Count one request of ``owner`` in, or raise :class:`ServiceBusy` saying why."""
        uid, limits = owner.uid, self.limits
        with self._lock:
            mine = self._in_flight.get(uid, 0)
            busy = sum(self._in_flight.values())
            if uid not in self.trusted and mine >= limits.connections_per_uid:
                raise ServiceBusy(f"too many connections from uid {uid} (at most "
                                  f"{limits.connections_per_uid} at once)")
            if busy >= limits.threads or (mine and busy >= limits.threads - limits.reserve):
                raise ServiceBusy(f"service busy ({busy} requests in progress); try again "
                                  "shortly")
            if uid not in self.trusted:
                self._take_token(uid)
            self._in_flight[uid] = mine + 1

    def release(self, owner: Owner) -> None:
        with self._lock:
            left = self._in_flight.get(owner.uid, 1) - 1
            if left > 0:
                self._in_flight[owner.uid] = left
            else:
                self._in_flight.pop(owner.uid, None)

    @contextlib.contextmanager
    def working(self, owner: Owner) -> Iterator[None]:
        """Work on one admitted request of ``owner`` once it is their turn (a trusted uid's at
        once): a uid's requests beyond ``working_per_uid`` wait here for one of theirs to end or
        to pause, never for another uid's."""
        if owner.uid in self.trusted:
            yield
            return
        self._take_turn(owner.uid)
        self._local.uid = owner.uid
        try:
            yield
        finally:
            self._local.uid = None
            self._give_turn(owner.uid)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The calling thread waits for something else (a patch): the turn it holds, if any,
        goes to its uid's next request meanwhile."""
        uid = getattr(self._local, "uid", None)
        if uid is None:
            yield
            return
        self._give_turn(uid)
        try:
            yield
        finally:
            self._take_turn(uid)

    def _take_turn(self, uid: int) -> None:
        with self._turns:
            while self._working.get(uid, 0) >= self.limits.working_per_uid:
                self._turns.wait()
            self._working[uid] = self._working.get(uid, 0) + 1

    def _give_turn(self, uid: int) -> None:
        with self._turns:
            left = self._working.get(uid, 1) - 1
            if left > 0:
                self._working[uid] = left
            else:
                self._working.pop(uid, None)
            self._turns.notify_all()

    def in_flight(self) -> dict[int, int]:
        """Requests being answered, by uid."""
        with self._lock:
            return dict(self._in_flight)

    def _take_token(self, uid: int) -> None:
        """One of ``uid``'s requests this minute (caller holds the lock)."""
        per_minute, burst = self.limits.requests_per_minute, float(self.limits.burst)
        rate = per_minute / 60.0
        now = self._clock()
        tokens, when = self._buckets.get(uid, (burst, now))
        tokens = min(burst, tokens + (now - when) * rate)
        if tokens < 1.0:
            self._buckets[uid] = (tokens, now)
            wait = (1.0 - tokens) / rate
            raise ServiceBusy(f"uid {uid} sent more than {self.limits.burst} requests at once "
                              f"or {per_minute} a minute; try again in {wait:.1f}s",
                              retry_after=wait)
        if uid not in self._buckets and len(self._buckets) >= MAX_UIDS:
            self._forget_full(now)
        self._buckets[uid] = (tokens - 1.0, now)

    def _forget_full(self, now: float) -> None:
        """Drop the buckets that have filled up again (as good as new); all of them if that
        leaves too many (MAX_UIDS uids all busy within the last minute)."""
        burst, rate = float(self.limits.burst), self.limits.requests_per_minute / 60.0
        for uid, (tokens, when) in list(self._buckets.items()):
            if tokens + (now - when) * rate >= burst:
                del self._buckets[uid]
        if len(self._buckets) >= MAX_UIDS:
            self._buckets.clear()


class UserLines:
    """Root's log lines about one uid's requests, at most ``per_minute`` a minute for each uid
    (with ``exempt_root``, root's own are not bounded); the lines beyond are counted, and the
    count is said in that uid's next line, or in a line of its own once the minute is over
    (:meth:`flush`). So no user fills root's log, and one user's flood hides no other user's
    lines."""

    def __init__(self, logger: logging.Logger, level: int, per_minute: int, *,
                 exempt_root: bool = False, clock: Callable[[], float] = time.monotonic):
        self.logger, self.level, self.per_minute = logger, level, per_minute
        self.exempt_root = exempt_root
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[int, tuple[float, int, int]] = {}  # uid -> (start, logged, skipped)
        self._next_flush = 0.0

    def log(self, uid: int, message: str, *args) -> bool:
        """Log ``message % args`` for ``uid`` unless its minute's lines are spent; whether it
        was logged."""
        now = self._clock()
        if uid == 0 and self.exempt_root:
            self.logger.log(self.level, message, *args)
            self._flush_due(now)
            return True
        with self._lock:
            start, logged, skipped = self._windows.get(uid, (now, 0, 0))
            if now - start >= 60.0:
                start, logged = now, 0
            if logged >= self.per_minute:
                self._windows[uid] = (start, logged, skipped + 1)
                shown = False
            else:
                if uid not in self._windows and len(self._windows) >= MAX_UIDS:
                    self._windows.clear()  # forgets counts, never lets the table grow
                self._windows[uid] = (start, logged + 1, 0)
                shown = True
        if shown:
            self.logger.log(self.level, message + "%s", *args,
                            f" ({skipped} more line(s) of uid {uid} not logged)"
                            if skipped else "")
        self._flush_due(now)
        return shown

    def _flush_due(self, now: float) -> None:
        if now >= self._next_flush:
            self._next_flush = now + 1.0
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        """Say the lines not logged of each uid whose minute is over (one line per uid)."""
        now = self._clock() if now is None else now
        with self._lock:
            due = [(uid, skipped) for uid, (start, _, skipped) in self._windows.items()
                   if skipped and now - start >= 60.0]
            for uid, _ in due:
                del self._windows[uid]
        for uid, skipped in due:
            self.logger.log(self.level, "uid %d: %d more line(s) about its requests not logged",
                            uid, skipped)
