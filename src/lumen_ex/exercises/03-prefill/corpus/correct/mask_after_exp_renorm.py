"""Correct: the mask applied after the exponential, and each row renormalised. The row maximum is
taken over the visible tokens only and the exponent clamped at 0, so a later token's huge score can
neither overflow exp() nor make every visible weight underflow to 0."""

import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    q = (x @ w_q).reshape(B, L, n_heads, d_head).transpose(1, 2)
    k = (x @ w_k).reshape(B, L, n_kv, d_head).transpose(1, 2)
    v = (x @ w_v).reshape(B, L, n_kv, d_head).transpose(1, 2)
    k2 = k.repeat_interleave(n_heads // n_kv, dim=1)
    v2 = v.repeat_interleave(n_heads // n_kv, dim=1)
    s = (q @ k2.transpose(-2, -1)) / math.sqrt(d_head)             # (B, H, L, L)
    seen = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    row_max = torch.where(seen, s, s.new_tensor(float("-inf"))).amax(dim=-1, keepdim=True)
    e = torch.exp((s - row_max).clamp(max=0)) * seen.to(s.dtype)
    w = e / e.sum(dim=-1, keepdim=True)
    return (w @ v2).transpose(1, 2).reshape(B, L, -1) @ w_o, k, v
