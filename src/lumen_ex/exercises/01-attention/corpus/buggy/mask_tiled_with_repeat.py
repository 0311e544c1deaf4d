# bug: flattens batch and heads into one axis for bmm and tiles a smaller mask with repeat(): a (B, 1, L_q, L_k) mask comes out in the order b0 b1 b0 b1 ..., not b0 b0 b0 b1 b1 b1, so batch items get each other's masks
# expect-kind: values
# expect-test: test_mask[heads]

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    *lead, L_q, d_k = q.shape
    L_k = k.shape[-2]
    q3 = q.reshape(-1, L_q, d_k)                                     # (N, L_q, d_k), N = prod(lead)
    k3 = k.reshape(-1, L_k, d_k)                                     # (N, L_k, d_k)
    v3 = v.reshape(-1, L_k, v.shape[-1])                             # (N, L_k, d_v)
    scores = torch.bmm(q3, k3.transpose(1, 2)) / math.sqrt(d_k)      # (N, L_q, L_k)
    if mask is not None:
        m = mask.expand(*mask.shape[:-2], L_q, L_k).reshape(-1, L_q, L_k)   # (n, L_q, L_k)
        m = m.repeat(scores.shape[0] // m.shape[0], 1, 1)            # (N, L_q, L_k): tiled, not grouped
        scores = scores.masked_fill(~m, float("-inf"))
    weights = torch.softmax(scores, dim=-1)                          # (N, L_q, L_k)
    out = torch.bmm(weights, v3)                                     # (N, L_q, d_v)
    return out.reshape(*lead, L_q, -1), weights.reshape(*lead, L_q, L_k)


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(L_k - L_q)
