# bug: builds the (all-True) mask for the new query with torch.ones(...) and no device=: right on the CPU, but on any other device it meets the scores and torch raises
# expect-kind: exception
# expect-misconception: new-tensor-device
# expect-test: test_runs_on_meta
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
    mask = torch.ones(1, T + 1, dtype=torch.bool)                    # on the CPU, whatever x_t is on
    scores = scores.masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v).reshape(B, -1) @ w_o, k_cache, v_cache
