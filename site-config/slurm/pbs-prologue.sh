#!/bin/sh
# PBS/Torque prologue for scratchkeeper: verify (and recover) the job's staged inputs.
# pbs_mom runs it as root before the job with the job id as first argument
# (install as $PBS_HOME/mom_priv/prologue, mode 0500, owner root; it sits beside the Slurm
# example because site-config/slurm/ holds the scheduler hooks).
#
# Exit 0: inputs whole. Exit 1: an input cannot be recovered; Torque aborts the job (prologue
# exit 1 = abort; values above 1 would requeue it, which cannot bring a lost source back) and
# the reason goes to the job's output, the MOM log and syslog.
# The prologue runs on the mother superior: with head.address set in site.toml it asks the
# head's recoveryd over TCP with a MUNGE credential (docs/topology.rst), as root; on the head
# itself (no head.address) through recoveryd's socket, or in-process when that is not there.
# A head that does not answer within head.timeout fails the prologue with that line: Torque
# aborts the job rather than run it on inputs nobody checked.
set -u
SCRATCHKEEPER=${SCRATCHKEEPER:-/usr/local/bin/scratchkeeper}
export SCRATCHKEEPER_CONFIG="${SCRATCHKEEPER_CONFIG:-/etc/scratchkeeper/site.toml}"
job_id=$1

if ! reason=$("$SCRATCHKEEPER" recovery hook "$job_id" 2>&1); then
    logger -t scratchkeeper-prologue "job $job_id: $reason"
    echo "$reason"
    exit 1
fi
exit 0
