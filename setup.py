"""Build glue that setup.cfg cannot express: the job-templates folder shipped as package data
and the native parts: the solver's core (scratchkeeper/solver/native, plain C11 + a CPython
binding), SUORA placement's core (scratchkeeper/placement/native), the trace replay's scheduler
and replication cores (scratchkeeper/sim/native) and the scratch mount's libfuse3 file system
(scratchkeeper/mount/native)."""

from setuptools import Extension, find_namespace_packages, setup

_SOLVER_NATIVE = "scratchkeeper/solver/native"

solver_native = Extension(
    "scratchkeeper.solver._native",
    sources=[f"{_SOLVER_NATIVE}/{name}.c"
             for name in ("replica_select", "replica_bounds", "replica_flow", "replica_slotsearch",
                          "py_input", "_native")],
    depends=[f"{_SOLVER_NATIVE}/{name}.h"
             for name in ("replica_select", "replica_select_int", "py_input")],
    include_dirs=[_SOLVER_NATIVE],
    # -ffp-contract=off: no fused multiply-add, so (delay + load) + k * cost rounds the same
    # way in C and in Python and every algorithm compares identical candidate times.
    extra_compile_args=["-std=c11", "-O2", "-ffp-contract=off", "-pthread"],
    extra_link_args=["-pthread"],
)

_PLACEMENT_NATIVE = "scratchkeeper/placement/native"

placement_native = Extension(
    "scratchkeeper.placement._native",
    sources=[f"{_PLACEMENT_NATIVE}/{name}.c" for name in ("suora", "_native")],
    depends=[f"{_PLACEMENT_NATIVE}/suora.h"],
    include_dirs=[_PLACEMENT_NATIVE],
    # -ffp-contract=off: the segment test (value - slot < length) rounds as in Python, so the
    # C core and scratchkeeper/placement/suora.py place every object alike
    extra_compile_args=["-std=c11", "-O2", "-ffp-contract=off", "-Wall", "-Wextra"],
)

_SIM_NATIVE = "scratchkeeper/sim/native"

sim_native = Extension(
    "scratchkeeper.sim._native",
    sources=[f"{_SIM_NATIVE}/{name}.c"
             for name in ("schedule", "replication", "py_jobs", "workload", "_native")],
    depends=[f"{_SIM_NATIVE}/{name}.h"
             for name in ("schedule", "replication", "py_jobs", "workload")],
    include_dirs=[_SIM_NATIVE],
    # -ffp-contract=off: every time and byte sum rounds as in scratchkeeper/sim/scheduler.py and
    # replication.py, so the C cores and the Python model give bit-identical schedules
    extra_compile_args=["-std=c11", "-O2", "-ffp-contract=off", "-Wall", "-Wextra"],
)

_MOUNT_NATIVE = "scratchkeeper/mount/native"


# scripts/bootstrap builds a libfuse that can ask for kernel passthrough (>= 3.16) into a prefix
# of the project's own (docs/mount.rst "Passthrough"); without one the system's libfuse3 is used.
_LIBFUSE_PREFIXES = "/opt/scratchkeeper/libfuse-*"


def _libfuse_prefix() -> str | None:
    """The newest finished prefix scripts/bootstrap built (SCRATCHKEEPER_LIBFUSE=system: none)."""
    import glob
    import os

    if os.environ.get("SCRATCHKEEPER_LIBFUSE") == "system":
        return None
    built = [os.path.dirname(stamp) for stamp in glob.glob(f"{_LIBFUSE_PREFIXES}/.built")]
    return max(built, key=lambda prefix: [int(part) if part.isdigit() else part for part in
                                          prefix.replace("-", ".").split(".")], default=None)


def _pkg_config(*flags: str) -> list[str]:
    """``pkg-config fuse3`` flags (the scratch mount's libfuse3: the project's own when built,
    linked with an rpath to it, else the system's)."""
    import os
    import subprocess

    env = dict(os.environ)
    prefix = _libfuse_prefix()
    if prefix:
        env["PKG_CONFIG_PATH"] = f"{prefix}/lib/pkgconfig"
    out = subprocess.run(["pkg-config", *flags, "fuse3"], check=True, capture_output=True,
                         text=True, env=env, timeout=60).stdout.split()
    if prefix and "--libs" in flags:
        # the library by its path: Python's own link flags name the system's library folder
        # first, where -lfuse3 would find Debian's
        out = [f"{prefix}/lib/libfuse3.so" if flag == "-lfuse3" else flag for flag in out]
        out.append(f"-Wl,-rpath,{prefix}/lib")
    return out


mount_native = Extension(
    "scratchkeeper.mount._fuse",
    sources=[f"{_MOUNT_NATIVE}/{name}.c"
             for name in ("lov", "skfs", "inode", "namespace", "layout", "data", "change", "dispatch",
                          "wait", "reads", "qos", "hybrid", "access", "logs", "fds", "passthrough",
                          "_fuse")]
    # read dispatch calls the replica-selection solver's C core directly (docs/mount.rst)
    + [f"{_SOLVER_NATIVE}/{name}.c"
       for name in ("replica_select", "replica_bounds", "replica_flow", "replica_slotsearch")],
    depends=[f"{_MOUNT_NATIVE}/{name}.h" for name in ("lov", "skfs", "skfs_int")]
    + [f"{_SOLVER_NATIVE}/{name}.h" for name in ("replica_select", "replica_select_int")],
    include_dirs=[_MOUNT_NATIVE, _SOLVER_NATIVE],
    # -fvisibility=hidden: the parts' shared functions stay inside the extension (PyInit__fuse
    # is exported by PyMODINIT_FUNC)
    extra_compile_args=_pkg_config("--cflags") + ["-std=gnu11", "-O2", "-pthread", "-Wall",
                                                    "-Wextra", "-fvisibility=hidden"],
    extra_link_args=_pkg_config("--libs") + ["-pthread"],
)

setup(
    # Every folder of the package is named, those holding only data too (the native sources,
    # sim/data: their files are listed in setup.cfg's package_data): a folder of files a
    # package ships that is not named makes setuptools warn at every build. The templates
    # folder is shipped as a package of data (one folder per scheduler backend).
    packages=find_namespace_packages(include=["scratchkeeper", "scratchkeeper.*"],
                                     exclude=["*.__pycache__"])
    + ["scratchkeeper.job_templates"]
    + [f"scratchkeeper.job_templates.{folder}" for folder in ("common", "pbs", "slurm")],
    package_dir={"scratchkeeper.job_templates": "job-templates"},
    ext_modules=[solver_native, placement_native, sim_native, mount_native],
)
