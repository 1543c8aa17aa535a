"""Temporal replication: which queued jobs get a replica of their input, and when."""
