#!/usr/bin/env bash
# LoRA finetuning throughput of the 56M Llama (seq 256, batch 8, r=8 on q_proj and v_proj, AdamW
# on the adapters, 2 threads) in one run: dtrain (frozen bf16 base) beside Hugging Face
# transformers + PEFT (PyPI PyTorch, f32 base as PEFT users run it on CPU) and the hand-written
# PyTorch LoRA of bench/peers/bench_llama.py (Debian's PyTorch 1.13). Same
# tuned environment for every side (bench_models.sh).
#   bash bench/bench_lora.sh [BUILD_DIR] [STEPS]
set -uo pipefail
. "$(dirname "$0")/header.inc"
bench_header
build=${1:-build}
steps=${2:-4}
here=$(cd "$(dirname "$0")" && pwd)
venv_py=${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python
tuned=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE MALLOC_MMAP_MAX_=0
       MALLOC_TRIM_THRESHOLD_=100000000000 GLIBC_TUNABLES=glibc.malloc.hugetlb=1 DT_THREADS=2)
rate() { grep -oE 'tok_per_s=[0-9.]+' | head -1 | cut -d= -f2; }
log=/tmp/bench_lora.log
: > "$log"
o=$("${tuned[@]}" DT_BENCH_LORA=8 "$build/bench/bench_models" llama 512 8 8 4 1408 32000 256 8 "$steps" 1 2>&1 | tee -a "$log" | rate)
peft=$("${tuned[@]}" "$venv_py" "$here/peers/bench_lora_peft.py" --threads 2 --steps "$steps" 2>&1 | tee -a "$log" | rate)
t13=$("${tuned[@]}" /usr/bin/python3 "$here/peers/bench_llama.py" --threads 2 --lora 8 --steps "$steps" --warmup 1 2>&1 | tee -a "$log" | rate)
best=$peft
if [[ -n "$t13" && ( -z "$best" || $(echo "$t13 > $best" | bc) == 1 ) ]]; then best=$t13; fi
ratio=n/a
[[ -n "$o" && -n "$best" ]] && ratio=$(echo "scale=2; $o / $best" | bc)
echo "| LoRA finetuning, Llama 56M seq256 b8, r=8 q,v (tok/s) | dtrain | transformers+PEFT (PyPI) | PyTorch 1.13 hand-written LoRA | dtrain / best |"
echo "|---|---|---|---|---|"
echo "| 2 threads, tuned env | ${o:-fail} | ${peft:-fail} | ${t13:-fail} | $ratio |"
echo "(raw output: $log)"
