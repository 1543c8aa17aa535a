"""Work of several recoveries made together: calls gathered into one, probes shared, and the
patch slots that bound how many files transfer and write at once.

After an OST failure recoveryd has many files to recover at about the same time. Their fixed
costs (a probe of their OSTs, the start of each rebuild, each layout switch: fsyncs of the
namespace) are paid once for the files that reach them together, while their transfers, which
share the network and the disks, run a few at a time.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..errors import RecoveryError
from ..storage import OstStatus


class RecoveryInterrupted(RecoveryError):
    """The service is stopping: the rebuild is left as it is for the next start to resume."""


class Gathered:
    """Calls made while one runs are made together, as one call, once it ended.

    ``run`` takes the items of the calls gathered and returns a result (or exception) for
    each, in order: each caller gets its own, raised if it is an exception. The first caller
    runs at once; nothing waits for company.
    """

    def __init__(self, run: Callable[[list], list]):
        self._run = run
        self._cond = threading.Condition()
        self._busy = False
        self._next: list[dict] = []  # the calls that wait for the running one to end

    def __call__(self, item):
        with self._cond:
            batch = self._next
            slot = {"item": item, "done": False, "result": None}
            batch.append(slot)
            while self._busy and not slot["done"]:
                self._cond.wait()
            lead = not slot["done"]
            if lead:
                self._busy, self._next = True, []
        if lead:
            try:
                results = self._run([s["item"] for s in batch])
            except BaseException as err:
                results = [err] * len(batch)
            with self._cond:
                for each, result in zip(batch, results, strict=True):
                    each["result"], each["done"] = result, True
                self._busy = False
                self._cond.notify_all()
        if isinstance(slot["result"], BaseException):
            raise slot["result"]
        return slot["result"]


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
    """At most ``count`` patches run at once; the other recoveries in flight wait here, in the
    order they arrived, while their probes, rebuild starts and switches are made together with
    the running ones'. A wait ends with :class:`RecoveryInterrupted` once ``stop`` is set."""

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
