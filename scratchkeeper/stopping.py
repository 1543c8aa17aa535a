"""Stopping a daemon on SIGTERM or SIGINT, whichever of its threads the kernel hands them to.

Python runs a signal's handler in the main thread only, and only when that thread next runs
bytecode. The kernel may deliver a process's SIGTERM to any thread that does not block it: when
it picks a worker, the handler waits until the main thread wakes on its own. A main thread asleep
in ``Event.wait(3600)`` then stops an hour late (CI saw recoveryd ignore SIGTERM for 30 s this
way). So the main thread of every daemon sleeps in short slices (:func:`sleep`), and each slice's
end runs any handler that is waiting.
"""
from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

#: the longest a daemon's main thread sleeps at once: how late a stop may be seen
SLICE = 0.5


def on_stop_signals(action: Callable[[], None]) -> None:
    """Call ``action`` (in the main thread) on SIGTERM and on SIGINT."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: action())


def sleep(stop: threading.Event, seconds: float | None) -> bool:
    """Wait up to ``seconds`` (forever if None) for ``stop``, in slices; True once it is set."""
    deadline = None if seconds is None else time.monotonic() + seconds
    while not stop.is_set():
        left = SLICE if deadline is None else min(SLICE, deadline - time.monotonic())
        if left <= 0:
            return False
        stop.wait(left)
    return True
