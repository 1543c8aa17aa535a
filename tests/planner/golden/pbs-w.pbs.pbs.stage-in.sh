#!/bin/bash
#PBS -N staged.stage-in
#PBS -l walltime=01:00:00
#PBS -l nodes=1
# scratchkeeper data job: stage-in of chain skgolden0001
# planned from scripts/pbs-w.pbs
set -u
SK_DENIED='(Permission denied)|(Operation not permitted)|(returned error: 40[13])|((^|[^0-9])530([^0-9]|$))'
SK_MISSING='(No such file or directory)|(File not found)|(does not exist)|(returned error: 4(04|10))'
SK_PERMANENT='(Permission denied)|(Operation not permitted)|(returned error: 40[13])|((^|[^0-9])530([^0-9]|$))|(No such file or directory)|(File not found)|(does not exist)|(returned error: 4(04|10))|(Is a directory)|(Not a directory)|(returned error: 4(0[0-79]|[13-9][0-9]|2[0-8]))|((^|[^0-9])55[03]([^0-9]|$))|(unknown URI scheme)'
# a source not found: retried like a transient failure (1: the stage wrote -retry N), and tried
# again for this many seconds before the retries count (#STAGEIN -wait-for-source)
SK_RETRY_MISSING=0
SK_SOURCE_WAIT=0
SK_LAST_ERROR=""
SK_FAILED=0
SK_SECONDS=""
# each transfer as this job timed it (--timing LINE:SECONDS), for the JIT prediction
SK_TIMINGS=()

sk_log() { printf '%s scratchkeeper: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }

# sk_clock: SK_CLOCK = centiseconds since boot (CLOCK_BOOTTIME: monotonic, a step of the wall
# clock does not move it; read by the shell, no process started), "" where it cannot be read
sk_clock() {
  local up=""
  { read -r up _ </proc/uptime; } 2>/dev/null || up=""
  if [[ $up =~ ^([0-9]+)\.([0-9]{2})$ ]]; then
    SK_CLOCK=$((10#${BASH_REMATCH[1]} * 100 + 10#${BASH_REMATCH[2]}))
  else
    SK_CLOCK=""
  fi
}

# sk_retry ATTEMPTS DELAY BACKOFF MAX_DELAY LINE -- COMMAND...
# Runs COMMAND up to ATTEMPTS times with exponential backoff. A refused permission (SK_DENIED)
# is never retried; a missing source (SK_MISSING) is tried again while SK_SOURCE_WAIT lasts
# (those tries do not count), then retried only with SK_RETRY_MISSING; another error a retry
# cannot fix (SK_PERMANENT) stops at once. SK_SECONDS: how long the attempt that succeeded ran.
sk_retry() {
  local attempts=$1 delay=$2 backoff=$3 max_delay=$4 line=$5 try=1 tries=0 rc errfile why left t0
  # bash's clock counts whole seconds: a wait lasts at least SK_SOURCE_WAIT, at most 1 s more
  local started=$SECONDS deadline=$((SECONDS + SK_SOURCE_WAIT + 1))
  shift 6
  delay=$(awk -v d="$delay" 'BEGIN { printf "%g", d }')
  errfile=$(mktemp)
  while :; do
    tries=$((tries + 1))
    sk_log "line $line: attempt $try of $attempts$([ "$tries" -gt "$try" ] && echo " (try $tries, waiting for the source)")"
    sk_clock; t0=$SK_CLOCK
    timeout 3600 "$@" 2>"$errfile"
    rc=$?
    sk_clock
    cat "$errfile" >&2
    if [ "$rc" -eq 0 ]; then
      SK_SECONDS=""
      if [ -n "$t0" ] && [ -n "$SK_CLOCK" ] && [ "$SK_CLOCK" -ge "$t0" ]; then
        printf -v SK_SECONDS '%d.%02d' $(((SK_CLOCK - t0) / 100)) $(((SK_CLOCK - t0) % 100))
        SK_TIMINGS+=(--timing "$line:$SK_SECONDS")
      fi
      rm -f "$errfile"
      return 0
    fi
    SK_LAST_ERROR="exit $rc: $(tail -n 4 "$errfile" | tr -s '\n\t' '  ' | cut -c1-400)"
    why=""
    if grep -Eq -- "$SK_DENIED" "$errfile"; then
      sk_log "line $line: permission refused, not retried: $SK_LAST_ERROR"
    elif grep -Eq -- "$SK_MISSING" "$errfile"; then
      left=$((deadline - SECONDS))
      if [ "$SK_SOURCE_WAIT" -gt 0 ] && [ "$left" -gt 0 ]; then
        # waiting for the source: the next try at the latest when the wait ends
        delay=$(awk -v d="$delay" -v l="$left" 'BEGIN { if (d > l) d = l; printf "%g", d }')
        sk_log "line $line: not there yet, waiting for the source, $((SECONDS - started)) s of ${SK_SOURCE_WAIT} s so far (try $tries), next in ${delay} s: $SK_LAST_ERROR"
        sleep "$delay"
        delay=$(awk -v d="$delay" -v b="$backoff" -v m="$max_delay" 'BEGIN { d *= b; if (d > m) d = m; if (d <= 0) d = 1; printf "%g", d }')
        continue
      elif [ "$SK_RETRY_MISSING" -eq 1 ]; then
        why="not there yet"
      elif [ "$SK_SOURCE_WAIT" -gt 0 ]; then
        sk_log "line $line: not there after waiting ${SK_SOURCE_WAIT} s (-wait-for-source), not retried: $SK_LAST_ERROR"
      else
        sk_log "line $line: not found, not retried (with -retry N or -wait-for-source a source that appears late is waited for): $SK_LAST_ERROR"
      fi
    elif grep -Eq -- "$SK_PERMANENT" "$errfile"; then
      sk_log "line $line: permanent error, not retried: $SK_LAST_ERROR"
    else
      why="failed (exit $rc)"
    fi
    if [ -z "$why" ]; then
      rm -f "$errfile"
      return 1
    fi
    if [ "$try" -ge "$attempts" ]; then
      sk_log "line $line: $why, giving up after $try attempts: $SK_LAST_ERROR"
      rm -f "$errfile"
      return 1
    fi
    sk_log "line $line: $why, attempt $try of $attempts, next in ${delay} s: $SK_LAST_ERROR"
    sleep "$delay"
    delay=$(awk -v d="$delay" -v b="$backoff" -v m="$max_delay" 'BEGIN { d *= b; if (d > m) d = m; printf "%g", d }')
    try=$((try + 1))
  done
}

sk_fail() {
  scratchkeeper stage fail --chain skgolden0001 --job stage-in --line "$1" --reason "$SK_LAST_ERROR" || sk_log "could not record the failure"
  # under Slurm, the reason also goes into this job's comment, which accounting keeps
  # (sacct -o Comment): one line, bounded; the owner may set their running job's comment
  if [ -n "${SLURM_JOB_ID:-}" ] && command -v scontrol >/dev/null 2>&1; then
    local comment="scratchkeeper: stage-in failed: line $1: ${SK_LAST_ERROR//[[:cntrl:]]/ }"
    scontrol update JobId="$SLURM_JOB_ID" Comment="${comment:0:250}" >/dev/null 2>&1 || true
  fi
  exit 1
}

cd /home/alice/work || { SK_LAST_ERROR="cannot enter "/home/alice/work; sk_fail 0; }

# line 3: fileserver:/export/bob/in.dat -> /scratch/bob/in.dat
mkdir -p -- /scratch/bob
sk_retry 3 5.0 2.0 300.0 3 -- scp -B -q -- fileserver:/export/bob/in.dat /scratch/bob/in.dat || sk_fail 3

# line 3: fileserver:/export/bob/b.dat -> /scratch/bob/b.dat
mkdir -p -- /scratch/bob
sk_retry 3 5.0 2.0 300.0 3 -- scp -B -q -- fileserver:/export/bob/b.dat /scratch/bob/b.dat || sk_fail 3

scratchkeeper stage commit --chain skgolden0001 --job stage-in ${SK_TIMINGS[@]+"${SK_TIMINGS[@]}"} || { SK_LAST_ERROR="recording the staged files failed"; sk_fail 0; }
