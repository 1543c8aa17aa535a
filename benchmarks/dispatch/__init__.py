"""Read dispatch benchmark: python -m benchmarks.dispatch [--quick]."""
