# bug: projects with x_t @ w_q.T, the nn.Linear habit: these weights are (d_model, out) and already sit on the right, x @ W
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
    q = split(x_t @ w_q.T, n_heads)                                  # raises: (B, d_model) @ (out, d_model)
    k_cache = torch.cat([k_cache, split(x_t @ w_k.T, n_kv)], dim=2)
    v_cache = torch.cat([v_cache, split(x_t @ w_v.T, n_kv)], dim=2)
    k = k_cache.repeat_interleave(n_heads // n_kv, dim=1)
    v = v_cache.repeat_interleave(n_heads // n_kv, dim=1)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)
    return (weights @ v).reshape(B, -1) @ w_o.T, k_cache, v_cache
