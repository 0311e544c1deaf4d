"""Correct: the mask is applied after the exponential, and the rows are renormalised.

exp(scores - row max), multiplied by the mask, divided by the new row sum: the same weights as
masking with -inf before a softmax. The row maximum is taken over the allowed keys only and the
exponent is clamped at 0, so a huge score on a masked key can neither overflow exp() nor make
every allowed weight underflow to 0 (softmax-then-zero-then-renormalise gives NaN there).
"""

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        keep = mask.expand_as(scores)
        row_max = torch.where(keep, scores, scores.new_tensor(float("-inf"))).amax(-1, keepdim=True)
        e = torch.exp((scores - row_max).clamp(max=0)) * keep.to(scores.dtype)
        weights = e / e.sum(dim=-1, keepdim=True)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    return torch.tril(torch.ones(L_q, L_k, device=device), diagonal=L_k - L_q).bool()
