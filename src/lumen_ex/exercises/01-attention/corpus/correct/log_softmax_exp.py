"""Correct: the scale folded into q and k (d_k ** -0.25 each), k transposed with swapaxes, weights
from log_softmax(...).exp(); causal mask from torch.le on broadcast key and shifted query positions."""

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    s = q.shape[-1] ** -0.25
    scores = (q * s) @ (k * s).swapaxes(-1, -2)
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), -float("inf"))
    weights = torch.log_softmax(scores, dim=-1).exp()
    output = weights @ v
    return output, weights


def causal_mask(L_q, L_k=None, device=None):
    if L_k is None:
        L_k = L_q
    offset = L_k - L_q
    k_idx = torch.arange(L_k, device=device)
    q_idx = torch.arange(L_q, device=device)
    return torch.le(k_idx.unsqueeze(0), (q_idx + offset).unsqueeze(1))
