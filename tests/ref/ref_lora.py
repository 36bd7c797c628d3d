"""References for tests/nn/test_lora.c: LoRA on Hugging Face's LlamaForCausalLM with PEFT.

For each case a small random Llama is saved with save_pretrained (safetensors, f32) as the base
folder <case>; its matrices and embeddings are rounded to bf16 first, so that dtrain's frozen
bf16 copy of the base holds exactly the same numbers (norms stay f32, as dtrain keeps them).
PEFT's get_peft_model wraps it with a LoraConfig; both A and B get random non-zero values (PEFT
starts B at 0, which would make every A gradient 0), and the trained copies of modules_to_save
(lora_mts*) values other than the base's, so that only an adapter loaded with them reproduces
the logits; the adapter is saved with save_pretrained as <case>_adapter. The reference file
<case>_ref.safetensors holds:
  ids [B, T]                     the input; the loss is HF's labels=ids (shifted) cross entropy
  logits, loss                   the PEFT model's output, computed in float64, with the frozen
                                 base matmuls done as dtrain does them (bf16 x bf16 -> f32:
                                 inputs and output gradients rounded to bf16, Bf16Linear below)
  grad.<dtrain name>             d loss / d parameter, the same way, for every trainable
                                 parameter (adapters and modules to save) under dtrain's name
                                 (model.layers.L.self_attn.q_proj.lora_A.weight,
                                 model.embed_tokens.weight for embed_tokens.modules_to_save)
  err.<key>, relerr.<key>        max abs and relative L2 distance (|a - b|_2 / |b|_2) of the
                                 same computation in float32 from it, the largest over a few
                                 runs (f32_spread): one bf16 rounding that goes the other way
                                 changes what follows, so float32 runs land about 1e-3
                                 (relative) from the float64 one, not 1e-7
  pure.<key>                     plain PEFT in float64 (no bf16 rounding of activations), which
                                 dtrain must match to within bf16 rounding
  n_adapters                     number of trainable tensors PEFT has (adapters and modules
                                 to save; a tied pair once)
  peft_trainable                 PEFT's get_nb_trainable_parameters() for the case's config (the
                                 count print_trainable_parameters() prints)
  count.rank/alpha/targets/      for a few other LoraConfigs on the same base: rank, alpha,
  modules/peft                   dtrain's DT_LORA_* bit mask of target_modules and
                                 DT_LORA_SAVE_* mask of modules_to_save, and PEFT's
                                 trainable-parameter count
With tied embeddings and embed_tokens or lm_head in modules_to_save the LoraConfig has
ensure_weight_tying=True: the one matrix stays tied, as dtrain keeps it (without that option PEFT
unties them, which dtrain refuses).

usage: ref_lora.py REF_DIR"""
import copy
import warnings

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

import reflib

# dtrain's DT_LORA_* bits, in this order.
TARGET_BITS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

CASES = {
    # GQA (4 query heads, 2 kv heads), llama3 rope scaling, untied; the target set.
    "lora_gqa": dict(
        model=dict(vocab_size=320, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                   rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 64},
                   bos_token_id=1, eos_token_id=[2, 3]),
        lora=dict(r=4, lora_alpha=8,
                  target_modules=["q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"])),
    # Tied embeddings, default rope, every projection targeted, another rank and alpha.
    "lora_tied": dict(
        model=dict(vocab_size=256, hidden_size=48, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=6, num_key_value_heads=3, max_position_embeddings=256,
                   rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
                   bos_token_id=1, eos_token_id=2),
        lora=dict(r=8, lora_alpha=4, target_modules=TARGET_BITS)),
}
# PEFT's modules_to_save: untied, every supported module ("norm" selects all three norms, as
# PEFT matches a module whose name ends with it); tied, lm_head (= the tied embedding under
# ensure_weight_tying, PEFT rewrites it to model.embed_tokens), one kind of layer norm and the
# final norm alone.
CASES["lora_mts"] = dict(
    model=dict(CASES["lora_gqa"]["model"], vocab_size=192, intermediate_size=160),
    lora=dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"],
              modules_to_save=["embed_tokens", "norm", "lm_head"]))
CASES["lora_mts_tied"] = dict(
    model=dict(CASES["lora_tied"]["model"], vocab_size=160),
    lora=dict(r=4, lora_alpha=4, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
              modules_to_save=["lm_head", "input_layernorm", "model.norm"],
              ensure_weight_tying=True))
# Other configurations whose trainable-parameter count dtrain's formula must reproduce.
COUNTS = [
    dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    dict(r=8, lora_alpha=16, target_modules=["k_proj", "o_proj", "down_proj"]),
    dict(r=2, lora_alpha=2, target_modules=TARGET_BITS),
    dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
         modules_to_save=["embed_tokens", "norm"]),
    dict(r=2, lora_alpha=2, target_modules=["o_proj"],
         modules_to_save=["lm_head", "post_attention_layernorm"]),
    dict(r=8, lora_alpha=16, target_modules=["k_proj", "down_proj"],
         modules_to_save=["embed_tokens", "lm_head", "model.norm", "input_layernorm"]),
]
# dtrain's DT_LORA_SAVE_* bits of a modules_to_save name (dt_lora_module_bits).
MODULE_BITS = {"embed_tokens": 1, "input_layernorm": 2, "post_attention_layernorm": 4,
               "norm": 2 | 4 | 8, "model.norm": 8, "lm_head": 16}
B, T = 2, 29


def mask(targets):
    return sum(1 << TARGET_BITS.index(t) for t in targets)


def modules_mask(names):
    m = 0
    for n in names or []:
        m |= MODULE_BITS[n]
    return m


def dtrain_name(peft_name):
    """base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight
    -> model.layers.0.self_attn.q_proj.lora_A.weight;
    base_model.model.model.embed_tokens.modules_to_save.default.weight
    -> model.embed_tokens.weight"""
    assert peft_name.startswith("base_model.model.")
    n = peft_name[len("base_model.model."):]
    return n.replace(".modules_to_save.default.", ".").replace(".default.", ".")


def peft_model(base, lora):
    lora = dict(lora)
    if lora.get("modules_to_save"):
        # dtrain keeps a tied pair tied (a no-op, with a warning, on an untied base)
        lora.setdefault("ensure_weight_tying", True)
        lora["modules_to_save"] = list(lora["modules_to_save"])  # PEFT edits the list
    cfg = LoraConfig(**lora, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ensure_weight_tying.*")
        return get_peft_model(copy.deepcopy(base), cfg)


class Bf16Linear(torch.autograd.Function):
    """dtrain's frozen bf16 matmul (src/ops/linear_bf16.c): y = bf16(x) W^T, dx = bf16(g) W,
    products and sums exact here (float64) or float32; no weight gradient."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(w)
        return torch.nn.functional.linear(x.bfloat16().to(x.dtype), w)

    @staticmethod
    def backward(ctx, g):
        (w,) = ctx.saved_tensors
        return g.bfloat16().to(g.dtype) @ w, None


def bf16_inputs(model):
    """Makes every frozen base Linear (targeted base_layer, untargeted projections, lm_head)
    round its input, and its output gradient, to bf16 as dtrain does; adapters and the trained
    copies of modules_to_save (an lm_head: f32 in dtrain) stay exact."""
    for name, mod in model.named_modules():
        if (type(mod) is torch.nn.Linear and ".lora_" not in name
                and ".modules_to_save." not in name):
            assert mod.bias is None and not mod.weight.requires_grad, name
            mod.forward = lambda x, mod=mod: Bf16Linear.apply(x, mod.weight)
    return model


def run(model, ids):
    out = model(input_ids=ids, labels=ids)
    if out.loss.requires_grad:  # not for an adapter loaded for inference
        out.loss.backward()
    r = {"logits": out.logits.detach(), "loss": out.loss.detach().reshape(1)}
    for k, p in model.named_parameters():
        if p.requires_grad:
            r["grad." + dtrain_name(k)] = p.grad
    return r


def f32_spread(m, ids, exact, runs=6):
    """How far float32 runs of dtrain's arithmetic land from the float64 answer `exact`, per
    key: (max abs, relative L2), the largest over `runs` runs whose embeddings are nudged by
    at most one float32 ulp (the first run not at all). Each nudge makes other bf16 roundings
    go the other way, as another summation order does, so this samples the spread that dtrain's
    float32 run can show instead of relying on one run's luck."""
    worst = {}
    for j in range(runs):
        mj = bf16_inputs(copy.deepcopy(m))
        if j:
            g = torch.Generator().manual_seed(100 + j)

            def nudge(mod, inp, out, g=g):
                u = torch.randint(-1, 2, out.shape, generator=g).to(out.dtype)
                return out * (1 + 2.0 ** -23 * u)

            mj.get_base_model().model.embed_tokens.register_forward_hook(nudge)
        for k, v in run(mj, ids).items():
            if k not in exact:
                continue
            diff = v.double() - exact[k]
            e, r = diff.abs().max().item(), (diff.norm() / exact[k].norm()).item()
            a, b = worst.get(k, (0.0, 0.0))
            worst[k] = (max(a, e), max(b, r))
    return worst


def make_case(d, i, name, spec):
    torch.manual_seed(20 + i)
    cfg = LlamaConfig(**spec["model"], attn_implementation="eager")
    base = LlamaForCausalLM(cfg).float()
    with torch.no_grad():
        for k, p in base.named_parameters():
            if "norm" in k:
                p.uniform_(0.5, 1.5)  # non-trivial norms, kept f32
            else:
                p.copy_(p.bfloat16().float())  # exactly representable in dtrain's bf16 base
    base.save_pretrained(f"{d}/{name}", safe_serialization=True)

    m = peft_model(base, spec["lora"])
    with torch.no_grad():
        for k, p in m.named_parameters():
            if not p.requires_grad:
                continue
            if ".lora_A." in k:  # PEFT's own bound for A, kaiming-uniform: 1/sqrt(in)
                bound = 1.0 / p.shape[1] ** 0.5
                p.uniform_(-bound, bound)
            elif ".modules_to_save." in k:  # trained copies: away from the base's values
                if "norm" in k:
                    p.uniform_(0.5, 1.5)
                else:
                    p.add_(torch.randn_like(p) * 0.02)
            else:  # B: large enough that the adapter changes the output visibly
                p.normal_(0.0, 0.1)
    m.save_pretrained(f"{d}/{name}_adapter", safe_serialization=True)
    n_train, _ = m.get_nb_trainable_parameters()
    n_adapters = sum(1 for _, p in m.named_parameters() if p.requires_grad)

    ids = torch.randint(0, spec["model"]["vocab_size"], (B, T))
    r64 = run(bf16_inputs(copy.deepcopy(m).double()), ids)
    pure = run(copy.deepcopy(m).double(), ids)
    spread = f32_spread(m, ids, r64)
    out = {"ids": ids, "n_adapters": torch.tensor([n_adapters]),
           "peft_trainable": torch.tensor([n_train])}
    for k, v in r64.items():
        out[k] = v.float()
        out["err." + k] = torch.tensor([spread[k][0]], dtype=torch.float32)
        out["relerr." + k] = torch.tensor([spread[k][1]], dtype=torch.float32)
        out["pure." + k] = pure[k].float()

    counts = {"rank": [], "alpha": [], "targets": [], "modules": [], "peft": []}
    for lora in COUNTS:
        n, _ = peft_model(base, lora).get_nb_trainable_parameters()
        counts["rank"].append(lora["r"])
        counts["alpha"].append(lora["lora_alpha"])
        counts["targets"].append(mask(lora["target_modules"]))
        counts["modules"].append(modules_mask(lora.get("modules_to_save")))
        counts["peft"].append(n)
    for k, v in counts.items():
        out["count." + k] = torch.tensor(v, dtype=torch.int64)
    reflib.save(f"{d}/{name}_ref.safetensors", out)
    print(f"{name}: {n_adapters} adapter tensors, {n_train} trainable; loss {out['loss'].item():.6f}"
          f", f32 err logits {out['err.logits'].item():.2e}")


def main():
    torch.set_num_threads(2)
    d = reflib.out_dir()
    for i, (name, spec) in enumerate(CASES.items()):
        make_case(d, i, name, spec)


if __name__ == "__main__":
    main()
