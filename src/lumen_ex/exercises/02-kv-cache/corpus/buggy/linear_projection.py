# bug: projects with F.linear(x_t, w_q) as for an nn.Linear weight: F.linear computes x @ W.T, and these weights are (d_model, out), meant for x @ W
# expect-kind: exception
# expect-misconception: projection-transposed
# expect-test: test_returns_three_tensors
import math

import torch
import torch.nn.functional as F


def split(x, n):
    """(B, n * d_head) -> (B, n, 1, d_head)"""
    B, width = x.shape
    return x.reshape(B, n, 1, width // n)


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv, T, d_head = k_cache.shape
    q = split(F.linear(x_t, w_q), n_heads)                           # raises: x_t @ w_q.T
    k_cache = torch.cat([k_cache, split(F.linear(x_t, w_k), n_kv)], dim=2)
    v_cache = torch.cat([v_cache, split(F.linear(x_t, w_v), n_kv)], dim=2)
    k = k_cache.repeat_interleave(n_heads // n_kv, dim=1)
    v = v_cache.repeat_interleave(n_heads // n_kv, dim=1)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)
    return F.linear((weights @ v).reshape(B, -1), w_o), k_cache, v_cache
