"""Correct: a hand-written, numerically stable softmax (max subtraction); causal mask as the
complement of the strict upper triangle."""

import math

import torch


def _softmax(x):
    shifted = x - x.amax(dim=-1, keepdim=True)   # every row has an allowed key: the max is finite
    e = torch.exp(shifted)
    return e / e.sum(dim=-1, keepdim=True)


def scaled_dot_product_attention(q, k, v, mask=None):
    d_k = q.size(-1)
    scores = torch.matmul(q, k.transpose(-1, -2)) / d_k ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask == False, -math.inf)  # noqa: E712
    weights = _softmax(scores)
    return torch.matmul(weights, v), weights


def causal_mask(L_q, L_k=None, device=None):
    if L_k is None:
        L_k = L_q
    future = torch.ones(L_q, L_k, dtype=torch.bool, device=device).triu(diagonal=L_k - L_q + 1)
    return ~future
