"""The parts of scripts/local-cluster, split along their seams (plain standard library)."""
