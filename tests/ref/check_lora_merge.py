"""`dtrain lora merge` and `dtrain generate --adapter` against transformers + PEFT.

Uses the random bases and PEFT adapters that ref_lora.py saves (lora_gqa: GQA, llama3 rope,
untied, 5 targets, r=4 alpha=8; lora_tied: tied embeddings, all 7 targets, r=8 alpha=4; both with
random non-zero A and B; lora_mts / lora_mts_tied: with modules_to_save, whose trained copies the
merged folder must hold in place of the base's modules, as merge_and_unload returns them). For
each:
  1. `dtrain lora merge --base B --adapter A -o M` exits 0;
  2. transformers' LlamaForCausalLM.from_pretrained(M) loads with no missing, unexpected or
     mismatched tensors, and its logits on random ids equal those of PEFT's
     PeftModel.from_pretrained(base, A) (unmerged, float64) within TOL_LOGITS (relative to the
     largest logit); the adapter must move the logits by more than 100x that tolerance, so a
     merge that dropped or mis-scaled it cannot pass. M's tensors equal PEFT's own
     merge_and_unload() within TOL_WEIGHT;
  3. `dtrain generate --model B --adapter A` and `dtrain generate --model M` give the same greedy
     tokens and the same prompt logits (both run the same f32 weights: max diff <= 1e-6); those
     logits equal PEFT's within TOL_LOGITS, and the tokens equal PEFT's float64 greedy decoding
     up to the first near tie (top-2 margin < 1e-4), which must come after at least 8 tokens.

usage: check_lora_merge.py REF_DIR DTRAIN WORK_DIR"""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import torch
from peft import PeftModel
from transformers import LlamaForCausalLM

TOL_LOGITS = 2e-5  # f32 merged weights vs float64 unmerged PEFT, relative to max |logit|
TOL_WEIGHT = 1e-6  # our f32 W + s B A vs PEFT's f32 merge
N_NEW = 24


def load(path, dtype=torch.float32):
    m, info = LlamaForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager",
                                               output_loading_info=True)
    return m.eval(), info


def read_logits(path):
    """The f32 tensor 'logits' of a safetensors file written by dtrain generate --dump-logits."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        e = h["logits"]
        f.seek(8 + n + e["data_offsets"][0])
        cnt = e["data_offsets"][1] - e["data_offsets"][0]
        return np.frombuffer(f.read(cnt), dtype=np.float32).astype(np.float64)


def dtrain(exe, *args):
    r = subprocess.run([exe, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: dtrain {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def greedy_f64(model, prompt, n):
    """PEFT's model, full forward per step in float64: tokens and the top-2 margin of each."""
    ids, toks, margins = list(prompt), [], []
    with torch.no_grad():
        for _ in range(n):
            lg = model(input_ids=torch.tensor([ids])).logits[0, -1]
            top = torch.topk(lg, 2)
            toks.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            ids.append(toks[-1])
    return toks, margins


def check_case(d, exe, work, base, adapter, name):
    bad = []
    merged = f"{work}/{name}_merged"
    shutil.rmtree(merged, ignore_errors=True)
    print(dtrain(exe, "lora", "merge", "--base", base, "--adapter", adapter, "-o", merged).strip())

    m, info = load(merged)
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(k):
            bad.append(f"{k}: {info[k]}")
    b64, _ = load(base, torch.float64)
    peft64 = PeftModel.from_pretrained(b64, adapter).eval()
    V = m.config.vocab_size
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, V, (2, 23), generator=g)
    with torch.no_grad():
        got = m(input_ids=ids).logits.double()
        want = peft64(input_ids=ids).logits
        with peft64.disable_adapter():
            plain = peft64(input_ids=ids).logits
    scale = max(1.0, want.abs().max().item())
    diff = (got - want).abs().max().item() / scale
    effect = (want - plain).abs().max().item() / scale
    print(f"{name}: merged vs PEFT logits rel diff {diff:.2e} (tol {TOL_LOGITS}); "
          f"adapter effect {effect:.2e}")
    if not diff <= TOL_LOGITS:
        bad.append(f"merged logits differ from PEFT's by {diff:.3e} > {TOL_LOGITS}")
    if not effect > 100 * TOL_LOGITS:
        bad.append(f"the adapter moves the logits by only {effect:.3e}: test too weak")

    b32, _ = load(base)
    ref = PeftModel.from_pretrained(b32, adapter).merge_and_unload().state_dict()
    sd = m.state_dict()
    if ref.keys() != sd.keys():
        bad.append(f"state dict keys differ: {set(ref) ^ set(sd)}")
    wdiff = max((sd[k] - ref[k]).abs().max().item() for k in ref.keys() & sd.keys())
    # modules_to_save: the merged folder holds the adapter's copies, not the base's modules
    base_sd = load(base)[0].state_dict()  # b32 was merged in place
    whole = [k for k in sd if "proj" not in k]  # embeddings, norms, lm_head
    replaced = [k for k in whole if not torch.equal(sd[k], base_sd[k])]
    saves = json.load(open(f"{adapter}/adapter_config.json")).get("modules_to_save") or []
    print(f"{name}: modules_to_save {saves}: {len(replaced)} of {len(whole)} non-projection "
          f"tensors differ from the base's")
    if bool(saves) != bool(replaced):
        bad.append(f"modules_to_save {saves} but {len(replaced)} tensors replaced")
    print(f"{name}: weights vs PEFT merge_and_unload max diff {wdiff:.2e} (tol {TOL_WEIGHT})")
    if not wdiff <= TOL_WEIGHT:
        bad.append(f"merged weights differ from PEFT's merge_and_unload by {wdiff:.3e}")

    prompt = ids[0].tolist()
    ptxt = ",".join(map(str, prompt))
    common = ["--ids", ptxt, "--max-new", str(N_NEW), "--ignore-eos", "--threads", "2"]
    la, lb = f"{work}/{name}_adapter_logits.safetensors", f"{work}/{name}_merged_logits.safetensors"
    ta = dtrain(exe, "generate", "--model", base, "--adapter", adapter, "--dump-logits", la, *common)
    tb = dtrain(exe, "generate", "--model", merged, "--dump-logits", lb, *common)
    ta = [int(x) for x in ta.strip().split(",")]
    tb = [int(x) for x in tb.strip().split(",")]
    a, b = read_logits(la), read_logits(lb)
    if ta != tb:
        bad.append(f"generate --adapter tokens {ta} != merged folder's {tb}")
    if len(ta) != N_NEW:
        bad.append(f"{len(ta)} tokens, asked for {N_NEW}")
    ab = np.abs(a - b).max()
    pl = want[0, -1].numpy()
    ap = np.abs(a - pl).max() / scale
    print(f"{name}: --adapter vs merged prompt logits max diff {ab:.2e}; vs PEFT rel {ap:.2e}")
    if not ab <= 1e-6:
        bad.append(f"--adapter and merged prompt logits differ by {ab:.3e}")
    if not ap <= TOL_LOGITS:
        bad.append(f"--adapter prompt logits differ from PEFT's by {ap:.3e}")
    pt, margins = greedy_f64(peft64, prompt, N_NEW)
    k = next((i for i, mg in enumerate(margins) if mg < 1e-4), N_NEW)
    print(f"{name}: PEFT greedy {pt}; dtrain {ta}; compared {k} tokens (first near tie)")
    if k < 8:
        bad.append(f"a near tie after {k} tokens: choose other ids")
    if ta[:k] != pt[:k]:
        bad.append(f"generate --adapter tokens {ta[:k]} != PEFT greedy {pt[:k]}")
    return bad


def main():
    d, exe, work = sys.argv[1], sys.argv[2], sys.argv[3]
    torch.set_num_threads(2)
    os.makedirs(work, exist_ok=True)
    cases = [(f"{d}/{c}", f"{d}/{c}_adapter", c)
             for c in ("lora_gqa", "lora_tied", "lora_mts", "lora_mts_tied")]
    bad = []
    for base, adapter, name in cases:
        bad += [f"{name}: {b}" for b in check_case(d, exe, work, base, adapter, name)]
    for b in bad:
        print("FAIL:", b)
    if bad:
        sys.exit(1)
    print("OK: lora merge and generate --adapter match PEFT")


if __name__ == "__main__":
    main()
