#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for running examples/slurm/build.sh in the tests
# (tests/slurm.rs) and on CI:
#
#   scripts/slurm-local.sh up     # install (apt, when missing), configure, start; wait for idle
#   scripts/slurm-local.sh down   # stop exactly the daemons `up` started (by their pid files)
#
# `up` installs Debian's slurm-wlm and munge where they are missing (needs root and apt-get),
# writes a munge key and a slurm.conf describing this machine (CPUs from nproc, RealMemory a bit
# under MemTotal, one partition "local"), and runs munged, slurmctld and slurmd directly (no
# systemd, no cgroups: proctrack/linuxproc, task/none), everything under
# ${SLURM_LOCAL_DIR:-/tmp/freshstack-slurm}. It is idempotent: when the daemons of a previous `up`
# are still alive and the node answers, it does nothing. `env` prints the variables a client
# needs (SLURM_CONF), for `eval "$(scripts/slurm-local.sh env)"`.
set -euo pipefail

dir=${SLURM_LOCAL_DIR:-/tmp/freshstack-slurm}
conf="$dir/etc/slurm.conf"
node=$(hostname -s 2>/dev/null || hostname)
export SLURM_CONF="$conf"

die() {
    echo "slurm-local: $*" >&2
    echo "slurm-local: logs are in $dir/log/ (munged.log, slurmctld.log, slurmd.log)" >&2
    exit 1
}

# alive NAME: the daemon NAME started by us (pid file under $dir/run) is running.
alive() {
    local pidfile="$dir/run/$1.pid"
    [[ -s "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v sbatch >/dev/null && command -v munged >/dev/null; then
        return
    fi
    [[ $(id -u) == 0 ]] || die "slurm-wlm/munge are not installed and we are not root to install them"
    command -v apt-get >/dev/null || die "slurm-wlm/munge are not installed and there is no apt-get"
    export DEBIAN_FRONTEND=noninteractive
    local packages=(slurm-wlm munge)
    # The Debian packages start their daemons through invoke-rc.d where there is an init system;
    # policy-rc.d 101 forbids that: this script starts them itself, with its own configuration.
    local policy=/usr/sbin/policy-rc.d created_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
    fi
    local ok=0
    apt-get install -y -qq --no-install-recommends "${packages[@]}" >"$dir/log/apt.log" 2>&1 \
        || { apt-get update -qq >>"$dir/log/apt.log" 2>&1 \
            && apt-get install -y -qq --no-install-recommends "${packages[@]}" >>"$dir/log/apt.log" 2>&1; } \
        || ok=1
    [[ $created_policy == 1 ]] && rm -f "$policy"
    [[ $ok == 0 ]] || die "apt-get install ${packages[*]} failed (see $dir/log/apt.log)"
}

write_config() {
    mkdir -p "$dir/etc" "$dir/munge" "$dir/spool/ctld" "$dir/spool/d"
    if [[ ! -s "$dir/munge/munge.key" ]]; then
        # 1024 random bytes, readable by munged's user only, as `mungekey` would write.
        head -c 1024 /dev/urandom >"$dir/munge/munge.key"
    fi
    chmod 700 "$dir/munge"
    chmod 400 "$dir/munge/munge.key"
    local cpus mem_kib mem_mib
    cpus=$(nproc)
    mem_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
    # RealMemory must not exceed what slurmd measures, or the node is drained: 90% of MemTotal.
    mem_mib=$((mem_kib / 1024 * 9 / 10))
    cat >"$conf.tmp" <<EOF
# Written by scripts/slurm-local.sh: a one-node cluster on $node.
ClusterName=freshstack-local
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# Our munged's socket, not the system one (every client and daemon reads this file).
AuthInfo=socket=$dir/run/munge.socket
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
ReturnToService=2
SlurmctldPort=${SLURM_LOCAL_CTLD_PORT:-16817}
SlurmdPort=${SLURM_LOCAL_D_PORT:-16818}
StateSaveLocation=$dir/spool/ctld
SlurmdSpoolDir=$dir/spool/d
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
# Finished jobs stay visible to scontrol for an hour (build.sh reads their exit codes there).
MinJobAge=3600
KillWait=5
InactiveLimit=0
SlurmdTimeout=60
NodeName=$node CPUs=$cpus RealMemory=$mem_mib State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
    mv "$conf.tmp" "$conf"
}

wait_idle() {
    local deadline=$((SECONDS + ${SLURM_LOCAL_TIMEOUT_S:-60})) state=""
    while ((SECONDS < deadline)); do
        state=$(sinfo -h -N -n "$node" -o '%T' 2>/dev/null | head -n1 || true)
        case "$state" in
            idle | mixed | allocated) return 0 ;;
            *drain* | *down*)
                # A node that came back from an earlier run can be marked down: resume it.
                scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true ;;
        esac
        sleep 0.5
    done
    die "node $node not idle after ${SLURM_LOCAL_TIMEOUT_S:-60} s (sinfo says '${state:-nothing}')"
}

up() {
    mkdir -p "$dir/log" "$dir/run"
    if alive munged && alive slurmctld && alive slurmd \
        && sinfo -h -N -n "$node" -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'; then
        echo "slurm-local: already up ($dir)"
        return
    fi
    install_packages
    write_config
    if ! alive munged; then
        munged --key-file="$dir/munge/munge.key" --socket="$dir/run/munge.socket" \
            --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
            --seed-file="$dir/munge/munge.seed" --force \
            || die "munged did not start"
    fi
    if ! alive slurmctld; then
        slurmctld -f "$conf" >>"$dir/log/slurmctld.log" 2>&1 || die "slurmctld did not start"
    fi
    if ! alive slurmd; then
        slurmd -f "$conf" >>"$dir/log/slurmd.log" 2>&1 || die "slurmd did not start"
    fi
    wait_idle
    echo "slurm-local: up: node $node, $(nproc) CPUs, partition local; SLURM_CONF=$conf; logs in $dir/log"
}

down() {
    local name pid
    for name in slurmd slurmctld munged; do
        if alive "$name"; then
            pid=$(cat "$dir/run/$name.pid")
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 50); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.2
            done
            if kill -0 "$pid" 2>/dev/null; then
                echo "slurm-local: $name ($pid) did not stop in 10 s; killing it" >&2
                kill -9 "$pid" 2>/dev/null || true
            fi
        fi
        rm -f "$dir/run/$name.pid"
    done
    echo "slurm-local: down ($dir)"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    env) echo "export SLURM_CONF=$conf" ;;
    *) echo "usage: scripts/slurm-local.sh up|down|env" >&2; exit 2 ;;
esac
