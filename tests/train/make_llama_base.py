"""A LoRA test base: a 2-layer Llama (hidden 512, mlp 1408, 8 heads, 4 kv heads, untied
embeddings) with random weights as a Hugging Face folder (config.json + model.safetensors),
matrices bf16 (N(0, 0.02)).

    make_llama_base.py VOCAB SEED NORMS DIR [F32_DIR]

NORMS: ones-f32 (the norms all ones, stored f32) or random-bf16 (1 + N(0, 0.1), stored bf16).
F32_DIR: the same weights again, every tensor stored f32 (a base that needs a conversion)."""
import json
import sys

import torch
from safetensors.torch import save_file

V, seed, norms, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
h, f, L, kv = 512, 1408, 2, 256
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V,
       "hidden_size": h, "intermediate_size": f, "num_hidden_layers": L,
       "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 512,
       "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": False,
       "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "bfloat16"}
g = torch.Generator().manual_seed(seed)
shapes = {"model.embed_tokens.weight": (V, h), "lm_head.weight": (V, h), "model.norm.weight": (h,)}
for i in range(L):
    p = f"model.layers.{i}."
    shapes.update({p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kv, h),
                   p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, h),
                   p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h),
                   p + "mlp.down_proj.weight": (h, f), p + "input_layernorm.weight": (h,),
                   p + "post_attention_layernorm.weight": (h,)})
sd = {}
for k, s in shapes.items():
    if len(s) > 1:
        sd[k] = (torch.randn(s, generator=g) * 0.02).to(torch.bfloat16)
    elif norms == "ones-f32":
        sd[k] = torch.ones(s)
    else:
        sd[k] = (1 + 0.1 * torch.randn(s, generator=g)).to(torch.bfloat16)
for d, conv in ((out, lambda t: t), (sys.argv[5] if len(sys.argv) > 5 else None, lambda t: t.float())):
    if d is None:
        continue
    json.dump(cfg, open(f"{d}/config.json", "w"))
    save_file({k: conv(v).contiguous() for k, v in sd.items()}, f"{d}/model.safetensors")
