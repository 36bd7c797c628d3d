#!/usr/bin/env bash
# The monitoring endpoint's rules as the commands apply them (docs/security.md, "Endpoint
# safety"), with real `dtrain serve` and `dtrain launch` processes and curl:
#   - `dtrain serve --addr 0.0.0.0` / `::` without a token: exit 1, one stderr line naming the
#     address and how to give a token; --insecure or DTRAIN_MONITOR_INSECURE=1 opens it;
#   - --token-file / DTRAIN_MONITOR_TOKEN_FILE: a mode-644 file refused (one line: file, mode,
#     chmod 600; the token not shown); a 600 file used (401 without the token, 200 with it) and
#     the token is not on the command line (/proc/PID/cmdline);
#   - `dtrain launch --monitor-addr 0.0.0.0` without a token: one warning line, the job trains on
#     unmonitored (exit 0); with DTRAIN_MONITOR_TOKEN_FILE the monitor serves it behind the token.
#   surface_cli.sh DTRAIN REPO [MPIRUN]
set -uo pipefail
dtrain=$1 repo=$2 mpirun=${3:-}
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
fail=0
ok() { echo "ok:   $*"; }
bad() { echo "FAIL: $*"; fail=1; }
export OMP_NUM_THREADS=1
unset DTRAIN_MONITOR_TOKEN DTRAIN_MONITOR_TOKEN_FILE DTRAIN_MONITOR_INSECURE

mkdir "$tmp/src"
head -c 20000 /usr/share/games/fortunes/fortunes >"$tmp/src/a.txt"
"$dtrain" data import text "$tmp/src" -o "$tmp/data" --doc-sep % --val 0.1 \
    --tokenizer "$repo/examples/llama-tiny/tokenizer.json" -q >/dev/null || exit 1
args=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$tmp/data/train" data.val=
      data.seq_len=32 data.batch=2 train.threads=1 train.log_every=1 schedule.warmup_steps=1
      output.dir="$tmp/runs")
"$dtrain" train "${args[@]}" train.steps=3 output.run_name=r0 >/dev/null 2>&1 || exit 1
db=$tmp/runs/dtrain.db

code() { # URL [curl args...]: the HTTP status
    curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$@"
}
# serve_bg LOG ARGS...: starts `dtrain serve ARGS` and sets $port from its first line (or 0)
serve_bg() {
    local log=$1
    shift
    "$dtrain" serve --db "$db" --port 0 "$@" >"$log" 2>&1 &
    spid=$!
    pids+=("$spid")
    port=0
    for _ in $(seq 100); do
        port=$(sed -n 's/.*http:\/\/[^ ]*:\([0-9]*\)\/.*/\1/p' "$log" | head -n 1)
        [ -n "$port" ] && break
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    port=${port:-0}
}
stop_bg() { kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; }

# 1. non-loopback without a token: refused
for addr in 0.0.0.0 "::"; do
    out=$("$dtrain" serve --db "$db" --addr "$addr" --port 0 2>&1 >/dev/null)
    rc=$?
    if [ $rc = 1 ] && [ "$(printf '%s\n' "$out" | grep -c .)" = 1 ] &&
        grep -q "refusing to serve on $addr without a token" <<<"$out" &&
        grep -q "DTRAIN_MONITOR_TOKEN" <<<"$out"; then
        ok "serve --addr $addr without a token: exit 1, one line: $out"
    else
        bad "serve --addr $addr without a token: exit $rc: $out"
    fi
done

# 2. opted in: served to anyone, any Host
for how in flag env; do
    if [ $how = flag ]; then
        serve_bg "$tmp/ins.log" --addr 0.0.0.0 --insecure
    else
        DTRAIN_MONITOR_INSECURE=1 serve_bg "$tmp/ins.log" --addr 0.0.0.0
    fi
    c=$(code -H "Host: gpu-node-3:8765" "http://127.0.0.1:$port/api/runs")
    if [ "$port" != 0 ] && [ "$c" = 200 ] && grep -q "no token (--insecure)" "$tmp/ins.log"; then
        ok "0.0.0.0 opted in ($how): served, any Host ($c)"
    else
        bad "0.0.0.0 opted in ($how): port $port, status $c: $(cat "$tmp/ins.log")"
    fi
    stop_bg
done

# 3. token files
secret=cli-TOKEN-$RANDOM$RANDOM
printf '%s\n' "$secret" >"$tmp/token"
chmod 644 "$tmp/token"
out=$("$dtrain" serve --db "$db" --port 0 --token-file "$tmp/token" 2>&1 >/dev/null)
rc=$?
if [ $rc = 1 ] && [ "$(printf '%s\n' "$out" | grep -c .)" = 1 ] && grep -q "$tmp/token" <<<"$out" &&
    grep -q "0644" <<<"$out" && grep -q "chmod 600" <<<"$out" && ! grep -q "$secret" <<<"$out"; then
    ok "--token-file mode 644: exit 1, one line: $out"
else
    bad "--token-file mode 644: exit $rc: $out"
fi
out=$(DTRAIN_MONITOR_TOKEN_FILE=$tmp/token "$dtrain" serve --db "$db" --port 0 2>&1 >/dev/null)
rc=$?
[ $rc = 1 ] && grep -q "chmod 600" <<<"$out" && ok "DTRAIN_MONITOR_TOKEN_FILE mode 644: exit 1" ||
    bad "DTRAIN_MONITOR_TOKEN_FILE mode 644: exit $rc: $out"
chmod 600 "$tmp/token"
DTRAIN_MONITOR_TOKEN_FILE=$tmp/token serve_bg "$tmp/tok.log" --addr 0.0.0.0
c0=$(code "http://127.0.0.1:$port/metrics")
c1=$(code -H "Authorization: Bearer $secret" "http://127.0.0.1:$port/metrics")
c2=$(code -X DELETE -H "Authorization: Bearer $secret" "http://127.0.0.1:$port/api/runs/1")
if [ "$port" != 0 ] && [ "$c0" = 401 ] && [ "$c1" = 200 ] && [ "$c2" = 405 ] &&
    grep -q "bearer token required" "$tmp/tok.log"; then
    ok "0.0.0.0 with DTRAIN_MONITOR_TOKEN_FILE (600): 401 without, 200 with, DELETE 405"
else
    bad "0.0.0.0 with a token file: port $port, $c0 / $c1 / $c2: $(cat "$tmp/tok.log")"
fi
if tr '\0' ' ' <"/proc/$spid/cmdline" | grep -q "$secret"; then
    bad "the token is on the command line"
else
    ok "the token is not on the command line"
fi
stop_bg
grep -q "$secret" "$tmp/tok.log" && bad "serve printed the token"

# 4. dtrain launch
if [ -n "$mpirun" ] && [ -x "$mpirun" ]; then
    largs=(launch -n 1 --mpirun "$mpirun" --oversubscribe --monitor-port 0 --monitor-addr 0.0.0.0)
    "$dtrain" "${largs[@]}" "${args[@]}" train.steps=3 output.run_name=l1 >"$tmp/l1.log" 2>&1
    rc=$?
    w=$(grep -c "warning: monitor: refusing to serve on 0.0.0.0 without a token.*monitoring is off" \
        "$tmp/l1.log")
    if [ $rc = 0 ] && [ "$w" = 1 ] && ! grep -q "monitor on http" "$tmp/l1.log"; then
        ok "launch --monitor-addr 0.0.0.0 without a token: one warning, trained (exit 0)"
    else
        bad "launch --monitor-addr 0.0.0.0 without a token: exit $rc: $(cat "$tmp/l1.log")"
    fi
    # its own process group (setsid), so that the whole job can be killed if it outlives the test
    DTRAIN_MONITOR_TOKEN_FILE=$tmp/token setsid "$dtrain" "${largs[@]}" "${args[@]}" \
        train.steps=20000 output.run_name=l2 >"$tmp/l2.log" 2>&1 &
    lpid=$!
    pids+=("$lpid")
    port=
    for _ in $(seq 300); do
        port=$(sed -n 's/.*monitor on http:\/\/[^ ]*:\([0-9]*\)\/.*/\1/p' "$tmp/l2.log" | head -n 1)
        [ -n "$port" ] && break
        sleep 0.1
    done
    c0=$(code "http://127.0.0.1:${port:-1}/metrics")
    c1=$(code -H "Authorization: Bearer $secret" "http://127.0.0.1:${port:-1}/metrics")
    if [ -n "$port" ] && [ "$c0" = 401 ] && [ "$c1" = 200 ]; then
        ok "launch on 0.0.0.0 with DTRAIN_MONITOR_TOKEN_FILE: 401 without the token, 200 with it"
    else
        bad "launch with a token file: port '$port', $c0 / $c1: $(tail -n 5 "$tmp/l2.log")"
    fi
    # SIGTERM once the workers train (before, mpirun may not pass it on yet); SIGKILL the group
    # if the job has not stopped 60 s later
    for _ in $(seq 600); do grep -q "step .*loss" "$tmp/l2.log" && break; sleep 0.1; done
    kill -TERM "$lpid" 2>/dev/null
    for _ in $(seq 600); do kill -0 "$lpid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$lpid" 2>/dev/null && { echo "note: the launch did not stop on SIGTERM"; kill -KILL -- -"$lpid"; }
    wait "$lpid" 2>/dev/null
    grep -q "$secret" "$tmp/l1.log" "$tmp/l2.log" && bad "launch printed the token"
else
    echo "note: no mpirun: dtrain launch not checked"
fi

[ $fail = 0 ] && echo "surface_cli: passed"
exit $fail
