"""Correct: softmax written out by hand, with the maximum subtracted for stability."""

import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    d_head = w_q.shape[1] // n_heads
    n_kv_heads = w_k.shape[1] // d_head
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)                     # (B, H, 1, d_head)
    k_new = (x_t @ w_k).reshape(B, n_kv_heads, 1, d_head)              # (B, H_kv, 1, d_head)
    v_new = (x_t @ w_v).reshape(B, n_kv_heads, 1, d_head)
    k_all = torch.cat([k_cache, k_new], dim=2)                         # (B, H_kv, T + 1, d_head)
    v_all = torch.cat([v_cache, v_new], dim=2)
    rep = n_heads // n_kv_heads
    k = torch.repeat_interleave(k_all, rep, dim=1)                     # (B, H, T + 1, d_head)
    v = torch.repeat_interleave(v_all, rep, dim=1)
    scores = (q @ k.transpose(2, 3)) * (1.0 / math.sqrt(d_head))       # (B, H, 1, T + 1)
    scores = scores - scores.amax(dim=-1, keepdim=True)
    e = scores.exp()
    weights = e / e.sum(dim=-1, keepdim=True)                          # (B, H, 1, T + 1)
    out = (weights @ v).squeeze(2)                                     # (B, H, d_head)
    return out.flatten(1) @ w_o, k_all, v_all                          # (B, d_model)
