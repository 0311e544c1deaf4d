# bug: computes in half precision with .half() "for speed" and returns that: float32 inputs get float16 results
# expect-kind: dtype
# expect-misconception: dtype-downcast
# expect-test: test_values[gqa]
import math

import torch
import torch.nn.functional as F


def split(x, n):
    """(B, n * d_head) -> (B, n, 1, d_head)"""
    B, width = x.shape
    return x.reshape(B, n, 1, width // n)


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    x_t, k_cache, v_cache = x_t.half(), k_cache.half(), v_cache.half()
    w_q, w_k, w_v, w_o = w_q.half(), w_k.half(), w_v.half(), w_o.half()
    B, n_kv, T, d_head = k_cache.shape
    q = split(x_t @ w_q, n_heads)
    k_cache = torch.cat([k_cache, split(x_t @ w_k, n_kv)], dim=2)
    v_cache = torch.cat([v_cache, split(x_t @ w_v, n_kv)], dim=2)
    k = k_cache.repeat_interleave(n_heads // n_kv, dim=1)
    v = v_cache.repeat_interleave(n_heads // n_kv, dim=1)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)
    return (weights @ v).reshape(B, -1) @ w_o, k_cache, v_cache
