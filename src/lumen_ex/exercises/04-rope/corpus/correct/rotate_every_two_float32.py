# expect-note: test_dtype[float64] test_gradients_flow
"""Correct: GPT-J's "rotate every two" with interleaved tables, as transformers writes it for
adjacent pairs. The angles are computed in float32 (inv_freq from an int64 arange cast with
.float()), each angle repeated twice in place with repeat_interleave, and cos/sin cast to x's dtype:
x * cos + rotate_every_two(x) * sin. Float64 inputs get float64 results carrying float32 rounding:
accepted, with a note (docs/tolerances.md)."""

import torch


def rotate_every_two(x):
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def rope(x, positions, base=10000.0):
    dim = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64, device=x.device).float() / dim))
    freqs = positions[:, None].float() * inv_freq[None, :]           # (L, d/2), float32
    emb = freqs.repeat_interleave(2, dim=-1)                          # (L, d): angle i at 2i and 2i+1
    cos = emb.cos().to(x.dtype)
    sin = emb.sin().to(x.dtype)
    return x * cos + rotate_every_two(x) * sin
