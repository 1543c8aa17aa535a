"""Replication decision-cycle benchmark (10,000 queued + 1,000 running jobs)."""
