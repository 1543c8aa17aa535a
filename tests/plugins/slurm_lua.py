"""What each Slurm release hands slurm-plugins/*.lua: its Lua, its `slurm` table, and the
arguments of every burst_buffer/lua call, so the Lua tests run each call as each release makes it.

Taken from the releases' own sources (docs/slurm-plugins.rst "Slurm versions"):
src/plugins/burst_buffer/lua/burst_buffer_lua.c (the argv built for each call, and whether
job_info is pushed after it), src/lua/slurm_lua.c (the `slurm` table) and
etc/burst_buffer.lua.example of 22.05.8 and 24.11.5.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

#: a uid and gid Slurm passes (as strings) where a release passes them
UID, GID = "1000", "1000"


@dataclass(frozen=True)
class SlurmRelease:
    name: str
    #: lupa's module for the Lua the release's plugins link (Debian 12's 22.05: liblua5.1;
    #: scripts/bootstrap's 24.11: liblua5.3)
    lua_module: str
    #: what the release adds to the `slurm` table beyond SUCCESS/ERROR and the log functions
    slurm_table: dict[str, Any] = field(default_factory=dict)
    #: whether numbers Slurm pushes with lua_pushnumber arrive as floats (Lua 5.3 and later)
    float_numbers: bool = False
    #: 23.02 and later: uid, gid after the 22.05 arguments of most calls
    passes_owner: bool = False
    #: 23.11 and later: a job_info table after those
    passes_job_info: bool = False
    #: 24.05 and later: slurm_bb_test_data_in / _out are called (and required)
    polls_data_stages: bool = False

    def runtime(self):
        module = pytest.importorskip(f"lupa.{self.lua_module}")
        return module.LuaRuntime(unpack_returned_tuples=True)

    def number(self, value: int) -> int | float:
        """A number as the release's lua_pushnumber hands it to the script."""
        return float(value) if self.float_numbers else value

    def bb_arguments(self, lua, hook: str, *arguments: Any) -> tuple:
        """The arguments of burst_buffer.lua's ``hook`` as this release passes them, from the
        22.05 ones (for get_status: the words after ``bbstat``)."""
        if hook == "slurm_bb_get_status":
            return (UID, GID, *arguments) if self.passes_owner else arguments
        if hook in ("slurm_bb_pools",) or not self.passes_owner:
            return arguments
        job_info = lua.table(job_id=self.number(42), user_id=self.number(int(UID)),
                             group_id=self.number(int(GID)), work_dir="/home/u",
                             nodes="node1")
        if hook == "slurm_bb_setup":  # 22.05 already passes the owner (second and third)
            return (*arguments, job_info) if self.passes_job_info else arguments
        extra: tuple = (UID, GID)
        if self.passes_job_info and hook != "slurm_bb_job_teardown":
            extra += (job_info,)
        return (*arguments, *extra)


SLURM_22_05 = SlurmRelease("22.05", "lua51")
SLURM_24_11 = SlurmRelease(
    "24.11", "lua53",
    # every Slurm error code (slurm_lua.c _register_slurm_output_errtab, from 23.02 on) and the
    # test_data_* answer (burst_buffer_lua.c _loadscript_extra, from 24.05 on)
    slurm_table={"ESLURM_INVALID_JOB_ID": 2017, "SLURM_BB_BUSY": "BUSY"},
    float_numbers=True, passes_owner=True, passes_job_info=True, polls_data_stages=True)
RELEASES = [SLURM_22_05, SLURM_24_11]
RELEASE_IDS = [release.name for release in RELEASES]
