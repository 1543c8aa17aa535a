"""Stopping a daemon on SIGTERM or SIGINT, whichever of its threads the kernel hands them to.

Python runs a signal's handler in the main thread only, and only when that thread next runs
bytecode. The kernel may deliver a process's SIGTERM to any thread that does not block it: when
it picks a worker, the handler waits until the main thread wakes on its own. A main thread asleep
in ``Event.wait(3600)`` then stops an hour late (CI saw recoveryd ignore SIGTERM for 30 s this
way). So the main thread of every daemon sleeps in short slices (:func:`sleep`), and each slice's
end runs any handler that is waiting.

A second path does not depend on the interpreter running that handler at all: the signal's C
handler also writes the signal's number to a wakeup socket (``signal.set_wakeup_fd``), in
whichever thread took it, and each slice's end reads that socket and stops the daemon itself.
CI once saw recoveryd's main thread go on sleeping in slices for 30 s after a SIGTERM whose
Python handler never ran; the wakeup socket is what a slice now checks besides the event.
"""
from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable

#: the longest a daemon's main thread sleeps at once: how late a stop may be seen
SLICE = 0.5
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _Stopper:
    """The action to run on a stop signal, once, and the wakeup socket's reading end."""

    def __init__(self, action: Callable[[], None]):
        self.action = action
        self.fired = False
        self.reader, self.writer = socket.socketpair()
        for end in (self.reader, self.writer):
            end.setblocking(False)

    def fire(self) -> None:
        # only ever in the main thread (the Python handler, or a slice's poll): no lock, which
        # the handler could not take if the signal came while a poll held it
        if not self.fired:
            self.fired = True
            self.action()

    def poll(self) -> None:
        """Run the action if the wakeup socket holds a stop signal's number."""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            if any(number in STOP_SIGNALS for number in self.reader.recv(512)):
                self.fire()

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


_stopper: _Stopper | None = None


def on_stop_signals(action: Callable[[], None]) -> None:
    """Call ``action`` once (in the main thread) on the first SIGTERM or SIGINT; call from the
    main thread, before the daemon's threads start."""
    global _stopper
    previous, _stopper = _stopper, _Stopper(action)
    signal.set_wakeup_fd(_stopper.writer.fileno(), warn_on_full_buffer=False)
    if previous is not None:
        previous.close()
    stopper = _stopper
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda *_: stopper.fire())


def sleep(stop: threading.Event, seconds: float | None) -> bool:
    """Wait up to ``seconds`` (forever if None) for ``stop``, in slices; True once it is set."""
    deadline = None if seconds is None else time.monotonic() + seconds
    while not stop.is_set():
        left = SLICE if deadline is None else min(SLICE, deadline - time.monotonic())
        if left <= 0:
            return False
        stop.wait(left)
        if _stopper is not None:
            _stopper.poll()
    return True
