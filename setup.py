"""Build glue that setup.cfg cannot express: the job-templates folder shipped as package data
and the solver's native core (added by the solver build)."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["scratchkeeper", "scratchkeeper.*"])
    + ["scratchkeeper.job_templates"],
    package_dir={"scratchkeeper.job_templates": "job-templates"},
)
