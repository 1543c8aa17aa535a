"""§4.8's "more significant benefits are seen for long jobs": the per-job measure and its claim."""

from __future__ import annotations

import math

import pytest

from scratchkeeper.errors import ScratchkeeperError
from scratchkeeper.sim import claims, grading as g
from scratchkeeper.sim.metrics import discarded_run_seconds
from scratchkeeper.sim.outages import OstOutage
from scratchkeeper.sim.reproduce import benefit_by_run_time
from scratchkeeper.sim.scheduler import LOG_START, LOG_STOP, RecoveryParams, simulate

from .helpers import make_jobs


def _schedule(policy: str):
    # Two one-node jobs on two nodes, both on OST 0: a long one from t = 0 and a short one
    # from t = 400; OST 0 is down from 500 to 600, when both run.
    jobs = make_jobs((0, 1, 10_000, None, (0,)), (400, 1, 200, None, (0,)))
    schedule = simulate(jobs, 2, outages=[OstOutage(0, 500.0, 600.0)],
                        recovery=RecoveryParams(policy))
    return jobs, schedule


def _replayed(policy: str):
    return _schedule(policy)[0]


def _discarded(schedule):
    return discarded_run_seconds(schedule.log_time, schedule.log_kind, schedule.log_job,
                                 LOG_START, LOG_STOP)


def test_the_run_a_kill_throws_away_is_read_from_the_log():
    _, without = _schedule("none")
    _, recovered = _schedule("on-the-fly")
    # Killed at 500: the long job had run 500 s, the short one 100 s; on the fly, no kill.
    assert _discarded(without) == {0: 500.0, 1: 100.0}
    assert _discarded(recovered) == {}


def test_the_queue_wait_leaves_the_discarded_run_out():
    (without, log_a), (recovered, log_b) = _schedule("none"), _schedule("on-the-fly")
    measured = benefit_by_run_time(without, recovered, _discarded(log_a), _discarded(log_b))
    assert measured is not None
    # Counting the lost run as wait the long job gains 3x the short one's; in the queue both
    # waited 100 s (500-600 while the OST was down): the same benefit.
    assert measured["long"]["wait_benefit_s"] / measured["short"]["wait_benefit_s"] == 3.0
    assert measured["long"]["queue_wait_benefit_s"] == measured["short"]["queue_wait_benefit_s"]
    assert measured["long"]["queue_wait_benefit_s"] == 100.0
    assert measured["long"]["killed_pct"] == measured["short"]["killed_pct"] == 100.0


def test_a_killed_long_job_loses_more_wait_than_a_short_one():
    without, recovered = _replayed("none"), _replayed("on-the-fly")
    # Without recovery both are killed at 500 and restart when the OST is back at 600: the
    # long job waited 600 s (500 of them its lost run), the short one 200 s. On the fly,
    # neither is stopped: no wait.
    assert [j.start - j.submit for j in without] == [600.0, 200.0]
    assert [j.start - j.submit for j in recovered] == [0.0, 0.0]
    measured = benefit_by_run_time(without, recovered)
    assert measured is not None
    assert measured["affected"] == 2 and measured["median_run_time_s"] == 5_100.0
    assert measured["long"]["jobs"] == measured["short"]["jobs"] == 1
    assert measured["long"]["wait_benefit_s"] == 600.0
    assert measured["short"]["wait_benefit_s"] == 200.0
    # Patching on the fly ends each job later by its patch time (30 s + 1 GB at 100 MB/s).
    assert measured["long"]["turnaround_benefit_s"] == 600.0 - 40.0
    assert measured["short"]["turnaround_benefit_s"] == 200.0 - 40.0


def test_only_jobs_affected_without_recovery_count():
    without, recovered = _replayed("none"), _replayed("on-the-fly")
    without[1].affected = False
    measured = benefit_by_run_time(without, recovered)
    assert measured is not None and measured["affected"] == 1
    # One job: it is the median, so it is short and no job is long.
    assert measured["short"]["wait_benefit_s"] == 600.0
    assert measured["long"]["jobs"] == 0 and math.isnan(measured["long"]["wait_benefit_s"])
    for job in without:
        job.affected = False
    assert benefit_by_run_time(without, recovered) is None


def test_jobs_are_matched_by_id():
    without, recovered = _replayed("none"), _replayed("on-the-fly")
    assert benefit_by_run_time(without, recovered[::-1]) == benefit_by_run_time(without,
                                                                                recovered)
    recovered[0].job_id = "another"
    with pytest.raises(ScratchkeeperError, match="not in the run with recovery"):
        benefit_by_run_time(without, recovered)


def _measures(long: float, short: float, counted: float = 3.0) -> dict:
    """Per seed the queue-wait benefits ``long`` and ``short``; with the discarded run counted
    as wait, the long jobs gain ``counted`` times the short ones'."""
    group = {"jobs": 10, "killed_pct": 50.0, "turnaround_benefit_s": 0.0}
    seeds = {str(s): {"affected": 20, "median_run_time_s": 3600.0,
                      "long": dict(group, queue_wait_benefit_s=long * (1 + (s - 3) / 50),
                                   wait_benefit_s=counted * short * (1 + (s - 3) / 50),
                                   turnaround_benefit_s=long),
                      "short": dict(group, queue_wait_benefit_s=short, wait_benefit_s=short,
                                    turnaround_benefit_s=short)}
             for s in range(1, 6)}
    return {"long_jobs": {"policy": "on-the-fly", "stripe_count": 4, "load_factor": 0.857,
                          "utilisation_target": 70.0, "seeds": seeds}}


@pytest.mark.parametrize("long, short, verdict", [
    (30_000.0, 10_000.0, g.YES), (15_000.0, 10_000.0, g.PARTLY), (8_000.0, 10_000.0, g.NO)])
def test_the_long_jobs_claim_is_graded_as_a_ratio(long, short, verdict):
    graded = [c for c in claims.extra_claims(_measures(long, short)) if c.section == "4.8"]
    assert len(graded) == 1
    claim = graded[0]
    assert claim.kind == "ratio" and claim.thesis == "more significant benefits are seen for long jobs"
    assert claim.grade.verdict == verdict and claim.grade.seeds == 5
    assert "on-the-fly recovery against none" in claim.conditions
    assert "stripe count 4" in claim.conditions and "median" in claim.conditions
    assert not any(u.section == "4.8" for u in claims.UNGRADED)


def test_the_long_jobs_claim_is_graded_on_the_queue_wait_not_the_counted_one():
    # Counting the discarded run as wait, long jobs gain x3 (yes); in the queue, x1.
    claim = next(c for c in claims.extra_claims(_measures(10_000.0, 10_000.0, 3.0))
                 if c.section == "4.8")
    assert claim.grade.verdict == g.NO
    assert "Counting the discarded run as wait gives x 3.0" in claim.why
    assert "(yes by the same rule)" in claim.why


def test_without_the_measure_there_is_no_long_jobs_claim():
    assert not [c for c in claims.extra_claims({}) if c.section == "4.8"]
