-- luacheck's configuration for slurm-plugins/*.lua (make check).
-- job_submit.lua runs inside slurmctld's job_submit/lua plugin, which provides the `slurm`
-- table (log functions, SUCCESS/ERROR codes) and calls the two entry points the script defines.
std = "max"
read_globals = { "slurm" }
globals = { "slurm_job_submit", "slurm_job_modify" }
-- part_list is in the entry points' signatures (the plugin passes it); the script has no use for it
ignore = { "212/part_list" }
