# bug: flattens the caches' batch and head axes with k_cache.view(B * n_kv, T, d_head): raises when the caller's caches are not contiguous (e.g. sliced or transposed)
# expect-kind: exception
# expect-misconception: view-not-reshape
# expect-test: test_noncontiguous_inputs
import math

import torch
import torch.nn.functional as F


def split(x, n):
    """(B, n * d_head) -> (B, n, 1, d_head)"""
    B, width = x.shape
    return x.reshape(B, n, 1, width // n)


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv, T, d_head = k_cache.shape
    flat_k = k_cache.view(B * n_kv, T, d_head)                       # needs contiguous memory
    flat_v = v_cache.view(B * n_kv, T, d_head)
    k_new = (x_t @ w_k).reshape(B * n_kv, 1, d_head)
    v_new = (x_t @ w_v).reshape(B * n_kv, 1, d_head)
    k_cache = torch.cat([flat_k, k_new], dim=1).reshape(B, n_kv, T + 1, d_head)
    v_cache = torch.cat([flat_v, v_new], dim=1).reshape(B, n_kv, T + 1, d_head)
    q = split(x_t @ w_q, n_heads)
    k = k_cache.repeat_interleave(n_heads // n_kv, dim=1)
    v = v_cache.repeat_interleave(n_heads // n_kv, dim=1)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)
    return (weights @ v).reshape(B, -1) @ w_o, k_cache, v_cache
