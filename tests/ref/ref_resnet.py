"""References for tests/nn/test_resnet.c: torchvision's own ResNets with random weights.

For each case: <case>_weights.safetensors (the state dict, written by the real `safetensors`
library) and <case>_ref.safetensors (input x, labels y, logits, loss, grad.<param> for every
trainable parameter, and after.<buffer> for running statistics after one forward in the mode).

The expected values are computed in float64 (the exact answer for these f32 weights), and for
each tensor err.<key> holds how far PyTorch's own float32 run is from it (max abs): a train-mode
batchnorm over few elements per channel amplifies rounding a lot, so the C test holds dtrain to
"as close to the exact answer as PyTorch itself is" rather than to PyTorch's f32 rounding.
"""
import os

import torch
import torchvision
from safetensors.torch import save_file

import reflib

CASES = [  # name, depth, small stem, train mode, batch, image size
    ("r18s_train", 18, True, True, 4, 32),
    ("r18s_eval", 18, True, False, 4, 32),
    ("r50_train", 50, False, True, 4, 64),
    ("r50_eval", 50, False, False, 2, 64),
]


def make(depth, small, seed):
    torch.manual_seed(seed)
    m = getattr(torchvision.models, f"resnet{depth}")(num_classes=10)
    if small:  # the small-image stem: 3x3 stride-1 conv, no max-pool
        m.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        torch.nn.init.kaiming_normal_(m.conv1.weight, mode="fan_out", nonlinearity="relu")
        m.maxpool = torch.nn.Identity()
    with torch.no_grad():  # non-trivial normalisation parameters and statistics
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.normal_(0, 0.1)
                mod.running_mean.normal_(0, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
                mod.num_batches_tracked.fill_(3)
    return m


def main():
    torch.set_num_threads(2)
    d = reflib.out_dir()
    for i, (name, depth, small, train, n, hw) in enumerate(CASES):
        m = make(depth, small, 100 + i)
        save_file({k: v.contiguous() for k, v in m.state_dict().items()},
                  f"{d}/{name}_weights.safetensors", metadata={"format": "pt"})
        x = torch.randn(n, 3, hw, hw)
        y = torch.randint(0, 10, (n,))
        m64 = make(depth, small, 100 + i).double()
        r32, r64 = run(m, x, y, train), run(m64, x.double(), y, train)
        out = {"x": x, "y": y}
        for k, v in r64.items():
            out[k] = v.float()
            out["err." + k] = (r32[k].double() - v).abs().max().float().reshape(1)
            if os.environ.get("DT_REF_DEBUG"):
                out["t32." + k] = r32[k]
        reflib.save(f"{d}/{name}_ref.safetensors", out)


def run(m, x, y, train):
    m.train(train)
    logits = m(x)
    loss = torch.nn.functional.cross_entropy(logits, y)
    loss.backward()
    out = {"logits": logits.detach(), "loss": loss.detach().reshape(1)}
    for k, p in m.named_parameters():
        out["grad." + k] = p.grad
    for k, b in m.named_buffers():
        if b.is_floating_point():
            out["after." + k] = b
    return out


if __name__ == "__main__":
    main()
