#!/usr/bin/env bash
# Stop the private Slurm started by scripts/start-test-slurm.sh [STATE_DIR].
#
# Cancels this cluster's jobs, then stops slurmd, slurmctld and munged by the pid files in
# STATE_DIR (TERM, then KILL after a grace period). Never kills anything by name. Pass
# --purge as a second argument to delete STATE_DIR afterwards.
set -uo pipefail

STATE="${1:-${AGENTROLL_SLURM_STATE:-/tmp/agentroll-test-slurm}}"
[[ -d "$STATE" ]] || exit 0
export SLURM_CONF="$STATE/slurm.conf"

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

if alive "$STATE/slurmctld.pid" && [[ -f "$SLURM_CONF" ]]; then
    scancel --full --quiet --partition=test 2>/dev/null
    for _ in $(seq 1 50); do   # let slurmd reap the job steps (at most ~10 s)
        [[ -z "$(squeue -h -o %i 2>/dev/null)" ]] && break
        sleep 0.2
    done
fi

stop() {   # stop <pidfile>: TERM, wait up to 10 s, then KILL
    local pidfile="$1" pid
    [[ -f "$pidfile" ]] || return 0
    pid="$(cat "$pidfile")"
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    fi
    rm -f "$pidfile"
}

stop "$STATE/slurmd.pid"
stop "$STATE/slurmctld.pid"
stop "$STATE/munged.pid"

if [[ "${2:-}" == "--purge" ]]; then
    rm -rf -- "$STATE"
fi
exit 0
