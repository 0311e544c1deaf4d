# expect-note: test_dtype[float64]
"""Correct: the softmax runs in float32 and is cast back with .type_as(q) (the llama habit);
everything else stays in the inputs' dtype. Float64 inputs get float64 results carrying float32
rounding: accepted, with a note (docs/tolerances.md)."""

import math

import torch
import torch.nn.functional as F


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)                     # (B, H, 1, d_head)
    k_new = (x_t @ w_k).reshape(B, n_kv_heads, 1, d_head)              # (B, H_kv, 1, d_head)
    v_new = (x_t @ w_v).reshape(B, n_kv_heads, 1, d_head)
    k_cache = torch.cat([k_cache, k_new], dim=2)                       # (B, H_kv, T + 1, d_head)
    v_cache = torch.cat([v_cache, v_new], dim=2)
    k = k_cache.repeat_interleave(n_heads // n_kv_heads, dim=1)        # (B, H, T + 1, d_head)
    v = v_cache.repeat_interleave(n_heads // n_kv_heads, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)               # (B, H, 1, T + 1)
    weights = F.softmax(scores.float(), dim=-1).type_as(q)
    out = (weights @ v).reshape(B, n_heads * d_head)                   # (B, H * d_head)
    return out @ w_o, k_cache, v_cache                                 # (B, d_model), caches
