#!/usr/bin/env bash
# Sizes from config.json are checked against the weights' safetensors headers before anything is
# allocated from them: a config.json that claims a huge model over a small weights file is
# refused with config.json's field, the tensor and the weights file named -- not after gigabytes
# (train) or terabytes (generate) of allocation. Every run here is under an address-space limit
# (ulimit -v, 2 GiB) so that code allocating first fails with "out of memory" instead.
#   config_shapes.sh DTRAIN REPO DATA_DIR
set -u
dtrain=$1 repo=$2 data=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
# AddressSanitizer reserves terabytes of address space: there the cap is left out, and the
# messages alone (no "out of memory") show that nothing was allocated from the claims.
if ldd "$dtrain" 2>/dev/null | grep -q libasan; then
  limited() { timeout 120 "$@"; }
else
  limited() { (ulimit -v $((2 << 20)); timeout 120 "$@"); }
fi
cfg=$repo/examples/llama-tiny-fortunes.yaml
base=(data.train=$data/fortunes/train data.val= data.batch=2 data.seq_len=32 train.steps=1
      schedule.warmup_steps=0 train.threads=1 output.dir=$tmp/runs)
# A real tiny Llama folder (config.json + model.safetensors): one step of training, exported.
"$dtrain" train "$cfg" "${base[@]}" output.run_name=src > "$tmp/log" 2>&1 ||
  { cat "$tmp/log"; exit 1; }
good=$tmp/runs/llama-tiny-fortunes/src/model
[[ -f $good/model.safetensors && -f $good/config.json ]] || { echo "no exported model"; exit 1; }
resize() { # folder, then sed expressions for config.json
  local dir=$1; shift
  mkdir -p "$dir" && cp "$good/model.safetensors" "$dir/"
  sed "$@" "$good/config.json" > "$dir/config.json"
}

# 1. train, model.init=pretrained: vocab 262144 x hidden 1024 claimed over the 0.8M-parameter file
#    (4.5 GB of parameters, gradients and AdamW state before).
resize "$tmp/claim" -e 's/"vocab_size":[[:space:]]*[0-9]*/"vocab_size": 262144/' \
                    -e 's/"hidden_size":[[:space:]]*[0-9]*/"hidden_size": 1024/'
out=$(limited "$dtrain" train "$cfg" "${base[@]}" model.init=pretrained model.hf_path="$tmp/claim" \
      output.run_name=claim 2>&1); rc=$?
[[ $rc -eq 2 && $(printf '%s\n' "$out" | wc -l) -eq 1 ]] || bad "train: exit $rc, want 2 and one line: $out"
for s in "model.hf_path" "config.json: vocab_size 262144" "model.embed_tokens.weight" \
         "$tmp/claim/model.safetensors" "[512, 128]"; do
  [[ "$out" == *"$s"* ]] || bad "train: '$s' missing in: $out"
done
[[ "$out" != *"out of memory"* ]] || bad "train: allocated before checking: $out"
# the same folder with its own config.json still trains from the weights (nothing refused wrongly)
out=$(limited "$dtrain" train "$cfg" "${base[@]}" model.init=pretrained model.hf_path="$good" \
      output.run_name=ok output.export=false 2>&1) || bad "train: the good folder was refused: $out"

# 2. generate: every size 1048576 (a 61 TB allocation before, an abort under ASan).
resize "$tmp/huge" -e 's/"vocab_size":[[:space:]]*[0-9]*/"vocab_size": 1048576/' \
                   -e 's/"hidden_size":[[:space:]]*[0-9]*/"hidden_size": 1048576/' \
                   -e 's/"intermediate_size":[[:space:]]*[0-9]*/"intermediate_size": 1048576/'
out=$(limited "$dtrain" generate --model "$tmp/huge" --ids 1,2 --max-new 1 2>&1); rc=$?
[[ $rc -ne 0 && "$out" == *"config.json: vocab_size 1048576"* && "$out" == *"$tmp/huge/model.safetensors"* ]] ||
  bad "generate: exit $rc: $out"
[[ "$out" != *"out of memory"* ]] || bad "generate: allocated before checking: $out"
# a layer count the weights do not have names num_hidden_layers
resize "$tmp/deep" -e 's/"num_hidden_layers":[[:space:]]*[0-9]*/"num_hidden_layers": 4096/'
out=$(limited "$dtrain" generate --model "$tmp/deep" --ids 1,2 --max-new 1 2>&1); rc=$?
[[ $rc -ne 0 && "$out" == *"num_hidden_layers 4096"* && "$out" != *"out of memory"* ]] ||
  bad "generate layers: exit $rc: $out"
# a KV cache beyond the machine (from the command line): refused naming it, nothing allocated
out=$(limited "$dtrain" generate --model "$good" --ids 1,2 --max-new 1 --max-seq 2000000000 2>&1); rc=$?
[[ $rc -ne 0 && "$out" == *"KV cache of 2000000000 positions"*"--max-seq"* ]] ||
  bad "generate cache: exit $rc: $out"
out=$(limited "$dtrain" generate --model "$good" --ids 1,2 --max-new 2 2>&1) ||
  bad "generate: the good folder was refused: $out"
[[ $fail -eq 0 ]] && echo "config_shapes: ok"
exit $fail
