#!/bin/sh
# PrologSlurmctld for scratchkeeper: verify (and recover) the job's staged inputs before it
# starts. slurmctld runs it on the head node as SlurmUser with SLURM_JOB_ID set.
#
# Exit 0: every staged input is whole (patched if needed). Non-zero: an input cannot be
# recovered; slurmctld then requeues a batch job (an interactive one is cancelled) and the
# reason line below goes to syslog. Lines for slurm.conf: see slurm.conf.recovery.
# SlurmUser must be root or recovery.hook_user (default "slurm") for recoveryd to accept it.
#
# Waiting: recovery.wait_timeout (site.toml) bounds the wait for patches; keep it below
# PrologEpilogTimeout.
set -u
SCRATCHKEEPER=${SCRATCHKEEPER:-/usr/local/bin/scratchkeeper}
export SCRATCHKEEPER_CONFIG="${SCRATCHKEEPER_CONFIG:-/etc/scratchkeeper/site.toml}"

if ! reason=$("$SCRATCHKEEPER" recovery hook "$SLURM_JOB_ID" 2>&1); then
    logger -t scratchkeeper-prolog "job $SLURM_JOB_ID: $reason"
    echo "$reason" >&2
    exit 1
fi
exit 0
