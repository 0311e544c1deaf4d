"""Correct: no copy of the KV heads at all; the queries are grouped under their KV head instead."""

import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    group = n_heads // n_kv_heads
    # Query heads g*group .. g*group + group - 1 all read KV head g.
    q = (x_t @ w_q).view(B, n_kv_heads, group, d_head)                # (B, H_kv, group, d_head)
    k_new = (x_t @ w_k).view(B, n_kv_heads, 1, d_head)                # (B, H_kv, 1, d_head)
    v_new = (x_t @ w_v).view(B, n_kv_heads, 1, d_head)
    k_cache = torch.cat([k_cache, k_new], dim=2)                      # (B, H_kv, T + 1, d_head)
    v_cache = torch.cat([v_cache, v_new], dim=2)
    scores = q @ k_cache.transpose(-2, -1) / math.sqrt(d_head)        # (B, H_kv, group, T + 1)
    out = scores.softmax(dim=-1) @ v_cache                            # (B, H_kv, group, d_head)
    y_t = out.reshape(B, n_heads * d_head) @ w_o                      # (B, d_model)
    return y_t, k_cache, v_cache
