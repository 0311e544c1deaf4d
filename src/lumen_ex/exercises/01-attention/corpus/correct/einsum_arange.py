"""Correct: einsum for both products; causal mask by comparing arange positions."""

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    output = torch.einsum("...qk,...kv->...qv", weights, v)
    return output, weights


def causal_mask(L_q, L_k=None, device=None):
    if L_k is None:
        L_k = L_q
    rows = torch.arange(L_q, device=device).unsqueeze(1)
    cols = torch.arange(L_k, device=device).unsqueeze(0)
    return cols - rows <= L_k - L_q
