#!/usr/bin/env bash
# `dtrain models` end to end on the store that real `dtrain train` runs of the tiny Llama write;
# python3's json/sqlite3 read what it prints and stores.
#   CASE cli     two runs (optim.lr 0.003, 0.001; checkpoints at steps 5 and 10): registering a
#                run takes its newest checkpoint (versions 1, 2), a checkpoint folder finds its
#                run (3), a copied one has none (4), a run whose newest checkpoint is corrupt
#                falls back to the older one; ls/show/diff/alias/verify with --json parsed;
#                resolve NAME, @latest, @N, @alias; aliases move and go; diff names optim.lr;
#                `runs show` lists the versions registered from the run;
#                UPDATE/DELETE of model_versions through sqlite3 fail; readers (`models ls`)
#                loop while versions are registered, never failing; a modified checkpoint file
#                fails verify (named) and export refuses it, writing nothing; usage errors
#                exit 2, a missing model 1
#   CASE export  hf export of a version is byte-identical to the run's own exported model (the
#                run's config naming its model and data by relative paths, exported from another
#                working directory: found through the lineage); a
#                LoRA run finetuned on it: peft export identical to the run's adapter, merged
#                identical to `dtrain lora merge`; `dtrain generate` gives the same text from the
#                merged folder as from the hf export with the peft adapter; transformers loads the hf and merged folders
#                and PEFT the adapter, the adapter's logits equal the merged model's (exit 77
#                when the venv is missing, after the byte checks)
#   models_cli.sh DTRAIN REPO DATA_DIR CASE
set -euo pipefail
dtrain=$(readlink -f "$1") repo=$2 data=$3 case=$4
py=${DT_VENV_PYTHON:-${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python}
tmp=$(mktemp -d)
bg=
cleanup() {
    if [ -n "$bg" ]; then kill "$bg" 2> /dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "FAIL ($case): $*"
    exit 1
}
db="$tmp/runs/dtrain.db"
exp=llama-tiny-fortunes
M=("--db" "$db")
train() { # NAME [overrides...]
    local name=$1
    shift
    "$dtrain" train "$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" data.val= data.seq_len=32 data.batch=4 train.threads=1 \
        schedule.warmup_steps=2 train.log_every=5 output.dir="$tmp/runs" output.run_name="$name" \
        "$@" > "$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "run $name failed"; }
}
# a field of the JSON object on stdin: jget 'o["version"]'
jget() { python3 -c 'import json, sys; o = json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }
ckpt() { echo "$tmp/runs/$exp/$1/checkpoints/step-$(printf %09d "$2")"; }

case $case in
cli)
    train r1 train.steps=10 ckpt.every_steps=5 optim.lr=0.003
    train r2 train.steps=10 ckpt.every_steps=5 optim.lr=0.001
    v=$("$dtrain" models register r1 --name fortunes --description "tiny llama" "${M[@]}" --json)
    [ "$(jget 'o["version"], o["step"], o["run"], o["path"]' <<< "$v")" = \
        "(1, 10, '$exp/r1', '$(ckpt r1 10)')" ] || fail "register r1: $v"
    "$dtrain" models register r2 --name fortunes "${M[@]}" | tee "$tmp/out"
    grep -q "registered fortunes version 2: $(ckpt r2 10) (step 10) of run $exp/r2" "$tmp/out" ||
        fail "register r2"
    # readers while versions are registered (WAL): every listing parses, none fails
    (
        n=0
        while :; do
            "$dtrain" models ls fortunes "${M[@]}" --json > "$tmp/ls.json" || exit 1
            python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$tmp/ls.json" || exit 1
            n=$((n + 1))
            echo $n > "$tmp/reads"
        done
    ) &
    bg=$!
    v=$("$dtrain" models register "$(ckpt r1 5)" --name fortunes "${M[@]}" --json)
    [ "$(jget 'o["version"], o["step"], o["run"]' <<< "$v")" = "(3, 5, '$exp/r1')" ] ||
        fail "register a checkpoint folder: $v"
    cp -r "$(ckpt r1 5)" "$tmp/loose"
    v=$("$dtrain" models register "$tmp/loose" --name fortunes "${M[@]}" --json)
    [ "$(jget 'o["version"], o["run_id"], o["params"]["optim.lr"]' <<< "$v")" = \
        "(4, None, '0.003')" ] || fail "a checkpoint no run recorded: $v"
    sleep 1
    kill -0 "$bg" 2> /dev/null || fail "a reader failed while versions were registered"
    kill "$bg" && wait "$bg" 2> /dev/null || true
    bg=
    [ "$(cat "$tmp/reads")" -ge 2 ] || fail "the readers did not run"
    # newest checkpoint corrupt: the older one is registered, the skip named
    printf 'X' | dd of="$(ckpt r2 10)/model.safetensors" bs=1 seek=4000 conv=notrunc 2> /dev/null
    "$dtrain" models register r2 --name other "${M[@]}" --json > "$tmp/o.json" 2> "$tmp/err"
    [ "$(jget 'o["version"], o["step"]' < "$tmp/o.json")" = "(1, 5)" ] || fail "fallback"
    grep -q "skipped checkpoint step 10 of run $exp/r2: .*model.safetensors" "$tmp/err" || fail "skip not named"
    # ls
    "$dtrain" models ls "${M[@]}" --json > "$tmp/ls.json"
    [ "$(jget '[(m["name"], m["versions"], m["latest"]) for m in o["models"]]' < "$tmp/ls.json")" = \
        "[('fortunes', 4, 4), ('other', 1, 1)]" ] || fail "ls: $(cat "$tmp/ls.json")"
    "$dtrain" models ls fortunes "${M[@]}" | tee "$tmp/out"
    [ "$(grep -c "$exp/r" "$tmp/out")" = 3 ] || fail "ls fortunes: 3 versions with runs"
    # aliases and references
    "$dtrain" models alias fortunes 1 champion "${M[@]}" > /dev/null
    "$dtrain" runs show r1 "${M[@]}" | tee "$tmp/out" | sed -n '/^model versions:/,/^params:/p'
    grep -q "^  fortunes@1  step 10 .*step-000000010  aliases champion" "$tmp/out" &&
        grep -q "^  fortunes@3  step 5 " "$tmp/out" && ! grep -q "fortunes@2" "$tmp/out" ||
        fail "runs show r1: its model versions"
    show() { "$dtrain" models show "$1" "${M[@]}" --json | jget "$2"; }
    [ "$(show fortunes@champion 'o["version"], o["aliases"]')" = "(1, ['champion'])" ] ||
        fail "alias on 1"
    "$dtrain" models alias fortunes 2 champion "${M[@]}" --json > "$tmp/a.json"
    [ "$(jget 'o["version"]' < "$tmp/a.json")" = 2 ] || fail "alias --json"
    [ "$(show fortunes@champion 'o["version"]')" = 2 ] || fail "the alias moved"
    [ "$(show fortunes@1 'o["aliases"]')" = "[]" ] || fail "v1 keeps the alias"
    [ "$(show fortunes 'o["version"]')" = 4 ] || fail "bare name: latest"
    [ "$(show fortunes@latest 'o["version"]')" = 4 ] || fail "@latest"
    [ "$(show fortunes@3 'o["step"], o["integrity"]["ok"]')" = "(5, True)" ] || fail "@3"
    "$dtrain" models show fortunes@2 "${M[@]}" | tee "$tmp/out"
    grep -q "integrity   model fortunes@2: .*model.safetensors: contents changed" "$tmp/out" ||
        fail "show: the corrupt checkpoint's integrity"
    "$dtrain" models alias --remove fortunes champion "${M[@]}" > /dev/null
    rc=0
    "$dtrain" models show fortunes@champion "${M[@]}" 2> "$tmp/err" || rc=$?
    [ $rc = 1 ] && grep -q "no such alias" "$tmp/err" || fail "a removed alias: rc $rc"
    # diff: the one param that differs (besides the run's name), metrics side by side
    "$dtrain" models diff fortunes@1 fortunes@2 "${M[@]}" --json > "$tmp/d.json"
    [ "$(jget 'sorted(o["params"]), o["params"]["optim.lr"], "loss" in o["metrics"]' < "$tmp/d.json")" = \
        "(['optim.lr', 'output.run_name'], ['0.003', '0.001'], True)" ] ||
        fail "diff: $(cat "$tmp/d.json")"
    "$dtrain" models diff fortunes@1 fortunes@2 "${M[@]}" | grep -q "params   optim.lr .* 0.003 -> 0.001" ||
        fail "diff text"
    # immutable, whoever writes
    for sql in "UPDATE model_versions SET step = 0" "DELETE FROM model_versions"; do
        python3 -c 'import sqlite3, sys
try:
    c = sqlite3.connect(sys.argv[1]); c.execute(sys.argv[2]); c.commit()
except sqlite3.DatabaseError as e:
    sys.exit(0 if "immutable" in str(e) else 2)
sys.exit(1)' "$db" "$sql" || fail "$sql was not refused"
    done
    # verify, and export refusing a changed artefact
    "$dtrain" models verify fortunes@1 "${M[@]}" --json | jget 'o["integrity"]["ok"]' | grep -qx True ||
        fail "verify a good version"
    rc=0
    "$dtrain" models verify fortunes@2 "${M[@]}" 2> "$tmp/err" || rc=$?
    [ $rc = 1 ] && grep -q "model.safetensors: xxh3 .*, registered" "$tmp/err" || fail "verify: rc $rc"
    rc=0
    "$dtrain" models export fortunes@2 -o "$tmp/x" "${M[@]}" 2> "$tmp/err" || rc=$?
    [ $rc = 1 ] && grep -q "refusing to export a changed artefact" "$tmp/err" && [ ! -e "$tmp/x" ] ||
        fail "export of a changed artefact: rc $rc"
    # errors
    for args in "show" "diff fortunes@1" "alias fortunes x champion" "export fortunes" \
        "register r1" "export fortunes -o $tmp/y --format onnx" "nosuch"; do
        rc=0
        # shellcheck disable=SC2086
        "$dtrain" models $args "${M[@]}" 2> /dev/null || rc=$?
        [ $rc = 2 ] || fail "'models $args': exit $rc, expected 2"
    done
    rc=0
    "$dtrain" models show nosuch "${M[@]}" 2> /dev/null || rc=$?
    [ $rc = 1 ] || fail "a missing model: exit $rc"
    ;;
export)
    # model.hf_path (llama-tiny) is relative to the config's folder and data.train to the run's
    # working directory: export, from elsewhere, finds both through the run's lineage
    (cd "$data" && train base train.steps=10 ckpt.every_steps=10 data.train=fortunes/train)
    "$dtrain" models register base --name tiny "${M[@]}" > /dev/null
    "$dtrain" models export tiny -o "$tmp/hf" "${M[@]}" --json > "$tmp/e.json"
    [ "$(jget 'o["format"], o["path"]' < "$tmp/e.json")" = "('hf', '$tmp/hf')" ] || fail "export json"
    for f in config.json model.safetensors tokenizer.json; do
        cmp "$tmp/hf/$f" "$tmp/runs/$exp/base/model/$f" || fail "hf export: $f differs from the run's"
    done
    train lora train.steps=6 ckpt.every_steps=6 model.hf_path="$tmp/runs/$exp/base/model" \
        model.init=pretrained lora.enabled=true lora.rank=4 "lora.targets=[q_proj, v_proj]"
    "$dtrain" models register lora --name tuned "${M[@]}" > /dev/null
    "$dtrain" models export tuned -o "$tmp/peft" "${M[@]}" > /dev/null
    "$dtrain" models export tuned@1 -o "$tmp/merged" --format merged "${M[@]}" > /dev/null
    for f in adapter_config.json adapter_model.safetensors; do
        cmp "$tmp/peft/$f" "$tmp/runs/$exp/lora/adapter/$f" || fail "peft export: $f differs"
    done
    "$dtrain" lora merge --base "$tmp/runs/$exp/base/model" --adapter "$tmp/runs/$exp/lora/adapter" \
        -o "$tmp/merged-ref" > /dev/null
    cmp "$tmp/merged/model.safetensors" "$tmp/merged-ref/model.safetensors" ||
        fail "merged export differs from dtrain lora merge"
    # dtrain's own loaders: the merged folder generates what the base with the adapter does
    gen() { "$dtrain" generate --prompt "Q: What is" --max-new 12 --ignore-eos --threads 1 "$@"; }
    a=$(gen --model "$tmp/merged") b=$(gen --model "$tmp/hf" --adapter "$tmp/peft")
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "generate: merged '$a', base + adapter '$b'"
    rc=0
    "$dtrain" models export tuned -o "$tmp/z" --format hf "${M[@]}" 2> "$tmp/err" || rc=$?
    [ $rc = 1 ] && grep -q "peft .* or merged" "$tmp/err" || fail "hf of a LoRA checkpoint: rc $rc"
    if ! "$py" -c 'import transformers, peft, torch' 2> /dev/null; then
        echo "SKIP: transformers/peft/torch not in $py (the byte checks passed)"
        exit 77
    fi
    "$py" - "$tmp/hf" "$tmp/peft" "$tmp/merged" << 'EOF' || fail "transformers/PEFT checks"
import sys, torch
from transformers import AutoModelForCausalLM
from peft import PeftModel
hf, adapter, merged = sys.argv[1:]
ids = torch.tensor([[1, 5, 9, 42, 7, 100, 3]])
base = AutoModelForCausalLM.from_pretrained(hf, torch_dtype=torch.float32).eval()
with torch.no_grad():
    lb = base(ids).logits
    tuned = PeftModel.from_pretrained(base, adapter).eval()
    lp = tuned(ids).logits
    lm = AutoModelForCausalLM.from_pretrained(merged, torch_dtype=torch.float32).eval()(ids).logits
d = (lp - lm).abs().max().item()
moved = (lp - lb).abs().max().item()
print(f"adapter vs merged logits: max |diff| {d:.3g}; adapter moved them by {moved:.3g}")
assert torch.isfinite(lb).all() and d < 1e-3 and moved > 1e-4, (d, moved)
EOF
    ;;
*) fail "unknown case" ;;
esac
echo "PASS ($case)"
