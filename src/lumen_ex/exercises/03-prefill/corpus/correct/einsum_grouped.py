"""Correct: einsum throughout, grouped-query heads read by grouping the queries (no expand)."""

import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    group = n_heads // n_kv
    q = (x @ w_q).reshape(B, L, n_kv, group, d_head)             # query head h = (h // group, h % group)
    k = (x @ w_k).reshape(B, L, n_kv, d_head)
    v = (x @ w_v).reshape(B, L, n_kv, d_head)
    scores = torch.einsum("bingd,bjnd->bngij", q, k) / math.sqrt(d_head)    # (B, H_kv, group, L, L)
    causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    w = scores.softmax(dim=-1)
    out = torch.einsum("bngij,bjnd->bingd", w, v)                 # (B, L, H_kv, group, d_head)
    y = out.reshape(B, L, n_heads * d_head) @ w_o
    return y, k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)        # (B, H_kv, L, d_head)
