"""PyTorch references for the nn family: layernorm, rmsnorm (Hugging Face LlamaRMSNorm),
relu / gelu (erf and tanh) / silu, softmax, cross-entropy (label smoothing, ignore_index),
transpose, permute, concat, narrow and split.

Writes <out_dir>/nn.safetensors. For each case "<case>.<name>": the inputs, R (the weights of
loss = sum(out * R), so every output element gets its own gradient), the output "out" and the
gradient of every input that has one ("g<input>"). Split cases have one R and one output per
piece instead (R0, out0, ...), see below. Dropout has no PyTorch reference (its mask comes from
our Philox stream); tests/ops/nn_dropout.c checks it against its own mask.
"""
import reflib

torch = reflib.torch_setup(0)
F = torch.nn.functional
T = {}


def put(case, **kw):
    for k, v in kw.items():
        T[f"{case}.{k}"] = v.detach().contiguous() if isinstance(v, torch.Tensor) else v


def randn(*shape, scale=1.0, shift=0.0):
    return torch.randn(tuple(shape), dtype=torch.float32) * scale + shift


def leaf(t):
    return t.detach().clone().requires_grad_()


def dot_backward(out):
    R = randn(*out.shape)
    (out * R).sum().backward()
    return R


# ---------------------------------------------------------------- layernorm
# D = 45 exercises the vector tails; [100, 200] has more rows than the reduction blocks (32)
# and is large enough for the parallel path.
for case, shape, parts, eps in (("ln", (3, 5, 45), "wb", 1e-5), ("ln_w", (3, 5, 45), "w", 1e-5),
                                ("ln_none", (4, 45), "", 1e-5),
                                ("ln_big", (100, 200), "wb", 1e-6)):
    D = shape[-1]
    x = leaf(randn(*shape, scale=2.0, shift=0.5))
    w = leaf(randn(D, scale=0.5, shift=1.0)) if "w" in parts else None
    b = leaf(randn(D, scale=0.1)) if "b" in parts else None
    out = F.layer_norm(x, (D,), w, b, eps)
    R = dot_backward(out)
    put(case, x=x, R=R, out=out, gx=x.grad)
    if w is not None:
        put(case, w=w, gw=w.grad)
    if b is not None:
        put(case, b=b, gb=b.grad)


# ---------------------------------------------------------------- rmsnorm
def llama_rmsnorm(x, w, eps):
    """transformers' LlamaRMSNorm.forward."""
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return w * h.to(input_dtype) if w is not None else h.to(input_dtype)


for case, shape, has_w, eps in (("rms", (3, 5, 45), True, 1e-6), ("rms_now", (4, 45), False, 1e-5),
                                ("rms_big", (100, 200), True, 1e-6)):
    D = shape[-1]
    x = leaf(randn(*shape, scale=2.0, shift=0.3))
    w = leaf(randn(D, scale=0.5, shift=1.0)) if has_w else None
    out = llama_rmsnorm(x, w, eps)
    R = dot_backward(out)
    put(case, x=x, R=R, out=out, gx=x.grad)
    if w is not None:
        put(case, w=w, gw=w.grad)

# ---------------------------------------------------------------- activations
# act_big (38700 elements) takes the parallel path; act_ext has large magnitudes (saturation).
ext = torch.tensor([-100.0, -30.0, -12.0, -8.0, -3.0, -1e-3, 1e-3, 0.5, 3.0, 8.0, 12.0, 30.0,
                    100.0])
for case, x0 in (("act", randn(8, 37, scale=2.0)), ("act_big", randn(300, 129, scale=4.0)),
                 ("act_ext", ext)):
    for name, fn in (("relu", F.relu), ("gelu", lambda t: F.gelu(t)),
                     ("gelu_tanh", lambda t: F.gelu(t, approximate="tanh")), ("silu", F.silu)):
        x = leaf(x0)
        out = fn(x)
        R = dot_backward(out)
        put(f"{case}_{name}", x=x, R=R, out=out, gx=x.grad)

# ---------------------------------------------------------------- softmax
big_rows = randn(4, 50, scale=3.0)
big_rows[1] += 1000.0  # huge logits: needs the max subtraction
for case, x0 in (("sm", randn(4, 3, 19, scale=3.0)), ("sm_big", randn(64, 1000, scale=2.0)),
                 ("sm_shift", big_rows)):
    x = leaf(x0)
    out = torch.softmax(x, -1)
    R = dot_backward(out)
    put(case, x=x, R=R, out=out, gx=x.grad)


# ---------------------------------------------------------------- cross-entropy
# Classes in the last dim (flattened to [N, C] for PyTorch). The output is a scalar; R is a
# scalar too (it scales the incoming gradient).
def ce_case(case, shape, ls, ii, ignored=(), ttype=torch.int64, force=()):
    C = shape[-1]
    x = leaf(randn(*shape, scale=2.0))
    t = torch.randint(0, C, shape[:-1], dtype=torch.int64)
    flat = t.view(-1)
    for i, v in force:
        flat[i] = v
    for i in ignored:
        flat[i] = ii
    out = F.cross_entropy(x.reshape(-1, C), flat, reduction="mean", label_smoothing=ls,
                          ignore_index=ii)
    R = dot_backward(out)
    put(case, x=x, t=t.to(ttype), R=R, out=out, gx=x.grad)


ce_case("ce_plain", (16, 10), 0.0, -100)
ce_case("ce_ign", (16, 10), 0.0, -100, ignored=(2, 5, 11))
ce_case("ce_ls", (16, 10), 0.1, -100)
ce_case("ce_ls_ign", (16, 10), 0.1, -100, ignored=(0, 7, 8, 15))
# ignore_index that is a real class (3): rows whose target is 3 are ignored
ce_case("ce_ls_ii3", (16, 10), 0.1, 3, force=((1, 3), (4, 3), (9, 3)))
ce_case("ce_i32_3d", (2, 6, 7), 0.2, -1, ignored=(3, 10), ttype=torch.int32)
ce_case("ce_big", (64, 1000), 0.1, -100, ignored=tuple(range(0, 64, 5)))
ce_case("ce_all_ign", (4, 5), 0.1, -100, ignored=(0, 1, 2, 3))  # NaN loss, zero gradient

# ---------------------------------------------------------------- transpose / permute
for case, shape, d0, d1 in (("tr_a", (3, 4, 5), 0, 2), ("tr_b", (2, 3, 4, 5), 1, 2),
                            ("tr_big", (4, 100, 90), -1, -2)):
    x = leaf(randn(*shape))
    out = x.transpose(d0, d1)
    R = dot_backward(out)
    put(case, x=x, R=R, out=out, gx=x.grad)

for case, shape, perm in (("perm", (2, 3, 4, 5), (2, 0, 3, 1)),
                          ("perm_big", (8, 70, 4, 16), (0, 2, 1, 3)),
                          ("perm_rev", (3, 4, 5, 2, 3), (4, 3, 2, 1, 0))):
    x = leaf(randn(*shape))
    out = x.permute(*perm)
    R = dot_backward(out)
    put(case, x=x, R=R, out=out, gx=x.grad)

# ---------------------------------------------------------------- concat / narrow / split
xs = [leaf(randn(2, k, 4)) for k in (3, 1, 5)]
out = torch.cat(xs, 1)
R = dot_backward(out)
put("cat3", x0=xs[0], x1=xs[1], x2=xs[2], R=R, out=out, gx0=xs[0].grad, gx1=xs[1].grad,
    gx2=xs[2].grad)

xs = [leaf(randn(k, 3)) for k in range(1, 7)]  # six inputs: more than one node holds
out = torch.cat(xs, 0)
R = dot_backward(out)
put("cat6", R=R, out=out, **{f"x{i}": v for i, v in enumerate(xs)},
    **{f"gx{i}": v.grad for i, v in enumerate(xs)})

a = leaf(randn(3, 4))
out = torch.cat([a, a], -1)  # the same input twice: its gradient is the sum of both halves
R = dot_backward(out)
put("cat_dup", x0=a, R=R, out=out, gx0=a.grad)

x = leaf(randn(3, 8))
out = x.narrow(1, 2, 4)
R = dot_backward(out)
put("narrow", x=x, R=R, out=out, gx=x.grad)

# split: x [4, 10, 3] along dim 1 into (2, 5, 3); the loss uses pieces 0 and 2 only, so the
# middle of x's gradient must come out zero (the first narrow's backward writes it).
x = leaf(randn(4, 10, 3))
p = torch.split(x, [2, 5, 3], dim=1)
R0, R2 = randn(*p[0].shape), randn(*p[2].shape)
((p[0] * R0).sum() + (p[2] * R2).sum()).backward()
put("split", x=x, R0=R0, R2=R2, out0=p[0], out1=p[1], out2=p[2], gx=x.grad)

# split_res: x [6, 8] along dim 0 into (1, 2, 3), every piece used, and x used directly too.
x = leaf(randn(6, 8))
p = torch.split(x, [1, 2, 3], dim=0)
Rx, Rs = randn(6, 8), [randn(*q.shape) for q in p]
((x * Rx).sum() + sum((q * r).sum() for q, r in zip(p, Rs))).backward()
put("split_res", x=x, Rx=Rx, R0=Rs[0], R1=Rs[1], R2=Rs[2], out0=p[0], out1=p[1], out2=p[2],
    gx=x.grad)

reflib.save(f"{reflib.out_dir()}/nn.safetensors", T)
print(f"ref_nn: wrote {len(T)} tensors")
