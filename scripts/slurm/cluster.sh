#!/usr/bin/env bash
# A one-node SLURM cluster on this machine (munge + slurmctld + slurmd, localhost only), for the
# SLURM acceptance test (`make test-slurm`). Everything it writes lives in $ABLATE_SLURM_DIR
# (default /tmp/ablate-slurm): its own slurm.conf (clients find it through SLURM_CONF), the
# controller state, logs and pid files. /etc/slurm is never touched, so a machine that already
# is a SLURM node keeps its configuration.
#
#   scripts/slurm/cluster.sh can-install  exit 0 if a cluster can run here: root, and the daemons
#                                         installed or apt-get here; else say why not, exit 3
#   scripts/slurm/cluster.sh install      apt-get install slurmctld slurmd slurm-client munge
#   scripts/slurm/cluster.sh start        start munged, slurmctld, slurmd; wait for an idle node
#   scripts/slurm/cluster.sh stop         stop what `start` started (by pid file)
#   scripts/slurm/cluster.sh env          print `export SLURM_CONF=...` for the clients
#
# Exit 3 means "no cluster can run here" (not root, no packages); any other failure is a bug.
set -euo pipefail

DIR=${ABLATE_SLURM_DIR:-/tmp/ablate-slurm}
CONF=$DIR/slurm.conf
PACKAGES=(slurmctld slurmd slurm-client munge)
HOST=$(hostname -s)
export SLURM_CONF=$CONF

say() { echo "slurm-cluster: $*" >&2; }

have_daemons() {
    command -v slurmctld && command -v slurmd && command -v sbatch && command -v munged
} >/dev/null 2>&1

can_install() {
    if [[ $(id -u) != 0 ]]; then
        say "a SLURM cluster for the tests is started as root (slurmctld, slurmd, munged)"
        return 3
    fi
    have_daemons && return 0
    if ! command -v apt-get >/dev/null; then
        say "SLURM is not installed and this machine has no apt-get"
        return 3
    fi
}

install() {
    can_install || return $?
    have_daemons && return 0
    say "installing ${PACKAGES[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    mkdir -p "$DIR"
    local apt=(timeout 900 apt-get -q -o Acquire::Retries=1 -o Acquire::http::Timeout=30)
    if ! { "${apt[@]}" update && "${apt[@]}" install -y "${PACKAGES[@]}"; } \
        >"$DIR/apt.log" 2>&1 </dev/null; then
        tail -n 5 "$DIR/apt.log" >&2
        say "apt-get could not install ${PACKAGES[*]} (log: $DIR/apt.log)"
        return 3
    fi
}

alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

write_conf() {
    local cpus mem_mb
    cpus=$(nproc)
    mem_mb=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 8 / 10))
    cat >"$CONF" <<EOF
# written by scripts/slurm/cluster.sh: a one-node cluster on localhost for the tests
ClusterName=ablatetest
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
# no slurmdbd: sacct fails, as on many small clusters
AccountingStorageType=accounting_storage/none
# finished jobs stay visible to squeue for 5 minutes
MinJobAge=300
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
    if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
        return 0 # a munged already answers (ours or the machine's)
    fi
    local key=/etc/munge/munge.key
    if [[ ! -s $key ]]; then
        dd if=/dev/urandom of=$key bs=1024 count=1 status=none
    fi
    chown munge:munge $key /etc/munge
    chmod 400 $key
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge
    chmod 755 /run/munge
    runuser -u munge -- /usr/sbin/munged
    touch "$DIR/munged.ours"
    for _ in $(seq 50); do
        munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    say "munged does not answer"
    return 1
}

start() {
    install || return $?
    mkdir -p "$DIR/state" "$DIR/spool"
    if alive "$DIR/slurmctld.pid" || alive "$DIR/slurmd.pid"; then
        say "already running ($DIR); stop it first"
        return 1
    fi
    write_conf
    start_munge
    # -c: a clean controller state (no jobs left from an earlier start)
    slurmctld -c -f "$CONF"
    slurmd -f "$CONF"
    local state=""
    for _ in $(seq 120); do
        state=$(sinfo -h -n "$HOST" -o %T 2>/dev/null || true)
        if [[ $state == idle ]]; then
            say "node $HOST idle (SLURM_CONF=$CONF)"
            return 0
        fi
        sleep 0.5
    done
    say "node $HOST is not idle after 60 s (state: ${state:-no answer}); logs:"
    tail -n 20 "$DIR/slurmctld.log" "$DIR/slurmd.log" >&2 || true
    stop
    return 1
}

stop_pid() {
    local file=$1 pid
    alive "$file" || return 0
    pid=$(cat "$file")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.2
    done
    kill -9 "$pid" 2>/dev/null || true
}

stop() {
    [[ -d $DIR ]] || return 0
    if alive "$DIR/slurmctld.pid"; then
        scancel --user="$(id -un)" 2>/dev/null || true
    fi
    stop_pid "$DIR/slurmd.pid"
    stop_pid "$DIR/slurmctld.pid"
    if [[ -e $DIR/munged.ours ]]; then
        stop_pid /run/munge/munged.pid
        rm -f "$DIR/munged.ours"
    fi
    say "stopped"
}

case "${1:-}" in
can-install) can_install ;;
install) install ;;
start) start ;;
stop) stop ;;
env) echo "export SLURM_CONF=$CONF" ;;
*)
    echo "usage: $0 can-install|install|start|stop|env" >&2
    exit 2
    ;;
esac
