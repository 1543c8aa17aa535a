--[[
scratchkeeper's job_submit.lua (Slurm job_submit/lua plugin; slurmctld loads it from the
directory of slurm.conf). Two rules, settings in job_submit_scratchkeeper.conf next to it:

1. Only scratchkeeper's submissions may use the data queues: the submitting uid must be in
   data_queue_uids (and, if data_queue_hosts is set, the submit host in it). submit_uid comes
   from munge and cannot be forged; alloc_node is what the submitting host claims.
2. A job with data directives (#STAGEIN/#STAGEOUT lines in its script, or the SPANK plugin's
   --stage-in/--stage-out, which arrive as SCRATCHKEEPER_STAGE_IN/OUT in spank_job_env) is held
   (priority 0) and marked in admin_comment for `scratchkeeper spank chain`, which submits its
   data jobs, makes the job depend on them and releases it; or, for directive scripts when
   staging = "reject", refused with what to run instead (unless `scratchkeeper submit` handed
   it over: scheduler.submit_via = "chain-service").
3. A job still waiting to be chained cannot have its priority changed (released) by anyone but
   the data_queue_uids: Slurm records the hold of rule 2 as a user hold.

docs/slurm-plugins.rst explains the design. One file for Slurm 22.05 to 25.05: the entry points'
arguments and the job_desc fields read here are the same in each; Lua 5.1 (Debian's 22.05 links
liblua5.1) to 5.4, where Slurm's numbers (submit_uid, priority) are floats.
--]]

-- A global set before this script runs overrides the settings path (the tests do; no user can
-- touch slurmctld's Lua state).
local CONF_FILE = rawget(_G, "SCRATCHKEEPER_JOB_SUBMIT_CONF") or "/etc/slurm/job_submit_scratchkeeper.conf"
local MARKER = "scratchkeeper:chain-pending"

local DEFAULTS = {
  data_queues = { "dataxfer", "replica" },
  data_queue_uids = { 0 },
  data_queue_hosts = { },
  staging = "hold",
}

-- The site settings over the defaults; a broken settings file keeps the defaults (logged),
-- because an error here would refuse every submission on the cluster.
local function load_settings()
  local settings = {}
  for key, value in pairs(DEFAULTS) do settings[key] = value end
  local chunk, err = loadfile(CONF_FILE)
  if not chunk then
    if not string.find(tostring(err), "No such file", 1, true) then
      slurm.log_error("scratchkeeper: %s: %s (using the defaults)", CONF_FILE, tostring(err))
    end
    return settings
  end
  local ok, site = pcall(chunk)
  if not ok or type(site) ~= "table" then
    slurm.log_error("scratchkeeper: %s: %s (using the defaults)", CONF_FILE,
                    ok and "does not return a table" or tostring(site))
    return settings
  end
  for key, value in pairs(site) do
    if DEFAULTS[key] == nil then
      slurm.log_error("scratchkeeper: %s: unknown setting %s (ignored)", CONF_FILE, tostring(key))
    else
      settings[key] = value
    end
  end
  if settings.staging ~= "hold" and settings.staging ~= "reject" and settings.staging ~= "burst-buffer" then
    slurm.log_error("scratchkeeper: %s: staging = %s: expected \"hold\", \"reject\" or " ..
                    "\"burst-buffer\"; using hold",
                    CONF_FILE, tostring(settings.staging))
    settings.staging = "hold"
  end
  return settings
end

local SETTINGS = load_settings()

local function contains(list, value)
  for _, item in ipairs(list or {}) do
    if item == value then return true end
  end
  return false
end

local function split_commas(text)
  local parts = {}
  for part in string.gmatch(text or "", "[^,]+") do table.insert(parts, part) end
  return parts
end

-- The data queue the job asks for, or nil.
local function data_queue_of(partition)
  for _, name in ipairs(split_commas(partition)) do
    if contains(SETTINGS.data_queues, name) then return name end
  end
  return nil
end

local function may_use_data_queue(uid, host)
  if not contains(SETTINGS.data_queue_uids, uid) then return false end
  if #SETTINGS.data_queue_hosts > 0 and not contains(SETTINGS.data_queue_hosts, host) then
    return false
  end
  return true
end

-- Whether a line is a data directive of one of the three families the planner reads
-- (scratchkeeper/planner/directives.py; leading blanks allowed): "#STAGEIN"/"#STAGEOUT" then a
-- blank or the end of the line; DataWarp's "#DW stage_in"/"#DW stage_out"; a "#PBS" line whose
-- -W attributes hold stagein= or stageout= (Torque's qsub wrapper hands the script to sbatch
-- as it is). Plain sbatch/qsub would run such a job without its data.
local function word_then_blank(line, pattern)
  return string.match(line, pattern .. "%s") ~= nil or string.match(line, pattern .. "$") ~= nil
end

local function is_directive(line)
  if word_then_blank(line, "^%s*#STAGEIN") or word_then_blank(line, "^%s*#STAGEOUT") then
    return true
  end
  if word_then_blank(line, "^%s*#DW%s+stage_in") or word_then_blank(line, "^%s*#DW%s+stage_out") then
    return true
  end
  local attributes = string.match(line, "^%s*#PBS%s.-%-W%s*(.*)$")
  if attributes then
    for attribute in string.gmatch(attributes, "[^,]+") do
      local key = string.match(attribute, "^%s*(%a+)%s*=")
      if key == "stagein" or key == "stageout" then return true end
    end
  end
  return false
end

local function has_directives(script)
  if not script then return false end
  for line in string.gmatch(script, "[^\n]+") do
    if is_directive(line) then return true end
  end
  return false
end

-- Whether Slurm's burst_buffer/lua takes the job (burst_buffer.conf Directive=STAGE), matched
-- as Slurm matches it (_xlate_batch): among the script's leading comment lines (empty lines
-- skipped, the first line not starting with "#" ends them), one that starts with "#STAGE".
local function burst_buffer_takes(script)
  if not script then return false end
  for line in string.gmatch(script, "[^\n]+") do
    if string.sub(line, 1, 1) ~= "#" then return false end
    if string.sub(line, 1, 6) == "#STAGE" then return true end
  end
  return false
end

-- The SPANK plugin's requests: {stage-in = "v1\nv2", stage-out = ...} from spank_job_env.
local function spank_requests(env)
  local found = {}
  if type(env) ~= "table" then return found end
  for _, entry in pairs(env) do
    local name, value = string.match(tostring(entry), "^([%w_]+)=(.*)$")
    if name == "SCRATCHKEEPER_STAGE_IN" and value ~= "" then found["stage-in"] = value end
    if name == "SCRATCHKEEPER_STAGE_OUT" and value ~= "" then found["stage-out"] = value end
  end
  return found
end

-- Whether `scratchkeeper submit` handed this script over (scheduler.submit_via =
-- "chain-service"): it sets SCRATCHKEEPER_SUBMIT in sbatch's environment. A user can set it by
-- hand, which only gets the job held and chained like any handed-over script.
local function handed_over(env)
  if type(env) ~= "table" then return false end
  if env["SCRATCHKEEPER_SUBMIT"] ~= nil then return true end
  for _, entry in pairs(env) do  -- a list of NAME=VALUE strings in some Slurm versions
    if string.match(tostring(entry), "^SCRATCHKEEPER_SUBMIT=") then return true end
  end
  return false
end

-- A number Slurm gave (a float from Lua 5.3 on: "1000.0") as the integer it is, for the logs.
local function integer_text(value)
  if type(value) == "number" and value == math.floor(value) then
    return string.format("%d", value)
  end
  return tostring(value)
end

local function refuse_data_queue(queue, uid)
  slurm.log_info("scratchkeeper: uid %s refused on data queue %s", integer_text(uid), queue)
  slurm.log_user("scratchkeeper: partition %s is reserved for scratchkeeper's data jobs; " ..
                 "put your transfers in the job itself (sbatch --stage-in=SRC:DST, " ..
                 "--stage-out=SRC:DST, or #STAGEIN/#STAGEOUT lines) and scratchkeeper " ..
                 "submits them there for you", queue)
  return slurm.ERROR
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local queue = data_queue_of(job_desc.partition)
  if queue then
    if not may_use_data_queue(submit_uid, job_desc.alloc_node) then
      return refuse_data_queue(queue, submit_uid)
    end
    return slurm.SUCCESS  -- scratchkeeper's own data jobs: never held or rewritten
  end

  local requests = spank_requests(job_desc.spank_job_env)
  local directives = has_directives(job_desc.script)
  if not directives and not requests["stage-in"] and not requests["stage-out"] then
    return slurm.SUCCESS
  end
  -- staging = "burst-buffer": slurm-plugins/burst_buffer.lua runs the staging of a script with
  -- #STAGE lines inside Slurm's own burst-buffer states (all of its directives, #DW and #PBS -W
  -- ones included); only the jobs it does not take are held for the chain service, so no job
  -- is taken twice.
  if SETTINGS.staging == "burst-buffer" and burst_buffer_takes(job_desc.script) then
    if requests["stage-in"] or requests["stage-out"] then
      slurm.log_user("scratchkeeper: this job has both #STAGEIN/#STAGEOUT lines and " ..
                     "--stage-in/--stage-out; put all of its transfers in one of the two")
      return slurm.ERROR
    end
    return slurm.SUCCESS
  end
  if directives and SETTINGS.staging == "reject" and not (requests["stage-in"] or requests["stage-out"])
      and not handed_over(job_desc.environment) then
    slurm.log_user("scratchkeeper: this script has #STAGEIN/#STAGEOUT lines, which plain " ..
                   "sbatch does not run; submit it with `scratchkeeper submit SCRIPT` (or use " ..
                   "sbatch --stage-in=SRC:DST / --stage-out=SRC:DST)")
    return slurm.ERROR
  end

  -- Held until `scratchkeeper spank chain` has chained the data jobs. admin_comment carries
  -- the requests because only an operator can set it, so a user cannot fake a marker.
  local lines = { MARKER }
  for _, stage in ipairs({ "stage-in", "stage-out" }) do
    for value in string.gmatch(requests[stage] or "", "[^\n]+") do
      table.insert(lines, stage .. " " .. value)
    end
  end
  if directives then table.insert(lines, "directives") end
  job_desc.admin_comment = table.concat(lines, "\n")
  job_desc.priority = 0
  slurm.log_info("scratchkeeper: job from uid %s held for chaining (%d request(s)%s)",
                 integer_text(submit_uid), #lines - 1, directives and ", directives" or "")
  slurm.log_user("scratchkeeper: job held until its data jobs are chained")
  return slurm.SUCCESS
end

-- Slurm records the hold set above as a user hold, so `scontrol release` by the owner would
-- start the job before its data jobs exist; a release (or any priority change) of a job still
-- waiting to be chained is refused to everyone but scratchkeeper's submitters.
local function waits_for_chaining(job_rec)
  local comment = job_rec and job_rec.admin_comment
  return type(comment) == "string" and string.sub(comment, 1, #MARKER) == MARKER
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  local queue = data_queue_of(job_desc.partition)
  if queue and not may_use_data_queue(modify_uid, nil) then
    return refuse_data_queue(queue, modify_uid)
  end
  -- An update that does not touch the priority carries NO_VAL there.
  local priority = job_desc.priority
  if priority ~= nil and priority ~= (slurm.NO_VAL or 4294967294) and waits_for_chaining(job_rec)
      and not contains(SETTINGS.data_queue_uids, modify_uid) then
    slurm.log_user("scratchkeeper: job waits until its data jobs are chained; it is released " ..
                   "then (see `scratchkeeper status`)")
    return slurm.ERROR
  end
  return slurm.SUCCESS
end

slurm.log_info("scratchkeeper: job_submit.lua loaded (staging=%s)", SETTINGS.staging)
return slurm.SUCCESS
