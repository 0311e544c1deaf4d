# bug: keeps a (correct, all-True) bottom-right mask for the new query, filled with -1e9: float16 cannot hold -1e9 and masked_fill raises
# expect-kind: exception
# expect-misconception: fill-overflows-dtype
# expect-test: test_dtype[float16]
import math

import torch
import torch.nn.functional as F


def split(x, n):
    """(B, n * d_head) -> (B, n, 1, d_head)"""
    B, width = x.shape
    return x.reshape(B, n, 1, width // n)


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv, T, d_head = k_cache.shape
    q = split(x_t @ w_q, n_heads)
    k_cache = torch.cat([k_cache, split(x_t @ w_k, n_kv)], dim=2)
    v_cache = torch.cat([v_cache, split(x_t @ w_v, n_kv)], dim=2)
    k = k_cache.repeat_interleave(n_heads // n_kv, dim=1)
    v = v_cache.repeat_interleave(n_heads // n_kv, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)             # (B, n_heads, 1, T + 1)
    mask = torch.ones(1, T + 1, dtype=torch.bool, device=x_t.device).tril(T)  # bottom-right: all True
    scores = scores.masked_fill(~mask, -1e9)
    return (torch.softmax(scores, dim=-1) @ v).reshape(B, -1) @ w_o, k_cache, v_cache
