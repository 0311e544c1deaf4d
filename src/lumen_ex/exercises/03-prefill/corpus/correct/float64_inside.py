"""Correct: everything computed in float64, the results cast back to the inputs' dtype."""

import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    dtype = x.dtype
    x, w_q, w_k, w_v, w_o = (t.double() for t in (x, w_q, w_k, w_v, w_o))
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv_heads = w_k.shape[1] // d_head
    q = (x @ w_q).unflatten(-1, (n_heads, d_head)).transpose(1, 2)     # (B, H, L, d_head)
    k = (x @ w_k).unflatten(-1, (n_kv_heads, d_head)).transpose(1, 2)  # (B, H_kv, L, d_head)
    v = (x @ w_v).unflatten(-1, (n_kv_heads, d_head)).transpose(1, 2)
    idx = torch.arange(n_heads, device=x.device) // (n_heads // n_kv_heads)
    scores = q @ k[:, idx].transpose(-1, -2) * (1.0 / math.sqrt(d_head))
    mask = torch.tril(torch.ones(L, L, dtype=torch.bool, device=x.device))
    w = torch.softmax(scores.masked_fill(mask.logical_not(), -math.inf), dim=-1)
    y = (w @ v[:, idx]).transpose(1, 2).flatten(2) @ w_o              # (B, L, d_model)
    return y.to(dtype), k.to(dtype), v.to(dtype)
