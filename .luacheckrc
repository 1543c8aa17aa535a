-- luacheck's configuration for slurm-plugins/*.lua (make check).
-- job_submit.lua runs inside slurmctld's job_submit/lua plugin and burst_buffer.lua inside its
-- burst_buffer/lua plugin; each provides the `slurm` table (log functions, SUCCESS/ERROR codes)
-- and calls the entry points the script defines.
std = "max"
read_globals = { "slurm" }
globals = { "slurm_job_submit", "slurm_job_modify",
            "slurm_bb_job_process", "slurm_bb_pools", "slurm_bb_setup", "slurm_bb_data_in",
            "slurm_bb_real_size", "slurm_bb_paths", "slurm_bb_pre_run", "slurm_bb_post_run",
            "slurm_bb_data_out", "slurm_bb_job_teardown", "slurm_bb_get_status",
            -- required from Slurm 24.05 on
            "slurm_bb_test_data_in", "slurm_bb_test_data_out" }
-- part_list is in the entry points' signatures (the plugin passes it); the script has no use for it
ignore = { "212/part_list" }
