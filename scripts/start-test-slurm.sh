#!/usr/bin/env bash
# Start a private single-node Slurm (munged + slurmctld + slurmd) for integration tests.
#
#   scripts/start-test-slurm.sh [STATE_DIR]      (default: $AGENTROLL_SLURM_STATE or
#                                                 /tmp/agentroll-test-slurm)
#
# Everything lives under STATE_DIR: a fresh munge key and socket, slurm.conf, spool, state,
# logs and pid files; nothing in /etc is changed and no system service is started. Clients
# find this cluster through SLURM_CONF=STATE_DIR/slurm.conf (printed at the end, and
# written to STATE_DIR/env). Idempotent: a running cluster is left as it is. Needs root
# (slurmd runs jobs as their submitter); installs Debian's slurm-wlm and munge if missing.
# Stop it with scripts/stop-test-slurm.sh (kills by the recorded pid files only).
set -euo pipefail

STATE="${1:-${AGENTROLL_SLURM_STATE:-/tmp/agentroll-test-slurm}}"
CTLD_PORT="${AGENTROLL_SLURMCTLD_PORT:-16817}"
SLURMD_PORT="${AGENTROLL_SLURMD_PORT:-16818}"
READY_TIMEOUT_S="${AGENTROLL_SLURM_READY_TIMEOUT_S:-60}"

die() { echo "start-test-slurm: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (slurmd runs jobs as their submitting user)"

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null || die "slurm-wlm/munge missing and apt-get unavailable"
    echo "start-test-slurm: installing slurm-wlm and munge (Debian packages)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # policy-rc.d keeps the packages' own services from starting: we run private daemons.
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

mkdir -p "$STATE"
STATE="$(cd "$STATE" && pwd)"
CONF="$STATE/slurm.conf"
export SLURM_CONF="$CONF"

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

node_state() { sinfo -h -N -o '%T' 2>/dev/null | head -n1 || true; }

if alive "$STATE/munged.pid" && alive "$STATE/slurmctld.pid" && alive "$STATE/slurmd.pid" \
    && [[ "$(node_state)" =~ ^(idle|mixed|allocated) ]]; then
    echo "SLURM_CONF=$CONF"
    exit 0
fi

# A half-started earlier run: stop what it left (by its pid files) and start clean.
"$(dirname "$0")/stop-test-slurm.sh" "$STATE" >/dev/null 2>&1 || true

NODE="$(hostname -s)"
CPUS="$(nproc)"
MEM_MB="$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 ))"
mkdir -p "$STATE/munge" "$STATE/ctld" "$STATE/spool" "$STATE/log"
chmod 0700 "$STATE/munge"

# munge: our own key and socket, never the system's.
[[ -s "$STATE/munge/munge.key" ]] || {
    dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
    chmod 0600 "$STATE/munge/munge.key"
}
SOCKET="$STATE/munge/munge.socket"
(( ${#SOCKET} < 100 )) || die "munge socket path too long for a Unix socket: $SOCKET"

cat > "$CONF" <<CONF
# Written by scripts/start-test-slurm.sh: a private one-node cluster for tests.
ClusterName=agentrolltest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCKET
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
KillWait=5
InactiveLimit=0
MinJobAge=30
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=test Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF

munged --force --socket="$SOCKET" --key-file="$STATE/munge/munge.key" \
    --pid-file="$STATE/munged.pid" --log-file="$STATE/log/munged.log" \
    --seed-file="$STATE/munge/munged.seed"
slurmctld -f "$CONF" -i      # -i: ignore state files of an earlier run
slurmd -f "$CONF" -N "$NODE"

deadline=$(( SECONDS + READY_TIMEOUT_S ))
until [[ "$(node_state)" =~ ^(idle|mixed) ]]; do
    if (( SECONDS > deadline )); then
        echo "--- slurmctld.log" >&2; tail -n 20 "$STATE/log/slurmctld.log" >&2 || true
        echo "--- slurmd.log" >&2; tail -n 20 "$STATE/log/slurmd.log" >&2 || true
        die "node not idle after ${READY_TIMEOUT_S}s (state: '$(node_state)')"
    fi
    sleep 0.2
done
echo "SLURM_CONF=$CONF" | tee "$STATE/env"
