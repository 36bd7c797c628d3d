"""Writes a Llama-3.1-8B-Instruct-shaped Hugging Face folder with random weights, for the 8B
LoRA evaluation (bench/eval_llama8b.sh): that model's config.json (examples/llama3.1-8b, as the
model ships it), bf16 weights (matrices N(0, 0.02), norms 1 + N(0, 0.02)) in four safetensors
files with their index, as the model is stored, and a tokenizer with Llama 3's chat tokens
(cl100k_base in Hugging Face's form plus the chat tokens at the ids `dtrain data import jsonl`
gives them: examples/llama-small/make_tokenizer.py). The weights are random: the run measures
time, memory and exactness, not what the model learns.

    make_llama8b.py OUT_DIR [--layers N]

--layers N keeps the 8B widths with N decoder layers (a quick check of the script; the full
model is 32). One tensor is generated at a time (the largest, the 128256 x 4096 embedding, is
2 GiB as f32 before the cast), so the memory needed is about one file's worth (4-5 GiB)."""
import argparse
import json
import os
import subprocess
import sys

import torch
from safetensors.torch import save_file

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(here)
ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--layers", type=int, default=0)
a = ap.parse_args()
with open(os.path.join(repo, "examples", "llama3.1-8b", "config.json"), encoding="utf-8") as f:
    cfg = json.load(f)
if a.layers > 0:
    cfg["num_hidden_layers"] = a.layers
h, f_, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
hd = h // cfg["num_attention_heads"]
kv = cfg["num_key_value_heads"] * hd
V = cfg["vocab_size"]
os.makedirs(a.out, exist_ok=True)

# [(name, shape)] in the order the model's files hold them; each decoder layer in one file
names = [("model.embed_tokens.weight", (V, h))]
for i in range(L):
    p = f"model.layers.{i}."
    names += [(p + "self_attn.q_proj.weight", (h, h)), (p + "self_attn.k_proj.weight", (kv, h)),
              (p + "self_attn.v_proj.weight", (kv, h)), (p + "self_attn.o_proj.weight", (h, h)),
              (p + "mlp.gate_proj.weight", (f_, h)), (p + "mlp.up_proj.weight", (f_, h)),
              (p + "mlp.down_proj.weight", (h, f_)), (p + "input_layernorm.weight", (h,)),
              (p + "post_attention_layernorm.weight", (h,))]
names += [("model.norm.weight", (h,)), ("lm_head.weight", (V, h))]
total = sum(2 * torch.Size(s).numel() for _, s in names)
n_files = 4 if L >= 4 else 1
per_file = total / n_files

g = torch.Generator().manual_seed(8)
weight_map, part, part_bytes, k = {}, {}, 0, 1


def flush(last):
    global part, part_bytes, k
    fname = f"model-{k:05d}-of-{n_files:05d}.safetensors"
    save_file(part, os.path.join(a.out, fname), metadata={"format": "pt"})
    for n in part:
        weight_map[n] = fname
    print(f"{fname}: {len(part)} tensors, {part_bytes / 2**30:.2f} GiB", flush=True)
    part, part_bytes = {}, 0
    if not last:
        k += 1


for n, s in names:
    t = torch.randn(s, generator=g) * 0.02
    if len(s) == 1:
        t += 1
    part[n] = t.to(torch.bfloat16)
    part_bytes += 2 * t.numel()
    del t
    # a file ends after a whole layer (its post-attention norm) once it holds its share
    # (each of the first n_files - 1 files takes at least its share, so the last is not empty)
    if k < n_files and part_bytes >= per_file and n.endswith("post_attention_layernorm.weight"):
        flush(False)
flush(True)
with open(os.path.join(a.out, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
with open(os.path.join(a.out, "config.json"), "w", encoding="utf-8") as f:
    json.dump(cfg, f, indent=2)
subprocess.run([sys.executable, os.path.join(repo, "examples", "llama-small", "make_tokenizer.py"),
                a.out], check=True)
print(f"{a.out}: {L} layers, {total / 2**30:.2f} GiB of bf16 weights in {k} files")
