#!/usr/bin/env bash
# dtrain's processes are named "dtrain" (their comm: what ps, top, pgrep and the kernel's OOM
# killer log show), not "exe" (issue 26: the OpenMP re-exec went through /proc/self/exe). Reads
# /proc/PID/comm of a running `dtrain train` -- started directly, with the re-exec, and through
# a symbolic link of another name, without it -- and of its threads.
#   test_procname.sh DTRAIN REPO
set -uo pipefail
dtrain=$1 repo=$2
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
fail=0
export OMP_NUM_THREADS=2
cd "$tmp" || exit 1
mkdir src
head -c 20000 /usr/share/games/fortunes/fortunes >src/a.txt
"$dtrain" data import text src -o data --doc-sep % --val 0.1 \
    --tokenizer "$repo/examples/llama-tiny/tokenizer.json" -q >/dev/null || exit 1
ln -s "$dtrain" ./trainer

# check LABEL CMD...: starts CMD (a train run that lasts), waits for its first step line, then
# its comm and every thread's must be "dtrain" or a dt-* thread name
check() {
    local label=$1
    shift
    "$@" "$repo/examples/llama-tiny-fortunes.yaml" data.train=data/train data.val= \
        data.seq_len=32 data.batch=2 train.steps=1000000 train.log_every=1 \
        output.dir="out-$label" >"$label.log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do
        grep -q '^step' "$label.log" 2>/dev/null && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.1
    done
    local comm threads
    comm=$(cat /proc/$pid/comm 2>/dev/null)
    threads=$(cat /proc/$pid/task/*/comm 2>/dev/null | sort | uniq -c | tr -s ' \n' ' ')
    kill $pid 2>/dev/null
    wait $pid 2>/dev/null
    pid=
    if ! grep -q '^step' "$label.log"; then
        echo "FAIL: $label: the run did not start:"
        cat "$label.log"
        fail=1
    elif [ "$comm" != dtrain ]; then
        echo "FAIL: $label: process named '$comm', not dtrain (threads: $threads)"
        fail=1
    elif [ -n "$(echo "$threads" | tr ' ' '\n' | grep -v -e '^[0-9]*$' -e '^dtrain$' -e '^dt-')" ]
    then
        echo "FAIL: $label: threads named otherwise: $threads"
        fail=1
    else
        echo "ok: $label: process 'dtrain', threads:$threads"
    fi
}
check direct env -u DT_OMP_SET -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$dtrain" train
check symlink env DT_OMP_SET=1 ./trainer train
exit $fail
