# bug: reads a 3-D mask as (B, L_q, L_k) and adds a heads axis with mask.unsqueeze(1), as transformers-style code does: a per-head (H, L_q, L_k) mask becomes (H, 1, L_q, L_k) and no longer lines up with (B, H, L_q, L_k)
# expect-kind: exception
# expect-test: test_mask[per-head]

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))        # (..., L_q, L_k)
    if mask is not None:
        if mask.dim() == 3 and scores.dim() == 4:                    # "(B, L_q, L_k)": wrong here
            mask = mask.unsqueeze(1)                                 # (H, 1, L_q, L_k)
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(L_k - L_q)
