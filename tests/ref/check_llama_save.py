"""Checks the Hugging Face folders that dtrain's dt_llama_save_hf wrote (tests/nn/test_generate.c):
transformers' LlamaForCausalLM.from_pretrained loads each with no missing, unexpected or
mismatched tensors, every tensor equals the original save_pretrained folder's, the configs agree
(rope scaling, tying, eos/bos), and the logits on random ids match the original's (max abs diff
< 1e-5; the weights are identical, so they should be equal). The sharded folder must have at
least 3 shards and an index whose total_size is the byte count of its tensors.

usage: check_llama_save.py REF_DIR"""
import json
import os
import sys

import torch
from transformers import LlamaForCausalLM

PAIRS = [("gen_gqa", "gen_gqa_saved", 3), ("gen_tied", "gen_tied_saved", 1)]
TOL = 1e-5


def load(path):
    m, info = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32,
                                               attn_implementation="eager",
                                               output_loading_info=True)
    return m.eval(), info


def check_pair(d, orig, saved, min_shards):
    bad = []
    a, _ = load(f"{d}/{orig}")
    b, info = load(f"{d}/{saved}")
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(k):
            bad.append(f"{k}: {info[k]}")
    for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
              "tie_word_embeddings", "bos_token_id", "eos_token_id", "rope_parameters",
              "max_position_embeddings"):
        va, vb = getattr(a.config, k, None), getattr(b.config, k, None)
        if va != vb:
            bad.append(f"config {k}: {va} != {vb}")
    sa, sb = a.state_dict(), b.state_dict()
    if sa.keys() != sb.keys():
        bad.append(f"state dict keys differ: {set(sa) ^ set(sb)}")
    for k in sa.keys() & sb.keys():
        if not torch.equal(sa[k], sb[k]):
            bad.append(f"tensor {k} differs")
    if a.config.tie_word_embeddings and b.lm_head.weight.data_ptr() != \
            b.model.embed_tokens.weight.data_ptr():
        bad.append("lm_head is not tied to embed_tokens")
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, a.config.vocab_size, (2, 20), generator=g)
    with torch.no_grad():
        diff = (a(input_ids=ids).logits - b(input_ids=ids).logits).abs().max().item()
    if not diff < TOL:
        bad.append(f"logits max abs diff {diff:.3e} >= {TOL}")
    files = sorted(os.listdir(f"{d}/{saved}"))
    shards = [f for f in files if "-of-" in f]
    if min_shards > 1:
        if len(shards) < min_shards:
            bad.append(f"{len(shards)} shards, expected >= {min_shards}")
        idx = json.load(open(f"{d}/{saved}/model.safetensors.index.json"))
        total = sum(t.numel() * t.element_size() for k, t in sb.items()
                    if not (b.config.tie_word_embeddings and k == "lm_head.weight"))
        if idx["metadata"]["total_size"] != total:
            bad.append(f"index total_size {idx['metadata']['total_size']} != {total}")
        if set(idx["weight_map"].values()) != set(shards):
            bad.append("index names other files than the shards")
    print(f"{saved}: files {files}; logits max abs diff vs {orig}: {diff:.3e}; "
          f"{'OK' if not bad else 'FAILED'}")
    for m in bad:
        print(f"  {saved}: {m}")
    return not bad


def main():
    torch.set_num_threads(2)
    d = sys.argv[1] if len(sys.argv) > 1 else "ref"
    ok = all([check_pair(d, *p) for p in PAIRS])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
