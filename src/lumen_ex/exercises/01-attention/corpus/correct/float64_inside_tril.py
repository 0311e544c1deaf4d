"""Correct: computes in float64 for accuracy, casts back to the input dtype; causal mask via tril."""

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    dtype = q.dtype
    q64, k64, v64 = q.double(), k.double(), v.double()
    scores = q64 @ k64.transpose(-2, -1) * (1.0 / math.sqrt(q.size(-1)))
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    output = weights @ v64
    return output.to(dtype), weights.to(dtype)


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(diagonal=L_k - L_q)
