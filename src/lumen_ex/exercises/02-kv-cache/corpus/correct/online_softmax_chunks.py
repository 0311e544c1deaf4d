"""Correct: streams over the keys in chunks of 16 with a running maximum and a running sum (the
"online softmax" of FlashAttention), so no score row is ever held whole; linear in T."""

import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    group = n_heads // n_kv_heads
    q = (x_t @ w_q).reshape(B, n_kv_heads, group, d_head) / math.sqrt(d_head)   # query heads by KV head
    k_new = (x_t @ w_k).reshape(B, n_kv_heads, 1, d_head)
    v_new = (x_t @ w_v).reshape(B, n_kv_heads, 1, d_head)
    k_all = torch.cat([k_cache, k_new], dim=2)                                   # (B, H_kv, T + 1, d_head)
    v_all = torch.cat([v_cache, v_new], dim=2)
    run_max = torch.full((B, n_kv_heads, group, 1), float("-inf"), dtype=q.dtype, device=q.device)
    run_sum = torch.zeros_like(run_max)
    acc = torch.zeros_like(q)
    for start in range(0, T + 1, 16):
        k = k_all[:, :, start:start + 16]                                        # (B, H_kv, c, d_head)
        v = v_all[:, :, start:start + 16]
        s = q @ k.transpose(-2, -1)                                              # (B, H_kv, group, c)
        new_max = torch.maximum(run_max, s.amax(dim=-1, keepdim=True))
        correction = torch.exp(run_max - new_max)
        p = torch.exp(s - new_max)
        run_sum = run_sum * correction + p.sum(dim=-1, keepdim=True)
        acc = acc * correction + p @ v
        run_max = new_max
    out = (acc / run_sum).reshape(B, n_heads * d_head)                           # heads in order h = g * group + j
    return out @ w_o, k_all, v_all
