"""Build glue that setup.cfg cannot express: the job-templates folder shipped as package data
and the solver's native core (scratchkeeper/solver/native, plain C11 + a CPython binding)."""

from setuptools import Extension, find_packages, setup

_SOLVER_NATIVE = "scratchkeeper/solver/native"

solver_native = Extension(
    "scratchkeeper.solver._native",
    sources=[f"{_SOLVER_NATIVE}/{name}.c" for name in ("replica_select", "py_input", "_native")],
    depends=[f"{_SOLVER_NATIVE}/replica_select.h", f"{_SOLVER_NATIVE}/py_input.h"],
    include_dirs=[_SOLVER_NATIVE],
    # -ffp-contract=off: no fused multiply-add, so (delay + load) + k * cost rounds the same
    # way in C and in Python and every algorithm compares identical candidate times.
    extra_compile_args=["-std=c11", "-O2", "-ffp-contract=off", "-pthread"],
    extra_link_args=["-pthread"],
)

setup(
    # the templates folder is shipped as a package of data (one folder per scheduler backend)
    packages=find_packages(include=["scratchkeeper", "scratchkeeper.*"])
    + ["scratchkeeper.job_templates"]
    + [f"scratchkeeper.job_templates.{folder}" for folder in ("common", "pbs", "slurm")],
    package_dir={"scratchkeeper.job_templates": "job-templates"},
    ext_modules=[solver_native],
)
