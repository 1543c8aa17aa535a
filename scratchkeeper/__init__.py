"""scratchkeeper: stage, replicate, recover and offload the transient data of batch jobs."""

__version__ = "0.1.0"
