"""A Llama trained and exported by `dtrain train` (a Hugging Face folder) gives the same logits
and the same greedy continuation in transformers as in dtrain.
    check_trained_llama.py MODEL_DIR DTRAIN"""
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import LlamaForCausalLM

model_dir, dtrain = sys.argv[1], sys.argv[2]
m = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
ids = [5, 77, 300, 12, 499, 256, 31, 8, 102, 64]
with tempfile.TemporaryDirectory() as d:
    out = subprocess.run([dtrain, "generate", "--model", model_dir, "--ids",
                          ",".join(map(str, ids)), "--max-new", "16", "--ignore-eos",
                          "--dump-logits", f"{d}/logits.safetensors"],
                         check=True, capture_output=True, text=True).stdout.strip()
    ours = load_file(f"{d}/logits.safetensors")["logits"]
with torch.no_grad():
    ref = m(torch.tensor([ids])).logits[0, -1]
    gen = m.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False, eos_token_id=None,
                     pad_token_id=0)[0, len(ids):].tolist()
diff = (ours - ref).abs().max().item()
toks = [int(x) for x in out.split(",")]
print(f"max |logit diff| {diff:.3g}; greedy dtrain {toks} transformers {gen}")
sys.exit(0 if diff < 1e-4 and toks == gen else 1)
