"""Correct: masked scores get torch.finfo(dtype).min instead of -inf (legal: every row keeps at
least one allowed key, so exp(min - max) underflows to exactly 0)."""

import math

import torch
import torch.nn.functional as F


def scaled_dot_product_attention(q, k, v, mask=None):
    scale = 1.0 / math.sqrt(k.shape[-1])
    scores = (q * scale) @ k.mT
    if mask is not None:
        scores = scores.masked_fill(~mask.bool(), torch.finfo(scores.dtype).min)
    weights = F.softmax(scores, dim=-1)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    i = torch.arange(L_q, device=device).view(L_q, 1)
    j = torch.arange(L_k, device=device).view(1, L_k)
    return j <= i + (L_k - L_q)
