"""Known inputs of compute jobs from the planner's tables: staged files and declarations."""

from __future__ import annotations

from scratchkeeper.config import parse_config
from scratchkeeper.planner import records
from scratchkeeper.replication.inputs import job_inputs
from scratchkeeper.state import StateStore

from .helpers import stage_input, write_site


def test_staged_files_and_declared_inputs_under_scratch_only(tmp_path):
    config = parse_config(write_site(tmp_path / "site.toml", tmp_path).read_text(), "site.toml")
    path, sha = stage_input(config, "41", "staged.dat", 1000, owner=(0, 0))
    store = records.open_records(StateStore(config.state.database))
    chain = store.query("SELECT chain_id FROM chain_jobs WHERE job_id = '41'")[0]["chain_id"]
    scratch = config.storage.scratch_root
    with store.transaction() as conn:
        conn.execute("INSERT INTO job_inputs VALUES (?, ?)", (chain, f"{scratch}/declared.db"))
        conn.execute("INSERT INTO job_inputs VALUES (?, ?)", (chain, path))   # also staged
        conn.execute("INSERT INTO job_inputs VALUES (?, ?)", (chain, "/home/u/elsewhere.dat"))
    found, checksums = job_inputs(store, ["41", "42"], scratch)
    assert list(found) == ["41"]
    files = {f.path: f.size for f in found["41"].files}
    assert files == {path: 1000, f"{scratch}/declared.db": None}
    assert found["41"].owner_uid == 0
    assert checksums == {path: f"sha256:{sha}"}
    # a stage-in job's id or an unknown id has no inputs
    assert job_inputs(store, ["999"], scratch) == ({}, {})


class PlannerClock:
    """The planner's and the reader's wall clock in one, moved by the test."""

    def __init__(self):
        self.now = 1.8e9

    def __call__(self):
        return self.now


def _chain(conn, chain_id, owner, now):
    conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                 (chain_id, "/s.sh", "/w", "slurm", owner, "submitted", "", now, now, "{}"))
    for position, key in enumerate(("stage-in", "compute")):
        conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, state,"
                     " updated) VALUES (?, ?, ?, 'batch', ?, 'planned', ?)",
                     (chain_id, key, key, position, now))


def test_incremental_reads_answer_as_the_full_query_through_any_planner_change(tmp_path):
    """Random planner changes (chains planned, job ids recorded, stage-ins committed, inputs
    declared, chains deleted), written by another connection as other processes do: after each,
    the incremental answer equals the full query's, and only changed jobs are read again."""
    import random

    from scratchkeeper.replication.inputs import CLOCK_MARGIN, KnownInputs

    clock = PlannerClock()
    database = str(tmp_path / "state.db")
    reader_store = records.open_records(StateStore(database))
    writer = records.open_records(StateStore(database))
    scratch = "/scratch"
    known = KnownInputs(reader_store, scratch, full_refresh=1e9, clock=clock)
    rng = random.Random(11)
    chains: dict[str, str | None] = {}          # chain id -> compute job id once submitted
    gone: list[str] = []                        # job ids of deleted chains
    next_job = iter(range(1000, 100000))
    for step in range(300):
        clock.now += rng.choice((1.0, 5.0, CLOCK_MARGIN + 100))
        action = rng.random()
        with writer.transaction() as conn:
            if action < 0.2 or not chains:
                chain_id = f"c{step}"
                _chain(conn, chain_id, rng.randrange(1000, 1003), clock.now)
                chains[chain_id] = None
            elif action < 0.4:
                chain_id = rng.choice([c for c in chains if chains[c] is None] or list(chains))
                if chains[chain_id] is None:
                    chains[chain_id] = str(next(next_job))
                    conn.execute("UPDATE chain_jobs SET job_id = ?, state = 'submitted', "
                                 "updated = ? WHERE chain_id = ? AND job_key = 'compute'",
                                 (chains[chain_id], clock.now, chain_id))
            elif action < 0.75:
                chain_id = rng.choice(list(chains))
                path = f"{scratch}/{chain_id}/in{rng.randrange(3)}"
                conn.execute(
                    "INSERT INTO staged_files(chain_id, path, job_key, source, line, state, size,"
                    " checksum, staged_at) VALUES (?, ?, 'stage-in', 'file:///x', 1, 'staged', ?,"
                    " ?, ?) ON CONFLICT(chain_id, path) DO UPDATE SET size = excluded.size,"
                    " checksum = excluded.checksum, staged_at = excluded.staged_at",
                    (chain_id, path, rng.randrange(1, 1 << 30), f"sha256:{step}", clock.now))
            elif action < 0.9:
                chain_id = rng.choice(list(chains))
                where = rng.choice((scratch, "/home/u"))
                conn.execute("INSERT OR IGNORE INTO job_inputs VALUES (?, ?)",
                             (chain_id, f"{where}/{chain_id}/declared"))
                # the planner declares inputs with the chain's jobs: the job row says so
                conn.execute("UPDATE chain_jobs SET updated = ? WHERE chain_id = ?",
                             (clock.now, chain_id))
            else:
                chain_id = rng.choice(list(chains))
                for table in ("staged_files", "job_inputs", "chain_jobs", "chains"):
                    conn.execute(f"DELETE FROM {table} WHERE chain_id = ?", (chain_id,))
                job_id = chains.pop(chain_id)
                if job_id is not None:
                    gone.append(job_id)        # its job may still be in the queue
        ids = [j for j in chains.values() if j is not None] + gone
        wanted = rng.sample(ids, k=len(ids) * 4 // 5) + ["999999"]
        assert known.get(wanted) == job_inputs(reader_store, wanted, scratch), step

    # nothing changed for longer than the margin: nothing is read again
    clock.now += CLOCK_MARGIN + 1
    known.get(wanted)
    clock.now += CLOCK_MARGIN + 1
    assert known.get(wanted) == job_inputs(reader_store, wanted, scratch)
    assert known.last_read == 0
    # one stage-in committed: that job alone is read again
    chain_id = next(c for c, j in chains.items() if j in wanted)
    with writer.transaction() as conn:
        conn.execute("INSERT INTO staged_files(chain_id, path, job_key, source, line, state, size,"
                     " staged_at) VALUES (?, ?, 'stage-in', 'file:///x', 1, 'staged', 7, ?)",
                     (chain_id, f"{scratch}/{chain_id}/late", clock.now))
    clock.now += 1
    assert known.get(wanted) == job_inputs(reader_store, wanted, scratch)
    assert known.last_read == 1
    # jobs leaving the queue, nothing changed in the planner: the answer drops them
    clock.now += CLOCK_MARGIN + 1
    fewer = wanted[: len(wanted) // 2]
    assert known.get(fewer) == job_inputs(reader_store, fewer, scratch)
    assert known.last_read == 0
