"""pjdfstest as the conformance run (``benchmarks/mount/conformance.py``) and its fast subset in
the tests (``tests/mount/test_conformance.py``) use it: the driver script and the failures
accepted for the mount, each with its reason, and its known bugs
(docs/benchmarks/mount/pjdfstest-accepted.toml)."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PJDFSTEST = REPO / "scripts" / "pjdfstest"
ACCEPTED = REPO / "docs" / "benchmarks" / "mount" / "pjdfstest-accepted.toml"


def accepted_failures() -> dict[str, str]:
    """Test id ("FILE:N") -> why the mount may fail it."""
    table = tomllib.loads(ACCEPTED.read_text())
    return {test: entry["reason"] for entry in table.get("accepted", []) for test in entry["tests"]}


def known_bugs() -> dict[str, str]:
    """Test id -> the mount's bug that makes it fail (to be fixed, not accepted)."""
    table = tomllib.loads(ACCEPTED.read_text())
    return {test: entry["bug"] for entry in table.get("known_bug", []) for test in entry["tests"]}
