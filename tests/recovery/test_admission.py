"""recoveryd's admission per user (recovery/admission.py), on its own: connections and threads,
requests a minute, turns, and the bounded log lines (time injected; no daemon, no socket)."""

from __future__ import annotations

import logging
import threading

import pytest

from scratchkeeper.ownership import Owner
from scratchkeeper.recovery.admission import Admission, Limits, UserLines
from scratchkeeper.recovery.client import ServiceBusy

ALICE, BOB, ROOT = Owner.of(1000, 1000), Owner.of(2000, 2000), Owner.of(0, 0)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_uid_gets_its_connections_and_the_last_threads_go_to_uids_holding_none():
    admission = Admission(Limits(threads=8, connections_per_uid=4, requests_per_minute=1000,
                                 burst=1000))
    for _ in range(4):
        admission.admit(ALICE)
    with pytest.raises(ServiceBusy, match="too many connections from uid 1000"):
        admission.admit(ALICE)
    admission.admit(BOB)
    admission.admit(BOB)  # 6 in progress: the last 2 are kept for uids holding none
    with pytest.raises(ServiceBusy, match="service busy"):
        admission.admit(BOB)
    admission.admit(ROOT)   # 6 busy, root held none
    with pytest.raises(ServiceBusy, match="service busy"):
        admission.admit(ROOT)  # root is bounded by the threads alone, the reserve included
    admission.admit(Owner.of(3000, 3000))   # 7 busy, uid 3000 held none
    with pytest.raises(ServiceBusy, match=r"service busy \(8 requests"):
        admission.admit(Owner.of(4000, 4000))
    admission.release(ALICE)
    admission.admit(Owner.of(4000, 4000))
    assert admission.in_flight() == {1000: 3, 2000: 2, 0: 1, 3000: 1, 4000: 1}


def test_a_uids_requests_are_a_token_bucket_and_the_refusal_says_when():
    clock = Clock()
    admission = Admission(Limits(threads=100, connections_per_uid=100, requests_per_minute=60,
                                 burst=20), clock=clock)
    for _ in range(20):
        admission.admit(ALICE)
        admission.release(ALICE)
    with pytest.raises(ServiceBusy, match="uid 1000 sent more than 20 requests at once or 60 a "
                                          "minute") as busy:
        admission.admit(ALICE)
    assert busy.value.retry_after == pytest.approx(1.0)
    admission.admit(BOB)       # another uid's bucket is full
    for _ in range(1000):      # root is not counted
        admission.admit(ROOT)
        admission.release(ROOT)
    clock.now = 0.5
    with pytest.raises(ServiceBusy) as busy:
        admission.admit(ALICE)
    assert busy.value.retry_after == pytest.approx(0.5)
    clock.now = 1.0            # one a second comes back
    admission.admit(ALICE)
    with pytest.raises(ServiceBusy):
        admission.admit(ALICE)
    clock.now = 1000.0         # the bucket fills to the burst, never beyond
    for _ in range(20):
        admission.admit(ALICE)
        admission.release(ALICE)
    with pytest.raises(ServiceBusy):
        admission.admit(ALICE)


def test_a_uids_requests_take_turns_and_wait_only_for_their_own():
    admission = Admission(Limits(working_per_uid=1))
    order: list[str] = []
    inside = threading.Event()
    leave = threading.Event()

    def first() -> None:
        with admission.working(ALICE):
            order.append("alice 1 in")
            inside.set()
            leave.wait(10)
            order.append("alice 1 out")

    def second() -> None:
        with admission.working(ALICE):
            order.append("alice 2 in")

    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert inside.wait(10)
    threads.append(threading.Thread(target=second))
    threads[1].start()
    with admission.working(BOB):     # another uid is not held up
        order.append("bob in")
    with admission.working(ROOT):    # nor is root
        order.append("root in")
    assert order == ["alice 1 in", "bob in", "root in"]
    leave.set()
    for thread in threads:
        thread.join(10)
    assert order[3:] == ["alice 1 out", "alice 2 in"]


def test_a_request_that_waits_gives_its_turn_up_meanwhile():
    admission = Admission(Limits(working_per_uid=1))
    paused = threading.Event()
    resume = threading.Event()
    got_turn = threading.Event()

    def waiter() -> None:
        with admission.working(ALICE):
            with admission.paused():
                paused.set()
                resume.wait(10)

    thread = threading.Thread(target=waiter)
    thread.start()
    assert paused.wait(10)
    def next_one() -> None:
        with admission.working(ALICE):
            got_turn.set()

    other = threading.Thread(target=next_one)
    other.start()
    assert got_turn.wait(10)  # the waiting request's turn went to the next one
    other.join(10)
    resume.set()
    thread.join(10)
    assert not thread.is_alive()  # and it had its turn back to end


def test_lines_of_one_uid_are_bounded_a_minute_and_counted(caplog):
    clock = Clock()
    logger = logging.getLogger("scratchkeeper.recovery.test-lines")
    lines = UserLines(logger, logging.INFO, 3, exempt_root=True, clock=clock)
    with caplog.at_level(logging.INFO, logger=logger.name):
        shown = [lines.log(1000, "request %d", n) for n in range(10)]
        lines.log(2000, "request of another uid")
        for n in range(5):
            lines.log(0, "root's %d", n)
        clock.now = 61.0
        lines.log(2000, "another minute")  # says 1000's count, whose minute is over
    messages = [r.getMessage() for r in caplog.records]
    assert shown == [True] * 3 + [False] * 7
    assert messages[:4] == ["request 0", "request 1", "request 2", "request of another uid"]
    assert sum(m.startswith("root's") for m in messages) == 5
    assert "uid 1000: 7 more line(s) about its requests not logged" in messages


def test_the_next_line_of_a_uid_carries_the_count_of_those_not_logged(caplog):
    clock = Clock()
    logger = logging.getLogger("scratchkeeper.recovery.test-lines")
    lines = UserLines(logger, logging.WARNING, 2, clock=clock)
    with caplog.at_level(logging.WARNING, logger=logger.name):
        for n in range(5):
            lines.log(0, "refused %d", n)  # root too, without exempt_root
        clock.now = 60.0
        lines.log(0, "refused again")
    assert [r.getMessage() for r in caplog.records] == [
        "refused 0", "refused 1", "refused again (3 more line(s) of uid 0 not logged)"]


def test_trusted_uids_are_bounded_by_the_threads_alone():
    """Root and the scheduler hook's user (recovery.hook_user): every job start asks."""
    hook = Owner.of(990, 990)
    admission = Admission(Limits(threads=100, connections_per_uid=2, requests_per_minute=1,
                                 burst=1), trusted=frozenset({0, 990}))
    for _ in range(20):
        admission.admit(hook)
    for _ in range(20):
        admission.admit(ROOT)
    assert admission.in_flight() == {990: 20, 0: 20}
    admission.admit(ALICE)  # another uid is bounded: its one request at once is spent
    admission.release(ALICE)
    with pytest.raises(ServiceBusy, match="at once or 1 a minute"):
        admission.admit(ALICE)
