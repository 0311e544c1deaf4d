"""Correct: no mask at all; a loop over the tokens, token i attending to the first i + 1 keys."""

import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, d_model = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    q = (x @ w_q).reshape(B, L, n_heads, d_head).transpose(1, 2)   # (B, H, L, d_head)
    k = (x @ w_k).reshape(B, L, n_kv, d_head).transpose(1, 2)      # (B, H_kv, L, d_head)
    v = (x @ w_v).reshape(B, L, n_kv, d_head).transpose(1, 2)
    k_all = k.repeat_interleave(n_heads // n_kv, dim=1)
    v_all = v.repeat_interleave(n_heads // n_kv, dim=1)
    rows = []
    for i in range(L):
        s = q[:, :, i:i + 1] @ k_all[:, :, :i + 1].transpose(-2, -1) / math.sqrt(d_head)   # (B, H, 1, i + 1)
        rows.append(torch.softmax(s, dim=-1) @ v_all[:, :, :i + 1])                     # (B, H, 1, d_head)
    out = torch.cat(rows, dim=2)                                   # (B, H, L, d_head)
    y = out.transpose(1, 2).reshape(B, L, n_heads * d_head) @ w_o
    return y, k, v
