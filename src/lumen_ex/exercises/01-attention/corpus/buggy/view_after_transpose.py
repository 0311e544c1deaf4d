# bug: flattens the batch axes with q.view(-1, L_q, d_k) instead of reshape: raises on non-contiguous inputs (e.g. heads split by view(B, L, H, d).transpose(1, 2))
# expect-kind: exception
# expect-misconception: view-not-reshape
# expect-test: test_noncontiguous_inputs

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    *lead, L_q, d_k = q.shape
    L_k, d_v = k.shape[-2], v.shape[-1]
    q3, k3, v3 = q.view(-1, L_q, d_k), k.view(-1, L_k, d_k), v.view(-1, L_k, d_v)
    scores = torch.bmm(q3, k3.transpose(1, 2)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask.expand(*lead, L_q, L_k).reshape(-1, L_q, L_k), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = torch.bmm(weights, v3)
    return out.view(*lead, L_q, d_v), weights.view(*lead, L_q, L_k)


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    q_pos = torch.arange(L_q, device=device)[:, None] + (L_k - L_q)
    k_pos = torch.arange(L_k, device=device)[None, :]
    return k_pos <= q_pos
