"""Correct: an explicit loop over query heads; head h reads KV head h // group."""

import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    group = n_heads // n_kv_heads
    q = x_t @ w_q                                              # (B, H * d_head)
    k_new = (x_t @ w_k).unflatten(1, (n_kv_heads, d_head))     # (B, H_kv, d_head)
    v_new = (x_t @ w_v).unflatten(1, (n_kv_heads, d_head))
    k_all = torch.cat([k_cache, k_new.unsqueeze(2)], dim=2)    # (B, H_kv, T + 1, d_head)
    v_all = torch.cat([v_cache, v_new.unsqueeze(2)], dim=2)
    heads = []
    for h in range(n_heads):
        q_h = q[:, h * d_head:(h + 1) * d_head]                # (B, d_head)
        k_h = k_all[:, h // group]                             # (B, T + 1, d_head)
        v_h = v_all[:, h // group]
        scores = torch.bmm(k_h, q_h.unsqueeze(-1)).squeeze(-1) / math.sqrt(d_head)   # (B, T + 1)
        w = torch.softmax(scores, dim=1)
        heads.append(torch.bmm(w.unsqueeze(1), v_h).squeeze(1))                      # (B, d_head)
    return torch.cat(heads, dim=1) @ w_o, k_all, v_all         # (B, d_model)
