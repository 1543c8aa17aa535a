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
