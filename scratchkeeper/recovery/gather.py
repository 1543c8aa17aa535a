"""Work of several recoveries made together: calls gathered into one, probes shared, the patch
slots that bound how many recoveries (a batch of files, or one) patch at once, and the patch
budget that bounds the bytes their transfers have in flight.

After an OST failure recoveryd has many files to recover at about the same time. Their fixed
costs (a probe of their OSTs, the start of each rebuild, each layout switch: fsyncs of the
namespace) are paid once for the files that reach them together (a batch hands them all in one
call), while their transfers, which share the network and the disks, go as wide as the patch
budget lets them.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import RecoveryError
from ..storage import OstStatus


class RecoveryInterrupted(RecoveryError):
    """The service is stopping: the rebuild is left as it is for the next start to resume."""


class Gathered:
    """Calls made while one runs are made together, as one call, once it ended.

    ``run`` takes the items of the calls gathered and returns a result (or exception) for
    each, in order. A call hands one item (its result returned, an exception raised) or, with
    :meth:`many`, a batch's items (their results returned, exceptions in their places). The
    first caller runs at once; nothing waits for company.
    """

    def __init__(self, run: Callable[[list], list]):
        self._run = run
        self._cond = threading.Condition()
        self._busy = False
        self._next: list[dict] = []  # the calls that wait for the running one to end

    def __call__(self, item):
        result, = self.many([item])
        if isinstance(result, BaseException):
            raise result
        return result

    def many(self, items: list) -> list:
        """Results of ``items``, one each, in order: a batch's items in one run."""
        with self._cond:
            batch = self._next
            slot: dict[str, Any] = {"items": list(items), "done": False, "results": None}
            batch.append(slot)
            while self._busy and not slot["done"]:
                self._cond.wait()
            lead = not slot["done"]
            if lead:
                self._busy, self._next = True, []
        if lead:
            gathered = [item for each in batch for item in each["items"]]
            try:
                results = list(self._run(gathered))
                if len(results) != len(gathered):
                    raise RecoveryError(f"a gathered call answered {len(results)} of "
                                        f"{len(gathered)} items")
            except BaseException as err:  # every caller's items fail with it
                results = [err] * len(gathered)
            with self._cond:
                position = 0
                for each in batch:
                    count = len(each["items"])
                    each["results"], each["done"] = results[position:position + count], True
                    position += count
                self._busy = False
                self._cond.notify_all()
        return list(slot["results"])


class ProbeGroup:
    """OST probes asked for at about the same time, made as one.

    A caller names the OSTs it needs (``None``: every OST) and ``since``, when its recovery
    began: a probe that began after that and covers them answers it, whether it is still
    running (it is waited for) or the last one made. Otherwise it joins the callers of the next
    probe, which starts once the running one ended and covers all their OSTs. So the files an
    OST failure hits, started together by recoveryd's file workers, pay one probe, and none is
    told a state from before its recovery began.
    """

    def __init__(self, run: Callable[[set[int] | None], list[OstStatus]]):
        self._run = run
        self._cond = threading.Condition()
        self._running: _ProbeRound | None = None
        self._last: _ProbeRound | None = None  # the last probe that answered
        self._next = _ProbeRound()  # the callers of the probe that follows the running one

    def probe(self, osts: set[int] | None, since: float | None = None) -> list[OstStatus]:
        with self._cond:
            round_ = self._usable(osts, since)
            if round_ is None:
                round_ = self._next
                round_.ask(osts)
            while not round_.done and (round_ is not self._next or self._running is not None):
                self._cond.wait()
            lead = not round_.done  # this caller makes the probe of its round
            if lead:
                round_.began = time.monotonic()
                self._running, self._next = round_, _ProbeRound()
        if lead:
            try:
                round_.statuses = self._run(round_.osts)
            except BaseException as err:
                round_.error = err
            with self._cond:
                round_.done = True
                self._running = None
                if round_.error is None:
                    self._last = round_
                self._cond.notify_all()
        if round_.error is not None:
            raise round_.error
        return round_.statuses

    def _usable(self, osts: set[int] | None, since: float | None) -> _ProbeRound | None:
        if since is None:
            return None
        for round_ in (self._running, self._last):
            if round_ is not None and round_.began > since and round_.covers(osts):
                return round_
        return None


@dataclass
class _ProbeRound:
    osts: set[int] | None = field(default_factory=set)  # None: every OST
    began: float = 0.0
    done: bool = False
    statuses: list[OstStatus] = field(default_factory=list)
    error: BaseException | None = None

    def ask(self, osts: set[int] | None) -> None:
        if osts is None or self.osts is None:
            self.osts = None
        else:
            self.osts |= set(osts)

    def covers(self, osts: set[int] | None) -> bool:
        return self.osts is None or (osts is not None and set(osts) <= self.osts)


class PatchSlots:
    """At most ``count`` recoveries patch at once (a batch of files holds one slot); the others
    in flight wait here, in the order they arrived, while their probes, rebuild starts and
    switches are made together with the running ones'. A wait ends with
    :class:`RecoveryInterrupted` once ``stop`` is set."""

    def __init__(self, count: int, stop: threading.Event):
        self.count = count
        self.stop = stop
        self._cond = threading.Condition()
        self._busy = 0
        self._waiting: collections.deque[object] = collections.deque()

    def free(self) -> int:
        """Slots nobody holds or waits for now (a connection opened ahead is worth it)."""
        with self._cond:
            return max(0, self.count - self._busy - len(self._waiting))

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        ticket = object()
        with self._cond:
            self._waiting.append(ticket)
            try:
                while self._waiting[0] is not ticket or self._busy >= self.count:
                    if self.stop.is_set():
                        raise RecoveryInterrupted("the service is stopping")
                    self._cond.wait(0.5)
            finally:
                self._waiting.remove(ticket)
                self._cond.notify_all()
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()


class PatchBudget:
    """Bytes of lost ranges in flight (asked of a source and not yet written), shared by every
    patch of a Recoverer: at most ``total`` (``recovery.patch_budget``).

    A lane takes its bytes before it asks a source for a request's chunks and gives back what
    did not arrive; the rebuild's writer gives back what it wrote. So every file of a failure
    patches at once, as wide as the budget allows rather than a number of files, and the
    received bytes waiting for the disk never hold more memory than the budget. A lane gets at
    most its share (the budget over the lanes patching), at least the chunk it cannot do
    without; a chunk larger than the whole budget goes alone, once nothing else is in flight.
    """

    def __init__(self, total: int):
        self.total = total
        self._cond = threading.Condition()
        self._in_flight = 0
        self._lanes = 0

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._in_flight

    @contextlib.contextmanager
    def lane(self) -> Iterator[None]:
        """A lane patching (it counts for the share of every lane)."""
        with self._cond:
            self._lanes += 1
        try:
            yield
        finally:
            with self._cond:
                self._lanes -= 1
                self._cond.notify_all()

    def take(self, wanted: int, least: int, give_up: Callable[[], bool]) -> int:
        """Up to ``wanted`` bytes, at least ``least``, once they are free; 0 if ``give_up()``
        says so first (it is asked at least twice a second while waiting)."""
        with self._cond:
            while not give_up():
                free = self.total - self._in_flight
                if free >= least or not self._in_flight:
                    share = max(least, self.total // max(1, self._lanes))
                    granted = max(least, min(wanted, free, share))
                    self._in_flight += granted
                    return granted
                self._cond.wait(0.5)
            return 0

    def give(self, amount: int) -> None:
        """Bytes no longer in flight (written, or never to arrive)."""
        if amount <= 0:
            return
        with self._cond:
            self._in_flight -= amount
            self._cond.notify_all()
