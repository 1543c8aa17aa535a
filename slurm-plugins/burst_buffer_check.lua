--[[
scratchkeeper's check of a burst-buffer job's directives at sbatch, for burst_buffer.lua's
slurm_bb_job_process (installed beside it; loaded at each call, so it needs no restart).

A faithful subset of the planner's parse (scratchkeeper/planner/directives.py, parse_script),
so that sbatch fails at once on a bad line and slurmctld starts no process for it. It refuses
a script only where the planner refuses it, whatever directory the job runs from, with the
planner's words. What it cannot judge alone ends its look and leaves the script to the planner,
which data_in runs outside slurmctld's locks: a relative path (the job's directory decides),
shell quoting, a layout option or -l, #PBS -W staging, a URI with %-escapes, a query or
brackets, a script that is not plain ASCII, one over 256 KiB or 1000 directive lines (slurmctld
holds its locks meanwhile). Paths are judged by name: a symbolic link out of scratch is
data_in's to find. tests/plugins/test_burst_buffer_lua.py holds the two to the same
answers on many scripts. Lua 5.1; the file returns the check.
--]]

local STAGE_IN, STAGE_OUT = "stage-in", "stage-out"
local DIRECTIVE = { [STAGE_IN] = "#STAGEIN", [STAGE_OUT] = "#STAGEOUT" }
local STAGE_OF = { STAGEIN = STAGE_IN, STAGEOUT = STAGE_OUT, stage_in = STAGE_IN,
                   stage_out = STAGE_OUT }
local SCHEMES = { "gsiftp", "ftp", "http", "https", "file", "scp" }
local MAX_RETRIES, MAX_RETRY_DELAY = 100, 86400
local MAX_WALLTIME, MAX_SOURCE_WAIT = 365 * 86400, 7 * 86400
local PRIORITY_LOW, PRIORITY_HIGH = -1024, 4294967294
local MAX_PARALLEL_JOBS = 256
-- slurmctld holds its locks while this runs: a script longer than this, or with more directive
-- lines, is the planner's to judge in data_in (this takes about 30 us a directive line and
-- 10 ms for 256 KiB of other lines)
local MAX_CHECKED_BYTES, MAX_DIRECTIVE_LINES = 262144, 1000
-- the options in the planner's order (its "known:" list), and how many values each takes
local OPTIONS = { "retry", "retry-delay", "walltime", "qos", "account", "priority", "name",
                  "parallel", "input", "dependency", "start", "when", "wait-for-source",
                  "layout", "stripe-count", "stripe-size", "procs", "per-node", "request-size",
                  "pattern", "shared", "per-process", "darshan" }
local NO_VALUE = { parallel = true, shared = true, ["per-process"] = true }
local LAYOUT = { layout = true, ["stripe-count"] = true, ["stripe-size"] = true, procs = true,
                 ["per-node"] = true, ["request-size"] = true, pattern = true, shared = true,
                 ["per-process"] = true, darshan = true }
local ALIASES = { t = "walltime", A = "account", N = "name", J = "name", p = "priority",
                  q = "qos", time = "walltime", ["job-name"] = "name", retries = "retry" }
local KNOWN, SUPPORTED = {}, {}
for _, name in ipairs(OPTIONS) do KNOWN[name] = true end
for _, scheme in ipairs(SCHEMES) do SUPPORTED[scheme] = true end
-- raised by a check that cannot judge what it reads: the look ends, the planner decides
local UNDECIDED = {}

local function refuse(line, message)
  error({ line = line, message = message })
end

local function trim(text)
  return (string.gsub(string.gsub(text, "^[ \t]+", ""), "[ \t]+$", ""))
end

local function rstrip(text, chars)
  return (string.gsub(text, "[" .. (chars or " \t") .. "]+$", ""))
end

local function starts(text, prefix)
  return string.sub(text, 1, #prefix) == prefix
end

-- posixpath.normpath
local function normpath(path)
  if path == "" then return "." end
  local lead = ""
  if starts(path, "//") and not starts(path, "///") then lead = "//"
  elseif starts(path, "/") then lead = "/" end
  local parts = {}
  for part in string.gmatch(path, "[^/]+") do
    if part == ".." then
      if #parts > 0 and parts[#parts] ~= ".." then table.remove(parts)
      elseif lead == "" then table.insert(parts, part) end
    elseif part ~= "." then
      table.insert(parts, part)
    end
  end
  local joined = lead .. table.concat(parts, "/")
  return joined == "" and "." or joined
end

-- what follows the last / (a loop: a pattern anchored at the end only is tried at every
-- position, in time quadratic in the length)
local function basename(path)
  local index = #path
  while index > 0 and string.byte(path, index) ~= 47 do index = index - 1 end
  return string.sub(path, index + 1)
end

-- posixpath.join of two parts
local function join(path, name)
  if starts(name, "/") then return name end
  if path == "" or string.sub(path, -1) == "/" then return path .. name end
  return path .. "/" .. name
end

-- the scratch root as the planner holds it, normalised, and with a / after it (set by each
-- call)
local ROOT, ROOT_SLASH = "/", "/"

-- uri.is_host_name
local function is_host_name(host)
  if starts(host, "[") and string.sub(host, -1) == "]" then
    return string.match(string.sub(host, 2, -2), "^[0-9A-Fa-f:.]+$") ~= nil and
           string.find(host, ":", 1, true) ~= nil
  end
  if #host == 0 or #host > 253 then return false end
  local labels = string.sub(host, -1) == "." and string.sub(host, 1, -2) or host
  for label in string.gmatch(labels .. ".", "([^.]*)%.") do
    local good = #label <= 63 and (string.match(label, "^[A-Za-z0-9_]$") or
                 string.match(label, "^[A-Za-z0-9_][A-Za-z0-9_%-]*[A-Za-z0-9_]$"))
    if not good then return false end
  end
  return true
end

-- uri._normal_path: normalised by name, with one trailing / if written as a folder
local function normal_path(path)
  local normal = normpath(path)
  if starts(normal, "//") then normal = "/" .. (string.gsub(normal, "^/+", "")) end
  local base = basename(path)
  if (string.sub(path, -1) == "/" or base == "." or base == "..") and normal ~= "/" then
    return normal .. "/"
  end
  return normal
end

local function is_local(where)
  return where.scheme == "path" or where.scheme == "file"
end

-- A scheme:// location (uri.parse_location): the location, or nil and why the planner refuses
-- it. Only shapes whose meaning in Python's urlsplit is plain are judged.
local function uri(token, scheme)
  if string.find(token, "[%%?#%[%]]") then error(UNDECIDED) end
  local netloc, rest = string.match(token, "^[^:]*://([^/]*)(.*)$")
  local hostinfo = string.match(netloc, "^.*@(.*)$") or netloc  -- after the last @
  local hostname, port = string.match(hostinfo, "^([^:]*):?(.*)$")
  if port ~= "" then
    if not string.match(port, "^%d+$") then error(UNDECIDED) end
    if tonumber(port) > 65535 then
      return nil, "malformed URI (Port out of range 0-65535): " .. token
    end
  end
  if scheme == "file" then
    if netloc ~= "" and netloc ~= "localhost" then return nil, "file URI with a host: " .. token end
    if not starts(rest, "/") then return nil, "file URI without an absolute path: " .. token end
    return { text = token, scheme = "file", host = "", path = normal_path(rest) }
  end
  if hostname == "" then return nil, "URI without a host: " .. token end
  local host = string.lower(hostname)
  if not is_host_name(host) then return nil, "'" .. host .. "' is not a host name: " .. token end
  if rest == "" or rest == "/" then return nil, "URI without a path: " .. token end
  return { text = token, scheme = scheme, host = netloc, path = rest }
end

-- uri._HOSTPATH_RE: user (or nil), host and path of [user@]host:path, or nil
local function host_and_path(text)
  local host, path = string.match(text, "^(%[[^%]/]*%]):(.*)$")
  if host then return host, path end
  return string.match(text, "^([^@/:]+):(.*)$")
end

local function hostpath(token)
  local user, rest = string.match(token, "^([^@/]*)@(.*)$")
  if user then
    local host, path = host_and_path(rest)
    if host then return user, host, path end
  end
  local host, path = host_and_path(token)
  return nil, host, path
end

-- uri.parse_location: the location, or nil, why the planner refuses it and whether that is an
-- unknown scheme. A relative path is a location whose path the job's directory decides.
local function location(token)
  if token == "" then return nil, "empty location" end
  local scheme = string.match(token, "^([A-Za-z][A-Za-z0-9+.%-]*)://")
  if scheme then
    scheme = string.lower(scheme)
    if not SUPPORTED[scheme] then
      return nil, "unknown URI scheme '" .. scheme .. "://' (supported: " ..
                  table.concat(SCHEMES, "://, ") .. "://, host:path, or a path)", true
    end
    return uri(token, scheme)
  end
  local user, host, path = hostpath(token)
  if host and not (starts(token, "/") or starts(token, "./") or starts(token, "../") or
                   starts(token, "~")) then
    if not is_host_name(host) then
      return nil, "'" .. host .. "' is not a host name (host:path): " .. token
    end
    if user and not string.match(user, "^[A-Za-z0-9_][A-Za-z0-9._%-]*$") then
      return nil, "'" .. user .. "' is not a user name (user@host:path): " .. token
    end
    if path == "" then return nil, "host:path without a path: " .. token end
    return { text = token, scheme = "scp", host = (user and user ~= "") and (user .. "@" .. host)
             or host, path = path }
  end
  if starts(token, "~") then
    return nil, "'~' is not expanded in a data directive; write the absolute path: " .. token
  end
  if not starts(token, "/") then return { text = token, scheme = "path", relative = true } end
  return { text = token, scheme = "path", host = "", path = normal_path(token) }
end

-- uri.names_data: a first word that names data, never a command
local function names_data(token)
  return string.match(token, "^[A-Za-z][A-Za-z0-9+.%-]*://") ~= nil or
         string.find(token, "/", 1, true) ~= nil or starts(token, "~") or
         select(2, hostpath(token)) ~= nil
end

-- directives.confine, by name
local function confine(path, side, directive, number)
  local normal = normpath(path)
  if normal ~= ROOT and not starts(normal, ROOT_SLASH) then
    refuse(number, directive .. ": the " .. side .. " " .. path ..
           " is outside the scratch root " .. ROOT)
  end
  if normal == ROOT then
    refuse(number, directive .. ": the " .. side .. " " .. path .. " is the scratch root " ..
           ROOT .. " itself; name a file or folder inside it")
  end
end

-- directives.landing: where a transfer to a local path puts its data
local function landing(step)
  local destination = step.destination
  if step.recursive then return normpath(destination.path) end
  if string.sub(destination.path, -1) == "/" then
    return normpath(join(destination.path, basename(rstrip(step.source.path, "/"))))
  end
  return normpath(destination.path)
end

-- directives._structured: SOURCE to DESTINATION, checked
local function transfer(source, destination, stage, number, recursive, directive)
  local src, why = location(source)
  if not src then refuse(number, directive .. ": " .. why) end
  local dst
  dst, why = location(destination)
  if not dst then refuse(number, directive .. ": " .. why) end
  local here = stage == STAGE_IN and dst or src
  if not is_local(here) then
    refuse(number, directive .. ": the " .. (stage == STAGE_IN and "destination" or "source") ..
           " must be a path on this cluster, got '" .. here.text .. "'")
  end
  if src.relative or dst.relative then error(UNDECIDED) end
  if is_local(src) and is_local(dst) and rstrip(src.path, "/") == rstrip(dst.path, "/") then
    refuse(number, directive .. ": source and destination are the same file")
  end
  local step = { source = src, destination = dst, recursive = recursive }
  if stage == STAGE_IN then
    if not recursive and rstrip(dst.path, "/") == rstrip(ROOT, "/") then
      dst.path = rstrip(ROOT, "/") .. "/"
    end
    local name = basename(rstrip(src.path, "/"))
    if string.sub(dst.path, -1) == "/" and not recursive and
        (name == "" or name == "." or name == "..") then
      refuse(number, directive .. ": '" .. src.text .. "' names no file to put in the folder '" ..
             dst.text .. "'; name the destination file")
    end
    confine(landing(step), "destination", directive, number)
  else
    confine(src.path, "source", directive, number)
  end
  return step
end

-- directives._comment_start: where an unquoted # that starts a word begins (1-based), or past
-- the end
local function comment_start(text)
  -- the usual line: nothing quoted before its first #, if it has one
  local first = string.find(text, "[#'\"\\]")
  if not first then return #text + 1 end
  if string.sub(text, first, first) == "#" and
      (first == 1 or string.find(string.sub(text, first - 1, first - 1), "^[ \t]")) then
    return first
  end
  local quote_char, word_start, index = nil, true, 1
  while index <= #text do
    local char = string.sub(text, index, index)
    if quote_char then
      if char == "\\" and quote_char == '"' then index = index + 1
      elseif char == quote_char then quote_char = nil end
    elseif char == " " or char == "\t" then
      word_start = true
    elseif char == "#" and word_start then
      return index
    else
      word_start = false
      if char == "\\" then index = index + 1
      elseif char == "'" or char == '"' then quote_char = char end
    end
    index = index + 1
  end
  return #text + 1
end

-- directives._words without quoting: words split at blanks, a trailing comment removed
local function words(text)
  local before = string.sub(text, 1, comment_start(text) - 1)
  if string.find(before, "['\"\\]") then error(UNDECIDED) end
  local found = {}
  for word in string.gmatch(before, "[^ \t]+") do table.insert(found, word) end
  return found
end

-- config.slurm_time_seconds
local function slurm_time_seconds(text)
  local function fits(field, most) return field == nil or #field <= most end
  local days, hours, minutes, seconds = string.match(text, "^(%d+)%-(%d+):(%d+):(%d+)$")
  if not days then days, hours, minutes = string.match(text, "^(%d+)%-(%d+):(%d+)$") end
  if not days then days, hours = string.match(text, "^(%d+)%-(%d+)$") end
  local kind = days and "days"
  if not kind then
    hours, minutes, seconds = string.match(text, "^(%d+):(%d+):(%d+)$")
    kind = hours and "hours"
  end
  if not kind then
    minutes, seconds = string.match(text, "^(%d+):(%d+)$")
    if not minutes then minutes = string.match(text, "^(%d+)$") end
    kind = minutes and "minutes"
  end
  if not kind then return nil end
  local leading = ({ days = days, hours = hours, minutes = minutes })[kind]
  if not (#leading <= 9 and fits(kind == "days" and hours or nil, 2) and
          fits(kind ~= "minutes" and minutes or nil, 2) and fits(seconds, 2)) then
    return nil
  end
  local d, h = tonumber(days or 0), tonumber(hours or 0)
  local m, s = tonumber(minutes or 0), tonumber(seconds or 0)
  if s > 59 or (kind == "days" and h > 23) or (kind ~= "minutes" and m > 59) then return nil end
  return ((d * 24 + h) * 60 + m) * 60 + s
end

-- directives._set_option, for the options judged here
local function set_option(opts, name, value, directive, number)
  local function bad(expected)
    refuse(number, directive .. ": -" .. name .. " expects " .. expected .. ", got '" ..
           tostring(value) .. "'")
  end
  if LAYOUT[name] then error(UNDECIDED) end
  if name == "retry" then
    if not string.match(value, "^%d%d?%d?$") or tonumber(value) > MAX_RETRIES then
      bad("a whole number of retries from 0 to " .. MAX_RETRIES)
    end
  elseif name == "retry-delay" then
    local whole, part = string.match(value, "^(%d+)%.?(%d*)$")
    if not whole or #whole > 5 or #part > 6 or (part == "" and string.find(value, ".", 1, true))
        or tonumber(value) > MAX_RETRY_DELAY then
      bad("seconds from 0 to " .. MAX_RETRY_DELAY)
    end
  elseif name == "walltime" then
    local seconds = slurm_time_seconds(value)
    if not seconds or seconds <= 0 or seconds > MAX_WALLTIME then
      bad(string.format("a time above zero and at most %d days, like 30, 01:30:00 or " ..
                        "1-00:00:00", MAX_WALLTIME / 86400))
    end
  elseif name == "priority" then
    local digits = string.match(value, "^%-?(%d+)$")
    if not digits or #digits > 10 or tonumber(value) < PRIORITY_LOW or
        tonumber(value) > PRIORITY_HIGH then
      bad(string.format("an integer from %d to %.0f", PRIORITY_LOW, PRIORITY_HIGH))
    end
  elseif name == "qos" or name == "account" or name == "name" then
    if not string.match(value, "^[A-Za-z0-9._:+@/=][A-Za-z0-9._:+@/=%-]*$") or #value > 128 then
      bad("letters, digits and . _ : + @ / = - only, not starting with -")
    end
  elseif name == "parallel" then
    opts.parallel = true
  elseif name == "dependency" then
    if value ~= "afterok" and value ~= "afterany" then bad("afterok or afterany") end
  elseif name == "start" then
    if value ~= "jit" and value ~= "now" then bad("jit or now") end
  elseif name == "when" then
    if value ~= "close" and value ~= "end" then bad("close or end") end
  elseif name == "wait-for-source" then
    local number_part, unit = string.match(value, "^(%d+)([smh]?)$")
    local seconds = number_part and #number_part <= 7 and
                    tonumber(number_part) * ({ [""] = 1, s = 1, m = 60, h = 3600 })[unit]
    if not seconds or seconds > MAX_SOURCE_WAIT then
      bad(string.format("a duration from 0 to %d days: seconds, or digits and s, m or h " ..
                        "(600, 90s, 10m, 2h)", MAX_SOURCE_WAIT / 86400))
    end
  elseif name == "input" then
    local where = location(value)
    if not where or not is_local(where) then bad("a path on this cluster") end
    if where.relative then error(UNDECIDED) end
    confine(where.path, "input", directive, number)
  end
end

-- directives._parse_options
local function options(tokens, stage, number, opts)
  local directive = DIRECTIVE[stage]
  local index = 1
  while index <= #tokens do
    local token = tokens[index]
    if not starts(token, "-") or token == "-" or token == "--" then
      refuse(number, directive .. ": expected an option, got '" .. token .. "' (an option " ..
             "line holds only options; put the command on its own line)")
    end
    local name, inline = string.match((string.gsub(token, "^%-+", "")), "^([^=]*)=?(.*)$")
    if name == "l" then error(UNDECIDED) end
    name = ALIASES[name] or name
    if not KNOWN[name] then
      refuse(number, directive .. ": unknown option '" .. token .. "' (known: -" ..
             table.concat(OPTIONS, ", -") .. ")")
    end
    if opts.seen[name] and name ~= "input" then
      refuse(number, directive .. ": option -" .. name .. " given twice")
    end
    opts.seen[name] = true
    local value
    if not NO_VALUE[name] then
      if inline ~= "" then
        value = inline
      elseif index < #tokens then
        index = index + 1
        value = tokens[index]
      else
        refuse(number, directive .. ": option -" .. name .. " needs a value")
      end
    end
    set_option(opts, name, value, directive, number)
    opts.lines[name] = number
    index = index + 1
  end
end

-- directives._COMMAND_NAME_RE: a literal command starts with the name of a command
local function command_name(text)
  local name = string.match(text, "^[A-Za-z0-9_][A-Za-z0-9._+%-]*")
  if not name then return false end
  local after = string.sub(text, #name + 1, #name + 1)
  return after == "" or string.find(after, "^[ \t;&|]") ~= nil
end

-- directives._parse_stage_line
local function stage_line(body, word, number, state)
  local stage = STAGE_OF[word]
  local directive = DIRECTIVE[stage]
  local text = trim(string.match(body, "^[ \t]*#" .. word .. "(.*)$"))
  local list = words(text)
  if #list == 0 then refuse(number, directive .. " with nothing after it") end
  if starts(list[1], "-") then return options(list, stage, number, state.options[stage]) end
  if names_data(list[1]) or (stage == STAGE_OUT and #list == 2 and
                             string.find(list[2], "://", 1, true)) then
    if #list ~= 2 then
      refuse(number, string.format("%s: a transfer is exactly SOURCE DESTINATION, got %d " ..
             "word%s after quoting (quote a name holding a space; a literal command starts " ..
             "with its command name)", directive, #list, #list ~= 1 and "s" or ""))
    end
    local step = transfer(list[1], list[2], stage, number, false, directive)
    step.stage, step.line, step.directive = stage, number, directive
    table.insert(state.steps, step)
    return
  end
  if not command_name(text) then
    refuse(number, directive .. ": expected SOURCE DESTINATION or a command starting with " ..
           "its name (hsi, globus-url-copy...), got '" .. list[1] .. "'")
  end
  table.insert(state.steps, { stage = stage, line = number })
end

-- directives._parse_datawarp
local function datawarp_line(body, word, number, state)
  local stage = STAGE_OF[word]
  local directive = "#DW " .. word
  local fields = {}
  for _, token in ipairs(words(string.match(body, "^[ \t]*#DW[ \t]+" .. word .. "(.*)$"))) do
    local key, sep, value = string.match(token, "^([^=]*)(=?)(.*)$")
    if sep == "" or value == "" then
      refuse(number, "#DW: expected key=value, got '" .. token .. "'")
    end
    if key ~= "source" and key ~= "destination" and key ~= "type" then
      refuse(number, "#DW: unknown key '" .. key .. "' (known: source, destination, type)")
    end
    if fields[key] then refuse(number, "#DW: '" .. key .. "' given twice") end
    fields[key] = value
  end
  for _, key in ipairs({ "source", "destination", "type" }) do
    if not fields[key] then refuse(number, directive .. ": missing " .. key .. "=") end
  end
  if fields.type ~= "file" and fields.type ~= "directory" then
    refuse(number, "#DW: type must be file or directory, got '" .. fields.type .. "'")
  end
  local step = transfer(fields.source, fields.destination, stage, number,
                        fields.type == "directory", directive)
  step.stage, step.line, step.directive = stage, number, directive
  table.insert(state.steps, step)
end

-- The directive a line starts (directives._DIRECTIVE_RE, _DW_RE): STAGEIN, STAGEOUT, stage_in,
-- stage_out, and whether it is #DW; nil for another line.
local function directive_of(line)
  if not string.find(line, "^[ \t]*#[SD]") then return nil end
  for _, form in ipairs({ "#STAGEIN", "#STAGEOUT", "#DW[ \t]+stage_in", "#DW[ \t]+stage_out" }) do
    local after = string.match(line, "^[ \t]*" .. form .. "(.?)")
    if after and (after == "" or after == " " or after == "\t") then
      local word = string.match(form, "[%a_]+$")
      return word, starts(form, "#DW")
    end
  end
  return nil
end

-- directives._join_continuations: the directive and its backslash continuations, and the
-- number of the line after them
local function join_continuations(lines, index, word)
  local parts = { lines[index] }
  index = index + 1
  while true do
    local last = rstrip(parts[#parts])
    if string.sub(last, -1) ~= "\\" or string.sub(last, -2) == "\\\\" then break end
    if index > #lines then
      refuse(#lines, "a trailing backslash continues past the end of the script")
    end
    parts[#parts] = rstrip(string.sub(last, 1, -2))
    local next_line = lines[index]
    local rest = word and string.match(next_line, "^[ \t]*#" .. word .. "(.*)$")
    if rest and (rest == "" or string.find(rest, "^[ \t]")) then next_line = rest end
    table.insert(parts, trim(next_line))
    index = index + 1
  end
  return table.concat(parts, " "), index
end

-- directives._check_destinations: no two transfers of a stage write one destination, nor one
-- inside the other's folder (a tree of path prefixes per stage and place, as the planner's)
local OVERLAP = { inside = "lies inside %s, the destination of line %d",
                  also = "is also the destination of line %d",
                  holds = "holds %s, the destination of line %d" }

local function check_destinations(steps)
  local trees = {}
  for _, step in ipairs(steps) do
    if step.source then
      local dst, where_key = step.destination, ""
      local place, where
      if is_local(dst) then
        place = landing(step)
        where = place
      else
        place = normpath(rstrip(dst.path, "/") ~= "" and rstrip(dst.path, "/") or "/")
        if string.sub(dst.path, -1) == "/" and not step.recursive then
          place = join(place, basename(rstrip(step.source.path, "/")))
        end
        where_key = dst.scheme .. "://" .. string.lower(dst.host)
        where = dst.scheme .. "://" .. dst.host .. place
      end
      local normal = normpath(place)
      local key = step.stage .. " " .. where_key .. " " .. tostring(starts(normal, "/"))
      trees[key] = trees[key] or { own = {}, below = {} }
      local tree, node, clash = trees[key], "", nil
      local parts = {}
      for part in string.gmatch(normal, "[^/]+") do
        if part ~= "." then table.insert(parts, part) end
      end
      for _, part in ipairs(parts) do
        if tree.own[node] then clash = { "inside", tree.own[node] } break end
        node = node .. "/" .. part
      end
      if not clash and tree.own[node] then clash = { "also", tree.own[node] } end
      if not clash and tree.below[node] then clash = { "holds", tree.below[node] } end
      if clash then
        local other = clash[2]
        local how = clash[1] == "also" and string.format(OVERLAP.also, other.step.line) or
                    string.format(OVERLAP[clash[1]], other.where, other.step.line)
        refuse(step.line, step.directive .. ": the destination " .. where .. " " .. how ..
               " (one transfer would overwrite the other)")
      end
      local entry = { where = where, step = step }
      tree.own[node] = entry
      local above = ""
      for _, part in ipairs(parts) do
        tree.below[above] = tree.below[above] or entry
        above = above .. "/" .. part
      end
    end
  end
end

-- What parse_script checks once every line is read.
local function check_stages(lines, compute, state)
  if not compute then
    refuse(#lines > 0 and #lines or nil, "the script has no commands for the compute job")
  end
  for _, stage in ipairs({ STAGE_IN, STAGE_OUT }) do
    local opts = state.options[stage]
    for _, rule in ipairs({ { "dependency", STAGE_OUT }, { "when", STAGE_OUT },
                            { "start", STAGE_IN }, { "wait-for-source", STAGE_IN } }) do
      if opts.lines[rule[1]] and stage ~= rule[2] then
        refuse(opts.lines[rule[1]], "-" .. rule[1] .. " applies to " .. DIRECTIVE[rule[2]] ..
               " only")
      end
    end
    if opts.parallel then
      local count = 0
      for _, step in ipairs(state.steps) do
        if step.stage == stage then
          count = count + 1
          if count > MAX_PARALLEL_JOBS then
            refuse(step.line, DIRECTIVE[stage] .. " -parallel: at most " .. MAX_PARALLEL_JOBS ..
                   " transfer lines, one data job each (join the rest into a folder " ..
                   "transfer, or drop -parallel)")
          end
        end
      end
    end
  end
  check_destinations(state.steps)
end

local function split_lines(text)
  local lines, start = {}, 1
  while true do
    local stop = string.find(text, "\n", start, true)
    table.insert(lines, string.sub(text, start, (stop or 0) - 1))
    if not stop then break end
    start = stop + 1
  end
  if lines[#lines] == "" then table.remove(lines) end
  return lines
end

-- directives.parse_script, on plain ASCII text: refuses (error) or returns
local function check_lines(text)
  local lines = split_lines(text)
  local state = { steps = {}, options = { [STAGE_IN] = { seen = {}, lines = {} },
                                          [STAGE_OUT] = { seen = {}, lines = {} } } }
  local compute, index, judged = false, 1, 0
  while index <= #lines do
    local line = lines[index]
    local word, datawarp = directive_of(line)
    if word then
      judged = judged + 1
      if judged > MAX_DIRECTIVE_LINES then error(UNDECIDED) end
      local body, after = join_continuations(lines, index, not datawarp and word or nil)
      if datawarp then datawarp_line(body, word, index, state)
      else stage_line(body, word, index, state) end
      index = after
    else
      if string.find(line, "^[ \t]*#PBS") and (string.find(line, "stagein", 1, true) or
                                               string.find(line, "stageout", 1, true)) then
        error(UNDECIDED)
      end
      compute = compute or string.find(line, "^[ \t]*[^ \t#]") ~= nil
      index = index + 1
    end
  end
  check_stages(lines, compute, state)
end

-- Why the planner refuses the script text Slurm saved under the scratch root scratch_root
-- ("scratchkeeper: script:LINE: reason"), or nil when this check finds nothing or cannot judge
-- it. A failure of the check itself is raised (burst_buffer.lua logs it and refuses nothing).
return function(text, scratch_root)
  ROOT = normpath("/" .. (string.gsub(normpath(scratch_root), "^/+", "")))
  ROOT_SLASH = rstrip(ROOT, "/") .. "/"
  if #text > MAX_CHECKED_BYTES then return nil end
  if string.sub(text, -1) == "\0" then text = string.sub(text, 1, -2) end
  -- a NUL, or a byte that may not be UTF-8: the planner's first words may be about it
  if string.find(text, "\0", 1, true) or string.find(text, "[\128-\255]") then return nil end
  local found = string.find(text, "\r", 1, true)
  if found then
    local _, breaks = string.gsub(string.sub(text, 1, found - 1), "\n", "")
    return string.format("scratchkeeper: script:%d: the script contains a carriage return " ..
                         "(DOS line breaks? convert with dos2unix)", breaks + 1)
  end
  -- other control characters are blanks to Python, not to Lua
  if string.find(text, "[^\t\n\32-\126]") then return nil end
  local ok, err = pcall(check_lines, text)
  if ok or err == UNDECIDED then return nil end
  if type(err) ~= "table" or not err.message then error(err, 0) end
  if err.line then return string.format("scratchkeeper: script:%d: %s", err.line, err.message) end
  return "scratchkeeper: script: " .. err.message
end
