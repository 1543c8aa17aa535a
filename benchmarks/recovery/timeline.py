"""When each step of one recoveryd batch happened: the benchmark's timeline of section 2.

:class:`Timeline` wraps the calls a batch makes (the claims of requests, the probes, the
rebuilds' start, every piece fetched and written, the layout switches, the requests closed)
and notes when each ended; the transactions of the state and namespace databases are counted.
Nothing is changed in what the calls do. The offsets are taken from the report of the failure
(the end of the check's probe of every OST), as the batch's time is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from scratchkeeper.recovery import records

#: the steps of the timeline, in the order of a batch, with the words the report prints
STEPS = (
    ("probe", "the check's probe of every OST ends (the report of the failure)"),
    ("claim", "the last request claimed"),
    ("files_probe", "the files' own OSTs probed"),
    ("begin", "the rebuilds begun (substitute objects)"),
    ("first_byte", "the first lost byte arrives"),
    ("last_byte", "the last lost byte written"),
    ("commit", "the layouts switched (objects synced, one transaction)"),
    ("closed", "the last request closed"),
)


class Timeline:
    """Times of one batch's steps (monotonic seconds), gathered from wrapped calls."""

    def __init__(self):
        self._lock = threading.Lock()
        self.last: dict[str, float] = {}
        self.first: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.spans: dict[str, list[float]] = {}  # per file: first piece fetched, last written
        self._undo: list[Callable[[], None]] = []

    def mark(self, step: str, when: float | None = None) -> None:
        when = time.monotonic() if when is None else when
        with self._lock:
            self.first.setdefault(step, when)
            self.last[step] = max(self.last.get(step, when), when)

    def count(self, name: str) -> None:
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + 1

    def _span(self, path: str, when: float) -> None:
        with self._lock:
            span = self.spans.setdefault(path, [when, when])
            span[0], span[1] = min(span[0], when), max(span[1], when)

    # -- installing the wrappers -----------------------------------------------------------
    def _replace(self, owner, name: str, make: Callable[[Callable], Callable]) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return
        had_own = name in vars(owner)
        setattr(owner, name, make(original))

        def undo() -> None:
            if had_own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)
        self._undo.append(undo)

    def _after(self, owner, name: str, step: str | None, *, counted: str | None = None,
               when: Callable[[tuple, dict, object], bool] = lambda a, k, r: True) -> None:
        def make(original):
            def wrapper(*args, **kwargs):
                if counted:
                    self.count(counted)
                result = original(*args, **kwargs)
                if step and when(args, kwargs, result):
                    self.mark(step)
                return result
            return wrapper
        self._replace(owner, name, make)

    def install(self, service) -> None:
        """Wrap the calls of ``service`` (a RecoveryService) and its backend and stores."""
        backend, recoverer = service.backend, service.recoverer
        # the workers' claim (a batch's, which takes its first request as claim_next does)
        claim = "claim_batch" if hasattr(records, "claim_batch") else "claim_next"
        self._after(records, claim, "claim", counted="claim calls", when=lambda a, k, r: bool(r))
        for name in ("finish", "finish_many"):
            self._after(records, name, "closed")
        self._after(backend, "check_osts", "files_probe",
                    when=lambda a, k, r: k.get("only") is not None)
        for name in ("begin_rebuilds", "begin_rebuild"):
            self._after(backend, name, "begin")
        for name in ("commit_rebuilds", "commit_rebuild"):
            self._after(backend, name, "commit")

        def make_write(original):
            def wrapper(rebuild, pieces, **kwargs):
                result = original(rebuild, pieces, **kwargs)
                now = time.monotonic()
                self.mark("last_byte", now)
                self._span(rebuild.path, now)
                return result
            return wrapper
        self._replace(backend, "write_rebuild_batch", make_write)

        def make_fetch(original):
            def wrapper(reader, rebuild, batch, **kwargs) -> Iterator:
                for piece in original(reader, rebuild, batch, **kwargs):
                    now = time.monotonic()
                    self.mark("first_byte", now)
                    self._span(rebuild.path, now)
                    yield piece
            return wrapper
        self._replace(recoverer, "_fetch", make_fetch)
        for label, store in (("state transactions", service.store),
                             ("namespace transactions", backend.db)):
            self._count_transactions(store, label)

    def _count_transactions(self, store, label: str) -> None:
        def make(original):
            def wrapper(*args, **kwargs):
                if not store.connection().in_transaction:  # a nested one joins the outer
                    self.count(label)
                return original(*args, **kwargs)
            return wrapper
        self._replace(store, "transaction", make)

    def remove(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    # -- what it says ------------------------------------------------------------------------
    def offsets(self, reported: float, probe_began: float) -> dict:
        """Each step's end from the report of the failure (the probe's own: its start, as a
        negative offset), how wide the patch ran, and the counts."""
        steps = {"probe": probe_began - reported}
        steps.update((step, self.last[step] - reported) for step, _ in STEPS
                     if step in self.last and step != "probe")
        if "first_byte" in self.first:
            steps["first_byte"] = self.first["first_byte"] - reported
        window = steps.get("last_byte", 0.0) - steps.get("first_byte", 0.0)
        busy = sum(end - start for start, end in self.spans.values())
        return {"steps": steps, "counts": dict(self.counts),
                "files_at_once": busy / window if window > 0 else 0.0,
                "files": len(self.spans)}
