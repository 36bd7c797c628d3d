# The PyTorch Llama (and LoRA wrapper) of the peer benchmarks: bench_llama.py (single process,
# which takes its model from here) and bench_ddp.py (DDP).
import math, torch, torch.nn as nn, torch.nn.functional as F

class RMSNorm(nn.Module):
    def __init__(s, d, eps=1e-5): super().__init__(); s.eps = eps; s.weight = nn.Parameter(torch.ones(d))
    def forward(s, x): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s.eps) * s.weight

class LoRALinear(nn.Module):
    def __init__(s, base, r, alpha=16):
        super().__init__(); s.base = base; s.r = r; s.scale = alpha / r
        s.A = nn.Parameter(torch.randn(r, base.in_features) / math.sqrt(base.in_features))
        s.B = nn.Parameter(torch.zeros(base.out_features, r))
    def forward(s, x): return s.base(x) + F.linear(F.linear(x, s.A), s.B) * s.scale

def rope_cache(seq, hd, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, hd, 2).float() / hd)); t = torch.arange(seq).float()
    f = torch.outer(t, inv); return f.cos(), f.sin()          # (seq, hd/2)
def apply_rope(x, cos, sin):                                 # x: (B, H, T, hd)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

class Block(nn.Module):
    def __init__(s, d, h, kvh, hid):
        super().__init__(); s.h, s.kvh, s.hd = h, kvh, d // h
        s.wq = nn.Linear(d, h * s.hd, bias=False); s.wk = nn.Linear(d, kvh * s.hd, bias=False)
        s.wv = nn.Linear(d, kvh * s.hd, bias=False); s.wo = nn.Linear(h * s.hd, d, bias=False)
        s.w1 = nn.Linear(d, hid, bias=False); s.w3 = nn.Linear(d, hid, bias=False); s.w2 = nn.Linear(hid, d, bias=False)
        s.n1 = RMSNorm(d); s.n2 = RMSNorm(d)
    def forward(s, x, cos, sin, mask):
        B, T, D = x.shape; hx = s.n1(x)
        q = s.wq(hx).view(B, T, s.h, s.hd).transpose(1, 2)
        k = s.wk(hx).view(B, T, s.kvh, s.hd).transpose(1, 2)
        v = s.wv(hx).view(B, T, s.kvh, s.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = s.h // s.kvh
        k = k.repeat_interleave(rep, dim=1); v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(s.hd)) + mask
        o = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
        x = x + s.wo(o)
        hx = s.n2(x)
        return x + s.w2(F.silu(s.w1(hx)) * s.w3(hx))

class Llama(nn.Module):
    def __init__(s, vocab, dim, heads, kv_heads, hidden, layers, seq):
        super().__init__(); s.emb = nn.Embedding(vocab, dim)
        s.blocks = nn.ModuleList([Block(dim, heads, kv_heads, hidden) for _ in range(layers)])
        s.norm = RMSNorm(dim); s.head = nn.Linear(dim, vocab, bias=False)
        cos, sin = rope_cache(seq, dim // heads); s.register_buffer('cos', cos); s.register_buffer('sin', sin)
        s.register_buffer('mask', torch.full((seq, seq), float('-inf')).triu(1))
    def forward(s, idx):
        x = s.emb(idx)
        for b in s.blocks: x = b(x, s.cos, s.sin, s.mask)
        return s.head(s.norm(x))

