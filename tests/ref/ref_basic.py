"""PyTorch reference for the broadcasting element-wise ops (tests/graph/test_graph.c)."""
import reflib

torch = reflib.torch_setup(1)
d = reflib.out_dir()
a = torch.randn(4, 3, 5, requires_grad=True)
b = torch.randn(3, 1, requires_grad=True)
c = torch.randn(4, 1, 5, requires_grad=True)
out = (((a + b) * c) - b) * 1.5
R = torch.randn_like(out)
(out * R).sum().backward()
reflib.save(f"{d}/basic.safetensors", {"a": a, "b": b, "c": c, "R": R, "out": out,
                                       "grad_a": a.grad, "grad_b": b.grad, "grad_c": c.grad})
