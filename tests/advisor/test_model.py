"""Table 2 of the layout paper, row by row, on hand-computed cases; the boundaries of its conditions;
and the table's implications 1)-4) with the paper's own constants (Table 3, InfiniBand)."""

from __future__ import annotations

import itertools

import pytest

from scratchkeeper.advisor import (
    ONE_DH,
    ONE_DV,
    RANDOM,
    SEQUENTIAL,
    TWO_D,
    WRITE,
    Cost,
    ModelParams,
    Workload,
    advise,
    request_cost,
)
from scratchkeeper.advisor.model import group_choices
from scratchkeeper.errors import InputError

# Constants whose terms cannot be mistaken for one another in a hand computation: e = 1000 s
# per connection, v = 1 s per byte, alpha 10 s (sequential) or 30 s (random), beta 0.1 s per
# byte read, 0.2 s per byte written.
UNIT = ModelParams(e=1000.0, v=1.0, alpha_sequential=10.0, alpha_random=30.0, beta_read=0.1,
                   beta_write=0.2, source="test")
S = 100  # bytes per request


def cost(layout, p, m, n, groups=None, **kw):
    return request_cost(layout, p, m, n, S, UNIT, groups=groups, **kw)


# --- 1-DV ---------------------------------------------------------------------------------

def test_1dv_fewer_processes_than_osts_costs_the_client_nodes_connections():
    # p <= n: Te = m e, Tx = m s v; one process per OST: Ts = alpha, Trw = s beta
    assert cost(ONE_DV, 4, 2, 8) == Cost(2000.0, 200.0, 10.0, 10.0)


def test_1dv_more_processes_than_osts_and_few_per_node_costs_the_osts_connections():
    # p = 20 > n = 8: ceil(20/8) = 3 processes per OST >= m = 2
    assert cost(ONE_DV, 20, 2, 8) == Cost(3000.0, 300.0, 30.0, 30.0)


def test_1dv_more_processes_than_osts_and_many_per_node_costs_the_client_nodes_connections():
    # m = 4 > ceil(20/8) = 3: the client node's 4 connections are the serial ones
    assert cost(ONE_DV, 20, 4, 8) == Cost(4000.0, 400.0, 30.0, 30.0)


def test_1dv_at_the_boundaries_p_equal_n_and_m_equal_ceil_p_over_n():
    assert cost(ONE_DV, 8, 1, 8) == Cost(1000.0, 100.0, 10.0, 10.0)      # p = n
    assert cost(ONE_DV, 9, 1, 8) == Cost(2000.0, 200.0, 20.0, 20.0)      # p = n + 1
    assert cost(ONE_DV, 16, 2, 8) == Cost(2000.0, 200.0, 20.0, 20.0)     # m = ceil(p/n)
    assert cost(ONE_DV, 16, 3, 8) == Cost(3000.0, 300.0, 20.0, 20.0)     # m = ceil(p/n) + 1


# --- 1-DH ---------------------------------------------------------------------------------

def test_1dh_few_processes_per_node_every_process_connects_to_every_ost():
    # m = 1 <= ceil(16/8) = 2: Te = p e, Tx = p s v / n, Ts = p alpha, Trw = p s beta / n
    assert cost(ONE_DH, 16, 1, 8) == Cost(16000.0, 200.0, 160.0, 20.0)


def test_1dh_many_processes_per_node_costs_m_times_n_connections():
    # m = 4 > ceil(16/8) = 2: Te = m n e, Tx = m s v
    assert cost(ONE_DH, 16, 4, 8) == Cost(32000.0, 400.0, 160.0, 20.0)


def test_1dh_condition_uses_the_ceiling_of_p_over_n():
    # p = 9, n = 8: ceil(9/8) = 2, so m = 2 is still the first row (p/n = 1.125 would not be)
    assert cost(ONE_DH, 9, 2, 8) == Cost(9000.0, 112.5, 90.0, 11.25)
    assert cost(ONE_DH, 9, 3, 8) == Cost(24000.0, 300.0, 90.0, 11.25)


# --- 2-D ----------------------------------------------------------------------------------

def test_2d_no_more_processes_than_groups():
    # p = 4 <= g = 4, n = 8 (2 OSTs per group): Te = m ceil(n/g) e, Tx = m s v,
    # Ts = ceil(p/g) alpha, Trw = ceil(p/g) s beta / ceil(n/g)
    assert cost(TWO_D, 4, 2, 8, groups=4) == Cost(4000.0, 200.0, 10.0, 5.0)


def test_2d_more_processes_than_groups_and_few_per_node():
    # p = 16, g = 4: 4 processes per group, 2 OSTs per group; m = 2: 2 * 2 <= 4
    assert cost(TWO_D, 16, 2, 8, groups=4) == Cost(4000.0, 200.0, 40.0, 20.0)


def test_2d_more_processes_than_groups_and_many_per_node():
    # m = 3: 3 * 2 > 4, so the client node's m ceil(n/g) connections are the serial ones
    assert cost(TWO_D, 16, 3, 8, groups=4) == Cost(6000.0, 300.0, 40.0, 20.0)


def test_2d_condition_compares_in_integers_at_a_fractional_ratio():
    # p = 12, g = 4: ceil(p/g) / ceil(n/g) = 3 / 2 = 1.5
    assert cost(TWO_D, 12, 1, 8, groups=4) == Cost(3000.0, 150.0, 30.0, 15.0)
    assert cost(TWO_D, 12, 2, 8, groups=4) == Cost(4000.0, 200.0, 30.0, 15.0)


def test_2d_is_continuous_where_its_last_two_rows_meet():
    # m ceil(n/g) = ceil(p/g): both rows give ceil(p/g) e (the extracted text's m ceil(p/g) e
    # would give 16000 here; see scratchkeeper/advisor/model.py)
    first = cost(TWO_D, 16, 2, 8, groups=4)
    assert first.establish == 4 * UNIT.e and first.transmission == 2 * S * UNIT.v


@pytest.mark.parametrize("p, m, n", [(p, m, n) for p, m, n in itertools.product(
    (1, 2, 3, 7, 8, 9, 16, 17, 64, 100), (1, 2, 3, 8), (1, 2, 3, 8, 16)) if m <= p])
def test_2d_with_one_group_per_ost_is_1dv(p, m, n):
    for pattern in (SEQUENTIAL, RANDOM):
        assert cost(TWO_D, p, m, n, groups=n, pattern=pattern) == \
            cost(ONE_DV, p, m, n, pattern=pattern)


@pytest.mark.parametrize("p, m, n", [(p, m, n) for p, m, n in itertools.product(
    (2, 4, 8, 16, 32, 64), (1, 2, 4, 8), (1, 2, 4, 8)) if m <= p and p % n == 0 and p > 1])
def test_2d_with_one_group_is_1dh_when_n_divides_p(p, m, n):
    assert cost(TWO_D, p, m, n, groups=1) == cost(ONE_DH, p, m, n)


# --- reads, writes, patterns --------------------------------------------------------------

def test_random_requests_pay_the_random_startup_and_writes_the_write_rate():
    assert cost(ONE_DH, 9, 3, 8, pattern=RANDOM).startup == 270.0
    assert cost(ONE_DH, 9, 3, 8, operation=WRITE).transfer == 22.5
    assert cost(ONE_DV, 4, 2, 8, operation=WRITE, pattern=RANDOM) == Cost(2000.0, 200.0, 30.0, 20.0)


@pytest.mark.parametrize("args, message", [
    ((ONE_DV, 0, 1, 8, S), "processes 0"),
    ((ONE_DV, 4, 5, 8, S), "processes per node 5: expected 1..4"),
    ((ONE_DV, 4, 1, 0, S), "OST count 0"),
    ((ONE_DV, 4, 1, 8, 0), "request size 0"),
    (("3-D", 4, 1, 8, S), "layout '3-D'"),
])
def test_shapes_the_model_has_no_meaning_for_are_refused(args, message):
    with pytest.raises(InputError, match=message):
        request_cost(*args, UNIT)
    with pytest.raises(InputError, match="storage groups 9: expected 1..8"):
        request_cost(TWO_D, 4, 1, 8, S, UNIT, groups=9)
    with pytest.raises(InputError, match="groups g is needed"):
        request_cost(TWO_D, 4, 1, 8, S, UNIT)


def test_group_choices_split_the_osts_evenly():
    assert group_choices(8) == [2, 4] and group_choices(12) == [2, 3, 4, 6]
    assert group_choices(7) == [] and group_choices(3) == [] and group_choices(1) == []


# --- the implications of Table 2, with the paper's constants ------------------------------

PAPER = ModelParams()
SIZES = [4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20]


def chosen(p, m, n, s, pattern=SEQUENTIAL):
    return advise(Workload.uniform(p, m, s, shared_file=True, pattern=pattern), PAPER, n).layout


def test_the_defaults_are_the_seeds_table_3_infiniband_values():
    assert (PAPER.e, PAPER.alpha_random, PAPER.alpha_sequential) == (0.0002, 0.0003, 0.0001)
    assert PAPER.v == 1 / 1e9 and PAPER.beta_read == PAPER.beta_write == 1 / 120e6


@pytest.mark.parametrize("s", [1 << 20, 4 << 20])
@pytest.mark.parametrize("p, n", [(1, 8), (1, 16), (2, 16)])
def test_implication_1_few_processes_many_osts_large_requests_favour_1dh(p, n, s):
    assert chosen(p, 1, n, s) == ONE_DH


def test_implication_1_by_hand():
    # p = 1, n = 16, s = 4 MiB, one process per node:
    # 1-DH: e + s v / 16 + alpha + s beta / 16;  1-DV: e + s v + alpha + s beta
    s = 4 << 20
    advice = advise(Workload.uniform(1, 1, s, shared_file=True), PAPER, 16)
    dh = next(e for e in advice.estimates if e.layout == ONE_DH).cost.total
    dv = next(e for e in advice.estimates if e.layout == ONE_DV).cost.total
    assert dh == pytest.approx(0.0002 + s / 1e9 / 16 + 0.0001 + s / 120e6 / 16)
    assert dv == pytest.approx(0.0002 + s / 1e9 + 0.0001 + s / 120e6)
    assert advice.layout == ONE_DH


@pytest.mark.parametrize("s", [64 << 10, 256 << 10, 1 << 20])
@pytest.mark.parametrize("p, n", [(4, 8), (8, 16), (16, 32)])
def test_implication_2_processes_near_the_osts_favour_2d(p, n, s):
    # Under Table 2 the 2-D region is p somewhat below n (here n/2): at p = n exactly with one
    # process per node 1-DV already gives each process an OST of its own, and at 4 MiB
    # requests 1-DH's n-fold split of the transfer outweighs its p connections
    assert chosen(p, 1, n, s) == TWO_D


def test_implication_2_by_hand():
    # p = 8, n = 16, m = 1, s = 1 MiB. 2-D with g = 8 (2 OSTs per group), p <= g:
    # m*2*e + m s v + alpha + s beta / 2
    s = 1 << 20
    advice = advise(Workload.uniform(8, 1, s, shared_file=True), PAPER, 16)
    assert advice.layout == TWO_D and advice.groups == 8
    assert advice.chosen.cost.total == pytest.approx(2 * 0.0002 + s / 1e9 + 0.0001
                                                     + s / 120e6 / 2)


@pytest.mark.parametrize("s", SIZES)
@pytest.mark.parametrize("pattern", [SEQUENTIAL, RANDOM])
@pytest.mark.parametrize("p, m, n", [(256, 16, 8), (128, 8, 8), (1024, 32, 16)])
def test_implication_3_many_more_processes_than_osts_favour_1dv(p, m, n, s, pattern):
    assert chosen(p, m, n, s, pattern) == ONE_DV


def test_implication_3_by_hand():
    # p = 64, m = 8, n = 8: 1-DV 8 (e + s v + alpha + s beta); 1-DH 64 e + 8 s v + 64 alpha
    # + 8 s beta: the difference is 56 (e + alpha)
    s = 1 << 20
    advice = advise(Workload.uniform(64, 8, s, shared_file=True), PAPER, 8)
    totals = {e.layout: e.cost.total for e in advice.estimates}
    assert totals[ONE_DV] == pytest.approx(8 * (0.0002 + s / 1e9 + 0.0001 + s / 120e6))
    assert totals[ONE_DH] - totals[ONE_DV] == pytest.approx(56 * (0.0002 + 0.0001))
    assert advice.layout == ONE_DV


def test_implication_4_when_the_client_node_is_the_bottleneck_1dh_loses():
    # p = 4, n = 16, s = 1 MiB: spread one per node, 1-DH wins; all four on one client node,
    # 1-DH costs m n = 64 connections on it and loses to 1-DV
    s = 1 << 20
    assert chosen(4, 1, 16, s) == ONE_DH
    advice = advise(Workload.uniform(4, 4, s, shared_file=True), PAPER, 16)
    totals = {e.layout: e.cost.total for e in advice.estimates}
    assert advice.layout in (ONE_DV, TWO_D)
    assert totals[ONE_DH] - totals[ONE_DV] == pytest.approx(60 * 0.0002 + 3 * 0.0001
                                                            - 0.75 * s / 120e6)


def test_implication_4_costly_connections_move_the_choice_from_1dh_to_2d_then_1dv():
    # p = 4 spread one per node, n = 16, s = 1 MiB: 1-DH makes p e connections per request,
    # 2-D (g = 8) 2 e per process, 1-DV e: as e grows the choice moves along
    workload = Workload.uniform(4, 1, 1 << 20, shared_file=True)
    assert [advise(workload, ModelParams(e=e), 16).layout
            for e in (0.0002, 0.003, 0.01)] == [ONE_DH, TWO_D, ONE_DV]
