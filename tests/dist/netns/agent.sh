#!/bin/sh
# mpirun's rsh agent for the network-namespace "hosts" of run_netns.sh: Open MPI calls it as
#   agent.sh HOST orted ARGS...
# with a command line meant for a remote shell (assignments, quoted values, `;`), so the rest is
# run by `sh -c "$*"` inside namespace ${DT_NETNS_PREFIX}HOST, in a new UTS namespace whose
# hostname is HOST: each rank then sees its own host name, as on separate machines.
# DT_NETNS_PREFIX comes from run_netns.sh through mpirun's environment.
[ $# -ge 2 ] || { echo "agent.sh: usage: agent.sh HOST COMMAND..." >&2; exit 2; }
host=$1
shift
case $host in
    *[!A-Za-z0-9_-]*) echo "agent.sh: bad host name '$host'" >&2; exit 2 ;;
esac
ns="${DT_NETNS_PREFIX:?agent.sh: DT_NETNS_PREFIX is not set}$host"
[ -e "/var/run/netns/$ns" ] || { echo "agent.sh: no network namespace $ns for host $host" >&2; exit 2; }
exec ip netns exec "$ns" unshare --uts sh -c "hostname $host && $*"
