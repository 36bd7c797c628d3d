"""PyTorch references for bf16 mixed precision (dt_graph_opts.bf16_gemm): linear, matmul and
conv2d, forward and backward, under torch.autocast('cpu', dtype=torch.bfloat16).

Writes <out_dir>/bf16.safetensors. For each case "<case>.<name>": the f32 inputs, R (the
weights of loss = sum(out * R), so dL/dout = R), and three references of the output and of
every gradient:
  *_ac:    PyTorch CPU autocast (bf16 operands; PyTorch also rounds its outputs and the
           gradients that flow between its bf16 ops to bf16);
  *_exact: the operands rounded to bf16 (x, w forward; R, w for the input gradient; R, x for
           the weight gradient), multiplied in float64: what a bf16 x bf16 -> f32 kernel gives
           up to the order of its f32 sums;
  *_f32:   plain f32, to show that the bf16 mode really rounds.
Bias gradients are sum(R) in every reference (an f32 reduction in dtrain).
"""
import os

import reflib

torch = reflib.torch_setup(0)
F = torch.nn.functional
T = {}


def put(case, **kw):
    for k, v in kw.items():
        T[f"{case}.{k}"] = v.detach().float().contiguous()


def randn(*shape):
    return torch.randn(*shape, dtype=torch.float32)


def rb(t):
    """t rounded to bf16 (nearest even), as float64."""
    return t.detach().bfloat16().double()


def refs(case, fn, ins, R):
    """fn(*ins) -> out; writes out and the gradient of every input under the three modes."""
    names = list(ins)
    # f32
    xs = [ins[k].detach().clone().requires_grad_() for k in names]
    out = fn(*xs)
    g = torch.autograd.grad(out, xs, R)
    put(case, out_f32=out, **{f"g{k}_f32": gi for k, gi in zip(names, g)})
    # autocast
    xs = [ins[k].detach().clone().requires_grad_() for k in names]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fn(*xs)
    g = torch.autograd.grad(out.float(), xs, R)
    put(case, out_ac=out, **{f"g{k}_ac": gi for k, gi in zip(names, g)})
    # exact: float64 on rounded operands; the gradients of a product are linear in (R, other
    # operand), so autograd in float64 with rounded R gives the rounded-operand products.
    xs = [rb(ins[k]).requires_grad_() for k in names]
    out = fn(*xs)
    g = torch.autograd.grad(out, xs, rb(R))
    put(case, out_exact=out, **{f"g{k}_exact": gi for k, gi in zip(names, g)})
    put(case, R=R, **ins)


# linear with bias: x [3, 20, 96], w [80, 96], b [80]
x, w, b = randn(3, 20, 96), randn(80, 96) * 0.1, randn(80) * 0.1
R = randn(3, 20, 80)
refs("lin", lambda x, w: F.linear(x, w), {"x": x, "w": w}, R)
# the bias separately: its gradient is sum(R) over rows; its forward adds exactly
T["lin.b"] = b
T["lin.gb"] = R.sum(dim=(0, 1))
T["lin.out_b_exact"] = (T["lin.out_exact"].double() + b.double()).float()

# batched matmul with a transposed b: a [2, 3, 17, 40], b [2, 3, 24, 40] -> [2, 3, 17, 24]
a, bb = randn(2, 3, 17, 40), randn(2, 3, 24, 40)
refs("mm", lambda a, b: torch.matmul(a, b.transpose(-1, -2)), {"a": a, "b": bb},
     randn(2, 3, 17, 24))

# conv2d 3x3, stride 1, pad 1 (a ResNet block's shape, channels a multiple of 8: blocked
# layouts) and a stride-2 stem-like one with 3 input channels (plain, padded by oneDNN)
for case, N, C, H, O, s in (("conv", 2, 16, 10, 16, 1), ("conv_stem", 2, 3, 12, 8, 2)):
    x = randn(N, C, H, H)
    w = randn(O, C, 3, 3) / (C * 9) ** 0.5
    fn = (lambda s: lambda x, w: F.conv2d(x, w, None, s, 1))(s)
    with torch.no_grad():
        R = randn(*fn(x, w).shape)
    refs(case, fn, {"x": x, "w": w}, R)
    T[f"{case}.cfg"] = torch.tensor([float(s)])

reflib.save(os.path.join(reflib.out_dir(), "bf16.safetensors"), T)
