#!/bin/bash
#PBS -N sim.stage-in
#PBS -l walltime=01:00:00
#PBS -l nodes=1
#PBS -l qos=normal
# scratchkeeper data job: stage-in of chain skgolden0001
# planned from scripts/structured.sbatch
set -u
SK_PERMANENT='(No such file or directory)|(Permission denied)|(Operation not permitted)|(Is a directory)|(Not a directory)|(File not found)|(does not exist)|(returned error: 4(0[0-79]|[13-9][0-9]|2[0-8]))|((^|[^0-9])55[03]([^0-9]|$))|((^|[^0-9])530([^0-9]|$))|(unknown URI scheme)'
SK_LAST_ERROR=""
SK_FAILED=0

sk_log() { printf '%s scratchkeeper: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }

# sk_retry ATTEMPTS DELAY BACKOFF MAX_DELAY LINE -- COMMAND...
# Runs COMMAND up to ATTEMPTS times with exponential backoff; an error matching SK_PERMANENT
# (no such file, permission denied, HTTP 404...) is not retried.
sk_retry() {
  local attempts=$1 delay=$2 backoff=$3 max_delay=$4 line=$5 try=1 rc errfile
  shift 6
  errfile=$(mktemp)
  while :; do
    sk_log "line $line: attempt $try of $attempts"
    timeout 3600 "$@" 2>"$errfile"
    rc=$?
    cat "$errfile" >&2
    if [ "$rc" -eq 0 ]; then
      rm -f "$errfile"
      return 0
    fi
    SK_LAST_ERROR="exit $rc: $(tail -n 4 "$errfile" | tr -s '\n\t' '  ' | cut -c1-400)"
    if grep -Eq -- "$SK_PERMANENT" "$errfile"; then
      sk_log "line $line: permanent error, not retried: $SK_LAST_ERROR"
      rm -f "$errfile"
      return 1
    fi
    if [ "$try" -ge "$attempts" ]; then
      sk_log "line $line: giving up after $try attempts: $SK_LAST_ERROR"
      rm -f "$errfile"
      return 1
    fi
    sk_log "line $line: failed (exit $rc), retrying in ${delay}s"
    sleep "$delay"
    delay=$(awk -v d="$delay" -v b="$backoff" -v m="$max_delay" 'BEGIN { d *= b; if (d > m) d = m; printf "%g", d }')
    try=$((try + 1))
  done
}

sk_fail() {
  scratchkeeper stage fail --chain skgolden0001 --job stage-in --line "$1" --reason "$SK_LAST_ERROR" || sk_log "could not record the failure"
  exit 1
}

cd /home/alice/work || { SK_LAST_ERROR="cannot enter "/home/alice/work; sk_fail 0; }

# line 6: gsiftp://data.example.org:2811/archive/run42/input.h5 -> /scratch/alice/run42/input.h5
mkdir -p -- /scratch/alice/run42
sk_retry 4 1.0 2.0 300.0 6 -- globus-url-copy -verify-checksum gsiftp://data.example.org:2811/archive/run42/input.h5 file:///scratch/alice/run42/input.h5 || sk_fail 6

# line 7: https://data.example.org/tables/eos.dat -> /scratch/alice/run42/
mkdir -p -- /scratch/alice/run42
sk_retry 4 1.0 2.0 300.0 7 -- curl --disable --fail --silent --show-error --location --globoff --create-dirs --output /scratch/alice/run42/eos.dat --url https://data.example.org/tables/eos.dat || sk_fail 7

# line 8: alice@login.example.org:/home/alice/params.nml -> /scratch/alice/run42/params.nml
mkdir -p -- /scratch/alice/run42
sk_retry 4 1.0 2.0 300.0 8 -- scp -B -q -- alice@login.example.org:/home/alice/params.nml /scratch/alice/run42/params.nml || sk_fail 8

# line 9: /home/alice/mesh.bin -> /scratch/alice/run42/mesh.bin
mkdir -p -- /scratch/alice/run42
sk_retry 4 1.0 2.0 300.0 9 -- cp -p -- /home/alice/mesh.bin /scratch/alice/run42/mesh.bin || sk_fail 9

scratchkeeper stage commit --chain skgolden0001 --job stage-in || { SK_LAST_ERROR="recording the staged files failed"; sk_fail 0; }
