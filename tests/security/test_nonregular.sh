#!/usr/bin/env bash
# A FIFO or a directory where dtrain expects a file it reads (issue 26): model weights and
# config.json, the YAML config, a dataset's manifest and shard, an importer's input, a tokenizer,
# a checkpoint's files -- each gets one error line naming the file and "not a regular file",
# promptly (opening a FIFO for reading used to wait for a writer for ever: every command runs
# under `timeout`, and a timeout is a failure). docs/security.md, "Careless and hostile input".
#   test_nonregular.sh DTRAIN REPO
set -uo pipefail
dtrain=$1 repo=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 n=0
export OMP_NUM_THREADS=1
cd "$tmp" || exit 1

# a real dataset, run, checkpoint and exported model to damage copies of
mkdir src
head -c 20000 /usr/share/games/fortunes/fortunes >src/a.txt
tok=$repo/examples/llama-tiny/tokenizer.json
"$dtrain" data import text src -o data/fort --doc-sep % --val 0.1 --tokenizer "$tok" -q \
    >/dev/null || exit 1
train_args=("$repo/examples/llama-tiny-fortunes.yaml" data.val= data.seq_len=32 data.batch=2
            train.steps=2 train.threads=1 train.log_every=2 ckpt.every_steps=2
            schedule.warmup_steps=1)
"$dtrain" train "${train_args[@]}" data.train=data/fort/train output.dir=runs \
    output.run_name=r1 >train.log 2>&1 || { cat train.log; exit 1; }
run=runs/llama-tiny-fortunes/r1
ck=$run/checkpoints/step-000000002
[ -f "$run/model/model.safetensors" ] && [ -f "$ck/trainer_state.json" ] || {
    echo "FAIL: the setup run wrote no model or checkpoint"; exit 1; }
cp "$tok" "$run/model/tokenizer.json"

# refused KIND TARGET CMD...: TARGET (a path in a fresh copy of the tree) is replaced by a FIFO
# (KIND fifo) or an empty directory (KIND dir); CMD must fail within 20 s with one line that
# names TARGET (as given, or with its absolute folder) and says "not a regular file".
refused() {
    local kind=$1 target=$2
    shift 2
    rm -rf "$target"
    if [ "$kind" = fifo ]; then mkfifo "$target"; else mkdir "$target"; fi
    n=$((n + 1))
    timeout 20 "$@" >out.log 2>err.log </dev/null
    local rc=$? named=${target#*/}
    if [ $rc = 124 ]; then
        echo "FAIL: $kind $target: '$*' still waiting after 20 s"
        fail=1
    elif [ $rc = 0 ]; then
        echo "FAIL: $kind $target: '$*' succeeded"
        fail=1
    elif ! grep -F "$named" err.log | grep -q 'not a regular file'; then
        echo "FAIL: $kind $target: '$*' (exit $rc) did not say the file is not a regular file:"
        cat err.log
        fail=1
    elif [ "$(grep -c . err.log)" != 1 ]; then
        echo "FAIL: $kind $target: '$*' printed more than one line:"
        cat err.log
        fail=1
    else
        echo "ok: $kind $target: $(cat err.log)"
    fi
}
# fresh NAME: a pristine copy of the tree under NAME/ (every case damages its own)
fresh() {
    rm -rf "$1"
    mkdir "$1"
    cp -r data runs src "$1"/
}

for kind in fifo dir; do
    c=$kind
    # model weights and config, through generate and through train's pretrained init
    fresh "$c"
    refused "$kind" "$c/$run/model/model.safetensors" \
        "$dtrain" generate --model "$c/$run/model" --ids 1,2 --max-new 2
    fresh "$c"
    refused "$kind" "$c/$run/model/config.json" \
        "$dtrain" generate --model "$c/$run/model" --ids 1,2 --max-new 2
    fresh "$c"
    refused "$kind" "$c/$run/model/model.safetensors" \
        "$dtrain" train "${train_args[@]}" data.train="$c/data/fort/train" \
        model.hf_path="$c/$run/model" model.init=pretrained output.dir="$c/out"
    # the tokenizer named on the command line
    fresh "$c"
    refused "$kind" "$c/tok.json" \
        "$dtrain" generate --model "$c/$run/model" --tokenizer "$c/tok.json" --prompt hi \
        --max-new 2
    refused "$kind" "$c/tok.json" \
        "$dtrain" data import text "$c/src" -o "$c/new" --tokenizer "$c/tok.json" -q
    # an importer's input named on the command line (a directory is a folder of inputs)
    [ $kind = fifo ] && refused "$kind" "$c/input.txt" \
        "$dtrain" data import text "$c/input.txt" -o "$c/new" --tokenizer "$tok" -q
    # the YAML config
    refused "$kind" "$c/config.yaml" "$dtrain" train "$c/config.yaml"
    refused "$kind" "$c/config.yaml" "$dtrain" plan "$c/config.yaml"
    # a dataset's manifest and a shard
    fresh "$c"
    refused "$kind" "$c/data/fort/train/manifest.json" \
        "$dtrain" train "${train_args[@]}" data.train="$c/data/fort/train" output.dir="$c/out"
    fresh "$c"
    refused "$kind" "$c/data/fort/train/shard-00000.dts" \
        "$dtrain" train "${train_args[@]}" data.train="$c/data/fort/train" output.dir="$c/out"
    # a checkpoint's state and weights: `dtrain ckpt show`, and resuming the run (a directory
    # there reads as a missing file, as on S3: the bad checkpoint is skipped with a warning)
    fresh "$c"
    refused "$kind" "$c/$ck/trainer_state.json" "$dtrain" ckpt show "$c/$ck"
    fresh "$c"
    [ $kind = fifo ] && refused "$kind" "$c/$ck/model.safetensors" \
        "$dtrain" train "${train_args[@]}" train.steps=4 data.train="$c/data/fort/train" \
        output.dir="$c/runs" output.run_name=r1
done
[ $fail = 0 ] && echo "all $n non-regular files refused with one line naming them"
exit $fail
