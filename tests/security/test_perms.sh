#!/usr/bin/env bash
# What dtrain writes is not open to other users: with umask 000 (so that the modes seen are the
# code's own), a real `dtrain data import`, a `dtrain train` with checkpoints, the experiment
# store and the exported model, a `dtrain launch` (its launch.json) when MPI is there, a
# `dtrain runs export --format mlflow`, and `runs plot` (SVG, PNG) and `runs export` (CSV, JSON)
# files must leave every folder 0750 and every file 0640
# (docs/security.md, "Secrets and files"). Then umask 077: the umask still applies on top
# (folders 0700, files 0600), the experiment store included (SQLite alone would make it 0644).
#   test_perms.sh DTRAIN REPO [MPIRUN]
set -euo pipefail
dtrain=$1 repo=$2 mpirun=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
export OMP_NUM_THREADS=1

mkdir "$tmp/src"
head -c 20000 /usr/share/games/fortunes/fortunes >"$tmp/src/a.txt"
train_args=("$repo/examples/llama-tiny-fortunes.yaml" data.val= data.seq_len=32 data.batch=2
            train.steps=4 train.threads=1 train.log_every=2 ckpt.every_steps=2
            schedule.warmup_steps=1)

# modes DIR DIRMODE FILEMODE: every folder and file under DIR (DIR itself included) has exactly
# these modes; prints the others
modes() {
    local dir=$1 dmode=$2 fmode=$3 bad
    bad=$(find "$dir" \( -type d ! -perm "$dmode" -printf '%m %p (folder)\n' \) -o \
                      \( -type f ! -perm "$fmode" -printf '%m %p\n' \) -o \
                      \( ! -type d ! -type f -printf '%y %p (not a file)\n' \))
    if [ -n "$bad" ]; then
        echo "FAIL: under $dir, expected folders $dmode and files $fmode:"
        echo "$bad"
        fail=1
    else
        echo "ok: $(find "$dir" -type d | wc -l) folders $dmode, $(find "$dir" -type f | wc -l) files $fmode under ${dir#"$tmp"/}"
    fi
}
# present FILE...: the files the checks are about exist (so that they check something)
present() {
    for f in "$@"; do
        [ -e "$f" ] || { echo "FAIL: $f was not written"; fail=1; }
    done
}

run_all() { # OUT: import, train, export; in the current umask
    local out=$1
    "$dtrain" data import text "$tmp/src" -o "$out/data/fort" --doc-sep % --val 0.1 \
        --tokenizer "$repo/examples/llama-tiny/tokenizer.json" -q >/dev/null
    "$dtrain" train "${train_args[@]}" data.train="$out/data/fort/train" output.dir="$out/runs" \
        output.run_name=r1 >"$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; fail=1; }
    "$dtrain" runs export r1 --db "$out/runs/dtrain.db" --format mlflow -o "$out/mlflow" \
        >/dev/null
    # files written where the user says: plots and exports (in a folder of their own)
    mkdir -p "$out/user"
    chmod "$(printf %o $((0777 & ~$(umask))))" "$out/user"
    "$dtrain" runs plot r1 --db "$out/runs/dtrain.db" -o "$out/user/loss.svg" >/dev/null
    "$dtrain" runs plot r1 --db "$out/runs/dtrain.db" -o "$out/user/loss.png" >/dev/null
    "$dtrain" runs export r1 --db "$out/runs/dtrain.db" --format csv -o "$out/user/r1.csv"
    "$dtrain" runs export r1 --db "$out/runs/dtrain.db" --format json -o "$out/user/r1.json"
}
# files FILE... have mode MODE (the folder around them is the user's own)
fmodes() {
    local mode=$1 bad
    shift
    bad=$(find "$@" -maxdepth 0 ! -perm "$mode" -printf '%m %p\n')
    if [ -n "$bad" ]; then
        echo "FAIL: expected $mode:"
        echo "$bad"
        fail=1
    else
        echo "ok: $# plot and export files $mode"
    fi
}

# 1. umask 000: the code's own modes
umask 000
out=$tmp/u000
run_all "$out"
run=$out/runs/llama-tiny-fortunes/r1
present "$out/data/fort/train/manifest.json" "$out/data/fort/train/shard-00000.dts" \
    "$out/runs/dtrain.db" "$run/run.json" "$run/config.yaml" \
    "$run/checkpoints/step-000000004/model.safetensors" \
    "$run/checkpoints/step-000000004/trainer_state.json" "$run/model/config.json" \
    "$run/model/model.safetensors" "$out/mlflow/0/meta.yaml"
if [ -n "$mpirun" ] && [ -x "$mpirun" ]; then
    "$dtrain" launch -n 1 --mpirun "$mpirun" --oversubscribe "${train_args[@]}" \
        data.train="$out/data/fort/train" output.dir="$out/runs" output.run_name=l1 \
        >"$tmp/launch.log" 2>&1 || { cat "$tmp/launch.log"; fail=1; }
    present "$out/runs/llama-tiny-fortunes/l1/launch.json"
else
    echo "note: no mpirun: dtrain launch not checked"
fi
modes "$out/data" 750 640
modes "$out/runs" 750 640
modes "$out/mlflow" 750 640
present "$out/user/loss.svg" "$out/user/loss.png" "$out/user/r1.csv" "$out/user/r1.json"
fmodes 640 "$out/user/"*
# the store while it is open: its -wal and -shm files take the database's mode
"$dtrain" runs ls --db "$out/runs/dtrain.db" >/dev/null
python3 - "$out/runs/dtrain.db" <<'EOF' || fail=1
import os, sqlite3, stat, sys
db = sys.argv[1]
c = sqlite3.connect(db)
c.execute("PRAGMA journal_mode=WAL")
c.execute("SELECT count(*) FROM runs").fetchall()
bad = [(f, oct(stat.S_IMODE(os.stat(f).st_mode))) for f in (db + "-wal", db + "-shm")
       if os.path.exists(f) and stat.S_IMODE(os.stat(f).st_mode) != 0o640]
print("FAIL: " + str(bad) if bad else "ok: the store's -wal/-shm files are 0640 while open")
sys.exit(1 if bad else 0)
EOF

# 2. umask 077: private to the owner
umask 077
out=$tmp/u077
run_all "$out"
present "$out/runs/dtrain.db" "$out/runs/llama-tiny-fortunes/r1/run.json"
modes "$out/data" 700 600
modes "$out/runs" 700 600
modes "$out/mlflow" 700 600
fmodes 600 "$out/user/"*

[ $fail = 0 ] && echo "every folder 0750 and file 0640 with umask 000; 0700/0600 with umask 077"
exit $fail
