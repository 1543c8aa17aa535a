"""The check-job reply of a job with thousands of inputs stays one bounded line: the files that
are not whole (the first MAX_LISTED), the counts of all (recovery/hook.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from scratchkeeper.recovery import hook


def _service(states: dict[str, bool]):
    return SimpleNamespace(
        store=None, backend=SimpleNamespace(exists=lambda path: True),
        wait_for=lambda path, timeout: {"path": path, "whole": states[path],
                                        "state": "whole" if states[path] else "lost",
                                        "reason": "" if states[path] else "r" * 3000})


def test_a_job_of_many_inputs_gets_a_bounded_reply_with_every_count(monkeypatch):
    paths = [f"/scratch/u/{'d' * 200}/{i:05d}.dat" for i in range(5000)]
    states = {p: i % 3 != 0 for i, p in enumerate(paths)}
    monkeypatch.setattr(hook, "job_inputs", lambda store, job_id: paths)
    reply = hook.check_job(_service(states), "42", 10)
    assert reply["whole"] is False
    assert reply["checked"] == 5000 and reply["not_whole"] == 1667
    assert [f["path"] for f in reply["files"]] == [p for p in paths if not states[p]][:20]
    assert len(reply["reason"]) <= hook.MAX_REASON  # 20 reasons of 3 KB: cut at 16 KiB
    assert len(json.dumps(reply)) < 256 << 10  # a few entries, not one per input


def test_a_whole_job_lists_no_file(monkeypatch):
    states = {"/scratch/u/a": True, "/scratch/u/b": True}
    monkeypatch.setattr(hook, "job_inputs", lambda store, job_id: list(states))
    reply = hook.check_job(_service(states), "7", 10)
    assert reply == {"job_id": "7", "whole": True, "files": [], "reason": "", "checked": 2,
                     "not_whole": 0, "recovering": []}
