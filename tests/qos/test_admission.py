"""Admission per interval: the deterministic count, the statistical Q, the queue's counters."""

import pytest

from scratchkeeper.errors import QosError
from scratchkeeper.qos.admission import (
    AdmissionQueue,
    DeterministicAdmission,
    StatisticalAdmission,
    sample_retrieval_probabilities,
)
from scratchkeeper.qos.designs import PAPER_9_3_1
from scratchkeeper.qos.placement import design_allocation


def test_deterministic_limits():
    assert [DeterministicAdmission(3, m).limit for m in (1, 2, 3)] == [5, 14, 27]
    policy = DeterministicAdmission(3, 1)
    assert [policy.admit_count(k) for k in (0, 4, 5, 6, 40)] == [0, 4, 5, 5, 5]


def test_queue_delays_beyond_the_limit_oldest_first():
    queue = AdmissionQueue(DeterministicAdmission(3, 1))
    first = queue.interval(0, ["a", "b", "c", "d", "e", "f", "g"])
    assert [r for r, _ in first] == ["a", "b", "c", "d", "e"]
    second = queue.interval(1, ["h", "i", "j", "k"])
    assert second == [("f", 0), ("g", 0), ("h", 1), ("i", 1), ("j", 1)]
    third = queue.interval(2, [])
    assert third == [("k", 1)]
    assert queue.interval(3, []) == []
    counters = queue.counters
    assert (counters.admitted, counters.delayed, counters.violations, counters.intervals) == (11, 3, 0, 3)
    queue.record_violation()
    assert queue.counters.violations == 1


def test_statistical_admission_hand_computed():
    # P_6 = 0.99, P_7 = 0.98, P_8 = 0.95 (the paper's (9,3,1) figures), epsilon = 0.02
    policy = StatisticalAdmission(3, 1, {6: 0.99, 7: 0.98, 8: 0.95}, epsilon=0.02)
    # interval 1, 6 offered: Q = 0.01 / 1 < 0.02
    assert policy.admit_count(6) == 6
    # interval 2, 7 offered: Q = (0.01 + 0.02) / 2 = 0.015
    assert policy.admit_count(7) == 7
    # interval 3, 8 offered: (0.03 + 0.05) / 3 = 0.027 too much; 7: (0.03 + 0.02) / 3 = 0.0167
    assert policy.admit_count(8) == 7
    # interval 4, 3 offered: always (k <= S); Q = 0.05 / 4
    assert policy.admit_count(3) == 3
    assert policy.risk() == pytest.approx(0.05 / 4)
    assert dict(policy.intervals_by_size) == {6: 1, 7: 2, 3: 1}
    # a size with no estimate never goes beyond S
    # interval 5, 12 offered: 9..12 have no estimate (P = 0): (0.05 + 1) / 5; 8 gives
    # (0.05 + 0.05) / 5 = 0.02, not below; 7 gives (0.05 + 0.02) / 5 = 0.014
    assert policy.admit_count(12) == 7


def test_statistical_with_epsilon_zero_is_deterministic():
    policy = StatisticalAdmission(3, 1, {6: 0.99, 7: 0.98}, epsilon=0.0)
    assert [policy.admit_count(k) for k in (6, 7, 2)] == [5, 5, 2]
    with pytest.raises(QosError, match="epsilon must be in"):
        StatisticalAdmission(3, 1, {}, epsilon=1.5)
    with pytest.raises(QosError, match="P_6 must be in"):
        StatisticalAdmission(3, 1, {6: 2.0}, epsilon=0.1)


def test_sampled_probabilities_match_the_paper():
    allocation = design_allocation(PAPER_9_3_1)
    distinct = sample_retrieval_probabilities(allocation, 1, 10, 400, seed=2, repetition=False)
    assert all(distinct[k] == 1.0 for k in range(1, 6))   # the guarantee: S = 5
    assert distinct[10] == 0.0                              # 10 buckets on 9 devices
    # with repetition, the paper's Figure 4: 0.99, 0.98, 0.95, 0.75 for k = 6..9
    paper = sample_retrieval_probabilities(allocation, 1, 9, 3000, seed=2)
    for k, expected in {6: 0.99, 7: 0.98, 8: 0.95, 9: 0.75}.items():
        assert paper[k] == pytest.approx(expected, abs=0.03)
    with pytest.raises(QosError, match="samples must be"):
        sample_retrieval_probabilities(allocation, 1, 9, 0)
