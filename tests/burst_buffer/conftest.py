"""The burst-buffer path's site (a config and a state store in tmp_path) and its stand-in
scheduler, shared with tests/plugins/test_burst_buffer_lifecycle.py."""

from plugins.test_burst_buffer_lifecycle import Queue, job_script, site, slurm_script

__all__ = ["Queue", "job_script", "site", "slurm_script"]
