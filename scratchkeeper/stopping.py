"""Stopping a daemon on SIGTERM or SIGINT, whichever of its threads the kernel hands them to.

Python runs a signal's handler in the main thread only, and only when that thread next runs
bytecode. The kernel may deliver a process's SIGTERM to any thread that does not block it: when
it picks a worker, the handler waits until the main thread wakes on its own. A main thread asleep
in ``Event.wait(3600)`` then stops an hour late (CI saw recoveryd ignore SIGTERM for 30 s this
way). So the main thread of every daemon sleeps in short slices (:func:`sleep`), and each slice's
end runs any handler that is waiting.

The handler itself only raises a flag: the daemon's stop (logging, setting events, waking
threads) runs at the end of a slice, never inside the handler. A handler runs between any two
bytecodes of the main thread, also in the middle of a log line or while the main thread holds
an event's lock; recoveryd once logged from its handler while its main thread was writing to
standard error, the write failed as reentrant, and the stop was lost (CI: recoveryd ignored
SIGTERM for 30 s). A second path does not need the Python handler at all: the signal's C handler
writes the signal's number to a wakeup socket (``signal.set_wakeup_fd``) in whichever thread
took it, and each slice's end reads it too.
"""
from __future__ import annotations

import contextlib
import select
import signal
import socket
import threading
import time
from collections.abc import Callable

#: the longest a daemon's main thread sleeps at once: how late a stop may be seen
SLICE = 0.5
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _Stopper:
    """The action to run once a stop signal came, and the wakeup socket's reading end."""

    def __init__(self, action: Callable[[], None]):
        self.action = action
        self.signalled = False  # set by the Python handler: nothing else happens in it
        self.done = False
        self.reader, self.writer = socket.socketpair()
        for end in (self.reader, self.writer):
            end.setblocking(False)

    def poll(self) -> None:
        """Run the action, once, if a stop signal came (the flag, or the wakeup socket)."""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            if any(number in STOP_SIGNALS for number in self.reader.recv(512)):
                self.signalled = True
        if self.signalled and not self.done:
            self.done = True
            self.action()

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


_stopper: _Stopper | None = None


def on_stop_signals(action: Callable[[], None]) -> None:
    """Call ``action`` once, from :func:`sleep` in the main thread, after the first SIGTERM or
    SIGINT; call from the main thread, before the daemon's threads start."""
    global _stopper
    previous, _stopper = _stopper, _Stopper(action)
    signal.set_wakeup_fd(_stopper.writer.fileno(), warn_on_full_buffer=False)
    if previous is not None:
        previous.close()
    stopper = _stopper
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda *_: setattr(stopper, "signalled", True))


def poll() -> None:
    """Run the stop action now if a stop signal came: for a main thread that waits in slices of
    its own (replicad's wait for events) instead of :func:`sleep`."""
    if _stopper is not None:
        _stopper.poll()


def sleep(stop: threading.Event, seconds: float | None) -> bool:
    """Wait up to ``seconds`` (forever if None) for ``stop``, in slices; True once it is set."""
    deadline = None if seconds is None else time.monotonic() + seconds
    while not stop.is_set():
        left = SLICE if deadline is None else min(SLICE, deadline - time.monotonic())
        if left <= 0:
            return False
        if _stopper is None:
            stop.wait(left)
        else:
            # the wakeup socket ends the slice as soon as a stop signal comes, whichever thread
            # took it; ``stop`` set by another thread is seen at the slice's end
            select.select([_stopper.reader], [], [], left)
        poll()
    return True
