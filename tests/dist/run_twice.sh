#!/bin/sh
# Run-to-run determinism: runs a command twice (two separate mpirun jobs) and requires that both
# succeed and print the same non-empty set of "params-hash" lines.
# Usage: run_twice.sh COMMAND [ARGS...]
a=$(mktemp) b=$(mktemp)
"$@" >"$a" 2>&1 || { cat "$a"; echo "run_twice: FAIL: first run failed"; rm -f "$a" "$b"; exit 1; }
"$@" >"$b" 2>&1 || { cat "$b"; echo "run_twice: FAIL: second run failed"; rm -f "$a" "$b"; exit 1; }
ha=$(grep -o 'params-hash.*[0-9a-f]\{16\}' "$a") hb=$(grep -o 'params-hash.*[0-9a-f]\{16\}' "$b")
rm -f "$a" "$b"
echo "first run:"; echo "$ha"; echo "second run:"; echo "$hb"
[ -n "$ha" ] || { echo "run_twice: FAIL: no params-hash lines"; exit 1; }
[ "$ha" = "$hb" ] || { echo "run_twice: FAIL: parameters differ between runs"; exit 1; }
echo "run_twice: PASS: $(echo "$ha" | wc -l) hashes identical"
