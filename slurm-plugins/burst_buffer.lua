--[[
scratchkeeper's burst_buffer.lua (Slurm's burst_buffer/lua plugin: BurstBufferType=
burst_buffer/lua in slurm.conf; slurmctld loads this file from the directory of slurm.conf,
with burst_buffer.conf beside it saying Directive=STAGE).

Directive=STAGE hands a job whose script starts with #STAGEIN/#STAGEOUT lines to the functions
below, and only those jobs. All but job_process, pools, paths and post_run run
`scratchkeeper bb STAGE ARGS...` (cli/burst_buffer.py, scratchkeeper/burst_buffer/) and return
its exit status and its last line, which Slurm shows the user: the job's pending reason,
scontrol show bbstat.

  slurm_bb_job_process  sbatch: a capacity= larger than the pool, then the directive check
                        below (script:LINE: reason refuses the job); runs no command
  slurm_bb_setup        pending: record the job and its owner (the owner Slurm 22.05 passes
                        only here; the later calls find it in that record)
  slurm_bb_data_in      pending (BurstBufferStageIn): the planner's whole check, then the
                        stage-in data jobs, as the owner; a script the planner refuses ends
                        the job with its reason (sacct -o Comment)
  slurm_bb_test_data_in Slurm 24.05 and later, after data_in: done (data_in waited for the
                        stage-in jobs); runs no command
  slurm_bb_real_size    the bytes staged, which Slurm accounts in the "scratch" pool
  slurm_bb_paths        SCRATCHKEEPER_* variables naming the staged files, into the job
  slurm_bb_pre_run      allocated, before start: recoveryd checks and patches the input
  slurm_bb_post_run     ended (nothing to do, no command run: data_out follows)
  slurm_bb_data_out     STAGE_OUT: the stage-out data jobs, as the owner (a failure is logged
                        and recorded, and the job leaves STAGE_OUT all the same)
  slurm_bb_test_data_out Slurm 24.05 and later, after data_out: done, as test_data_in
  slurm_bb_job_teardown cancel what is left, close the chain
  slurm_bb_pools        the pool "scratch": free space on scratch + what staged jobs hold
                        (an error when df fails: Slurm keeps the pool it has)
  slurm_bb_get_status   scontrol show bbstat [JOBID...]

Three functions run inside slurmctld, under its locks, and must return at once (job_process,
pools, paths). None starts an interpreter: paths copies a file; pools runs df (bounded, every
30 s) and keeps what it read in a file; job_process reads the script, the held bytes and that
file (df itself only when the file is missing or old) and checks the script's directives here,
in Lua. The planner's whole check (site templates, symbolic links, paths relative to the job's
directory) runs in data_in, which Slurm runs outside its locks.
The others run in slurmctld's script daemon, killed after burst_buffer.conf's timeouts.

One file for Slurm 22.05 to 25.05 (docs/slurm-plugins.rst "Slurm versions"): 23.02 appends the
job's uid and gid to most calls and puts the caller before get_status's words, 23.11 appends a
job_info table, 24.05 requires test_data_in and test_data_out. Each function reads the arguments
it needs by position, which every version keeps; where a version changes what a position holds
(get_status), the script tests what Slurm gave it, never a version number.

Install: `make -C slurm-plugins install` writes the paths below. Lua 5.1 (Debian's 22.05) to
5.4 (Slurm 24.11 built against liblua5.3 here).
--]]

local SCRATCHKEEPER = "/usr/local/bin/scratchkeeper"
local SITE_CONFIG = "/etc/scratchkeeper/site.toml"
local SCRATCH = "/scratch"
local STATE_DIR = "/var/lib/scratchkeeper/burst-buffer"
local JOB_SUBMIT_CONF = "/etc/slurm/job_submit_scratchkeeper.conf"
local POOL = "scratch"
local GRANULE = 1048576
-- what slurm_bb_pools read of df, for job_process (in STATE_DIR: "FREE_BYTES EPOCH"), and how
-- old it may be: Slurm asks for the pools every 30 s
local FREE_FILE, FREE_SECONDS = "scratch-free", 300
-- the directive check (installed beside this file)
local CHECK_SCRIPT = "/etc/slurm/burst_buffer_check.lua"
-- Slurm's size units (bb_get_size_num): K/KiB... powers of 1024, KB... of 1000, none: bytes
local UNITS = { [""] = 1, k = 1024, kib = 1024, kb = 1000,
                m = 1024 ^ 2, mib = 1024 ^ 2, mb = 1000 ^ 2,
                g = 1024 ^ 3, gib = 1024 ^ 3, gb = 1000 ^ 3,
                t = 1024 ^ 4, tib = 1024 ^ 4, tb = 1000 ^ 4,
                p = 1024 ^ 5, pib = 1024 ^ 5, pb = 1000 ^ 5 }

-- A word for sh, whatever it holds: Slurm's arguments are never code.
local function quote(word)
  return "'" .. string.gsub(tostring(word), "'", "'\\''") .. "'"
end

-- Run `scratchkeeper bb ARGS...`: its exit code (a string, nil when it could not be run) and
-- its output. It runs below slurmctld's priority (nice NICE): on the head node, slurmctld and
-- munged answer users' sbatch before a stage-in's bookkeeping gets the CPU (under 200 jobs a
-- minute, sbatch timed out at MessageTimeout while a stage's commands took the CPU).
local NICE = "10"
local function run(...)
  local command = {}
  for _, word in ipairs({ "nice", "-n", NICE, SCRATCHKEEPER, "-c", SITE_CONFIG, "bb", ... }) do
    table.insert(command, quote(word))
  end
  local line = table.concat(command, " ") .. " </dev/null 2>&1"
  local pipe = io.popen(line .. "; echo \"scratchkeeper-exit=$?\"")
  if not pipe then return nil, "cannot run " .. SCRATCHKEEPER end
  local output = pipe:read("*a") or ""
  pipe:close()
  local body, code = string.match(output, "^(.-)\n?scratchkeeper%-exit=(%d+)%s*$")
  return code, body or output
end

-- slurm.SUCCESS or slurm.ERROR, and the last line of the output (what Slurm shows the user).
local function bb(stage, ...)
  local code, body = run(stage, ...)
  local last = ""
  for text in string.gmatch(body, "[^\n]+") do last = text end
  if code == "0" then
    slurm.log_info("scratchkeeper: bb %s: %s", stage, last)
    return slurm.SUCCESS, last
  end
  slurm.log_error("scratchkeeper: bb %s: exit %s: %s", stage, tostring(code), body)
  return slurm.ERROR, last
end

-- Whether the site gave #STAGE scripts to this plugin (job_submit_scratchkeeper.conf
-- staging = "burst-buffer"); otherwise job_submit.lua holds them for the chain service too,
-- and a job must never be taken twice.
local function ours()
  local chunk = loadfile(JOB_SUBMIT_CONF)
  if not chunk then return false end
  local ok, settings = pcall(chunk)
  return ok and type(settings) == "table" and settings.staging == "burst-buffer"
end

local function read_file(path)
  local handle = io.open(path, "r")
  if not handle then return nil end
  local text = handle:read("*a")
  handle:close()
  return text
end

-- -- The pool ----------------------------------------------------------------------------------

-- Free bytes on scratch (df, bounded: a hung file system must not hold slurmctld); nil when df
-- fails.
local function df_free()
  local pipe = io.popen("timeout -s KILL 2 df -P -B1 " .. quote(SCRATCH) .. " 2>/dev/null")
  if not pipe then return nil end
  local text = pipe:read("*a") or ""
  pipe:close()
  return tonumber(string.match(text, "\n%S+%s+%d+%s+%d+%s+(%d+)"))
end

-- Keep what df said for job_process (replaced whole through a temporary of this call's own:
-- a reader never sees half a file, two writers never share one). A failure only costs
-- job_process a df of its own.
local function remember_free(free)
  local path = STATE_DIR .. "/" .. FREE_FILE
  local partial = path .. "." .. (string.match(tostring({}), "0x(%x+)") or tostring(os.time()))
  local out = io.open(partial, "w")
  if not out then return end
  local written = out:write(string.format("%.0f %d\n", free, os.time()))
  out:close()
  if not written or not os.rename(partial, path) then os.remove(partial) end
end

-- What slurm_bb_pools last read of df, if it is recent.
local function remembered_free()
  local free, at = string.match(read_file(STATE_DIR .. "/" .. FREE_FILE) or "", "^(%d+) (%d+)\n")
  local age = at and os.time() - tonumber(at)
  if age and age >= 0 and age <= FREE_SECONDS then return tonumber(free) end
  return nil
end

-- The pool's size in granules: the free bytes of scratch + the bytes staged jobs hold
-- (held-bytes, written whole by scratchkeeper).
local function granules_of(free)
  local held = tonumber(read_file(STATE_DIR .. "/held-bytes") or "0") or 0
  return math.floor((free + held) / GRANULE)
end

-- What the script asks of our pool, read as Slurm reads it (_parse_bb_opts): among the leading
-- comment lines (blank ones skipped, the first other line ends them), each "#STAGE" line that
-- holds "capacity=" asks its size of the pool its "pool=" names. The bytes asked of POOL and
-- the words that asked them; nil when none does. A size in nodes is not bytes: left to Slurm.
local function capacity_asked(text)
  local bytes, asked = 0, nil
  for line in string.gmatch(text, "[^\n]+") do
    if string.sub(line, 1, 1) ~= "#" then break end
    local size = string.sub(line, 1, 6) == "#STAGE" and string.match(line, "capacity=(%S*)")
    if size and string.match(line, "pool=(%S*)") == POOL then
      local number, unit = string.match(size, "^(%d+)(%a*)")
      local multiplier = number and UNITS[string.lower(unit)]
      if multiplier then
        bytes = bytes + tonumber(number) * multiplier
        asked = asked and (asked .. " " .. "capacity=" .. size) or ("capacity=" .. size)
      end
    end
  end
  if asked then return bytes, asked end
  return nil
end

local function gib(granules)
  return string.format("%.1f GiB", granules * GRANULE / 1024 ^ 3)
end

-- A job asking more of the pool than it holds would pend (BurstBufferResources) for ever:
-- refused at sbatch with the pool's size. The error message, or nil.
local function too_large(text)
  local bytes, asked = capacity_asked(text)
  if not bytes then return nil end
  local free = remembered_free() or df_free()
  if not free then return nil end  -- unknown now: Slurm's pool decides later
  local granules = granules_of(free)
  if math.ceil(bytes / GRANULE) <= granules then return nil end
  return string.format("scratchkeeper: #STAGE %s asks %s of the pool %s, which holds %s " ..
                       "(free space on %s and what staged jobs hold): ask for less",
                       asked, gib(math.ceil(bytes / GRANULE)), POOL, gib(granules), SCRATCH)
end

-- Why the planner would refuse the script (burst_buffer_check.lua, in Lua: no process), or nil.
-- A check that cannot be loaded or fails is logged and refuses nothing: data_in checks the
-- script whole and ends a job it refuses with the reason.
local function directive_problem(text)
  local chunk, why = loadfile(CHECK_SCRIPT)
  local loaded, check = false, why
  if chunk then loaded, check = pcall(chunk) end
  if not loaded or type(check) ~= "function" then
    slurm.log_error("scratchkeeper: bb job-process: cannot load %s: %s", CHECK_SCRIPT,
                    tostring(check))
    return nil
  end
  local ran, problem = pcall(check, text, SCRATCH)
  if not ran then
    slurm.log_error("scratchkeeper: bb job-process: the directive check failed (%s); data_in " ..
                    "checks the script", tostring(problem))
    return nil
  end
  return problem
end

-- -- Slurm's functions -------------------------------------------------------------------------

-- A number Slurm gave (a string, or a float in Lua 5.3) as the integer it is, for the logs.
local function integer_text(value)
  local number = tonumber(value)
  if number and number == math.floor(number) then return string.format("%d", number) end
  return tostring(value)
end

-- Runs inside slurmctld under its locks: files and Lua only, no process (df only when what
-- slurm_bb_pools read is missing or old). Slurm 23.02 and later pass the submitter's uid and
-- gid (and 23.11 a job_info table): the refusal names the submitter from them, no lookup.
function slurm_bb_job_process(job_script, uid, gid)
  if not ours() then
    return slurm.ERROR, "scratchkeeper: this cluster runs #STAGEIN/#STAGEOUT through the " ..
                        "chain service, but Slurm's burst buffer took the job: the site must " ..
                        "set staging = \"burst-buffer\" in " .. JOB_SUBMIT_CONF
  end
  -- unreadable here: data_in reads it again and ends the job with the reason
  local text = read_file(job_script)
  local refused = text and (too_large(text) or directive_problem(text))
  if refused then
    if uid then
      slurm.log_info("scratchkeeper: bb job-process: uid %s gid %s: %s", integer_text(uid),
                     integer_text(gid), refused)
    else
      slurm.log_info("scratchkeeper: bb job-process: %s", refused)
    end
    return slurm.ERROR, refused
  end
  return slurm.SUCCESS
end

function slurm_bb_pools()
  local free = df_free()
  if not free then
    -- an error keeps the pool Slurm has; an answer without it would drop the pool, and every
    -- job asking for it would be refused
    slurm.log_error("scratchkeeper: df %s failed: the pool is not updated", SCRATCH)
    return slurm.ERROR, "scratchkeeper: df " .. SCRATCH .. " failed"
  end
  remember_free(free)
  -- quantity counts granules (here MiB), not bytes
  return slurm.SUCCESS, string.format(
    '{"pools":[{"id":"%s","quantity":%.0f,"granularity":%d}]}', POOL, granules_of(free), GRANULE)
end

function slurm_bb_setup(job_id, uid, gid, pool, bb_size, job_script)
  return bb("setup", job_id, uid, gid, pool or "", bb_size or "0", job_script or "")
end

function slurm_bb_data_in(job_id, job_script)
  return bb("data-in", job_id, job_script)
end

-- Slurm 24.05 and later poll this after data_in until it answers anything but "BUSY" (and hold
-- the job on an error): data_in returns only when the stage-in jobs are submitted and recorded,
-- so there is nothing left to wait for here, as with 22.05, which has no such call.
function slurm_bb_test_data_in(_job_id, _job_script)
  return slurm.SUCCESS
end

function slurm_bb_real_size(job_id)
  local rc, size = bb("real-size", job_id)
  if rc ~= slurm.SUCCESS or not string.match(size or "", "^%d+$") then
    return slurm.SUCCESS
  end
  return slurm.SUCCESS, size
end

function slurm_bb_paths(job_id, _, path_file)
  -- written by data_in (root's file, lines NAME=VALUE); copying it is all this may do
  if not string.match(tostring(job_id), "^%d+$") then return slurm.SUCCESS end
  local text = read_file(STATE_DIR .. "/" .. job_id .. ".env")
  if text and path_file then
    local out = io.open(path_file, "w")
    if out then
      out:write(text)
      out:close()
    end
  end
  return slurm.SUCCESS
end

function slurm_bb_pre_run(job_id, job_script)
  return bb("pre-run", job_id, job_script)
end

-- Nothing to do between the job's end and data_out: no command is run for it.
function slurm_bb_post_run(_job_id, _job_script)
  return slurm.SUCCESS
end

-- Slurm 22.05 keeps a job whose data_out failed in STAGE_OUT until `scancel --hurry`, while its
-- results are safe on scratch: scratchkeeper records a failed stage-out and answers success;
-- should it fail itself (not run, killed), the failure is logged (bb) and the job goes on too.
function slurm_bb_data_out(job_id, job_script)
  local rc, message = bb("data-out", job_id, job_script)
  if rc ~= slurm.SUCCESS then
    return slurm.SUCCESS, "stage-out FAILED, results left on scratch: " .. message
  end
  return rc, message
end

-- Slurm 24.05 and later poll this after data_out, as test_data_in after data_in; data_out has
-- answered for the stage-out by then (an error here would hold the finished job).
function slurm_bb_test_data_out(_job_id, _job_script)
  return slurm.SUCCESS
end

function slurm_bb_job_teardown(job_id, job_script, hurry)
  return bb("teardown", job_id, job_script or "", tostring(hurry))
end

-- Whether Slurm passes get_status the caller's uid and gid before the words (23.02 and later).
-- The arguments cannot tell (`scontrol show bbstat 1000 100` is two job ids to 22.05); the
-- slurm table can: 23.02 put every Slurm error code in it (slurm_lua.c, in the same release),
-- 22.05 eight ESLURM_ names, none of them ESLURM_INVALID_JOB_ID; 24.05 added SLURM_BB_BUSY.
local function status_has_caller()
  return slurm.ESLURM_INVALID_JOB_ID ~= nil or slurm.SLURM_BB_BUSY ~= nil
end

-- `scontrol show bbstat WORDS`: the words (job ids) reach scratchkeeper as words, after the
-- caller when Slurm passes one.
function slurm_bb_get_status(...)
  local given = { ... }
  local args, first = { "status" }, 1
  if status_has_caller() then
    table.insert(args, "--caller=" .. tostring(given[1]) .. ":" .. tostring(given[2]))
    first = 3
  end
  table.insert(args, "--")
  for i = first, select("#", ...) do table.insert(args, tostring(given[i])) end
  local code, body = run((table.unpack or unpack)(args))
  if code ~= "0" then
    slurm.log_error("scratchkeeper: bb status: exit %s: %s", tostring(code), body)
    return slurm.ERROR, "scratchkeeper: status unavailable"
  end
  return slurm.SUCCESS, body .. "\n"
end
