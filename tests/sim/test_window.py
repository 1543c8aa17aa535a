"""The incremental window the replay uses gives what replication_targets gives the daemon."""

from __future__ import annotations

import math

from hypothesis import given, settings, strategies as st

from scratchkeeper.replication.window import SHORTCUT, WINDOW, RankedWindow, WindowParams, replication_targets


def test_known_queue_window_then_shortcut():
    # S = 100, alpha 0.3: the window must cover 30 nodes -> the first two jobs (20 + 15).
    window = RankedWindow(5, 100, WindowParams(alpha=0.3, threshold=0.05))
    for rank, nodes in enumerate([20, 15, 40, 5, 30]):
        window.enter(rank, nodes)
    assert window.advance(largest_running=10) == {0: WINDOW, 1: WINDOW, 3: SHORTCUT}
    # A running job of 60 nodes widens the window to 60 nodes: 20 + 15 + 40.
    assert window.advance(largest_running=60) == {2: WINDOW}
    assert window.advance(largest_running=60) == {}
    # The head leaves: the prefix is now 15 + 40 + 5 = 60 -> rank 4 stays out.
    window.leave(0)
    assert window.advance(largest_running=60) == {}
    window.leave(1)
    assert window.advance(largest_running=60) == {4: WINDOW}


def test_infinite_alpha_takes_the_whole_queue():
    window = RankedWindow(3, 100, WindowParams(alpha=math.inf, threshold=0.0))
    for rank in range(3):
        window.enter(rank, 90)
    assert window.advance(0) == {0: WINDOW, 1: WINDOW, 2: WINDOW}


def test_a_job_entering_in_the_middle_joins_the_window_by_rank():
    # The oracle orders by dispatch time: a late arrival can rank ahead of waiting jobs.
    window = RankedWindow(4, 10, WindowParams(alpha=0.5, threshold=0.0))
    window.enter(2, 5)
    window.enter(3, 5)
    assert window.advance(0) == {2: WINDOW}
    window.enter(0, 1)
    assert window.advance(0) == {0: WINDOW}


@st.composite
def _operations(draw):
    system = draw(st.integers(1, 64))
    size = draw(st.integers(1, 25))
    params = WindowParams(alpha=draw(st.sampled_from([0.05, 0.2, 0.5, 1.0, 3.0, math.inf])),
                          threshold=draw(st.sampled_from([0.0, 0.01, 0.1, 0.5])))
    nodes = draw(st.lists(st.integers(1, system), min_size=size, max_size=size))
    steps = draw(st.lists(st.tuples(st.sampled_from(["enter", "leave", "advance"]),
                                    st.integers(0, size - 1), st.integers(0, system)),
                          max_size=80))
    return system, params, nodes, steps


@settings(deadline=None)
@given(_operations())
def test_incremental_window_matches_replication_targets(case):
    system, params, nodes, steps = case
    window = RankedWindow(len(nodes), system, params)
    present: set[int] = set()
    targeted: set[int] = set()
    used: set[int] = set()
    for op, rank, largest in steps:
        if op == "enter" and rank not in used:
            used.add(rank)
            present.add(rank)
            window.enter(rank, nodes[rank])
        elif op == "leave" and rank in present:
            present.discard(rank)
            window.leave(rank)
        elif op == "advance":
            queue = [(r, nodes[r]) for r in sorted(present)]
            expected = {r: why for r, why in
                        replication_targets(queue, largest, system, params).items()
                        if r not in targeted}
            got = window.advance(largest)
            assert got == expected
            targeted.update(got)
