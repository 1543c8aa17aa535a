"""Hybrid replicas (the layout paper's §5): a mirror's cost by its stripe settings, the replica's
layout for a recorded workload, and that record read back as data."""

from __future__ import annotations

import pytest

from scratchkeeper.advisor import (
    ONE_DH,
    ONE_DV,
    TWO_D,
    AccessClass,
    ModelParams,
    Workload,
    advise,
    request_cost,
)
from scratchkeeper.advisor.hybrid import (
    MAX_CLASSES,
    data_osts,
    hybrid_replica,
    mirror_request_cost,
    parse_workload,
    spanned_osts,
    workload_text,
)
from scratchkeeper.errors import InputError

K, M = 1 << 10, 1 << 20
PARAMS = ModelParams()


@pytest.mark.parametrize("count,size,nbytes,offset,expected", [
    (4, 64 * K, 4 * K, 0, 1),            # inside one stripe
    (4, 64 * K, 4 * K, 62 * K, 2),       # across a stripe edge
    (4, 64 * K, 256 * K, 0, 4),          # one full round
    (4, 64 * K, 4 * M, 0, 4),            # more than a round: still 4 OSTs
    (2, 4 * M, 128 * K, 0, 1),
    (1, 1 * M, 4 * M, 0, 1),
])
def test_spanned_osts(count, size, nbytes, offset, expected):
    assert spanned_osts(count, size, nbytes, offset) == expected


@pytest.mark.parametrize("processes", [1, 3, 8, 16])
def test_a_mirror_is_costed_as_the_layout_its_stripes_make(processes):
    # a stripe as large as the request: 1-DV; a quarter of it over 4 OSTs: 1-DH; half: 2-D
    for request in (64 * K, M):
        dv = mirror_request_cost(4, request, request, processes, 4, PARAMS)
        assert dv == request_cost(ONE_DV, processes, processes, 4, request, PARAMS)
        dh = mirror_request_cost(4, request // 4 or 1, request, processes, 4, PARAMS)
        assert dh == request_cost(ONE_DH, processes, processes, 4, request, PARAMS)
        two = mirror_request_cost(4, request // 2, request, processes, 4, PARAMS)
        assert two == request_cost(TWO_D, processes, processes, 4, request, PARAMS, groups=2)
    # a random request pays the random start-up
    seq = mirror_request_cost(4, M, 4 * K, 1, 4, PARAMS).total
    rnd = mirror_request_cost(4, M, 4 * K, 1, 4, PARAMS, pattern="random").total
    assert rnd - seq == pytest.approx(PARAMS.alpha_random - PARAMS.alpha_sequential)


def test_the_osts_a_workloads_data_is_on():
    shared = Workload.uniform(16, 16, M, shared_file=True)
    per_process = Workload.uniform(16, 16, M, shared_file=False)
    assert data_osts(2, shared, 8) == 2
    assert data_osts(1, per_process, 8) == 8
    assert data_osts(1, Workload.uniform(3, 3, M, shared_file=False), 8) == 3


MIXED = Workload(16, 16, True, (AccessClass(64 * K, 4000, "read", "random"),
                                AccessClass(4 * M, 40, "read", "sequential")))


def test_a_mixed_workloads_replica_serves_what_the_primary_serves_worst():
    # primary: the workload's own advice on 4 OSTs
    primary = advise(MIXED, PARAMS, 4)
    choice = hybrid_replica(MIXED, (primary.stripe_count, primary.stripe_size), 4, 8, PARAMS)
    assert choice.differs and choice.hybrid_seconds < choice.primary_seconds
    assert (choice.stripe_count, choice.stripe_size) != (primary.stripe_count,
                                                         primary.stripe_size)
    # the replica is the cheaper mirror for some class, so each request's choice gains
    cheaper = [a for a in MIXED.accesses
               if mirror_request_cost(choice.stripe_count, choice.stripe_size, a.request_size,
                                      16, choice.stripe_count, PARAMS, pattern=a.pattern).total
               < mirror_request_cost(primary.stripe_count, primary.stripe_size,
                                     a.request_size, 16, primary.stripe_count, PARAMS,
                                     pattern=a.pattern).total]
    assert cheaper and "replica" in choice.reason
    # its hybrid total is the sum of the cheaper mirror per class, by hand
    by_hand = sum(min(mirror_request_cost(c, s, a.request_size, 16, c, PARAMS,
                                          pattern=a.pattern).total
                      for c, s in ((primary.stripe_count, primary.stripe_size),
                                   (choice.stripe_count, choice.stripe_size)))
                  * a.count / 16 for a in MIXED.accesses)
    assert choice.hybrid_seconds == pytest.approx(by_hand)


def test_a_workload_the_primary_serves_best_keeps_the_primarys_layout():
    uniform = Workload.uniform(16, 16, M, shared_file=True)
    primary = advise(uniform, PARAMS, 4)
    choice = hybrid_replica(uniform, (primary.stripe_count, primary.stripe_size), 4, 8, PARAMS)
    assert not choice.differs
    assert (choice.stripe_count, choice.stripe_size) == (primary.stripe_count,
                                                         primary.stripe_size)
    assert "keeps the primary's layout" in choice.reason
    with pytest.raises(InputError):
        hybrid_replica(uniform, (4, M), 0, 4, PARAMS)


def test_the_recorded_workload_reads_back():
    record = f"1-DV count=4 size=65536 {workload_text(MIXED)}: the reason: with colons"
    assert parse_workload(record) == MIXED
    assert parse_workload("1-DV count=4 size=65536: no workload here") is None
    per_process = Workload.uniform(3, 1, 4 * K, shared_file=False, pattern="random")
    assert parse_workload(workload_text(per_process) + ": x") == per_process


@pytest.mark.parametrize("word", [
    "workload=procs:0,per_node:0,shared,4096:1:read:sequential",          # no processes
    "workload=procs:4,per_node:8,shared,4096:1:read:sequential",          # more per node
    "workload=procs:4,per_node:1,both,4096:1:read:sequential",            # not a mode
    "workload=procs:4,per_node:1,shared,4096:1:read:sideways",            # not a pattern
    "workload=procs:4,per_node:1,shared,0:1:read:sequential",             # empty requests
    "workload=procs:4,per_node:1,shared,4096:-1:read:sequential",         # negative count
    "workload=procs:4,per_node:1,shared,4096:1:read:sequential;$(reboot)",
    "workload=procs:4,per_node:1,shared," + ";".join(["4096:1:read:sequential"]
                                                      * (MAX_CLASSES + 1)),
    "workload=procs:4,per_node:1,shared,4096:1:read:sequential "
    "workload=procs:4,per_node:1,shared,4096:1:read:sequential",          # two of them
])
def test_a_malformed_workload_is_refused(word):
    with pytest.raises(InputError):
        parse_workload(f"1-DV count=4 size=65536 {word}: reason")
