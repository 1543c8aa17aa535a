"""Section 4: a workload's overall cost and the stripe settings of the chosen layout."""

from __future__ import annotations

import pytest

from scratchkeeper.advisor import (
    ONE_DH,
    ONE_DV,
    RANDOM,
    TWO_D,
    WRITE,
    AccessClass,
    Cost,
    ModelParams,
    Workload,
    advise,
    format_size,
    params_from_config,
    request_cost,
    stripe_settings,
    workload_cost,
)
from scratchkeeper.config import parse_config
from scratchkeeper.errors import InputError

UNIT = ModelParams(e=1000.0, v=1.0, alpha_sequential=10.0, alpha_random=30.0, beta_read=0.1,
                   beta_write=0.2, source="test")
K, M = 1 << 10, 1 << 20


@pytest.mark.parametrize("layout, shared, request_size, osts, groups, count, size", [
    # 1-DV, one shared file: all OSTs, stripe = the most common request size
    (ONE_DV, True, 256 * K, 8, None, 8, 256 * K),
    # ... rounded up to 64 KiB so that a request stays on one OST
    (ONE_DV, True, 100_000, 8, None, 8, 128 * K),
    # 1-DV, a file per process: one OST per file
    (ONE_DV, False, 256 * K, 8, None, 1, 1 * M),
    # 1-DH: all OSTs, request / n
    (ONE_DH, True, 4 * M, 8, None, 8, 512 * K),
    (ONE_DH, False, 4 * M, 16, None, 16, 256 * K),
    (ONE_DH, True, 1 * M, 12, None, 12, 64 * K),  # 87381 rounded down
    # 2-D, shared: all OSTs, request * g / n; a file per process: n/g OSTs
    (TWO_D, True, 1 * M, 8, 4, 8, 512 * K),
    (TWO_D, False, 1 * M, 8, 4, 2, 512 * K),
    (TWO_D, False, 4 * M, 16, 4, 4, 1 * M),
    (TWO_D, True, 1 * M, 12, 4, 12, 320 * K),    # 349525 to the nearest 64 KiB
])
def test_section_4_guidelines(layout, shared, request_size, osts, groups, count, size):
    assert stripe_settings(layout, request_size, osts, shared, groups)[:2] == (count, size)


def test_requests_too_small_to_spread_say_so():
    count, size, notes = stripe_settings(ONE_DH, 4 * K, 8, True)
    assert (count, size) == (8, 64 * K)
    assert notes == ("a 4K request spans 1 of 8 OSTs at the smallest stripe size Lustre takes "
                     "(64 KiB), not all of them",)
    assert stripe_settings(ONE_DV, 100_000, 8, True)[2] == (
        "stripe size 128K: the request size 100000 rounded up to a multiple of 64 KiB",)


def test_the_overall_cost_sums_rounds_of_every_class():
    # 4 processes, 2 per node, 8 OSTs, 1-DV: a class of 8 requests is 2 rounds of Table 2
    workload = Workload(4, 2, True, (AccessClass(100, 8), AccessClass(100, 4, WRITE, RANDOM)))
    reads = request_cost(ONE_DV, 4, 2, 8, 100, UNIT)
    writes = request_cost(ONE_DV, 4, 2, 8, 100, UNIT, operation=WRITE, pattern=RANDOM)
    assert reads == Cost(2000.0, 200.0, 10.0, 10.0) and writes == Cost(2000.0, 200.0, 30.0, 20.0)
    assert workload_cost(workload, ONE_DV, 8, UNIT) == Cost(6000.0, 600.0, 50.0, 40.0)


def test_the_advice_carries_costs_choice_reason_and_command():
    advice = advise(Workload.uniform(64, 8, 1 * M, shared_file=True), ModelParams(), 8)
    assert [e.layout for e in advice.estimates] == [ONE_DV, TWO_D, ONE_DH]
    assert advice.layout == ONE_DV and advice.groups is None
    assert (advice.stripe_count, advice.stripe_size) == (8, 1 * M)
    assert advice.command == "lfs setstripe -c 8 -S 1M FILE"
    assert advice.reason.startswith("1-DV is the cheapest, ")
    assert "64 processes, 8 per node, on 8 OSTs, most requests 1M" in advice.reason
    assert "\n" not in advice.reason
    per_process = advise(Workload.uniform(64, 8, 1 * M, shared_file=False), ModelParams(), 8,
                         target="/scratch/run dir")
    assert per_process.command == "lfs setstripe -c 1 -S 1M '/scratch/run dir'"


def test_a_tie_goes_to_1dv_first():
    # one OST: every layout costs the same
    advice = advise(Workload.uniform(4, 1, 1 * M, shared_file=True), UNIT, 1)
    assert len({e.cost.total for e in advice.estimates}) == 1 and advice.layout == ONE_DV


def test_no_2d_estimate_without_an_even_split_unless_groups_are_given():
    workload = Workload.uniform(4, 1, 1 * M, shared_file=True)
    assert [e.layout for e in advise(workload, UNIT, 7).estimates] == [ONE_DV, ONE_DH]
    forced = advise(workload, UNIT, 7, groups=3)
    assert forced.estimates[1].groups == 3 and forced.estimates[1].group_osts == 3


def test_the_most_common_request_size_wins_a_tie_by_size():
    workload = Workload(4, 1, True, (AccessClass(4 * K, 10), AccessClass(1 * M, 6),
                                     AccessClass(1 * M, 4, WRITE), AccessClass(8 * K, 3)))
    assert workload.common_request_size == 1 * M


@pytest.mark.parametrize("make, message", [
    (lambda: Workload(4, 1, True, ()), "no requests"),
    (lambda: Workload(4, 1, True, (AccessClass(1, 0),)), "no requests"),
    (lambda: Workload(4, 8, True, (AccessClass(1, 1),)), "processes per node 8"),
    (lambda: AccessClass(1, 1, "append"), "operation 'append'"),
    (lambda: AccessClass(1, 1, pattern="strided"), "pattern 'strided'"),
    (lambda: AccessClass(1, -1), "request count -1"),
    (lambda: AccessClass(0, 1), "request size 0"),
])
def test_bad_workloads_are_refused(make, message):
    with pytest.raises(InputError, match=message):
        make()


def test_format_size():
    assert [format_size(x) for x in (64 * K, 1 * M, 3 * M, 2 << 30, 320 * K, 100_000)] == \
        ["64K", "1M", "3M", "2G", "320K", "100000"]


def test_params_come_from_the_layout_section_of_the_site_config():
    default = params_from_config(parse_config("", "site.toml").layout)
    assert default == ModelParams()
    config = parse_config('[layout]\nconnect_seconds = 0.001\nnetwork_bandwidth = 5e9\n'
                          'read_bandwidth = 2e9\ncalibrated = "2026-01-01: fio"\n', "site.toml")
    params = params_from_config(config.layout)
    assert (params.e, params.v, params.beta_read) == (0.001, 1 / 5e9, 1 / 2e9)
    assert params.beta_write == 1 / 120e6 and params.source == "2026-01-01: fio"
    changed = params_from_config(parse_config("[layout]\nread_bandwidth = 2e9\n").layout)
    assert changed.source == "site config [layout]"
    groups_only = params_from_config(parse_config("[layout]\ngroups = 4\n").layout)
    assert groups_only.source == ModelParams().source
