"""FlashAttention-2's way: P recomputed from the log-sum-exp, and D = rowsum(d_out * out)."""

import math

import torch


def attention_backward(q, k, v, d_out, causal=False):
    L_q, L_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if causal:
        keep = torch.ones(L_q, L_k, dtype=torch.bool, device=q.device).tril(L_k - L_q)
        scores = torch.where(keep, scores, torch.full_like(scores, float("-inf")))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    p = torch.exp(scores - lse)               # the masked scores: exp(-inf) = 0
    out = p @ v
    D = (d_out * out).sum(dim=-1, keepdim=True)   # = rowsum(dP * P)
    dv = p.transpose(-2, -1) @ d_out
    dp = d_out @ v.transpose(-2, -1)
    ds = p * (dp - D)
    dq = (ds @ k) * scale
    dk = (ds.transpose(-2, -1) @ q) * scale
    return dq, dk, dv
