"""A ResNet written by dtrain (tests/nn/test_resnet.c) loads into torchvision with
load_state_dict(strict=True), every tensor bit-identical to the weights dtrain read."""
import sys

import torch
import torchvision
from safetensors.torch import load_file

d = sys.argv[1]
orig = load_file(f"{d}/r18s_train_weights.safetensors")
ours = load_file(f"{d}/r18s_train_dtrain.safetensors")
m = torchvision.models.resnet18(num_classes=10)
m.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
m.maxpool = torch.nn.Identity()
m.load_state_dict(ours, strict=True)
bad = [k for k in orig if not torch.equal(orig[k], m.state_dict()[k])]
print(f"{len(orig)} tensors loaded strictly; {len(bad)} differ")
sys.exit(1 if bad or set(orig) != set(ours) else 0)
