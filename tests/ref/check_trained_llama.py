"""A Llama trained and exported by `dtrain train` (a Hugging Face folder) gives the same logits
and the same greedy continuation in transformers as in dtrain.
With TOKENIZER (the file the training data was imported with): the export carries it as
tokenizer.json, byte for byte, so `dtrain generate --model MODEL_DIR --prompt ...` needs no
--tokenizer, and Hugging Face's tokenizers library reads it.
    check_trained_llama.py MODEL_DIR DTRAIN [TOKENIZER]"""
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
ok = diff < 1e-4 and toks == gen
if len(sys.argv) > 3:
    from tokenizers import Tokenizer
    exported = os.path.join(model_dir, "tokenizer.json")
    same = os.path.exists(exported) and open(exported, "rb").read() == open(sys.argv[3], "rb").read()
    r = subprocess.run([dtrain, "generate", "--model", model_dir, "--prompt", "Q: Why",
                        "--max-new", "8", "--ignore-eos"], capture_output=True, text=True)
    hf = Tokenizer.from_file(exported).encode("Q: Why").ids if same else []
    print(f"exported tokenizer.json identical: {same}; HF tokenizers ids {hf}; "
          f"generate --prompt: exit {r.returncode} {r.stdout.strip()[:60]!r} {r.stderr.strip()[:200]}")
    ok = ok and same and len(hf) > 0 and r.returncode == 0 and r.stdout.startswith("Q: Why")
sys.exit(0 if ok else 1)
