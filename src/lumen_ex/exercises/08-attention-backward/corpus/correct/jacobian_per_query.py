"""The softmax's Jacobian written out, diag(p) - p p^T, one query row at a time."""

import math

import torch


def attention_backward(q, k, v, d_out, causal=False):
    L_q, L_k = q.shape[-2], k.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * scale
    if causal:
        pos = torch.arange(L_k, device=q.device)
        for i in range(L_q):
            scores[..., i, :] = scores[..., i, :].masked_fill(pos > L_k - L_q + i, float("-inf"))
    p = torch.softmax(scores, dim=-1)
    dv = p.transpose(-2, -1) @ d_out
    dp = d_out @ v.transpose(-2, -1)
    rows = []
    for i in range(L_q):
        p_i = p[..., i, :]                                                   # (..., L_k)
        jac = torch.diag_embed(p_i) - p_i.unsqueeze(-1) * p_i.unsqueeze(-2)  # (..., L_k, L_k)
        rows.append((jac @ dp[..., i, :].unsqueeze(-1)).squeeze(-1))
    ds = torch.stack(rows, dim=-2)
    dq = ds @ k * scale
    dk = ds.transpose(-2, -1) @ q * scale
    return dq, dk, dv
