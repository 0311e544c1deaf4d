"""Correct: einsum for every product, torch.cat to grow the caches, repeat_interleave for GQA."""

import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    q = torch.einsum("bm,mn->bn", x_t, w_q).reshape(B, n_heads, d_head)          # (B, H, d_head)
    k_new = torch.einsum("bm,mn->bn", x_t, w_k).reshape(B, n_kv_heads, 1, d_head)  # (B, H_kv, 1, d_head)
    v_new = torch.einsum("bm,mn->bn", x_t, w_v).reshape(B, n_kv_heads, 1, d_head)
    k_cache = torch.cat([k_cache, k_new], dim=2)                                  # (B, H_kv, T + 1, d_head)
    v_cache = torch.cat([v_cache, v_new], dim=2)
    group = n_heads // n_kv_heads
    k = k_cache.repeat_interleave(group, dim=1)                                   # (B, H, T + 1, d_head)
    v = v_cache.repeat_interleave(group, dim=1)
    scores = torch.einsum("bhd,bhtd->bht", q, k) / math.sqrt(d_head)              # (B, H, T + 1)
    weights = torch.softmax(scores, dim=-1)
    out = torch.einsum("bht,bhtd->bhd", weights, v)                               # (B, H, d_head)
    y_t = torch.einsum("bn,nm->bm", out.reshape(B, n_heads * d_head), w_o)        # (B, d_model)
    return y_t, k_cache, v_cache
