"""JIT stage-in: the decision, the prediction, and the scheduler parsers it uses (captured output)."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import pytest

from scratchkeeper.config import SiteConfig, StagingConfig, parse_config
from scratchkeeper.planner import records
from scratchkeeper.planner.jit import decide
from scratchkeeper.planner.predict import Prediction, predict, source_host
from scratchkeeper.schedulers import pbs, slurm
from scratchkeeper.state import StateStore

DATA = Path(__file__).resolve().parent.parent / "data"


def _config(**staging) -> SiteConfig:
    return SiteConfig(staging=StagingConfig(**staging))


def _prediction(seconds: float | None, pessimistic: float | None) -> Prediction:
    return Prediction((), (), 100, seconds, pessimistic, "test")


# -- the decision -------------------------------------------------------------------------------
def test_held_back_until_expected_start_minus_pessimistic_time_and_margin():
    config = _config(jit_margin=60, jit_max_delay=1800)
    decision = decide(1000.0, 5000.0, "will-run", _prediction(100, 300), config)
    assert decision.release_at == 5000.0 - 300 - 60
    assert decision.reason.startswith("held back: the compute job waits 4000s, more than 300s "
                                      "at worst (100s predicted) + 60s margin")


def test_held_back_whenever_the_wait_exceeds_bound_plus_margin():
    config = _config(jit_margin=20, jit_max_delay=1800)
    bound = 2.6                                   # 64 MiB predicted 1.3 s, at worst 2.6 s
    assert decide(0.0, 22.5, "will-run", _prediction(1.3, bound), config).release_at is None
    held = decide(0.0, 22.7, "will-run", _prediction(1.3, bound), config)
    assert held.release_at == pytest.approx(0.1) and held.reason.startswith("held back")
    # the 3-minute wait: held back, released 22.6 s before the compute job's start
    assert decide(0.0, 180.0, "will-run", _prediction(1.3, bound), config).release_at == \
        pytest.approx(180.0 - 22.6)


def test_starts_now_once_the_moment_has_come():
    config = _config(jit_margin=60)
    decision = decide(4700.0, 5000.0, "backfill", _prediction(100, 300), config)
    assert decision.release_at is None and "has come" in decision.reason
    assert "wait, 300s, is within 300s at worst (100s predicted) + 60s margin" in decision.reason


@pytest.mark.parametrize("expected, prediction, words", [
    (None, _prediction(10, 20), "does not estimate"),
    (9999.0, _prediction(None, None), "test"),
    (9999.0, None, "no prediction"),
])
def test_starts_now_when_anything_is_unknown(expected, prediction, words):
    decision = decide(0.0, expected, "unknown", prediction, _config())
    assert decision.release_at is None and words in decision.reason


def test_a_transfer_longer_than_the_max_delay_is_never_held_back():
    config = _config(jit_max_delay=600)
    assert decide(0.0, 1e6, "backfill", _prediction(500, 590), config).release_at is not None
    # one sweep more and a compute job starting early could wait longer than allowed
    decision = decide(0.0, 1e6, "backfill", _prediction(500, 590), config, sweep_interval=20)
    assert decision.release_at is None and "jit_max_delay" in decision.reason


# -- the prediction -----------------------------------------------------------------------------
def _store(tmp_path) -> StateStore:
    return records.open_staging(StateStore(str(tmp_path / "state.db")))


def _record(store, sizes_seconds, host="localhost", client="file") -> None:
    records.record_timings(store, [
        {"chain_id": f"sk{number}", "job_key": "stage-in", "line": 1, "host": host,
         "client": client, "bytes": size, "files": 1, "seconds": seconds,
         "finished": 1000.0 + number, "owner_uid": os.getuid()}
        for number, (size, seconds) in enumerate(sizes_seconds)])


def test_prediction_of_a_local_source_and_its_pessimistic_bound(tmp_path):
    store = _store(tmp_path)
    source = tmp_path / "input.dat"
    source.write_bytes(b"x" * 4096)
    config = _config(min_samples=2, jit_quantile=0.9, jit_min_spread=0.0, change_window=0)
    assert predict([(str(source), False)], store, config).seconds is None   # nothing learned
    # 1 s per file + 1 s per 1000 bytes; the last one 50 % slow
    _record(store, [(1000, 2.0), (3000, 4.0), (2000, 3.0), (4000, 7.5)])
    result = predict([(str(source), False)], store, config)
    assert result.bytes == 4096
    assert result.seconds == pytest.approx(1 + 4.096, rel=1e-3)
    # the 90th percentile of the relative residuals (0, 0, 0, +0.5): +0.35
    assert result.pessimistic == pytest.approx(result.seconds * 1.35, rel=1e-3)
    assert result.hosts[0].fit.basis.startswith("host: 4 timed file transfers")


def test_no_prediction_for_a_directory_or_a_missing_source(tmp_path):
    store = _store(tmp_path)
    config = _config(min_samples=1)
    _record(store, [(10, 1.0)])
    assert "a directory" in predict([(str(tmp_path), True)], store, config).reason
    missing = predict([(str(tmp_path / "nope"), False)], store, config)
    assert missing.seconds is None and "size unknown" in missing.reason


def test_source_hosts():
    assert source_host("ftp://127.0.0.1:2811/data/x") == "127.0.0.1:2811"   # a server: host and port
    assert source_host("gsiftp://User@DTN.example.org/x") == "dtn.example.org"
    assert source_host("/scratch/in/x") == "localhost"
    assert source_host("nosuch://x/y") == ""


# -- the scheduler's side, on captured output ----------------------------------------------------
def _local(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


def test_slurm_start_estimates_from_squeue_start():
    found = slurm.parse_start_estimate((DATA / "slurm" / "squeue-start.txt").read_text())
    assert found == {"2621": _local("2026-11-24T19:08:48"), "2619": None, "2620": None}


def test_slurm_will_run_from_the_request_of_a_job_waiting_on_a_dependency():
    request = slurm.parse_request((DATA / "slurm" / "squeue-request.txt").read_text())
    assert slurm.build_will_run(request) == [
        "sbatch", "--test-only", "--partition=batch", "--nodes=2", "--ntasks=3", "--time=2:00",
        "--output=/dev/null", "--wrap", "true"]
    answer = (DATA / "slurm" / "sbatch-test-only.txt.stderr").read_text()
    assert slurm.parse_will_run(answer) == _local("2026-11-24T19:08:48")
    assert slurm.parse_will_run("sbatch: error: Batch job submission failed") is None
    exclusive = slurm.parse_request((DATA / "slurm" / "squeue-request-exclusive.txt").read_text())
    assert "--exclusive" in slurm.build_will_run(exclusive)


def test_slurm_24_11_start_estimates_requests_and_will_run():
    """The same commands on a private Slurm 24.11.5 (tests/data/slurm/24.11/commands.txt): no
    accounting there, so squeue prints (null) for the account and QOS, which the will-run
    request leaves out as it leaves out 22.05's."""
    folder = DATA / "slurm" / "24.11"
    ids = json.loads((folder / "jit.ids.json").read_text())
    found = slurm.parse_start_estimate((folder / "squeue-start.txt").read_text())
    assert found == {ids["resources"]: _local("2026-12-06T00:12:15"), ids["dependent"]: None,
                     ids["exclusive"]: None}
    request = slurm.parse_request((folder / "squeue-request.txt").read_text())
    assert request is not None and request["account"] == "(null)"
    assert slurm.build_will_run(request) == [
        "sbatch", "--test-only", "--partition=batch", "--nodes=1", "--ntasks=3", "--time=2:00",
        "--output=/dev/null", "--wrap", "true"]
    answer = (folder / "sbatch-test-only.txt.stderr").read_text()
    assert slurm.parse_will_run(answer) == _local("2026-12-06T00:17:15")
    exclusive = slurm.parse_request((folder / "squeue-request-exclusive.txt").read_text())
    assert exclusive is not None and "--exclusive" in slurm.build_will_run(exclusive)


def test_slurm_and_pbs_begin_times():
    when = _local("2026-11-24T21:05:07")
    assert slurm.build_set_begin("12", when) == ["scontrol", "update", "JobId=12",
                                                 "StartTime=2026-11-24T21:05:07"]
    assert slurm.build_set_begin("12", None)[-1] == "StartTime=now"
    assert pbs.build_set_begin("7.server", when) == ["qalter", "-a", "202611242105.07",
                                                     "7.server"]


def test_pbs_estimated_start_time_where_the_server_gives_one():
    # PBS Pro's qstat -f layout (the documented estimated.start_time attribute); Torque has none
    text = ("Job Id: 7.server\n    job_state = Q\n    estimated.start_time = Tue Nov 24 21:05:07 2026\n"
            "\nJob Id: 8.server\n    job_state = Q\n")
    assert pbs.parse_start_estimate(text) == {"7.server": _local("2026-11-24T21:05:07"),
                                             "8.server": None}
    assert pbs.build_will_run is None


def test_directive_start_and_when_reach_the_plan(tmp_path):
    from scratchkeeper.planner.submit import prepare

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N 1\n#STAGEIN -start jit\n"
                      f"#STAGEIN ftp://127.0.0.1:2811/in.dat {scratch}/in.dat\n"
                      f"#STAGEOUT -when close\n#STAGEOUT {scratch}/out.dat /tmp/out.dat\nhostname\n")
    config = parse_config(f'[storage]\nscratch_root = "{scratch}"\n[staging]\nstart = "now"\n')
    _, plan = prepare(str(script), config, workdir=str(tmp_path))
    assert [(j.role, j.start) for j in plan.jobs] == [("stage-in", "jit"), ("compute", None),
                                                      ("stage-out", "close")]
    script.write_text(script.read_text().replace("#STAGEIN -start jit\n", ""))
    config = parse_config(f'[storage]\nscratch_root = "{scratch}"\n[staging]\nstart = "jit"\n')
    _, plan = prepare(str(script), config, workdir=str(tmp_path))
    assert plan.jobs[0].start == "jit"                 # the site's default


@pytest.mark.parametrize("line, words", [
    ("#STAGEIN -start later", "-start expects jit or now, got 'later'"),
    ("#STAGEOUT -start jit", "-start applies to #STAGEIN only"),
    ("#STAGEIN -when close", "-when applies to #STAGEOUT only"),
    ("#STAGEOUT -when soon", "-when expects close or end"),
])
def test_bad_start_and_when_name_the_line(tmp_path, line, words):
    from scratchkeeper.errors import DirectiveError
    from scratchkeeper.planner.directives import parse_script

    text = f"#!/bin/bash\n{line}\n#STAGEIN /scratch/a/x /scratch/b/x\nhostname\n"
    with pytest.raises(DirectiveError) as caught:
        parse_script(text, "job.sh", cwd="/scratch", scratch_root="/scratch")
    assert words in str(caught.value) and "job.sh:2" in str(caught.value)


def test_a_job_is_found_by_its_name_in_accounting():
    text = (DATA / "slurm" / "sacct-find-by-name.txt").read_text()
    assert slurm.parse_find_by_name(text) == text.split() and len(text.split()) == 24
    queue, accounting = slurm.build_find_by_name("job.sh.offload-1")
    assert "--name=job.sh.offload-1" in queue and "--states=all" in queue
    assert accounting[-2:] == ["--name=job.sh.offload-1", "--format=JobID"]


# -- a root service predicting for a user asks only the servers the site allows (issue 30) ------
class _Listener:
    """A loopback TCP listener that counts the connections made to it (and answers nothing)."""

    def __init__(self):
        import socket
        import threading
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def stop(self):
        self.stopped.set()
        self.thread.join(timeout=5)
        self.sock.close()


def test_a_size_is_asked_only_of_servers_the_site_allows(tmp_path):
    from scratchkeeper.config import RecoveryConfig, TransferConfig
    from scratchkeeper.planner.sources import SourceAllowList

    store = _store(tmp_path)
    listener = _Listener()
    try:
        uri = f"http://127.0.0.1:{listener.port}/data/input.dat"
        config = SiteConfig(transfer=TransferConfig(timeout=2.0))
        elsewhere = SourceAllowList(RecoveryConfig(allowed_sources=["http://dtn.example.org"]),
                                    store)
        refused = predict([(uri, False)], store, config, allowed=elsewhere)
        assert listener.connections == 0
        assert refused.bytes is None
        assert "size not asked" in refused.reason and "not in recovery.allowed_sources" \
            in refused.reason
        # empty list, no endpoint recorded by root's commits: refused as well
        nothing = SourceAllowList(RecoveryConfig(), store)
        assert predict([(uri, False)], store, config, allowed=nothing).bytes is None
        assert listener.connections == 0
        # a local source is still opened (with the owner's rights), whatever the list says
        local = tmp_path / "local.dat"
        local.write_bytes(b"y" * 100)
        assert predict([(str(local), False)], store, config, allowed=elsewhere).sources[0] \
            .bytes == 100
        # the same server, allowed: asked
        here = SourceAllowList(RecoveryConfig(
            allowed_sources=[f"http://127.0.0.1:{listener.port}"]), store)
        predict([(uri, False)], store, config, allowed=here)
        assert listener.connections >= 1
    finally:
        listener.stop()
