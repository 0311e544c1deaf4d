"""Correct: torch.where against a -inf scalar tensor for the mask; causal mask from the query
positions L_k - L_q .. L_k - 1 compared with torch.ge against the key positions."""

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q.matmul(k.transpose(-2, -1)).div(math.sqrt(q.size(-1)))
    if mask is not None:
        neg_inf = torch.full((), float("-inf"), dtype=scores.dtype, device=scores.device)
        scores = torch.where(mask, scores, neg_inf)
    weights = torch.softmax(scores, -1)
    return weights.matmul(v), weights


def causal_mask(L_q, L_k=None, device=None):
    if L_k is None:
        L_k = L_q
    query_pos = torch.arange(L_k - L_q, L_k, device=device)[:, None]
    key_pos = torch.arange(L_k, device=device)[None, :]
    return torch.ge(query_pos, key_pos)
