"""docs/layout-darshan.rst is what scripts/layout-darshan-table writes from the logs now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_the_advice_table_of_the_example_logs_is_current():
    pytest.importorskip("darshan")
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "layout-darshan-table"),
                           "--check"], capture_output=True, text=True, timeout=240, cwd=REPO)
    assert done.returncode == 0, done.stderr
