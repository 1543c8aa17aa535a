"""Transparent recovery through the scratch mount: the stall a reader sees (``python -m
benchmarks.mount_recovery``)."""
