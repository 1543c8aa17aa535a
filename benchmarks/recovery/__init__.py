"""Recovery benchmark: python -m benchmarks.recovery [--quick]."""
