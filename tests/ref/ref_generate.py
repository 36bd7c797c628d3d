"""References for tests/nn/test_generate.c: Hugging Face's own LlamaForCausalLM (random weights,
saved with save_pretrained) and its greedy generate(do_sample=False) tokens.

Cases (the configs of ref_llama.py, own seeds and folder names):
  gen_gqa   GQA (4 heads, 2 kv heads) + llama3 rope scaling, untied lm_head
  gen_tied  tied embeddings, default rope
  gen_gqa_eos  gen_gqa's weights with eos_token_id set to a token the greedy path produces, so
               generate stops there (tests stopping at eos)

Greedy decoding is only well defined where the top two logits differ by more than the
arithmetic noise of two float32 implementations (~1e-6 here). The prompt is chosen (first of a
fixed sequence of seeds) so that every step's top-1 / top-2 gap is above MIN_GAP and the output
has at least 10 distinct tokens; the smallest gap is saved as min_gap. initializer_range is 0.3
(not 0.02) so that the random model does not just repeat one token."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import reflib
from ref_llama import CASES

N_PROMPT, N_NEW, MIN_GAP = 6, 40, 1e-4


def greedy(model, prompt, n_new, eos):
    """HF greedy tokens (after the prompt) and the smallest top-1/top-2 logit gap on the way."""
    model.generation_config.eos_token_id = eos
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=n_new, do_sample=False, eos_token_id=eos,
                             pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    gaps = [(s[0].topk(2).values[0] - s[0].topk(2).values[1]).item() for s in out.scores]
    return out.sequences[0, prompt.shape[1]:], min(gaps)


def main():
    torch.set_num_threads(2)
    d = reflib.out_dir()
    for i, (base, kw) in enumerate(CASES.items()):
        name = base.replace("llama_", "gen_")
        torch.manual_seed(100 + i)
        cfg = LlamaConfig(**kw, attn_implementation="eager", initializer_range=0.3)
        m = LlamaForCausalLM(cfg).float().eval()
        with torch.no_grad():
            for k, p in m.named_parameters():
                if "norm" in k:
                    p.uniform_(0.5, 1.5)
        m.save_pretrained(f"{d}/{name}", safe_serialization=True)
        g = torch.Generator().manual_seed(7)
        for attempt in range(50):
            prompt = torch.randint(0, kw["vocab_size"], (1, N_PROMPT), generator=g)
            toks, gap = greedy(m, prompt, N_NEW, None)
            if gap > MIN_GAP and len(set(toks.tolist())) >= 10:
                break
        else:
            raise SystemExit(f"{name}: no prompt with varied tokens and top-2 gaps above {MIN_GAP}")
        print(f"{name}: prompt {prompt.tolist()} -> {toks.tolist()} (min gap {gap:.2e}, "
              f"attempt {attempt})")
        out = {"prompt": prompt[0], "tokens": toks, "min_gap": torch.tensor([gap])}
        if name == "gen_gqa":
            # eos: the token of step k, not produced before step k (first occurrence).
            seq = toks.tolist()
            k = max(j for j in range(2, 21) if seq[j] not in seq[:j])
            eos_cfg = m.config
            eos_cfg.eos_token_id = seq[k]
            m.generation_config.eos_token_id = seq[k]
            m.save_pretrained(f"{d}/gen_gqa_eos", safe_serialization=True)
            m2 = LlamaForCausalLM.from_pretrained(f"{d}/gen_gqa_eos", attn_implementation="eager")
            toks_eos, _ = greedy(m2, prompt, N_NEW, seq[k])
            assert toks_eos.tolist() == seq[:k + 1], (toks_eos.tolist(), seq[:k + 1])
            out["tokens_eos"] = toks_eos
            print(f"gen_gqa_eos: eos {seq[k]} -> {toks_eos.tolist()}")
        reflib.save(f"{d}/{name}_ref.safetensors", out)


if __name__ == "__main__":
    main()
