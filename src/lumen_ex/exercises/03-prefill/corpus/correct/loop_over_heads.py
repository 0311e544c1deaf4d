"""Correct: an explicit loop over the query heads, one (L, L) attention each, masked with torch.tril."""

import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv_heads = w_k.shape[1] // d_head
    q = x @ w_q                                                    # (B, L, H * d_head)
    k = x @ w_k                                                    # (B, L, H_kv * d_head)
    v = x @ w_v
    allowed = torch.tril(torch.ones(L, L, device=x.device)) == 1  # (L, L)
    heads = []
    for h in range(n_heads):
        kv = h // (n_heads // n_kv_heads)
        q_h = q[..., h * d_head:(h + 1) * d_head]                  # (B, L, d_head)
        k_h = k[..., kv * d_head:(kv + 1) * d_head]
        v_h = v[..., kv * d_head:(kv + 1) * d_head]
        s = torch.bmm(q_h, k_h.transpose(1, 2)) / math.sqrt(d_head)   # (B, L, L)
        s = torch.where(allowed, s, torch.tensor(float("-inf"), dtype=s.dtype, device=s.device))
        heads.append(torch.bmm(torch.softmax(s, dim=2), v_h))          # (B, L, d_head)
    y = torch.cat(heads, dim=-1) @ w_o                             # (B, L, d_model)
    k_cache = torch.stack(k.split(d_head, dim=-1), dim=1)          # (B, H_kv, L, d_head)
    v_cache = torch.stack(v.split(d_head, dim=-1), dim=1)
    return y, k_cache, v_cache
