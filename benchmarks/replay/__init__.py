"""Benchmark of the dry-run trace replay: full RICC trace, EASY backfilling, failures, replication."""
