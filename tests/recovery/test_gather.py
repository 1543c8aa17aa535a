"""PatchSlots: how many patches run at once, in the order they asked, and a stop ends a wait."""

from __future__ import annotations

import threading
import time

import pytest

from scratchkeeper.recovery.gather import PatchSlots, RecoveryInterrupted


def _run(slots: PatchSlots, name: str, log: list, hold: threading.Event) -> threading.Thread:
    def body():
        try:
            with slots.held():
                log.append(("in", name))
                hold.wait(10)
                log.append(("out", name))
        except RecoveryInterrupted:
            log.append(("stopped", name))
    thread = threading.Thread(target=body)
    thread.start()
    return thread


def _until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_at_most_count_hold_a_slot_and_the_waiters_enter_in_the_order_they_came():
    slots, log = PatchSlots(2, threading.Event()), []
    holds = [threading.Event() for _ in range(5)]
    threads = []
    for number, hold in enumerate(holds):
        threads.append(_run(slots, f"f{number}", log, hold))
        # each one asks once the one before is inside or waiting
        _until(lambda: len(slots._waiting) + slots._busy == number + 1)
    assert [entry for entry in log if entry[0] == "in"] == [("in", "f0"), ("in", "f1")]
    assert slots.free() == 0
    holds[1].set()
    _until(lambda: ("in", "f2") in log)
    assert ("in", "f3") not in log  # f0 still holds its slot
    for hold in holds:
        hold.set()
    for thread in threads:
        thread.join(10)
    entered = [name for kind, name in log if kind == "in"]
    assert entered == ["f0", "f1", "f2", "f3", "f4"]
    assert slots.free() == 2


def test_free_counts_the_slots_nobody_holds_or_waits_for():
    slots, log = PatchSlots(3, threading.Event()), []
    hold = threading.Event()
    first = _run(slots, "a", log, hold)
    _until(lambda: ("in", "a") in log)
    assert slots.free() == 2
    hold.set()
    first.join(10)
    assert slots.free() == 3


def test_a_stop_ends_the_waits_and_leaves_the_holder_alone():
    stop = threading.Event()
    slots, log = PatchSlots(1, stop), []
    hold, never = threading.Event(), threading.Event()
    holder = _run(slots, "holder", log, hold)
    _until(lambda: ("in", "holder") in log)
    waiter = _run(slots, "waiter", log, never)
    _until(lambda: len(slots._waiting) == 1)
    stop.set()
    waiter.join(10)
    assert ("stopped", "waiter") in log and ("in", "waiter") not in log
    assert not slots._waiting
    hold.set()
    holder.join(10)
    assert log[-1] == ("out", "holder")


@pytest.mark.parametrize("count", [1, 4])
def test_a_slot_is_given_back_when_the_patch_raises(count):
    slots = PatchSlots(count, threading.Event())
    with pytest.raises(ValueError):
        with slots.held():
            raise ValueError("patch failed")
    assert slots.free() == count
