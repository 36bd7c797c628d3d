"""PyTorch references for the CNN family: conv2d, batchnorm2d, max/avg pooling, global avgpool.

Writes <out_dir>/cnn.safetensors. For each case "<case>.<name>": the inputs and parameters, R
(the weights of loss = sum(out * R), so every output element gets its own gradient), the output
and the gradient of every input and parameter. Batchnorm cases also hold the running statistics
before (rm, rv) and after (rm_new, rv_new) the forward pass. Case parameters are repeated as
small f32 tensors ("<case>.cfg") so the C test reads them from the file.
"""
import reflib

torch = reflib.torch_setup(0)
F = torch.nn.functional
T = {}


def put(case, **kw):
    for k, v in kw.items():
        # clone: a detached view would follow later in-place updates (running statistics)
        T[f"{case}.{k}"] = v.detach().clone().contiguous() if isinstance(v, torch.Tensor) else v


def randn(*shape):
    return torch.randn(*shape, dtype=torch.float32)


def cfg(*vals):
    return torch.tensor([float(v) for v in vals], dtype=torch.float32)


# conv2d: name, N, C, H, W, O, KH, KW, stride, pad, dilation, groups, bias
CONV = [
    ("conv_basic", 2, 4, 7, 7, 6, 3, 3, (1, 1), (1, 1), (1, 1), 1, True),
    ("conv_s2", 2, 4, 8, 8, 6, 3, 3, (2, 2), (1, 1), (1, 1), 1, True),
    ("conv_dil2", 2, 4, 9, 9, 5, 3, 3, (1, 1), (2, 2), (2, 2), 1, False),
    ("conv_g2", 2, 4, 6, 6, 6, 3, 3, (1, 1), (1, 1), (1, 1), 2, True),
    ("conv_dw", 2, 8, 8, 8, 8, 3, 3, (1, 1), (1, 1), (1, 1), 8, False),
    ("conv_dw_x2_s2", 2, 4, 8, 8, 8, 3, 3, (2, 2), (1, 1), (1, 1), 4, True),
    ("conv_1x1", 2, 8, 5, 5, 12, 1, 1, (1, 1), (0, 0), (1, 1), 1, False),
    ("conv_1x1_s2", 2, 8, 8, 8, 16, 1, 1, (2, 2), (0, 0), (1, 1), 1, False),
    ("conv_rect", 2, 3, 7, 9, 5, 3, 2, (2, 1), (1, 0), (1, 2), 1, True),
    ("conv_stem", 4, 3, 16, 16, 16, 3, 3, (1, 1), (1, 1), (1, 1), 1, False),
    ("conv_resnet", 4, 64, 16, 16, 64, 3, 3, (1, 1), (1, 1), (1, 1), 1, False),
    ("conv_resnet_s2", 4, 64, 16, 16, 128, 3, 3, (2, 2), (1, 1), (1, 1), 1, False),
    # large enough for oneDNN to choose Winograd for forward and backward-data
    ("conv_wino", 32, 64, 16, 16, 64, 3, 3, (1, 1), (1, 1), (1, 1), 1, True),
    # 1x1 spatial (ResNet layer4 on 32x32 images with the stock stem)
    ("conv_1px", 4, 32, 1, 1, 16, 3, 3, (1, 1), (1, 1), (1, 1), 1, False),
]
for name, N, C, H, W, O, KH, KW, s, p, d, g, has_bias in CONV:
    x = randn(N, C, H, W).requires_grad_()
    fan_in = (C // g) * KH * KW
    w = (randn(O, C // g, KH, KW) / fan_in ** 0.5).requires_grad_()
    b = randn(O).requires_grad_() if has_bias else None
    y = F.conv2d(x, w, b, s, p, d, g)
    R = randn(*y.shape)
    (y * R).sum().backward()
    put(name, x=x, w=w, R=R, y=y, gx=x.grad, gw=w.grad,
        cfg=cfg(*s, *p, *d, g, int(has_bias)))
    if has_bias:
        put(name, b=b, gb=b.grad)

# batchnorm: name, x shape, training, offset added to x (a large mean tests the variance pass)
BN = [
    ("bn_train", (4, 8, 5, 5), True, 0.0),
    ("bn_eval", (4, 8, 5, 5), False, 0.0),
    ("bn_offset", (4, 8, 5, 5), True, 20.0),
    ("bn_resnet", (4, 64, 16, 16), True, 0.0),
    ("bn_2d", (6, 5), True, 0.0),
    ("bn_1px", (4, 16, 1, 1), True, 0.0),
]
for name, shape, training, off in BN:
    C = shape[1]
    x = (randn(*shape) * 1.5 + off).requires_grad_()
    w = (1.0 + 0.3 * randn(C)).requires_grad_()
    b = (0.2 * randn(C)).requires_grad_()
    rm0 = 0.5 * randn(C)
    rv0 = 0.5 + torch.rand(C)
    rm, rv = rm0.clone(), rv0.clone()
    y = F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.1, eps=1e-5)
    R = randn(*y.shape)
    (y * R).sum().backward()
    put(name, x=x, w=w, b=b, rm=rm0, rv=rv0, R=R, y=y, gx=x.grad, gw=w.grad, gb=b.grad,
        rm_new=rm, rv_new=rv, cfg=cfg(int(training)))

# pooling: name, kind, x shape, kernel, stride, pad
POOL = [
    ("maxpool_stem", "max", (2, 3, 9, 9), (3, 3), (2, 2), (1, 1)),
    ("maxpool_k2", "max", (2, 4, 8, 8), (2, 2), (2, 2), (0, 0)),
    ("maxpool_rect", "max", (2, 3, 7, 8), (3, 2), (2, 1), (1, 1)),
    ("maxpool_thin", "max", (2, 3, 5, 1), (3, 3), (1, 1), (1, 1)),
    ("maxpool_s3", "max", (2, 2, 10, 11), (3, 3), (3, 3), (1, 1)),
    ("maxpool_resnet", "max", (4, 64, 32, 32), (3, 3), (2, 2), (1, 1)),
    ("avgpool_k3", "avg", (2, 3, 9, 9), (3, 3), (2, 2), (1, 1)),
    ("avgpool_k2", "avg", (2, 4, 8, 8), (2, 2), (2, 2), (0, 0)),
    ("avgpool_rect", "avg", (2, 3, 7, 8), (3, 2), (2, 1), (1, 1)),
    ("avgpool_thin", "avg", (2, 3, 5, 1), (3, 3), (1, 1), (1, 1)),
    ("avgpool_s3", "avg", (2, 2, 10, 11), (3, 3), (3, 3), (1, 1)),
]
for name, kind, shape, k, s, p in POOL:
    x = randn(*shape).requires_grad_()
    if kind == "max":
        y = F.max_pool2d(x, k, s, p)
    else:
        y = F.avg_pool2d(x, k, s, p, count_include_pad=True)
    R = randn(*y.shape)
    (y * R).sum().backward()
    put(name, x=x, R=R, y=y, gx=x.grad, cfg=cfg(*k, *s, *p))

for name, shape in (("gap", (4, 8, 5, 5)), ("gap_resnet", (8, 512, 4, 4))):
    x = randn(*shape).requires_grad_()
    y = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
    R = randn(*y.shape)
    (y * R).sum().backward()
    put(name, x=x, R=R, y=y, gx=x.grad)

# A ResNet basic block without the ReLUs (not in this family), in training mode:
# out = gap(bn2(conv2(bn1(conv1(x)))) + x); x feeds both conv1 and the residual, so its
# gradient accumulates across two ops.
C, N, H = 16, 4, 8
x = randn(N, C, H, H).requires_grad_()
w1 = (randn(C, C, 3, 3) / (9 * C) ** 0.5).requires_grad_()
w2 = (randn(C, C, 3, 3) / (9 * C) ** 0.5).requires_grad_()
g1, b1 = (1 + 0.2 * randn(C)).requires_grad_(), (0.1 * randn(C)).requires_grad_()
g2, b2 = (1 + 0.2 * randn(C)).requires_grad_(), (0.1 * randn(C)).requires_grad_()
rm1, rv1, rm2, rv2 = torch.zeros(C), torch.ones(C), torch.zeros(C), torch.ones(C)
put("block", rm1=rm1, rv1=rv1, rm2=rm2, rv2=rv2)  # PyTorch's initial running statistics
h = F.batch_norm(F.conv2d(x, w1, None, 1, 1), rm1, rv1, g1, b1, True, 0.1, 1e-5)
h = F.batch_norm(F.conv2d(h, w2, None, 1, 1), rm2, rv2, g2, b2, True, 0.1, 1e-5)
y = torch.flatten(F.adaptive_avg_pool2d(h + x, 1), 1)
R = randn(*y.shape)
(y * R).sum().backward()
put("block", x=x, w1=w1, w2=w2, g1=g1, b1=b1, g2=g2, b2=b2, R=R, y=y, gx=x.grad,
    gw1=w1.grad, gw2=w2.grad, gg1=g1.grad, gb1=b1.grad, gg2=g2.grad, gb2=b2.grad,
    rm1_new=rm1, rv1_new=rv1, rm2_new=rm2, rv2_new=rv2)

reflib.save(f"{reflib.out_dir()}/cnn.safetensors", T)
print(f"wrote {len(T)} tensors")
