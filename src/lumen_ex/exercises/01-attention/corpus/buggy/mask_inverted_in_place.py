# bug: turns the caller's "may attend" mask into a "hidden" mask in place with mask.logical_not_(), then masked_fill_(mask, -inf)
# expect-kind: side-effect
# expect-misconception: inputs-modified
# expect-test: test_inputs_unchanged

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        hidden = mask.logical_not_()          # in place: the caller's mask is now inverted
        scores.masked_fill_(hidden, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    q_pos = torch.arange(L_q, device=device)[:, None] + (L_k - L_q)
    k_pos = torch.arange(L_k, device=device)[None, :]
    return k_pos <= q_pos
