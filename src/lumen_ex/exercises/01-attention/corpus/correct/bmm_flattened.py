"""Correct: flattens every leading axis into one batch axis and uses torch.bmm, then reshapes back
(reshape, not view: the inputs may be non-contiguous). Handles unbatched 2-D inputs too."""

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    *lead, L_q, d_k = q.shape
    L_k, d_v = k.shape[-2], v.shape[-1]
    q3 = q.reshape(-1, L_q, d_k)
    k3 = k.reshape(-1, L_k, d_k)
    v3 = v.reshape(-1, L_k, d_v)
    scores = torch.bmm(q3, k3.transpose(1, 2)) / math.sqrt(d_k)
    if mask is not None:
        full = mask.expand(*lead, L_q, L_k).reshape(-1, L_q, L_k)
        scores = scores.masked_fill(~full, float("-inf"))
    weights = torch.softmax(scores, dim=2)
    output = torch.bmm(weights, v3)
    return output.reshape(*lead, L_q, d_v), weights.reshape(*lead, L_q, L_k)


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    mask = torch.zeros(L_q, L_k, dtype=torch.bool, device=device)
    for i in range(L_q):
        mask[i, : max(L_k - L_q + i + 1, 0)] = True     # a negative end would count from the right
    return mask
