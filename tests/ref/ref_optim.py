"""References for tests/optim: torch.optim.SGD / AdamW on flat buffers, torch's LR schedulers,
and a small MLP trained with warmup + cosine, gradient clipping and both optimizers.

Writes into argv[1]:
  optim_flat.safetensors   SGD (momentum + dampening), SGD (nesterov), AdamW on four tensors
                           seen as one flat buffer, with param groups (no decay on one tensor,
                           half lr on another); final params and optimizer state, flattened.
  optim_sched.safetensors  lr of steps 0..29 from torch schedulers (SequentialLR of a LinearLR
                           warmup and LinearLR / CosineAnnealingLR / StepLR).
  optim_mlp.safetensors    MLP 8 -> 16 -> relu -> 4, cross-entropy, 20 steps of batch 8;
                           initial weights, batches, per-step loss / grad norm / lr, final weights.
"""
import warnings

import numpy as np

import reflib

torch = reflib.torch_setup(0)
out = reflib.out_dir()

# ---------------------------------------------------------------------------------------------
# Flat-buffer optimizer parity. Tensors in flat order; "b" gets no weight decay, "c" half the lr.
SHAPES = [("a", (37, 29)), ("b", (29,)), ("c", (29, 13)), ("d", (200, 180))]
NSTEPS = 6
sizes = [int(np.prod(s)) for _, s in SHAPES]
N = sum(sizes)
g = torch.Generator().manual_seed(1)
P0 = torch.randn(N, generator=g)
G = torch.randn(NSTEPS, N, generator=g)
G[:, :100] *= 1e-3  # a few small gradients: Adam's eps matters there
LR = torch.tensor([0.05, 0.1, 0.08, 0.02, 0.1, 0.03], dtype=torch.float64)
LR_SCALE = {"a": 1.0, "b": 1.0, "c": 0.5, "d": 1.0}
WD_SCALE = {"a": 1.0, "b": 0.0, "c": 1.0, "d": 1.0}


def split(flat):
    views, off = {}, 0
    for (name, shape), n in zip(SHAPES, sizes):
        views[name] = flat[off:off + n].view(shape)
        off += n
    return views


def run_flat(make_opt, state_names):
    params = {k: v.clone().requires_grad_(True) for k, v in split(P0.clone()).items()}
    opt = make_opt(params)
    for s in range(NSTEPS):
        gs = split(G[s])
        for k, p in params.items():
            p.grad = gs[k].clone()
        for grp in opt.param_groups:
            grp["lr"] = float(LR[s]) * grp["lr_scale"]
        opt.step()
    flat = torch.cat([params[k].detach().reshape(-1) for k, _ in SHAPES])
    states = {}
    for sn in state_names:
        states[sn] = torch.cat([opt.state[params[k]][sn].reshape(-1) for k, _ in SHAPES])
    return flat, states


def groups(params, wd):
    return [{"params": [params[k]], "weight_decay": wd * WD_SCALE[k], "lr_scale": LR_SCALE[k],
             "lr": LR_SCALE[k]} for k, _ in SHAPES]


# int64 first: reflib does not align tensors, and the C reader loads int64 with aligned reads
ref = {"sizes": torch.tensor(sizes, dtype=torch.int64), "P0": P0, "G": G, "LR": LR.float()}
f, st = run_flat(lambda p: torch.optim.SGD(groups(p, 0.01), lr=1.0, momentum=0.9, dampening=0.1),
                 ["momentum_buffer"])
ref["sgd_final"], ref["sgd_momentum_buffer"] = f, st["momentum_buffer"]
f, st = run_flat(lambda p: torch.optim.SGD(groups(p, 0.01), lr=1.0, momentum=0.9, nesterov=True),
                 ["momentum_buffer"])
ref["nesterov_final"], ref["nesterov_momentum_buffer"] = f, st["momentum_buffer"]
f, _ = run_flat(lambda p: torch.optim.SGD(groups(p, 0.01), lr=1.0), [])
ref["plain_final"] = f
f, st = run_flat(lambda p: torch.optim.AdamW(groups(p, 0.1), lr=1.0, betas=(0.9, 0.95), eps=1e-6),
                 ["exp_avg", "exp_avg_sq"])
ref["adamw_final"], ref["adamw_exp_avg"], ref["adamw_exp_avg_sq"] = (
    f, st["exp_avg"], st["exp_avg_sq"])
reflib.save(f"{out}/optim_flat.safetensors", ref)

# ---------------------------------------------------------------------------------------------
# LR schedules: record param_groups[0]["lr"] before each optimizer step (torch's convention:
# optimizer.step() then scheduler.step()).
from torch.optim import lr_scheduler as L  # noqa: E402

# SequentialLR calls scheduler.step(0) at the milestone, which warns about the epoch argument
warnings.filterwarnings("ignore", category=UserWarning, module="torch.optim.lr_scheduler")

BASE, STEPS = 0.1, 30


def sched_lrs(make):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=BASE)
    sch = make(opt)
    lrs = []
    for _ in range(STEPS):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sch.step()
    return torch.tensor(lrs, dtype=torch.float64).float()


def warm(opt, w):
    return L.LinearLR(opt, start_factor=1.0 / (w + 1), end_factor=1.0, total_iters=w)


def seq(opt, w, decay):
    return L.SequentialLR(opt, [warm(opt, w), decay], milestones=[w])


sched = {
    # name: (lrs, kind, warmup, total, min_lr, step_size, gamma); kinds as dt_lr_kind
    "constant_w5": (sched_lrs(lambda o: warm(o, 5)), 0, 5, 0, 0.0, 0, 0.0),
    "linear_w5": (sched_lrs(lambda o: seq(o, 5, L.LinearLR(o, 1.0, 0.1, total_iters=20))),
                  1, 5, 25, 0.01, 0, 0.0),
    "linear_w0": (sched_lrs(lambda o: L.LinearLR(o, 1.0, 0.0, total_iters=30)), 1, 0, 30, 0.0, 0,
                  0.0),
    "cosine_w5": (sched_lrs(lambda o: seq(o, 5, L.CosineAnnealingLR(o, T_max=25, eta_min=0.005))),
                  2, 5, 30, 0.005, 0, 0.0),
    "cosine_w0": (sched_lrs(lambda o: L.CosineAnnealingLR(o, T_max=30, eta_min=0.0)), 2, 0, 30,
                  0.0, 0, 0.0),
    "step_w0": (sched_lrs(lambda o: L.StepLR(o, step_size=7, gamma=0.5)), 3, 0, 0, 0.0, 7, 0.5),
    "step_w3": (sched_lrs(lambda o: seq(o, 3, L.StepLR(o, step_size=4, gamma=0.7))), 3, 3, 0, 0.0,
                4, 0.7),
}
sref = {"base_lr": torch.tensor([BASE])}
for name, (lrs, kind, w, total, mn, ss, gm) in sched.items():
    sref[name] = lrs
    sref[name + ".params"] = torch.tensor([kind, w, total, mn, ss, gm], dtype=torch.float64).float()
reflib.save(f"{out}/optim_sched.safetensors", sref)

# ---------------------------------------------------------------------------------------------
# MLP: 8 -> 16 -> relu -> 4, cross-entropy (mean over the batch of 8), 20 steps, one batch per
# step. LR: warmup 3 then cosine to 0.1 * base at step 20. Clipping at max_norm, chosen so that
# some steps clip and some do not (checked below).
D_IN, D_H, D_OUT, B, MSTEPS, W = 8, 16, 4, 8, 20, 3
fc1, fc2 = torch.nn.Linear(D_IN, D_H), torch.nn.Linear(D_H, D_OUT)
init = {"fc1.weight": fc1.weight, "fc1.bias": fc1.bias, "fc2.weight": fc2.weight,
        "fc2.bias": fc2.bias}
init = {k: v.detach().clone() for k, v in init.items()}
X = torch.randn(MSTEPS, B, D_IN)
# learnable labels (a fixed random linear teacher), so the loss actually falls
Y = (X @ torch.randn(D_IN, D_OUT)).argmax(-1).to(torch.int64)
mref = {"X": X, "Y": Y}
for k, v in init.items():
    mref["init." + k] = v

RUNS = {
    # name: (optimizer factory, base lr, max_norm)
    "sgd": (lambda dec, nodec, lr: torch.optim.SGD(
        [{"params": dec, "weight_decay": 1e-4}, {"params": nodec, "weight_decay": 0.0}],
        lr=lr, momentum=0.9, nesterov=True), 0.2, 0.8),
    "adamw": (lambda dec, nodec, lr: torch.optim.AdamW(
        [{"params": dec, "weight_decay": 0.01}, {"params": nodec, "weight_decay": 0.0}],
        lr=lr), 0.05, 0.8),
}
for run, (make, base, max_norm) in RUNS.items():
    l1, l2 = torch.nn.Linear(D_IN, D_H), torch.nn.Linear(D_H, D_OUT)
    with torch.no_grad():
        l1.weight.copy_(init["fc1.weight"]); l1.bias.copy_(init["fc1.bias"])
        l2.weight.copy_(init["fc2.weight"]); l2.bias.copy_(init["fc2.bias"])
    params = [l1.weight, l1.bias, l2.weight, l2.bias]
    opt = make([l1.weight, l2.weight], [l1.bias, l2.bias], base)
    sch = L.SequentialLR(opt, [warm(opt, W), L.CosineAnnealingLR(opt, T_max=MSTEPS - W,
                                                                  eta_min=0.1 * base)],
                         milestones=[W])
    losses, norms, lrs = [], [], []
    for s in range(MSTEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(l2(torch.relu(l1(X[s]))), Y[s])
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sch.step()
        losses.append(loss.item())
        norms.append(norm.item())
    n_clipped = sum(1 for n in norms if n > max_norm)
    assert 0 < n_clipped < MSTEPS, f"{run}: {n_clipped} of {MSTEPS} steps clipped; retune"
    mref[run + ".loss"] = torch.tensor(losses)
    mref[run + ".norm"] = torch.tensor(norms)
    mref[run + ".lr"] = torch.tensor(lrs, dtype=torch.float64).float()
    mref[run + ".params"] = torch.tensor([base, max_norm, W, MSTEPS], dtype=torch.float64).float()
    for name, p in zip(["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"], params):
        mref[run + ".final." + name] = p.detach().clone()
    print(f"{run}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, {n_clipped}/{MSTEPS} steps clipped")

# Gradients of the first batch at the initial weights (for the accumulation test).
l1, l2 = torch.nn.Linear(D_IN, D_H), torch.nn.Linear(D_H, D_OUT)
with torch.no_grad():
    l1.weight.copy_(init["fc1.weight"]); l1.bias.copy_(init["fc1.bias"])
    l2.weight.copy_(init["fc2.weight"]); l2.bias.copy_(init["fc2.bias"])
loss = torch.nn.functional.cross_entropy(l2(torch.relu(l1(X[0]))), Y[0])
loss.backward()
mref["grad0.loss"] = loss.detach().reshape(1)
for name, p in zip(["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"],
                   [l1.weight, l1.bias, l2.weight, l2.bias]):
    mref["grad0." + name] = p.grad
reflib.save(f"{out}/optim_mlp.safetensors", mref)
print("wrote", out)
