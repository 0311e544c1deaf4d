# bug: fills each row of causal_mask with mask[i, :L_k - L_q + i + 1] = True: for L_q > L_k the end is negative and counts from the right, so rows that should see no key see some
# expect-kind: values
# expect-test: test_causal_mask[more-queries]

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    mask = torch.zeros(L_q, L_k, dtype=torch.bool, device=device)
    for i in range(L_q):
        mask[i, : L_k - L_q + i + 1] = True
    return mask
