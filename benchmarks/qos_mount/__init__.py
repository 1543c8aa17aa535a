"""Read QoS measured on the mount with real reads (issue 21): ``python -m benchmarks.qos_mount``."""
