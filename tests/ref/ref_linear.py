"""PyTorch references for the linear family: matmul, linear (f32 and bf16 weight), embedding.

Writes <out_dir>/linear.safetensors. For each case "<case>.<name>": the inputs, R (the weights
of loss = sum(out * R), so every output element gets its own gradient), the output and the
gradient of every input that has one.
"""
import os

import reflib

torch = reflib.torch_setup(0)
T = {}


def put(case, **kw):
    for k, v in kw.items():
        T[f"{case}.{k}"] = v.detach().contiguous() if isinstance(v, torch.Tensor) else v


def randn(*shape):
    return torch.randn(*shape, dtype=torch.float32)


# matmul: every transpose combination, batched [2, 3, ...] and with a shared 2-D b.
M, K, N = 5, 7, 6
for shared in (0, 1):
    for ta in (0, 1):
        for tb in (0, 1):
            a = randn(2, 3, *((K, M) if ta else (M, K))).requires_grad_()
            b = (randn(*((N, K) if tb else (K, N))) if shared else
                 randn(2, 3, *((N, K) if tb else (K, N)))).requires_grad_()
            opa = a.transpose(-1, -2) if ta else a
            opb = b.transpose(-1, -2) if tb else b
            out = torch.matmul(opa, opb)
            R = randn(*out.shape)
            (out * R).sum().backward()
            put(f"mm_{'t' if ta else 'n'}{'t' if tb else 'n'}_{'s' if shared else 'b'}",
                a=a, b=b, R=R, out=out, ga=a.grad, gb=b.grad)

# plain 2-D
a = randn(9, 11).requires_grad_()
b = randn(11, 4).requires_grad_()
out = a @ b
R = randn(*out.shape)
(out * R).sum().backward()
put("mm_2d", a=a, b=b, R=R, out=out, ga=a.grad, gb=b.grad)

# linear (f32), with and without bias, 3-D and 2-D x
for case, xs, has_bias in (("lin_bias", (2, 3, 8), True), ("lin_nobias", (4, 8), False)):
    lin = torch.nn.Linear(8, 5, bias=has_bias)
    x = randn(*xs).requires_grad_()
    out = lin(x)
    R = randn(*out.shape)
    (out * R).sum().backward()
    put(case, x=x, w=lin.weight, R=R, out=out, gx=x.grad, gw=lin.weight.grad)
    if has_bias:
        put(case, b=lin.bias, gb=lin.bias.grad)

# linear with a frozen bf16 weight. Two references:
#  *_torch: PyTorch's own bf16 path, x.bfloat16() @ w.t() (result rounded to bf16), then float;
#  *_exact: the same bf16-rounded operands multiplied in float64 (products of bf16 numbers are
#           exact in f32, so an f32-accumulating kernel should match this closely).
R_, IN, OUT = 60, 96, 80
x = randn(3, 20, IN).requires_grad_()
w = (randn(OUT, IN) * 0.1).bfloat16()
bias = (randn(OUT) * 0.1).requires_grad_()
out = (x.bfloat16() @ w.t()).float() + bias
R = randn(*out.shape)
(out * R).sum().backward()
xe = x.detach().bfloat16().double()
we = w.double()
out_exact = (xe @ we.t() + bias.detach().double()).float()
gx_exact = (R.bfloat16().double() @ we).float()
put("lin_bf16", x=x, w=w, b=bias, R=R, out_torch=out, gx_torch=x.grad, gb=bias.grad,
    out_exact=out_exact, gx_exact=gx_exact)

# embedding: repeated ids, i64 ids of shape [3, 5] and i32 ids of shape [7]
for case, ids in (("emb_i64", torch.tensor([[1, 4, 4, 0, 9], [9, 9, 2, 4, 1], [0, 0, 0, 7, 3]])),
                  ("emb_i32", torch.tensor([5, 5, 5, 2, 8, 5, 0], dtype=torch.int32))):
    emb = torch.nn.Embedding(10, 20)
    out = emb(ids.long())
    R = randn(*out.shape)
    (out * R).sum().backward()
    put(case, ids=ids, table=emb.weight, R=R, out=out, gtable=emb.weight.grad)

reflib.save(os.path.join(reflib.out_dir(), "linear.safetensors"), T)
