"""`dtrain plan --device / --gpu-gib` (the GPU memory plan, src/config/plan_gpu.c) and the host
figure of `dtrain plan --json` (issue 30), from the command's JSON read with Python's json:

  - the device components add up to the device total (summed here), for Llama and ResNet,
    f32 and bf16, with and without ZeRO;
  - ZeRO-2 on 8 workers cuts the per-worker optimizer state and gradients by 8 (to the
    padding of one shard), not the parameters; ZeRO-3 the parameters too;
  - bf16 counts the activations at the stated factor of the f32 figure (a ResNet, whose logits
    are negligible: within 1%; a Llama, whose f32 logits stay: between factor x f32 and that
    plus one f32 copy of the logits); the graph compiled for the device is the same in both;
  - Llama-3.1-8B LoRA bf16 fits an h200 and an 80 GiB card; its full finetuning in f32 does not
    fit 80 GiB (16 bytes a parameter alone exceed it);
  - the largest data.batch reported fits and the next one does not; the fewest ZeRO-3 workers
    reported fit and one fewer do not;
  - notes for cards that cannot run the config (bf16 on a V100, the sm_90 default build);
  - refusals (exit 2, one line naming the culprit): unknown --device, bad --gpu-gib,
    train.device=cuda with no GPU visible and no card given, --compare with --device;
  - the JSON's "host": N x the total, less N-1 frozen bases when lora.share_base shares it.

argv: dtrain binary, source tree."""

import json
import os
import subprocess
import sys
import tempfile

DTRAIN, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
L8 = os.path.join(SRC, "examples/llama3.1-8b-lora.yaml")
R152 = os.path.join(SRC, "examples/resnet152.yaml")
R18 = os.path.join(SRC, "examples/resnet18-fmnist.yaml")
GIB = 1 << 30
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


_runs = {}


def run(*args):
    """dtrain plan ARGS -> (rc, stdout, stderr); each distinct command runs once."""
    if args not in _runs:
        p = subprocess.run([DTRAIN, "plan", *args], capture_output=True, text=True, timeout=250)
        _runs[args] = p.returncode, p.stdout, p.stderr
    return _runs[args]


def plan(*args):
    rc, out, err = run(*args, "--json")
    if rc != 0:
        raise SystemExit(f"dtrain plan {' '.join(args)}: rc {rc}: {err}")
    return json.loads(out)


DEVICE_PARTS = ["param_bytes", "weight_bf16_bytes", "grad_bytes", "optim_bytes", "frozen_bytes",
                "state_bytes", "activation_bytes", "cublaslt_workspace_bytes",
                "cudnn_workspace_bytes", "context_bytes", "headroom_bytes"]
DEVICE_KEYS = DEVICE_PARTS + ["card", "card_bytes", "compute_capability", "precision", "bf16_activation_factor",
                              "activation_f32_bytes", "total_bytes", "fits", "max_batch",
                              "min_workers_zero3"]


def device(j, what):
    d = j.get("device")
    check(isinstance(d, dict), f"{what}: no device object")
    if not isinstance(d, dict):
        return {}
    missing = [k for k in DEVICE_KEYS if k not in d]
    check(not missing, f"{what}: device keys missing: {missing}")
    s = sum(d[k] for k in DEVICE_PARTS)
    check(s == d["total_bytes"], f"{what}: components sum to {s}, total {d['total_bytes']}")
    check(d["fits"] == (d["total_bytes"] <= d["card_bytes"]), f"{what}: fits verdict")
    for k in DEVICE_PARTS:
        check(d[k] >= 0, f"{what}: {k} negative")
    return d


# from a scratch folder: the examples' relative paths resolve from the config file's folder
scratch = tempfile.TemporaryDirectory(prefix="dt_plangpu_")
os.chdir(scratch.name)

# 1. components add up, several shapes of plan
for args in [(L8, "--device", "h200"), (R152, "--device", "a100-40"),
             (R18, "--gpu-gib", "16", "train.precision=bf16"),
             (L8, "--device", "h100", "-n", "8", "lora.enabled=false", "dist.zero_stage=3")]:
    d = device(plan(*args), " ".join(args[1:]))
    check(d.get("context_bytes", 0) > 0 and d.get("cublaslt_workspace_bytes", 0) > 0,
          f"{args}: context and cuBLASLt workspace counted")
r152 = device(plan(R152, "--device", "a100-40"), "resnet152")
check(r152["cudnn_workspace_bytes"] > 0, "a ResNet counts a cuDNN workspace")
check(device(plan(L8, "--device", "h200"), "8b")["cudnn_workspace_bytes"] == 0,
      "a Llama has no convolutions: no cuDNN workspace")

# 2. ZeRO-2 on 8 workers: optimizer state and gradients / 8, parameters whole
z0 = device(plan(R18, "--device", "h100"), "r18 zero0")
z2 = device(plan(R18, "--device", "h100", "-n", "8", "dist.zero_stage=2"), "r18 zero2 n8")
z3 = device(plan(R18, "--device", "h100", "-n", "8", "dist.zero_stage=3"), "r18 zero3 n8")
for k in ["optim_bytes", "grad_bytes"]:
    r = z0[k] / z2[k]
    check(7.99 <= r <= 8.0, f"ZeRO-2 x8: {k} {z0[k]} -> {z2[k]} (ratio {r:.4f}, want 8)")
check(z2["param_bytes"] == z0["param_bytes"], "ZeRO-2 keeps the parameters whole")
check(7.99 <= z0["param_bytes"] / z3["param_bytes"] <= 8.0, "ZeRO-3 x8 shards the parameters")
check(z2["activation_bytes"] == z0["activation_bytes"], "ZeRO leaves activations alone")

# 3. bf16 activations at the stated factor
for cfg, what in [(R152, "resnet152"), (L8, "8b lora")]:
    jf = plan(cfg, "--device", "h200", "train.precision=fp32")
    jb = plan(cfg, "--device", "h200", "train.precision=bf16")
    f, b = device(jf, what + " fp32"), device(jb, what + " bf16")
    fac = b["bf16_activation_factor"]
    check(f["bf16_activation_factor"] == 1 and 0 < fac < 1, f"{what}: stated factor {fac}")
    check(f["activation_f32_bytes"] == b["activation_f32_bytes"] == f["activation_bytes"],
          f"{what}: one device graph for both precisions")
    lo, hi = fac * f["activation_bytes"], fac * f["activation_bytes"] + jb["logits_bytes"]
    if what == "resnet152":
        hi = lo * 1.01
    check(lo <= b["activation_bytes"] <= hi + 1,
          f"{what}: bf16 activations {b['activation_bytes']} not in [{lo:.0f}, {hi:.0f}]")
    check(b["weight_bf16_bytes"] * 2 == b["param_bytes"] and f["weight_bf16_bytes"] == 0,
          f"{what}: bf16 weight copy is 2 bytes a trainable parameter")

# 4. what fits: 8B LoRA bf16 on an h200 and an 80 GiB card; 8B full finetuning f32 not on 80 GiB
for args in [("--device", "h200"), ("--gpu-gib", "80")]:
    j = plan(L8, *args)
    d = device(j, "8b lora " + " ".join(args))
    check(d["fits"] and d["total_bytes"] <= d["card_bytes"], f"8B LoRA bf16 fits {args}")
    check(j["params_frozen"] == 8030261248, "8B LoRA: the frozen base is the whole model")
check(device(plan(L8, "--gpu-gib", "80"), "80")["card_bytes"] == 80 * GIB, "--gpu-gib 80 size")
full = plan(L8, "--gpu-gib", "80", "lora.enabled=false", "train.precision=fp32")
d = device(full, "8b full fp32")
check(full["params_trainable"] * 16 > 80 * GIB, "8B: 16 bytes a parameter exceed 80 GiB")
check(not d["fits"] and d["total_bytes"] > 80 * GIB, "8B full finetuning f32 does not fit 80 GiB")
check(d["max_batch"] == 0, "8B full finetuning f32: not even batch 1")
rc, out, err = run(L8, "--gpu-gib", "80", "lora.enabled=false", "train.precision=fp32")
check(rc == 0 and "does not fit" in out and "not even data.batch=1" in out, "text: " + out)
# ... but ZeRO-3 over enough 80 GiB cards: the fewest named fit, one fewer does not
mw = d["min_workers_zero3"]
check(isinstance(mw, int) and 1 < mw <= 1024, f"8B full f32: ZeRO-3 workers {mw}")
if isinstance(mw, int) and mw > 1:
    for n, want in [(mw, True), (mw - 1, False)]:
        dz = device(plan(L8, "--gpu-gib", "80", "lora.enabled=false", "train.precision=fp32",
                         "-n", str(n), "dist.zero_stage=3"), f"8B full ZeRO-3 n{n}")
        check(dz["fits"] == want, f"8B full f32 ZeRO-3 on {n} x 80 GiB: fits {dz['fits']}")
    check(f"fits on {mw} GPUs" in out, "text names the ZeRO-3 worker count: " + out)
# 8B LoRA on 16 GiB cards: ZeRO-3 shards the frozen base too (lora.shard_base=auto), so enough
# workers fit (the fewest named fit, one fewer does not); with lora.shard_base=false the base
# stays whole per worker and no count fits
d16 = device(plan(L8, "--gpu-gib", "16"), "8b lora 16 GiB")
mw = d16["min_workers_zero3"]
check(not d16["fits"] and isinstance(mw, int) and 1 < mw <= 1024,
      f"8B LoRA on 16 GiB: ZeRO-3 workers {mw}")
if isinstance(mw, int) and mw > 1:
    for n, want in [(mw, True), (mw - 1, False)]:
        jz = plan(L8, "--gpu-gib", "16", "-n", str(n), "dist.zero_stage=3")
        dz = device(jz, f"8B LoRA ZeRO-3 n{n}")
        check(dz["fits"] == want and jz["base_sharded"] == (n > 1),
              f"8B LoRA ZeRO-3 on {n} x 16 GiB: fits {dz['fits']}, sharded {jz['base_sharded']}")
d16 = device(plan(L8, "--gpu-gib", "16", "lora.shard_base=false"), "8b lora 16 GiB whole")
check(not d16["fits"] and d16["min_workers_zero3"] is None,
      "8B LoRA on 16 GiB with lora.shard_base=false: no worker count")

# 5. the largest batch: it fits, the next does not
d = device(plan(L8, "--device", "h200"), "8b h200")
mb = d["max_batch"]
check(1 < mb < 65536, f"8B LoRA h200: largest batch {mb}")
check(device(plan(L8, "--device", "h200", f"data.batch={mb}"), "at max")["fits"],
      f"data.batch={mb} fits")
check(not device(plan(L8, "--device", "h200", f"data.batch={mb + 1}"), "past max")["fits"],
      f"data.batch={mb + 1} does not fit")
rc, out, err = run(L8, "--device", "h200")
check(rc == 0 and "GPU memory per worker (h200" in out and "fits:" in out and
      f"largest data.batch that fits: {mb}" in out, "text table: " + out)

# 5b. what the card cannot run: bf16 before compute capability 8.0, the sm_90 default build
rc, out, err = run(R18, "--device", "v100-32", "train.precision=bf16")
check(rc == 0 and "no bf16 arithmetic" in out and "CMAKE_CUDA_ARCHITECTURES=70" in out,
      "v100 bf16 notes: " + out)
rc, out, err = run(R18, "--device", "a100-80", "train.precision=bf16")
check(rc == 0 and "no bf16" not in out and "CMAKE_CUDA_ARCHITECTURES=80" in out, "a100: " + out)
rc, out, err = run(R18, "--device", "h200", "train.precision=bf16")
check(rc == 0 and "note:" not in out, "h200: no notes: " + out)
check(device(plan(R18, "--device", "l40s"), "l40s")["compute_capability"] == "8.9", "l40s cc")
check(device(plan(R18, "--gpu-gib", "8"), "8 GiB")["compute_capability"] is None,
      "a card given by size has no compute capability")

# 6. refusals: exit 2 and one line naming the culprit
for args, want in [(("--device", "h300"), "h300"), (("--device", "h300"), "h200|h100"),
                   (("--gpu-gib", "0"), "--gpu-gib"), (("--gpu-gib", "-3"), "--gpu-gib"),
                   (("--gpu-gib", "abc"), "'abc'"), (("--gpu-gib", "nan"), "--gpu-gib"),
                   (("--gpu-gib=2e6",), "--gpu-gib"), (("--gpu-gib",), "--gpu-gib"),
                   (("--device",), "--device"), (("--compare", "--device", "h200"), "--compare"),
                   (("--device", "cpu", "--gpu-gib", "8"), "--device cpu")]:
    rc, out, err = run(L8, *args)
    check(rc == 2 and want in err and err.count("\n") == 1,
          f"{args}: rc {rc}, want one line with {want!r}: {err!r}")
# train.device=cuda plans the visible GPU; with none visible it needs the card named
rc, out, err = run(L8, "train.device=cuda", "--json")
if rc == 0:
    check(json.loads(out)["device"]["card_bytes"] > 0, "train.device=cuda: the visible GPU")
else:
    check(rc == 2 and "no CUDA device visible" in err and "--device" in err and
          "--gpu-gib" in err and err.count("\n") == 1, f"train.device=cuda refusal: {err!r}")
j = plan(L8, "train.device=cuda", "--gpu-gib", "40")
check(device(j, "cuda 40")["card_bytes"] == 40 * GIB, "train.device=cuda with --gpu-gib 40")
j = plan(L8, "train.device=cuda", "--device", "cpu")
check("device" not in j, "--device cpu: the host plan")

# 7. the host figure (issue 30): N x total, less N-1 shared frozen bases
for share in ["true", "false"]:
    j = plan(L8, "-n", "2", f"lora.share_base={share}")
    h = j.get("host", {})
    want = 2 * j["total_bytes"] - (j["frozen_bytes"] if share == "true" else 0)
    check(h.get("workers") == 2 and h.get("base_shared") == (share == "true") and
          h.get("total_bytes") == want, f"share_base={share}: host {h}, want {want}")
    rc, out, err = run(L8, "-n", "2", f"lora.share_base={share}")
    check(("sharing the base" in out) == (share == "true"), "the text's host line")

os.chdir("/")
scratch.cleanup()
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
