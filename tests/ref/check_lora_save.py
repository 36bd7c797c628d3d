"""Checks the LoRA adapters that dtrain's dt_lora_save wrote (tests/nn/test_lora.c, after an
AdamW step on PEFT's adapter): PeftModel.from_pretrained loads each onto the transformers base
folder, with the config dtrain wrote (r, lora_alpha, target modules, no rslora/dora; the same
modules wrapped as modules_to_save as with PEFT's own adapter, lora_mts*), every adapter tensor
and every trained copy of a module to save (embed_tokens, norms, lm_head) equal to the file's
and no tensor of the file left over, and gives dtrain's eval logits, judged as test_lora.c
judges them:
  - against the float64 answer of dtrain's arithmetic (the frozen base matmuls take bf16
    inputs, ref_lora.bf16_inputs): max abs error <= 3 * (the same in float32's) + 1e-5 * max,
    relative L2 error <= 3 * (the same in float32's) + 1e-6;
  - against plain PEFT (float64): relative L2 distance <= 4 / 256 (bf16 resolution).
To show that the comparison can fail, the logits of PEFT's original adapter (before dtrain's
step) must be further from dtrain's than 3x that bf16 bound.

usage: check_lora_save.py REF_DIR"""
import copy
import json
import sys

import os

import torch
from peft import PeftModel
from peft.utils.other import ModulesToSaveWrapper
from safetensors.torch import load_file
from transformers import LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_lora import bf16_inputs, f32_spread, run  # noqa: E402

CASES = ["lora_gqa", "lora_tied", "lora_mts", "lora_mts_tied"]
PREFIX = "base_model.model."
BF16_REL = 4 / 256


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def base(d, name):
    return LlamaForCausalLM.from_pretrained(f"{d}/{name}", dtype=torch.float32,
                                            attn_implementation="eager").eval()


def logits(m, ids):
    with torch.no_grad():
        return m(input_ids=ids).logits


def check(d, name):
    bad = []
    adir = f"{d}/{name}_dtrain_adapter"
    out = load_file(f"{d}/{name}_dtrain_out.safetensors")
    ids, ours = out["ids"], out["logits"]
    saved = load_file(f"{adir}/adapter_model.safetensors")
    wrote = json.load(open(f"{adir}/adapter_config.json"))
    theirs = json.load(open(f"{d}/{name}_adapter/adapter_config.json"))

    pm = PeftModel.from_pretrained(base(d, name), adir).eval()
    pc = pm.peft_config["default"]
    if (pc.r, pc.lora_alpha, set(pc.target_modules)) != \
            (theirs["r"], theirs["lora_alpha"], set(theirs["target_modules"])):
        bad.append(f"config r={pc.r} alpha={pc.lora_alpha} targets={pc.target_modules}, PEFT's "
                   f"adapter has r={theirs['r']} alpha={theirs['lora_alpha']} "
                   f"targets={theirs['target_modules']}")
    if pc.use_rslora or pc.use_dora or pc.lora_dropout != 0.0 or str(pc.peft_type) not in (
            "LORA", "PeftType.LORA"):
        bad.append(f"config: peft_type {pc.peft_type} rslora {pc.use_rslora} dora {pc.use_dora} "
                   f"dropout {pc.lora_dropout}")
    # adapters, and the trained copies of modules to save under PEFT's file names (a tied pair
    # under both of its names: remove_duplicate=False)
    model_ad = {PREFIX + k[len(PREFIX):].replace(".modules_to_save.default.", ".")
                .replace(".default.", "."): p.detach()
                for k, p in pm.named_parameters(remove_duplicate=False)
                if ".lora_" in k or ".modules_to_save.default." in k}
    orig_pm = PeftModel.from_pretrained(base(d, name), f"{d}/{name}_adapter").eval()

    def wrapped(m):
        return sorted(n for n, mod in m.named_modules() if isinstance(mod, ModulesToSaveWrapper))
    if wrapped(pm) != wrapped(orig_pm):
        bad.append(f"modules_to_save: dtrain's adapter wraps {wrapped(pm)}, PEFT's "
                   f"{wrapped(orig_pm)}")
    if set(model_ad) != set(saved):
        bad.append(f"adapter names: model only {sorted(set(model_ad) - set(saved))[:3]}, "
                   f"file only {sorted(set(saved) - set(model_ad))[:3]}")
    for k in set(model_ad) & set(saved):
        if not torch.equal(model_ad[k], saved[k]):
            bad.append(f"tensor {k} differs from the file")

    l64 = logits(bf16_inputs(copy.deepcopy(pm).double()), ids)
    pure = logits(copy.deepcopy(pm).double(), ids)
    e32, r32 = f32_spread(pm, ids, {"logits": l64})["logits"]
    tol = 3 * e32 + 1e-5 * l64.abs().max().item()
    rtol = 3 * r32 + 1e-6
    err, rerr, rpure = (ours.double() - l64).abs().max().item(), rel(ours, l64), rel(ours, pure)
    if not err <= tol:
        bad.append(f"dtrain's logits are {err:.3e} from the exact answer, tolerance {tol:.3e}")
    if not rerr <= rtol:
        bad.append(f"dtrain's logits: relative L2 error {rerr:.3e}, tolerance {rtol:.3e}")
    if not rpure <= BF16_REL:
        bad.append(f"dtrain's logits: relative L2 distance {rpure:.3e} from plain PEFT")
    orig = logits(orig_pm, ids)
    far = rel(ours, orig)
    if not far > 3 * BF16_REL:
        bad.append(f"PEFT's original adapter is only {far:.3e} (relative) from dtrain's logits")
    print(f"{name}: {len(saved)} tensors, config r={wrote['r']} alpha={wrote['lora_alpha']} "
          f"modules_to_save={wrote.get('modules_to_save')} (wrapped: {len(wrapped(pm))}); "
          f"logits: max abs error {err:.2e} (tol {tol:.2e}), relative L2 {rerr:.2e} "
          f"(tol {rtol:.2e}), from plain PEFT {rpure:.2e} (tol {BF16_REL:.2e}); original "
          f"adapter {far:.2e} away; {'OK' if not bad else 'FAILED'}")
    for m in bad:
        print(f"  {name}: {m}")
    return not bad


def main():
    torch.set_num_threads(2)
    d = sys.argv[1] if len(sys.argv) > 1 else "ref"
    ok = all([check(d, c) for c in CASES])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
