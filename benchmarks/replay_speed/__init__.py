"""Benchmark of the replay's C cores against the Python model, and the replication sweeps' time."""
