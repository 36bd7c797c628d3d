# Network-namespace "hosts" for MPI jobs on one machine; sourced by run_netns.sh (the test) and
# bench_netns.sh (all-reduce bandwidth over the links). POSIX sh.
#
#   NETNS_TAG=name; . netns_lib.sh     # installs the cleanup traps
#   netns_up HOSTS                     # namespaces h1..hN joined by veth links, or exit 77
#   netns_mpirun TIMEOUT ARGS...       # mpirun -np HOSTS -H h1,..,hN ARGS inside h1
#
# Namespaces are named ${P}h<k> (P = dt<pid of the script>); each host's eth0 has address
# $NET.<k>/24 on the private test subnet $SUBNET, which exists only inside these namespaces, so no
# traffic leaves them. 2 hosts: one veth pair h1:eth0 <-> h2:eth0; 3 hosts: each eth0 is a veth
# to a bridge in namespace ${P}sw (a switch). MTU 65535 (veth's maximum; 0.8 against 1.3 GB/s
# all-reduce at 1500, measured). Namespaces, links and any process left in them are
# removed on every exit path (EXIT/INT/TERM/HUP traps; a SIGKILLed run's namespaces are removed
# by the next run). Needs root or CAP_SYS_ADMIN; without it netns_up exits 77 (SKIP).
set -u
NETNS_DIR=$(cd "$(dirname "$0")" && pwd)
P="dt$$"                        # namespace prefix, unique per run
NET="10.251.$(($$ % 200 + 20))" # the test subnet, NET.0/24
SUBNET="$NET.0/24"
MADE=""                         # namespaces created so far (for cleanup)
CHILD=""                        # the running `timeout ...`, if any
NETNS_HOSTS=""                  # h1,h2[,h3] once netns_up succeeded

say() { echo "${NETNS_TAG:-netns}: $*"; }
fail() { say "FAIL: $*"; exit 1; }
skip() { say "SKIP: $*"; exit 77; }
ns_of() { echo "${P}h$1"; }

# Runs a command in the background and waits, so that a signal to this script is handled at once
# (sh runs traps only after a foreground command ends); returns its exit status.
run_child() {
    "$@" &
    CHILD=$!
    wait "$CHILD"
    r=$?
    CHILD=""
    return $r
}

netns_cleanup() {
    # timeout passes the signal on to mpirun, which ends its ranks.
    [ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null && sleep 1
    for ns in $MADE; do
        # Daemons or ranks left behind by a failed or timed-out job live in our namespaces only.
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null # also destroys the veth ends and the bridge inside it
    done
    MADE=""
}
trap netns_cleanup EXIT
trap 'exit 1' INT TERM HUP # runs the EXIT trap

# A run killed by SIGKILL (CTest's timeout) cannot clean up: remove the namespaces of earlier runs
# whose process is gone (names dt<pid>h<k> and dt<pid>sw, made only by these scripts).
netns_remove_stale() {
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^dt[0-9]+(h[0-9]+|sw)$'); do
        pid=$(echo "$ns" | sed -E 's/^dt([0-9]+).*/\1/')
        [ "$pid" != "$$" ] && ! kill -0 "$pid" 2>/dev/null && MADE="$MADE $ns"
    done
    [ -n "$MADE" ] && say "removing namespaces left by killed runs:$MADE"
    netns_cleanup
}

# One host's end: address NET.K, MTU 65535, up; loopback up.
netns_host_if() { # K
    ns=$(ns_of "$1")
    ip -n "$ns" link set eth0 mtu 65535 && ip -n "$ns" addr add "$NET.$1/24" dev eth0 &&
        ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up
}

netns_up() { # HOSTS
    case $1 in 2 | 3) ;; *) fail "HOSTS must be 2 or 3, not $1" ;; esac
    command -v ip >/dev/null || skip "iproute2's ip is not installed"
    command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
    netns_remove_stale
    out=$(ip netns add "$(ns_of 1)" 2>&1) ||
        skip "cannot create a network namespace (needs root or CAP_SYS_ADMIN): $out"
    MADE="$(ns_of 1)"
    for k in $(seq 2 "$1"); do
        ip netns add "$(ns_of "$k")" || fail "ip netns add $(ns_of "$k")"
        MADE="$MADE $(ns_of "$k")"
    done
    if [ "$1" -eq 2 ]; then
        # A direct link; the veth ends are created inside the namespaces, never in this one.
        out=$(ip -n "$(ns_of 1)" link add eth0 type veth peer name eth0 netns "$(ns_of 2)" 2>&1) ||
            skip "cannot create a veth pair (veth support missing?): $out"
    else
        sw="${P}sw"
        ip netns add "$sw" || fail "ip netns add $sw"
        MADE="$MADE $sw"
        out=$(ip -n "$sw" link add br0 mtu 65535 type bridge 2>&1) || skip "cannot create a bridge: $out"
        for k in $(seq 1 "$1"); do
            out=$(ip -n "$(ns_of "$k")" link add eth0 type veth peer name "p$k" netns "$sw" 2>&1) ||
                skip "cannot create a veth pair (veth support missing?): $out"
            ip -n "$sw" link set "p$k" mtu 65535 master br0 up || fail "bridge port p$k"
        done
        ip -n "$sw" link set br0 up || fail "bridge up"
    fi
    for k in $(seq 1 "$1"); do
        netns_host_if "$k" || fail "configuring eth0 in $(ns_of "$k")"
    done
    # A link reports carrier once both ends are up (a new bridge has STP off: no listening or
    # learning delay).
    for k in $(seq 1 "$1"); do
        i=0
        until ip -n "$(ns_of "$k")" link show eth0 | grep -q LOWER_UP; do
            i=$((i + 1))
            [ $i -gt 50 ] && fail "eth0 in $(ns_of "$k") has no carrier"
            sleep 0.1
        done
    done
    NETNS_HOSTS=$(seq -s, -f 'h%g' 1 "$1")
    export DT_NETNS_PREFIX="$P" # for agent.sh, through mpirun's environment
    say "namespaces $MADE; hosts $NETNS_HOSTS on $SUBNET, veth MTU 65535"
}

# Bytes sent so far by h1's eth0.
netns_tx_bytes() { ip netns exec "$(ns_of 1)" cat /sys/class/net/eth0/statistics/tx_bytes; }

# mpirun (the variable MPIRUN) inside h1 -- from this namespace its daemons could not reach it
# back -- with one rank per host: agent.sh starts each daemon in its host's namespace with its
# own hostname; --bind-to none because every daemon sees both cores and would pin every rank to
# core 0; btl tcp,self and the if_include settings keep MPI and its out-of-band traffic on the
# test subnet. Killed after TIMEOUT seconds (exit status 124).
netns_mpirun() { # TIMEOUT ARGS...
    t=$1
    shift
    root=""
    [ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"
    run_child timeout -k 10 "$t" ip netns exec "$(ns_of 1)" "$MPIRUN" $root --oversubscribe \
        --bind-to none --mca btl tcp,self --mca btl_tcp_if_include "$SUBNET" \
        --mca oob_tcp_if_include "$SUBNET" --mca plm_rsh_agent "$NETNS_DIR/agent.sh" \
        -H "$NETNS_HOSTS" -np "$(echo "$NETNS_HOSTS" | tr ',' '\n' | wc -l)" "$@"
}
