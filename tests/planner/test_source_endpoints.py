"""The endpoints data jobs staged from (recovery's default allow-list) are named by users: the
table keeps the ones used last, never one row per endpoint ever named (planner/records.py)."""

from __future__ import annotations

from scratchkeeper.planner import records
from scratchkeeper.state import StateStore


def test_the_endpoint_table_is_bounded_and_keeps_those_used_last(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "MAX_ENDPOINTS", 50)
    store = records.open_records(StateStore(str(tmp_path / "state.db")))
    records.record_endpoints(store, ["gsiftp://kept.example.org:2811/data/x"])
    clock = [1000.0]
    monkeypatch.setattr(records.time, "time", lambda: clock[0])
    for batch in range(10):  # one user names 200 endpoints, 20 at a time
        clock[0] += 1
        records.record_endpoints(store, [f"http://h{batch}-{i}.example.org/f"
                                         for i in range(20)])
    clock[0] += 1
    records.record_endpoints(store, ["gsiftp://kept.example.org:2811/data/y"])  # used again
    (count,) = store.query("SELECT count(*) FROM source_endpoints")[0]
    assert count == 50
    assert records.endpoint_used(store, "gsiftp://kept.example.org:2811")
    assert records.endpoint_used(store, "http://h9-0.example.org:80")
    assert not records.endpoint_used(store, "http://h0-0.example.org:80")
