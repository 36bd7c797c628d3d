#!/usr/bin/env bash
# The LoRA demo end to end, shortened (scripts/lora_demo.sh: 200 pretraining steps, 100 LoRA
# steps on 2 MPI workers, cl100k_base tokens): finetuning the exported base on the unseen
# `definitions` instruction pairs must lower the validation loss on their val split by at least
# MARGIN nats: 0.3, the perplexity falls by a quarter or more. Set for the earlier 512-token model
# (0.56 measured there) and kept for this 6.6M cl100k one: measured 0.50 here (7.29 -> 6.79),
# 0.70 with the full demo's steps (6.99 -> 6.28; repeated runs gave the same losses). The run
# must leave committed checkpoints and a PEFT adapter, and generating from the merged folder must
# give the same text as generating with --adapter.
# The exported tokenizer (examples/llama-small/make_tokenizer.py) must agree with dtrain's
# tiktoken-exact import: Hugging Face `tokenizers`, loading the merged folder's tokenizer.json,
# must encode the text of every imported document (decoded from its ids) to the same ids, chat
# tokens included; and transformers' AutoTokenizer, loading the merged folder, must turn every
# definitions.jsonl pair through its chat template into exactly the documents `dtrain data import
# jsonl` wrote; with AutoModelForCausalLM it must give `dtrain generate`'s logits for a chat prompt.
#   lora_e2e.sh BUILD_DIR WORK_DIR [VENV_PYTHON]
set -u
build=$1 work=$2
python=${3:-${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python}
repo=$(cd "$(dirname "$0")/../.." && pwd)
MARGIN=0.3
rm -rf "$work"
LORA_DEMO_DIR=$work LORA_DEMO_PRETRAIN_STEPS=200 LORA_DEMO_STEPS=100 \
  "$repo/scripts/lora_demo.sh" "$build" || { echo "FAIL: lora_demo.sh exited $?"; exit 1; }
s=$work/summary.txt
[ -f "$s" ] || { echo "FAIL: no $s"; exit 1; }
get() { sed -n "s/^$1=//p" "$s"; }
base=$(get base_val_loss) adapted=$(get adapted_val_loss)
echo "base val loss $base, adapted $adapted (must be <= base - $MARGIN)"
awk -v b="$base" -v a="$adapted" -v m="$MARGIN" \
  'BEGIN { exit !(b + 0 > 0 && a + 0 > 0 && a + 0 <= b - m) }' ||
  { echo "FAIL: finetuning did not lower the val loss by $MARGIN"; exit 1; }
[ "$(get merged_matches_adapter)" = 1 ] ||
  { echo "FAIL: generate on the merged folder differs from generate --adapter"; exit 1; }
run=$work/runs/llama-small-lora-definitions/finetune
for c in step-000000050 step-000000100; do
  [ -f "$run/checkpoints/$c/trainer_state.json" ] || { echo "FAIL: no committed $c"; exit 1; }
done
for f in adapter_config.json adapter_model.safetensors; do
  [ -s "$run/adapter/$f" ] || { echo "FAIL: no $run/adapter/$f"; exit 1; }
done
for f in model.safetensors config.json tokenizer.json tokenizer_config.json; do
  [ -s "$work/merged/$f" ] || { echo "FAIL: no $work/merged/$f"; exit 1; }
done

"$python" -c 'import tokenizers, transformers' ||
  { echo "FAIL: $python lacks tokenizers/transformers (scripts/setup-venv.sh)"; exit 1; }
d=$work/data
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$python" - "$work/merged" "$d/definitions.jsonl" \
  "$d/definitions/train" "$d/definitions/val" "$d/fortunes-nodefs/train" \
  "$d/fortunes-nodefs/val" <<'PY' || { echo "FAIL: the exported tokenizer differs from dtrain's"; exit 1; }
import collections, glob, json, os, struct, sys
from tokenizers import Tokenizer
from transformers import AutoTokenizer

model, jsonl, dirs = sys.argv[1], sys.argv[2], sys.argv[3:]

def documents(d):  # the token ids of each document of a dtrain dataset split (shard.h's layout)
    for path in sorted(glob.glob(os.path.join(d, "shard-*.dts"))):
        b = open(path, "rb").read()
        assert b[:8] == b"DTSHARD\x1a", path
        sec = {}
        for i in range(struct.unpack_from("<I", b, 56)[0]):
            sid, _, off, _, count = struct.unpack_from("<IIQQQ", b, 64 + 32 * i)
            sec[sid] = (off, count)
        toks = struct.unpack_from("<%dI" % sec[3][1], b, sec[3][0])
        offs = struct.unpack_from("<%dQ" % sec[4][1], b, sec[4][0])
        for k in range(len(offs) - 1):
            yield list(toks[offs[k]:offs[k + 1]])

tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
n = n_tok = 0
for d in dirs:
    for ids in documents(d):
        text = tok.decode(ids, skip_special_tokens=False)
        got = tok.encode(text, add_special_tokens=False).ids
        if got != ids:
            sys.exit(f"{d}: {text!r}\n  dtrain {ids}\n  HF     {got}")
        n, n_tok = n + 1, n_tok + len(ids)
assert n > 10000, n
print(f"HF tokenizers = dtrain data import on {n} documents ({n_tok} tokens)")

auto = AutoTokenizer.from_pretrained(model)
docs = collections.Counter(tuple(ids) for d in dirs[:2] for ids in documents(d))
pairs = 0
for line in open(jsonl, encoding="utf-8"):
    r = json.loads(line)
    ids = auto.apply_chat_template([{"role": "user", "content": r["prompt"]},
                                    {"role": "assistant", "content": r["response"]}])
    ids = tuple(ids["input_ids"] if hasattr(ids, "keys") else ids)
    if docs[ids] <= 0:
        sys.exit(f"AutoTokenizer's chat template gives a document dtrain did not write: {r}")
    docs[ids] -= 1
    pairs += 1
if sum(docs.values()):
    sys.exit(f"{sum(docs.values())} imported documents are no definitions.jsonl pair")
print(f"AutoTokenizer chat template = dtrain data import jsonl on all {pairs} pairs")
PY

# transformers runs the merged folder as a whole (AutoTokenizer + AutoModelForCausalLM): the
# logits after a chat prompt must be dtrain generate's (which tokenizes with dtrain's loader)
prompt=$'<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nDefine: Monday<|eot_id|>'
prompt+=$'<|start_header_id|>assistant<|end_header_id|>\n\n'
"$build/dtrain" generate --model "$work/merged" --prompt "$prompt" --max-new 1 \
  --dump-logits "$work/logits.safetensors" >/dev/null || { echo "FAIL: dtrain generate"; exit 1; }
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=2 "$python" - "$work/merged" "$prompt" \
  "$work/logits.safetensors" <<'PY' || { echo "FAIL: transformers disagrees with dtrain generate"; exit 1; }
import sys
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer
model, prompt, dump = sys.argv[1:]
tok = AutoTokenizer.from_pretrained(model)
ids = tok(prompt, add_special_tokens=False, return_tensors="pt").input_ids
lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
with torch.no_grad():
    ref = lm(ids).logits[0, -1]
got = load_file(dump)["logits"]
err = (got - ref).abs().max().item()
print(f"transformers on {model}: {ids.shape[1]} prompt tokens, last logits max |diff| {err:.2e}")
sys.exit(0 if got.shape == ref.shape and err <= 1e-3 * max(1.0, ref.abs().max().item()) else 1)
PY
echo "OK: LoRA lowered the definitions val loss from $base to $adapted"
