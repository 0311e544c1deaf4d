"""Correct: new caches allocated one token longer, filled by slice assignment; GQA by expand + reshape."""

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    new_k = k_cache.new_empty(B, n_kv_heads, T + 1, d_head)          # (B, H_kv, T + 1, d_head)
    new_v = torch.empty(B, n_kv_heads, T + 1, d_head, dtype=v_cache.dtype, device=v_cache.device)
    new_k[:, :, :T] = k_cache
    new_v[:, :, :T] = v_cache
    new_k[:, :, T] = (x_t @ w_k).reshape(B, n_kv_heads, d_head)
    new_v[:, :, T] = (x_t @ w_v).reshape(B, n_kv_heads, d_head)
    group = n_heads // n_kv_heads
    k = new_k[:, :, None].expand(B, n_kv_heads, group, T + 1, d_head).reshape(B, n_heads, T + 1, d_head)
    v = new_v[:, :, None].expand(B, n_kv_heads, group, T + 1, d_head).reshape(B, n_heads, T + 1, d_head)
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)                   # (B, H, 1, d_head)
    attn = torch.softmax(torch.matmul(q, k.mT) / d_head ** 0.5, dim=-1)   # (B, H, 1, T + 1)
    y_t = torch.matmul(attn, v).reshape(B, -1) @ w_o                 # (B, d_model)
    return y_t, new_k, new_v
