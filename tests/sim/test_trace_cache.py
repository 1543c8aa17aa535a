"""A sweep worker reads a trace once for all its tasks, and again when the file changes."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

from scratchkeeper.sim import DATA_DIR
from scratchkeeper.sim.run import ReplayConfig, load_trace

RICC_SAMPLE = Path(DATA_DIR) / "RICC-2010-2-first5000.swf.gz"


def test_the_same_file_is_read_once_and_again_after_a_change(tmp_path):
    trace = tmp_path / "ricc.swf.gz"
    shutil.copy(RICC_SAMPLE, trace)
    config = ReplayConfig(trace=str(trace))
    first, header_nodes, _, skipped = load_trace(config)
    again, _, _, _ = load_trace(config)
    assert again is first                       # kept, not read again
    skipped.append("a caller's own line")       # each call has its own list of skipped lines
    assert "a caller's own line" not in load_trace(config)[3]
    with gzip.open(RICC_SAMPLE, "rt") as stream:
        lines = [line for line in stream if line.startswith(";") or line.strip()][:-10]
    with gzip.open(trace, "wt") as stream:
        stream.writelines(lines)
    os.utime(trace, ns=(1, 1))                  # another size and time: another file
    changed, _, _, _ = load_trace(config)
    assert changed is not first and len(changed) == len(first) - 10


def test_a_kept_trace_is_reported_read_at_once(tmp_path):
    trace = tmp_path / "ricc.swf.gz"
    shutil.copy(RICC_SAMPLE, trace)
    config = ReplayConfig(trace=str(trace))
    calls: list = []
    read, _, _, _ = load_trace(config, lambda done, total: calls.append((done, total)))
    size = os.path.getsize(trace)
    assert calls[-1] == (size, size)
    calls.clear()
    again, _, _, _ = load_trace(config, lambda done, total: calls.append((done, total)))
    assert again is read and calls == [(size, size)]    # kept, and the bar still ends
