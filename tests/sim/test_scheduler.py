"""The scheduler model on hand-made traces whose schedules are known."""

from __future__ import annotations

import pytest

from scratchkeeper.errors import InputError
from scratchkeeper.sim.outages import OstOutage
from scratchkeeper.sim.scheduler import LOG_ENTER, LOG_REQUEUE, LOG_START, LOG_STOP, RecoveryParams, simulate

from .helpers import make_jobs, starts


def test_fcfs_starts_in_arrival_order_and_the_blocked_head_blocks_everyone():
    # 4 nodes: j0 holds 3 until 10, j1 needs all 4, j2 would fit in the free node.
    jobs = make_jobs((0, 3, 10), (1, 4, 10), (2, 1, 5))
    simulate(jobs, 4, backfill=False)
    assert starts(jobs) == [0, 10, 20]


def test_fcfs_starts_every_job_that_fits_in_order():
    jobs = make_jobs((0, 2, 10), (0, 1, 10), (0, 1, 5), (0, 1, 1))
    simulate(jobs, 4, backfill=False)
    assert starts(jobs) == [0, 0, 0, 5]


def test_easy_backfills_a_short_job_that_ends_before_the_head_can_start():
    jobs = make_jobs((0, 3, 10), (1, 4, 10), (2, 1, 5))
    simulate(jobs, 4, backfill=True)
    assert starts(jobs) == [0, 10, 2]


def test_easy_does_not_backfill_a_job_that_would_delay_the_head():
    # j2 would end at 22, past the head's reservation at 10, and no node is spare then.
    jobs = make_jobs((0, 3, 10), (1, 4, 10), (2, 1, 20))
    simulate(jobs, 4, backfill=True)
    assert starts(jobs) == [0, 10, 20]


def test_easy_trusts_the_requested_time_not_the_run_time():
    # j2 runs 5 s but asked for 20: the scheduler cannot know it ends before 10.
    jobs = make_jobs((0, 3, 10), (1, 4, 10), (2, 1, 5, 20))
    simulate(jobs, 4, backfill=True)
    assert starts(jobs) == [0, 10, 20]


def test_easy_backfills_a_long_job_on_nodes_the_head_leaves_spare():
    # 5 nodes; the head needs 4 at time 10, when 5 are free: one spare node for a long job.
    jobs = make_jobs((0, 3, 10), (1, 4, 10), (2, 1, 100), (3, 1, 100))
    simulate(jobs, 5, backfill=True)
    assert starts(jobs)[:3] == [0, 10, 2]
    # The second long job would take the head's node: it waits for j2 or the head to end.
    assert starts(jobs)[3] == 20


def test_a_job_larger_than_the_system_is_refused():
    with pytest.raises(InputError, match="requests 8 nodes"):
        simulate(make_jobs((0, 8, 1)), 4)


def test_utilisation_counts_node_seconds_over_the_replay():
    jobs = make_jobs((0, 2, 10), (0, 2, 10))
    schedule = simulate(jobs, 4)
    assert schedule.utilisation == pytest.approx(1.0)
    jobs = make_jobs((0, 2, 10), (10, 2, 10))
    assert simulate(jobs, 4).utilisation == pytest.approx(0.5)


# ------------------------------------------------------------------ failures and policies

def _outage(ost, down, up):
    return [OstOutage(ost, down, up)]


def test_no_recovery_kills_a_running_job_and_requeues_it_until_the_ost_returns():
    jobs = make_jobs((0, 2, 100, None, (1,)))
    simulate(jobs, 2, outages=_outage(1, 50, 70), recovery=RecoveryParams("none"))
    job = jobs[0]
    assert (job.affected, job.kills, job.first_start, job.start, job.end) == (True, 1, 0, 70, 170)


def test_pre_execution_recovery_restarts_the_killed_job_after_the_patch():
    # 1e9 bytes on the one stripe at 1e8 B/s is 10 s, plus 30 s latency.
    jobs = make_jobs((0, 2, 100, None, (1,), 1e9))
    simulate(jobs, 2, outages=_outage(1, 50, 1000),
             recovery=RecoveryParams("pre-execution", patch_bandwidth=1e8, patch_latency=30))
    job = jobs[0]
    assert (job.kills, job.start, job.end) == (1, 90, 190)


def test_on_the_fly_recovery_keeps_the_job_running_and_ends_it_later():
    jobs = make_jobs((0, 2, 100, None, (1,), 1e9))
    simulate(jobs, 2, outages=_outage(1, 50, 1000),
             recovery=RecoveryParams("on-the-fly", patch_bandwidth=1e8, patch_latency=30))
    job = jobs[0]
    assert (job.affected, job.kills, job.start, job.end) == (True, 0, 0, 140)


def test_no_recovery_moves_an_affected_queued_job_to_the_tail():
    # j1 (1 node, OST 5) is ahead of j2 (2 nodes, OST 6) until OST 5 fails at 50.
    jobs = make_jobs((0, 2, 100, None, (1,)), (1, 1, 10, None, (5,)), (2, 2, 10, None, (6,)))
    schedule = simulate(jobs, 2, outages=_outage(5, 50, 60), recovery=RecoveryParams("none"))
    assert starts(jobs) == [0, 110, 100]
    assert jobs[1].affected and not jobs[2].affected
    kinds = [(k, j) for k, j in zip(schedule.log_kind, schedule.log_job)]
    assert kinds.index((LOG_REQUEUE, 1)) < kinds.index((LOG_ENTER, 1), kinds.index((LOG_ENTER, 2)))
    # Without the failure the same jobs run in arrival order.
    jobs = make_jobs((0, 2, 100, None, (1,)), (1, 1, 10, None, (5,)), (2, 2, 10, None, (6,)))
    simulate(jobs, 2)
    assert starts(jobs) == [0, 100, 110]


def test_pre_execution_keeps_an_affected_queued_job_in_place_and_holds_it():
    jobs = make_jobs((0, 2, 100, None, (1,)), (1, 1, 10, None, (5,), 1e9),
                     (2, 2, 10, None, (6,)))
    simulate(jobs, 2, outages=_outage(5, 95, 500),
             recovery=RecoveryParams("pre-execution", patch_bandwidth=1e8, patch_latency=30))
    # j1 is patched until 135: held, it neither runs nor blocks; j2 runs first, then j1.
    assert starts(jobs) == [0, 135, 100]
    assert jobs[1].kills == 0


def test_a_job_submitted_onto_a_failed_ost_waits_for_it_without_recovery():
    jobs = make_jobs((10, 1, 5, None, (3,)))
    simulate(jobs, 2, outages=_outage(3, 0, 40), recovery=RecoveryParams("none"))
    assert jobs[0].affected and jobs[0].start == 40


def test_event_log_pairs_every_start_with_a_stop():
    jobs = make_jobs((0, 2, 100, None, (1,)), (1, 1, 10, None, (5,)), (2, 2, 10, None, (6,)))
    schedule = simulate(jobs, 2, outages=_outage(1, 50, 60), recovery=RecoveryParams("none"))
    started = sum(1 for k in schedule.log_kind if k == LOG_START)
    stopped = sum(1 for k in schedule.log_kind if k == LOG_STOP)
    assert started == stopped == 4          # j0 twice (killed once), j1, j2
    assert list(schedule.log_time) == sorted(schedule.log_time)


def test_unknown_policy_is_an_input_error():
    with pytest.raises(InputError, match="unknown recovery policy"):
        RecoveryParams("retry")


def test_recorded_schedule_uses_the_trace_dispatch_times():
    from scratchkeeper.sim.scheduler import recorded_schedule

    jobs = make_jobs((0, 4, 10), (5, 2, 10), (6, 2, 0))
    for job, wait in zip(jobs, (0, 20, 1)):
        job.recorded_wait = wait
    schedule = recorded_schedule(jobs, 4)
    assert starts(jobs) == [0, 25, 7] and [j.end for j in jobs] == [10, 35, 7]
    order = list(zip(schedule.log_time, schedule.log_kind, schedule.log_job))
    assert order[:3] == [(0, LOG_ENTER, 0), (0, LOG_START, 0), (5, LOG_ENTER, 1)]
    assert (7, LOG_START, 2) in order and order.index((7, LOG_START, 2)) < order.index((7, LOG_STOP, 2))
    jobs[0].recorded_wait = -1
    with pytest.raises(InputError, match="no recorded wait"):
        recorded_schedule(jobs, 4)


def test_outages_after_the_last_job_are_not_counted():
    jobs = make_jobs((0, 1, 10, None, (1,)))
    outages = [OstOutage(1, 5, 6), OstOutage(2, 500, 600)]
    schedule = simulate(jobs, 2, outages=outages, recovery=RecoveryParams("on-the-fly"))
    assert schedule.failures == 1 and jobs[0].affected


def test_easy_counts_every_running_job_that_ends_at_the_shadow_time():
    # 5 nodes: four 1-node jobs run until 100, one node is free. The head needs 3 nodes: two of
    # the four ending at 100 are enough, but all four end then, so 2 nodes are spare at the
    # shadow time and a long 1-node job can start at once without delaying the head.
    jobs = make_jobs((0, 1, 100), (0, 1, 100), (0, 1, 100), (0, 1, 100),
                     (1, 3, 10), (2, 1, 1000))
    simulate(jobs, 5, backfill=True)
    assert starts(jobs) == [0, 0, 0, 0, 100, 2]


def test_on_the_fly_recovery_moves_the_reservation_to_the_later_end():
    # j0 runs on OST 0 until 100; its stripe is patched on the fly from t=10 (30 s latency +
    # 1e9 B at 1e8 B/s = 40 s), so it ends at 140. The head j1 needs both nodes; j2 (limit 120,
    # asked at t=20) would end at 140: it may backfill only if the scheduler knows the head
    # cannot start before 140.
    jobs = make_jobs((0, 1, 100, 100, (0,)), (1, 2, 10, 10, (1,)), (20, 1, 120, 120, (2,)))
    outage = OstOutage(ost_index=0, down=10.0, up=10_000.0)
    simulate(jobs, 2, backfill=True, outages=[outage],
             recovery=RecoveryParams(policy="on-the-fly", patch_bandwidth=1e8, patch_latency=30))
    assert jobs[0].end == 140
    assert starts(jobs) == [0, 140, 20]
