# bug: takes the softmax of the raw scores and scales the weights by 1/sqrt(d_head) afterwards: each head's weights sum to 1/sqrt(d_head)
# expect-kind: values
# expect-misconception: scale-after-softmax
# expect-test: test_values[gqa]
import math

import torch
import torch.nn.functional as F


def split(x, n):
    """(B, n * d_head) -> (B, n, 1, d_head)"""
    B, width = x.shape
    return x.reshape(B, n, 1, width // n)


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv, T, d_head = k_cache.shape
    q = split(x_t @ w_q, n_heads)                                    # (B, n_heads, 1, d_head)
    k_cache = torch.cat([k_cache, split(x_t @ w_k, n_kv)], dim=2)    # (B, n_kv, T + 1, d_head)
    v_cache = torch.cat([v_cache, split(x_t @ w_v, n_kv)], dim=2)
    k = k_cache.repeat_interleave(n_heads // n_kv, dim=1)            # (B, n_heads, T + 1, d_head)
    v = v_cache.repeat_interleave(n_heads // n_kv, dim=1)
    weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1) / math.sqrt(d_head)   # (B, n_heads, 1, T + 1)
    return (weights @ v).reshape(B, -1) @ w_o, k_cache, v_cache
