#!/usr/bin/env bash
# Config errors: each exits with code 2 and one line naming the key, before any training step.
#   cli_errors.sh DTRAIN REPO DATA_DIR [CASE]     (CASE: run only the case with that tag)
set -u
dtrain=$1 repo=$2 data=$3 only=${4:-}
ex=$repo/examples/resnet18-fmnist.yaml
ok=0 bad=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base=(data.train=$data/fmnist/train data.val= output.dir=$tmp train.steps=2 schedule.warmup_steps=0)

case_() { # tag, expected substring, args...
  local name=$1 want=$2; shift 2
  [[ -n "$only" && "$only" != "$name" ]] && return 0
  local out rc
  out=$("$dtrain" train "$@" 2>&1); rc=$?
  if [[ $rc -eq 2 && "$out" == *"$want"* && "$out" != *"step "* && $(printf '%s\n' "$out" | wc -l) -eq 1 ]]; then
    ok=$((ok + 1))
  else
    bad=$((bad + 1)); echo "FAIL $name: rc=$rc, want '$want' in: $out"
  fi
}

printf 'optim:\n  weight_decy: 0.1\n' > "$tmp/typo.yaml"
printf 'optim:\n  lr: fast\n' > "$tmp/type.yaml"
printf 'model:\n  kind: resnet\n  depth: 17\n' > "$tmp/depth.yaml"
printf 'train: [1, 2\n' > "$tmp/broken.yaml"
case_ typo "did you mean 'optim.weight_decay'" "$tmp/typo.yaml" "${base[@]}"
case_ unknown-override "optim.lrr" "$ex" "${base[@]}" optim.lrr=0.1
case_ wrong-type "optim.lr" "$tmp/type.yaml" "${base[@]}"
case_ out-of-range "train.steps" "$ex" "${base[@]}" train.steps=-5
case_ bad-enum "optim.name" "$ex" "${base[@]}" optim.name=adam
case_ bad-depth "depth" "$tmp/depth.yaml" "${base[@]}"
case_ malformed-yaml "broken.yaml" "$tmp/broken.yaml"
case_ missing-config "nope.yaml" "$tmp/nope.yaml"
case_ missing-data "data.train" "$ex" "${base[@]}" data.train=$tmp/no-such-data
case_ channels "model.in_channels" "$ex" "${base[@]}" model.in_channels=3
case_ classes "model.num_classes" "$ex" "${base[@]}" model.num_classes=5
case_ model-data-kind "model.kind" "$ex" "${base[@]}" model.kind=llama model.hf_path=$repo/examples/llama-tiny
case_ lora-resnet "lora" "$ex" "${base[@]}" lora.enabled=true
# lora.shard_base: only with LoRA, and not with a graph rebuilt for new batch shares
case_ shard-base-no-lora "lora.shard_base is true but lora.enabled is false" "$ex" "${base[@]}" lora.shard_base=true
case_ shard-base-auto-shares "lora.shard_base is true but dist.batch_shares is auto" \
  "$repo/examples/llama-tiny-fortunes.yaml" "${base[@]}" lora.enabled=true lora.share_base=false \
  lora.shard_base=true dist.batch_shares=auto
# the photo transform keys
case_ crop-scale "data.crop_scale: need two numbers [min, max] with 0 < min <= max <= 1" "$ex" "${base[@]}" data.crop_scale=0.5,1.5
case_ crop-ratio "data.crop_ratio: item 2 'x' is not a number" "$ex" "${base[@]}" data.crop_ratio=3/4,x
case_ jitter "data.jitter: need three numbers >= 0" "$ex" "${base[@]}" data.jitter=0.4,0.4
case_ mean-std "data.mean has 3 numbers, data.std 0" "$ex" "${base[@]}" data.mean=0.5,0.5,0.5
case_ std-zero "data.std: item 2 is 0, not > 0" "$ex" "${base[@]}" data.mean=0,0,0 data.std=1,0,1
case_ resize "data.resize 200 is below the image size 224" "$ex" "${base[@]}" data.image_size=224 data.resize=200
case_ label-smoothing "train.label_smoothing" "$ex" "${base[@]}" train.label_smoothing=1
# a short run with the example's warmup: the message says what to set
case_ short-warmup "e.g. schedule.warmup_steps=2, or a later end, schedule.total_steps=51" "$ex" "${base[@]}" train.steps=20 schedule.warmup_steps=50
# bf16 on a CPU without bf16 instructions and without the test hook (DT_CPU_BF16=none: as such
# a CPU, whatever this one has)
DT_CPU_BF16=none case_ bf16-no-cpu "train.precision: bf16: this CPU has no bf16 instructions" "$ex" "${base[@]}" train.precision=bf16
# train.device: a bad spec; cuda without a GPU, without a CUDA build, or (with a GPU) before the
# CUDA engine exists: each refused with one line naming train.device
case_ device-spec "train.device: 'gpu' is not a device" "$ex" "${base[@]}" train.device=gpu
case_ device-cuda "train.device: cuda" "$ex" "${base[@]}" train.device=cuda
case_ device-cuda-index "train.device: cuda:7: " "$ex" "${base[@]}" train.device=cuda:7
echo "cli_errors: $ok passed, $bad failed"
[[ $bad -eq 0 && $ok -gt 0 ]]
