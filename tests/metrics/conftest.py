"""Fixtures of the metrics tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def site_dir():
    """A folder every user can traverse for a private site (as tests/recovery's), removed
    afterwards; marks the test root (tests/conftest.py FIXTURE_MARKS)."""
    root = Path(tempfile.mkdtemp(prefix="sk-metrics-"))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)
