#!/usr/bin/env bash
# `dtrain lora merge` / `dtrain generate --adapter` refusals: each case must exit with the given
# status, print exactly one line on stderr naming the problem, and leave no output folder (and an
# untouched base where the output was aimed at it).
#   lora_cli_errors.sh DTRAIN REF_DIR WORK_DIR CASE
# REF_DIR holds ref_lora.py's lora_gqa / lora_tied bases and adapters (cases marked * need them).
set -u
dtrain=$1 ref=$2 work=$3/$4 case=$4
rm -rf "$work" && mkdir -p "$work"
out=$work/merged
expect() { # STATUS PATTERN CMD...
  local want=$1 pat=$2
  shift 2
  "$@" >"$work/stdout" 2>"$work/stderr"
  local rc=$?
  local lines
  lines=$(wc -l <"$work/stderr")
  echo "exit $rc; stderr: $(cat "$work/stderr")"
  [ "$rc" = "$want" ] || { echo "FAIL: exit $rc, expected $want"; exit 1; }
  [ "$lines" = 1 ] || { echo "FAIL: $lines lines on stderr, expected 1"; exit 1; }
  grep -q -- "$pat" "$work/stderr" || { echo "FAIL: stderr does not mention '$pat'"; exit 1; }
  [ ! -e "$out" ] || { echo "FAIL: $out was created"; exit 1; }
}
adapter_with() { # SRC_ADAPTER PYTHON_EXPR_ON_cfg -> $work/adapter (a copy, config edited)
  cp -r "$1" "$work/adapter"
  python3 -c "import json,sys; p=sys.argv[1]; cfg=json.load(open(p)); $2; json.dump(cfg, open(p,'w'))" \
    "$work/adapter/adapter_config.json"
}
case $case in
no-output)
  expect 2 "need --base, --adapter and -o" "$dtrain" lora merge --base "$work" --adapter "$work" ;;
bad-subcommand)
  expect 2 "unknown subcommand 'split'" "$dtrain" lora split ;;
missing-base)
  expect 2 "base $work/nope: no such folder" \
    "$dtrain" lora merge --base "$work/nope" --adapter "$work" -o "$out" ;;
missing-adapter)
  mkdir -p "$work/base" && echo '{}' >"$work/base/config.json"
  expect 2 "adapter $work/nope: no such folder" \
    "$dtrain" lora merge --base "$work/base" --adapter "$work/nope" -o "$out" ;;
not-an-adapter) # *
  expect 2 "adapter_config.json: no such file" \
    "$dtrain" lora merge --base "$ref/lora_gqa" --adapter "$ref/lora_gqa" -o "$out" ;;
other-base) # * lora_tied's adapter (hidden 48) on lora_gqa (hidden 64)
  expect 2 "lora_A.weight' has shape \[8, 48\], the base needs \[8, 64\]" \
    "$dtrain" lora merge --base "$ref/lora_gqa" --adapter "$ref/lora_tied_adapter" -o "$out" ;;
extra-tensors) # * the file has adapters on modules the config does not target
  adapter_with "$ref/lora_tied_adapter" "cfg['target_modules']=['q_proj']"
  expect 2 "is not an adapter of the base's targeted projections" \
    "$dtrain" lora merge --base "$ref/lora_tied" --adapter "$work/adapter" -o "$out" ;;
rslora) # * alpha/sqrt(r) scaling is not implemented: refused, not merged with alpha/r
  adapter_with "$ref/lora_gqa_adapter" "cfg['use_rslora']=True"
  expect 2 "use_rslora" \
    "$dtrain" lora merge --base "$ref/lora_gqa" --adapter "$work/adapter" -o "$out" ;;
claimed-base) # * the base's config.json claims a 262144-token vocabulary over its weights:
  # refused from the headers before the graph is allocated from the claim
  cp -r "$ref/lora_gqa" "$work/base"
  python3 -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['vocab_size']=262144; json.dump(c, open(p,'w'))" \
    "$work/base/config.json"
  expect 2 "config.json: vocab_size 262144 gives tensor 'model.embed_tokens.weight'" \
    "$dtrain" lora merge --base "$work/base" --adapter "$ref/lora_gqa_adapter" -o "$out" ;;
output-is-base) # *
  cp -r "$ref/lora_gqa" "$work/base"
  sum=$(cat "$work/base"/* | md5sum)
  out=$work/none # the output is the existing base: check it is unchanged instead
  expect 2 "is the base folder" \
    "$dtrain" lora merge --base "$work/base" --adapter "$ref/lora_gqa_adapter" -o "$work/base/"
  [ "$(cat "$work/base"/* | md5sum)" = "$sum" ] || { echo "FAIL: the base changed"; exit 1; } ;;
untie) # * a tied base whose adapter trains embed_tokens without ensure_weight_tying (PEFT unties)
  adapter_with "$ref/lora_mts_tied_adapter" "cfg['ensure_weight_tying']=False"
  expect 2 "key ensure_weight_tying" \
    "$dtrain" lora merge --base "$ref/lora_mts_tied" --adapter "$work/adapter" -o "$out" ;;
some-layers) # * PEFT's suffix match would train layer 0's input_layernorm only
  adapter_with "$ref/lora_mts_adapter" "cfg['modules_to_save']=['embed_tokens','layers.0.input_layernorm']"
  expect 2 "selects the input_layernorm of 1 of 2 layers" \
    "$dtrain" lora merge --base "$ref/lora_mts" --adapter "$work/adapter" -o "$out" ;;
config-module) # * lora.modules_to_save: one line naming the key and the allowed names
  printf 'model:\n  kind: llama\n  hf_path: %s\nlora:\n  enabled: true\n  modules_to_save: [embed_tokens, mlp]\n' \
    "$ref/lora_gqa" >"$work/c.yaml"
  expect 2 "lora.modules_to_save: list item 'mlp' is not one of embed_tokens, input_layernorm, post_attention_layernorm, norm, model.norm, lm_head" \
    "$dtrain" plan "$work/c.yaml" ;;
generate-other-base) # *
  expect 1 "has shape" "$dtrain" generate --model "$ref/lora_gqa" \
    --adapter "$ref/lora_tied_adapter" --ids 1,2,3 ;;
*)
  echo "unknown case $case"
  exit 2 ;;
esac
echo "OK: $case"
