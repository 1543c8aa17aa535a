"""Read QoS benchmark (simulation): python -m benchmarks.qos [--quick]."""
