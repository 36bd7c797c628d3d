"""References for tests/nn/test_llama.c: Hugging Face's own LlamaForCausalLM, random weights,
saved with save_pretrained (safetensors), and its logits, loss and every parameter gradient.

Computed in float64 (the exact answer for these f32 weights); err.<key> is how far the model's
own float32 run is from it (max abs), so the C test can hold dtrain to PyTorch's own accuracy.
Cases: GQA with llama3 rope scaling (untied), and tied embeddings with default rope."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import reflib

CASES = {
    "llama_gqa": dict(vocab_size=320, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 64},
                      bos_token_id=1, eos_token_id=[2, 3]),
    "llama_tied": dict(vocab_size=256, hidden_size=48, intermediate_size=128,
                       num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=6,
                       max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=10000.0,
                       tie_word_embeddings=True, bos_token_id=1, eos_token_id=2),
}
B, T = 2, 37


def run(model, ids):
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    r = {"logits": out.logits.detach(), "loss": out.loss.detach().reshape(1)}
    for k, p in model.named_parameters():
        r["grad." + k] = p.grad
    return r


def main():
    torch.set_num_threads(2)
    d = reflib.out_dir()
    for i, (name, kw) in enumerate(CASES.items()):
        torch.manual_seed(10 + i)
        cfg = LlamaConfig(**kw, attn_implementation="eager")
        m = LlamaForCausalLM(cfg).float()
        with torch.no_grad():  # non-trivial norms
            for k, p in m.named_parameters():
                if "norm" in k:
                    p.uniform_(0.5, 1.5)
        m.save_pretrained(f"{d}/{name}", safe_serialization=True)
        ids = torch.randint(0, kw["vocab_size"], (B, T))
        m64 = LlamaForCausalLM.from_pretrained(f"{d}/{name}", torch_dtype=torch.float64,
                                               attn_implementation="eager")
        r32, r64 = run(m, ids), run(m64, ids)
        out = {"ids": ids}
        for k, v in r64.items():
            out[k] = v.float()
            out["err." + k] = (r32[k].double() - v).abs().max().float().reshape(1)
        # Greedy generation from a short prompt, f32 model (what dtrain runs).
        with torch.no_grad():
            prompt = ids[:1, :5]
            gen = m.generate(prompt, max_new_tokens=12, do_sample=False, eos_token_id=None,
                             pad_token_id=0)
        out["gen_prompt"] = prompt
        out["gen_tokens"] = gen[:, 5:]
        reflib.save(f"{d}/{name}_ref.safetensors", out)


if __name__ == "__main__":
    main()
