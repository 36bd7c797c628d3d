#!/bin/sh
# Passes when a command FAILS (nonzero exit) within a time limit, with PATTERN in its output.
# Usage: expect_fail.sh SECONDS PATTERN COMMAND [ARGS...]
# Used for "a rank that dies makes the others exit with an error in bounded time": the command
# is an mpirun job in which one rank kills itself; a hang would hit the limit (exit 124/137).
limit=$1 pattern=$2
shift 2
out=$(mktemp)
start=$(date +%s)
timeout -k 5 "$limit" "$@" >"$out" 2>&1
rc=$?
took=$(($(date +%s) - start))
cat "$out"
found=0
grep -q -- "$pattern" "$out" && found=1
rm -f "$out"
if [ $rc -eq 0 ]; then
  echo "expect_fail: FAIL: the command succeeded (expected a failure)"; exit 1
fi
# timeout's own 124/137 after the limit; mpirun itself may exit 137 after a rank's SIGKILL
if [ $took -ge "$limit" ] && { [ $rc -eq 124 ] || [ $rc -eq 137 ]; }; then
  echo "expect_fail: FAIL: no exit within ${limit}s (hang)"; exit 1
fi
if [ $found -eq 0 ]; then
  echo "expect_fail: FAIL: output lacks \"$pattern\""; exit 1
fi
echo "expect_fail: PASS: exit status $rc after ${took}s, output names \"$pattern\""
