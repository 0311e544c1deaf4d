# bug: computes v^T @ weights^T and returns the output as (..., d_v, L_q) instead of (..., L_q, d_v)
# expect-kind: shape
# expect-misconception: axes-transposed

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    output = v.transpose(-2, -1) @ weights.transpose(-2, -1)      # (..., d_v, L_q)
    return output, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    q_pos = torch.arange(L_q, device=device)[:, None] + (L_k - L_q)
    k_pos = torch.arange(L_k, device=device)[None, :]
    return k_pos <= q_pos

