# bug: computes the softmax in NumPy (via .cpu().double(), so every dtype converts) and comes back with torch.from_numpy: no gradient reaches q or k, and the result leaves the inputs' device
# expect-kind: exception
# expect-misconception: numpy-round-trip
# expect-test: test_runs_on_meta

import math

import numpy as np
import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).detach().cpu().double().numpy()
    if mask is not None:
        scores = np.where(mask.cpu().numpy(), scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = torch.from_numpy(e / e.sum(axis=-1, keepdims=True)).to(dtype=q.dtype, device=q.device)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    q_pos = torch.arange(L_q, device=device)[:, None] + (L_k - L_q)
    k_pos = torch.arange(L_k, device=device)[None, :]
    return k_pos <= q_pos

