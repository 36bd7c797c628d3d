"""References for the attention family: dt_rope (Hugging Face Llama rotate_half convention,
default and Llama-3.1 "llama3" scaled frequencies) and dt_attention (grouped-query
scaled-dot-product attention, causal and not).

Writes attn.safetensors into argv[1]. Every case "<name>." holds its inputs, the output-gradient
weights R (loss = sum(out * R)), the output and the input gradients.

Debian's PyTorch 1.13 has neither scaled_dot_product_attention's enable_gqa nor transformers,
so the references are spelled out: k, v expanded with repeat_interleave (as transformers'
repeat_kv does), explicit softmax(q k^T * scale + causal mask) v in float64; rotary embedding as
transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb in float32 (how HF evaluates it), and
_compute_default_rope_parameters / _compute_llama3_parameters copied op for op.
"""
import math

import reflib

torch = reflib.torch_setup(0)
OUT = reflib.out_dir()
T = {}


# ------------------------------------------------------------------ attention

def attention_ref(q, k, v, causal, scale):
    g = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(g, dim=1)  # query head h reads kv head h // g
    v = v.repeat_interleave(g, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        n = q.shape[2]
        mask = torch.ones(n, n, dtype=torch.bool).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def attention_case(name, B, Hq, Hkv, n, D, causal, scale=0.0):
    q = torch.randn(B, Hq, n, D)
    k = torch.randn(B, Hkv, n, D)
    v = torch.randn(B, Hkv, n, D)
    R = torch.randn(B, Hq, n, D)
    sc = scale if scale > 0 else 1.0 / math.sqrt(D)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    out = attention_ref(q64, k64, v64, causal, sc)
    (out * R.double()).sum().backward()
    T.update({f"{name}.q": q, f"{name}.k": k, f"{name}.v": v, f"{name}.R": R,
              f"{name}.cfg": torch.tensor([float(causal), scale]),
              f"{name}.out": out.float(), f"{name}.dq": q64.grad.float(),
              f"{name}.dk": k64.grad.float(), f"{name}.dv": v64.grad.float()})


# T = 130: three 64-key tiles, the last one ragged (2 rows).
attention_case("gqa_causal", 2, 4, 2, 130, 16, True)
attention_case("gqa_full", 2, 4, 2, 130, 16, False)
attention_case("mha_causal", 2, 4, 4, 130, 64, True)
attention_case("mha_full", 1, 3, 3, 130, 12, False, scale=0.3)  # Dh not a multiple of 8
attention_case("mqa_causal", 1, 4, 1, 77, 24, True)


# ------------------------------------------------------------------ rope

def default_inv_freq(base, dim):
    # transformers: _compute_default_rope_parameters
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))


def llama3_inv_freq(base, dim, factor, low_freq_factor, high_freq_factor, old_context_len):
    # transformers: _compute_llama3_parameters, verbatim
    inv_freq = default_inv_freq(base, dim)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    inv_freq_llama = torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
    return inv_freq_llama


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_ref(x, inv_freq, position_ids):
    # LlamaRotaryEmbedding.forward (attention_scaling 1.0 for default and llama3)
    inv = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    pos = position_ids[:, None, :].float()
    freqs = (inv @ pos).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    # apply_rotary_pos_emb, unsqueeze_dim=1 for [B, H, T, Dh]
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (x * cos) + (rotate_half(x) * sin)


def rope_case(name, B, H, n, D, inv_freq, positions=None, pos_shape=None):
    x = torch.randn(B, H, n, D)
    R = torch.randn(B, H, n, D)
    if positions is None:
        pid = torch.arange(n)[None, :].expand(B, n)
    else:
        pid = positions if positions.dim() == 2 else positions[None, :]
        pid = pid.expand(B, n)
        T[f"{name}.pos"] = positions
    xg = x.clone().requires_grad_()
    out = rope_ref(xg, inv_freq, pid)
    (out * R).sum().backward()
    T.update({f"{name}.x": x, f"{name}.R": R, f"{name}.inv_freq": inv_freq.float(),
              f"{name}.out": out.detach(), f"{name}.dx": xg.grad})


L31 = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, old_context_len=8192)
# Frequency tables: Llama-2 style default, and Llama-3.1 8B (head_dim 128, theta 500000).
T["table.default_1e4_64"] = default_inv_freq(10000.0, 64)
T["table.default_5e5_128"] = default_inv_freq(500000.0, 128)
T["table.llama3_5e5_128"] = llama3_inv_freq(500000.0, 128, **L31)
T["table.llama3_5e5_32"] = llama3_inv_freq(500000.0, 32, **L31)

rope_case("rope_default", 2, 3, 37, 16, default_inv_freq(10000.0, 16))
# llama3 frequencies with per-batch positions [B, T] (i64), as a padded batch would have
rope_case("rope_llama3", 2, 2, 21, 32, llama3_inv_freq(500000.0, 32, **L31),
          positions=torch.randint(0, 300, (2, 21), dtype=torch.int64))
# shared positions [T] (i32), far positions (long context), full Llama-3.1 head dim
rope_case("rope_long", 1, 2, 19, 128, llama3_inv_freq(500000.0, 128, **L31),
          positions=torch.randint(0, 100000, (19,), dtype=torch.int64).to(torch.int32))

reflib.save(f"{OUT}/attn.safetensors", T)
