#!/bin/sh
# Passes when a job ends with the hang watchdog's exit status within a time limit, its output
# matches PATTERN (grep -E), and none of its ranks is left afterwards (stopped ones included).
# Usage: expect_hang.sh SECONDS STATUS PATTERN COMMAND [ARGS...]
# COMMAND's last argument is replaced by a fresh directory: the test program writes its ranks'
# pids there (rank-R.pid).
limit=$1 want=$2 pattern=$3
shift 3
dir=$(mktemp -d)
out=$dir/out
n=$#
i=0
for a in "$@"; do # rebuild "$@" with the last argument replaced by the pid directory
  i=$((i + 1))
  [ $i = 1 ] && set --
  if [ $i = $n ]; then set -- "$@" "$dir"; else set -- "$@" "$a"; fi
done
start=$(date +%s)
timeout -k 5 "$limit" "$@" >"$out" 2>&1
rc=$?
took=$(($(date +%s) - start))
cat "$out"
fail() { echo "expect_hang: FAIL: $*"; for p in "$dir"/rank-*.pid; do [ -f "$p" ] && kill -KILL "$(cat "$p")" 2>/dev/null; done; rm -rf "$dir"; exit 1; }
[ $rc -eq 124 ] || [ $rc -eq 137 ] && fail "no exit within ${limit}s (hang)"
[ $rc -eq "$want" ] || fail "exit status $rc, expected $want"
grep -Eq -- "$pattern" "$out" || fail "output lacks /$pattern/"
# a rank the watchdog names as stuck ("rank R (host H, pid P) has not reached it") is that rank
named=$(sed -n 's/.*: rank \([0-9]*\) (host [^,]*, pid \([0-9]*\)) has not reached it.*/\1 \2/p' "$out" | head -1)
if [ -n "$named" ]; then
  set -- $named
  [ "$(cat "$dir/rank-$1.pid" 2>/dev/null)" = "$2" ] || fail "the line names rank $1 as pid $2, but rank $1 is pid $(cat "$dir/rank-$1.pid" 2>/dev/null)"
fi
sleep 1 # mpirun has returned; its ranks are gone by now or never will be
for p in "$dir"/rank-*.pid; do
  [ -f "$p" ] || fail "no pid file: the ranks did not start"
  pid=$(cat "$p")
  # a zombie is gone (only not reaped: in a container nobody may reap orphans)
  st=$(sed -n 's/^[0-9]* (.*) \([A-Z]\).*/\1/p' "/proc/$pid/stat" 2>/dev/null)
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ] && fail "rank pid $pid ($(basename "$p")) is still there (state $st)"
done
rm -rf "$dir"
echo "expect_hang: PASS: exit status $rc after ${took}s, output matches /$pattern/, no rank left"
