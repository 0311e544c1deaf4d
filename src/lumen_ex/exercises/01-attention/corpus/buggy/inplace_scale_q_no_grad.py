# bug: scales q in place under torch.no_grad() (q.mul_) to "save memory": changes the caller's q and the gradient
# expect-kind: side-effect
# expect-misconception: inputs-modified

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    d_k = q.size(-1)
    with torch.no_grad():
        q.mul_(1 / math.sqrt(d_k))
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    q_pos = torch.arange(L_q, device=device)[:, None] + (L_k - L_q)
    k_pos = torch.arange(L_k, device=device)[None, :]
    return k_pos <= q_pos
