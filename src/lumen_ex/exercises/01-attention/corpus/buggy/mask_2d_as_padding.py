# bug: treats a 2-D mask as a key-padding mask (B, L_k) and unsqueezes it to (B, 1, 1, L_k), as BERT-style code does: an (L_q, L_k) mask shared by every batch item and head no longer broadcasts
# expect-kind: exception
# expect-test: test_mask[broadcast]

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))        # (..., L_q, L_k)
    if mask is not None:
        if mask.dim() == 2:                                          # "(B, L_k) padding": wrong here
            mask = mask[:, None, None, :]                            # (L_q, 1, 1, L_k)
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(L_k - L_q)
