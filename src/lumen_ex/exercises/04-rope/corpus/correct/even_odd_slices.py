"""Correct: explicit even/odd slicing, x[..., ::2] and x[..., 1::2], written into a fresh
empty_like output (never into x). The frequency table is built with a Python float base and
float64 positions; cos and sin are cast to x's dtype before the products."""

import torch


def rope(x, positions, base=10000.0):
    d = x.size(-1)
    i = torch.arange(0, d, 2, dtype=torch.float64, device=x.device)   # 0, 2, 4, ... = 2i
    freq = base ** (-i / d)
    ang = positions.to(torch.float64)[:, None] * freq[None, :]
    c = torch.cos(ang).to(x.dtype)
    s = torch.sin(ang).to(x.dtype)
    x_even = x[..., ::2]
    x_odd = x[..., 1::2]
    out = torch.empty_like(x)
    out[..., ::2] = x_even * c - x_odd * s
    out[..., 1::2] = x_even * s + x_odd * c
    return out
