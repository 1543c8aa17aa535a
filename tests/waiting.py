"""Waiting in tests: for a condition, with a deadline, never for a fixed time.

A test that sleeps a fixed time to let something happen fails when the machine is slow (the
thing has not happened yet) and wastes the time when it is fast. :func:`wait_for` asks for the
condition itself, as often as ``interval``, and fails the test, saying what it waited for,
once ``timeout`` has passed. A sleep that remains in a test says in a comment why no condition
can be asked for (the absence of an event, a pace the test itself sets).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], what: str, *, timeout: float = 30.0,
             interval: float = 0.02) -> T:
    """``condition()``'s first true value, asked every ``interval`` seconds; an AssertionError
    naming ``what`` when it is still false after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        time.sleep(interval)


def wait_released(mount_root: Path, timeout: float = 10.0) -> None:
    """Until every file opened through the scratch mount at ``mount_root`` has had its RELEASE
    handled. The kernel sends RELEASE after close(2) has returned; the mount writes the file's
    CLOSE record, if any, before it lets go of the file's descriptors, which it counts for the
    users in the root's attribute ``user.scratchkeeper.descriptors``."""
    def held() -> int:
        return json.loads(os.getxattr(mount_root, "user.scratchkeeper.descriptors"))["users"]["held"]

    wait_for(lambda: held() == 0, f"every file opened through {mount_root} released",
             timeout=timeout)
