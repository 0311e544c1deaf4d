# bug: computes the scores and softmax in float32 with .float() "for stability" and never casts back: float64 inputs get a float32 y_t
# expect-kind: dtype
# expect-misconception: float32-not-cast-back
# expect-test: test_dtype[float64]
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
    k = k_cache.repeat_interleave(n_heads // n_kv, dim=1)
    v = v_cache.repeat_interleave(n_heads // n_kv, dim=1)
    weights = torch.softmax((q @ k.transpose(-2, -1)).float() / math.sqrt(d_head), dim=-1)
    return (weights @ v.float()).reshape(B, -1) @ w_o.float(), k_cache, v_cache
