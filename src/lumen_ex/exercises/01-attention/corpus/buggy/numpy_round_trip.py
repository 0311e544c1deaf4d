# bug: does the softmax in NumPy and converts back with torch.from_numpy: no gradient
# expect-kind: exception
# expect-misconception: numpy-round-trip
# expect-test: test_runs_on_meta

import math

import numpy as np
import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    d_k = q.size(-1)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(d_k)).detach().numpy()
    if mask is not None:
        scores = np.where(mask.numpy(), scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = torch.from_numpy(e / e.sum(axis=-1, keepdims=True)).to(q.dtype)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    q_pos = torch.arange(L_q, device=device)[:, None] + (L_k - L_q)
    k_pos = torch.arange(L_k, device=device)[None, :]
    return k_pos <= q_pos
